"""Build a tree's sparse-MLA kernels for sm_80 on a CPU and say what each config costs: registers, spill stack, shared
memory, and whether the gathered KV tile is copied asynchronously and double-buffered.

A lab script (lab/candidates/README.md). Triton compiles to PTX without a GPU and the `ptxas` its wheel ships
assembles it; `cuobjdump --dump-resource-usage` (also in the wheel) reads the registers and the spill stack. The
arguments are specialized as Triton's launcher specializes them for the real shapes (every pointer, and each integer
whose value there is a multiple of 16: strides 576 / 512 / 2,048, 64 heads; not the split kernel's mid-buffer
strides where the rows are 513 floats), so the loads and stores vectorize as they do on the GPU; without it the gathers compile
to 2-byte loads and the figures mean nothing. A compile, not a timing:

    python3 lab/candidates/sm80_resources.py --tree DIR [--kernel final|split|merge [--splits 16,32,64]] \\
        [--config 64:32:8:5 ...] [--json]

`--kernel merge` builds the split-KV merge at each split count as the tree's wrapper launches it (its DV tile and
warps: the module's `_merge_dv_tile` / `_MERGE_NUM_WARPS` where it has them, else 128 lanes and 2 warps, PR #38476's
and entry 0044's), and also counts its barriers (`bar.sync`): a merge whose sum over the splits crosses warps goes
through shared memory.

DIR holds vllm/v1/attention/ops/triton_mla_sparse_kernel.py (and mqa_logits_triton.py, which the loader wants; it
may be empty). A config is heads:BLOCK_N:num_warps:num_stages; the default is each autotune config of the tree at
64 heads. For a tree whose kernel serves 16 heads a program (PR #38476's), heads is the token's heads (kv_group_num)
and each program still holds 16.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "lab" / "device"))  # kernel_offsets' stand-in vllm

#: an A100's shared memory a block may opt into (163 KB); a config above it cannot launch on one
A100_SHARED_BYTES = 166_912
LOGE2 = 0.6931471805599453


@contextmanager
def _no_disk_cache():
    """Triton compiles afresh inside the block (its disk cache would answer a repeat compile in milliseconds)."""
    from triton import knobs

    with knobs.compilation.scope():
        knobs.compilation.always_compile = True
        yield


def _int_arguments(heads: int, splits: int, topk: int = 2048, mid_row: int = 512 + 1) -> dict:
    """Each integer argument's value at the real shape (64 heads, top-k 2048, 600,000 KV slots), as the wrapper
    passes it: the q / kv / out / indices strides, and the split kernel's fp32 mid buffer [tokens, heads, splits,
    mid_row]: 512 output lanes and the LSE, 513 floats in PR #38476's kernel and entry 0044's (strides not multiples
    of 16), padded to the module's `_MID_ROW` where it has one."""
    mid_split = mid_row
    return {
        "seq_kv": 600_000,
        "h_q": heads,
        "stride_q_token": heads * 576,
        "stride_q_head": 576,
        "stride_kv_token": 576,
        "stride_kv_head": 576,
        "stride_out_token": heads * 512,
        "stride_out_head": 512,
        "stride_indices_token": topk,
        "stride_indices_head": topk,
        "stride_mid_token": heads * splits * mid_split,
        "stride_mid_head": splits * mid_split,
        "stride_mid_split": mid_split,
    }


def _signature(fn, ints: dict) -> tuple[dict, dict]:
    """Argument types, and the launcher's divisibility-16 specialization: every pointer (torch's allocations are
    aligned) and each integer in `ints` whose value is a multiple of 16. The mid buffer's 513-float rows are not, so
    the split kernel's partial outputs are stored 4 bytes at a time, as on the GPU."""
    sig, attrs = {}, {}
    for i, name in enumerate(fn.arg_names):
        if name in ("q_buffer", "k_buffer", "out_ptr"):
            sig[name] = "*bf16"
        elif name == "mid_out_ptr":
            sig[name] = "*fp32"
        elif name == "indices_ptr":
            sig[name] = "*i32"
        elif name == "sm_scale":
            sig[name] = "fp32"
        else:
            sig[name] = "i32"
        if sig[name].startswith("*") or ints.get(name, 16) % 16 == 0:
            if name != "sm_scale":
                attrs[(i,)] = [["tt.divisibility", 16]]
    return sig, attrs


