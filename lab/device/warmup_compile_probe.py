"""Compile the indexer's pack kernel as vLLM's JIT warm-up asks for it, for sm_80/86 (and sm_90 as the control).

A lab helper; no GPU and no vLLM needed, only Triton. From v0.30.0 `SparseAttnIndexer.__init__` registers
`_PACK_SEQ_TRITON_KERNEL.register_warmup(dtype=current_platform.fp8_dtype(), pad_value=-inf)` when
`kernel_config.enable_jit_warmup` is on (the default; `--enforce-eager` turns it off), and `kernel_warmup()` compiles
every registration at start-up and re-raises a failure. The warm-up compiles `PackSeqTritonKernel.kernel` with the
signature its `warmup_inputs` gives: `TritonWarmupTensor(float8_e4m3fn)` for x / out (16-byte aligned pointers),
an int32 lengths pointer, N / D / Lmax = 1 (`do_not_specialize`, so i32), PAD_VALUE -inf, PAD_IS_UINT8 False,
BLOCK_T = BLOCK_D = 64, num_warps 4, num_stages 2. This script compiles exactly that (variant `fp8 pad -inf`) and the
variant the indexer launches at run time once the series packs the fp8 bytes as uint8 (`uint8 pad 0`: `*u8`
pointers, PAD_VALUE 0, PAD_IS_UINT8 True), for each target, with the Triton of the interpreter that runs it.

The kernel is read from the release's own `vllm/v1/attention/ops/common.py` (`--tree`, a folder holding `vllm/`):
the `kernel` method of `PackSeqTritonKernel` (v0.30.0+), or the module-level `_pack_seq_kernel` of older releases.

    python lab/device/warmup_compile_probe.py --tree /path/to/vllm-0.34.0
    python lab/device/warmup_compile_probe.py --tree DIR --python /tmp/t36/bin/python --python /tmp/t38/bin/python

With `--python` (repeatable) the script runs itself under each interpreter (e.g. one with Triton 3.6.0, the gate's
pin, and one with Triton 3.8.0, vLLM 0.34.0's through torch 2.14.0) and prints their lines together. One line per
Triton version, target and variant: `ok`, or `FAIL` and the compiler's message (the line naming what is not
supported, when there is one). Exit status 0 whatever the verdicts (it reports; it does not judge).
"""

from __future__ import annotations

import argparse
import ast
import subprocess
import sys
from pathlib import Path

#: (label, pointer type of x/out, PAD_VALUE, PAD_IS_UINT8): the warm-up's registration of v0.30.0+, and what the
#: indexer launches on sm_8x with the series' uint8 pack
VARIANTS = (
    ("fp8 pad -inf (the release's warm-up registration)", "*fp8e4nv", float("-inf"), False),
    ("uint8 pad 0 (the runtime pack on sm_8x)", "*u8", 0, True),
)
#: (capability, warp size): the two Ampere targets, and Hopper as the control where fp8e4nv is native
TARGETS = ((80, 32), (86, 32), (90, 32))
#: the launch options `PackSeqTritonKernel.__call__` passes
OPTIONS = {"num_warps": 4, "num_stages": 2}


def load_pack_kernel(tree: Path):
    """The release's pack kernel as a Triton JITFunction, defined alone from its source (nothing of vLLM runs)."""
    import triton
    import triton.language as tl

    path = Path(tree) / "vllm" / "v1" / "attention" / "ops" / "common.py"
    source = path.read_text()
    body = ast.parse(source).body
    fn = None
    for node in body:
        if isinstance(node, ast.ClassDef) and node.name == "PackSeqTritonKernel":
            fn = next((n for n in node.body if isinstance(n, ast.FunctionDef) and n.name == "kernel"), None)
        elif isinstance(node, ast.FunctionDef) and node.name == "_pack_seq_kernel":
            fn = node
        if fn is not None:
            break
    if fn is None:
        sys.exit(f"{path}: neither PackSeqTritonKernel.kernel nor _pack_seq_kernel")
    # keep @triton.jit(...), drop @staticmethod
    fn.decorator_list = [d for d in fn.decorator_list if ast.unparse(d) != "staticmethod"]
    ns = {"triton": triton, "tl": tl}
    module = ast.Module([fn], [])
    # the function's own line numbers, so that Triton's messages point into the release's file
    exec(compile(module, str(path), "exec"), ns)  # noqa: S102 - the release's own kernel
    return ns[fn.name], f"{path}:{fn.lineno}"


def compile_variant(kernel, pointer: str, pad, pad_is_uint8: bool, capability: int, warp: int) -> str | None:
    """Compile one variant for one target; None when it compiles, else the compiler's message."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    names = list(kernel.arg_names)
    signature = {
        "x_ptr": pointer,
        "out_ptr": pointer,
        "lengths_ptr": "*i32",
        "N": "i32",
        "D": "i32",
        "Lmax": "i32",
        "PAD_VALUE": "constexpr",
        "PAD_IS_UINT8": "constexpr",
        "BLOCK_T": "constexpr",
        "BLOCK_D": "constexpr",
    }
    if list(signature) != names:
        return f"the kernel's parameters are {names}, not the v0.30.0+ ones this probe knows"
    constexprs = {"PAD_VALUE": pad, "PAD_IS_UINT8": pad_is_uint8, "BLOCK_T": 64, "BLOCK_D": 64}
    # TritonWarmupTensor(aligned=True).data_ptr() is 0: each pointer gets Triton's 16-byte divisibility attribute
    attrs = {(names.index(p),): [["tt.divisibility", 16]] for p in ("x_ptr", "out_ptr", "lengths_ptr")}
    try:
        triton.compile(
            ASTSource(kernel, signature, constexprs, attrs), target=GPUTarget("cuda", capability, warp), options=OPTIONS
        )
    except Exception as exc:  # every failure is the finding
        lines = [ln.strip() for ln in f"{type(exc).__name__}: {exc}".splitlines() if ln.strip()]
        return next((ln for ln in lines if "not supported" in ln), lines[0] if lines else type(exc).__name__)
    return None


def probe(tree: Path) -> list[str]:
    import triton

    kernel, where = load_pack_kernel(tree)
    out = [f"Triton {triton.__version__} ({sys.executable}), kernel {where}"]
    for label, pointer, pad, is_uint8 in VARIANTS:
        for capability, warp in TARGETS:
            error = compile_variant(kernel, pointer, pad, is_uint8, capability, warp)
            verdict = "ok" if error is None else f"FAIL: {error}"
            out.append(f"  triton {triton.__version__}  sm_{capability}  {label}: {verdict}")
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tree", type=Path, required=True, help="a vLLM release tree (the folder holding vllm/)")
    parser.add_argument(
        "--python",
        action="append",
        default=[],
        help="run under this interpreter instead of the current one (repeatable: one Triton version each)",
    )
    args = parser.parse_args(argv)
    if args.python:
        for python in args.python:
            run = subprocess.run(
                [python, __file__, "--tree", str(args.tree)], capture_output=True, text=True, check=False
            )
            print(run.stdout, end="")
            if run.returncode:
                print(f"  {python}: exit {run.returncode}: {run.stderr.strip().splitlines()[-1:]}")
        return 0
    print("\n".join(probe(args.tree)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
