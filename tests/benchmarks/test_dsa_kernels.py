"""benchmarks/dsa_kernels.py without a GPU: its byte and FLOP formulas on small cases counted by hand, the recorded
H200 rows against the formulas, the shape tables the projection reads, and the guarded sections' rows for kernels
that cannot run (a missing native object, a shape that raises)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

import dsa_kernels as dk  # noqa: E402

RESULTS = ROOT / "lab/results/2026-12-02"


def test_paged_logits_bytes_by_hand():
    # 2 requests x 64 keys: K 128 fp8 bytes + 4-byte scale each (16,896); 2 x 3 rows x 64 fp32 logits (1,536)
    assert dk.paged_logits_bytes(2, 64, 3) == 18_432


def test_sparse_mla_decode_bytes_by_hand():
    # one row: 2,048 latents of 576 bf16 plus an int32 index (2,367,488); 64 heads x (576 in + 512 out) bf16 (139,264)
    assert dk.sparse_mla_decode_bytes(1, 64) == 2_506_752


def test_prefill_counts_by_hand():
    # 2 causal rows, the last of 5 keys: row 0 sees 4 keys, row 1 sees 5
    assert dk.prefill_visible_keys(2, 5) == 9
    # K 5 x 132, q + weights 2 rows x 1 head x (128 + 4), 9 fp32 logits
    assert dk.prefill_logits_bytes(2, 5, heads=1) == 660 + 264 + 36
    assert dk.prefill_logits_flops(2, 5, heads=1) == 2 * 128 * 9
    with pytest.raises(ValueError, match="rows must be in 1..keys"):
        dk.prefill_visible_keys(6, 5)


@pytest.mark.parametrize("build", ["sm80", "sm90"])
def test_the_recorded_rows_carry_the_formulas_bytes(build):
    rows = json.loads((RESULTS / f"dsa_kernels_{build}.json").read_text())["rows"]
    checked = 0
    for r in rows:
        words = r["shape"].split()
        if r["kernel"] == "indexer paged logits":
            want = dk.paged_logits_bytes(int(words[words.index("B") + 1]), int(words[words.index("ctx") + 1]),
                                         int(words[words.index("next_n") + 1]))  # fmt: skip
        else:
            want = dk.sparse_mla_decode_bytes(int(words[-1]), int(words[words.index("top-k") - 1].rstrip("h")))
        assert r["bytes"] == want, r["shape"]
        checked += 1
    assert checked == 28


def test_the_tables_time_the_rows_the_projection_needs_for_mtp_3():
    # projection.py's MTP 3 scenario at batch 1 reads next_n 4 paged logits and 4-row (1 x 4) sparse-MLA rows
    assert (1, 4) in dk.MTP_DECODE and 4 in dk.MLA_MTP_ROWS
    assert ("GLM-5 TP1", 64) in dk.MLA_MTP and dk.INDEXER == [("GLM-5 / DSv3.2 indexer", 32)]
    assert all(next_n in (3, 4) for _, next_n in dk.MTP_DECODE)


def test_a_shape_that_raises_becomes_its_row():
    rows = []

    def boom():
        raise RuntimeError("Triton: out of resource: shared memory\nmore detail")

    dk._guarded(rows.append, "k", "s", 10, boom)
    assert rows == [
        {"kernel": "k", "shape": "s", "ms": None, "bytes": 10,
         "status": "not available: RuntimeError: Triton: out of resource: shared memory"}
    ]  # fmt: skip
    dk._guarded(rows.append, "k", "s2", 10, lambda: 0.5)
    assert rows[-1] == {"kernel": "k", "shape": "s2", "ms": 0.5, "bytes": 10}


def test_native_kernels_missing_from_the_folder_give_a_row_each_saying_why(tmp_path):
    import torch  # the CPU wheel of the test environment (.[test]); no tensor is made

    rows = []
    dk.time_native(rows.append, None, torch, tmp_path)
    flash = [r for r in rows if r["kernel"] == "FlashMLA sparse (native)"]
    deep = [r for r in rows if r["kernel"] == "DeepGEMM paged logits (native)"]
    assert len(flash) == len(dk.MLA) * len(dk.MLA_ROWS)
    assert len(deep) == len(dk.CONTEXTS) * len(dk.DECODE + dk.MTP_DECODE)
    assert all(r["ms"] is None for r in rows)
    assert flash[0]["status"] == f"not available: FileNotFoundError: no {tmp_path / '_flashmla_C.abi3.so'} (the " \
        "staged payload carries only its lock's '# so:' objects)"  # fmt: skip
    assert deep[0]["status"].startswith(f"not available: FileNotFoundError: no {tmp_path / 'third_party/deep_gemm'}")


# --- the sections on the release's own code: top-k, the sparse-MLA prefill, the indexer's query path ----------------


def test_topk_bytes_by_hand():
    # 2 requests x next_n 3 over 10 keys: rows see 8, 9 and 10 keys (54 fp32 logits, 216 B); 6 rows x 4 int32 (96 B)
    assert dk.decode_topk_bytes(2, 10, 3, topk=4) == 216 + 96
    # next_n 1: every row sees the whole context
    assert dk.decode_topk_bytes(3, 10, 1, topk=4) == 3 * 10 * 4 + 3 * 4 * 4
    # 2 causal rows, the last of 5 keys: 4 + 5 visible logits (36 B), 2 rows x 3 int32 (24 B)
    assert dk.prefill_topk_bytes(2, 5, topk=3) == 60


def test_sparse_mla_flops_by_hand():
    # one row, one head, one key: a 576-wide dot product and a 512-wide accumulation, 2 FLOPs a multiply-add
    assert dk.sparse_mla_flops(1, 1, topk=1) == 2 * (576 + 512)
    assert dk.sparse_mla_flops(3, 2, topk=4) == 3 * 2 * 4 * 2_176


def test_indexer_q_bytes_by_hand():
    # one token, one head x 128: q 256 B, key 256 B, head weight 2 B read; q fp8 128 B, weight fp32 4 B, the key's
    # cache entry 128 + 4 B written
    assert dk.indexer_q_bytes(1, heads=1) == 514 + 264
    # 2 tokens x 32 heads: (8,192 + 256 + 64) read + (4,096 + 128 + 132) written, each
    assert dk.indexer_q_bytes(2, heads=32) == 2 * (8_512 + 4_356)


def test_sections_are_picked_by_name_in_the_runs_order():
    assert dk.parse_sections("indexer-q, topk") == ("topk", "indexer-q")
    assert dk.parse_sections(",".join(dk.SECTIONS)) == dk.SECTIONS
    with pytest.raises(ValueError, match=r"unknown section\(s\) top-k; the sections are paged-logits, mla-decode"):
        dk.parse_sections("top-k,mtp")
    with pytest.raises(ValueError, match="names no section"):
        dk.parse_sections(" , ")


def test_an_unknown_section_is_a_usage_error_before_anything_runs(tmp_path, capsys, monkeypatch):
    out = tmp_path / "r.json"
    monkeypatch.setattr(
        sys, "argv", ["dsa_kernels.py", "--tree", str(tmp_path), "--sections", "tpk", "--out", str(out)]
    )
    with pytest.raises(SystemExit) as exc:
        dk.main()
    assert exc.value.code == 2 and "unknown section(s) tpk" in capsys.readouterr().err and not out.exists()
    monkeypatch.setattr(sys, "argv", ["x", "--tree", str(tmp_path), "--mla-only", "--sections", "topk", "--out", "o"])
    with pytest.raises(SystemExit):
        dk.main()
    assert "--mla-only and --sections: give one" in capsys.readouterr().err


def test_a_chosen_section_that_cannot_start_is_one_row_and_the_others_do_not_run(tmp_path):
    # no release tree to import vllm from: the top-k section fails as a whole; no other section was chosen
    rows = []
    dk.extra_sections({}, rows.append, tmp_path, chosen=("topk",), release=tmp_path)
    assert rows == [
        {"kernel": "indexer top-k", "shape": "(section)", "ms": None, "bytes": 0,
         "status": f"not available: FileNotFoundError: {tmp_path} holds no vllm package (give a whole release tree, "
                   "e.g. /tmp/vc/composed)"}
    ]  # fmt: skip


@pytest.fixture
def restore_vllm_modules(monkeypatch):
    """sys.modules' vllm entries and the kept release modules as they were, after the test."""
    saved = {n: m for n, m in sys.modules.items() if n == "vllm" or n.startswith("vllm.")}
    monkeypatch.setattr(dk, "_RELEASE_MODULES", {})
    yield
    for name in [n for n in sys.modules if n == "vllm" or n.startswith("vllm.")]:
        del sys.modules[name]
    sys.modules.update(saved)


