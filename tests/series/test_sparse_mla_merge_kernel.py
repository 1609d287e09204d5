"""Series entry perf-triton-mla-sparse-merge-one-warp (0045, on top of entry 0044): the split-KV merge reads every
split at once in one warp, the partial rows are 528 floats (16-byte accesses), and 16-head programs may tile 64
indices. Run in Triton's interpreter on a CPU against `vllm_compose.proof.dsa_oracle` and against entry 0044's
kernel, which is the entry's pre-image (its one hunk spans the file).

The interpreter runs each autotuner's first config: BLOCK_N 32 at 4 warps, as the entry's module lists them, and
again with the 64-index tile first (`tile64`), so both tiles a 16-head program can tune to are run. `--sparse-heads`
holds 1, 2, 3 and 4 splits and the wrapper's choice (3 is not a power of two: the merge's split tile is 4 with one
masked); `--sparse-many-splits` the real top-k in 64 splits (the merge's widest tile). Interpreter times say nothing
about GPU speed: the entry's GPU times are in its `why` (series/series.toml) and docs/benchmarks.md.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch", reason="the kernel checks need torch (see .ci/run)")
pytest.importorskip("triton", reason="the kernel checks need triton (see .ci/run)")

from release_trees import composed_tree  # noqa: E402
from sparse_mla_checks import (  # noqa: E402
    assert_as_close_as,
    assert_padding_rows,
    assert_paths_match_oracle,
    assert_shifted_indices_fail,
    interpreted_runs,
    reference,
    sparse_tree,
)

from vllm_compose.proof import dsa_oracle as o  # noqa: E402
from vllm_compose.series import load_series  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "lab" / "candidates"))
import candidate_patch  # noqa: E402

ENTRY = "perf-triton-mla-sparse-merge-one-warp"
ENTRY_0044 = "perf-triton-mla-sparse-one-gather-tile"
SPARSE_FILE = "vllm/v1/attention/ops/triton_mla_sparse_kernel.py"
HEADS = (8, 20, 64)
PATHS = ("splits_1", "splits_2", "splits_3", "splits_4", "splits_auto")
TREES = ("after", "tile64")
NARROW = '"narrow": ((32, 4, 5), (32, 4, 3), (32, 4, 2), (64, 4, 2), (64, 8, 2), (64, 8, 3)),'
NARROW_TILE64_FIRST = '"narrow": ((64, 8, 2), (32, 4, 5), (32, 4, 3), (32, 4, 2), (64, 4, 2), (64, 8, 3)),'


def entry_patch(entry_id: str) -> Path:
    return load_series(REPO / "series").entry(entry_id).file


def module_texts() -> tuple[str, str]:
    path, before, after = candidate_patch.images(entry_patch(ENTRY))
    assert path == SPARSE_FILE
    # the pre-image is entry 0044's module, as the compose writes it
    assert before == candidate_patch.images(entry_patch(ENTRY_0044))[2]
    return before, after


def tile64(text: str) -> str:
    """The entry's module with the 64-index tile (8 warps, 2 stages) first among a 16-head program's configs, and first
    in the autotuner's list, so that the interpreter (first config only) runs it."""
    assert text.count(NARROW) == 1
    return text.replace(NARROW, NARROW_TILE64_FIRST)


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict:
    before, after = module_texts()
    return interpreted_runs(
        tmp_path_factory.mktemp("sparse-mla-merge"), {"before": before, "after": after, "tile64": tile64(after)}, HEADS
    )


def test_the_two_runs_take_the_two_tiles(runs):
    assert (
        "BLOCK_N: 32, num_warps: 4" in runs["after"]["configs"]["triton_mla_sparse_kernel"]["_sparse_mla_kernel_split"]
    )
    for kernel in ("_sparse_mla_kernel_final", "_sparse_mla_kernel_split"):
        assert "BLOCK_N: 64, num_warps: 8" in runs["tile64"]["configs"]["triton_mla_sparse_kernel"][kernel]


