"""The Ampere gate's reach as part of its verdict (coverage_record) and the environment it runs in (gate_env).

The coverage cases build reports by hand: a run that derives fewer launches than the record fails and says which
driver and why that may be, one that derives more fails and says the record needs updating, an unrecorded release
passes saying its counts were not checked. The polluted-environment cases derive a look-alike tree in this
interpreter, once clean and once with a serving environment's plugin loaded (it makes Triton's autotuner launch one
config, as vLLM's VLLM_TRITON_FORCE_FIRST_CONFIG does once a vLLM is imported into the process): the polluted run
fails the check. The environment cases build real venvs in the test's cache: the pins-free one in seconds, the
gate's own (torch 2.13.0, Triton 3.6.0; about 35 s from a local wheel) once in the real cache, where the worker
then gates the stock v0.26.0 sdist tree with that plugin on PYTHONPATH (set to drop every launch; the
environment's interpreter started without -I does load it) and VLLM_* set, and derives the recorded counts.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from vllm_compose.ampere import coverage_record
from vllm_compose.ampere.gate import AmpereGateReport, KernelVerdict, render
from vllm_compose.ampere.gate_env import (
    GATE_REQUIREMENTS,
    MARKER,
    GateEnvironment,
    GateEnvironmentError,
    _pins,
    ensure_environment,
    env_key,
)
from vllm_compose.ampere.gate_worker import check_environment
from vllm_compose.ampere.kernel_launches import DriverOutcome
from vllm_compose.errors import ComposeError

TOOLS = _pins(GATE_REQUIREMENTS)
REPO = Path(__file__).resolve().parents[2]


def _report(launches: dict[str, int], specs: int | None = None) -> AmpereGateReport:
    """A passing report of one kernel on sm_80 whose drivers made `launches`."""
    n = sum(launches.values()) if specs is None else specs
    return AmpereGateReport(
        "look-alike",
        kernels=[KernelVerdict("vllm.ops.kern", "tuned_kernel", 80, n, 0, None)],
        drivers={"sm_80": [DriverOutcome(d, "ran", launches=k) for d, k in launches.items()]},
        derived={"sm_80": n},
    )


def _record_of(report: AmpereGateReport, tag="v0.33.0", kind="composed") -> dict:
    return coverage_record.with_counts(coverage_record.load_record(Path("/nonexistent")), report, tag, kind, TOOLS)


RECORDED = {"mqa_logits_triton (PR #38476 indexer logits)": 36, "TRITON_MLA_SPARSE (PR #38476 backend)": 249}


def test_counts_as_recorded_pass_and_say_so():
    record = _record_of(_report(RECORDED))
    report = _report(RECORDED)
    report.coverage_check = coverage_record.check(report, "v0.33.0", "composed", TOOLS, record)
    assert report.ok and report.coverage_check.state == "as recorded"
    assert "coverage as recorded for v0.33.0 (composed) (torch 2.13.0 / triton 3.6.0)" in render(report)


def test_fewer_launches_than_recorded_fail_naming_the_driver_and_the_environment():
    record = _record_of(_report(RECORDED))
    polluted = _report({**RECORDED, "mqa_logits_triton (PR #38476 indexer logits)": 8})
    polluted.coverage_check = coverage_record.check(polluted, "v0.33.0", "composed", TOOLS, record)
    assert polluted.compiles and not polluted.ok
    text = render(polluted)
    assert "sm_80: driver 'mqa_logits_triton (PR #38476 indexer logits)' derived 8 launches, the record says 36" in text
    assert "a vLLM or another release's .so files importable beside the tree" in text
    assert text.splitlines()[-1].startswith("FAIL: look-alike") and "coverage BELOW the record" in text
    data = polluted.to_json()
    assert data["ok"] is False and data["coverage_check"]["state"] == "BELOW the record"
    driver = "mqa_logits_triton (PR #38476 indexer logits)"
    diff = {"target": "sm_80", "what": "driver", "name": driver, "recorded": 36, "derived": 8}
    assert diff in data["coverage_check"]["differences"]


def test_more_launches_than_recorded_fail_saying_the_record_needs_updating():
    record = _record_of(_report(RECORDED))
    grown = _report({**RECORDED, "fused_moe (bf16 experts)": 32})
    grown.coverage_check = coverage_record.check(grown, "v0.33.0", "composed", TOOLS, record)
    assert not grown.ok and grown.coverage_check.state == "ABOVE the record"
    text = render(grown)
    assert "driver 'fused_moe (bf16 experts)' derived 32 launches, the record says 0" in text
    assert "the record needs updating after review: vllm-compose ampere-gate --onto v0.33.0 --record-coverage" in text


def test_a_driver_that_no_longer_runs_counts_as_zero_launches():
    record = _record_of(_report(RECORDED))
    report = _report(RECORDED)
    report.drivers["sm_80"][1] = DriverOutcome("TRITON_MLA_SPARSE (PR #38476 backend)", "not on path", reason="x")
    check = coverage_record.check(report, "v0.33.0", "composed", TOOLS, record)
    assert [d.line() for d in check.fewer] == [
        "sm_80: driver 'TRITON_MLA_SPARSE (PR #38476 backend)' derived 0 launches, the record says 249"
    ]


def test_an_unrecorded_release_passes_saying_its_counts_are_unchecked():
    record = _record_of(_report(RECORDED), tag="v0.33.0")
    report = _report(RECORDED)
    report.coverage_check = coverage_record.check(report, "v0.34.0", "composed", TOOLS, record)
    assert report.ok and not report.coverage_check.recorded
    assert "has no counts for v0.34.0 (composed); the counts above are not checked" in render(report)
    stock = coverage_record.check(report, "v0.33.0", "stock", TOOLS, record)
    assert stock.state == "unrecorded" and "--onto v0.33.0 --stock --record-coverage" in "\n".join(stock.lines())


def test_a_record_made_with_other_pins_fails_every_check_until_rerecorded():
    record = _record_of(_report(RECORDED))
    check = coverage_record.check(_report(RECORDED), "v0.33.0", "composed", {**TOOLS, "triton": "3.7.0"}, record)
    assert not check.ok and check.state == "record made with other tools"
    with pytest.raises(ComposeError, match="re-record all of v0.33.0"):
        coverage_record.with_counts(record, _report(RECORDED), "v0.30.0", "composed", {**TOOLS, "triton": "3.7.0"})


def test_the_record_round_trips_and_a_damaged_one_is_a_clear_error(tmp_path):
    path = tmp_path / "record.json"
    coverage_record.write_record(_record_of(_report(RECORDED)), path)
    again = coverage_record.load_record(path)
    assert again["releases"]["v0.33.0"]["composed"]["sm_80"]["drivers"] == RECORDED
    path.write_text("{")
    with pytest.raises(ComposeError, match="cannot read the Ampere gate's coverage record"):
        coverage_record.load_record(path)
    path.write_text(json.dumps({"format": 99, "releases": {}}))
    with pytest.raises(ComposeError, match="format 99"):
        coverage_record.load_record(path)


def test_the_shipped_record_holds_every_release_for_the_gates_pins():
    record = coverage_record.load_record()
    assert record["tools"] == TOOLS
    for tag in ("v0.26.0", "v0.29.0", "v0.30.0", "v0.33.0"):
        for kind in coverage_record.KINDS:
            entry = record["releases"][tag][kind]
            assert set(entry) == {"sm_80", "sm_86"} and all(entry[t]["specializations"] > 0 for t in entry)


def test_the_test_extra_pins_the_gates_torch_and_triton():
    """The in-process tests stand in for the gate's environment only while they hold its pins."""
    text = (REPO / "pyproject.toml").read_text()
    assert all(f'"{req}"' in text for req in GATE_REQUIREMENTS)
    assert "\ngate = " not in text  # no user-facing extra that installs them into the serving environment


