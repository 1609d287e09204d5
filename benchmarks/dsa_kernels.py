"""Time the compose's DSA Triton kernels at GLM-5.x / DeepSeek-V3.2 per-rank shapes, against the HBM limit.

PR #38476's kernels as composed (`mqa_logits_triton.py`: the indexer's paged decode logits; `triton_mla_sparse_kernel.py`:
the sparse-MLA decode attention), loaded from a tree without vLLM (`lab/device/kernel_offsets.install_vllm_shim`) and
timed with `triton.testing.do_bench` on a GPU, as Triton builds them for that GPU or, with `--sm80-ptx`, as an A100's
sm_80 PTX (`lab/device/sm80_ptx.py`). Each row gives the time, the bytes the kernel must move at least (inputs read
once, outputs written once) and that as a share of `--peak-gbs` (H200: 4,800 GB/s).

    python3 benchmarks/dsa_kernels.py --tree T [--sm80-ptx] --out dsa_kernels.json

Rows are written to --out as they finish, so a run cut short keeps what it measured. Not yet here (issue 31): top-k,
the prefill kernels, the fused Q / norm-rope kernels, the native Hopper kernels side by side.
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO / "device")]

#: (label, indexer heads) x contexts x (batch, next_n) for the paged decode logits
INDEXER = [("GLM-5 / DSv3.2 indexer", 32)]
CONTEXTS = [8_192, 32_768, 131_072]
DECODE = [(1, 1), (8, 2), (32, 2), (64, 1)]
#: (label, query heads per rank) x query rows for the sparse-MLA decode
MLA = [("GLM-5 TP1", 64), ("DSv3.2 TP1", 128), ("GLM-5 TP8", 8), ("DSv3.2 TP8", 16)]
MLA_ROWS = [1, 8, 32, 64]
TOPK, HEAD_DIM, BLOCK, PAGE = 2048, 128, 64, 73_728


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tree", type=Path, required=True)
    ap.add_argument("--sm80-ptx", action="store_true")
    ap.add_argument("--peak-gbs", type=float, default=4800.0)
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    compiled: list[dict] = []
    if args.sm80_ptx:
        from sm80_ptx import enable

        enable(compiled)
    import torch
    from kernel_offsets import install_vllm_shim
    from triton.testing import do_bench

    mods = install_vllm_shim(args.tree)
    dev = "cuda"
    rows: list[dict] = []

    def record(row: dict) -> None:
        row["gbs"] = row["bytes"] / row["ms"] / 1e6
        row["share_of_peak"] = row["gbs"] / args.peak_gbs
        rows.append(row)
        doc = {"sm80_ptx": args.sm80_ptx, "peak_gbs": args.peak_gbs, "rows": rows, "compiled": compiled}
        args.out.write_text(json.dumps(doc, indent=1) + "\n")
        print(
            f"{row['kernel']:<22} {row['shape']:<44} {row['ms'] * 1e3:9.1f} us {row['share_of_peak']:6.1%}", flush=True
        )

    paged = mods["mqa_logits_triton"].fp8_paged_mqa_logits_triton
    for label, heads in INDEXER:
        for ctx in CONTEXTS:
            for batch, next_n in DECODE:
                nb = math.ceil(ctx / BLOCK)
                pool = torch.randint(0, 255, (batch * nb + 1, PAGE), dtype=torch.uint8, device=dev)
                pool.view(-1)[:] &= 0x77  # finite fp8 bytes and small scales
                kv = pool[:, : BLOCK * (HEAD_DIM + 4)].view(-1, BLOCK, 1, HEAD_DIM + 4)
                tables = torch.randperm(batch * nb, device=dev).to(torch.int32).view(batch, nb)
                q = torch.randn(batch, next_n, heads, HEAD_DIM, device=dev).to(torch.float8_e4m3fn)
                w = torch.rand(batch * next_n, heads, device=dev)
                lens = torch.full((batch,), ctx, dtype=torch.int32, device=dev)
                ms = do_bench(functools.partial(paged, q, kv, w, lens, tables, max_model_len=ctx, clean_logits=False))
                moved = batch * ctx * (HEAD_DIM + 4) + batch * next_n * ctx * 4
                record(
                    {
                        "kernel": "indexer paged logits",
                        "shape": f"{label} {heads}h ctx {ctx} B {batch} next_n {next_n}",
                        "ms": ms,
                        "bytes": moved,
                    }
                )
                del pool, kv

    mla = mods["triton_mla_sparse_kernel"].triton_mla_sparse_attention
    slots = 600_000
    kv = (torch.randn(slots, 1, 576, device=dev) * 0.5).to(torch.bfloat16)
    for label, heads in MLA:
        for n in MLA_ROWS:
            q = (torch.randn(n, heads, 576, device=dev) * 0.5).to(torch.bfloat16)
            idx = torch.randint(0, slots, (n, 1, TOPK), dtype=torch.int32, device=dev)
            ms = do_bench(functools.partial(mla, q, kv, idx, 0.0625))
            moved = n * TOPK * (576 * 2 + 4) + n * heads * (576 + 512) * 2
            record(
                {
                    "kernel": "sparse MLA decode",
                    "shape": f"{label} {heads}h top-k {TOPK} rows {n}",
                    "ms": ms,
                    "bytes": moved,
                }
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
