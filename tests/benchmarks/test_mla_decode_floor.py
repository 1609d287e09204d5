"""benchmarks/mla_decode_floor.py without a GPU: every @triton.jit kernel reads only globals Triton accepts, and the
group-partials probe reads every row it is meant to (its GPU self-check, `group_partials_sums`, run in Triton's
interpreter).

On the GPU Triton refuses a kernel that reads a plain module global (`QK_DIM = 576`): only `tl.constexpr(...)`
values, modules (tl, triton) and other jit functions may be read. The interpreter (TRITON_INTERPRET=1) does not
catch this, so the kernels' bytecode is walked here instead.
"""

from __future__ import annotations

import dis
import json
import os
import subprocess
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
    assert len(kernels) == 6
    for k in kernels:
        fn = getattr(k, "fn", k)
        bad = [name for name, value in _outside_names(fn) if not _allowed(value)]
        assert not bad, f"{fn.__name__} reads non-constexpr globals {bad}"


# the group probe in the interpreter (a subprocess: the interpreter must be on before the kernels are decorated): the
# writer and reader at 3 head groups x 2 splits x 4 heads over 64 lanes, rows padded as the benchmark pads them, and a
# reader that skips the last head, as a probe that read too little would
_INTERPRETED = """
import json, sys, torch
sys.path.insert(0, sys.argv[1])
import mla_decode_floor as mdf
_, _, _, _, write, read = mdf.kernels()
p, s, h, lanes, row = 3, 2, 4, 64, 64 + 16
mid = torch.full((p * h * s * row,), -7.0)  # the padding lanes hold -7: a read past a row's lanes shows
red = torch.empty(p)
write[(p * h,)](mid, S=s, ROW=row, LANES=lanes)
read[(p,)](mid, red, S=s, H=h, ROW=row, LANES=lanes)
short = torch.empty(p)
read[(p,)](mid, short, S=s, H=h - 1, ROW=row, LANES=lanes)
print(json.dumps({"full": red.tolist(), "short": short.tolist()}))
"""


def test_the_group_probe_reads_every_row_of_its_heads_and_its_check_fails_a_short_read():
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    proc = subprocess.run(
        [sys.executable, "-c", _INTERPRETED, str(ROOT / "benchmarks")], capture_output=True, text=True, env=env
    )
    assert proc.returncode == 0, proc.stderr
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    want = mdf.group_partials_sums(3, 2, 4, lanes=64)
    assert got["full"] == want  # program 0: 2 x 64 x (1 + 2 + 3 + 4) = 1280
    assert want[0] == 1280.0
    # a reader that skipped a head gives other sums: the GPU run's check would refuse it
    assert all(g < w for g, w in zip(got["short"], want, strict=True))
