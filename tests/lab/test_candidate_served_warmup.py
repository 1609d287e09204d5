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

sys.path.insert(0, str(REPO / "tests"))
from sparse_mla_checks import assert_decode_like_calls  # noqa: E402

PATCH = REPO / "lab" / "candidates" / "perf-triton-mla-sparse-warmup-decode-shapes.patch"
ENTRY_0045 = REPO / "series" / "patches" / "0045-perf-triton-mla-sparse-merge-one-warp.patch"


@pytest.fixture
def kernel(tmp_path, no_lasting_stand_in):
    """Entry 0045's kernel module (the compose's at v0.26.0), through the kernel shim (taken out of sys.modules
    after the test)."""
    from kernel_offsets import install_vllm_shim

    path, _, after = cp.images(ENTRY_0045)
    return install_vllm_shim(cp.write_tree(tmp_path / "kernel-tree", path, after))["triton_mla_sparse_kernel"]


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
    assert_decode_like_calls(calls, heads, warm.namespace["_WARMUP_KV_SLOTS"], sm_count)


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


# --- both warm-ups through entry 0045's kernel itself, in Triton's interpreter ----------------------------------------

#: run in a subprocess (the interpreter must be on before the kernels are decorated): each warm-up against the real
#: kernel module, its calls recorded (rows, splits) with their outputs' shape and finiteness. 20 heads (two head
#: groups of 16, the second partly masked), top-k 64, 8 SMs; the split policy's least indices a split cut to 16 so
#: that top-k 64 splits up to 4 ways (the module attribute is read at each call)
_INTERPRETED = """
import json, sys
from pathlib import Path
repo = Path(sys.argv[1])
sys.path[:0] = [str(repo / "tests"), str(repo / "benchmarks"), str(repo / "lab" / "device"), str(repo / "lab" / "candidates")]
import torch
import candidate_patch as cp
import dsa_kernels_interpreted as di
import mla_served_tuning as mst
from kernel_offsets import install_vllm_shim
di._widen_bf16_dot_operands(); di._scalar_loop_bounds()
path, _, after = cp.images(repo / "series/patches/0045-perf-triton-mla-sparse-merge-one-warp.patch")
mod = install_vllm_shim(cp.write_tree(Path(sys.argv[2]) / "t", path, after))["triton_mla_sparse_kernel"]
di._first_config_only(mod)
mod._MIN_TOPK_PER_SPLIT = 16
real = mod.triton_mla_sparse_attention
out = {}
for name, text in zip(("composed", "candidate"), cp.images(repo / sys.argv[3])[1:]):
    backend = Path(sys.argv[2]) / f"{name}.py"
    backend.write_text(text)
    calls = []
    def attention(q, kv, indices, sm_scale, num_kv_splits=None, sm_count=None):
        o = real(q, kv, indices, sm_scale, num_kv_splits=num_kv_splits, sm_count=sm_count)
        calls.append({"rows": q.shape[0], "splits": num_kv_splits, "out": list(o.shape),
                      "finite": bool(torch.isfinite(o.float()).all())})
        return o
    mod.triton_mla_sparse_attention = attention
    warm = mst.load_warmup(backend, mod)
    warm(mst.impl_self(torch, 20, 64, 8, "cpu"), mst.INDEXER)
    out[name] = {"calls": calls, "rows_for": {str(k): v for k, v in
                 (warm.namespace["_warmup_rows"](20, 64, 8).items() if "_warmup_rows" in warm.namespace else [])}}
    mod.triton_mla_sparse_attention = real
print(json.dumps(out))
"""


def test_both_warm_ups_run_through_entry_0045s_kernel_in_the_interpreter(tmp_path):
    import json
    import os
    import subprocess

    env = {**os.environ, "TRITON_INTERPRET": "1"}
    cmd = [sys.executable, "-c", _INTERPRETED, str(REPO), str(tmp_path), str(PATCH.relative_to(REPO))]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    composed, candidate = got["composed"], got["candidate"]
    assert [(c["rows"], c["splits"]) for c in composed["calls"]] == [(1, 1), (1, 2), (1, 4), (1, 8), (1, 16)]
    # at 8 SMs (a grid of 12 programs fills 1.5x) and two head groups: 4 splits at 1-2 rows, 2 at 3-5, one pass
    # from 6; 8 and 16 splits are never given at a top-k of 64 and 16 indices a split at least, so one row each
    assert candidate["rows_for"] == {"1": 6, "2": 3, "4": 1, "8": 1, "16": 1}
    assert [(c["rows"], c["splits"]) for c in candidate["calls"]] == [(6, 1), (3, 2), (1, 4), (1, 8), (1, 16)]
    for c in composed["calls"] + candidate["calls"]:
        assert c["out"] == [c["rows"], 20, 512], c
    # the candidate's query and latents are zeros; the composed warm-up's are torch.empty (whatever the memory held),
    # so its outputs need not be finite and are not checked
    assert all(c["finite"] for c in candidate["calls"])