def test_the_release_vllm_replaces_the_shim_for_the_block_and_is_imported_once(tmp_path, restore_vllm_modules):
    import types

    (tmp_path / "vllm").mkdir()
    (tmp_path / "vllm" / "__init__.py").write_text("import builtins\nbuiltins.__dict__.setdefault('_vc_imports', [])"
                                                   ".append(1)\nWHO = 'release'\n")  # fmt: skip
    (tmp_path / "vllm" / "ops.py").write_text("WHO = 'release ops'\n")
    for name in [n for n in sys.modules if n == "vllm" or n.startswith("vllm.")]:
        del sys.modules[name]
    shim = types.ModuleType("vllm")
    shim.WHO = "shim"
    sys.modules["vllm"] = shim
    import builtins

    builtins.__dict__.pop("_vc_imports", None)
    try:
        with dk.release_vllm(tmp_path):
            import vllm
            from vllm import ops

            assert (vllm.WHO, ops.WHO) == ("release", "release ops")
        assert sys.modules["vllm"] is shim and "vllm.ops" not in sys.modules
        assert str(tmp_path) not in sys.path
        with dk.release_vllm(tmp_path):
            import vllm

            assert vllm.WHO == "release" and sys.modules["vllm.ops"] is ops
        assert builtins._vc_imports == [1]  # the second block reused the first block's modules
        assert sys.modules["vllm"] is shim
    finally:
        builtins.__dict__.pop("_vc_imports", None)
    with pytest.raises(FileNotFoundError, match="no release tree to import vllm from"):
        with dk.release_vllm(None):
            pass


