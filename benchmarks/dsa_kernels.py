"""Time the compose's DSA Triton kernels at GLM-5.x / DeepSeek-V3.2 per-rank shapes, against the HBM limit.

PR #38476's kernels as composed (`mqa_logits_triton.py`: the indexer's paged decode logits; `triton_mla_sparse_kernel.py`:
the sparse-MLA decode attention), loaded from a tree without vLLM (`lab/device/kernel_offsets.install_vllm_shim`) and
timed with `triton.testing.do_bench` on a GPU, as Triton builds them for that GPU or, with `--sm80-ptx`, as an A100's
sm_80 PTX (`lab/device/sm80_ptx.py`). Each row gives the time, the bytes the kernel must move at least (inputs read
once, outputs written once) and that as a share of the GPU's HBM bandwidth (`--peak-gbs`, by default its spec sheet's
figure by name: H200 4,800 GB/s, H100 SXM 3,350).

    python3 benchmarks/dsa_kernels.py --tree T [--tree T2 ...] [--sm80-ptx] --out dsa_kernels.json

Each `--tree` is timed on the same inputs in the same run, its rows labelled `tree` (the folder's name), so a series
entry's before and after are one ratio. The paged logits of every tree after the first also record how far their
logits are from the first tree's (`vs_first_tree`: masks equal, max |difference|). `--paged-blocks-per-prog 1,2,4`
times a tree whose kernel has `_PAGED_BLOCKS_PER_PROG` (series entry 0040) at each value, labelled `tree@bppN` (and
sets entry 0041's per-next_n choice aside, so the value holds at every shape); without it a tree runs its own choice.
Likewise the sparse-MLA candidate in lab/candidates/ reads its heads a program and its split policy from module
attributes at each call, and `--mla-max-block-h 16,32,64 --mla-max-splits 16,32,64 --mla-min-split 32,64,128
--mla-split-fill 0.75,1.5` sweeps every combination of the values given (a policy, e.g. `bh64/kv32/min32/fill0.75`;
a knob not given stays as the module has it). Many policies make the same launch at a shape (at 8 heads every
heads-per-program value is 16; at one row every fill splits as far as allowed), so each distinct launch is timed once,
labelled `tree@bh<heads a program>.kv<splits>`, its row naming the policies that make it (`policies`; the document's
`mla_policies` gives their attributes). A tree without those attributes (the kernel as composed) runs once, as it is.
Each sparse-MLA row records its launch (heads a program, head groups, splits, programs), the fp32 partial outputs a
split launch writes and reads back beside the least bytes (`split_scratch_bytes`), the autotuned kernels' chosen
config and, where a row's call tuned them, every config's time (`autotune`), and against the first tree's row of the
same shape its speed-up and largest |difference| (`vs_first_tree`). Their `ms` is the GPU's time with the calls
replayed in a CUDA graph (`graph_ms`; vLLM captures the sparse-MLA decode in its decode graphs), `ms_launch` beside
it do_bench's, which at one to eight rows is mostly the Python launch of the wrapper's two kernels (`--mla-timer
launch` makes do_bench's the `ms`). `--mla-only` times the sparse-MLA decode rows
alone and FlashMLA's sparse kernel on the same shapes where `--native` has it (no paged logits, no other section), to
spend GPU minutes on a sparse-MLA candidate; lab/candidates/mla_decide.py reads such a sweep.

Rows are written to --out as they finish, so a run cut short keeps what it measured. Further sections, each guarded
so that a kernel that fails records a row saying why and the run goes on: the prefill indexer logits
(`fp8_mqa_logits_triton`, 4,096 causal query rows over 8k / 32k / 128k keys, with FLOPs beside the bytes), the paged
decode logits and the sparse-MLA decode at MTP rows (next_n 3 and 4: MTP 2 and 3), and the native Hopper kernels on
the same inputs where the stock wheel's compiled objects are found under `--native DIR` (FlashMLA's sparse kernel
`torch.ops._flashmla_C.sparse_prefill_fwd`, which vLLM's FLASHMLA_SPARSE backend runs on a bf16 KV cache, and
DeepGEMM's `fp8_paged_mqa_logits`); a kernel that cannot run there gives rows "not available: <the error>", found by
trying. Then what the indexer and the sparse MLA run on an Ampere GPU beside those kernels. The top-k and the
indexer's query path run the release's own code, imported from the first `--tree`: a whole release tree with its
compiled objects and its dependencies importable (the staged /tmp/vc/composed, with /tmp/vc/site on PYTHONPATH);
the kernel shim steps aside while they run:

- top-k: the indexer's top-k after the logits, as `sparse_attn_indexer` calls it on sm_80 at top-k 2048: decode
  `torch.ops._C.persistent_topk` (the cooperative top-k needs sm_90) at the paged decode logits' rows, prefill
  `vllm._custom_ops.top_k_per_row_prefill` at the prefill logits' rows; bytes: the visible fp32 logits read once and
  the int32 indices written;
- the sparse-MLA prefill: `triton_mla_sparse_attention` at 1,024 and 4,096 query rows (64 heads and 8), bytes as the
  decode rows count them, FLOPs beside;
- the indexer's query path on sm_8x, where the fused `_fused_indexer_q_rope_quant_kernel` is gated off: the release's
  `Indexer.forward` (its unfused branch: RoPE, `per_token_group_quant_fp8`, the weights' scaling) from the query and
  the fused wk/weights projection's output on (its GEMMs not run), and the K-cache insert
  `indexer_k_quant_and_cache` that `sparse_attn_indexer` runs first.

`--sections` picks sections by name (default: all, in this order): paged-logits, mla-decode, prefill-logits, mtp,
native, topk, mla-prefill, indexer-q.

    python3 benchmarks/dsa_kernels.py --tree /tmp/vc/composed --native .devnative/vllm --out dsa_kernels.json
    PYTHONPATH=/tmp/vc/site python3 benchmarks/dsa_kernels.py --tree /tmp/vc/composed \\
        --sections topk,mla-prefill,indexer-q --out FILE
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import inspect
import itertools
import json
import math
import sys
import time
import types
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


#: every section, in the order a run times them; `--sections` picks some
SECTIONS = ("paged-logits", "mla-decode", "prefill-logits", "mtp", "native", "topk", "mla-prefill", "indexer-q")


#: HBM bandwidth by GPU name (GB/s, the vendors' spec sheets): a row's share of the roofline is of its own GPU's
PEAK_GBS = {
    "H200": 4800.0,
    "H100 80GB HBM3": 3350.0,  # SXM
    "H100 NVL": 3900.0,
    "H100 PCIe": 2000.0,
    "A100-SXM4-80GB": 2039.0,
    "A100 80GB PCIe": 1935.0,
    "A100-SXM4-40GB": 1555.0,
    "A100-PCIE-40GB": 1555.0,
    "RTX 3090": 936.0,
}


def peak_gbs(device_name: str) -> float:
    """The HBM bandwidth of the GPU `device_name` (torch's name for it) names; ValueError when none is known."""
    known = [(key, gbs) for key, gbs in PEAK_GBS.items() if key in device_name]
    if len(known) != 1:
        raise ValueError(
            f"no HBM bandwidth known for {device_name!r} (known: {', '.join(PEAK_GBS)}); give --peak-gbs GB/s"
        )
    return known[0][1]


def parse_sections(text: str) -> tuple[str, ...]:
    """The sections a `--sections` value names (comma-separated), in the run's order. Raises ValueError naming
    the unknown ones and the known, or saying that none was named."""
    named = [s.strip() for s in text.split(",") if s.strip()]
    unknown = [s for s in named if s not in SECTIONS]
    if unknown:
        raise ValueError(f"unknown section(s) {', '.join(unknown)}; the sections are {', '.join(SECTIONS)}")
    if not named:
        raise ValueError(f"--sections names no section; the sections are {', '.join(SECTIONS)}")
    return tuple(s for s in SECTIONS if s in named)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tree", type=Path, action="append", required=True, help="a tree root holding vllm/ (repeat)")
    ap.add_argument("--paged-blocks-per-prog", default="", help="e.g. 1,2,4: the paged logits at each (entry 0040)")
    ap.add_argument("--mla-max-block-h", default="", help="e.g. 16,32,64: the sparse MLA at each (lab/candidates/)")
    ap.add_argument("--mla-max-splits", default="", help="e.g. 16,32,64: the most splits the split policy picks")
    ap.add_argument("--mla-min-split", default="", help="e.g. 32,64,128: the least top-k indices a split")
    ap.add_argument("--mla-split-fill", default="", help="e.g. 0.75,1.5: the share of the SMs a grid must cover")
    ap.add_argument("--mla-wide-block-h", default="", help="e.g. 32,64: heads a program once a call is wide")
    ap.add_argument("--mla-wide-from", default="", help="e.g. 1024,2048: the query rows x heads a call is wide from")
    ap.add_argument(
        "--mla-fixed-tree",
        action="append",
        default=[],
        help="a tree (by its folder name) timed at its own defaults, not swept by the --mla-* policies (repeat)",
    )
    ap.add_argument("--mla-only", action="store_true", help="time only the sparse-MLA decode rows")
    ap.add_argument(
        "--mla-timer",
        choices=("graph", "launch"),
        default="graph",
        help="the sparse-MLA decode rows (and FlashMLA's with --mla-only): replayed in a CUDA graph, as vLLM's decode "
        "runs them (default), or do_bench's launches, which hold the wrapper's Python launch time",
    )
    ap.add_argument("--sections", help=f"comma-separated, of {','.join(SECTIONS)} (default: all)")
    ap.add_argument("--sm80-ptx", action="store_true")
    ap.add_argument(
        "--peak-gbs",
        type=float,
        help="the GPU's HBM bandwidth, GB/s (default: by its name, PEAK_GBS; a GPU not there needs it given)",
    )
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument(
        "--native",
        type=Path,
        default=Path("/tmp/vc/stock/vllm"),
        help="the stock wheel's vllm/ folder holding _flashmla_C.abi3.so and third_party/deep_gemm (default: the "
        "staged stock tree; lab/device/stage.py carries neither unless asked)",
    )
    args = ap.parse_args()
    if args.mla_only and args.sections is not None:
        ap.error("--mla-only and --sections: give one (--mla-only is the sparse-MLA decode rows and FlashMLA's)")
    try:
        sections = parse_sections(args.sections) if args.sections is not None else SECTIONS
        policies = mla_policies({opt: getattr(args, opt) for opt, *_ in MLA_KNOBS})
    except ValueError as exc:
        ap.error(str(exc))
    compiled: list[dict] = []
    if args.sm80_ptx:
        from sm80_ptx import enable

        enable(compiled)
    import torch
    from kernel_offsets import install_vllm_shim
    from triton.testing import do_bench

    if args.peak_gbs is None:
        try:
            args.peak_gbs = peak_gbs(torch.cuda.get_device_name(0))
        except ValueError as exc:
            ap.error(str(exc))
    unknown = sorted(set(args.mla_fixed_tree) - {tree.name for tree in args.tree})
    if unknown:
        ap.error(f"--mla-fixed-tree {', '.join(unknown)}: not the folder name of any --tree")
    trees = [(tree.name, install_vllm_shim(tree)) for tree in args.tree]
    bpps = [int(b) for b in args.paged_blocks_per_prog.split(",") if b]
    dev = "cuda"
    rows: list[dict] = []

    def record(row: dict) -> None:
        row.setdefault("tree", trees[0][0])  # the guarded sections time the first tree
        if row.get("ms") is not None:
            row["gbs"] = row["bytes"] / row["ms"] / 1e6
            row["share_of_peak"] = row["gbs"] / args.peak_gbs
        rows.append(row)
        doc = {"sm80_ptx": args.sm80_ptx, "peak_gbs": args.peak_gbs, "mla_policies": policies, "rows": rows,
               "compiled": compiled}  # fmt: skip
        args.out.write_text(json.dumps(doc, indent=1) + "\n")
        if row.get("ms") is None:  # a row for a kernel that did not run: `status` says why
            print(f"{row['tree']:<16} {row['kernel']:<22} {row['shape']:<44} {row['status']}", flush=True)
            return
        speedup = row.get("vs_first_tree", {}).get("speedup")
        print(
            f"{row['tree']:<16} {row['kernel']:<22} {row['shape']:<44} {row['ms'] * 1e3:9.1f} us "
            f"{row['share_of_peak']:6.1%}{'' if speedup is None else f' {speedup:5.2f}x'}",
            flush=True,
        )

    def agreement(got, first) -> dict:
        same_mask = bool(torch.equal(torch.isfinite(got), torch.isfinite(first)))
        finite = torch.isfinite(first) & torch.isfinite(got)
        diff = float((got[finite] - first[finite]).abs().max()) if finite.any() else 0.0
        return {"masks_equal": same_mask, "max_abs_diff": diff, "max_abs_first": float(first[finite].abs().max())}

    for label, heads in INDEXER if "paged-logits" in sections and not args.mla_only else []:
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
                        # the swept value everywhere: entry 0041's per-next_n choice would override it
                        mod._PAGED_BLOCKS_PER_PROG = bpp
                        if hasattr(mod, "_PAGED_BLOCKS_PER_PROG_BY_NEXT_N"):
                            mod._PAGED_BLOCKS_PER_PROG_BY_NEXT_N = {}
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

    if "mla-decode" in sections:
        sm_count = torch.cuda.get_device_properties(0).multi_processor_count
        graph = None if args.mla_timer == "launch" else functools.partial(graph_ms, torch=torch)
        time_mla_decode(
            trees, policies, record, do_bench, torch, dev, sm_count, graph_bench=graph, fixed=args.mla_fixed_tree
        )
    if args.mla_only:
        bench = do_bench if args.mla_timer == "launch" else functools.partial(graph_ms, torch=torch)
        time_flashmla_sparse(record, bench, torch, args.native)
        return 0
    extra_sections(trees[0][1], record, args.native, sections, release=args.tree[0])
    return 0


def swept(trees, kernel: str, knob: str, values: list[int], tag: str):
    """(label, module, value or None) for each tree's `kernel` module: once as it is, or, where the module has the
    attribute `knob` and `values` are given, once per value, labelled `tree@<tag><value>` (the caller sets the
    attribute before timing: `--paged-blocks-per-prog` sweeps entry 0040's `_PAGED_BLOCKS_PER_PROG`)."""
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


#: the sparse-MLA knobs the `--mla-*` options sweep: (option, the module attribute it sets, its tag in a policy's
#: label, its type). The candidate in lab/candidates/ reads each attribute at every call
MLA_KNOBS = (
    ("mla_max_block_h", "_MAX_BLOCK_H", "bh", int),
    ("mla_max_splits", "_MAX_KV_SPLITS", "kv", int),
    ("mla_min_split", "_MIN_TOPK_PER_SPLIT", "min", int),
    ("mla_split_fill", "_SPLIT_MIN_FILL", "fill", float),
    ("mla_wide_block_h", "_WIDE_BLOCK_H", "wide", int),
    ("mla_wide_from", "_WIDE_MIN_TOKEN_HEADS", "from", int),
)
#: the fp32 row of the split kernel's partial output: 512 lanes and the log-sum-exp
MLA_MID_ROW = MLA_V_DIM + 1


def mla_policies(options: dict[str, str]) -> dict[str, dict[str, float]]:
    """Every combination of the `--mla-*` values given (`options`: option -> comma-separated text), as
    {label: {module attribute: value}}, e.g. {"bh64/kv32/min32": {"_MAX_BLOCK_H": 64, "_MAX_KV_SPLITS": 32,
    "_MIN_TOPK_PER_SPLIT": 32}}; the knobs not given are left out of both. {} when none is given. Raises
    ValueError for a value that is not a number of the knob's type or not positive."""
    axes = []
    for option, attr, tag, kind in MLA_KNOBS:
        text = options.get(option) or ""
        values = []
        for word in (w.strip() for w in text.split(",")):
            if not word:
                continue
            try:
                value = kind(word)
            except ValueError:
                what = "an integer" if kind is int else "a number"
                raise ValueError(f"--{option.replace('_', '-')} {text!r}: {word!r} is not {what}") from None
            if value <= 0:
                raise ValueError(f"--{option.replace('_', '-')} {text!r}: {word!r} is not positive")
            values.append(value)
        if values:
            axes.append([(attr, tag, v) for v in values])
    return {
        "/".join(f"{tag}{value:g}" for _, tag, value in combo): {attr: value for attr, _, value in combo}
        for combo in itertools.product(*axes)
    } if axes else {}  # fmt: skip


def mla_launch(mod, rows: int, heads: int, topk: int, sm_count: int) -> dict:
    """What `mod.triton_mla_sparse_attention` launches for `rows` x `heads` at `sm_count` SMs, by its own rules:
    heads a program (`_block_h`, the candidate, given the rows where it takes them; PR #38476's kernel holds
    `_BLOCK_H` = 16), head groups, split count (`_choose_num_kv_splits`, which the candidate reads its policy's
    attributes in) and programs."""
    if hasattr(mod, "_block_h"):
        takes_rows = len(inspect.signature(mod._block_h).parameters) > 1
        block_h = mod._block_h(heads, rows) if takes_rows else mod._block_h(heads)
        groups = -(-heads // block_h)
    else:  # PR #38476's: a 16-row tile, of which min(16, heads) heads
        block_h = mod._BLOCK_H
        groups = -(-heads // min(block_h, heads))
    splits = mod._choose_num_kv_splits(rows, groups, topk, sm_count)
    return {"block_h": block_h, "head_groups": groups, "splits": splits, "programs": rows * groups * splits}


def mla_split_scratch_bytes(rows: int, heads: int, splits: int, mid_row: int = MLA_MID_ROW) -> int:
    """The fp32 partial outputs split-KV writes and its merge reads back (`mid_row` floats per row, head and
    split, each way: `MLA_MID_ROW`, or the module's padded `_MID_ROW`); 0 single-pass. Not in a row's `bytes`, the
    least the attention must move."""
    return 0 if splits == 1 else 2 * rows * heads * splits * mid_row * 4


def mla_plan(mod, policies: dict, rows: int, heads: int, topk: int, sm_count: int) -> list[tuple[dict, list[str]]]:
    """(launch, the labels of the policies that make it) for each distinct launch of `mod` at this shape, by heads
    a program then splits; one launch with no label where `policies` is empty or `mod` lacks one of their
    attributes (it runs as it is). Each policy's attributes are set to ask the kernel's own rules, then restored."""
    attrs = {attr for policy in policies.values() for attr in policy}
    if not policies or not all(hasattr(mod, a) for a in attrs):
        return [(mla_launch(mod, rows, heads, topk, sm_count), [])]
    saved = {a: getattr(mod, a) for a in attrs}
    launches: dict[tuple, tuple[dict, list[str]]] = {}
    try:
        for label, policy in policies.items():
            for attr, value in policy.items():
                setattr(mod, attr, value)
            launch = mla_launch(mod, rows, heads, topk, sm_count)
            launches.setdefault((launch["block_h"], launch["splits"]), (launch, []))[1].append(label)
    finally:
        for attr, value in saved.items():
            setattr(mod, attr, value)
    return [launches[k] for k in sorted(launches)]


class SkippedLaunch:
    """A Triton kernel's stand-in that launches nothing: `kernel[grid](...)` returns None."""

    def __getitem__(self, grid):
        return lambda *args, **kwargs: None


@contextlib.contextmanager
def merge_skipped(mod):
    """`mod`'s split-KV merge kernel (`_sparse_mla_merge_kernel`, in PR #38476's kernel and the series' entry) made a
    `SkippedLaunch` for the block; put back after it, also on an error."""
    kernel = mod._sparse_mla_merge_kernel
    mod._sparse_mla_merge_kernel = SkippedLaunch()
    try:
        yield
    finally:
        mod._sparse_mla_merge_kernel = kernel


def time_mla_decode(
    trees, policies, record, do_bench, torch, dev: str = "cuda", sm_count: int = 132, graph_bench=None, fixed=()
) -> None:
    """The sparse-MLA decode rows: MLA heads x MLA_ROWS query rows, top-k TOPK over a flat MLA_SLOTS latent cache;
    every tree on the same inputs, at `sm_count` SMs (passed to the kernel, as the backend passes its cached count).

    A tree whose module has the `policies`' attributes (the candidate) is timed once per distinct launch the
    policies make at each shape (many make the same one: at 8 heads every heads-per-program value is 16), labelled
    `tree@bh<heads a program>.kv<splits>` and naming those policies; any other tree, and a tree named in `fixed`,
    once, as it is. Each row
    records its launch, the split scratch traffic, the autotuned config, and against the first tree's row of the
    shape its speed-up and largest output difference. A launch that raises becomes its row. With `graph_bench` (`graph_ms` on a
    GPU) a row's `ms` is its time replayed in a CUDA graph, as vLLM's decode runs it (`timer: graph`), and `ms_launch`
    do_bench's, which holds the Python launch of the wrapper's two kernels; without it `ms` is do_bench's. A launch
    with split-KV then carries `ms_split_pass` (the same graph with the merge launch skipped) and `ms_merge` (the
    difference): where a one-row call's time goes."""
    slots = MLA_SLOTS
    kv = (torch.randn(slots, 1, MLA_QK_DIM, device=dev) * 0.5).to(torch.bfloat16)
    for label, heads in MLA:
        for n in MLA_ROWS:
            q = (torch.randn(n, heads, MLA_QK_DIM, device=dev) * 0.5).to(torch.bfloat16)
            idx = torch.randint(0, slots, (n, 1, TOPK), dtype=torch.int32, device=dev)
            shape = f"{label} {heads}h top-k {TOPK} rows {n}"
            first = None  # (ms, output) of the first tree's row at this shape
            for tree, mods in trees:
                mod = mods["triton_mla_sparse_kernel"]
                swept_by = {} if tree in fixed else policies
                for launch, chosen in mla_plan(mod, swept_by, n, heads, TOPK, sm_count):
                    row = {
                        "tree": f"{tree}@bh{launch['block_h']}.kv{launch['splits']}" if chosen else tree,
                        "kernel": "sparse MLA decode",
                        "shape": shape,
                        "bytes": sparse_mla_decode_bytes(n, heads, TOPK),
                        "launch": launch,
                        "split_scratch_bytes": mla_split_scratch_bytes(
                            n, heads, launch["splits"], getattr(mod, "_MID_ROW", MLA_MID_ROW)
                        ),
                    }
                    if chosen:
                        row["policies"] = chosen
                    run = functools.partial(mod.triton_mla_sparse_attention, q, kv, idx, 0.0625, sm_count=sm_count)
                    saved = {a: getattr(mod, a) for a in policies.get(chosen[0], {})} if chosen else {}
                    try:
                        for attr, value in (policies[chosen[0]] if chosen else {}).items():
                            setattr(mod, attr, value)
                        forget_autotuned(mod)
                        ms = do_bench(run)
                        timing = {"timer": "launch"}
                        if graph_bench is not None:
                            timing = {"timer": "graph", "ms_launch": ms}
                            ms = graph_bench(run)
                            if launch["splits"] > 1:
                                # the split pass alone (the merge launch skipped; its output unused): what the
                                # merge costs is the difference
                                with merge_skipped(mod):
                                    timing["ms_split_pass"] = graph_bench(run)
                                timing["ms_merge"] = ms - timing["ms_split_pass"]
                        got = run().float()
                    except Exception as exc:  # noqa: BLE001 - a launch that cannot run is a result of the sweep
                        record({**row, **_unavailable(row["kernel"], shape, row["bytes"], exc), "tree": row["tree"]})
                        continue
                    finally:
                        for attr, value in saved.items():
                            setattr(mod, attr, value)
                    row.update(ms=ms, **timing, autotune=autotuned(mod))
                    if first is None:
                        first = (ms, got)
                    else:
                        row["vs_first_tree"] = {
                            "speedup": first[0] / ms,
                            "max_abs_diff": float((got - first[1]).abs().max()),
                            "max_abs_first": float(first[1].abs().max()),
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


# --- the release's own ops (issue 31): top-k, the sparse-MLA prefill, the indexer's query path on sm_8x ----------------

#: `RADIX_TOPK_WORKSPACE_SIZE` of the release's sparse_attn_indexer.py: the uint8 workspace its top-k ops take
TOPK_WORKSPACE_BYTES = 1024 * 1024
#: (label, query heads per rank) x query rows of the sparse-MLA prefill (one prefill chunk of that many tokens)
MLA_PREFILL = [("GLM-5 TP1", 64), ("GLM-5 TP8", 8)]
MLA_PREFILL_ROWS = [1_024, 4_096]
#: tokens of the indexer's query path: decode batches (next_n 1) and one prefill chunk
INDEXER_Q_TOKENS = [1, 8, 32, 64, 4_096]
#: the indexer's RoPE part of its 128-wide query and key (`qk_rope_head_dim`)
INDEXER_ROPE_DIM = 64
#: the indexer's RoPE, two ways, labelled: DeepSeek-V3.2's config.json rope_scaling as deepseek_v2.py's attention
#: rewrites its type ("deepseek_yarn": `DeepseekScalingRotaryEmbedding`, whose CUDA path is its torch-native chain
#: unless FlashInfer's RoPE is on), and a plain RoPE ("default": `RotaryEmbedding`, whose CUDA path is the compiled
#: `rotary_embedding` op). The indexer takes the NeoX layout unless the config says `indexer_rope_interleave`; the
#: cos/sin table it reads per token is the same size either way.
INDEXER_ROPES = [
    (
        "yarn",
        {
            "rope_type": "deepseek_yarn",
            "rope_theta": 10000,
            "factor": 40,
            "original_max_position_embeddings": 4096,
            "beta_fast": 32,
            "beta_slow": 1,
            "mscale": 1.0,
            "mscale_all_dim": 1.0,
        },
    ),
    ("default", {"rope_type": "default", "rope_theta": 1_000_000}),
]
INDEXER_MAX_POSITION = 163_840
#: the release modules `release_vllm` imported, kept for its next block (a second import would register the
#: release's torch.library ops twice)
_RELEASE_MODULES: dict = {}


def _vllm_modules() -> dict:
    return {name: mod for name, mod in sys.modules.items() if name == "vllm" or name.startswith("vllm.")}


@contextlib.contextmanager
def release_vllm(root: Path | None):
    """The release's own `vllm` package (the tree at `root`, which must hold its compiled objects: the staged
    /tmp/vc/composed does) in sys.modules while the block runs, in place of the kernel shim's stand-in; the stand-in
    back after. The kernel modules loaded through the shim keep the objects they bound, so they run as before."""
    if root is None:
        raise FileNotFoundError("no release tree to import vllm from (--tree names it)")
    if not (root / "vllm" / "__init__.py").is_file():
        raise FileNotFoundError(f"{root} holds no vllm package (give a whole release tree, e.g. /tmp/vc/composed)")
    shim = _vllm_modules()
    for name in shim:
        del sys.modules[name]
    sys.modules.update(_RELEASE_MODULES)
    sys.path.insert(0, str(root))
    try:
        yield
    finally:
        sys.path.remove(str(root))
        _RELEASE_MODULES.update(_vllm_modules())
        for name in _vllm_modules():
            del sys.modules[name]
        sys.modules.update(shim)


def decode_topk_bytes(batch: int, ctx: int, next_n: int, topk: int = TOPK) -> int:
    """The least the decode top-k must move: the fp32 logits each row sees read once (row j of a request's next_n
    sees ctx - next_n + 1 + j keys) and `topk` int32 indices written per row."""
    visible = batch * (next_n * ctx - next_n * (next_n - 1) // 2)
    return visible * 4 + batch * next_n * topk * 4


def prefill_topk_bytes(rows: int, keys: int, topk: int = TOPK) -> int:
    """The least the prefill top-k must move: the causal rows' visible fp32 logits read once, `topk` int32 indices
    written per row."""
    return prefill_visible_keys(rows, keys) * 4 + rows * topk * 4


def decode_topk_args(torch, logits, batch: int, ctx: int, next_n: int, topk: int = TOPK) -> tuple:
    """`torch.ops._C.persistent_topk`'s arguments as the release's `sparse_attn_indexer` passes them on sm_80 for
    `logits` [batch * next_n, ctx]: the logits; the decode metadata's seq_lens, (batch, next_n) int32 per-row bounds
    (row j sees ctx - next_n + 1 + j keys); the [rows, topk] int32 output; the uint8 workspace; topk; and
    `logits.shape[1]`."""
    steps = torch.arange(next_n, dtype=torch.int32, device=logits.device)
    lens = (ctx - next_n + 1 + steps).repeat(batch, 1).contiguous()
    out = torch.empty(batch * next_n, topk, dtype=torch.int32, device=logits.device)
    workspace = torch.empty(TOPK_WORKSPACE_BYTES, dtype=torch.uint8, device=logits.device)
    return logits, lens, out, workspace, topk, logits.shape[1]


def prefill_topk_args(torch, logits, keys: int, topk: int = TOPK) -> tuple:
    """`vllm._custom_ops.top_k_per_row_prefill`'s arguments as the release passes them for causal prefill `logits`
    [rows, keys] (the chunk's rows are the last of `keys` tokens): the logits, the rows' key starts (0) and ends
    (keys - rows + i + 1), the [rows, topk] int32 output, rows, the logits' two strides, topk."""
    rows = logits.shape[0]
    starts = torch.zeros(rows, dtype=torch.int32, device=logits.device)
    ends = torch.arange(keys - rows + 1, keys + 1, dtype=torch.int32, device=logits.device)
    out = torch.empty(rows, topk, dtype=torch.int32, device=logits.device)
    return logits, starts, ends, out, rows, logits.stride(0), logits.stride(1), topk


def time_topk(record, do_bench, torch, release: Path | None) -> None:
    """The indexer's top-k at the paged decode logits' rows and the prefill logits' rows, on random fp32 logits, as
    the release's ops (the tree's own compiled objects: these are CUDA kernels, built for the GPU they run on,
    whatever `--sm80-ptx` says)."""
    with release_vllm(release):
        from vllm import _custom_ops as ops  # loads the release's compiled ops into torch.ops

        for label, heads in INDEXER:
            for ctx in CONTEXTS:
                for batch, next_n in DECODE:

                    def measure(ctx=ctx, batch=batch, next_n=next_n):
                        logits = torch.randn(batch * next_n, ctx, device="cuda")
                        args = decode_topk_args(torch, logits, batch, ctx, next_n, TOPK)
                        return do_bench(functools.partial(torch.ops._C.persistent_topk, *args))

                    shape = f"{label} {heads}h ctx {ctx} B {batch} next_n {next_n} top-k {TOPK}"
                    nbytes = decode_topk_bytes(batch, ctx, next_n, TOPK)
                    _guarded(record, "top-k decode (persistent_topk)", shape, nbytes, measure)
        for keys in CONTEXTS:

            def measure(keys=keys):
                logits = torch.randn(PREFILL_ROWS, keys, device="cuda")
                args = prefill_topk_args(torch, logits, keys, TOPK)
                return do_bench(functools.partial(ops.top_k_per_row_prefill, *args))

            shape = f"rows {PREFILL_ROWS} keys {keys} causal top-k {TOPK}"
            nbytes = prefill_topk_bytes(PREFILL_ROWS, keys, TOPK)
            _guarded(record, "top-k prefill (top_k_per_row_prefill)", shape, nbytes, measure)
            torch.cuda.empty_cache()  # 4,096 x 131,072 fp32 logits are 2 GiB


def sparse_mla_flops(rows: int, heads: int, topk: int = TOPK) -> int:
    """Multiply-adds of the sparse MLA as FLOPs: per query row, head and selected key a 576-wide QK dot product and a
    512-wide PV accumulation."""
    return 2 * rows * heads * topk * (MLA_QK_DIM + MLA_V_DIM)


def time_mla_prefill(mods, record, do_bench, torch, device: str = "cuda") -> None:
    """The sparse-MLA prefill: `triton_mla_sparse_attention` (one call for a chunk's tokens, as the TRITON_MLA_SPARSE
    backend makes it) at MLA_PREFILL heads x MLA_PREFILL_ROWS rows, top-k TOPK over a flat MLA_SLOTS latent cache."""
    mla = mods["triton_mla_sparse_kernel"].triton_mla_sparse_attention
    kv = (torch.randn(MLA_SLOTS, 1, MLA_QK_DIM, device=device) * 0.5).to(torch.bfloat16)
    for label, heads in MLA_PREFILL:
        for n in MLA_PREFILL_ROWS:

            def measure(heads=heads, n=n):
                q = (torch.randn(n, heads, MLA_QK_DIM, device=device) * 0.5).to(torch.bfloat16)
                idx = torch.randint(0, MLA_SLOTS, (n, 1, TOPK), dtype=torch.int32, device=device)
                return do_bench(functools.partial(mla, q, kv, idx, 0.0625))

            _guarded(
                _with_flops(record, sparse_mla_flops(n, heads, TOPK)),
                "sparse MLA prefill",
                f"{label} {heads}h top-k {TOPK} rows {n}",
                sparse_mla_decode_bytes(n, heads, TOPK),
                measure,
            )


def indexer_q_bytes(tokens: int, heads: int, head_dim: int = HEAD_DIM) -> int:
    """The least the indexer's query path must move (what the fused kernel and the K insert do): per token the bf16
    query and the bf16 key and head weights (the fused projection's output) read, the fp8 query, the fp32 head
    weights and the key's cache entry (fp8 and an fp32 scale) written. The positions and the cos/sin table (about
    1% at 32 heads) are not counted."""
    read = heads * head_dim * 2 + head_dim * 2 + heads * 2
    written = heads * head_dim + heads * 4 + head_dim + 4
    return tokens * (read + written)


def indexer_forward_self(q, kw, k_norm, indexer_op, heads: int, head_dim: int = HEAD_DIM):
    """A stand-in `self` for the release's `Indexer.forward` (deepseek_v2.py) that takes its sm_8x branch
    (`use_fused_indexer_q` False, as `has_device_capability(89)` makes it there): its projections return `q`
    ([tokens, heads * head_dim]) and `kw` ([tokens, head_dim + heads]) as they are (their GEMMs are not timed),
    `k_norm` is the key's LayerNorm and `indexer_op(hidden_states, q_fp8, k, weights)` what it hands on to."""
    return types.SimpleNamespace(
        wq_b=lambda qr: (q, None),
        wk_weights_proj=lambda hidden_states: (kw, None),
        k_norm=k_norm,
        n_head=heads,
        head_dim=head_dim,
        rope_dim=INDEXER_ROPE_DIM,
        is_inplace_rope=False,
        use_fused_indexer_q=False,
        quant_block_size=head_dim,
        scale_fmt="ue8m0",
        softmax_scale=head_dim**-0.5,
        n_head_scale=heads**-0.5,
        indexer_op=indexer_op,
    )


def time_indexer_q(record, do_bench, torch, release: Path | None) -> None:
    """The indexer's query path on sm_8x, from the query and the fused projection's output to what the indexer op
    takes, and the K-cache insert: the release's `Indexer.forward` on `indexer_forward_self`, its `indexer_op` being
    the release's `indexer_k_quant_and_cache` call of `sparse_attn_indexer` (k, the raw cache, the slot mapping, 128,
    "ue8m0") into a cache of 64-token blocks on the 73,728-byte page, at each of INDEXER_ROPES. The row names the
    RoPE class, the method its CustomOp dispatched to and whether FlashInfer's RoPE is on. Timed eagerly, op by op: in
    a served model under torch.compile, Inductor may fuse the chain's torch ops (`--enforce-eager` runs them as
    here)."""
    with release_vllm(release):
        from vllm.config import VllmConfig, set_current_vllm_config
        from vllm.model_executor.layers.layernorm import LayerNorm
        from vllm.model_executor.layers.rotary_embedding import get_rope
        from vllm.model_executor.models.deepseek_v2 import Indexer

        from vllm import _custom_ops as ops

        k_norm = LayerNorm(HEAD_DIM, eps=1e-6).to("cuda")
        for (label, heads), (rope_label, rope_parameters), tokens in itertools.product(
            INDEXER, INDEXER_ROPES, INDEXER_Q_TOKENS
        ):
            path: dict = {}  # which RoPE ran, put on the row

            def measure(heads=heads, tokens=tokens, rope_parameters=rope_parameters, path=path):
                with set_current_vllm_config(VllmConfig()):
                    rope = get_rope(
                        INDEXER_ROPE_DIM,
                        max_position=INDEXER_MAX_POSITION,
                        is_neox_style=True,
                        rope_parameters=rope_parameters,
                        dtype=torch.bfloat16,
                    ).to("cuda")
                method = getattr(getattr(rope, "_forward_method", None), "__name__", None)
                path.update(
                    rope=f"{type(rope).__name__}.{method}", use_flashinfer=getattr(rope, "use_flashinfer", None)
                )
                q = torch.randn(tokens, heads * HEAD_DIM, device="cuda").to(torch.bfloat16)
                kw = torch.randn(tokens, HEAD_DIM + heads, device="cuda").to(torch.bfloat16)
                positions = torch.randint(0, 131_072, (tokens,), device="cuda")
                blocks = math.ceil(tokens / BLOCK) + 1
                cache = torch.zeros(blocks, PAGE, dtype=torch.uint8, device="cuda")
                cache = cache[:, : BLOCK * (HEAD_DIM + 4)].view(blocks, BLOCK, HEAD_DIM + 4)
                slots = torch.randperm(blocks * BLOCK, device="cuda")[:tokens]

                def insert(hidden_states, q_fp8, k, weights):
                    ops.indexer_k_quant_and_cache(k, cache, slots, HEAD_DIM, "ue8m0")
                    return q_fp8, weights

                me = indexer_forward_self(q, kw, k_norm, insert, heads)
                return do_bench(functools.partial(Indexer.forward, me, None, None, positions, rope))

            def rec(row: dict, path=path) -> None:
                record({**row, **path})

            shape = f"{label} {heads}h x {HEAD_DIM} tokens {tokens} rope {rope_label}"
            _guarded(rec, "indexer query path (sm_8x)", shape, indexer_q_bytes(tokens, heads), measure)


def graph_ms(fn, torch, calls: int = 20, replays: int = 9, flush_bytes: int = 256 << 20) -> float:
    """`fn`'s GPU time in ms as a CUDA graph replays it, as vLLM's decode graphs run the sparse-MLA decode: no host
    launch time, which `do_bench` measures instead wherever the kernels take less time than their Python launch (one
    to eight rows). `fn` runs once first (compile, autotune: nothing is tuned inside a capture); then one graph of
    `calls` x (an L2 flush, `fn`) and one of `calls` flushes alone are each replayed `replays` times, and the result is
    the difference of their median replays over `calls`: every call starts with the L2 cold, as do_bench's do, and
    the flush's own time is taken out. `flush_bytes` (256 MiB) is larger than an A100's, H100's or H200's L2."""
    import statistics

    fn()
    torch.cuda.synchronize()
    flush = torch.empty(flush_bytes // 4, dtype=torch.int32, device="cuda")

    def capture(with_fn: bool):
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            for _ in range(calls):
                flush.zero_()
                if with_fn:
                    fn()
        return graph

    def median_replay(graph) -> float:
        graph.replay()
        torch.cuda.synchronize()
        times = []
        for _ in range(replays):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            graph.replay()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end))
        return statistics.median(times)

    with_fn, flushes = capture(True), capture(False)
    ms = (median_replay(with_fn) - median_replay(flushes)) / calls
    return ms


def wall_ms(fn) -> float:
    """`fn`'s time once, in ms, by the wall clock: the CPU tests' stand-in for `triton.testing.do_bench`."""
    start = time.perf_counter()
    fn()
    return (time.perf_counter() - start) * 1e3


def extra_sections(mods, record, native: Path, chosen=SECTIONS, release: Path | None = None) -> None:
    """The sections after the paged logits and the sparse-MLA decode that `chosen` names, in order; one that fails
    as a whole (not shape by shape) records a row saying so and the next one runs. `release`: the tree whose own
    `vllm` the top-k and indexer-q sections import (`release_vllm`)."""
    import torch
    from triton.testing import do_bench

    sections = (
        ("prefill-logits", "indexer prefill logits", lambda: time_prefill_logits(mods, record, do_bench, torch)),
        ("mtp", "MTP rows", lambda: time_mtp_rows(mods, record, do_bench, torch)),
        ("native", "native Hopper kernels", lambda: time_native(record, do_bench, torch, native)),
        ("topk", "indexer top-k", lambda: time_topk(record, do_bench, torch, release)),
        ("mla-prefill", "sparse MLA prefill", lambda: time_mla_prefill(mods, record, do_bench, torch)),
        ("indexer-q", "indexer query path", lambda: time_indexer_q(record, do_bench, torch, release)),
    )
    for key, name, run in sections:
        if key not in chosen:
            continue
        try:
            run()
        except Exception as exc:  # noqa: BLE001 - a section's failure is its row
            record(_unavailable(name, "(section)", 0, exc))
        torch.cuda.empty_cache()


if __name__ == "__main__":
    sys.exit(main())
