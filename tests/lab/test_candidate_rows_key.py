"""The row-bucket candidates without a GPU: `perf-triton-mla-sparse-rows-in-tuning-key.patch` (entry 0045's kernel with
the call's row bucket in both autotune keys) and `perf-triton-mla-sparse-warmup-rows-buckets.patch` (the backend's
warm-up making one call for every key a decode reaches).

The kernel's math is unchanged, so its outputs in Triton's interpreter must equal entry 0045's exactly; the warm-up is
run from its own source (benchmarks/mla_served_tuning.load_warmup) against the candidate kernel module with the kernel
call recorded, not run.
"""

from __future__ import annotations

import sys
import types
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("triton")

REPO = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(REPO / "lab" / "candidates"), str(REPO / "lab" / "device"), str(REPO / "benchmarks"),
                str(REPO / "tests")]  # fmt: skip

import candidate_patch as cp  # noqa: E402
import mla_served_tuning as mst  # noqa: E402
from sparse_mla_checks import assert_decode_like_calls, assert_paths_match_oracle, interpreted_runs  # noqa: E402

KERNEL_PATCH = REPO / "lab" / "candidates" / "perf-triton-mla-sparse-rows-in-tuning-key.patch"
WARMUP_PATCH = REPO / "lab" / "candidates" / "perf-triton-mla-sparse-warmup-rows-buckets.patch"
SHAPES_PATCH = REPO / "lab" / "candidates" / "perf-triton-mla-sparse-warmup-decode-shapes.patch"
ENTRY_0045 = REPO / "series" / "patches" / "0045-perf-triton-mla-sparse-merge-one-warp.patch"
PATHS = ("splits_1", "splits_2", "splits_3", "splits_4", "splits_auto")


@pytest.fixture
def kernel(tmp_path, no_lasting_stand_in):
    """The candidate kernel module, through the kernel shim (taken out of sys.modules after the test)."""
    from kernel_offsets import install_vllm_shim

    path, _, after = cp.images(KERNEL_PATCH)
    return install_vllm_shim(cp.write_tree(tmp_path / "kernel-tree", path, after))["triton_mla_sparse_kernel"]


def recording(kernel, calls: list):
    """The candidate kernel module with its wrapper recorded (what it was given), not run."""

    def attention(q, kv, indices, sm_scale, num_kv_splits=None, sm_count=None):
        calls.append({"q": tuple(q.shape), "kv": tuple(kv.shape), "indices": indices.clone(), "splits": num_kv_splits,
                      "sm_count": sm_count})  # fmt: skip

    names = {n: getattr(kernel, n) for n in dir(kernel) if not n.startswith("__")}
    return types.SimpleNamespace(**{**names, "triton_mla_sparse_attention": attention})


def test_the_patches_read_back_as_written_and_stack_on_entry_0045_and_the_composed_backend():
    for patch in (KERNEL_PATCH, WARMUP_PATCH):
        _, _, after = cp.images(patch)
        assert cp.rewrite(patch, after, cp.message_of(patch)) == patch.read_text()
    k_path, k_before, _ = cp.images(KERNEL_PATCH)
    e_path, _, e_after = cp.images(ENTRY_0045)
    assert k_path == e_path and k_before == e_after  # on top of entry 0045's kernel
    w_path, w_before, _ = cp.images(WARMUP_PATCH)
    s_path, s_before, _ = cp.images(SHAPES_PATCH)
    assert w_path == s_path == mst.BACKEND and w_before == s_before  # the backend as composed


def test_both_autotuned_kernels_key_on_the_row_bucket_and_do_not_specialize_it(kernel):
    for name, key in (("_sparse_mla_kernel_final", ["index_topk", "BLOCK_H", "rows_bucket"]),
                      ("_sparse_mla_kernel_split", ["index_topk", "NUM_KV_SPLITS", "BLOCK_H", "rows_bucket"])):  # fmt: skip
        tuner = getattr(kernel, name)
        assert tuner.keys == key, name
        assert "rows_bucket" in tuner.fn.do_not_specialize, name  # one compile serves every bucket
    assert [kernel._rows_bucket(n) for n in (0, 1, 2, 3, 5, 8, 9, 33, 64, 65, 4096)] == [
        1, 1, 2, 4, 8, 8, 16, 64, 64, 64, 64
    ]  # fmt: skip
    assert kernel._ROWS_BUCKET_MAX == 64


