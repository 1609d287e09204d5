# SPDX-License-Identifier: Apache-2.0
# SPDX-FileCopyrightText: Copyright contributors to the vLLM project
"""Triton sparse MLA attention with split-KV for low-batch decode.

Each program serves every head of its token up to _MAX_BLOCK_H (64), so a
gathered KV tile is read from HBM once per token (and split) for all of its
heads: with 16 heads a program, GLM-5's 64 heads gathered each token's
top-k latents 4 times and DeepSeek-V3.2's 128 heads 8 times. The 576-wide
latent is loaded as four 128-wide chunks plus the 64-wide rope part, and
each chunk is both a K operand (scores) and, for the first 512 lanes, the V
operand (output): one gather a tile instead of two. Built for sm_80, the
query (72 KB at 64 heads) stays in shared memory for the whole loop and the
[64, 512] fp32 accumulator in registers (128 a thread at 8 warps); 5 stages
double-buffer the gathered tile. mma.sync only (sm_80), no TMA or wgmma.

With so few programs at decode (one a token and head group), split-KV cuts
each token's top-k into up to _MAX_KV_SPLITS slices (see
_choose_num_kv_splits); the heads per program and the split policy are
module attributes read at each call.
"""

import functools

import torch

from vllm.triton_utils import LOG2E, LOGE2, tl, triton
from vllm.utils.platform_utils import num_compute_units

# DeepSeek-V3.2 / GLM-5 sparse MLA shape constants.
_BLOCK_DMODEL = 512
_BLOCK_DPE = 64
_BLOCK_DV = 512
_DIM_QK = _BLOCK_DMODEL + _BLOCK_DPE  # 576
# The 512 latent lanes are gathered and multiplied in 4 chunks of this width:
# one [BLOCK_N, 128] gather serves as K and as V, and the accumulator is 4
# [BLOCK_H, 128] tiles.
_BLOCK_DC = 128
assert _BLOCK_DMODEL == 4 * _BLOCK_DC and _BLOCK_DV == _BLOCK_DMODEL

# Heads a program serves: the token's heads rounded up to a power of two,
# at least 16 (one mma.sync M tile) and at most _MAX_BLOCK_H. A module
# attribute read at each call, so a benchmark can time 16 / 32 / 64.
_MAX_BLOCK_H = 16
_MIN_BLOCK_H = 16
# Smallest BLOCK_N the autotune sweep offers; only used for the topk-divisibility
# check at dispatch time.
_MIN_BLOCK_N = 16

# Merge kernel grid is spread across heads and DV tiles to avoid a (1,1)
# launch starving the SMs (pattern from FlashMLA's combine kernel).
_MERGE_BLOCK_H = 1
_MERGE_BLOCK_DV_TILE = 128
assert _BLOCK_DV % _MERGE_BLOCK_DV_TILE == 0
_NUM_MERGE_DV_TILES = _BLOCK_DV // _MERGE_BLOCK_DV_TILE

# A program holds a [BLOCK_H, 512] fp32 accumulator: 64 heads need 8 warps
# to keep it at 128 registers a thread. Triton pipelines the gathered tile
# (its address comes from the index load) only from 3 stages on, and
# double-buffers it from 5 (sm_80 build: 152 KB of shared memory at 64
# heads and BLOCK_N 32, 113 KB at 16; an A100 has 163 KB). Configs a GPU
# cannot hold are pruned by the autotuner. A 16-head program's [16, N]
# scores are one mma.sync M tile, which 8 warps split too finely: its
# configs are the 4-warp ones (PR #38476's kernel runs 16 heads at 4 warps,
# 2 stages), the others' the 8-warp ones (_configs_for_block_h).
_AUTOTUNE_CONFIGS = [
    triton.Config({"BLOCK_N": bn}, num_warps=nw, num_stages=ns)
    for bn, nw, ns in (
        (32, 8, 5),
        (16, 8, 5),
        (32, 8, 3),
        (32, 4, 5),
        (32, 4, 3),
        (32, 4, 2),
    )
]


