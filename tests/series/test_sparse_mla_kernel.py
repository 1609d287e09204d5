"""Series entry perf-triton-mla-sparse-one-gather-tile (0044): the sparse-MLA decode kernel as that entry writes it,
run in Triton's interpreter on a CPU and held against `vllm_compose.proof.dsa_oracle` and against the kernel it
replaces.

CI has no composed tree, so both kernels come from the entry's own patch: its single hunk covers
triton_mla_sparse_kernel.py from line 1 to its end, so its pre-image is the composed module (PR #38476's kernel with
fix-dsa-triton-kernels-int64-offsets) and its post-image the entry's, each runnable alone.
tests/dsa_kernels_interpreted.py runs them with `--sparse-heads` in a subprocess (TRITON_INTERPRET=1, the
interpreter's bf16 `tl.dot` and loop-bound corrections on): 4 tokens at 8, 20 and 64 heads, top-k 64 with -1
padding, a repeated slot, the last slot, a token with no valid index and one with a single valid index, single-pass,
2 and 4 splits and the wrapper's own choice, and the planted fault (every index one slot on) that must fail. The
entry's default is 16 heads a program (20 heads: two programs, 12 heads of the second masked; 64: four); the same
cases run again with `_MAX_BLOCK_H` set to 64 in the module's text (one program of 32 heads at 20, of 64 at 64),
the wider programs the benchmark can still time. `--sparse-many-splits` runs the real top-k (2,048) split 64 ways (32
indices a split) and as the split policy chooses with its run-time attributes set to 64 splits at most and 32 indices
a split at least, on the same kinds of hard rows (marked slow: about 30 s).

The split policy's answers are asked in this process (loading the module runs no kernel).

Interpreter times say nothing about GPU speed: benchmarks/dsa_kernels.py times the kernel on a GPU
(lab/candidates/mla_gpu_run.sh sweeps its policies).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from sparse_mla_checks import (
    assert_as_close_as,
    assert_padding_rows,
    assert_paths_match_oracle,
    assert_shifted_indices_fail,
    reference,
)

torch = pytest.importorskip("torch", reason="the kernel checks need torch (see .ci/run)")
pytest.importorskip("triton", reason="the kernel checks need triton (see .ci/run)")

from vllm_compose.proof import dsa_oracle as o  # noqa: E402
from vllm_compose.series import load_series  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
ENTRY = "perf-triton-mla-sparse-one-gather-tile"
sys.path.insert(0, str(REPO / "lab" / "candidates"))
import candidate_patch  # noqa: E402  (lab/candidates/candidate_patch.py: a whole-file patch's two images)

SPARSE_FILE = "vllm/v1/attention/ops/triton_mla_sparse_kernel.py"
HEADS = (8, 20, 64)
PATHS = ("splits_1", "splits_2", "splits_4", "splits_auto")
TREES = ("after", "after64")


def entry_patch() -> Path:
    return load_series(REPO / "series").entry(ENTRY).file


def module_texts() -> tuple[str, str]:
    """(pre-image, post-image) of the entry's one hunk: the composed module and the entry's module."""
    path, before, after = candidate_patch.images(entry_patch())  # each image a whole module: the hunk spans the file
    assert path == SPARSE_FILE
    for text in (before, after):
        assert "def triton_mla_sparse_attention(" in text and text.rstrip().endswith("return out")
    return before, after


def wide(text: str) -> str:
    """The entry's module with up to 64 heads a program (`_MAX_BLOCK_H`) instead of its default, 16."""
    assert text.count("\n_MAX_BLOCK_H = 16\n") == 1
    return text.replace("\n_MAX_BLOCK_H = 16\n", "\n_MAX_BLOCK_H = 64\n")


def tree_of(text: str, root: Path) -> Path:
    """A tree whose triton_mla_sparse_kernel.py is `text` (and an empty indexer module, which the loader wants and
    `--sparse-heads` never calls)."""
    from dsa_kernels_interpreted import kernel_tree

    return kernel_tree(root, triton_mla_sparse_kernel=text)


def interpret(tree: Path, out: Path) -> dict:
    from dsa_kernels_interpreted import run_interpreted

    return run_interpreted(tree, out, "--sparse-heads", ",".join(map(str, HEADS)))


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict:
    """{"before": the composed kernel's run, "after": the entry's, "after64": the entry's at up to 64 heads a
    program}, on the same seeded inputs."""
    tmp = tmp_path_factory.mktemp("sparse-mla-0044")
    before, after = module_texts()
    return {
        name: interpret(tree_of(text, tmp / name), tmp / f"{name}.pt")
        for name, text in (("before", before), ("after", after), ("after64", wide(after)))
    }


