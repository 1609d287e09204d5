"""lab/candidates/perf-triton-mla-sparse-warmup-decode-shapes.patch without a GPU: the backend's warm-up as composed
(the patch's pre-image) and as the candidate writes it (its post-image), each run from its own source
(benchmarks/mla_served_tuning.load_warmup) against entry 0045's kernel module with the kernel call recorded, not run.

As composed, every split count is tuned on one row whose indices are all 0 over a 64-slot cache; the candidate tunes
each split count at the fewest rows the split policy gives it, on indices spread over more slots than an L2 holds.
"""

from __future__ import annotations

import sys
import types
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("triton")

REPO = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(REPO / "lab" / "candidates"), str(REPO / "lab" / "device"), str(REPO / "benchmarks")]

import candidate_patch as cp  # noqa: E402
import mla_served_tuning as mst  # noqa: E402

PATCH = REPO / "lab" / "candidates" / "perf-triton-mla-sparse-warmup-decode-shapes.patch"
ENTRY_0045 = REPO / "series" / "patches" / "0045-perf-triton-mla-sparse-merge-one-warp.patch"


@pytest.fixture(scope="module")
def kernel():
    """Entry 0045's kernel module (the compose's at v0.26.0), through the kernel shim."""
    import tempfile

    from kernel_offsets import install_vllm_shim

    path, _, after = cp.images(ENTRY_0045)
    with tempfile.TemporaryDirectory() as tmp:
        mods = install_vllm_shim(cp.write_tree(Path(tmp), path, after))
    return mods["triton_mla_sparse_kernel"]


def backends(tmp_path: Path) -> tuple[Path, Path]:
    path, before, after = cp.images(PATCH)
    assert path == mst.BACKEND
    (tmp_path / "composed.py").write_text(before)
    (tmp_path / "candidate.py").write_text(after)
    return tmp_path / "composed.py", tmp_path / "candidate.py"


def recording(kernel, calls: list):
    """The kernel module's names the backend imports, its call recorded: what it was given and the launch the
    kernel's own rules make of it."""

    def attention(q, kv, indices, sm_scale, num_kv_splits=None, sm_count=None):
        calls.append({"q": tuple(q.shape), "kv": tuple(kv.shape), "indices": indices.clone(), "splits": num_kv_splits,
                      "sm_count": sm_count})  # fmt: skip

    return types.SimpleNamespace(
        _DIM_QK=kernel._DIM_QK,
        KV_SPLITS_CANDIDATES=kernel.KV_SPLITS_CANDIDATES,
        _block_h=kernel._block_h,
        _choose_num_kv_splits=kernel._choose_num_kv_splits,
        triton_mla_sparse_attention=attention,
    )


def test_the_patch_is_one_hunk_over_the_backend_and_reads_back_as_written(tmp_path):
    path, before, after = cp.images(PATCH)
    assert cp.rewrite(PATCH, after, cp.message_of(PATCH)) == PATCH.read_text()
    assert "torch.zeros(1, 1, topk, dtype=torch.int32, device=device)" in before  # the composed warm-up's indices
    assert "_warmup_rows(self.num_heads, topk, sm_count)" in after
    assert cp.message_of(PATCH).startswith("triton_mla_sparse: tune each split count at warm-up on a decode-like")


def test_as_composed_every_split_count_is_tuned_on_one_row_of_one_slot(tmp_path, kernel):
    composed, _ = backends(tmp_path)
    calls: list = []
    warm = mst.load_warmup(composed, recording(kernel, calls))
    warm(mst.impl_self(torch, 64, 2048, 132, "cpu"), mst.INDEXER)
    assert [c["splits"] for c in calls] == list(kernel.KV_SPLITS_CANDIDATES) == [1, 2, 4, 8, 16]
    for c in calls:
        assert c["q"] == (1, 64, 576) and c["kv"] == (64, 1, 576)
        assert c["indices"].unique().tolist() == [0]  # 2,048 gathers of one row


@pytest.mark.parametrize("heads, sm_count", [(64, 132), (128, 132), (8, 132), (16, 108), (64, 108)])
def test_the_candidate_tunes_each_split_count_at_the_fewest_rows_that_get_it(tmp_path, kernel, heads, sm_count):
    _, candidate = backends(tmp_path)
    calls: list = []
    warm = mst.load_warmup(candidate, recording(kernel, calls))
    rows_for = warm.namespace["_warmup_rows"](heads, 2048, sm_count)
    groups = -(-heads // kernel._block_h(heads))

    def splits_at(rows: int) -> int:
        return kernel._choose_num_kv_splits(rows, groups, 2048, sm_count)

    assert sorted(rows_for) == list(kernel.KV_SPLITS_CANDIDATES)
    for splits, rows in rows_for.items():
        # the policy gives every count at these heads, so none falls back to one row: the rows get it, one fewer not
        assert splits_at(rows) == splits and (rows == 1 or splits_at(rows - 1) != splits), (splits, rows)
    warm(mst.impl_self(torch, heads, 2048, sm_count, "cpu"), mst.INDEXER)
    assert [(c["splits"], c["q"][0]) for c in calls] == list(rows_for.items())
    slots = warm.namespace["_WARMUP_KV_SLOTS"]
    for c in calls:
        rows = c["q"][0]
        assert c["q"] == (rows, heads, 576) and c["kv"] == (slots, 1, 576) and c["sm_count"] == sm_count
        idx = c["indices"]
        assert tuple(idx.shape) == (rows, 1, 2048) and 0 <= int(idx.min()) and int(idx.max()) < slots
        # spread: a row's 2,048 draws over 65,536 slots name about 2,016 distinct ones
        assert all(row.unique().numel() > 1950 for row in idx.view(rows, -1))


def test_at_glm5_tp1_on_132_sms_the_rows_are_the_ones_the_commit_message_gives(tmp_path, kernel):
    _, candidate = backends(tmp_path)
    warm = mst.load_warmup(candidate, recording(kernel, []))
    assert warm.namespace["_warmup_rows"](64, 2048, 132) == {1: 50, 2: 25, 4: 13, 8: 7, 16: 1}
    assert "16 splits at 1 row, 8 at 7, 4 at" in cp.message_of(PATCH).replace("\n", " ")
    assert warm.namespace["_WARMUP_KV_SLOTS"] * 576 * 2 > 60e6  # 75 MB: more than an H200's 60 MB of L2


def test_a_count_the_policy_never_gives_is_tuned_at_one_row(tmp_path, kernel):
    _, candidate = backends(tmp_path)
    mod = recording(kernel, [])
    mod._choose_num_kv_splits = lambda rows, groups, topk, sm: 16 if rows < 4 else 1  # 2, 4 and 8 never
    warm = mst.load_warmup(candidate, mod)
    assert warm.namespace["_warmup_rows"](64, 2048, 132) == {1: 4, 2: 1, 4: 1, 8: 1, 16: 1}
