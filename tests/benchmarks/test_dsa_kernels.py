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
