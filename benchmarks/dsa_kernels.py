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
Likewise `--mla-max-block-h 16,32,64` times a sparse-MLA kernel that has `_MAX_BLOCK_H` (heads a program; the candidate
in lab/candidates/) at each value, labelled `tree@bhN`. The sparse-MLA rows record each tree's largest |difference|
from the first tree's output (`vs_first_tree`) and the autotuned kernels' chosen config and, where a row's call
tuned them, every config's time (`autotune`). `--mla-only` times the sparse-MLA decode rows alone and FlashMLA's
sparse kernel on the same shapes where `--native` has it (no paged logits, no other section), to spend GPU minutes on
a sparse-MLA candidate.

Rows are written to --out as they finish, so a run cut short keeps what it measured. Further sections, each guarded
so that a kernel that fails records a row saying why and the run goes on: the prefill indexer logits
(`fp8_mqa_logits_triton`, 4,096 causal query rows over 8k / 32k / 128k keys, with FLOPs beside the bytes), the paged
decode logits and the sparse-MLA decode at MTP rows (next_n 3 and 4: MTP 2 and 3), and the native Hopper kernels on
the same inputs where the stock wheel's compiled objects are found under `--native DIR` (FlashMLA's sparse kernel
`torch.ops._flashmla_C.sparse_prefill_fwd`, which vLLM's FLASHMLA_SPARSE backend runs on a bf16 KV cache, and
DeepGEMM's `fp8_paged_mqa_logits`); a kernel that cannot run there gives rows "not available: <the error>", found by
trying. Not yet here (issue 31): top-k, the sparse-MLA prefill, the fused Q / norm-rope kernels.

    python3 benchmarks/dsa_kernels.py --tree /tmp/vc/composed --native .devnative/vllm --out dsa_kernels.json
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
#: the device scripts (`kernel_offsets`, `sm80_ptx`)
sys.path[:0] = [str(REPO / "lab" / "device")]

#: (label, indexer heads) x contexts x (batch, next_n) for the paged decode logits
INDEXER = [("GLM-5 / DSv3.2 indexer", 32)]
CONTEXTS = [8_192, 32_768, 131_072]
DECODE = [(1, 1), (8, 2), (32, 2), (64, 1)]
#: (label, query heads per rank) x query rows for the sparse-MLA decode
MLA = [("GLM-5 TP1", 64), ("DSv3.2 TP1", 128), ("GLM-5 TP8", 8), ("DSv3.2 TP8", 16)]
MLA_ROWS = [1, 8, 32, 64]
#: slots of the flat latent cache the sparse-MLA rows select from
MLA_SLOTS = 600_000
TOPK, HEAD_DIM, BLOCK, PAGE = 2048, 128, 64, 73_728
#: the MLA latent a sparse-MLA kernel reads per KV slot (kv_lora 512 + rope 64, bf16) and the value width it writes
MLA_QK_DIM, MLA_V_DIM = 576, 512


def paged_logits_bytes(batch: int, ctx: int, next_n: int, head_dim: int = HEAD_DIM) -> int:
    """The least the paged decode logits must move: each request's K cache read once (`head_dim` fp8 bytes and one
    fp32 scale per token) and one fp32 logit written per query row and key (the query and weights, under 0.1%, are
    not counted)."""
    return batch * ctx * (head_dim + 4) + batch * next_n * ctx * 4