# The release's own source (vLLM 0.26.0's sdist; the compose leaves the top-k calls and Indexer.forward's unfused
# branch as they are): what the arguments the benchmark builds are checked against.
INDEXER_FILE = "vllm/model_executor/layers/sparse_attn_indexer.py"
BINDINGS_FILE = "csrc/libtorch_stable/torch_bindings.cpp"
CUSTOM_OPS_FILE = "vllm/_custom_ops.py"
DSV2_FILE = "vllm/model_executor/models/deepseek_v2.py"


@pytest.fixture(scope="module")
def release_source(tmp_path_factory):
    from release_trees import release_files

    return release_files(tmp_path_factory, "v0.26.0", [INDEXER_FILE, BINDINGS_FILE, CUSTOM_OPS_FILE, DSV2_FILE])


def _call_args(source: str, op: str) -> list[str]:
    """The argument texts of the one call of `...<op>(...)` in `source`."""
    import ast

    calls = [
        n for n in ast.walk(ast.parse(source))
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == op
    ]  # fmt: skip
    assert len(calls) == 1, (op, len(calls))
    return [ast.unparse(a) for a in calls[0].args]


def _schema(bindings: str, op: str) -> list[tuple[str, str]]:
    """(type, name) of each parameter of `op`'s schema in the release's torch_bindings.cpp (its adjacent string
    literals joined)."""
    import re

    joined = re.sub(r'"\s*"', "", bindings)
    (params,) = re.findall(rf'"{op}\((.*?)\) -> \(\)"', joined)
    return [tuple(p.strip().rsplit(" ", 1)) for p in params.split(",")]