def _configs_for_block_h(configs, named_args, **kwargs):
    """The autotune configs for this launch's heads a program: 4 warps at 16,
    8 from 32 on; every config given when none has that warp count."""
    block_h = kwargs.get("BLOCK_H", named_args.get("BLOCK_H"))
    warps = 4 if block_h is not None and block_h <= _MIN_BLOCK_H else 8
    return [c for c in configs if c.num_warps == warps] or list(configs)


# The split-KV policy of `_choose_num_kv_splits`: split a token's top-k until
# the grid covers _SPLIT_MIN_FILL of the SMs (all heads in one program, 64
# tokens are 64 programs, too few for 132 SMs), in at most _MAX_KV_SPLITS
# splits (a power of two) of at least _MIN_TOPK_PER_SPLIT indices each.
# Module attributes read at each call, as _MAX_BLOCK_H is, so a benchmark can
# time other policies in one process (top-k 2048 allows 64 splits of 32).
_MAX_KV_SPLITS = 16
_MIN_TOPK_PER_SPLIT = 128
_SPLIT_MIN_FILL = 1.5

# Split counts `_warmup_autotune` pre-compiles: every one the policy picks
# at the values above and no more (each count is 4 split-kernel configs and a
# merge kernel to compile at start-up).
KV_SPLITS_CANDIDATES = tuple(1 << i for i in range(_MAX_KV_SPLITS.bit_length()))


def _block_h(num_heads: int) -> int:
    """Heads per program for `num_heads` query heads (see _MAX_BLOCK_H)."""
    return max(_MIN_BLOCK_H, min(_MAX_BLOCK_H, triton.next_power_of_2(num_heads)))


