"""A reference of DeepSeek Sparse Attention (DSA) as GLM-5.x and DeepSeek-V3.2 compute it: pure torch, fp32.

DSA attends in two steps. A small *indexer* scores every earlier token for each query token and keeps the
`index_topk` best; the MLA attention then reads only those tokens. This module computes each step from the model's
definition, independently of any kernel, so that a harness can hold a release's kernels against it per layer:

1. indexer logits, `logits[t, n] = sum_h relu(q[t, h] . k[n]) * k_scale[n] * w[t, h]`, with `-inf` outside the
   causal range; q is fp8 (E4M3FN) or bf16, k is read from fp8 bytes and one fp32 scale per token:
   - `paged_decode_logits`: decode rows (MTP's `next_n` rows per request) over the paged indexer cache;
   - `prefill_logits`: ragged prefill rows, each over its `[ks, ke)` range of a flat key array;
   - `gather_indexer_keys` reads one request's keys from the paged cache (for either form);
2. `topk_indices`: the `index_topk` best keys of each row, `-1` where a row has fewer valid keys;
3. `sparse_mla_attention`: softmax attention of q `[T, H, 576]` over the selected rows of the flat latent KV
   `[S, 1, 576]`, values the first 512 lanes (`kv_lora_rank`); the output and the log-sum-exp.

Comparison helpers (`compare_logits`, `compare_topk`, `compare_attention`) return small verdict dataclasses that
carry the measurement, the thresholds and `passed`; nothing here prints. The default thresholds and what they were
set from are stated next to each constant and in lab/notebook/validation.md ("The DSA oracle").

What each function mirrors is named in its docstring (paths inside a composed vLLM tree). The arithmetic is
written from the definition: every product and sum in fp32 from exactly decoded inputs, in whatever order torch
picks; so the reference differs from a kernel only by the kernel's own roundings and summation order.

fp8 decoding follows the OCP E4M3FN format (torch's `float8_e4m3fn`): codes 0x7f and 0xff are NaN. The Triton
fallback's lookup table maps them to +-480 instead. A quantizer that clamps to +-448 before the cast (as the
indexer's fused q kernel in sparse_attn_indexer.py does) never writes them, so a NaN in the reference logits points
at bytes no such quantizer wrote (an unfilled or overwritten block); `topk_indices` refuses it.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..errors import ComposeError

#: the MLA latent width GLM-5.x and DeepSeek-V3.2 attend over: kv_lora_rank 512 + rope 64 (the Triton sparse-MLA
#: kernel hard-codes both)
KV_LORA_RANK = 512
ROPE_DIM = 64
MLA_QK_DIM = KV_LORA_RANK + ROPE_DIM

#: bytes of one fp32 scale in the indexer cache
SCALE_BYTES = 4

#: how many fp32 elements one chunk of an intermediate [rows, heads, keys] or [rows, top-k, 576] tensor may hold
#: (256 MiB): keeps a 128k-token context within a GPU's or a CPU's memory without changing any result
_CHUNK_ELEMENTS = 1 << 26

# --- default thresholds --------------------------------------------------------------------------------------------
# Set from measurement (tests/tool/test_dsa_oracle.py; lab/notebook/validation.md "The DSA oracle"): the compose's
# Triton kernels in the Triton interpreter on a CPU against this reference, seeded random inputs.

#: indexer logits: the kernels decode the same fp8 bytes exactly to bf16 and accumulate in fp32, so they differ from
#: the reference by summation order alone (measured: 5.6e-8 of the largest |logit| for the paged
#: form, 3.4e-8 for the prefill form; the threshold leaves room for a GPU's other summation order)
LOGITS_RTOL = 1e-4
LOGITS_ATOL = 1e-4

#: top-k: with logits equal to summation noise the sets differ only where two keys tie at the k-th place; a key the
#: kernel picked whose reference logit lies within `TOPK_TIE_TOLERANCE` (relative to the row's largest |logit|) of
#: the reference's k-th logit counts as a hit (measured: recall 1.0 on every row at top-k 8 and 16)
TOPK_MIN_RECALL = 0.999
TOPK_TIE_TOLERANCE = 1e-4

#: sparse MLA: the kernel rounds the softmax weights to bf16 before the value product and its output to bf16, so it
#: sits within a few 2**-9 of the reference, relative to the output's scale (measured: cosine >= 0.999995, max abs
#: error 2.8e-3 of the largest |output|; with every index shifted by one slot: mean cosine 0.03, max error 1.6 of
#: it)
ATTN_MIN_COSINE = 0.9995
ATTN_MAX_REL_ERROR = 1e-2


class DsaOracleError(ComposeError):
    """Inputs the DSA reference cannot read: a wrong shape, dtype, cache layout, block table or index."""


# --- decoding --------------------------------------------------------------------------------------------------------


def decode_fp8(x: torch.Tensor) -> torch.Tensor:
    """fp32 values of `x`: float8_e4m3fn values, or uint8 bytes read as E4M3FN codes; any other float dtype is
    widened as is (bf16 or fp16 q). Exact: every E4M3FN value is an fp32."""
    if x.dtype == torch.uint8:
        return x.view(torch.float8_e4m3fn).float()
    if not x.is_floating_point():
        raise DsaOracleError(f"cannot decode a {x.dtype} tensor", hint="pass fp8 (or its uint8 bytes), bf16 or fp32")
    return x.float()


def _check(cond: bool, message: str, key: str, hint: str | None = None) -> None:
    if not cond:
        raise DsaOracleError(message, key=key, hint=hint)


# --- the indexer cache -----------------------------------------------------------------------------------------------


def _block_bytes(kv_cache: torch.Tensor, block_size: int, head_dim: int) -> torch.Tensor:
    """`[num_blocks, block_size * (head_dim + 4)]` uint8: each block's used bytes, whatever the page stride."""
    _check(kv_cache.dtype == torch.uint8, f"the indexer cache is {kv_cache.dtype}, not uint8", "kv_cache")
    _check(kv_cache.dim() >= 2, f"the indexer cache has {kv_cache.dim()} dimensions, not >= 2", "kv_cache")
    _check(kv_cache.shape[0] > 0, "the indexer cache holds no block", "kv_cache")
    used = block_size * (head_dim + SCALE_BYTES)
    page = kv_cache.stride(0)
    _check(
        page >= used,
        f"page stride {page} bytes is less than a block's {block_size} x ({head_dim} + {SCALE_BYTES}) = {used} bytes",
        "kv_cache",
        hint="check block_size and head_dim against the cache's allocation",
    )
    inner = kv_cache[0].numel()
    _check(
        inner >= used and kv_cache[0].is_contiguous(),
        f"a block of the cache holds {inner} contiguous bytes, not the {used} it needs",
        "kv_cache",
        hint="pass the cache as vLLM allocates it ([num_blocks, block_size, head_dim + 4] or a padded page view)",
    )
    return kv_cache.as_strided((kv_cache.shape[0], used), (page, 1))