@pytest.mark.parametrize("tree", TREES)
@pytest.mark.parametrize("heads", HEADS)
def test_every_path_matches_the_oracle(runs, tree, heads):
    assert_paths_match_oracle(runs[tree]["sparse_by_heads"][heads], PATHS, heads)


@pytest.mark.parametrize("tree", TREES)
@pytest.mark.parametrize("heads", HEADS)
def test_a_row_with_no_valid_index_is_zero_and_a_single_index_is_its_row(runs, tree, heads):
    # token 2's splits are all empty (lse -inf each): its merge weights are all 0
    assert_padding_rows(runs[tree]["sparse_by_heads"][heads], PATHS, heads)


@pytest.mark.parametrize("tree", TREES)
@pytest.mark.parametrize("heads", HEADS)
def test_as_close_as_entry_0044(runs, tree, heads):
    # the merge sums the splits as a tree, not a running loop: one bf16 step at most
    assert_as_close_as(runs[tree]["sparse_by_heads"][heads], runs["before"]["sparse_by_heads"][heads], PATHS)


@pytest.mark.parametrize("tree", TREES)
@pytest.mark.parametrize("heads", HEADS)
def test_shifted_indices_fail(runs, tree, heads):
    assert_shifted_indices_fail(runs[tree]["sparse_by_heads"][heads])


@pytest.fixture
def entry_module(tmp_path, no_lasting_stand_in):
    from kernel_offsets import install_vllm_shim

    _, after = module_texts()
    return install_vllm_shim(sparse_tree(after, tmp_path / "after"))["triton_mla_sparse_kernel"]


def test_partial_rows_are_16_floats_aligned_and_the_tiles_are_pruned_by_heads_a_program(entry_module):
    mod = entry_module
    assert mod._MID_ROW == 528 and mod._MID_ROW % 16 == 0
    configs = mod._sparse_mla_kernel_split.configs
    key = lambda c: (c.kwargs["BLOCK_N"], c.num_warps, c.num_stages)  # noqa: E731
    narrow = {key(c) for c in mod._configs_for_block_h(configs, {}, BLOCK_H=16)}
    wide = {key(c) for c in mod._configs_for_block_h(configs, {}, BLOCK_H=64)}
    assert narrow == {(32, 4, 5), (32, 4, 3), (32, 4, 2), (64, 4, 2), (64, 8, 2), (64, 8, 3)}
    assert wide == {(32, 8, 5), (16, 8, 5), (32, 8, 3)}
    assert len(configs) == len(narrow | wide)  # each config once
    # a list holding none of the class's configs is given back whole (the interpreter's first-config cut)
    assert mod._configs_for_block_h(configs[:1], {}, BLOCK_H=64) == configs[:1]
    # the split policy and the warm-up's split counts are entry 0044's
    assert (mod._MAX_KV_SPLITS, mod._MIN_TOPK_PER_SPLIT, mod._SPLIT_MIN_FILL, mod._MAX_BLOCK_H) == (16, 128, 1.5, 16)
    assert mod.KV_SPLITS_CANDIDATES == (1, 2, 4, 8, 16)


@pytest.mark.parametrize(("block_n", "warps", "stages"), [(32, 4, 5), (64, 8, 2)])
def test_the_split_kernel_stores_16_bytes_a_thread_on_sm80(tmp_path, no_lasting_stand_in, block_n, warps, stages):
    # a compile for sm_80 on the CPU (Triton's PTX, the wheel's ptxas): entry 0044's 513-float rows stored 4 bytes
    # at a time; the 528-float rows store 16. Measured: 193 and 128 registers, no spill, 93,952 / 94,464 B shared
    from sm80_resources import resources

    _, after = module_texts()
    tree = sparse_tree(after, tmp_path / "after")
    r = resources(tree, "split", heads=64, block_n=block_n, num_warps=warps, num_stages=stages, splits=32)
    assert r["block_h"] == 16 and r["spill_stack_bytes"] == 0 and r["fits_a100"], r
    assert r["kv_async_copy"] and r["widest_global_load"] == 16 and r["widest_global_store"] == 16, r


