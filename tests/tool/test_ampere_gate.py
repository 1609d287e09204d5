"""The Ampere compile gate: recorded Triton kernels compiled for sm_80 / sm_86 on a CPU-only machine.

Synthetic cases use a look-alike vLLM tree written here; the real-data cases compile the GPU recordings (the stock
one in lab/recordings/, the composed one the gate reads as package data) from the stock 0.26.0 tree (its PyPI sdist)
and the composed tree from $VLLM_COMPOSE_TEST_TREES (skipped without it: composing needs the PR diffs, which CI
cannot fetch; see release_trees.py).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from release_trees import composed_tree

triton = pytest.importorskip("triton", reason="the compile gate needs triton (see .ci/run)")

from vllm_compose.ampere.gate import RECORDINGS  # noqa: E402
from vllm_compose.ampere.kernel_gate import KernelGateError, load_records, run_gate  # noqa: E402

STOCK_RECORDING = Path(__file__).resolve().parents[2] / "lab" / "recordings" / "stock-v0.26.0-sm80.json"
COMPOSED_RECORDING = RECORDINGS["0.26.0"]

HELPERS = """\
from vllm.triton_utils import tl, triton


@triton.jit
def _scale(x, s):
    return x * s
"""

KERNEL_MODULE = """\
import torch_is_not_needed_here  # an absent package: the gate skips the statement
from vllm.platforms import current_platform  # never resolved: no kernel uses it
from vllm.triton_utils import tl, triton
from vllm.ops.helpers import _scale

SCALE = tl.constexpr(2.0)  # Triton reads only constexpr globals


@triton.jit
def plain_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    x = tl.load(x_ptr + offs, mask=m)
    tl.store(y_ptr + offs, _scale(x, SCALE), mask=m)


@triton.jit
def fp8_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    x = tl.load(x_ptr + offs, mask=m)
    tl.store(y_ptr + offs, x.to(tl.float8e4nv), mask=m)


@triton.autotune(configs=[triton.Config({}, num_warps=4)], key=["n"])
@triton.jit
def tuned_kernel(x_ptr, n, OUT_DTYPE: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n)
    tl.store(x_ptr + offs, x.to(OUT_DTYPE).to(tl.float32), mask=offs < n)
"""


def _record(qualname, y_type, constants=((3, 128),)):
    """A record in the shape Triton's jit_cache_hook serializes (what lab/device/sitecustomize stores)."""
    signature = {"x_ptr": "*fp32", "y_ptr": y_type, "n": "i32", "BLOCK": "constexpr"}
    return {
        "module": "vllm.ops.kern",
        "qualname": qualname,
        "specialization": {
            "signature": signature,
            "constant_keys": [[k] for k, _ in constants],
            "constant_vals": [v for _, v in constants],
            "attrs_keys": [[0], [1]],
            "attrs_vals": [[["tt.divisibility", 16]], [["tt.divisibility", 16]]],
            "options": {"num_warps": 4, "num_stages": 3, "supported_fp8_dtypes": ["fp8e4nv"], "arch": "sm90"},
        },
    }


@pytest.fixture
def tree(tmp_path):
    root = tmp_path / "tree"
    (root / "vllm" / "ops").mkdir(parents=True)
    (root / "vllm" / "ops" / "helpers.py").write_text(HELPERS)
    (root / "vllm" / "ops" / "kern.py").write_text(KERNEL_MODULE)
    return root


def test_plain_kernel_with_an_imported_helper_compiles_for_sm80_and_sm86(tree):
    results = run_gate([_record("plain_kernel", "*fp32")], tree)
    assert [(r.target, r.ok) for r in results] == [(80, True), (86, True)]


def test_fp8e4nv_conversion_fails_below_sm89_and_compiles_on_sm90(tree):
    rec = _record("fp8_kernel", "*fp8e4nv")
    failed = run_gate([rec], tree)
    assert [r.ok for r in failed] == [False, False]
    assert all("fp8e4nv not supported" in r.error for r in failed)
    assert run_gate([rec], tree, targets=((90, 32),))[0].ok


