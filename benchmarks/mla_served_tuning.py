"""The sparse-MLA decode at the configs vLLM serves it with, beside the configs tuned at each shape.

`TRITON_MLA_SPARSE`'s backend primes the kernel's autotune caches once, when a layer's impl is built
(`TritonMLASparseImpl._warmup_autotune`). As composed, that is one call for each split count of
`KV_SPLITS_CANDIDATES`, of one query row whose every index is 0, over a 64-slot latent cache. The kernels' autotune
key is (top-k, split count, heads a program, the tensors' dtypes), with no row count in it, so the configs those calls
pick are the ones every later decode of the server runs, at every batch size, in its CUDA graphs.
`benchmarks/dsa_kernels.py` tunes instead at the first shape of each key on random indices over 600,000 slots, so
its times are the kernel at a config chosen on inputs like a decode's: not necessarily the one served.

This benchmark runs a tree's own warm-up (the method's source, read from the tree's backend file, run against the
tree's kernel module with a stand-in `self`; the indexer's warm-ups are left out), then times each sparse-MLA decode
shape of `dsa_kernels.py` (`MLA` x `MLA_ROWS`, top-k 2,048 over 600,000 slots) in CUDA graphs (`graph_ms`) at the
configs the warm-up chose: "served". Then, for each shape, it clears the autotune caches, tunes at that shape and
times again: "tuned at the shape". Each model's shapes follow a warm-up at its own heads, as a served model's layers
do. Each row gives both times and configs and their ratio; the document keeps every config each warm-up chose.
`--tree` may repeat: a candidate's warm-up (lab/candidates/) beside the composed one, each tree with its backend and
its kernel module.

    python3 benchmarks/mla_served_tuning.py --tree T [--tree T2 ...] [--sm80-ptx] --out FILE.json

A measurement, not a test: it needs a GPU. Rows are written as they finish.
"""

from __future__ import annotations

import argparse
import ast
import functools
import json
import os
import sys
import types
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO / "benchmarks"), str(REPO / "lab" / "device")]

import dsa_kernels as dk  # noqa: E402  (the decode shapes, the launch rules, the graph timer)

BACKEND = "vllm/v1/attention/backends/mla/triton_mla_sparse.py"
KERNEL_MODULE = "vllm.v1.attention.ops.triton_mla_sparse_kernel"
#: the names a composed warm-up reads from other modules than the kernel's, and what they are here: the indexer's
#: warm-ups (another kernel's caches) do nothing, and there is no vLLM config
STUBS = {
    "warmup_fp8_mqa_logits_triton": lambda **kwargs: None,
    "warmup_fp8_paged_mqa_logits_triton": lambda **kwargs: None,
    "get_current_vllm_config_or_none": lambda: None,
}
#: the softmax scale of the stand-in impl: GLM-5's and DeepSeek-V3.2's (qk_head_dim 192) ** -0.5
SM_SCALE = 192**-0.5
#: the indexer the warm-up is handed: GLM-5's (32 heads of 128)
INDEXER = types.SimpleNamespace(n_head=32, head_dim=128)


class WarmupError(Exception):
    """A backend file without the warm-up this benchmark runs, or a warm-up that reads what it does not provide."""


def load_warmup(backend: Path, kernel_mod):
    """The backend's `TritonMLASparseImpl._warmup_autotune(self, indexer)`, compiled from the file's own source with
    its module-level functions, in a namespace of: `torch`, the file's module-level constants, the names it imports
    from the kernel module (bound to `kernel_mod`'s; `num_compute_units` too) and `STUBS`. Raises WarmupError naming
    the file where the class or the method is missing, or where it imports a name the kernel module lacks."""
    import torch

    tree = ast.parse(backend.read_text(), str(backend))
    cls = next((n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "TritonMLASparseImpl"), None)
    method = None if cls is None else next(
        (n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == "_warmup_autotune"), None
    )  # fmt: skip
    if method is None:
        raise WarmupError(f"{backend}: no TritonMLASparseImpl._warmup_autotune: not a TRITON_MLA_SPARSE backend file")
    ns: dict = {"torch": torch, **STUBS}
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and node.module == KERNEL_MODULE:
            for alias in node.names:
                if not hasattr(kernel_mod, alias.name):
                    raise WarmupError(f"{backend} imports {alias.name} from the kernel module, which has none")
                ns[alias.asname or alias.name] = getattr(kernel_mod, alias.name)
        elif isinstance(node, ast.Assign) and all(isinstance(t, ast.Name) for t in node.targets):
            try:
                value = ast.literal_eval(node.value)
            except ValueError:
                continue
            ns.update({t.id: value for t in node.targets})
    ns.setdefault("num_compute_units", getattr(kernel_mod, "num_compute_units", None))
    # the file's own functions (a warm-up may call one), then the method
    functions = [n for n in tree.body if isinstance(n, ast.FunctionDef)]
    exec(compile(ast.Module(body=[*functions, method], type_ignores=[]), str(backend), "exec"), ns)
    warm = ns["_warmup_autotune"]

    @functools.wraps(warm)
    def run(self, indexer) -> None:
        try:
            warm(self, indexer)
        except NameError as exc:
            raise WarmupError(
                f"{backend}: the warm-up reads {exc.name!r}, which this benchmark does not provide"
            ) from None

    run.namespace = ns  # the file's constants and functions as the warm-up sees them
    return run


def impl_self(torch, heads: int, topk: int, sm_count: int, device: str = "cuda"):
    """A stand-in `self` for the warm-up: what `TritonMLASparseImpl.__init__` has set by the time it calls it (the
    shared top-k buffer, the layer's heads and softmax scale, the cached SM count)."""
    return types.SimpleNamespace(
        topk_indices_buffer=torch.empty((1, topk), dtype=torch.int32, device=device),
        num_heads=heads,
        softmax_scale=SM_SCALE,
        _sm_count=sm_count,
    )