@pytest.mark.parametrize("tree", TREES)
@pytest.mark.parametrize("heads", HEADS)
def test_every_path_of_the_entry_matches_the_oracle(runs, tree, heads):
    assert_paths_match_oracle(runs[tree]["sparse_by_heads"][heads], PATHS, heads)


@pytest.mark.parametrize("tree", TREES)
@pytest.mark.parametrize("heads", HEADS)
def test_padding_a_row_with_no_valid_index_and_a_single_index(runs, tree, heads):
    assert_padding_rows(runs[tree]["sparse_by_heads"][heads], PATHS, heads)


@pytest.mark.parametrize("tree", TREES)
@pytest.mark.parametrize("heads", HEADS)
def test_the_entry_is_as_close_as_the_kernel_it_replaces(runs, tree, heads):
    # measured 3.9e-3 at most between the two kernels, and the same largest error against the oracle
    assert_as_close_as(runs[tree]["sparse_by_heads"][heads], runs["before"]["sparse_by_heads"][heads], PATHS)


@pytest.mark.parametrize("tree", TREES)
@pytest.mark.parametrize("heads", HEADS)
def test_shifted_indices_fail(runs, tree, heads):
    assert_shifted_indices_fail(runs[tree]["sparse_by_heads"][heads])


def test_heads_per_program_and_split_choices(runs):
    after, wide64, before = runs["after"], runs["after64"], runs["before"]
    assert after["block_h"] == dict.fromkeys((1, 8, 16, 20, 64, 100, 128), 16)
    assert wide64["block_h"] == {1: 16, 8: 16, 16: 16, 20: 32, 64: 64, 100: 64, 128: 64}
    # (tokens, head groups, top-k, SMs) -> splits: the smallest power of two covering 1.5x the SMs, at most 16, at
    # least 128 indices a split
    assert after["splits"] == {
        (64, 1, 2048, 132): 4,  # 256 programs >= 198
        (64, 2, 2048, 132): 2,
        (32, 1, 2048, 132): 8,
        (8, 1, 2048, 132): 16,  # would want 32: at most 16
        (1, 1, 2048, 132): 16,
        (64, 1, 2048, 108): 4,  # an A100: 256 >= 162
        (1, 1, 256, 132): 2,  # 128 indices a split at least
        (200, 1, 2048, 132): 1,
    }
    assert wide64["splits"] == after["splits"]  # the policy does not depend on the heads a program
    # the composed kernel splits only below a quarter of the SMs (its programs hold 16 heads)
    assert before["splits"][(64, 1, 2048, 132)] == 1 and before["splits"][(1, 1, 2048, 132)] == 16


@pytest.fixture
def entry_module(tmp_path, no_lasting_stand_in):
    """The entry's module, loaded in this process (its kernels are not run)."""
    from kernel_offsets import install_vllm_shim

    _, after = module_texts()
    return install_vllm_shim(tree_of(after, tmp_path / "after"))["triton_mla_sparse_kernel"]


#: (policy attributes, {(tokens, head groups, top-k, SMs): splits}) the policy must answer
POLICY_CASES = [
    # the defaults: what `test_heads_per_program_and_split_choices` asks through the interpreter run, and the
    # warm-up's candidates
    # GLM-5 TP1 (4 groups of 16 heads) at 1, 8 and 64 rows; DeepSeek-V3.2 TP1 (8 groups) at 8 rows
    ({}, {(1, 1, 2048, 132): 16, (64, 1, 2048, 132): 4, (1, 4, 2048, 132): 16, (8, 4, 2048, 132): 8,
          (64, 4, 2048, 132): 1, (8, 8, 2048, 132): 4}),
    # 64 splits at most, 32 indices a split at least: one token is 64 programs of 32 indices (2048 / 64); two head
    # groups need 64 too (128 programs, short of 198); 8 tokens stop at 32 (256 programs), 3 on an A100 at 64 (192)
    (
        {"_MAX_KV_SPLITS": 64, "_MIN_TOPK_PER_SPLIT": 32},
        {(1, 1, 2048, 132): 64, (1, 2, 2048, 132): 64, (8, 1, 2048, 132): 32, (3, 1, 2048, 108): 64,
         (1, 1, 256, 132): 8, (200, 1, 2048, 132): 1},
    ),
    # the least indices a split binds before the most splits
    ({"_MAX_KV_SPLITS": 64, "_MIN_TOPK_PER_SPLIT": 128}, {(1, 1, 2048, 132): 16}),
    ({"_MAX_KV_SPLITS": 32, "_MIN_TOPK_PER_SPLIT": 32}, {(1, 1, 2048, 132): 32}),
    # values that are not powers of two round down: 2048 // 48 = 42 -> 32 splits (64 indices each, >= 48); at most
    # 48 -> 32
    ({"_MAX_KV_SPLITS": 64, "_MIN_TOPK_PER_SPLIT": 48}, {(1, 1, 2048, 132): 32}),
    ({"_MAX_KV_SPLITS": 48, "_MIN_TOPK_PER_SPLIT": 32}, {(1, 1, 2048, 132): 32}),
    # a sparser grid (PR #38476's fill was a quarter): 64 tokens split until 99 of 132 x 0.75 SMs are covered
    ({"_SPLIT_MIN_FILL": 0.75}, {(64, 1, 2048, 132): 2, (128, 1, 2048, 132): 1, (200, 1, 2048, 132): 1}),
]  # fmt: skip