def _constants(mod, fn, heads: int, block_n: int, splits: int) -> dict:
    """The constexpr arguments at top-k 2048: the candidate's (BLOCK_H, BLOCK_DC) or PR #38476's (kv_group_num...)."""
    c = {"index_topk": 2048, "BLOCK_N": block_n, "NUM_KV_SPLITS": splits, "LOGE2": LOGE2, "BLOCK_DV": 512}
    if hasattr(mod, "_block_h"):
        c.update(BLOCK_H=mod._block_h(heads), BLOCK_DC=mod._BLOCK_DC, BLOCK_DPE=64)
    else:
        c.update(BLOCK_H=16, BLOCK_DMODEL=512, BLOCK_DPE=64, kv_group_num=heads)
    return {k: v for k, v in c.items() if k in fn.arg_names}


def merge_launch(mod, splits: int, heads: int) -> dict:
    """The merge's constexprs and warps at `splits` splits of `heads` heads, as the tree's wrapper passes them."""
    import triton

    tile = mod._merge_dv_tile(splits) if hasattr(mod, "_merge_dv_tile") else getattr(mod, "_MERGE_BLOCK_DV_TILE", 128)
    consts = {
        "NUM_KV_SPLITS": splits,
        "BLOCK_SPLITS": triton.next_power_of_2(splits),
        "BLOCK_H": getattr(mod, "_MERGE_BLOCK_H", 1),
        "BLOCK_DV": 512,
        "BLOCK_DV_TILE": tile,
        "kv_group_num": heads,
    }
    return {"constants": consts, "num_warps": getattr(mod, "_MERGE_NUM_WARPS", 2)}