def _autotuners(mod):
    return {name: obj for name, obj in vars(mod).items() if hasattr(obj, "cache") and hasattr(obj, "configs")}


def tuned_cache(mod) -> dict:
    """Every config `mod`'s autotuned kernels hold, by kernel and key."""
    return {name: {str(key): str(cfg) for key, cfg in obj.cache.items()} for name, obj in _autotuners(mod).items()}


def forget_tuning(mod) -> None:
    """Empty every autotune cache of `mod`, so that the next call of each key tunes again."""
    for obj in _autotuners(mod).values():
        obj.cache.clear()
        obj.best_config = None
        obj.configs_timings = None


def _timed(bench, run, mod) -> dict:
    """`bench(run)` with the configs the call ran (its kernels' only: every kernel's last config is cleared first,
    not its cache) and the kernels the call tuned (a key no earlier call tuned)."""
    for obj in _autotuners(mod).values():
        obj.best_config = None
        obj.configs_timings = None
    ms = bench(run)
    tuners = _autotuners(mod).items()
    return {
        "ms": ms,
        "configs": {name: str(obj.best_config) for name, obj in tuners if obj.best_config is not None},
        "tuned": sorted(name for name, obj in tuners if obj.configs_timings),
        "timings": {name: {str(c): t for c, t in obj.configs_timings.items()} for name, obj in tuners
                    if obj.configs_timings},
    }  # fmt: skip


def time_served(label: str, mod, warmup, record, bench, torch, sm_count: int, device: str = "cuda") -> dict:
    """One tree: for each model of `dk.MLA`, its warm-up at the model's heads, then every row count of
    `dk.MLA_ROWS` served and tuned at the shape; `record(row)` each. Returns the configs each warm-up left."""
    gen = torch.Generator(device=device).manual_seed(0)
    kv = (torch.randn(dk.MLA_SLOTS, 1, dk.MLA_QK_DIM, device=device, generator=gen) * 0.5).to(torch.bfloat16)
    chosen = {}
    for model, heads in dk.MLA:
        forget_tuning(mod)
        warmup(impl_self(torch, heads, dk.TOPK, sm_count, device), INDEXER)
        chosen[model] = tuned_cache(mod)
        cases = []
        for n in dk.MLA_ROWS:
            q = (torch.randn(n, heads, dk.MLA_QK_DIM, device=device, generator=gen) * 0.5).to(torch.bfloat16)
            idx = torch.randint(0, dk.MLA_SLOTS, (n, 1, dk.TOPK), dtype=torch.int32, device=device, generator=gen)
            run = functools.partial(mod.triton_mla_sparse_attention, q, kv, idx, SM_SCALE, sm_count=sm_count)
            # a key the warm-up left untuned is tuned by this first call, as a server's first decode would
            cases.append((n, run, _timed(bench, run, mod)))
        for n, run, served in cases:
            forget_tuning(mod)
            tuned = _timed(bench, run, mod)
            record({
                "tree": label,
                "shape": f"{model} {heads}h top-k {dk.TOPK} rows {n}",
                "model": model,
                "heads": heads,
                "rows": n,
                "launch": dk.mla_launch(mod, n, heads, dk.TOPK, sm_count),
                "served": served,
                "tuned_at_shape": tuned,
                "served_over_tuned": served["ms"] / tuned["ms"] if tuned["ms"] else None,
                "same_configs": served["configs"] == tuned["configs"],
            })  # fmt: skip
    return chosen


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tree", type=Path, action="append", required=True, help="a tree with the backend and kernel")
    ap.add_argument("--sm80-ptx", action="store_true", help="build every kernel as sm_80 PTX (lab/device/sm80_ptx.py)")
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args(argv)
    for tree in args.tree:
        if not (tree / BACKEND).is_file():
            ap.error(f"--tree {tree}: no {BACKEND} there (the backend whose warm-up is timed)")
    compiled: list[dict] = []
    if args.sm80_ptx:
        from sm80_ptx import enable

        enable(compiled)
    import torch
    from kernel_offsets import install_vllm_shim

    sm_count = torch.cuda.get_device_properties(0).multi_processor_count
    doc = {"gpu": torch.cuda.get_device_name(0), "sm80_ptx": args.sm80_ptx, "sm_count": sm_count, "rows": [],
           "warmup_configs": {}, "compiled": compiled}  # fmt: skip

    def write() -> None:
        tmp = args.out.with_name(args.out.name + ".tmp")
        tmp.write_text(json.dumps(doc, indent=1) + "\n")
        os.replace(tmp, args.out)

    def record(row: dict) -> None:
        doc["rows"].append(row)
        write()
        print(
            f"{row['tree']:<12} {row['shape']:<40} served {row['served']['ms'] * 1e3:8.1f} us  tuned at the shape "
            f"{row['tuned_at_shape']['ms'] * 1e3:8.1f} us  {row['served_over_tuned']:5.2f}x"
            f"{'' if row['same_configs'] else '  (other configs)'}",
            flush=True,
        )

    bench = functools.partial(dk.graph_ms, torch=torch)
    try:
        for tree in args.tree:
            mod = install_vllm_shim(tree)["triton_mla_sparse_kernel"]
            warmup = load_warmup(tree / BACKEND, mod)
            doc["warmup_configs"][tree.name] = time_served(tree.name, mod, warmup, record, bench, torch, sm_count)
            write()
    except WarmupError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