def test_the_split_policy_is_read_at_each_call(entry_module):
    mod = entry_module
    assert (mod._MAX_KV_SPLITS, mod._MIN_TOPK_PER_SPLIT, mod._SPLIT_MIN_FILL) == (16, 128, 1.5)
    assert mod._MAX_BLOCK_H == 16
    # the warm-up pre-compiles what the defaults can pick, no more
    assert mod.KV_SPLITS_CANDIDATES == (1, 2, 4, 8, 16)
    defaults = {a: getattr(mod, a) for a in ("_MAX_KV_SPLITS", "_MIN_TOPK_PER_SPLIT", "_SPLIT_MIN_FILL")}
    for attrs, answers in POLICY_CASES:
        for name, value in {**defaults, **attrs}.items():
            setattr(mod, name, value)
        got = {q: mod._choose_num_kv_splits(*q) for q in answers}
        assert got == answers, attrs
    # the cache is keyed by the policy too: back at the defaults, the first answer again
    for name, value in defaults.items():
        setattr(mod, name, value)
    assert mod._choose_num_kv_splits(1, 1, 2048, 132) == 16


@pytest.fixture(scope="module")
def many_splits(tmp_path_factory) -> dict:
    """The entry's `--sparse-many-splits` run (the real top-k split 32 and 64 ways)."""
    from dsa_kernels_interpreted import run_interpreted

    tmp = tmp_path_factory.mktemp("many-splits-0044")
    _, after = module_texts()
    run = run_interpreted(tree_of(after, tmp / "after"), tmp / "after.pt", "--sparse-many-splits")
    return run["sparse_many_splits"]


@pytest.mark.slow
def test_the_real_top_k_in_32_and_64_splits_matches_the_oracle(many_splits):
    case = many_splits
    # the policy at 64 splits at most and 32 indices a split at least, 3 tokens on an A100's 108 SMs: 32 splits
    assert case["policy_splits"] == 32
    want = reference(case)
    assert set(case["outputs"]) == {"splits_64", "splits_policy", "faulty"}
    for path in ("splits_64", "splits_policy"):
        got = case["outputs"][path]
        assert got.shape == (3, 8, 512) and got.dtype == torch.bfloat16, (path, got.shape, got.dtype)
        verdict = o.compare_attention(got, want)
        # measured max relative error 3.6e-4 / 3.7e-4, min cosine 0.999997
        assert verdict.passed and verdict.min_cosine > 0.99999 and verdict.max_rel_error < 5e-3, (path, verdict)
        # no valid index: 0 (every one of its splits empty); one valid index in split 62 of 64 (31 of 32): that
        # slot's value row, bit for bit, whatever the 63 empty splits hold
        assert torch.equal(got[1], torch.zeros_like(got[1])), f"{path}: a token with no valid index is not 0"
        assert torch.equal(got[2], case["kv"][1234, 0, :512].expand(8, 512)), f"{path}: token 2 is not slot 1234's row"


@pytest.mark.slow
def test_the_shifted_indices_fail_at_64_splits(many_splits):
    bad = o.compare_attention(many_splits["outputs"]["faulty"], reference(many_splits))
    # measured min cosine 0.03, mean 0.58 (token 1 has no index to shift: 0 either way)
    assert not bad.passed and bad.min_cosine < 0.5, bad


def test_the_next_entry_patches_this_entrys_module():
    # entry 0045 (perf-triton-mla-sparse-merge-one-warp) rewrites the file after this entry, so the compose writes
    # its post-image (tests/series/test_sparse_mla_merge_kernel.py checks the composed tree); its pre-image is the
    # module tested here
    nxt = load_series(REPO / "series").entry("perf-triton-mla-sparse-merge-one-warp")
    assert ENTRY in nxt.requires
    _, after = module_texts()
    path, before_next, _ = candidate_patch.images(nxt.file)
    assert path == SPARSE_FILE and before_next == after