def test_the_composed_v0_26_0_module_is_the_entrys_post_image():
    # with VLLM_COMPOSE_TEST_TREES only (CI has no composed tree): what the compose writes is the kernel tested here
    tree = composed_tree("v0.26.0", SPARSE_FILE)
    _, after = module_texts()
    assert (tree / SPARSE_FILE).read_text() == after


def test_the_merge_tile_holds_at_most_2048_floats(entry_module):
    mod = entry_module
    assert [mod._merge_dv_tile(n) for n in (1, 2, 3, 4, 8, 16, 32, 64)] == [128] * 6 + [64, 32]
    assert mod._MERGE_NUM_WARPS == 1


@pytest.mark.parametrize("splits", [2, 4, 16, 64])
def test_the_merge_is_one_warp_without_shared_memory_on_sm80(tmp_path, no_lasting_stand_in, splits):
    # a compile for sm_80 on the CPU as the wrapper launches the merge. The one-load merge as first swept (4 warps)
    # summed the splits across warps: 1 KB of shared memory and 7 barriers, and it was slower than entry 0044's
    # merge wherever a call had few splits and many programs. One warp keeps every split of a lane in its thread.
    # Measured: 20 / 30 / 64 / 80 registers; at 64 splits (32 lanes) a 256-byte exchange and one barrier
    from sm80_resources import resources

    _, after = module_texts()
    r = resources(sparse_tree(after, tmp_path / "after"), "merge", heads=64, block_n=0, num_warps=0, num_stages=0,
                  splits=splits)  # fmt: skip
    assert r["num_warps"] == 1 and r["spill_stack_bytes"] == 0 and r["registers"] <= 96, r
    assert r["widest_global_load"] == 16, r
    if splits <= 16:
        assert r["shared_bytes"] == 0 and r["barriers"] == 0 and r["dv_tile"] == 128, r
    else:
        assert r["shared_bytes"] <= 256 and r["barriers"] <= 1 and r["dv_tile"] == 32, r


def test_entry_0044s_merge_reads_4_bytes_a_thread_on_sm80(tmp_path, no_lasting_stand_in):
    # the other side of the comparison: the 513-float rows and the loop over the splits, 2 warps
    from sm80_resources import resources

    before, _ = module_texts()
    r = resources(sparse_tree(before, tmp_path / "before"), "merge", heads=64, block_n=0, num_warps=0, num_stages=0,
                  splits=16)  # fmt: skip
    assert r["num_warps"] == 2 and r["widest_global_load"] == 4 and r["barriers"] == 0, r


@pytest.fixture(scope="module")
def many_splits(tmp_path_factory) -> dict:
    from dsa_kernels_interpreted import run_interpreted

    tmp = tmp_path_factory.mktemp("many-splits-merge")
    _, after = module_texts()
    return run_interpreted(sparse_tree(after, tmp / "after"), tmp / "after.pt", "--sparse-many-splits")[
        "sparse_many_splits"
    ]


@pytest.mark.slow
def test_the_real_top_k_in_64_splits_matches_the_oracle(many_splits):
    case = many_splits
    want = reference(case)
    for path in ("splits_64", "splits_policy"):
        got = case["outputs"][path]
        verdict = o.compare_attention(got, want)
        assert verdict.passed and verdict.min_cosine > 0.99999 and verdict.max_rel_error < 5e-3, (path, verdict)
        # token 1: no valid index in any of 64 splits; token 2: one, in split 62 of 64
        assert torch.equal(got[1], torch.zeros_like(got[1])), path
        assert torch.equal(got[2], case["kv"][1234, 0, :512].expand(8, 512)), path
    bad = o.compare_attention(case["outputs"]["faulty"], want)
    assert not bad.passed, bad
