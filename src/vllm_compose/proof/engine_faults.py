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


#: faults upstream of the DSA kernels' arguments, which the engine oracle cannot see (it checks each kernel on the
#: arguments it was given) and the layer probe (`layer_probe`) must: name -> (what it does, whether the probe must
#: flag it). The indexer's weights scale multiplies every logit of a row alike, so its top-k, and so the layer, is
#: unchanged: the probe must pass it.
MODEL_FAULTS = {
    "softmax-x0.53": ("every layer's MLA softmax scale x0.53 (a dropped yarn mscale**2 at factor 40)", True),
    "softmax-x1.25": ("every layer's MLA softmax scale x1.25", True),
    "indexer-rope-half": ("every indexer's RoPE applied to the other lane pairing (interleaved vs halves)", True),
    "kcache-x2": ("one layer's MLA cache written x2 (latent and rope key, as a cache scale x2 would)", True),
    "indexer-weights-x0.5": ("every indexer's head weights x0.5", False),
}

_UNDO: list = []


def _impls(model: Any) -> list:
    out = []
    for name, mod in model.named_modules():
        impl = getattr(mod, "impl", None)
        if "mtp" not in name and impl is not None and isinstance(getattr(impl, "softmax_scale", None), float):
            out.append(impl)
    return out


def _indexer_attentions(model: Any) -> list:
    """The main model's attention modules that compute a top-k (they hold an indexer)."""
    return [
        m
        for n, m in model.named_modules()
        if n.endswith("self_attn") and "mtp" not in n and getattr(m, "indexer", None) is not None
    ]


def _set(obj: Any, attr: str, value: Any) -> None:
    old = getattr(obj, attr)
    setattr(obj, attr, value)
    _UNDO.append(lambda: setattr(obj, attr, old))


def install_model_fault(model: Any, fault: str, layer: int) -> dict:
    """Apply `fault` (a `MODEL_FAULTS` name; `layer` for the one-layer faults) to the running model; `clear` undoes
    it. Raises `EngineFaultError` when the release holds what the fault changes elsewhere."""
    import torch

    if fault not in MODEL_FAULTS:
        raise EngineFaultError(f"unknown model fault {fault!r}", hint=f"one of: {', '.join(MODEL_FAULTS)}")
    info: dict[str, Any] = {"fault": fault, "what": MODEL_FAULTS[fault][0], "changed": []}
    if fault.startswith("softmax-x"):
        factor = float(fault.removeprefix("softmax-x"))
        impls = _impls(model)
        if not impls:
            raise EngineFaultError(
                "no attention impl with a float softmax_scale", hint="the release names it otherwise"
            )
        for impl in impls:
            _set(impl, "softmax_scale", impl.softmax_scale * factor)
            if isinstance(getattr(impl, "scale", None), float):
                _set(impl, "scale", impl.scale * factor)
            info["changed"].append(type(impl).__name__)
    elif fault in ("indexer-rope-half", "indexer-weights-x0.5"):
        attns = _indexer_attentions(model)
        if not attns:
            raise EngineFaultError("no attention module with an indexer", hint="not a DSA model?")
        # each object once: vLLM's get_rope caches its modules, so before v0.33.0 every indexer holds the same
        # RoPE module, and flipping it once per layer would undo itself with an even number of indexers
        seen: set[int] = set()
        for attn in attns:
            if fault == "indexer-weights-x0.5":
                _set(attn.indexer, "softmax_scale", attn.indexer.softmax_scale * 0.5)
                info["changed"].append("indexer.softmax_scale")
                continue
            flipped = False
            if isinstance(getattr(attn, "_index_rope_interleave", None), bool):  # the fused path (v0.33.0 on)
                _set(attn, "_index_rope_interleave", not attn._index_rope_interleave)
                info["changed"].append("_index_rope_interleave")
                flipped = True
            rope = getattr(attn, "indexer_rope_emb", None)
            if rope is not None and isinstance(getattr(rope, "is_neox_style", None), bool):
                if id(rope) not in seen:
                    seen.add(id(rope))
                    _set(rope, "is_neox_style", not rope.is_neox_style)
                    info["changed"].append(f"indexer_rope_emb.is_neox_style ({type(rope).__name__} {id(rope):#x})")
                flipped = True
            if not flipped:
                raise EngineFaultError(
                    "the indexer's RoPE style was not found (_index_rope_interleave, indexer_rope_emb.is_neox_style)",
                    hint="the release keeps it elsewhere",
                )
    else:  # kcache-x2: the latent's norm weight and the rope key's rows of the A projection, x2
        _name, attn = _find(model, layer)
        norm = getattr(attn, "kv_a_layernorm", None)
        proj = getattr(attn, "fused_qkv_a_proj", None) or getattr(attn, "kv_a_proj_with_mqa", None)
        if norm is None or proj is None:
            raise EngineFaultError("the layer has no kv_a_layernorm / fused_qkv_a_proj", hint="not an MLA layer?")
        rope_rows = attn.qk_rope_head_dim if hasattr(attn, "qk_rope_head_dim") else 64
        with torch.no_grad():
            norm.weight.mul_(2.0)
            proj.weight[-rope_rows:].mul_(2.0)

        def undo():
            with torch.no_grad():
                norm.weight.div_(2.0)
                proj.weight[-rope_rows:].div_(2.0)

        _UNDO.append(undo)
        info["changed"].append(
            f"layer {layer}: kv_a_layernorm.weight and the last {rope_rows} rows of {type(proj).__name__}"
        )
    return info


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
    for undo in reversed(_UNDO):
        undo()
    _UNDO.clear()
    _HANDLES.clear()
    _STATES.clear()
    return {"hooks": out}
