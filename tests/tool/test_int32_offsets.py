"""int32 pointer offsets of Triton kernels (ampere/int32_offsets.py): from a kernel's source and its launch's
argument types, the offsets that multiply 32-bit values. Hand-written kernels in the shapes the DSA kernels use;
their source is only parsed, never compiled."""

from __future__ import annotations

import ast
import textwrap

from vllm_compose.ampere.gate import _dsa_signatures, int32_offset_lines
from vllm_compose.ampere.int32_offsets import scan_kernel, scan_tree
from vllm_compose.trees import DirTree

PAGED = """
import triton
import triton.language as tl

@triton.jit
def _helper(k_ptr, idx_ptr, stride_tok, n):
    idx = tl.load(idx_ptr + tl.arange(0, 16))
    WIDEN
    return tl.load(k_ptr + idx[:, None] * stride_tok + tl.arange(0, 64)[None, :])

@triton.jit
def paged(q_ptr, kv_ptr, bt_ptr, idx_ptr, out_ptr, stride_q, stride_block, stride_tok, n, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    block = tl.load(bt_ptr + pid)
    CAST
    kv = tl.load(kv_ptr + block * stride_block + tl.arange(0, BLOCK))
    q = tl.load(q_ptr + pid * BLOCK + tl.arange(0, BLOCK))
    acc = _helper(kv_ptr, idx_ptr, stride_tok, n)
    offs = pid * stride_q
    tl.store(out_ptr + offs, q)
"""

SIG = {
    "q_ptr": "*bf16",
    "kv_ptr": "*fp8e4nv",
    "bt_ptr": "*i32",
    "idx_ptr": "*i32",
    "out_ptr": "*bf16",
    "stride_q": "i32",
    "stride_block": "i32",
    "stride_tok": "i32",
    "n": "i32",
    "BLOCK": "constexpr",
}


def _scan(source: str, sig=SIG):
    module = ast.parse(textwrap.dedent(source))
    fn = next(n for n in module.body if isinstance(n, ast.FunctionDef) and n.name == "paged")
    return {(o.pointer, o.arguments) for o in scan_kernel(fn, sig, "m.paged", module)}


def test_products_of_32_bit_arguments_and_loads_are_int32_offsets():
    found = _scan(PAGED.replace("CAST", "").replace("WIDEN", ""))
    assert found == {
        ("kv_ptr", ("load(bt_ptr)", "stride_block")),  # a block id from an int32 table times a stride
        # inside the helper the kernel calls, with its values: named by the kernel's own pointer argument
        ("kv_ptr", ("load(idx_ptr)", "stride_tok")),
        ("out_ptr", ("stride_q",)),  # program id times a stride
    }


def test_a_constexpr_factor_is_not_an_argument_offset():
    assert all(p != "q_ptr" for p, _a in _scan(PAGED.replace("CAST", "").replace("WIDEN", "")))


def test_widening_to_int64_removes_the_offset():
    found = _scan(PAGED.replace("CAST", "block = block.to(tl.int64)").replace("WIDEN", "idx = idx.to(tl.int64)"))
    assert found == {("out_ptr", ("stride_q",))}


def test_an_i64_argument_makes_the_product_64_bit():
    sig = {**SIG, "stride_q": "i64", "stride_block": "i64", "stride_tok": "i64"}
    assert _scan(PAGED.replace("CAST", "").replace("WIDEN", ""), sig) == set()


def test_scan_tree_finds_the_kernel_by_module_and_reports_lines(tmp_path):
    (tmp_path / "vllm" / "ops").mkdir(parents=True)
    (tmp_path / "vllm" / "ops" / "k.py").write_text(PAGED.replace("CAST", "").replace("WIDEN", ""))
    found = scan_tree(DirTree(tmp_path), {"vllm.ops.k.paged": SIG, "vllm.ops.gone.x": {}})
    by_kernel = {(o.kernel, o.pointer): o for o in found}
    direct = by_kernel["vllm.ops.k:paged", "kv_ptr"]
    assert direct.line == 16 and direct.expression == "block * stride_block"
    assert by_kernel["vllm.ops.k:paged > _helper", "kv_ptr"].line == 9


def test_signatures_keep_i32_when_any_launch_passes_it():
    sigs: dict = {}
    recs = [
        {"module": "vllm.v1.attention.ops.mqa_logits_triton", "qualname": "k", "specialization": {"signature": s}}
        for s in ({"stride": "i64"}, {"stride": "i32"}, {"stride": "i64"})
    ]
    recs.append({"module": "vllm.v1.worker.gpu.sample", "qualname": "s", "specialization": {"signature": {"a": "i32"}}})
    _dsa_signatures(recs, sigs)
    assert sigs == {"vllm.v1.attention.ops.mqa_logits_triton.k": {"stride": "i32"}}


def test_the_report_lines_group_by_kernel(tmp_path):
    (tmp_path / "vllm").mkdir()
    (tmp_path / "vllm" / "k.py").write_text(PAGED.replace("CAST", "").replace("WIDEN", ""))
    lines = int32_offset_lines(scan_tree(DirTree(tmp_path), {"vllm.k.paged": SIG}))
    assert lines[0].endswith(": 3")
    assert lines[1] == "  paged: kv_ptr (load(bt_ptr) x stride_block), out_ptr (stride_q)"
    assert lines[2] == "  paged > _helper: kv_ptr (load(idx_ptr) x stride_tok)"
    assert int32_offset_lines([]) == ["int32 offsets (not judged by this gate): none on the DSA path"]
