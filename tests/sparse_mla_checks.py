"""The checks the sparse-MLA kernel tests share (tests/series/test_sparse_mla_kernel.py, entry 0044;
tests/series/test_sparse_mla_merge_kernel.py, entry 0045 on top of it), each over one `--sparse-heads` case of
tests/dsa_kernels_interpreted.py: every path against `dsa_oracle`, the padding rows exactly, the largest error
against the kernel a change replaces, and the planted index shift failing; and the interpreted runs those cases come
from (`interpreted_runs`, over trees from `sparse_tree`)."""

from __future__ import annotations

from pathlib import Path

import torch

from vllm_compose.proof import dsa_oracle as o


def reference(case: dict) -> torch.Tensor:
    want, _ = o.sparse_mla_attention(case["q"], case["kv"], case["indices"], case["sm_scale"])
    return want


def assert_paths_match_oracle(case: dict, paths, heads: int) -> None:
    """Each path's output is [4, heads, 512] bf16 and passes the oracle: min cosine > 0.99999, max relative error
    < 5e-3 (measured at most 3.0e-3 and at least 0.999995, bf16 outputs, the composed kernel's figures too)."""
    want = reference(case)
    for path in paths:
        got = case["outputs"][path]
        assert got.shape == (4, heads, 512) and got.dtype == torch.bfloat16, (path, got.shape, got.dtype)
        verdict = o.compare_attention(got, want)
        assert verdict.passed and verdict.min_cosine > 0.99999 and verdict.max_rel_error < 5e-3, (path, verdict)


def assert_padding_rows(case: dict, paths, heads: int) -> None:
    """Token 2 has no valid index (every split of it empty): exactly 0. Token 3 has one, slot 123: softmax weight 1,
    so the output is that slot's value row, bit for bit."""
    value = case["kv"][123, 0, :512]
    for path in paths:
        out = case["outputs"][path]
        assert torch.equal(out[2], torch.zeros_like(out[2])), f"{path}: a token with no valid index is not 0"
        assert torch.equal(out[3], value.expand(heads, 512)), f"{path}: token 3 is not slot 123's value row"


def assert_as_close_as(new: dict, old: dict, paths) -> None:
    """`new` (the change's run) is as close to the oracle as `old` (the kernel it replaces) on the same inputs: both
    round fp32 sums to bf16 in another order (chunks, tiles, BLOCK_N, the merge), so a few outputs round the other
    way: at most one bf16 step at the outputs' scale (|out| < 4: 2**-6)."""
    assert torch.equal(new["indices"], old["indices"]) and torch.equal(new["q"], old["q"])  # the same inputs
    want = reference(new)
    for path in paths:
        got_new, got_old = new["outputs"][path], old["outputs"][path]
        err_new = o.compare_attention(got_new, want).max_abs_error
        err_old = o.compare_attention(got_old, want).max_abs_error
        assert err_new <= err_old + 2**-8, (path, err_new, err_old)
        assert float((got_new.float() - got_old.float()).abs().max()) <= 2**-6, path


def assert_shifted_indices_fail(case: dict) -> None:
    """The planted fault (every index one slot on) fails the oracle by far: mean cosine under 0.5 (measured
    0.31-0.42)."""
    bad = o.compare_attention(case["outputs"]["faulty"], reference(case))
    assert not bad.passed and bad.mean_cosine < 0.5, bad


def sparse_tree(text: str, root: Path) -> Path:
    """A kernel tree under `root` whose sparse-MLA module is `text` (tests/dsa_kernels_interpreted.py's layout)."""
    from dsa_kernels_interpreted import kernel_tree

    return kernel_tree(root, triton_mla_sparse_kernel=text)


def interpreted_runs(tmp: Path, texts: dict[str, str], heads) -> dict[str, dict]:
    """Each named module text run in Triton's interpreter at the `--sparse-heads` cases `heads`, by name."""
    from dsa_kernels_interpreted import run_interpreted

    flags = ("--sparse-heads", ",".join(map(str, heads)))
    return {
        name: run_interpreted(sparse_tree(text, tmp / name), tmp / f"{name}.pt", *flags) for name, text in texts.items()
    }


def assert_decode_like_calls(calls: list[dict], heads: int, slots: int, sm_count: int) -> None:
    """A warm-up's recorded kernel calls (`q`, `kv`, `indices` and `sm_count` as it passed them) are decode-like: the
    layer's heads over a cache of `slots` latents at the cached SM count, each row's 2,048 indices in range and spread
    (2,048 draws over 65,536 slots name about 2,016 distinct ones)."""
    for c in calls:
        rows = c["q"][0]
        assert c["q"] == (rows, heads, 576) and c["kv"] == (slots, 1, 576) and c["sm_count"] == sm_count, c
        idx = c["indices"]
        assert tuple(idx.shape) == (rows, 1, 2048) and 0 <= int(idx.min()) and int(idx.max()) < slots
        assert all(row.unique().numel() > 1950 for row in idx.view(rows, -1))
