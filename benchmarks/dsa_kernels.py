"""Time the compose's DSA Triton kernels at GLM-5.x / DeepSeek-V3.2 per-rank shapes, against the HBM limit.

PR #38476's kernels as composed (`mqa_logits_triton.py`: the indexer's paged decode logits; `triton_mla_sparse_kernel.py`:
the sparse-MLA decode attention), loaded from a tree without vLLM (`lab/device/kernel_offsets.install_vllm_shim`) and
timed with `triton.testing.do_bench` on a GPU, as Triton builds them for that GPU or, with `--sm80-ptx`, as an A100's
sm_80 PTX (`lab/device/sm80_ptx.py`). Each row gives the time, the bytes the kernel must move at least (inputs read
once, outputs written once) and that as a share of `--peak-gbs` (H200: 4,800 GB/s).

    python3 benchmarks/dsa_kernels.py --tree T [--tree T2 ...] [--sm80-ptx] --out dsa_kernels.json

Each `--tree` is timed on the same inputs in the same run, its rows labelled `tree` (the folder's name), so a series
entry's before and after are one ratio. The paged logits of every tree after the first also record how far their
logits are from the first tree's (`vs_first_tree`: masks equal, max |difference|). `--paged-blocks-per-prog 1,2,4`
times a tree whose kernel has `_PAGED_BLOCKS_PER_PROG` (series entry 0040) at each value, labelled `tree@bppN`.

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
sys.path[:0] = [str(REPO / "lab" / "device")]

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
    ap.add_argument("--tree", type=Path, action="append", required=True, help="a tree root holding vllm/ (repeat)")
    ap.add_argument("--paged-blocks-per-prog", default="", help="e.g. 1,2,4: the paged logits at each (entry 0040)")
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

    trees = [(tree.name, install_vllm_shim(tree)) for tree in args.tree]
    bpps = [int(b) for b in args.paged_blocks_per_prog.split(",") if b]
    dev = "cuda"
    rows: list[dict] = []

    def record(row: dict) -> None:
        row["gbs"] = row["bytes"] / row["ms"] / 1e6
        row["share_of_peak"] = row["gbs"] / args.peak_gbs
        rows.append(row)
        doc = {"sm80_ptx": args.sm80_ptx, "peak_gbs": args.peak_gbs, "rows": rows, "compiled": compiled}
        args.out.write_text(json.dumps(doc, indent=1) + "\n")
        print(
            f"{row['tree']:<16} {row['kernel']:<22} {row['shape']:<44} {row['ms'] * 1e3:9.1f} us "
            f"{row['share_of_peak']:6.1%}",
            flush=True,
        )

    def paged_variants():
        """(label, module, blocks per program or None) for each tree, and each --paged-blocks-per-prog value."""
        for label, mods in trees:
            mod = mods["mqa_logits_triton"]
            if bpps and hasattr(mod, "_PAGED_BLOCKS_PER_PROG"):
                yield from ((f"{label}@bpp{b}", mod, b) for b in bpps)
            else:
                yield label, mod, None

    def agreement(got, first) -> dict:
        same_mask = bool(torch.equal(torch.isfinite(got), torch.isfinite(first)))
        finite = torch.isfinite(first) & torch.isfinite(got)
        diff = float((got[finite] - first[finite]).abs().max()) if finite.any() else 0.0
        return {"masks_equal": same_mask, "max_abs_diff": diff, "max_abs_first": float(first[finite].abs().max())}

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
                moved = batch * ctx * (HEAD_DIM + 4) + batch * next_n * ctx * 4
                first = None
                for tree, mod, bpp in paged_variants():
                    if bpp is not None:
                        mod._PAGED_BLOCKS_PER_PROG = bpp
                    run = functools.partial(
                        mod.fp8_paged_mqa_logits_triton, q, kv, w, lens, tables, max_model_len=ctx, clean_logits=False
                    )
                    row = {
                        "tree": tree,
                        "kernel": "indexer paged logits",
                        "shape": f"{label} {heads}h ctx {ctx} B {batch} next_n {next_n}",
                        "ms": do_bench(run),
                        "bytes": moved,
                    }
                    got = run()
                    if first is None:
                        first = got
                    else:
                        row["vs_first_tree"] = agreement(got, first)
                    record(row)
                del pool, kv, first

    slots = 600_000
    kv = (torch.randn(slots, 1, 576, device=dev) * 0.5).to(torch.bfloat16)
    for label, heads in MLA:
        for n in MLA_ROWS:
            q = (torch.randn(n, heads, 576, device=dev) * 0.5).to(torch.bfloat16)
            idx = torch.randint(0, slots, (n, 1, TOPK), dtype=torch.int32, device=dev)
            moved = n * TOPK * (576 * 2 + 4) + n * heads * (576 + 512) * 2
            for tree, mods in trees:
                mla = mods["triton_mla_sparse_kernel"].triton_mla_sparse_attention
                record(
                    {
                        "tree": tree,
                        "kernel": "sparse MLA decode",
                        "shape": f"{label} {heads}h top-k {TOPK} rows {n}",
                        "ms": do_bench(functools.partial(mla, q, kv, idx, 0.0625)),
                        "bytes": moved,
                    }
                )
    return 0


if __name__ == "__main__":
    sys.exit(main())