# --- a polluted interpreter ----------------------------------------------------------------------------------------

#: a serving environment's plugin: once imported, Triton's autotuner launches only its first config (what vLLM's
#: `force_first_config` installs under VLLM_TRITON_FORCE_FIRST_CONFIG). As `sitecustomize` on PYTHONPATH, every
#: interpreter that honours PYTHONPATH loads it at start-up.
POLLUTER = """\
import os

from triton.runtime.autotuner import Autotuner

_real_run = Autotuner.run


def _first_config_only(self, *args, **kwargs):
    self.configs = self.configs[:1]
    return _real_run(self, *args, **kwargs)


Autotuner.run = _first_config_only
if os.environ.get("POLLUTER_DROPS_LAUNCHES") == "1":  # the worker case's: every launch lost, whatever the tree
    from triton.runtime.jit import JITFunction

    JITFunction.run = lambda self, *args, **kwargs: None
os.environ["POLLUTER_LOADED"] = "1"
"""

REGISTRY = """\
_MODELS = {"GlmMoeDsaForCausalLM": ("deepseek_v2", "GlmMoeDsaForCausalLM")}
"""

TUNED = """\
import torch

from vllm.triton_utils import tl, triton


@triton.autotune(configs=[triton.Config({"BLOCK": 64}, num_warps=2), triton.Config({"BLOCK": 128}, num_warps=4)],
                 key=["n"])
@triton.jit
def tuned_kernel(x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(x_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) * 2, mask=offs < n)


def double(x):
    tuned_kernel[(1,)](x, x.numel())
"""