#: benchmarks/dsa_kernels.py's sparse-MLA section on the composed kernel and the entry's, in the interpreter at a
#: small shape (20 heads, 2 rows, top-k 256 over 300 slots), sweeping heads a program 16/32/64 x most splits 16/64 x
#: least indices a split 32/128 at 132 SMs (an H200's). 12 policies make 4 launches: 16 heads a program (2 groups)
#: or 32 (bh32 and bh64: 20 heads are 32 rounded up), each in 8 splits (256 / 32, the policy capped by the indices)
#: or 2 (256 / 128). The composed kernel splits 2 ways too. `do_bench` calls once and says 1 ms, the graph timer 0.5
#: (0.3 with the merge launch skipped).
BENCH_SCRIPT = """
import json, sys
from pathlib import Path
sys.path[:0] = [sys.argv[4] + "/tests", sys.argv[4] + "/benchmarks", sys.argv[4] + "/lab/device"]
import dsa_kernels_interpreted as di
import dsa_kernels as dk
from kernel_offsets import install_vllm_shim
import torch
di._widen_bf16_dot_operands(); di._scalar_loop_bounds()
trees = []
for root in sys.argv[1:3]:
    mods = install_vllm_shim(Path(root))
    di._first_config_only(mods["triton_mla_sparse_kernel"])
    trees.append((Path(root).name, mods))
dk.MLA, dk.MLA_ROWS, dk.TOPK, dk.MLA_SLOTS = [("t", 20)], [2], 256, 300
policies = dk.mla_policies({"mla_max_block_h": "16,32,64", "mla_max_splits": "16,64", "mla_min_split": "32,128"})
rows = []
mla = [mods["triton_mla_sparse_kernel"] for _, mods in trees]
# the stand-in graph timer: 0.5 ms a call, 0.3 while the merge launch is skipped (and then nothing may be merged)
def graph_bench(fn):
    fn()
    return 0.3 if any(isinstance(m._sparse_mla_merge_kernel, dk.SkippedLaunch) for m in mla) else 0.5
dk.time_mla_decode(trees, policies, rows.append, lambda fn: (fn(), 1.0)[1], torch, "cpu", 132,
                   graph_bench=graph_bench)
assert not any(isinstance(m._sparse_mla_merge_kernel, dk.SkippedLaunch) for m in mla)  # put back
Path(sys.argv[3]).write_text(json.dumps({"policies": policies, "rows": rows}))
"""


def test_the_benchmark_times_each_launch_the_policies_make_once(tmp_path):
    import json

    before, after = module_texts()
    trees = [tree_of(before, tmp_path / "before"), tree_of(after, tmp_path / "after")]
    out = tmp_path / "rows.json"
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    cmd = [sys.executable, "-c", BENCH_SCRIPT, *map(str, trees), str(out), str(REPO)]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    doc = json.loads(out.read_text())
    rows = doc["rows"]
    assert len(doc["policies"]) == 12
    launches = ["after@bh16.kv2", "after@bh16.kv8", "after@bh32.kv2", "after@bh32.kv8"]
    assert [r["tree"] for r in rows] == ["before", *launches]
    assert "policies" not in rows[0] and rows[0]["launch"] == {"block_h": 16, "head_groups": 2, "splits": 2,
                                                               "programs": 8}  # fmt: skip
    assert rows[4]["policies"] == ["bh32/kv16/min32", "bh32/kv64/min32", "bh64/kv16/min32", "bh64/kv64/min32"]
    assert rows[4]["launch"] == {"block_h": 32, "head_groups": 1, "splits": 8, "programs": 16}
    assert sorted(p for r in rows[1:] for p in r["policies"]) == sorted(doc["policies"])  # each policy once
    for r in rows:
        assert r["shape"] == "t 20h top-k 256 rows 2" and r["bytes"] == 2 * 256 * (576 * 2 + 4) + 2 * 20 * 1088 * 2
        # the fp32 partial outputs (512 lanes and the LSE) written and read back
        assert r["split_scratch_bytes"] == 2 * 2 * 20 * r["launch"]["splits"] * 513 * 4
        # the autotuned kernel that ran (split-KV, then the merge, which is not autotuned) and its config
        assert list(r["autotune"]) == ["_sparse_mla_kernel_split"], r["autotune"]
        assert r["autotune"]["_sparse_mla_kernel_split"]["config"].startswith("BLOCK_N: 32, num_warps: ")
        # the graph timer's time is the row's, do_bench's beside it; every launch here splits (2 or 8 ways), so
        # each carries the split pass alone and the merge's share
        assert (r["timer"], r["ms"], r["ms_launch"]) == ("graph", 0.5, 1.0)
        assert (r["ms_split_pass"], round(r["ms_merge"], 6)) == (0.3, 0.2), r
    for r in rows[1:]:
        diff = r["vs_first_tree"]
        assert diff["speedup"] == 1.0  # the stand-in's 0.5 ms over 0.5 ms
        assert diff["finite"] and diff["max_abs_diff"] <= 2**-7 and diff["max_abs_first"] > 0.1, (r["tree"], diff)


