"""The DSA oracle against the compose's Triton kernels on a GPU, at GLM-5's per-layer shape.

A lab script: `vllm_compose.proof.dsa_oracle` (fp32 torch) against PR #38476's kernels as composed
(`mqa_logits_triton.py`, `triton_mla_sparse_kernel.py`, loaded from `--tree` under `kernel_offsets`' stand-in
`vllm`), for the indexer's paged decode logits and their top-k, the prefill logits, and the sparse-MLA attention:

    python3 lab/device/oracle_kernels.py --tree .devkern/new2 [--sm80-ptx] --out $OUT/oracle.json

Shapes (GLM-5.x, TP1): indexer 32 heads x 128, top-k 2048, block 64 with 0009's 73,728-byte page; decode 4 requests
x next_n 2 at contexts 8,192 / 32,768 / 131,072 / 130,001 (the last not block-aligned), prefill 256 rows over
32,768 keys; sparse MLA 8 tokens x 64 heads x 576 over 200,000 slots, single-pass and split. Each comparison also
runs with a planted fault (indices shifted by one), which its verdict must reject. Kernels alone: no engine.

For a sparse-MLA candidate (lab/candidates/): `--sparse-mla-only` skips the indexer (a tree may hold the sparse-MLA
module alone), `--mla-heads 64,128` adds DeepSeek-V3.2's 128 heads (keys `sparse_mla_h128_...`; 64 keeps the keys
above), `--mla-splits 1,8,64,auto` sets the split counts (default 1,8; `auto` is the kernel's own choice).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parents[1] / "src")]  # sm80_ptx, kernel_offsets; vllm_compose


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tree", type=Path, required=True)
    ap.add_argument("--sm80-ptx", action="store_true")
    ap.add_argument("--sparse-mla-only", action="store_true", help="the sparse-MLA attention alone, no indexer")
    ap.add_argument("--mla-heads", default="64", help="query heads of the sparse-MLA cases, e.g. 64,128")
    ap.add_argument("--mla-splits", default="1,8", help="split counts of the sparse-MLA cases, e.g. 1,8,64,auto")
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    try:
        mla_heads = [int(h) for h in args.mla_heads.split(",")]
        mla_splits = [s if s == "auto" else int(s) for s in args.mla_splits.split(",")]
    except ValueError:
        ap.error(f"--mla-heads {args.mla_heads!r} / --mla-splits {args.mla_splits!r}: want e.g. 64,128 and 1,8,auto")
    compiled: list[dict] = []
    if args.sm80_ptx:
        from sm80_ptx import enable

        enable(compiled)
    import torch
    from kernel_offsets import install_vllm_shim

    from vllm_compose.proof import dsa_oracle as o

    mods = install_vllm_shim(args.tree)
    torch.manual_seed(0)
    dev = "cuda"
    out: dict = {"sm80_ptx": args.sm80_ptx}
    v = lambda verdict: dataclasses.asdict(verdict)  # noqa: E731

    topk = 2048
    if not args.sparse_mla_only:
        out.update(indexer_cases(mods, o, v, topk, dev))
    out.update(sparse_mla_cases(mods, o, v, topk, dev, mla_heads, mla_splits))
    out["compiled"] = compiled
    args.out.write_text(json.dumps(out, indent=1, default=str) + "\n")
    for key, val in out.items():
        if isinstance(val, dict):
            print(key, "passed" if val.get("passed") else "FAILED", {k: val[k] for k in list(val)[:4]})
    return 0


def indexer_cases(mods, o, v, topk: int, dev: str) -> dict:
    """The indexer's paged decode logits and their top-k, and the prefill logits, against the oracle."""
    import torch

    out = {}
    # indexer: paged decode, next_n 2, one request not block-aligned
    heads, dim, bs, page = 32, 128, 64, 73_728
    lens = [8_192, 32_768, 131_072, 130_001]
    next_n = 2
    blocks_per = [math.ceil(n / bs) for n in lens]
    num_blocks = sum(blocks_per) + 16
    cache = o.new_indexer_cache(num_blocks, bs, dim, page_bytes=page, device=dev)
    perm = torch.randperm(num_blocks, device=dev)
    tables = torch.full((len(lens), max(blocks_per)), 0, dtype=torch.int32, device=dev)
    used = 0
    for i, nb in enumerate(blocks_per):
        ids = perm[used : used + nb]
        used += nb
        tables[i, :nb] = ids.to(torch.int32)
        k = (torch.randn(nb * bs, dim, device=dev) * 0.5).to(torch.float8_e4m3fn)
        scale = torch.rand(nb * bs, device=dev) + 0.5
        o.write_indexer_cache(cache, k, scale, ids, bs)
    q = (torch.randn(len(lens), next_n, heads, dim, device=dev) * 0.5).to(torch.float8_e4m3fn)
    w = torch.rand(len(lens) * next_n, heads, device=dev)
    ctx = torch.tensor(lens, dtype=torch.int32, device=dev)
    kv4 = cache[:, : bs * (dim + 4)].view(num_blocks, bs, 1, dim + 4)
    got = mods["mqa_logits_triton"].fp8_paged_mqa_logits_triton(q, kv4, w, ctx, tables, max_model_len=max(lens))
    want = o.paged_decode_logits(q, cache, w, ctx, tables, bs, width=max(lens))
    out["paged_decode_logits"] = v(o.compare_logits(got, want))
    want_top = o.topk_indices(want, topk)
    got_top = o.topk_indices(got, topk)
    out["paged_decode_topk"] = v(o.compare_topk(got_top, want_top, logits=want))
    shifted = torch.where(want_top >= 0, want_top + 1, want_top)
    out["paged_decode_topk_fault_shifted"] = v(o.compare_topk(shifted, want_top, logits=want))

    # indexer: prefill logits, 256 rows over 32,768 keys
    m, n = 256, 32_768
    qp = (torch.randn(m, heads, dim, device=dev) * 0.5).to(torch.float8_e4m3fn)
    kp = (torch.randn(n, dim, device=dev) * 0.5).to(torch.float8_e4m3fn)
    sp = torch.rand(n, device=dev) + 0.5
    wp = torch.rand(m, heads, device=dev)
    ks = torch.zeros(m, dtype=torch.int32, device=dev)
    ke = torch.linspace(n - m + 1, n, m, device=dev).to(torch.int32)
    got = mods["mqa_logits_triton"].fp8_mqa_logits_triton(qp, (kp, sp), wp, ks, ke)
    want = o.prefill_logits(qp, kp, sp, wp, ks, ke)
    out["prefill_logits"] = v(o.compare_logits(got, want))
    return out


