"""Faults injected into a running vLLM engine's DSA path, one layer at a time, to show a proof can fail.

`install(model, fault, layer)` runs inside the engine's worker (through `LLM.apply_model`) on the model's
`nn.Module`. It hooks decoder layer `layer`'s attention module (`model.layers.N.self_attn`, the same name in every
release 0.26-0.33):
- the top-k faults rewrite the rows of the shared top-k buffer (`topk_indices_buffer`, one per model; the indexer
  of a full layer writes it and every layer reads it) right before the layer runs, for the tokens of this forward;
- `ZERO_OUTPUT` replaces the attention module's output with zeros.

What each fault does to the rows (the `Fault` enum is the reference model's, so the CPU and GPU proofs name the
same faults):
- SHIFT: every valid index + 1;
- OTHER_REQUEST: the rows rolled by one, so in a decode batch of several requests each request reads the row of
  the request before it (in a prefill chunk, the row of the token before it);
- PREVIOUS_STEP: once the batch has the same number of rows as the step before (steady decode), each row is the
  previous step's row;
- UNFILLED: zeros, as if the full layer never wrote the buffer (every index reads position 0).

Hooks run in eager mode only: a CUDA graph replays its captured kernels and skips Python. `install` returns a
description of what it hooked; it raises `EngineFaultError` when the layer or the buffer is not found, so a fault
that would silently do nothing cannot pass as injected.
"""

from __future__ import annotations

from typing import Any

from ..errors import ComposeError
from .recall_model import Fault


class EngineFaultError(ComposeError):
    """A fault could not be installed."""


def _find(model: Any, layer: int):
    suffix = f"layers.{layer}.self_attn"
    found = [(n, m) for n, m in model.named_modules() if n.endswith(suffix) and f".{suffix}" in f".{n}"]
    # the main model's layer, not an MTP wrapper's (its layers are numbered from num_hidden_layers)
    found = [(n, m) for n, m in found if "mtp" not in n]
    if len(found) != 1:
        raise EngineFaultError(
            f"expected one attention module named '*{suffix}', found {[n for n, _ in found]}",
            hint="the model's module names differ from the releases this was written against",
        )
    return found[0]


def _buffer(model: Any, attn: Any):
    import torch

    for holder in [attn, *attn.modules(), model, *model.modules()]:
        buf = getattr(holder, "topk_indices_buffer", None)
        if isinstance(buf, torch.Tensor):
            return buf
    raise EngineFaultError(
        "no tensor attribute 'topk_indices_buffer' in the layer or the model",
        hint="the release keeps its top-k elsewhere; the top-k faults cannot be injected here",
    )


def _tokens(args: tuple, kwargs: dict) -> int:
    import torch

    for x in [*args, *kwargs.values()]:
        if isinstance(x, torch.Tensor) and x.dim() == 2 and x.is_floating_point():
            return int(x.shape[0])
    raise EngineFaultError("the attention's forward got no 2-D hidden-states tensor", hint="unexpected signature")


#: the hooks this process installed and their counters (the worker keeps them between `apply_model` calls)
_HANDLES: list = []
_STATES: list = []


def install(model: Any, fault: str, layer: int) -> dict:
    """Hook `fault` (a `Fault` value) into decoder layer `layer`; returns what was hooked."""
    import torch

    kind = Fault(fault)
    name, attn = _find(model, layer)
    info = {"fault": kind.value, "layer": layer, "module": name, "class": type(attn).__name__}
    if kind is Fault.NONE:
        return info
    if kind is Fault.ZERO_OUTPUT:

        def zero(_mod, _args, output):
            if isinstance(output, torch.Tensor):
                return torch.zeros_like(output)
            return type(output)(torch.zeros_like(o) if isinstance(o, torch.Tensor) else o for o in output)

        _HANDLES.append(attn.register_forward_hook(zero))
        info["hook"] = "forward: output zeroed"
        return info
    buf = _buffer(model, attn)
    info["buffer"] = {"shape": list(buf.shape), "dtype": str(buf.dtype)}
    state: dict[str, Any] = {"prev": None, "calls": 0, "faulted": 0}

    def pre(_mod, args, kwargs):
        n = _tokens(args, kwargs)
        rows = buf[:n]
        state["calls"] += 1
        if kind is Fault.SHIFT:
            rows.copy_(torch.where(rows >= 0, rows + 1, rows))
        elif kind is Fault.UNFILLED:
            rows.zero_()
        elif kind is Fault.OTHER_REQUEST:
            rows.copy_(torch.roll(rows.clone(), 1, 0))
        elif kind is Fault.PREVIOUS_STEP:
            prev, now = state["prev"], rows.clone()
            if prev is not None and prev.shape == now.shape:
                rows.copy_(prev)
                state["faulted"] += 1
            state["prev"] = now
            return None
        state["faulted"] += 1
        return None

    _HANDLES.append(attn.register_forward_pre_hook(pre, with_kwargs=True))
    _STATES.append(state)
    info["hook"] = "forward pre-hook: top-k rows rewritten"
    return info


def install_probe(model: Any, layer: int, max_rows: int = 8, columns: tuple[int, int] | None = None) -> dict:
    """Record (to the CPU) the top-k rows decoder layer `layer` reads and, with `columns` (lo, hi), those columns of
    its attention output and the output's norm, for each forward of at most `max_rows` tokens (decode steps; prefill
    chunks are left out); `clear` returns them. Changes nothing."""
    import torch

    name, attn = _find(model, layer)
    buf = _buffer(model, attn)
    state: dict[str, Any] = {"calls": 0, "faulted": 0, "rows": [], "outputs": []}

    def pre(_mod, args, kwargs):
        n = _tokens(args, kwargs)
        state["calls"] += 1
        if n <= max_rows:
            state["rows"].append(buf[:n].cpu().tolist())
        return None

    def post(_mod, _args, output):
        out = output if isinstance(output, torch.Tensor) else output[0]
        if columns is not None and out.dim() == 2 and out.shape[0] <= max_rows:
            lo, hi = columns
            x = out.float()
            state["outputs"].append({"columns": x[:, lo:hi].cpu().tolist(), "norm": x.norm(dim=-1).cpu().tolist()})
        return None

    _HANDLES.append(attn.register_forward_pre_hook(pre, with_kwargs=True))
    _HANDLES.append(attn.register_forward_hook(post))
    _STATES.append(state)
    return {"probe": name, "layer": layer, "buffer": {"shape": list(buf.shape), "dtype": str(buf.dtype)}}


def clear(_model: Any = None) -> dict:
    """Remove every hook `install` / `install_probe` added in this process; returns the top-k hooks' counters
    (calls, faulted) and, for a probe, the rows it recorded (per forward, per token)."""
    out = []
    for st in _STATES:
        entry = {"calls": st["calls"], "faulted": st["faulted"]}
        if "rows" in st:
            entry["rows"] = st["rows"]
            entry["outputs"] = st["outputs"]
        out.append(entry)
    for handle in _HANDLES:
        handle.remove()
    _HANDLES.clear()
    _STATES.clear()
    return {"hooks": out}