@triton.jit
def _sparse_mla_compute_tile(
    q_buffer,
    k_buffer,  # V is the first 4 * BLOCK_DC (512) lanes of each row.
    indices_ptr,
    cur_q,
    cur_head,
    mask_h,
    split_start,
    split_end,
    seq_kv,
    stride_q_token,
    stride_q_head,
    stride_kv_token,
    stride_indices_token,
    sm_scale,
    BLOCK_H: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_DC: tl.constexpr,
    BLOCK_DPE: tl.constexpr,
):
    """Shared stage-1 body: the sparse online-softmax loop over
    `[split_start, split_end)` of the topk axis for BLOCK_H heads of one
    token; returns the four [BLOCK_H, BLOCK_DC] accumulator chunks (the
    512 output lanes in order), the running max and the running sum. The
    KV has one head (MLA), so neither kv nor indices have a head offset."""
    offs_c = tl.arange(0, BLOCK_DC)
    offs_pe = tl.arange(0, BLOCK_DPE)
    q_rows = q_buffer + cur_q * stride_q_token + cur_head[:, None] * stride_q_head
    idx_row = indices_ptr + cur_q * stride_indices_token

    # Finite sentinel (not -inf) — when an entire BLOCK_N tile is masked,
    # `-inf - -inf = NaN` poisons the softmax; `sentinel - sentinel = 0`
    # gives `exp2(0) = 1` and the matching V rows are already 0.
    NEG_LARGE = -1.0e30
    e_max = tl.zeros([BLOCK_H], dtype=tl.float32) + NEG_LARGE
    e_sum = tl.zeros([BLOCK_H], dtype=tl.float32)
    acc0 = tl.zeros([BLOCK_H, BLOCK_DC], dtype=tl.float32)
    acc1 = tl.zeros([BLOCK_H, BLOCK_DC], dtype=tl.float32)
    acc2 = tl.zeros([BLOCK_H, BLOCK_DC], dtype=tl.float32)
    acc3 = tl.zeros([BLOCK_H, BLOCK_DC], dtype=tl.float32)

    # The query, loaded once: as the dots' operand Triton keeps it in shared
    # memory (72 KB at 64 heads), not in registers beside the accumulator.
    q0 = tl.load(q_rows + offs_c[None, :], mask=mask_h[:, None], other=0.0)
    q1 = tl.load(q_rows + BLOCK_DC + offs_c[None, :], mask=mask_h[:, None], other=0.0)
    q2 = tl.load(
        q_rows + 2 * BLOCK_DC + offs_c[None, :], mask=mask_h[:, None], other=0.0
    )
    q3 = tl.load(
        q_rows + 3 * BLOCK_DC + offs_c[None, :], mask=mask_h[:, None], other=0.0
    )
    qpe = tl.load(
        q_rows + 4 * BLOCK_DC + offs_pe[None, :], mask=mask_h[:, None], other=0.0
    )

    for start_indice in range(split_start, split_end, BLOCK_N):
        offs_indice = start_indice + tl.arange(0, BLOCK_N)
        indices = tl.load(
            idx_row + offs_indice, mask=offs_indice < split_end, other=-1
        ).to(tl.int64)  # indices * stride_kv_token passes 2**31 from slot 3,728,271
        mask_kv = (indices >= 0) & (indices < seq_kv)
        kv_rows = k_buffer + indices[:, None] * stride_kv_token

        # One gather of the tile's rows, chunk by chunk: [BLOCK_N, BLOCK_DC]
        # each, K for the scores and V for the output.
        kv0 = tl.load(kv_rows + offs_c[None, :], mask=mask_kv[:, None], other=0.0)
        kv1 = tl.load(
            kv_rows + BLOCK_DC + offs_c[None, :], mask=mask_kv[:, None], other=0.0
        )
        kv2 = tl.load(
            kv_rows + 2 * BLOCK_DC + offs_c[None, :], mask=mask_kv[:, None], other=0.0
        )
        kv3 = tl.load(
            kv_rows + 3 * BLOCK_DC + offs_c[None, :], mask=mask_kv[:, None], other=0.0
        )
        kpe = tl.load(
            kv_rows + 4 * BLOCK_DC + offs_pe[None, :], mask=mask_kv[:, None], other=0.0
        )

        # Scores, chunk by chunk.
        qk = tl.dot(q0, tl.trans(kv0.to(q0.dtype)))
        qk = tl.dot(q1, tl.trans(kv1.to(q1.dtype)), qk)
        qk = tl.dot(q2, tl.trans(kv2.to(q2.dtype)), qk)
        qk = tl.dot(q3, tl.trans(kv3.to(q3.dtype)), qk)
        qk = tl.dot(qpe, tl.trans(kpe.to(qpe.dtype)), qk)

        qk *= sm_scale
        qk = tl.where((mask_h[:, None]) & (mask_kv[None, :]), qk, NEG_LARGE)

        n_e_max = tl.maximum(tl.max(qk, 1), e_max)
        re_scale = tl.exp2(e_max - n_e_max)
        p = tl.exp2(qk - n_e_max[:, None])
        pv = p.to(kv0.dtype)
        acc0 = tl.dot(pv, kv0, acc0 * re_scale[:, None])
        acc1 = tl.dot(pv, kv1, acc1 * re_scale[:, None])
        acc2 = tl.dot(pv, kv2, acc2 * re_scale[:, None])
        acc3 = tl.dot(pv, kv3, acc3 * re_scale[:, None])
        e_sum = e_sum * re_scale + tl.sum(p, 1)
        e_max = n_e_max

    return acc0, acc1, acc2, acc3, e_max, e_sum