def gather_indexer_keys(
    kv_cache: torch.Tensor, block_ids: torch.Tensor, num_tokens: int, block_size: int, head_dim: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """One request's indexer keys, decoded: `(k [num_tokens, head_dim] fp32, k_scale [num_tokens] fp32)`.

    `kv_cache`: uint8, first dimension the blocks, each block at `kv_cache.stride(0)` bytes from the last (a padded
    page allowed): `block_size * head_dim` fp8 bytes (token-major) and then `block_size` fp32 scales. That is the
    layout `indexer_k_quant_and_cache` writes (vllm/_custom_ops.py; the shape from `DeepseekV32IndexerBackend.
    get_kv_cache_shape`, vllm/v1/attention/backends/mla/indexer.py) and `fp8_paged_mqa_logits_triton` re-slices
    (vllm/v1/attention/ops/mqa_logits_triton.py). `block_ids`: the request's block-table row; token i lives in
    block `block_ids[i // block_size]`, slot `i % block_size`."""
    blocks = _block_bytes(kv_cache, block_size, head_dim)
    need = -(-num_tokens // block_size)
    _check(
        block_ids.dim() == 1 and block_ids.numel() >= need,
        f"the block table row holds {block_ids.numel()} entries, {num_tokens} tokens need {need}",
        "block_table",
    )
    ids = block_ids[:need].long()
    if need:
        lo, hi = int(ids.min()), int(ids.max())
        _check(
            lo >= 0 and hi < blocks.shape[0],
            f"block ids {lo}..{hi} outside the cache's {blocks.shape[0]} blocks",
            "block_table",
        )
    rows = blocks[ids]  # [need, used]
    k = rows[:, : block_size * head_dim].reshape(need * block_size, head_dim)
    scale = rows[:, block_size * head_dim :].contiguous().view(torch.float32).reshape(need * block_size)
    return decode_fp8(k[:num_tokens]), scale[:num_tokens].float()


def new_indexer_cache(
    num_blocks: int, block_size: int, head_dim: int, page_bytes: int | None = None, device=None
) -> torch.Tensor:
    """A zeroed indexer cache `[num_blocks, page_bytes]` uint8; `page_bytes` defaults to the unpadded
    `block_size * (head_dim + 4)` (series entry 0009 pads it to the sparse-MLA page, e.g. 73,728 bytes)."""
    used = block_size * (head_dim + SCALE_BYTES)
    page = used if page_bytes is None else page_bytes
    _check(page >= used, f"page_bytes {page} < the {used} bytes a block needs", "page_bytes")
    return torch.zeros(num_blocks, page, dtype=torch.uint8, device=device)


def write_indexer_cache(
    kv_cache: torch.Tensor, k_fp8: torch.Tensor, k_scale: torch.Tensor, block_ids: torch.Tensor, block_size: int
) -> None:
    """Store one request's quantized keys (`k_fp8 [N, head_dim]` float8_e4m3fn or uint8, `k_scale [N]` fp32) into
    `kv_cache` in the layout `gather_indexer_keys` reads: what `indexer_k_quant_and_cache` does after quantizing.
    For building test inputs and constructed models; the oracle itself only reads."""
    n, head_dim = k_fp8.shape
    blocks = _block_bytes(kv_cache, block_size, head_dim)
    need = -(-n // block_size)
    _check(block_ids.numel() >= need, f"{block_ids.numel()} block ids for {n} tokens ({need} blocks)", "block_ids")
    _check(k_scale.shape == (n,), f"k_scale has shape {tuple(k_scale.shape)}, not ({n},)", "k_scale")
    k_bytes = k_fp8.contiguous().view(torch.uint8)
    scale_bytes = k_scale.float().contiguous().view(torch.uint8).reshape(n, SCALE_BYTES)
    for i in range(need):
        rows = slice(i * block_size, min(n, (i + 1) * block_size))
        count = rows.stop - rows.start
        b = int(block_ids[i])
        blocks[b, : count * head_dim] = k_bytes[rows].reshape(-1)
        start = block_size * head_dim
        blocks[b, start : start + count * SCALE_BYTES] = scale_bytes[rows].reshape(-1)


# --- indexer logits --------------------------------------------------------------------------------------------------


def indexer_scores(q: torch.Tensor, k: torch.Tensor, k_scale: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """Unmasked indexer logits `[T, N]` fp32: `sum_h relu(q[t, h] . k[n]) * k_scale[n] * weights[t, h]`.

    `q [T, H, D]` (fp8, its bytes, bf16 or fp32), `k [N, D]` (same), `k_scale [N]`, `weights [T, H]` fp32 with the
    query's scale and the softmax scale already folded in (as `fused_indexer_q_rope_quant` hands them on,
    vllm/model_executor/layers/sparse_attn_indexer.py). The relu is taken after the key's scale, as the kernels
    do; scales are positive, so the order does not change the value."""
    qf, kf = decode_fp8(q), decode_fp8(k)
    _check(qf.dim() == 3, f"q has shape {tuple(q.shape)}, not [T, H, D]", "q")
    _check(kf.dim() == 2 and kf.shape[1] == qf.shape[2], f"k has shape {tuple(k.shape)}, not [N, {qf.shape[2]}]", "k")
    _check(tuple(k_scale.shape) == (kf.shape[0],), f"k_scale has shape {tuple(k_scale.shape)}, not [N]", "k_scale")
    _check(
        tuple(weights.shape) == tuple(qf.shape[:2]),
        f"weights has shape {tuple(weights.shape)}, not {tuple(qf.shape[:2])}",
        "weights",
    )
    t, h, _ = qf.shape
    n = kf.shape[0]
    ks, w = k_scale.float(), weights.float()
    out = torch.empty(t, n, dtype=torch.float32, device=qf.device)
    step = max(1, _CHUNK_ELEMENTS // max(1, h * n))
    for r in range(0, t, step):
        s = torch.einsum("thd,nd->thn", qf[r : r + step], kf) * ks[None, None, :]
        out[r : r + step] = (s.clamp_min(0.0) * w[r : r + step, :, None]).sum(dim=1)
    return out


def paged_decode_logits(
    q: torch.Tensor,
    kv_cache: torch.Tensor,
    weights: torch.Tensor,
    context_lens: torch.Tensor,
    block_tables: torch.Tensor,
    block_size: int,
    width: int | None = None,
) -> torch.Tensor:
    """Decode indexer logits `[B * next_n, width]` fp32 over the paged cache; `-inf` outside the causal range.

    `q [B, next_n, H, D]` fp8 (or its bytes, or bf16), `weights [B * next_n, H]` fp32, `context_lens [B]` (each
    request's length including its `next_n` new tokens), `block_tables [B, max_blocks]`. Row `b * next_n + j` is
    request b's j-th new token, at position `context_len - next_n + j`; key k is valid when
    `k <= context_len - next_n + j` (so `k < context_len`). `width` defaults to the largest context length.

    Mirrors `fp8_paged_mqa_logits_triton` (vllm/v1/attention/ops/mqa_logits_triton.py, PR #38476) and DeepGEMM's
    `fp8_paged_mqa_logits` as `sparse_attn_indexer` calls them for decode (with `clean_logits=True`: every
    invalid column `-inf`); the per-row bound is the one `PrepareUniformDecodeKernel` writes
    (`seq_len - next_n + j + 1` keys, vllm/v1/attention/backends/mla/indexer.py)."""
    _check(q.dim() == 4, f"q has shape {tuple(q.shape)}, not [B, next_n, H, D]", "q")
    b, next_n, h, d = q.shape
    _check(tuple(weights.shape) == (b * next_n, h), f"weights has shape {tuple(weights.shape)}", "weights")
    _check(tuple(context_lens.shape) == (b,), f"context_lens has shape {tuple(context_lens.shape)}", "context_lens")
    _check(
        block_tables.dim() == 2 and block_tables.shape[0] == b, "block_tables is not [B, max_blocks]", "block_tables"
    )
    lens = [int(x) for x in context_lens.tolist()]
    cols = max(lens, default=0) if width is None else width
    _check(cols >= max(lens, default=0), f"width {cols} < the longest context {max(lens)}", "width")
    out = torch.full((b * next_n, cols), float("-inf"), dtype=torch.float32, device=q.device)
    pos = torch.arange(cols, device=q.device)
    for i, ctx in enumerate(lens):
        if ctx <= 0:
            continue
        k, scale = gather_indexer_keys(kv_cache, block_tables[i], ctx, block_size, d)
        rows = slice(i * next_n, (i + 1) * next_n)
        scores = indexer_scores(q[i], k, scale, weights[rows])
        last = ctx - next_n + torch.arange(next_n, device=q.device)  # each row's own position
        valid = pos[None, :ctx] <= last[:, None]
        out[rows, :ctx] = torch.where(valid, scores, torch.tensor(float("-inf"), device=q.device))
    return out


def prefill_logits(
    q: torch.Tensor,
    k: torch.Tensor,
    k_scale: torch.Tensor,
    weights: torch.Tensor,
    cu_seqlen_ks: torch.Tensor,
    cu_seqlen_ke: torch.Tensor,
) -> torch.Tensor:
    """Prefill indexer logits `[M, N]` fp32 over a flat key array; row m is `-inf` outside `[ks[m], ke[m])`.

    `q [M, H, D]` fp8 (or bytes, or bf16), `k [N, D]` fp8 (or bytes), `k_scale [N]` fp32, `weights [M, H]` fp32,
    `cu_seqlen_ks`/`cu_seqlen_ke [M]`: row m's keys are `k[ks[m]:ke[m]]` (its request's keys up to and including
    its own position, gathered into one array per chunk). Mirrors `fp8_mqa_logits_triton`
    (vllm/v1/attention/ops/mqa_logits_triton.py) and DeepGEMM's `fp8_mqa_logits` (full width, column = position in
    the flat array, as the Triton and XPU branches of `sparse_attn_indexer` use them)."""
    m = q.shape[0]
    n = k.shape[0]
    _check(tuple(cu_seqlen_ks.shape) == (m,), f"cu_seqlen_ks has shape {tuple(cu_seqlen_ks.shape)}", "cu_seqlen_ks")
    _check(tuple(cu_seqlen_ke.shape) == (m,), f"cu_seqlen_ke has shape {tuple(cu_seqlen_ke.shape)}", "cu_seqlen_ke")
    ks, ke = cu_seqlen_ks.long().to(q.device), cu_seqlen_ke.long().to(q.device)
    if m:
        _check(
            bool((ks >= 0).all() and (ks <= ke).all() and (ke <= n).all()), "a row's [ks, ke) is not in [0, N]", "ks"
        )
    scores = indexer_scores(q, k, k_scale, weights)
    pos = torch.arange(n, device=q.device)
    valid = (pos[None, :] >= ks[:, None]) & (pos[None, :] < ke[:, None])
    return torch.where(valid, scores, torch.tensor(float("-inf"), device=q.device))


# --- top-k -----------------------------------------------------------------------------------------------------------


def topk_indices(logits: torch.Tensor, topk: int, row_starts: torch.Tensor | None = None) -> torch.Tensor:
    """The `topk` best columns of each row of `logits [T, N]`, `[T, topk]` int64, best first.

    Columns holding `-inf` (outside the row's range) are never chosen; a row with fewer than `topk` finite columns
    is padded with `-1` after its valid ones. Ties: the larger logit first, equal logits by the smaller column
    (a stable order; the kernels' order among exact ties is unspecified, so compare sets with `compare_topk`, not
    positions). With `row_starts [T]`, indices count from each row's start: what `top_k_per_row_prefill` returns
    for prefill rows (csrc/sampler.cu: `index - rowStart`); decode rows start at 0 (request-local positions,
    `top_k_per_row_decode`; the attention backend maps them to cache slots). A NaN logit is refused."""
    _check(logits.dim() == 2, f"logits has shape {tuple(logits.shape)}, not [T, N]", "logits")
    _check(topk > 0, f"topk {topk} is not positive", "topk")
    nan_rows = torch.isnan(logits).any(dim=1).nonzero().flatten()
    if nan_rows.numel():
        raise DsaOracleError(
            f"logits row {int(nan_rows[0])} holds NaN ({nan_rows.numel()} rows do)",
            key="logits",
            hint="NaN comes from fp8 codes 0x7f/0xff, which no quantizer writes: check the cache and the block table",
        )
    t, n = logits.shape
    out = torch.full((t, topk), -1, dtype=torch.long, device=logits.device)
    if n == 0:
        return out
    values, cols = torch.sort(logits.float(), dim=1, descending=True, stable=True)
    kk = min(topk, n)
    values, cols = values[:, :kk], cols[:, :kk]
    if row_starts is not None:
        _check(tuple(row_starts.shape) == (t,), f"row_starts has shape {tuple(row_starts.shape)}", "row_starts")
        cols = cols - row_starts.long().to(cols.device)[:, None]
    out[:, :kk] = torch.where(torch.isfinite(values), cols, torch.full_like(cols, -1))
    return out


# --- sparse MLA ------------------------------------------------------------------------------------------------------


def sparse_mla_attention(
    q: torch.Tensor, kv: torch.Tensor, indices: torch.Tensor, sm_scale: float, kv_lora_rank: int = KV_LORA_RANK
) -> tuple[torch.Tensor, torch.Tensor]:
    """Softmax attention over the selected latent rows: `(out [T, H, kv_lora_rank] fp32, lse [T, H] fp32)`.

    `q [T, H, 576]` (the absorbed query: 512 latent + 64 rope lanes), `kv [S, 1, 576]` (the flat latent cache, one
    row per slot), `indices [T, 1, topk]` slots into kv, `-1` for padding (skipped). For each token t and head h:
    `s_i = (q[t, h] . kv[idx_i]) * sm_scale`, `out = sum_i softmax(s)_i * kv[idx_i, :kv_lora_rank]`,
    `lse = log(sum_i exp(s_i))` (natural log). A token with no valid index gets out 0 and lse `-inf` (the kernel
    writes 0). An index below -1 or at or past S is refused (the kernel would mask it silently; here it is the
    upstream slot mapping's bug to report). A slot selected twice counts twice, as in the kernel.

    Mirrors `triton_mla_sparse_attention` (vllm/v1/attention/ops/triton_mla_sparse_kernel.py, PR #38476; its
    split-KV merge returns the same value) and FlashMLA's sparse prefill/decode as `TritonMLASparseImpl` /
    `FlashMLASparseImpl` call them."""
    _check(q.dim() == 3, f"q has shape {tuple(q.shape)}, not [T, H, D]", "q")
    t, h, dqk = q.shape
    _check(
        kv.dim() == 3 and kv.shape[1] == 1 and kv.shape[2] == dqk,
        f"kv has shape {tuple(kv.shape)}, not [S, 1, {dqk}]",
        "kv",
    )
    _check(indices.dim() == 3 and indices.shape[:2] == (t, 1), f"indices has shape {tuple(indices.shape)}", "indices")
    _check(0 < kv_lora_rank <= dqk, f"kv_lora_rank {kv_lora_rank} not in (0, {dqk}]", "kv_lora_rank")
    s = kv.shape[0]
    idx = indices[:, 0, :].long().to(q.device)
    bad = (idx < -1) | (idx >= s)
    if bool(bad.any()):
        row, col = (int(x) for x in bad.nonzero()[0])
        raise DsaOracleError(
            f"token {row}'s index {int(idx[row, col])} (top-k slot {col}) is outside the KV's {s} slots and not -1",
            key="indices",
            hint="the top-k indices must be cache slots (after the block-table mapping) or -1",
        )
    topk = idx.shape[1]
    flat = kv[:, 0, :]
    out = torch.zeros(t, h, kv_lora_rank, dtype=torch.float32, device=q.device)
    lse = torch.full((t, h), float("-inf"), dtype=torch.float32, device=q.device)
    step = max(1, _CHUNK_ELEMENTS // max(1, topk * dqk))
    for r in range(0, t, step):
        rows = idx[r : r + step]
        valid = rows >= 0
        picked = flat[rows.clamp_min(0)].float()  # [t', topk, dqk]
        scores = torch.einsum("thd,tkd->thk", q[r : r + step].float(), picked) * sm_scale
        scores = scores.masked_fill(~valid[:, None, :], float("-inf"))
        row_lse = torch.logsumexp(scores, dim=-1)  # -inf where no index is valid
        has = torch.isfinite(row_lse)
        p = torch.where(has[..., None], torch.exp(scores - row_lse[..., None]), torch.zeros_like(scores))
        out[r : r + step] = torch.einsum("thk,tkd->thd", p, picked[..., :kv_lora_rank])
        lse[r : r + step] = row_lse
    return out, lse


# --- comparisons -----------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class LogitsVerdict:
    """Indexer logits from a kernel against the reference."""

    #: largest |got - want| over the columns both hold finite
    max_abs_error: float
    #: that error relative to the largest finite |want| (0 when there is none)
    max_rel_error: float
    #: columns finite in one and not in the other (a causal-mask disagreement)
    mask_mismatches: int
    atol: float
    rtol: float
    passed: bool


def compare_logits(
    got: torch.Tensor, want: torch.Tensor, atol: float = LOGITS_ATOL, rtol: float = LOGITS_RTOL
) -> LogitsVerdict:
    """`got` passes when it is finite exactly where `want` is and `|got - want| <= atol + rtol * max|want|` on those
    columns (the tolerance scales with the largest logit: the error of a sum of products is relative to the sum of
    the magnitudes, not to each small result)."""
    _check(got.shape == want.shape, f"got {tuple(got.shape)} vs want {tuple(want.shape)}", "logits")
    g, w = got.float(), want.float()
    fg, fw = torch.isfinite(g), torch.isfinite(w)
    mismatches = int((fg != fw).sum())
    both = fg & fw
    err = (g[both] - w[both]).abs()
    max_err = float(err.max()) if err.numel() else 0.0
    scale = float(w[fw].abs().max()) if bool(fw.any()) else 0.0
    rel = max_err / scale if scale else 0.0
    passed = mismatches == 0 and max_err <= atol + rtol * scale
    return LogitsVerdict(max_err, rel, mismatches, atol, rtol, passed)


def _distinct_valid(sorted_rows: torch.Tensor) -> torch.Tensor:
    """Mask of the entries of row-sorted indices that are not -1 and not a repeat of the entry before."""
    first = torch.ones_like(sorted_rows, dtype=torch.bool)
    first[:, 1:] = sorted_rows[:, 1:] != sorted_rows[:, :-1]
    return first & (sorted_rows != -1)


def _hits(got: torch.Tensor, want: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """`(g, g_ok, in_want)`: got's rows sorted, the mask of their distinct valid entries, and which of those are in
    the same row of want (by binary search in want's sorted row)."""
    _check(got.dim() == 2 and want.dim() == 2, "top-k index sets must be [T, k]", "indices")
    _check(got.shape[0] == want.shape[0], f"{got.shape[0]} rows vs {want.shape[0]}", "indices")
    g = torch.sort(got.long(), dim=1).values
    w = torch.sort(want.long().to(g.device), dim=1).values.contiguous()
    g_ok = _distinct_valid(g)
    if w.shape[1] == 0:
        return g, g_ok, torch.zeros_like(g_ok)
    pos = torch.searchsorted(w, g.contiguous()).clamp_max(w.shape[1] - 1)
    return g, g_ok, g_ok & (w.gather(1, pos) == g)


def topk_recall(got: torch.Tensor, want: torch.Tensor) -> torch.Tensor:
    """Per row, `|got ∩ want| / |want|` over the indices other than -1 (as sets: order and repeats do not count),
    `[T]` fp32. A row where `want` has no index scores 1.0 when `got` has none either, else 0.0."""
    _, g_ok, in_want = _hits(got, want)
    w_count = _distinct_valid(torch.sort(want.long(), dim=1).values).sum(dim=1).to(g_ok.device)
    hits = in_want.sum(dim=1)
    empty = torch.where(g_ok.any(dim=1), 0.0, 1.0)
    return torch.where(w_count > 0, hits / w_count.clamp_min(1), empty).float().cpu()


@dataclass(frozen=True)
class TopkVerdict:
    """A kernel's top-k index sets against the reference's."""

    rows: int
    #: recall per the plain definition, mean and worst row
    mean_recall: float
    min_recall: float
    #: recall where a picked key within the tie tolerance of the reference's k-th logit also counts (equals
    #: min_recall when no reference logits were given)
    min_tie_recall: float
    #: the row with the lowest tie-aware recall
    worst_row: int
    min_recall_threshold: float
    tie_tolerance: float
    passed: bool


def compare_topk(
    got: torch.Tensor,
    want: torch.Tensor,
    logits: torch.Tensor | None = None,
    row_starts: torch.Tensor | None = None,
    min_recall: float = TOPK_MIN_RECALL,
    tie_tolerance: float = TOPK_TIE_TOLERANCE,
) -> TopkVerdict:
    """Recall of `got [T, k]` against `want [T, k]` (both -1 padded). With the reference `logits [T, N]` (and the
    `row_starts` the indices count from, as in `topk_indices`), a picked key that the reference left out counts
    as a hit when its reference logit is at least the reference's k-th logit minus `tie_tolerance` times the row's
    largest |logit|: two keys tied at the boundary are equally right. Passes when the worst row's tie-aware recall
    is at least `min_recall`."""
    plain = topk_recall(got, want)
    tie = plain.clone()
    if logits is not None:
        lg = logits.float()
        _check(lg.dim() == 2 and lg.shape[0] == got.shape[0], f"logits has shape {tuple(lg.shape)}", "logits")
        starts = torch.zeros(got.shape[0], dtype=torch.long, device=lg.device)
        if row_starts is not None:
            starts = row_starts.long().to(lg.device)
        n = lg.shape[1]

        def logit_at(idx: torch.Tensor) -> torch.Tensor:
            """The reference logit of each index (-inf for -1 or an index outside the row)."""
            col = idx.to(lg.device) + starts[:, None]
            ok = (idx.to(lg.device) != -1) & (col >= 0) & (col < n)
            vals = lg.gather(1, col.clamp(0, max(n - 1, 0)))
            return torch.where(ok, vals, torch.full_like(vals, float("-inf")))

        g, g_ok, in_want = _hits(got.to(lg.device), want.to(lg.device))
        w_ok = _distinct_valid(torch.sort(want.long().to(lg.device), dim=1).values)
        w_count = w_ok.sum(dim=1)
        kth = torch.where(want.to(lg.device) != -1, logit_at(want.long()), torch.tensor(float("inf"), device=lg.device))
        kth = kth.min(dim=1).values
        finite = torch.where(torch.isfinite(lg), lg.abs(), torch.zeros_like(lg))
        slack = tie_tolerance * finite.max(dim=1).values
        tied = g_ok & ~in_want & (logit_at(g) >= (kth - slack)[:, None])
        hits = (in_want | tied).sum(dim=1)
        tie_rows = torch.clamp(hits / w_count.clamp_min(1), max=1.0).float().cpu()
        tie = torch.where(w_count.cpu() > 0, tie_rows, plain)
    rows = got.shape[0]
    worst = int(torch.argmin(tie)) if rows else 0
    min_tie = float(tie.min()) if rows else 1.0
    return TopkVerdict(
        rows=rows,
        mean_recall=float(plain.mean()) if rows else 1.0,
        min_recall=float(plain.min()) if rows else 1.0,
        min_tie_recall=min_tie,
        worst_row=worst,
        min_recall_threshold=min_recall,
        tie_tolerance=tie_tolerance,
        passed=min_tie >= min_recall,
    )


def attention_metrics(got: torch.Tensor, want: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Per token and head of `[T, H, D]` outputs: `(cosine [T, H], max abs error [T, H])`. Two zero vectors (a token
    with no valid index) have cosine 1; a zero against a non-zero vector has cosine 0."""
    _check(got.shape == want.shape, f"got {tuple(got.shape)} vs want {tuple(want.shape)}", "out")
    g, w = got.float(), want.float()
    dot = (g * w).sum(-1)
    ng, nw = g.norm(dim=-1), w.norm(dim=-1)
    both_zero = (ng == 0) & (nw == 0)
    cos = torch.where(both_zero, torch.ones_like(dot), dot / (ng * nw).clamp_min(torch.finfo(torch.float32).tiny))
    return cos, (g - w).abs().amax(dim=-1)


@dataclass(frozen=True)
class AttentionVerdict:
    """A kernel's sparse-MLA output against the reference's."""

    min_cosine: float
    mean_cosine: float
    #: largest |got - want| over every token, head and lane
    max_abs_error: float
    #: that error relative to the largest |want| (the output is a convex combination of values, so this is the
    #: values' scale; 0 when the output is all zero)
    max_rel_error: float
    #: (token, head) of the lowest cosine
    worst: tuple[int, int]
    min_cosine_threshold: float
    max_rel_error_threshold: float
    passed: bool


def compare_attention(
    got: torch.Tensor,
    want: torch.Tensor,
    min_cosine: float = ATTN_MIN_COSINE,
    max_rel_error: float = ATTN_MAX_REL_ERROR,
) -> AttentionVerdict:
    """Passes when every token and head has cosine >= `min_cosine` and every |got - want| is at most
    `max_rel_error` times the largest |want| (the kernel's bf16 roundings are relative to the values' scale, not
    to each lane). NaN fails."""
    cos, err = attention_metrics(got, want)
    if cos.numel() == 0:
        return AttentionVerdict(1.0, 1.0, 0.0, 0.0, (0, 0), min_cosine, max_rel_error, True)
    cos_nan = torch.nan_to_num(cos, nan=-2.0)
    flat = int(torch.argmin(cos_nan))
    worst = (flat // cos.shape[1], flat % cos.shape[1])
    min_cos = float(cos_nan.min())
    max_err = float(torch.nan_to_num(err, nan=float("inf")).max())
    scale = float(want.float().abs().max())
    rel = max_err / scale if scale else (0.0 if max_err == 0 else float("inf"))
    return AttentionVerdict(
        min_cosine=min_cos,
        mean_cosine=float(cos.mean()),
        max_abs_error=max_err,
        max_rel_error=rel,
        worst=worst,
        min_cosine_threshold=min_cosine,
        max_rel_error_threshold=max_rel_error,
        passed=min_cos >= min_cosine and rel <= max_rel_error,
    )