def sparse_mla_decode_bytes(rows: int, heads: int, topk: int = TOPK) -> int:
    """The least the sparse-MLA decode must move: per query row its top-k latents (bf16) and their int32 indices
    read, and per head the bf16 query read and the bf16 output written."""
    return rows * topk * (MLA_QK_DIM * 2 + 4) + rows * heads * (MLA_QK_DIM + MLA_V_DIM) * 2


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tree", type=Path, action="append", required=True, help="a tree root holding vllm/ (repeat)")
    ap.add_argument("--paged-blocks-per-prog", default="", help="e.g. 1,2,4: the paged logits at each (entry 0040)")
    ap.add_argument("--mla-max-block-h", default="", help="e.g. 16,32,64: the sparse MLA at each (lab/candidates/)")
    ap.add_argument("--mla-only", action="store_true", help="time only the sparse-MLA decode rows")
    ap.add_argument("--sm80-ptx", action="store_true")
    ap.add_argument("--peak-gbs", type=float, default=4800.0)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument(
        "--native",
        type=Path,
        default=Path("/tmp/vc/stock/vllm"),
        help="the stock wheel's vllm/ folder holding _flashmla_C.abi3.so and third_party/deep_gemm (default: the "
        "staged stock tree; lab/device/stage.py carries neither unless asked)",
    )
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
    block_hs = [int(b) for b in args.mla_max_block_h.split(",") if b]
    dev = "cuda"
    rows: list[dict] = []

    def record(row: dict) -> None:
        row.setdefault("tree", trees[0][0])  # the guarded sections time the first tree
        if row.get("ms") is None:  # a guarded section's row for a kernel that did not run: `status` says why
            rows.append(row)
            doc = {"sm80_ptx": args.sm80_ptx, "peak_gbs": args.peak_gbs, "rows": rows, "compiled": compiled}
            args.out.write_text(json.dumps(doc, indent=1) + "\n")
            print(f"{row['kernel']:<22} {row['shape']:<44} {row['status']}", flush=True)
            return
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

    def agreement(got, first) -> dict:
        same_mask = bool(torch.equal(torch.isfinite(got), torch.isfinite(first)))
        finite = torch.isfinite(first) & torch.isfinite(got)
        diff = float((got[finite] - first[finite]).abs().max()) if finite.any() else 0.0
        return {"masks_equal": same_mask, "max_abs_diff": diff, "max_abs_first": float(first[finite].abs().max())}

    for label, heads in [] if args.mla_only else INDEXER:
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
                moved = paged_logits_bytes(batch, ctx, next_n)
                first = None
                for tree, mod, bpp in swept(trees, "mqa_logits_triton", "_PAGED_BLOCKS_PER_PROG", bpps, "bpp"):
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

    time_mla_decode(trees, block_hs, record, do_bench, torch, dev)
    if args.mla_only:
        time_flashmla_sparse(record, do_bench, torch, args.native)
        return 0
    extra_sections(trees[0][1], record, args.native)
    return 0


def swept(trees, kernel: str, knob: str, values: list[int], tag: str):
    """(label, module, value or None) for each tree's `kernel` module: once as it is, or, where the module has the
    attribute `knob` and `values` are given, once per value, labelled `tree@<tag><value>` (the caller sets the
    attribute before timing: `--paged-blocks-per-prog` sweeps entry 0040's `_PAGED_BLOCKS_PER_PROG`,
    `--mla-max-block-h` the sparse-MLA candidate's `_MAX_BLOCK_H`)."""
    for label, mods in trees:
        mod = mods[kernel]
        if values and hasattr(mod, knob):
            yield from ((f"{label}@{tag}{v}", mod, v) for v in values)
        else:
            yield label, mod, None


def autotuned(mod) -> dict:
    """The config each autotuned kernel of `mod` ran last, and its per-config times where that call tuned it (Triton's
    Autotuner keeps `best_config` and `configs_timings`); call `forget_autotuned` before the timed call."""
    out = {}
    for name, obj in vars(mod).items():
        if getattr(obj, "best_config", None) is not None and hasattr(obj, "configs"):
            entry = {"config": str(obj.best_config)}
            timings = getattr(obj, "configs_timings", None)
            if timings:
                entry["timings"] = {str(c): t for c, t in timings.items()}
            out[name] = entry
    return out


def forget_autotuned(mod) -> None:
    for obj in vars(mod).values():
        if hasattr(obj, "best_config") and hasattr(obj, "configs"):
            obj.best_config = None
            obj.configs_timings = None