def resources(
    tree: Path, kernel: str, heads: int, block_n: int, num_warps: int, num_stages: int, splits: int = 2
) -> dict:
    """Compile one config of `kernel` ("final" or "split", at `splits` splits; "merge" at `splits` splits as the
    wrapper launches it, `block_n`, `num_warps` and `num_stages` unused) for sm_80; what it costs, and the compile's
    seconds (Triton to PTX, ptxas to the cubin; the disk cache would hide them, so it is bypassed)."""
    import triton
    from kernel_offsets import install_vllm_shim
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    mod = install_vllm_shim(tree)["triton_mla_sparse_kernel"]
    # the split and final kernels are autotuned (the JIT function under it); the merge is a plain JIT function
    fn = mod._sparse_mla_merge_kernel if kernel == "merge" else getattr(mod, f"_sparse_mla_kernel_{kernel}").fn
    sig, attrs = _signature(fn, _int_arguments(heads, splits, mid_row=getattr(mod, "_MID_ROW", 512 + 1)))
    if kernel == "merge":
        launch = merge_launch(mod, splits, heads)
        consts = {k: v for k, v in launch["constants"].items() if k in fn.arg_names}
        num_warps, num_stages, block_n = launch["num_warps"], 1, 0
    else:
        consts = _constants(mod, fn, heads, block_n, splits)
    sig.update({k: "constexpr" for k in consts})
    start = time.perf_counter()
    with _no_disk_cache():
        compiled = triton.compile(
            ASTSource(fn, sig, consts, attrs),
            target=GPUTarget("cuda", 80, 32),
            options={"num_warps": num_warps, "num_stages": num_stages},
        )
    seconds = time.perf_counter() - start
    bin_dir = Path(triton.__file__).parent / "backends" / "nvidia" / "bin"
    with tempfile.TemporaryDirectory() as scratch:
        cubin = Path(scratch) / "kernel.cubin"
        cubin.write_bytes(compiled.asm["cubin"])
        usage = subprocess.run(
            [str(bin_dir / "cuobjdump"), "--dump-resource-usage", str(cubin)],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    found = re.search(r"REG:(\d+) STACK:(\d+)", usage)
    if found is None:
        raise RuntimeError(f"cuobjdump printed no REG/STACK line for {kernel}:\n{usage}")
    ttgir = compiled.asm["ttgir"]
    # the KV tile's shared buffers: `<S x BLOCK_N x ...xbf16` allocations S deep (S = 2: double-buffered)
    depths = [int(d) for d in re.findall(rf"memdesc<(\d+)x{block_n}x\d+xbf16", ttgir)]
    vectors = [int(v) for v in re.findall(r"ld\.global[.\w]*\.v(\d)\.b32", compiled.asm["ptx"])]
    stores = [int(v) for v in re.findall(r"st\.global[.\w]*\.v(\d)\.b32", compiled.asm["ptx"])]
    return {
        "tree": str(tree),
        "kernel": kernel,
        "heads": heads,
        "splits": splits if kernel in ("split", "merge") else 1,
        "block_h": consts.get("BLOCK_H", 1),
        "dv_tile": consts.get("BLOCK_DV_TILE"),
        "block_n": block_n,
        "num_warps": num_warps,
        "num_stages": num_stages,
        "registers": int(found.group(1)),
        "spill_stack_bytes": int(found.group(2)),
        "shared_bytes": compiled.metadata.shared,
        "fits_a100": compiled.metadata.shared <= A100_SHARED_BYTES,
        "kv_async_copy": bool(re.search(r"async_copy_global_to_local[^\n]*x!tt\.ptr<bf16>", ttgir)),
        "kv_buffers": max(depths, default=0),
        "widest_global_load": 4 * max(vectors, default=1),  # bytes: ld.global.v4.b32 is 16
        "widest_global_store": 4 * max(stores, default=1),
        "barriers": len(re.findall(r"\bbar(?:rier)?\.sync", compiled.asm["ptx"])),
        "compile_seconds": round(seconds, 2),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tree", type=Path, required=True)
    ap.add_argument("--kernel", choices=("final", "split", "merge"), default="final")
    ap.add_argument("--config", action="append", help="heads:BLOCK_N:num_warps:num_stages (repeat)")
    ap.add_argument("--splits", default="2", help="the split kernel at each of these split counts, e.g. 16,32,64")
    ap.add_argument("--json", action="store_true", help="one JSON object a line")
    args = ap.parse_args(argv)
    try:
        split_counts = [int(s) for s in args.splits.split(",")] if args.kernel != "final" else [1]
    except ValueError:
        ap.error(f"--splits {args.splits!r}: want split counts, e.g. 16,32,64")
    configs = args.config
    if args.kernel == "merge":
        for splits in split_counts:
            r = resources(args.tree, "merge", 64, 0, 0, 0, splits)
            print(json.dumps(r) if args.json else (
                f"merge x{splits}: {r['num_warps']} warps, {r['dv_tile']} lanes a program, {r['registers']} registers, "
                f"{r['spill_stack_bytes']} B spilled, {r['shared_bytes']} B shared, {r['barriers']} barriers, "
                f"{r['widest_global_load']}-byte loads, {r['widest_global_store']}-byte stores"), flush=True)  # fmt: skip
        return 0
    if not configs:
        from kernel_offsets import install_vllm_shim

        mod = install_vllm_shim(args.tree)["triton_mla_sparse_kernel"]
        tuner = getattr(mod, f"_sparse_mla_kernel_{args.kernel}")
        configs = [f"64:{c.kwargs['BLOCK_N']}:{c.num_warps}:{c.num_stages}" for c in tuner.configs]
    for spec in configs:
        try:
            heads, block_n, warps, stages = (int(x) for x in spec.split(":"))
        except ValueError:
            ap.error(f"--config {spec!r}: want heads:BLOCK_N:num_warps:num_stages, e.g. 64:32:8:5")
        for splits in split_counts:
            r = resources(args.tree, args.kernel, heads, block_n, warps, stages, splits)
            if args.json:
                print(json.dumps(r), flush=True)
                continue
            print(
                f"{args.kernel}{f' x{splits}' if args.kernel == 'split' else ''} {heads} heads ({r['block_h']} a "
                f"program) BLOCK_N {block_n} {warps} warps {stages} stages: {r['registers']} registers, "
                f"{r['spill_stack_bytes']} B spilled, {r['shared_bytes']} B shared"
                f"{'' if r['fits_a100'] else ' (over an A100)'}, KV tile {r['kv_buffers']}-deep"
                f"{' async' if r['kv_async_copy'] else ''}, {r['widest_global_load']}-byte loads, "
                f"{r['widest_global_store']}-byte stores, compiled in {r['compile_seconds']} s",
                flush=True,
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