def sparse_mla_cases(mods, o, v, topk: int, dev: str, heads_list: list[int], splits_list: list) -> dict:
    """The sparse-MLA attention against the oracle: 8 tokens at each head count, top-k 2048 over 200,000 slots (128
    of each row padded with -1), at each split count (`auto`: the kernel's own choice), and the shifted-indices fault
    single-pass. Keys: `sparse_mla_splits_<s>` at 64 heads, `sparse_mla_h<heads>_splits_<s>` at others."""
    import torch

    out = {}
    tokens, slots = 8, 200_000
    kv = (torch.randn(slots, 1, 576, device=dev) * 0.5).to(torch.bfloat16)
    run = mods["triton_mla_sparse_kernel"].triton_mla_sparse_attention
    sm_scale = 1 / math.sqrt(192 + 64)
    for qheads in heads_list:
        key = "sparse_mla" if qheads == 64 else f"sparse_mla_h{qheads}"
        qa = (torch.randn(tokens, qheads, 576, device=dev) * 0.5).to(torch.bfloat16)
        idx = torch.stack([torch.randperm(slots, device=dev)[:topk] for _ in range(tokens)]).to(torch.int32)
        idx[:, -128:] = -1
        idx = idx[:, None, :].contiguous()
        want_out, _ = o.sparse_mla_attention(qa, kv, idx, sm_scale)
        for splits in splits_list:
            got_out = run(qa, kv, idx, sm_scale, num_kv_splits=None if splits == "auto" else splits)
            out[f"{key}_splits_{splits}"] = v(o.compare_attention(got_out, want_out))
        shifted = torch.where(idx >= 0, (idx + 1) % slots, idx)
        got_out = run(qa, kv, shifted, sm_scale, num_kv_splits=1)
        out[f"{key}_fault_shifted"] = v(o.compare_attention(got_out, want_out))
    return out


if __name__ == "__main__":
    sys.exit(main())