@pytest.fixture
def polluter(tmp_path):
    folder = tmp_path / "serving-site"
    folder.mkdir()
    (folder / "sitecustomize.py").write_text(POLLUTER)
    (folder / "vllm").mkdir()  # another release's vLLM, importable
    (folder / "vllm" / "__init__.py").write_text("__version__ = '0.29.0'\n")
    return folder


def _lookalike_gate(tree: Path) -> AmpereGateReport:
    """The look-alike's gate in this interpreter: its one driver, its counts as a report."""
    pytest.importorskip("triton", reason="deriving launches needs triton (the test extra)")
    torch = pytest.importorskip("torch", reason="deriving launches runs the wrappers on CPU tensors")
    from vllm_compose.ampere.kernel_launches import Driver, derive_launches

    def run(rel):
        rel.call(rel.value("vllm.ops.kern", "double"), {"x": torch.zeros(100)}, what="double")

    d = derive_launches(tree, (8, 0), drivers=(Driver("look-alike autotuned", run, "vllm.ops.kern"),))
    kernels = {(r["module"], r["qualname"]) for r in d.records}
    return AmpereGateReport(
        "look-alike",
        kernels=[KernelVerdict(m, q, 80, len(d.records), 0, None) for m, q in sorted(kernels)],
        drivers={"sm_80": d.outcomes},
        derived={"sm_80": len(d.records)},
    )


def test_a_polluted_interpreter_derives_fewer_launches_and_the_gate_fails(tmp_path, polluter, monkeypatch):
    tree = tmp_path / "tree"
    (tree / "vllm" / "ops").mkdir(parents=True)
    (tree / "vllm" / "model_executor" / "models").mkdir(parents=True)
    (tree / "vllm" / "model_executor" / "models" / "registry.py").write_text(REGISTRY)
    (tree / "vllm" / "ops" / "kern.py").write_text(TUNED)
    clean = _lookalike_gate(tree)
    assert clean.derived == {"sm_80": 2}  # one launch per autotune config
    record = _record_of(clean, tag="v9.9.9")

    from triton.runtime.autotuner import Autotuner

    monkeypatch.setattr(Autotuner, "run", Autotuner.run)  # restored after the test
    monkeypatch.syspath_prepend(str(polluter))
    monkeypatch.delitem(sys.modules, "sitecustomize", raising=False)
    __import__("sitecustomize")  # what start-up does in an interpreter whose PYTHONPATH holds it
    polluted = _lookalike_gate(tree)
    polluted.coverage_check = coverage_record.check(polluted, "v9.9.9", "composed", TOOLS, record)
    assert polluted.derived == {"sm_80": 1}
    assert polluted.compiles and not polluted.ok  # everything derived compiles: only the reach shows the loss
    text = render(polluted)
    # clean: each config benchmarked, then the winner launched (3 launches, 2 specializations); polluted: one
    assert "sm_80: driver 'look-alike autotuned' derived 1 launches, the record says 3" in text
    assert "sm_80: kernel 'vllm.ops.kern.tuned_kernel' derived 1 specializations, the record says 2" in text
    assert "FAIL: look-alike" in text.splitlines()[-1]


def test_the_worker_refuses_an_environment_where_vllm_is_importable_or_the_pins_differ(polluter, monkeypatch):
    monkeypatch.syspath_prepend(str(polluter))
    with pytest.raises(GateEnvironmentError, match="a vLLM is importable in the gate's environment"):
        check_environment(list(GATE_REQUIREMENTS))
    monkeypatch.undo()
    pytest.importorskip("triton")
    with pytest.raises(GateEnvironmentError, match=r"holds triton 3\.6\.0, not the pinned 9\.9\.9"):
        check_environment(["triton==9.9.9"])


# --- the managed environment ---------------------------------------------------------------------------------------