@triton.jit
def _store_chunks(
    base,  # [BLOCK_H, 1] pointers to lane 0 of each head's output row
    acc0,
    acc1,
    acc2,
    acc3,
    e_sum,  # [BLOCK_H]: the softmax sums, each > 0
    mask_h,
    BLOCK_DC: tl.constexpr,
    OUT_BF16: tl.constexpr,
):
    """Write the four accumulator chunks over `e_sum`, as bf16 or fp32."""
    offs_c = tl.arange(0, BLOCK_DC)[None, :]
    m = mask_h[:, None]
    s = e_sum[:, None]
    if OUT_BF16:
        tl.store(base + offs_c, (acc0 / s).to(tl.bfloat16), mask=m)
        tl.store(base + BLOCK_DC + offs_c, (acc1 / s).to(tl.bfloat16), mask=m)
        tl.store(base + 2 * BLOCK_DC + offs_c, (acc2 / s).to(tl.bfloat16), mask=m)
        tl.store(base + 3 * BLOCK_DC + offs_c, (acc3 / s).to(tl.bfloat16), mask=m)
    else:
        tl.store(base + offs_c, acc0 / s, mask=m)
        tl.store(base + BLOCK_DC + offs_c, acc1 / s, mask=m)
        tl.store(base + 2 * BLOCK_DC + offs_c, acc2 / s, mask=m)
        tl.store(base + 3 * BLOCK_DC + offs_c, acc3 / s, mask=m)


@triton.autotune(
    configs=_AUTOTUNE_CONFIGS,
    key=["index_topk", "BLOCK_H"],
    prune_configs_by={"early_config_prune": _configs_for_block_h},
)
@triton.jit
def _sparse_mla_kernel_final(
    q_buffer,
    k_buffer,
    indices_ptr,
    out_ptr,
    seq_kv,
    h_q,
    stride_q_token,
    stride_q_head,
    stride_kv_token,
    stride_out_token,
    stride_out_head,
    stride_indices_token,
    sm_scale,
    index_topk: tl.constexpr,
    BLOCK_H: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_DC: tl.constexpr,
    BLOCK_DPE: tl.constexpr,
):
    """Single-pass fast path: full topk, write final bf16 output directly."""
    cur_q = tl.program_id(0).to(tl.int64)  # token offsets of out / mid_out
    cur_head = tl.program_id(1) * BLOCK_H + tl.arange(0, BLOCK_H)
    mask_h = cur_head < h_q

    acc0, acc1, acc2, acc3, _e_max, e_sum = _sparse_mla_compute_tile(
        q_buffer,
        k_buffer,
        indices_ptr,
        cur_q,
        cur_head,
        mask_h,
        0,
        index_topk,
        seq_kv,
        stride_q_token,
        stride_q_head,
        stride_kv_token,
        stride_indices_token,
        sm_scale,
        BLOCK_H,
        BLOCK_N,
        BLOCK_DC,
        BLOCK_DPE,
    )

    # Guard against queries with zero valid KV (e_sum == 0 → NaN from 0/0).
    e_sum_safe = tl.where(e_sum > 0, e_sum, 1.0)
    base = out_ptr + cur_q * stride_out_token + cur_head[:, None] * stride_out_head
    _store_chunks(base, acc0, acc1, acc2, acc3, e_sum_safe, mask_h, BLOCK_DC, True)