def time_mla_decode(trees, block_hs, record, do_bench, torch, dev: str = "cuda") -> None:
    """The sparse-MLA decode rows: MLA heads x MLA_ROWS query rows, top-k TOPK over a flat MLA_SLOTS latent cache."""
    slots = MLA_SLOTS
    kv = (torch.randn(slots, 1, MLA_QK_DIM, device=dev) * 0.5).to(torch.bfloat16)
    for label, heads in MLA:
        for n in MLA_ROWS:
            q = (torch.randn(n, heads, MLA_QK_DIM, device=dev) * 0.5).to(torch.bfloat16)
            idx = torch.randint(0, slots, (n, 1, TOPK), dtype=torch.int32, device=dev)
            moved = sparse_mla_decode_bytes(n, heads, TOPK)
            first = None
            for tree, mod, block_h in swept(trees, "triton_mla_sparse_kernel", "_MAX_BLOCK_H", block_hs, "bh"):
                if block_h is not None:
                    mod._MAX_BLOCK_H = block_h
                run = functools.partial(mod.triton_mla_sparse_attention, q, kv, idx, 0.0625)
                forget_autotuned(mod)
                row = {
                    "tree": tree,
                    "kernel": "sparse MLA decode",
                    "shape": f"{label} {heads}h top-k {TOPK} rows {n}",
                    "ms": do_bench(run),
                    "bytes": moved,
                    "autotune": autotuned(mod),
                }
                got = run().float()
                if first is None:
                    first = got
                else:
                    row["vs_first_tree"] = {
                        "max_abs_diff": float((got - first).abs().max()),
                        "max_abs_first": float(first.abs().max()),
                        "finite": bool(torch.isfinite(got).all()),
                    }
                record(row)


# --- further sections (issue 31): prefill logits, MTP rows, native Hopper kernels; each guarded -----------------------

#: prefill indexer logits: causal query rows (one prefill chunk) over the keys of the sequence so far
PREFILL_ROWS = 4_096
#: (batch, next_n) of the paged decode logits at MTP 2 and 3 (next_n = speculative tokens + 1)
MTP_DECODE = [(1, 3), (8, 3), (32, 3), (1, 4), (8, 4)]
#: (label, heads) x query rows of the sparse-MLA decode at MTP: batch x next_n (1 x 3, 1 x 4, 8 x 4)
MLA_MTP = [("GLM-5 TP1", 64)]
MLA_MTP_ROWS = [3, 4, 32]
#: the H200's dense bf16 tensor-core peak (NVIDIA H200 SXM spec sheet: 989 TFLOP/s without sparsity), for the
#: prefill logits, which do 2 x heads x head_dim FLOPs per visible key and row
PEAK_BF16_TFLOPS = 989.0


def prefill_visible_keys(rows: int, keys: int) -> int:
    """Keys the causal prefill rows see in all: the chunk's rows are the last `rows` of `keys` tokens, so row i (from
    0) sees keys [0, keys - rows + i + 1)."""
    if not 0 < rows <= keys:
        raise ValueError(f"prefill of {rows} rows over {keys} keys: rows must be in 1..keys")
    return rows * (keys - rows) + rows * (rows + 1) // 2


def prefill_logits_bytes(rows: int, keys: int, heads: int, head_dim: int = HEAD_DIM) -> int:
    """The least the prefill logits must move: K read once (fp8 and an fp32 scale per key), the fp8 query and fp32
    weights read once, and one fp32 logit written per visible (row, key) (`clean_logits=False`: the rest untouched)."""
    return keys * (head_dim + 4) + rows * heads * (head_dim + 4) + prefill_visible_keys(rows, keys) * 4


def prefill_logits_flops(rows: int, keys: int, heads: int, head_dim: int = HEAD_DIM) -> int:
    """Multiply-adds of the prefill logits as FLOPs: a head_dim dot product per head, visible key and row."""
    return 2 * heads * head_dim * prefill_visible_keys(rows, keys)


