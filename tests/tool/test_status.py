"""The status table: one column per kind of evidence, so "composed" never stands alone for "runs"."""

from __future__ import annotations

from types import SimpleNamespace

from vllm_compose.ampere.gate import AmpereGateReport, KernelVerdict
from vllm_compose.checks import CheckReport, CheckResult
from vllm_compose.gpu_evidence import ReleaseEvidence, RunConfig
from vllm_compose.report import render_status
from vllm_compose.results import BuildSetup, CheckStatus
from vllm_compose.status import ReleaseStatus


def _compose(tag: str, status: str = "composed", message: str = ""):
    entry = SimpleNamespace(id="pr1", status="applied", hunks=[], verdict_counts=lambda: {"exact": 1})
    checks = CheckReport(None, [CheckResult("compile", CheckStatus.PASS)])
    setup = BuildSetup("c0ffee", "build", f"{tag[1:]}+compose.1.gabcdef0")
    return SimpleNamespace(
        tag=tag,
        status=status,
        entries=[entry],
        final_checks=checks,
        message=message,
        branch=f"compose-1-{tag}",
        build_setup=setup,
    )


def _gate(*failing: str) -> AmpereGateReport:
    kernels = [KernelVerdict("vllm.k", "_ok_kernel", 80, 3, 0, None)]
    kernels += [KernelVerdict("vllm.k", name, 80, 2, 2, "fp8e4nv not supported") for name in failing]
    return AmpereGateReport("t", kernels=kernels, derived={"sm_80": 3 + 2 * len(failing)})


def test_every_row_says_audit_checks_gate_with_stock_and_gpu_runs():
    gpu = ReleaseEvidence("0.26.0", as_predicted={RunConfig(2, 2)}, capabilities={"8.0": 4}, sessions={"s"}, runs=4)
    table = render_status(
        [
            ReleaseStatus(_compose("v0.26.0"), gate=_gate(), stock_gate=_gate("_fused_q_kernel"), gpu=gpu),
            ReleaseStatus(_compose("v0.33.0"), gate="triton is not installed", stock_gate="triton is not installed"),
            ReleaseStatus(_compose("v0.34.0", "conflict", "stopped at fix-x"), gate=None, stock_gate=_gate("_k")),
        ]
    )
    head, _, *rows = table.splitlines()
    assert head.startswith("| tag | composed | audit | checks of the composed tree | Ampere gate")
    assert "| v0.26.0 | yes | clean | compile: pass |" in rows[0]
    assert (
        "pass (1 kernel x arch, 3 specializations; impl answers 0 methods); stock: FAIL (1: _fused_q_kernel)" in rows[0]
    )
    assert "as predicted: PP2+MTP2 (4 runs, sm_80 paths forced in 4; 1 result folder)" in rows[0]
    assert "not run (triton is not installed); stock: not run (triton is not installed) | none |" in rows[1]
    assert "| v0.34.0 | **conflict** | — |" in rows[2] and "not run; stock: FAIL (1: _k)" in rows[2]
    # the branch and the version, written by the tool: the labels in the docs come from here
    assert rows[0].endswith("| `compose-1-v0.26.0`; `0.26.0+compose.1.gabcdef0` |")
    assert rows[2].endswith("| — |")
    assert "- v0.34.0: stopped at fix-x" in table


def test_a_gate_whose_impl_lacks_a_method_the_path_calls_fails_and_names_it():
    from vllm_compose.ampere.impl_contract import BackendContract, ImplAnswer, ImplCall, Verdict

    gate = _gate()
    call = ImplCall("record_logical_topk_ready", "vllm/models/deepseek_v32/attention.py:520", None)
    ok = ImplAnswer("forward_mqa", Verdict.OK, [ImplCall("forward_mqa", "a.py:1", None)], "x.py:Impl")
    gate.contracts = [
        BackendContract("TRITON_MLA_SPARSE", "x.py:Impl", [ok, ImplAnswer(call.name, Verdict.MISSING, [call], None)])
    ]
    assert not gate.ok
    table = render_status([ReleaseStatus(_compose("v0.33.0"), gate=gate, stock_gate=_gate())])
    assert "FAIL (1: impl.record_logical_topk_ready() missing); stock: pass" in table


def test_dsa_file_hashes_fingerprint_the_branch_as_recall_runs_fingerprint_an_install(tmp_path):
    import hashlib
    import subprocess

    from vllm_compose.proof.fingerprint import DSA_MODULES
    from vllm_compose.status import dsa_file_hashes

    repo = tmp_path / "vllm"
    ops = repo / "vllm" / "v1" / "attention" / "ops"
    ops.mkdir(parents=True)
    text = b"# the paged logits\n"
    (ops / "mqa_logits_triton.py").write_bytes(text)
    git = lambda *a: subprocess.run(["git", "-C", str(repo), *a], check=True, capture_output=True)  # noqa: E731
    git("init", "-q", "-b", "compose-x")
    git("add", "-A")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "c")
    got = dsa_file_hashes(repo, "compose-x")
    assert set(got) == set(DSA_MODULES)
    assert got["vllm.v1.attention.ops.mqa_logits_triton"] == hashlib.sha256(text).hexdigest()[:16]
    assert [m for m, h in got.items() if h == "not found"] == [
        m for m in DSA_MODULES if m != "vllm.v1.attention.ops.mqa_logits_triton"
    ]