def _matches(args: tuple, schema: list[tuple[str, str]]) -> bool:
    import torch

    kinds = {"Tensor": torch.Tensor, "Tensor!": torch.Tensor, "int": int}
    return len(args) == len(schema) and all(isinstance(a, kinds[t]) for a, (t, _) in zip(args, schema, strict=True))


def test_decode_topk_args_are_what_the_indexer_hands_persistent_topk_on_sm80(release_source):
    import ast

    import torch

    indexer = release_source[INDEXER_FILE]
    # on sm_80 at top-k 2048 the cooperative top-k is off (it needs sm_90) and the persistent one runs
    tree = ast.parse(indexer)
    conds = {ast.unparse(n.targets[0]): ast.unparse(n.value) for n in ast.walk(tree) if isinstance(n, ast.Assign)}
    assert "current_platform.has_device_capability(90)" in conds["use_cooperative_topk"]
    assert conds["use_persistent_topk"] == "current_platform.is_cuda() and topk_tokens in (512, 1024, 2048)"
    assert eval(conds["RADIX_TOPK_WORKSPACE_SIZE"]) == dk.TOPK_WORKSPACE_BYTES  # noqa: S307 - "1024 * 1024"
    assert _call_args(indexer, "persistent_topk") == [
        "logits", "seq_lens", "topk_indices", "topk_workspace", "topk_tokens", "logits.shape[1]"
    ]  # fmt: skip
    schema = _schema(release_source[BINDINGS_FILE], "persistent_topk")
    assert [n for _, n in schema] == ["logits", "lengths", "output", "workspace", "k", "max_seq_len"]

    logits = torch.zeros(2 * 3, 10)
    args = dk.decode_topk_args(torch, logits, batch=2, ctx=10, next_n=3, topk=4)
    assert _matches(args, schema)
    got_logits, lens, out, workspace, k, width = args
    assert got_logits is logits and (k, width) == (4, 10)
    # topk.cu's checks: int32 contiguous lengths, one a row; an int32 [rows, k] output; a uint8 workspace
    assert lens.dtype == torch.int32 and lens.is_contiguous() and lens.tolist() == [[8, 9, 10], [8, 9, 10]]
    assert out.dtype == torch.int32 and tuple(out.shape) == (6, 4)
    assert workspace.dtype == torch.uint8 and workspace.numel() == 1024 * 1024


def test_prefill_topk_args_are_what_the_indexer_hands_top_k_per_row_prefill(release_source):
    import ast

    import torch

    assert _call_args(release_source[INDEXER_FILE], "top_k_per_row_prefill") == [
        "logits", "cu_seqlen_ks", "cu_seqlen_ke", "topk_indices", "num_rows", "logits.stride(0)", "logits.stride(1)",
        "topk_tokens",
    ]  # fmt: skip
    wrapper = next(
        n for n in ast.parse(release_source[CUSTOM_OPS_FILE]).body
        if isinstance(n, ast.FunctionDef) and n.name == "top_k_per_row_prefill"
    )  # fmt: skip
    params = [a.arg for a in wrapper.args.args]
    schema = _schema(release_source[BINDINGS_FILE], "top_k_per_row_prefill")
    assert len(params) == len(schema) == 8

    logits = torch.zeros(2, 5)
    args = dk.prefill_topk_args(torch, logits, keys=5, topk=3)
    assert _matches(args, schema)
    got_logits, starts, ends, out, rows, s0, s1, k = args
    assert got_logits is logits and (rows, s0, s1, k) == (2, 5, 1, 3)
    # sampler.cu reads the row bounds and writes the indices as int
    assert starts.dtype == ends.dtype == out.dtype == torch.int32
    assert starts.tolist() == [0, 0] and ends.tolist() == [4, 5] and tuple(out.shape) == (2, 3)