def _unavailable(kernel: str, shape: str, nbytes: int, why: BaseException | str) -> dict:
    """A row for a kernel that did not run, with the first line of why (the exception as raised)."""
    if not isinstance(why, str):
        lines = str(why).strip().splitlines()
        why = f"{type(why).__name__}: {lines[0] if lines else ''}"
    return {"kernel": kernel, "shape": shape, "ms": None, "bytes": nbytes, "status": f"not available: {why[:300]}"}


def _paged_inputs(torch, batch: int, ctx: int, next_n: int, heads: int, contiguous: bool = False):
    """Paged decode-logits inputs as the main section builds them (random fp8 bytes on the padded 73,728-byte page;
    `contiguous`: DeepGEMM's own [blocks, 64, 1, 132] layout instead), and the args after `max_model_len`."""
    nb = math.ceil(ctx / BLOCK)
    if contiguous:
        kv = torch.randint(0, 255, (batch * nb + 1, BLOCK, 1, HEAD_DIM + 4), dtype=torch.uint8, device="cuda")
        kv &= 0x77  # finite fp8 bytes and small scales
    else:
        pool = torch.randint(0, 255, (batch * nb + 1, PAGE), dtype=torch.uint8, device="cuda")
        pool.view(-1)[:] &= 0x77
        kv = pool[:, : BLOCK * (HEAD_DIM + 4)].view(-1, BLOCK, 1, HEAD_DIM + 4)
    tables = torch.randperm(batch * nb, device="cuda").to(torch.int32).view(batch, nb)
    q = torch.randn(batch, next_n, heads, HEAD_DIM, device="cuda").to(torch.float8_e4m3fn)
    w = torch.rand(batch * next_n, heads, device="cuda")
    lens = torch.full((batch,), ctx, dtype=torch.int32, device="cuda")
    return q, kv, w, lens, tables


def _guarded(record, kernel: str, shape: str, nbytes: int, measure) -> None:
    """Time one shape; an exception (a compile error, an unsupported shape, out of memory) becomes its row. A CUDA
    fault that poisons the context makes every later row say so, which is what happened."""
    try:
        row = {"kernel": kernel, "shape": shape, "ms": measure(), "bytes": nbytes}
    except Exception as exc:  # noqa: BLE001 - every failure is a result here, reported as such
        row = _unavailable(kernel, shape, nbytes, exc)
    record(row)


def time_prefill_logits(mods, record, do_bench, torch) -> None:
    """The indexer's prefill logits (`fp8_mqa_logits_triton`), PREFILL_ROWS causal rows over each context."""
    prefill = mods["mqa_logits_triton"].fp8_mqa_logits_triton
    for label, heads in INDEXER:
        for keys in CONTEXTS:
            shape = f"{label} {heads}h rows {PREFILL_ROWS} keys {keys} causal"

            def measure(heads=heads, keys=keys):
                q = torch.randn(PREFILL_ROWS, heads, HEAD_DIM, device="cuda").to(torch.float8_e4m3fn)
                k = torch.randn(keys, HEAD_DIM, device="cuda").to(torch.float8_e4m3fn)
                scales = torch.rand(keys, device="cuda")
                w = torch.rand(PREFILL_ROWS, heads, device="cuda")
                ks = torch.zeros(PREFILL_ROWS, dtype=torch.int32, device="cuda")
                ke = torch.arange(keys - PREFILL_ROWS + 1, keys + 1, dtype=torch.int32, device="cuda")
                return do_bench(functools.partial(prefill, q, (k, scales), w, ks, ke, clean_logits=False))

            _guarded(
                _with_flops(record, prefill_logits_flops(PREFILL_ROWS, keys, heads)),
                "indexer prefill logits",
                shape,
                prefill_logits_bytes(PREFILL_ROWS, keys, heads),
                measure,
            )
            torch.cuda.empty_cache()  # the 4,096 x 131,072 fp32 logits are 2 GiB