def test_environments_are_keyed_by_pins_and_interpreter():
    base = env_key(GATE_REQUIREMENTS, "cpython-3.11-linux-x86_64")
    assert base == env_key(tuple(reversed(GATE_REQUIREMENTS)), "cpython-3.11-linux-x86_64")
    assert base != env_key(("torch==2.13.0", "triton==3.7.0"), "cpython-3.11-linux-x86_64")
    assert base != env_key(GATE_REQUIREMENTS, "cpython-3.12-linux-x86_64")


def test_an_environment_is_built_once_and_moved_into_place_whole(tmp_path):
    env = GateEnvironment(tmp_path / "envs" / "gate-empty", ())
    assert not env.ready
    assert ensure_environment(env) is env and env.ready
    assert env.marker()["requirements"] == [] and env.python.exists()
    made = (env.path / MARKER).stat().st_mtime_ns
    ensure_environment(env)  # reused, not rebuilt
    assert (env.path / MARKER).stat().st_mtime_ns == made
    assert [p.name for p in env.path.parent.iterdir()] == ["gate-empty"]  # no temporary folder left


def test_a_failed_build_leaves_nothing_behind_and_says_how_to_proceed(tmp_path):
    env = GateEnvironment(tmp_path / "envs" / "gate-bad", ("this is not a requirement!",))
    with pytest.raises(GateEnvironmentError) as err:
        ensure_environment(env)
    assert "could not be created: pip install this is not a requirement! failed" in err.value.message
    assert "PIP_INDEX_URL" in err.value.hint and "--no-ampere-gate" in err.value.hint
    assert list((tmp_path / "envs").iterdir()) == []


@pytest.fixture(scope="session")
def gate_env():
    """The gate's own environment in the real cache (built once per machine, as `ampere-gate` builds it)."""
    from release_trees import REAL_CACHE_ROOT

    from vllm_compose.ampere.gate_env import environment_for

    return ensure_environment(environment_for(REAL_CACHE_ROOT))


@pytest.mark.sdist
@pytest.mark.slow
def test_the_worker_derives_the_recorded_counts_whatever_the_calling_environment_holds(
    gate_env, release_v0260, polluter, monkeypatch, tmp_path
):
    import subprocess

    from vllm_compose.ampere.gate import _report
    from vllm_compose.ampere.gate_env import run_in_environment

    monkeypatch.setenv("PYTHONPATH", str(polluter))
    monkeypatch.setenv("POLLUTER_DROPS_LAUNCHES", "1")
    monkeypatch.setenv("VLLM_TRITON_FORCE_FIRST_CONFIG", "1")
    monkeypatch.setenv("VLLM_BATCH_INVARIANT", "1")
    # the control: the environment's interpreter started without -I loads the polluter (and would derive nothing)
    probe = [str(gate_env.python), "-c", "import os; print(os.environ.get('POLLUTER_LOADED'))"]
    assert subprocess.run(probe, capture_output=True, text=True, check=True).stdout.strip() == "1"
    result = run_in_environment(gate_env, release_v0260, "stock v0.26.0", ((8, 0), (8, 6)))
    assert result["environment"]["versions"]["triton"] == "3.6.0"
    assert result["environment"]["python"].startswith(str(gate_env.path))
    report = _report("stock v0.26.0", result, release_v0260)
    report.coverage_check = coverage_record.check(report, "v0.26.0", "stock", TOOLS, coverage_record.load_record())
    assert report.coverage_check.state == "as recorded", "\n".join(report.coverage_check.lines())
    assert not report.compiles  # stock v0.26.0 fails on fp8e4nv below sm_89: the gate's finding, unchanged


@pytest.mark.slow
def test_the_workers_errors_come_back_typed_and_an_untyped_one_as_what_it_is(gate_env, tmp_path):
    from vllm_compose.ampere.gate_env import run_in_environment
    from vllm_compose.ampere.kernel_launches import DriverError

    registry = tmp_path / "tree" / "vllm" / "model_executor" / "models" / "registry.py"
    registry.parent.mkdir(parents=True)
    registry.write_text("_MODELS = {}\n")
    with pytest.raises(DriverError, match="no DSA architecture") as err:
        run_in_environment(gate_env, tmp_path / "tree", "no-dsa", ((8, 0),))
    assert err.value.hint == "pass the folder that holds vllm/ of a vLLM release tree"
    registry.write_text("_MODELS = {\n")  # the release's own file does not parse: not the environment's fault
    with pytest.raises(ComposeError, match="derivation of broken failed: SyntaxError") as err:
        run_in_environment(gate_env, tmp_path / "tree", "broken", ((8, 0),))
    assert not isinstance(err.value, GateEnvironmentError) and "--tree DIR" in err.value.hint
