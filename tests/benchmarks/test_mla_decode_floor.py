"""benchmarks/mla_decode_floor.py without a GPU: every @triton.jit kernel reads only globals Triton accepts.

On the GPU Triton refuses a kernel that reads a plain module global (`QK_DIM = 576`): only `tl.constexpr(...)`
values, modules (tl, triton) and other jit functions may be read. The interpreter (TRITON_INTERPRET=1) does not
catch this, so the kernels' bytecode is walked here instead.
"""

from __future__ import annotations

import dis
import sys
import types
from pathlib import Path

import pytest

triton = pytest.importorskip("triton")
import triton.language as tl  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

import mla_decode_floor as mdf  # noqa: E402


def _allowed(value) -> bool:
    if isinstance(value, (tl.constexpr, types.ModuleType)):
        return True
    # a JITFunction, or under TRITON_INTERPRET=1 the InterpretedFunction that wraps the kernel as .fn
    return isinstance(value, triton.runtime.jit.JITFunction) or (callable(value) and hasattr(value, "fn"))


def _outside_names(fn):
    """(name, value) for every module global and closure variable the function's code reads (builtins such as
    `range`, which Triton accepts, are not module globals)."""
    code = fn.__code__
    closure = dict(zip(code.co_freevars, (c.cell_contents for c in fn.__closure__ or ()), strict=True))
    for ins in dis.get_instructions(code):
        if ins.opname == "LOAD_GLOBAL" and ins.argval in fn.__globals__:
            yield ins.argval, fn.__globals__[ins.argval]
        elif ins.opname == "LOAD_DEREF" and ins.argval in closure:
            yield ins.argval, closure[ins.argval]


def test_kernels_read_only_constexpr_globals():
    kernels = mdf.kernels()
    assert len(kernels) == 4
    for k in kernels:
        fn = getattr(k, "fn", k)
        bad = [name for name, value in _outside_names(fn) if not _allowed(value)]
        assert not bad, f"{fn.__name__} reads non-constexpr globals {bad}"