def test_the_indexer_stand_in_self_has_what_the_releases_forward_reads(release_source):
    import ast

    indexer = next(
        n for n in ast.parse(release_source[DSV2_FILE]).body if isinstance(n, ast.ClassDef) and n.name == "Indexer"
    )
    methods = {n.name: n for n in indexer.body if isinstance(n, ast.FunctionDef)}
    read = {
        n.attr for n in ast.walk(methods["forward"])
        if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id == "self"
    }  # fmt: skip
    me = dk.indexer_forward_self("q", "kw", "norm", "op", heads=32)
    assert read <= set(vars(me)), read - set(vars(me))
    assert me.use_fused_indexer_q is False and me.wq_b(None) == ("q", None) and me.wk_weights_proj(0) == ("kw", None)
    # the constants __init__ sets, as the release sets them (head_dim 128, rope 64, "ue8m0", 128-wide quant blocks)
    consts = {}
    for n in ast.walk(methods["__init__"]):
        if isinstance(n, ast.Assign) and isinstance(n.targets[0], ast.Attribute) and n.targets[0].attr in read:
            try:
                consts[n.targets[0].attr] = ast.literal_eval(n.value)
            except ValueError:
                continue
    assert consts == {"scale_fmt": "ue8m0", "quant_block_size": 128}
    assert (me.scale_fmt, me.quant_block_size, me.head_dim, me.rope_dim) == ("ue8m0", 128, 128, 64)
    assert me.softmax_scale == 128**-0.5 and me.n_head_scale == 32**-0.5


#: the sparse-MLA prefill section on the composed kernel in Triton's interpreter at a small shape (20 heads, 3 rows,
#: top-k 64 over 300 slots), timed once by the wall clock; the kernel's output is kept for the test
PREFILL_SCRIPT = """
import json, sys
from pathlib import Path
sys.path[:0] = [sys.argv[3] + "/tests", sys.argv[3] + "/benchmarks", sys.argv[3] + "/lab/device"]
import dsa_kernels_interpreted as di
import dsa_kernels as dk
from kernel_offsets import install_vllm_shim
import torch
di._widen_bf16_dot_operands(); di._scalar_loop_bounds()
mods = install_vllm_shim(Path(sys.argv[1]))
di._first_config_only(mods["triton_mla_sparse_kernel"])
mods["triton_mla_sparse_kernel"].num_compute_units = lambda index=0: 132
dk.MLA_PREFILL, dk.MLA_PREFILL_ROWS, dk.TOPK, dk.MLA_SLOTS = [("t", 20)], [3], 64, 300
rows, outs = [], []
def bench(fn):
    return dk.wall_ms(lambda: outs.append(fn()))
dk.time_mla_prefill(mods, rows.append, bench, torch, "cpu")
rows[0]["out"] = {"shape": list(outs[0].shape), "finite": bool(torch.isfinite(outs[0].float()).all()),
                  "max_abs": float(outs[0].float().abs().max())}
Path(sys.argv[2]).write_text(json.dumps(rows))
"""


def test_the_sparse_mla_prefill_section_runs_the_kernel_and_writes_its_row(tmp_path):
    import os
    import subprocess

    pytest.importorskip("triton", reason="the kernel runs in Triton's interpreter")
    from dsa_kernels_interpreted import kernel_tree

    from vllm_compose.patchfile import parse_patch

    # the composed kernel: the pre-image of the candidate's whole-file hunk (tests/lab/test_candidate_sparse_mla.py
    # checks it against the compose's file where a composed tree is at hand)
    candidate = ROOT / "series/patches/0044-perf-triton-mla-sparse-one-gather-tile.patch"
    ((hunk,),) = [fp.hunks for fp in parse_patch(candidate.read_bytes(), candidate.name).files]
    tree = kernel_tree(tmp_path / "tree", triton_mla_sparse_kernel="\n".join(hunk.pre_image) + "\n")
    out = tmp_path / "rows.json"
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    cmd = [sys.executable, "-c", PREFILL_SCRIPT, str(tree), str(out), str(ROOT)]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (row,) = json.loads(out.read_text())
    assert (row["kernel"], row["shape"]) == ("sparse MLA prefill", "t 20h top-k 64 rows 3")
    assert row["bytes"] == 3 * 64 * (576 * 2 + 4) + 3 * 20 * (576 + 512) * 2
    assert row["flops"] == 2 * 3 * 20 * 64 * 1_088
    assert row["ms"] > 0 and row["share_of_flops_peak"] == row["flops"] / (row["ms"] * 1e-3) / 989e12
    assert row["out"]["shape"] == [3, 20, 512] and row["out"]["finite"] and row["out"]["max_abs"] > 0.01