def _with_flops(record, flops: int):
    """`record` that also puts the row's FLOPs and their share of the bf16 peak on it."""

    def rec(row: dict) -> None:
        row["flops"] = flops
        if row.get("ms") is not None:
            row["share_of_flops_peak"] = flops / (row["ms"] * 1e-3) / (PEAK_BF16_TFLOPS * 1e12)
        record(row)

    return rec


def time_mtp_rows(mods, record, do_bench, torch) -> None:
    """The paged decode logits and the sparse-MLA decode at MTP 2 / 3 query rows."""
    paged = mods["mqa_logits_triton"].fp8_paged_mqa_logits_triton
    for label, heads in INDEXER:
        for ctx in CONTEXTS:
            for batch, next_n in MTP_DECODE:

                def measure(heads=heads, ctx=ctx, batch=batch, next_n=next_n):
                    q, kv, w, lens, tables = _paged_inputs(torch, batch, ctx, next_n, heads)
                    return do_bench(
                        functools.partial(paged, q, kv, w, lens, tables, max_model_len=ctx, clean_logits=False)
                    )

                shape = f"{label} {heads}h ctx {ctx} B {batch} next_n {next_n}"
                _guarded(record, "indexer paged logits", shape, paged_logits_bytes(batch, ctx, next_n), measure)
    mla = mods["triton_mla_sparse_kernel"].triton_mla_sparse_attention
    kv = (torch.randn(600_000, 1, MLA_QK_DIM, device="cuda") * 0.5).to(torch.bfloat16)
    for label, heads in MLA_MTP:
        for n in MLA_MTP_ROWS:

            def measure(heads=heads, n=n):
                q = (torch.randn(n, heads, MLA_QK_DIM, device="cuda") * 0.5).to(torch.bfloat16)
                idx = torch.randint(0, kv.shape[0], (n, 1, TOPK), dtype=torch.int32, device="cuda")
                return do_bench(functools.partial(mla, q, kv, idx, 0.0625))

            shape = f"{label} {heads}h top-k {TOPK} rows {n}"
            _guarded(record, "sparse MLA decode", shape, sparse_mla_decode_bytes(n, heads), measure)


def _load_flashmla(native: Path, torch):
    """FlashMLA's op namespace from the stock wheel's `_flashmla_C.abi3.so` (vLLM imports it as `vllm._flashmla_C`;
    the wrapper `vllm.third_party.flashmla.flash_mla_interface.flash_mla_sparse_fwd` calls
    `torch.ops._flashmla_C.sparse_prefill_fwd`). Raises what loading raises."""
    so = native / "_flashmla_C.abi3.so"
    if not so.is_file():
        raise FileNotFoundError(f"no {so} (the staged payload carries only its lock's '# so:' objects)")
    torch.ops.load_library(str(so))
    return torch.ops._flashmla_C


def _load_deep_gemm(native: Path):
    """DeepGEMM as vLLM vendors it (`vllm/third_party/deep_gemm`, imported as a top-level `deep_gemm` as vLLM's
    `utils/deep_gemm.py` does first). Raises what importing raises; its kernels compile at first call (JIT)."""
    import importlib

    root = native / "third_party"
    if not (root / "deep_gemm" / "__init__.py").is_file():
        raise FileNotFoundError(f"no {root / 'deep_gemm'} (lab/device/stage.py's EXCLUDE leaves DeepGEMM behind)")
    sys.path.insert(0, str(root))
    return importlib.import_module("deep_gemm")


def time_native(record, do_bench, torch, native: Path) -> None:
    """FlashMLA's sparse kernel and DeepGEMM's paged MQA logits on the inputs the Triton rows use."""
    time_flashmla_sparse(record, do_bench, torch, native)
    time_deep_gemm_paged(record, do_bench, torch, native)