def test_autotuned_kernel_and_dtype_constexpr_decode_as_triton_serializes_them(tree):
    rec = {
        "module": "vllm.ops.kern",
        "qualname": "tuned_kernel",
        "specialization": {
            "signature": {"x_ptr": "*fp32", "n": "i32", "OUT_DTYPE": "constexpr", "BLOCK": "constexpr"},
            "constant_keys": [[2], [3]],
            "constant_vals": ["bf16", 64],  # a tl.dtype constexpr is serialized by its name
            "attrs_keys": [[0]],
            "attrs_vals": [[["tt.divisibility", 16]]],
            "options": {"num_warps": 4, "num_stages": 2},
        },
    }
    assert all(r.ok for r in run_gate([rec], tree))


def test_a_kernel_missing_from_the_tree_is_a_finding_not_a_crash(tree):
    results = run_gate([_record("no_such_kernel", "*fp32")], tree)
    assert not any(r.ok for r in results)
    assert all("no_such_kernel" in r.error for r in results)


def test_unreadable_record_file_raises_a_typed_error(tmp_path):
    bad = tmp_path / "k.json"
    bad.write_text("{")
    with pytest.raises(KernelGateError, match="cannot read"):
        load_records(bad)


def test_recorded_files_separate_the_trees_on_the_fused_indexer_q_kernel():
    composed = load_records(COMPOSED_RECORDING)
    stock = load_records(STOCK_RECORDING)
    fused = "_fused_indexer_q_rope_quant_kernel"
    assert fused not in {k["qualname"] for k in composed}  # the compose gates it off below sm_89
    assert [k["qualname"] for k in stock] == [fused]
    names = {k["qualname"] for k in composed}
    assert {"_sparse_mla_kernel_split", "_fp8_paged_mqa_logits_kernel", "fused_moe_kernel"} <= names
    assert all({"signature", "constant_keys", "options"} <= set(k["specialization"]) for k in composed)


@pytest.mark.sdist
def test_stock_0_26_0_fails_the_gate_on_fp8e4nv(release_v0260):
    results = run_gate(load_records(STOCK_RECORDING), release_v0260)
    assert results and not any(r.ok for r in results)
    assert all("fp8e4nv not supported in this architecture" in r.error for r in results)


def test_composed_sparse_attention_kernels_pass_the_gate():
    # the sparse-attention and indexer kernels: the Ampere-specific part of the record (the full record is
    # compiled by `python lab/recordings/gate.py`, about 30 s with a warm Triton cache, minutes without)
    wanted = ("triton_mla_sparse_kernel", "mqa_logits_triton", "sparse_utils", "backends.mla.indexer")
    tree = composed_tree("v0.26.0", "vllm/v1/attention/ops/triton_mla_sparse_kernel.py")
    records = [k for k in load_records(COMPOSED_RECORDING) if k["module"].endswith(wanted)]
    assert records
    results = run_gate(records, tree)
    assert [r for r in results if not r.ok] == []


def test_gate_results_serialize_for_the_report(tree):
    (result,) = run_gate([_record("plain_kernel", "*fp32")], tree, targets=((80, 32),))
    assert json.loads(json.dumps(result.to_dict())) == {
        "module": "vllm.ops.kern",
        "qualname": "plain_kernel",
        "target": "sm_80",
        "ok": True,
        "error": None,
    }


def test_kernel_gate_command_names_each_failing_kernel_and_target(tmp_path, capsys):
    """`vllm-compose kernel-gate RECORDS TREE` (and lab/recordings/gate.py, which runs it): a tree without the recorded
    kernel's module fails that kernel for both targets, exit 1, and `--json` keeps one result per record x target."""
    from vllm_compose.cli import main

    out = tmp_path / "gate.json"
    rc = main(["kernel-gate", str(STOCK_RECORDING), str(tmp_path), "--json", str(out)])
    text = capsys.readouterr().out
    assert rc == 1
    assert "FAIL _fused_indexer_q_rope_quant_kernel sm_80 x1:" in text and "0 passed, 2 failed" in text
    assert [(r["qualname"], r["ok"]) for r in json.loads(out.read_text())] == [
        ("_fused_indexer_q_rope_quant_kernel", False)
    ] * 2