# --- the sparse-MLA candidate's sweep (lab/candidates/): policies, launches, rows ----------------------------------


def test_the_sparse_mla_rows_cover_the_issues_shapes():
    # issue 40's targets: batch 1, 8, 32 and 64 rows at GLM-5 TP1 (64 heads) and DeepSeek-V3.2 (128 heads), top-k 2048
    # first, so that a run cut short has them
    assert dk.MLA[:2] == [("GLM-5 TP1", 64), ("DSv3.2 TP1", 128)]
    assert dk.MLA_ROWS == [1, 8, 32, 64] and dk.TOPK == 2048


def test_policies_are_every_combination_of_the_values_given():
    options = {"mla_max_block_h": "32,64", "mla_max_splits": "", "mla_min_split": "32", "mla_split_fill": "0.75,1.5"}
    got = dk.mla_policies(options)
    assert list(got) == ["bh32/min32/fill0.75", "bh32/min32/fill1.5", "bh64/min32/fill0.75", "bh64/min32/fill1.5"]
    assert got["bh64/min32/fill1.5"] == {"_MAX_BLOCK_H": 64, "_MIN_TOPK_PER_SPLIT": 32, "_SPLIT_MIN_FILL": 1.5}
    assert dk.mla_policies({}) == {} and dk.mla_policies({"mla_max_splits": " , "}) == {}
    with pytest.raises(ValueError, match=r"--mla-max-splits '16,x': 'x' is not an integer"):
        dk.mla_policies({"mla_max_splits": "16,x"})
    with pytest.raises(ValueError, match=r"--mla-split-fill '0': '0' is not positive"):
        dk.mla_policies({"mla_split_fill": "0"})


class _Kernel:
    """A stand-in kernel module with the candidate's rules: heads a program the power of two at or above the heads
    (16-64), splits doubling until rows x groups x splits reach `_SPLIT_MIN_FILL` x SMs, at most `_MAX_KV_SPLITS`."""

    _MAX_BLOCK_H, _MAX_KV_SPLITS, _SPLIT_MIN_FILL = 64, 16, 0.75

    def _block_h(self, heads):
        return max(16, min(self._MAX_BLOCK_H, 1 << (heads - 1).bit_length()))

    def _choose_num_kv_splits(self, rows, groups, topk, sms):
        s = 1
        while s < self._MAX_KV_SPLITS and rows * groups * s < self._SPLIT_MIN_FILL * sms:
            s *= 2
        return s


def test_the_plan_times_each_distinct_launch_once_and_restores_the_module():
    mod = _Kernel()
    policies = dk.mla_policies({"mla_max_block_h": "16,32,64", "mla_max_splits": "16,64"})
    plan = dk.mla_plan(mod, policies, rows=1, heads=64, topk=2048, sm_count=132)
    # 16 heads a program: 4 groups, 32 splits cover 99 SMs (16 at most: 16); 32: 2 groups; 64: 1 group
    assert [(launch["block_h"], launch["splits"], chosen) for launch, chosen in plan] == [
        (16, 16, ["bh16/kv16"]), (16, 32, ["bh16/kv64"]), (32, 16, ["bh32/kv16"]), (32, 64, ["bh32/kv64"]),
        (64, 16, ["bh64/kv16"]), (64, 64, ["bh64/kv64"]),
    ]  # fmt: skip
    assert plan[-1][0] == {"block_h": 64, "head_groups": 1, "splits": 64, "programs": 64}
    assert (mod._MAX_BLOCK_H, mod._MAX_KV_SPLITS) == (64, 16)
    # 8 heads: every heads-per-program value is 16, so three policies share each launch
    plan = dk.mla_plan(mod, policies, rows=1, heads=8, topk=2048, sm_count=132)
    assert [(launch["splits"], len(chosen)) for launch, chosen in plan] == [(16, 3), (64, 3)]
    # a module without the policies' attributes (PR #38476's: `_BLOCK_H`, its own split rule) runs as it is
    old = type("Composed", (), {"_BLOCK_H": 16, "_choose_num_kv_splits": lambda self, *a: 4})()
    assert dk.mla_plan(old, policies, 8, 8, 2048, 132) == [
        ({"block_h": 16, "head_groups": 1, "splits": 4, "programs": 32}, [])
    ]