def test_the_wrapper_hands_each_launch_its_calls_bucket(kernel, monkeypatch):
    launched: list = []

    class Launch:
        def __init__(self, name: str):
            self.name = name

        def __getitem__(self, grid):
            return lambda **kwargs: launched.append((self.name, grid, kwargs.get("rows_bucket")))

    for name in ("_sparse_mla_kernel_final", "_sparse_mla_kernel_split", "_sparse_mla_merge_kernel"):
        monkeypatch.setattr(kernel, name, Launch(name))
    kv = torch.zeros(64, 1, 576, dtype=torch.bfloat16)
    for rows, splits in ((1, 16), (3, 4), (8, 1), (64, 2), (100, 1)):
        q = torch.zeros(rows, 16, 576, dtype=torch.bfloat16)
        idx = torch.zeros(rows, 1, 2048, dtype=torch.int32)
        kernel.triton_mla_sparse_attention(q, kv, idx, 0.1, num_kv_splits=splits, sm_count=132)
    tuned = [(name, grid[0], bucket) for name, grid, bucket in launched if name != "_sparse_mla_merge_kernel"]
    assert tuned == [("_sparse_mla_kernel_split", 1, 1), ("_sparse_mla_kernel_split", 3, 4),
                     ("_sparse_mla_kernel_final", 8, 8), ("_sparse_mla_kernel_split", 64, 64),
                     ("_sparse_mla_kernel_final", 100, 64)]  # fmt: skip


@pytest.mark.parametrize("heads, sm_count", [(64, 132), (128, 132), (8, 132), (16, 108), (64, 108), (128, 78)])
def test_the_warm_up_tunes_every_key_a_decode_reaches_at_its_fewest_rows(tmp_path, kernel, heads, sm_count):
    _, _, after = cp.images(WARMUP_PATCH)
    (tmp_path / "backend.py").write_text(after)
    calls: list = []
    warm = mst.load_warmup(tmp_path / "backend.py", recording(kernel, calls))
    warm(mst.impl_self(torch, heads, 2048, sm_count, "cpu"), mst.INDEXER)
    groups = -(-heads // kernel._block_h(heads))

    def key(rows: int) -> tuple[int, int]:
        return kernel._choose_num_kv_splits(rows, groups, 2048, sm_count), kernel._rows_bucket(rows)

    fewest: dict[tuple[int, int], int] = {}
    for rows in range(1, 4097):  # far past the warm-up's search: no decode reaches a key it left untuned
        fewest.setdefault(key(rows), rows)
    got = [(c["splits"], c["q"][0]) for c in calls]
    assert sorted(got) == sorted((splits, rows) for (splits, _), rows in fewest.items())
    assert len({key(rows) for _, rows in got}) == len(got)  # one call a key
    assert_decode_like_calls(calls, heads, warm.namespace["_WARMUP_KV_SLOTS"], sm_count)


def test_at_glm5_tp1_on_132_sms_the_calls_are_the_ones_the_commit_message_gives(tmp_path, kernel):
    _, _, after = cp.images(WARMUP_PATCH)
    (tmp_path / "backend.py").write_text(after)
    warm = mst.load_warmup(tmp_path / "backend.py", recording(kernel, []))
    calls = warm.namespace["_warmup_calls"](64, 2048, 132)
    assert calls == [(16, 1), (16, 2), (16, 3), (16, 5), (8, 7), (8, 9), (4, 13), (4, 17), (2, 25), (2, 33), (1, 50)]
    assert "132 SMs: 11 calls, 1 to 50 rows" in cp.message_of(WARMUP_PATCH).replace("\n", " ")


# --- the kernel in Triton's interpreter: entry 0045's outputs, exactly ------------------------------------------------


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict:
    _, _, e45 = cp.images(ENTRY_0045)
    _, _, bucket = cp.images(KERNEL_PATCH)
    return interpreted_runs(tmp_path_factory.mktemp("rows-key"), {"e45": e45, "bucket": bucket}, (8, 64))


@pytest.mark.parametrize("heads", (8, 64))
def test_the_kernel_with_the_bucket_gives_entry_0045s_outputs_bit_for_bit(runs, heads):
    new, old = runs["bucket"]["sparse_by_heads"][heads], runs["e45"]["sparse_by_heads"][heads]
    assert_paths_match_oracle(new, PATHS, heads)
    for path in PATHS:
        assert torch.equal(new["outputs"][path], old["outputs"][path]), path
    # and the check can fail: the planted fault's output differs from the true one
    assert not torch.equal(new["outputs"]["faulty"], new["outputs"]["splits_1"])