@triton.autotune(
    configs=_AUTOTUNE_CONFIGS,
    key=["index_topk", "NUM_KV_SPLITS", "BLOCK_H"],
    prune_configs_by={"early_config_prune": _configs_for_block_h},
)
@triton.jit
def _sparse_mla_kernel_split(
    q_buffer,
    k_buffer,
    indices_ptr,
    mid_out_ptr,
    seq_kv,
    h_q,
    stride_q_token,
    stride_q_head,
    stride_kv_token,
    stride_mid_token,
    stride_mid_head,
    stride_mid_split,
    stride_indices_token,
    sm_scale,
    index_topk: tl.constexpr,
    NUM_KV_SPLITS: tl.constexpr,
    BLOCK_H: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_DC: tl.constexpr,
    BLOCK_DPE: tl.constexpr,
    BLOCK_DV: tl.constexpr,
    LOGE2: tl.constexpr,
):
    """Stage 1 of split-KV: process one slice of the topk axis and write
    its `(out_partial, lse_partial)` into the mid buffer."""
    cur_q = tl.program_id(0).to(tl.int64)  # token offsets of out / mid_out
    cur_head = tl.program_id(1) * BLOCK_H + tl.arange(0, BLOCK_H)
    split_kv_id = tl.program_id(2)
    mask_h = cur_head < h_q

    split_topk: tl.constexpr = tl.cdiv(index_topk, NUM_KV_SPLITS)
    split_start = split_kv_id * split_topk
    split_end = tl.minimum(split_start + split_topk, index_topk)

    acc0, acc1, acc2, acc3, e_max, e_sum = _sparse_mla_compute_tile(
        q_buffer,
        k_buffer,
        indices_ptr,
        cur_q,
        cur_head,
        mask_h,
        split_start,
        split_end,
        seq_kv,
        stride_q_token,
        stride_q_head,
        stride_kv_token,
        stride_indices_token,
        sm_scale,
        BLOCK_H,
        BLOCK_N,
        BLOCK_DC,
        BLOCK_DPE,
    )

    # Partial output and natural-log LSE for stage-2 merge.
    # When a split has no valid KV (`e_sum == 0`), guard the divide so the
    # mid buffer holds 0 instead of NaN; otherwise the `0 * NaN = NaN` term
    # in stage 2 would poison every other split.
    e_sum_safe = tl.where(e_sum > 0, e_sum, 1.0)
    base = (
        mid_out_ptr
        + cur_q * stride_mid_token
        + cur_head[:, None] * stride_mid_head
        + split_kv_id * stride_mid_split
    )
    _store_chunks(base, acc0, acc1, acc2, acc3, e_sum_safe, mask_h, BLOCK_DC, False)
    mid_lse_ptr = (
        mid_out_ptr
        + cur_q * stride_mid_token
        + cur_head * stride_mid_head
        + split_kv_id * stride_mid_split
        + BLOCK_DV
    )
    tl.store(mid_lse_ptr, (e_max + tl.log2(e_sum)) * LOGE2, mask=mask_h)


@triton.jit
def _sparse_mla_merge_kernel(
    mid_out_ptr,
    out_ptr,
    h_q,
    stride_mid_token,
    stride_mid_head,
    stride_mid_split,
    stride_out_token,
    stride_out_head,
    NUM_KV_SPLITS: tl.constexpr,
    kv_group_num: tl.constexpr,
    BLOCK_H: tl.constexpr,
    BLOCK_DV: tl.constexpr,
    BLOCK_DV_TILE: tl.constexpr,
):
    """Stage 2: N-way online-softmax merge of per-split `(out, lse)` tiles.

    Grid is `(num_tokens, num_head_groups, num_dv_tiles)`. Each program handles
    `BLOCK_H` heads × `BLOCK_DV_TILE` output-dim lanes. The LSE reduction is
    identical across DV tiles for the same (token, head) — each program
    recomputes it locally, which is cheap (O(NUM_KV_SPLITS) scalars) and
    avoids inter-CTA synchronization.
    """
    cur_q = tl.program_id(0).to(tl.int64)  # token offsets of out / mid_out
    cur_head_id = tl.program_id(1)
    cur_dv_tile = tl.program_id(2)

    VALID_BLOCK_H: tl.constexpr = BLOCK_H if kv_group_num > BLOCK_H else kv_group_num
    cur_head = cur_head_id * VALID_BLOCK_H + tl.arange(0, BLOCK_H)
    mask_h = (cur_head < (cur_head_id + 1) * VALID_BLOCK_H) & (cur_head < h_q)

    offs_dv = cur_dv_tile * BLOCK_DV_TILE + tl.arange(0, BLOCK_DV_TILE)
    mask_dv = offs_dv < BLOCK_DV
    # Finite sentinel — same NaN guard as the split kernel for empty splits.
    e_max = tl.zeros([BLOCK_H], dtype=tl.float32) - 1.0e30
    e_sum = tl.zeros([BLOCK_H], dtype=tl.float32)
    acc = tl.zeros([BLOCK_H, BLOCK_DV_TILE], dtype=tl.float32)

    mid_base_2d = (
        mid_out_ptr + cur_q * stride_mid_token + cur_head[:, None] * stride_mid_head
    )
    mid_lse_1d = (
        mid_out_ptr + cur_q * stride_mid_token + cur_head * stride_mid_head + BLOCK_DV
    )

    for split_kv_id in range(NUM_KV_SPLITS):
        tv = tl.load(
            mid_base_2d + split_kv_id * stride_mid_split + offs_dv[None, :],
            mask=mask_h[:, None] & mask_dv[None, :],
            other=0.0,
        )
        tlogic = tl.load(
            mid_lse_1d + split_kv_id * stride_mid_split,
            mask=mask_h,
            other=-float("inf"),
        )
        n_e_max = tl.maximum(tlogic, e_max)
        old_scale = tl.exp(e_max - n_e_max)
        exp_logic = tl.exp(tlogic - n_e_max)
        acc = acc * old_scale[:, None] + exp_logic[:, None] * tv
        e_sum = e_sum * old_scale + exp_logic
        e_max = n_e_max

    e_sum_safe = tl.where(e_sum > 0, e_sum, 1.0)
    tl.store(
        out_ptr
        + cur_q * stride_out_token
        + cur_head[:, None] * stride_out_head
        + offs_dv[None, :],
        (acc / e_sum_safe[:, None]).to(tl.bfloat16),
        mask=mask_h[:, None] & mask_dv[None, :],
    )