def test_split_scratch_bytes_by_hand():
    # one row, 64 heads, 16 splits: 513 fp32 a head and split, written and read back (2 x 64 x 16 x 2,052 B)
    assert dk.mla_split_scratch_bytes(1, 64, 16) == 4_202_496
    assert dk.mla_split_scratch_bytes(64, 64, 1) == 0


def test_a_bad_sweep_value_is_a_usage_error_before_anything_runs(tmp_path, capsys, monkeypatch):
    out = tmp_path / "r.json"
    argv = ["dsa_kernels.py", "--tree", str(tmp_path), "--mla-only", "--mla-min-split", "32,abc", "--out", str(out)]
    monkeypatch.setattr(sys, "argv", argv)
    with pytest.raises(SystemExit) as exc:
        dk.main()
    assert exc.value.code == 2 and "--mla-min-split '32,abc': 'abc' is not an integer" in capsys.readouterr().err
    assert not out.exists()


def test_the_roofline_is_the_gpus_own_by_name():
    assert dk.peak_gbs("NVIDIA H200") == 4800.0
    assert dk.peak_gbs("NVIDIA H100 80GB HBM3") == 3350.0
    assert dk.peak_gbs("NVIDIA A100-SXM4-80GB") == 2039.0
    assert dk.peak_gbs("NVIDIA GeForce RTX 3090") == 936.0
    with pytest.raises(ValueError, match=r"no HBM bandwidth known for 'NVIDIA CMP 170HX'.*give --peak-gbs"):
        dk.peak_gbs("NVIDIA CMP 170HX")


class _FakeGpu:
    """A stand-in for torch's CUDA graph API: work called inside a capture is recorded, a replay runs it and moves a
    simulated clock by each piece's cost; events read that clock."""

    def __init__(self):
        self.clock, self.capturing, self.eager_calls = 0.0, None, 0
        gpu = self

        class Graph:
            def __init__(self):
                self.work = []

            def replay(self):
                gpu.clock += sum(self.work)

        class Capture:
            def __init__(self, graph):
                self.graph = graph

            def __enter__(self):
                gpu.capturing = self.graph

            def __exit__(self, *exc):
                gpu.capturing = None

        class Event:
            def __init__(self, enable_timing=False):
                self.at = None

            def record(self):
                self.at = gpu.clock

            def synchronize(self):
                pass

            def elapsed_time(self, end):
                return end.at - self.at

        class Buffer:
            def zero_(self):
                gpu.work(2.0)  # the L2 flush: 2 ms

        self.cuda = type("cuda", (), {"CUDAGraph": Graph, "graph": Capture, "Event": Event,
                                      "synchronize": staticmethod(lambda: None)})  # fmt: skip
        self.empty = lambda *a, **k: Buffer()
        self.int32 = "int32"

    def work(self, ms: float) -> None:
        if self.capturing is None:
            self.eager_calls += 1
        else:
            self.capturing.work.append(ms)


def test_the_graph_timer_takes_the_flush_out_and_tunes_outside_the_capture():
    gpu = _FakeGpu()
    assert dk.graph_ms(lambda: gpu.work(0.25), gpu, calls=20, replays=3) == pytest.approx(0.25)
    # one eager call first (compile, autotune), none of the timed ones
    assert gpu.eager_calls == 1
    # a slower kernel reads slower by exactly its cost
    assert dk.graph_ms(lambda: gpu.work(1.5), gpu, calls=7, replays=1) == pytest.approx(1.5)