def test_sixteen_head_programs_tune_over_4_warp_configs_the_others_over_8(tmp_path, no_lasting_stand_in):
    pytest.importorskip("triton", reason="the entry's module imports Triton")
    from kernel_offsets import install_vllm_shim

    _, after = module_texts()
    mod = install_vllm_shim(tree_of(after, tmp_path / "after"))["triton_mla_sparse_kernel"]
    configs = mod._AUTOTUNE_CONFIGS

    def kept(block_h):
        chosen = mod._configs_for_block_h(configs, {}, BLOCK_H=block_h)
        return [(c.kwargs["BLOCK_N"], c.num_warps, c.num_stages) for c in chosen]

    assert kept(16) == [(32, 4, 5), (32, 4, 3), (32, 4, 2)]
    assert kept(32) == kept(64) == [(32, 8, 5), (16, 8, 5), (32, 8, 3)]
    # read from the call's arguments when the launch passes BLOCK_H positionally
    assert mod._configs_for_block_h(configs, {"BLOCK_H": 16}) == [c for c in configs if c.num_warps == 4]
    # a list without the wanted warp count is kept whole (the interpreter's first-config-only runs)
    assert mod._configs_for_block_h(configs[:1], {}, BLOCK_H=16) == configs[:1]
    for kernel in (mod._sparse_mla_kernel_final, mod._sparse_mla_kernel_split):
        assert kernel.early_config_prune is mod._configs_for_block_h


#: (heads a program, the first config those programs tune: BLOCK_N, warps, stages); 16 is the entry's default
SM80_BUILDS = [(16, 32, 4, 5), (64, 32, 8, 5)]


@pytest.mark.parametrize(("block_h", "block_n", "warps", "stages"), SM80_BUILDS)
def test_the_first_config_builds_for_sm80_without_spills_inside_an_a100s_shared_memory(
    tmp_path, no_lasting_stand_in, block_h, block_n, warps, stages
):
    # a compile for sm_80 on the CPU (Triton's PTX, the wheel's ptxas), not a timing: the first config a program of
    # 16 heads (the default) or of 64 (`_MAX_BLOCK_H` 64) tries must hold its accumulator in registers, fit an A100's
    # 163 KB of shared memory, gather 16 bytes a load and double-buffer the gathered tile (measured: 16 heads 190-196
    # registers, 93,952 B; 64 heads 255 registers, 152,320 B)
    from sm80_resources import resources

    _, after = module_texts()
    tree = tree_of(after if block_h == 16 else wide(after), tmp_path / "after")
    r = resources(tree, "final", heads=64, block_n=block_n, num_warps=warps, num_stages=stages)
    assert r["block_h"] == block_h and r["spill_stack_bytes"] == 0 and r["fits_a100"], r
    assert r["kv_async_copy"] and r["kv_buffers"] == 2 and r["widest_global_load"] == 16, r


@pytest.mark.parametrize(("block_h", "block_n", "warps", "stages"), SM80_BUILDS)
def test_the_split_kernel_builds_for_sm80_at_64_splits_inside_an_a100s_shared_memory(
    tmp_path, no_lasting_stand_in, block_h, block_n, warps, stages
):
    # the split kernel at the most splits the policy can be set to, with the launcher's specialization of the real
    # strides (the fp32 partial rows are 513 floats: 4-byte stores). Measured at 64 heads a program: 255 registers,
    # 16 B spilled (the split path's extra offsets), 152,320 B of shared memory, the same at 2, 16 and 32 splits
    from sm80_resources import resources

    _, after = module_texts()
    tree = tree_of(after if block_h == 16 else wide(after), tmp_path / "after")
    r = resources(tree, "split", heads=64, block_n=block_n, num_warps=warps, num_stages=stages, splits=64)
    assert r["block_h"] == block_h and r["splits"] == 64 and r["fits_a100"] and r["spill_stack_bytes"] <= 32, r
    assert r["kv_async_copy"] and r["kv_buffers"] == 2 and r["widest_global_load"] == 16, r
    assert r["widest_global_store"] == 4, r