def time_flashmla_sparse(record, do_bench, torch, native: Path) -> None:
    """FlashMLA's sparse kernel at the sparse-MLA decode rows' shapes."""
    try:
        flashmla, why = _load_flashmla(native, torch), None
    except Exception as exc:  # noqa: BLE001 - reported on every row it would have timed
        flashmla, why = None, exc
    kv = None if flashmla is None else (torch.randn(600_000, 1, MLA_QK_DIM, device="cuda") * 0.5).to(torch.bfloat16)
    for label, heads in MLA:
        for n in MLA_ROWS:
            shape = f"{label} {heads}h top-k {TOPK} rows {n}"
            nbytes = sparse_mla_decode_bytes(n, heads)
            if flashmla is None:
                record(_unavailable("FlashMLA sparse (native)", shape, nbytes, why))
                continue

            def measure(heads=heads, n=n, kv=kv):
                q = (torch.randn(n, heads, MLA_QK_DIM, device="cuda") * 0.5).to(torch.bfloat16)
                idx = torch.randint(0, kv.shape[0], (n, 1, TOPK), dtype=torch.int32, device="cuda")
                fwd = flashmla.sparse_prefill_fwd
                return do_bench(functools.partial(fwd, q, kv, idx, 0.0625, MLA_V_DIM, None, None, None))

            _guarded(record, "FlashMLA sparse (native)", shape, nbytes, measure)
    del kv  # 0.7 GB


def time_deep_gemm_paged(record, do_bench, torch, native: Path) -> None:
    """DeepGEMM's paged MQA logits at the paged decode logits' shapes (and their MTP rows)."""
    try:
        dg, why = _load_deep_gemm(native), None
    except Exception as exc:  # noqa: BLE001
        dg, why = None, exc
    for label, heads in INDEXER:
        for ctx in CONTEXTS:
            for batch, next_n in DECODE + MTP_DECODE:
                shape = f"{label} {heads}h ctx {ctx} B {batch} next_n {next_n}"
                nbytes = paged_logits_bytes(batch, ctx, next_n)
                if dg is None:
                    record(_unavailable("DeepGEMM paged logits (native)", shape, nbytes, why))
                    continue

                def measure(heads=heads, ctx=ctx, batch=batch, next_n=next_n):
                    q, kv, w, lens, tables = _paged_inputs(torch, batch, ctx, next_n, heads, contiguous=True)
                    sms = torch.cuda.get_device_properties(0).multi_processor_count
                    # DeepGEMM takes the per-row bounds (B, next_n), as vLLM's indexer metadata hands them on: row j
                    # of a request sees ctx - next_n + j + 1 keys (it refuses the Triton kernel's one length a request)
                    steps = torch.arange(next_n, device=lens.device, dtype=lens.dtype)
                    lens = (lens[:, None] - next_n + 1 + steps[None, :]).contiguous()
                    sched = dg.get_paged_mqa_logits_metadata(lens, BLOCK, sms)
                    if hasattr(dg, "fp8_fp4_paged_mqa_logits"):
                        fn = functools.partial(dg.fp8_fp4_paged_mqa_logits, (q, None), kv, w, lens, tables, sched)
                    else:
                        fn = functools.partial(dg.fp8_paged_mqa_logits, q, kv, w, lens, tables, sched)
                    return do_bench(functools.partial(fn, ctx, False))

                _guarded(record, "DeepGEMM paged logits (native)", shape, nbytes, measure)


def extra_sections(mods, record, native: Path) -> None:
    """The sections after the paged logits and the sparse-MLA decode, in order; one that fails as a whole (not
    shape by shape) records a row saying so and the next one runs."""
    import torch
    from triton.testing import do_bench

    sections = (
        ("indexer prefill logits", lambda: time_prefill_logits(mods, record, do_bench, torch)),
        ("MTP rows", lambda: time_mtp_rows(mods, record, do_bench, torch)),
        ("native Hopper kernels", lambda: time_native(record, do_bench, torch, native)),
    )
    for name, run in sections:
        try:
            run()
        except Exception as exc:  # noqa: BLE001 - a section's failure is its row
            record(_unavailable(name, "(section)", 0, exc))
        torch.cuda.empty_cache()


if __name__ == "__main__":
    sys.exit(main())