def _floor_power_of_2(n: int) -> int:
    return 1 << (max(1, n).bit_length() - 1)


def _choose_num_kv_splits(
    num_tokens: int, num_head_groups: int, index_topk: int, sm_count: int
) -> int:
    """Pick the smallest power-of-2 split count whose grid covers
    _SPLIT_MIN_FILL of the SMs, at most _MAX_KV_SPLITS and without dropping
    per-split work below _MIN_TOPK_PER_SPLIT. Returns 1 when the single-pass
    grid already does. Reads the policy's module attributes at each call.
    """
    return _kv_splits(
        num_tokens,
        num_head_groups,
        index_topk,
        sm_count,
        _MAX_KV_SPLITS,
        _MIN_TOPK_PER_SPLIT,
        _SPLIT_MIN_FILL,
    )


@functools.lru_cache(maxsize=256)
def _kv_splits(
    num_tokens: int,
    num_head_groups: int,
    index_topk: int,
    sm_count: int,
    max_splits: int,
    min_topk_per_split: int,
    min_fill: float,
) -> int:
    baseline = num_tokens * num_head_groups
    if baseline == 0 or baseline >= min_fill * sm_count:
        return 1
    # Rounded down, so that a split keeps at least min_topk_per_split indices
    # and never exceeds max_splits (the same as rounding up where both are
    # powers of two, as at the defaults).
    most = _floor_power_of_2(min(max_splits, index_topk // min_topk_per_split))
    num_kv_splits = 1
    while num_kv_splits < most and baseline * num_kv_splits < min_fill * sm_count:
        num_kv_splits *= 2
    while num_kv_splits > 1 and index_topk % num_kv_splits != 0:
        num_kv_splits //= 2
    return num_kv_splits


def triton_mla_sparse_attention(
    q: torch.Tensor,
    kv: torch.Tensor,
    indices: torch.Tensor,
    sm_scale: float,
    num_kv_splits: int | None = None,
    sm_count: int | None = None,
) -> torch.Tensor:
    """Sparse MLA attention over topk indices.

    Args:
        q:         [num_tokens, num_heads_q, dim_qk] bf16
        kv:        [seq_kv, num_heads_kv=1, dim_qk] bf16
        indices:   [num_tokens, num_heads_kv=1, topk] int32
        sm_scale:  softmax scale
        num_kv_splits: override auto-heuristic; None/0 = auto, 1 = force single-pass.
        sm_count:  cached device SM count for the split heuristic.

    Returns:
        out:   [num_tokens, num_heads_q, _BLOCK_DV] bf16
    """
    num_tokens, num_heads_q, dim_qk = q.shape
    assert dim_qk == _DIM_QK, (
        f"sparse MLA kernel requires dim_qk={_DIM_QK} (DeepSeek-V3.2 / GLM-5), "
        f"got {dim_qk}"
    )
    assert kv.shape[1] == 1 and kv.shape[2] == _DIM_QK
    index_topk = indices.shape[2]
    assert index_topk % _MIN_BLOCK_N == 0, (
        f"topk ({index_topk}) must be a multiple of the smallest autotune "
        f"BLOCK_N ({_MIN_BLOCK_N})"
    )

    block_h = _block_h(num_heads_q)
    num_head_groups = triton.cdiv(num_heads_q, block_h)

    if num_kv_splits is None or num_kv_splits == 0:
        if sm_count is None:
            sm_count = num_compute_units(q.device.index)
        num_kv_splits = _choose_num_kv_splits(
            num_tokens, num_head_groups, index_topk, sm_count
        )

    out = torch.empty(
        (num_tokens, num_heads_q, _BLOCK_DV),
        dtype=torch.bfloat16,
        device=q.device,
    )

    if num_kv_splits == 1:
        _sparse_mla_kernel_final[(num_tokens, num_head_groups)](
            q_buffer=q,
            k_buffer=kv,
            indices_ptr=indices,
            out_ptr=out,
            seq_kv=kv.shape[0],
            h_q=num_heads_q,
            stride_q_token=q.stride(0),
            stride_q_head=q.stride(1),
            stride_kv_token=kv.stride(0),
            stride_out_token=out.stride(0),
            stride_out_head=out.stride(1),
            stride_indices_token=indices.stride(0),
            sm_scale=sm_scale * LOG2E,
            index_topk=index_topk,
            BLOCK_H=block_h,
            BLOCK_DC=_BLOCK_DC,
            BLOCK_DPE=_BLOCK_DPE,
        )
        return out

    # Split-KV: partial fp32 output + LSE per (token, head, split).
    mid_out = torch.empty(
        (num_tokens, num_heads_q, num_kv_splits, _BLOCK_DV + 1),
        dtype=torch.float32,
        device=q.device,
    )
    _sparse_mla_kernel_split[(num_tokens, num_head_groups, num_kv_splits)](
        q_buffer=q,
        k_buffer=kv,
        indices_ptr=indices,
        mid_out_ptr=mid_out,
        seq_kv=kv.shape[0],
        h_q=num_heads_q,
        stride_q_token=q.stride(0),
        stride_q_head=q.stride(1),
        stride_kv_token=kv.stride(0),
        stride_mid_token=mid_out.stride(0),
        stride_mid_head=mid_out.stride(1),
        stride_mid_split=mid_out.stride(2),
        stride_indices_token=indices.stride(0),
        sm_scale=sm_scale * LOG2E,
        index_topk=index_topk,
        NUM_KV_SPLITS=num_kv_splits,
        BLOCK_H=block_h,
        BLOCK_DC=_BLOCK_DC,
        BLOCK_DPE=_BLOCK_DPE,
        BLOCK_DV=_BLOCK_DV,
        LOGE2=LOGE2,
    )

    _sparse_mla_merge_kernel[(num_tokens, num_heads_q, _NUM_MERGE_DV_TILES)](
        mid_out_ptr=mid_out,
        out_ptr=out,
        h_q=num_heads_q,
        stride_mid_token=mid_out.stride(0),
        stride_mid_head=mid_out.stride(1),
        stride_mid_split=mid_out.stride(2),
        stride_out_token=out.stride(0),
        stride_out_head=out.stride(1),
        NUM_KV_SPLITS=num_kv_splits,
        kv_group_num=num_heads_q,
        BLOCK_H=_MERGE_BLOCK_H,
        BLOCK_DV=_BLOCK_DV,
        BLOCK_DV_TILE=_MERGE_BLOCK_DV_TILE,
        num_warps=2,
    )
    return out
