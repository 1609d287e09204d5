"""Each DSA layer of a running engine, and its final logits, against the checkpoint reference.

The engine oracle (`engine_oracle`) holds each kernel to an fp32 reference *on the kernel's own arguments*, so a
wrong softmax scale, a wrong RoPE, a wrongly scaled cache insert or a wrong projection upstream of those arguments
passes it. This probe judges the layer instead: `install` (run in the engine's worker through `LLM.apply_model`)
records, for one request's generation in eager mode, every main-model decoder layer's attention input (the
`input_layernorm` output the attention module is called with) and output (after `o_proj`), and the logits the
model computes each step. `judge` then recomputes, from the checkpoint's files and config.json alone
(`checkpoint_reference`), each layer's attention output at chosen prefill rows and at every decode step, on the
engine's own layer input, and the whole model's final logits from the token ids, and compares them.

The top-k is judged apart from the attention. Where the attention module holds the top-k buffer its layer reads
(`topk_indices_buffer`, vLLM's DeepseekV32Attention), the probe records the rows the layer used: a layer that
computes its own top-k has it held to the reference indexer's logits tie-aware (`dsa_oracle.compare_topk`: a key the
reference ranks within `TOPK_TIE_TOLERANCE` of its k-th logit counts as right, since bf16 projections and the fp8
cast move near-ties at the boundary), a shared layer must read exactly the last computed rows, and the attention is
then recomputed over the engine's own selection, so that a boundary tie cannot fail a faithful layer while a wrong
indexer RoPE still fails its top-k. Without that buffer the reference's own top-k is used (`topk_source`).

Thresholds (`LAYER_TOLERANCE`, `LOGITS_TOLERANCE`) are relative L2 errors per row; the module doc of
`checkpoint_reference` says what the reference computes. A CUDA graph replays kernels without Python, so the probe
runs in eager mode only; with MTP the forward holds draft tokens, so it runs without MTP.
"""

from __future__ import annotations

import re
from typing import Any

from ..errors import ComposeError
from .checkpoint_reference import compare_rows


class LayerProbeError(ComposeError):
    """The probe could not be installed or judged."""


#: a layer's attention output at a row: relative L2 error against the reference at most this (bf16 weights and
#: activations, the fp8 indexer's ties at the top-k boundary; measured on an H200, docs/user-guide.md)
LAYER_TOLERANCE = 0.05
#: the final logits at a row: relative L2 error at most this (every layer's bf16 rounding compounds)
LOGITS_TOLERANCE = 0.05
#: a layer's own top-k: tie-aware recall at least this, a key within this fraction of the row's largest |logit| of
#: the reference's k-th logit counting as right (the engine's bf16 projections and fp8 cast against fp32)
TOPK_MIN_RECALL = 0.95
TOPK_TIE_TOLERANCE = 0.02
#: an MoE layer's routing near-tie: the k-th chosen expert's choice score (sigmoid plus correction bias) at most this
#: above the best one left out. The engine's bf16 router may take the other expert there, so a logits row off the
#: reference is judged again with that choice swapped (`_route_ties`: up to `ROUTE_SWAP_ROUNDS` near-ties a row,
#: narrowest first, `ROUTE_SWAP_FORWARDS` extra forwards a comparison). Measured on the random GLM-5-shaped model:
#: clean rows 16% and 29% off at margins 0.0044 and 0.0012 while every layer's attention agreed within 0.6%
ROUTE_TIE_MARGIN = 0.01
ROUTE_SWAP_ROUNDS = 2
ROUTE_SWAP_FORWARDS = 4

_NAME = re.compile(r"(?:^|\.)layers\.(\d+)\.self_attn$")

_S: dict[str, Any] = {"armed": False, "layers": {}, "logits": [], "handles": [], "last_positions": None}


def _layers(model: Any) -> dict[int, Any]:
    found: dict[int, Any] = {}
    for name, mod in model.named_modules():
        m = _NAME.search(name)
        if m and "mtp" not in name:
            found.setdefault(int(m.group(1)), mod)
    return found


def _find_logits_processor(model: Any):
    for name, mod in model.named_modules():
        if name.split(".")[-1] == "logits_processor" and "mtp" not in name:
            return mod
    return None


def install(model: Any) -> dict:
    """Hook every main-model layer's attention and the logits processor; records only while `arm(True)`."""
    import torch

    layers = _layers(model)
    if not layers:
        raise LayerProbeError(
            "no module named '*layers.N.self_attn' in the model", hint="the release names its layers otherwise"
        )
    lp = _find_logits_processor(model)
    if lp is None:
        raise LayerProbeError("no 'logits_processor' module in the model", hint="the release computes logits otherwise")
    clear()

    def pre(index: int):
        def hook(_mod, args, kwargs):
            if not _S["armed"]:
                return None
            pos = kwargs.get("positions", args[0] if args else None)
            x = kwargs.get("hidden_states", args[1] if len(args) > 1 else None)
            if not (isinstance(pos, torch.Tensor) and isinstance(x, torch.Tensor)):
                raise LayerProbeError("the attention was called without positions and hidden_states tensors")
            _S["layers"].setdefault(index, []).append({"positions": pos.clone(), "x": x.clone()})
            if index == min(layers):
                _S["last_positions"] = pos.clone()
            return None

        return hook

    def post(index: int):
        def hook(_mod, _args, output):
            if not _S["armed"]:
                return None
            out = output if isinstance(output, torch.Tensor) else output[0]
            rec = _S["layers"][index][-1]
            rec["out"] = out.clone()
            if buffer is not None:
                rec["topk"] = buffer[: out.shape[0]].clone()
            return None

        return hook

    def logits_hook(_mod, _args, output):
        if _S["armed"] and isinstance(output, torch.Tensor) and _S["last_positions"] is not None:
            _S["logits"].append({"position": int(_S["last_positions"].max()), "logits": output[-1:].float().clone()})
        return None

    buffer = _topk_buffer(layers)
    for index, mod in layers.items():
        _S["handles"].append(mod.register_forward_pre_hook(pre(index), with_kwargs=True))
        _S["handles"].append(mod.register_forward_hook(post(index)))
    _S["handles"].append(lp.register_forward_hook(logits_hook))
    return {
        "layers": sorted(layers),
        "logits_processor": type(lp).__name__,
        "topk_buffer": None if buffer is None else list(buffer.shape),
    }


def _topk_buffer(layers: dict[int, Any]):
    """The model's top-k buffer (one for all layers: each layer with an indexer writes it, the attention and the
    layers sharing the top-k read it), on the attention module (v0.34.0) or its indexer (earlier releases); None
    where neither holds one."""
    import torch

    for mod in layers.values():
        for holder in (mod, getattr(mod, "indexer", None)):
            buf = getattr(holder, "topk_indices_buffer", None)
            if isinstance(buf, torch.Tensor):
                return buf
    return None


def arm(on: bool = True) -> None:
    _S["armed"] = on


def clear(_model: Any = None) -> dict:
    """Remove the hooks and forget the records."""
    for h in _S["handles"]:
        h.remove()
    n = sum(len(v) for v in _S["layers"].values())
    _S.update(armed=False, layers={}, logits=[], handles=[], last_positions=None)
    return {"forwards_recorded": n}


def forget() -> None:
    """Forget the records (the hooks stay)."""
    _S.update(layers={}, logits=[], last_positions=None)


def records() -> dict:
    """The records so far: per layer (positions, x, out) per forward, and the logits per forward."""
    return {"layers": _S["layers"], "logits": _S["logits"]}


def _assemble(entries: list[dict], torch) -> tuple[Any, Any, Any, Any]:
    """One request's positions, inputs, outputs and (when recorded) top-k rows over its forwards, ordered by
    position (each position once)."""
    pos = torch.cat([e["positions"].long() for e in entries])
    x = torch.cat([e["x"] for e in entries]).float()
    out = torch.cat([e["out"] for e in entries]).float()
    order = torch.argsort(pos)
    pos, x, out = pos[order], x[order], out[order]
    if pos.numel() and not torch.equal(pos, torch.arange(pos.numel(), device=pos.device)):
        raise LayerProbeError(
            f"the recorded positions are not 0..{pos.numel() - 1} once each (one request, no MTP, no prefix cache)",
            hint="run the probe on one request without MTP",
        )
    topk = None
    if all("topk" in e for e in entries):
        width = max(e["topk"].shape[1] for e in entries)
        topk = torch.cat(
            [torch.nn.functional.pad(e["topk"].long(), (0, width - e["topk"].shape[1]), value=-1) for e in entries]
        )[order]
    return pos, x, out, topk


def check_rows(prompt_len: int, total: int, prefill_rows: int = 4, decode_rows: int = 8) -> list[int]:
    """The rows judged: `prefill_rows` spread over the prompt (its last included) and up to `decode_rows` decode
    steps."""
    step = max(1, prompt_len // prefill_rows)
    pre = sorted({min(prompt_len - 1, k * step + step - 1) for k in range(prefill_rows)})
    return pre + list(range(prompt_len, min(total, prompt_len + decode_rows)))


def judge(
    reference: Any, prompt_tokens: list[int], generated: list[int], logits: bool = True, baseline: dict | None = None
) -> dict:
    """Each recorded layer against `reference` (a `CheckpointReference`) on the engine's own layer inputs, and the
    final logits against the reference's forward of the token ids; returns per-layer metrics and the verdicts.
    With `baseline` (an earlier run's `judged_topk()`), each computing layer also reports the share of its top-k
    picks at the judged rows that the baseline picked too (`topk_overlap_with_clean`): whether a fault moved the
    engine's selection at all. Only the prompt rows compare like with like: decode rows differ wherever the two
    runs generated different tokens. `inputs` is None when layer 0 was not recorded."""
    import torch

    layers = _S["layers"]
    if not layers:
        raise LayerProbeError("nothing was recorded", hint="install, arm(True), generate one request, then judge")
    tf32 = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    try:
        rows: list[int] = []
        per_layer: dict[int, dict] = {}
        selections: dict[int, Any] = {}
        judged_rows: dict[int, Any] = {}
        inputs: dict[str, Any] | None = None
        topk = None
        for index in sorted(layers):
            pos, x, out, engine_topk = _assemble(layers[index], torch)
            if index == 0:
                inputs = _judge_inputs(reference, list(prompt_tokens) + list(generated), pos, x, torch)
            if not rows:
                rows = check_rows(len(prompt_tokens), int(pos.numel()))
            w = reference.attention_weights(index)
            shared = reference.shares(index) and topk is not None
            verdict: dict[str, Any] = {}
            if engine_topk is not None:
                selections[index] = engine_topk
                got = engine_topk[rows].to(x.device)
                if shared:
                    same = bool(torch.equal(got, topk))
                    verdict = {"topk_same_as_last": same, "topk_passed": same}
                else:
                    verdict = _judge_topk(reference, reference.indexer_logits(w, x, pos, rows), got)
                    judged_rows[index] = got.cpu()
                    if baseline and index in baseline and baseline[index].shape == got.shape:
                        verdict["topk_overlap_with_clean"] = _overlap(got.cpu(), baseline[index], torch)
                topk = got
            elif not shared:
                topk = reference.indexer_topk(w, x, pos, rows)
            ref = reference.attention(w, x, pos, rows, topk)
            m = compare_rows(out[rows], ref)
            m.update(verdict)
            m["shared_topk"] = reference.shares(index)
            m["topk_source"] = "engine" if engine_topk is not None else "reference"
            m["passed"] = m["max_relative_error"] <= LAYER_TOLERANCE and verdict.get("topk_passed") is not False
            per_layer[index] = m
            del w
        _S["judged_topk"] = judged_rows
        result: dict[str, Any] = {
            "inputs": inputs,
            "rows": rows,
            "layers": {str(k): v for k, v in per_layer.items()},
            "layer_tolerance": LAYER_TOLERANCE,
            "layers_passed": all(v["passed"] for v in per_layer.values()),
            "worst_layer_error": max(v["max_relative_error"] for v in per_layer.values()),
        }
        if logits:
            result["logits"] = _judge_logits(reference, prompt_tokens, generated, selections, torch)
        return result
    finally:
        torch.backends.cuda.matmul.allow_tf32 = tf32


#: a first layer's recorded input row off the normed embedding of the token at its position by more than this
#: (relative L2) names that position in `inputs` (bf16 rounding is about 0.4%)
INPUT_TOLERANCE = 0.02


def _judge_inputs(reference: Any, seq: list[int], pos: Any, x: Any, torch) -> dict:
    """A diagnosis, not a verdict: layer 0's input rows `x` (at `pos`, as assembled) against the normed embeddings
    of the tokens the request holds at those positions (prompt, then the generated tokens), so that a row the
    engine ran on another token (a step on a placeholder, a misplaced row) is named by position."""
    n = min(int(pos.numel()), len(seq))
    if n == 0:
        return {"rows": 0, "rows_off": 0, "positions_off": []}
    emb = reference.tensors("model.embed_tokens.")["weight"]
    norm = reference.tensors("model.layers.0.input_layernorm.")["weight"]
    want = reference._rms(emb[torch.tensor(seq[:n])].float().to(x.device), norm.float().to(x.device))
    rel = (x[:n] - want).norm(dim=-1) / want.norm(dim=-1).clamp_min(1e-12)
    off = (rel > INPUT_TOLERANCE).nonzero().flatten().tolist()
    return {
        "rows": n,
        "max_relative_error": float(rel.max()),
        "rows_off": len(off),
        "positions_off": [int(pos[i]) for i in off[:8]],
    }


def judged_topk() -> dict:
    """The top-k rows the last `judge` read at its judged rows, per computing layer (CPU tensors): a baseline."""
    return dict(_S.get("judged_topk") or {})


def _overlap(got: Any, base: Any, torch) -> float:
    """The mean, over rows, of the share of `got`'s valid picks that `base` picked in the same row."""
    shares = []
    for g, b in zip(got.long(), base.long(), strict=True):
        g = g[g >= 0]
        shares.append(float(torch.isin(g, b[b >= 0]).float().mean()) if g.numel() else 1.0)
    return sum(shares) / len(shares) if shares else 1.0


def _judge_topk(reference: Any, logits: Any, got: Any) -> dict:
    """A layer's own top-k rows against the reference indexer's `logits` [rows, T], tie-aware."""
    from .dsa_oracle import compare_topk  # imports torch

    v = compare_topk(
        got, reference.topk_of(logits), logits=logits, min_recall=TOPK_MIN_RECALL, tie_tolerance=TOPK_TIE_TOLERANCE
    )
    return {"topk_min_tie_recall": v.min_tie_recall, "topk_min_recall": v.min_recall, "topk_passed": v.passed}


def _judge_logits(reference: Any, prompt_tokens: list[int], generated: list[int], selections: dict, torch) -> dict:
    """The recorded final logits against the reference's forward of the token ids. With the engine's selections
    recorded, every layer attends over them (each judged per layer), so that a tie at the top-k boundary moves
    neither side; `own_topk` then holds the comparison with the reference's own indexer throughout, where a wrong
    indexer RoPE shows in the logits too (and a boundary tie may). A row off the reference at a routing near-tie is
    judged with the engine's side of it taken (`_route_ties`, reported in `route_swaps`)."""
    seq = list(prompt_tokens) + list(generated)
    recs = [r for r in _S["logits"] if len(prompt_tokens) - 1 <= r["position"] < len(seq) - 1]
    if not recs:
        raise LayerProbeError("no logits were recorded at the prompt's end or a decode step")
    rows = [r["position"] for r in recs]
    got = torch.cat([r["logits"] for r in recs])

    def compare(sel: dict | None) -> dict:
        fwd = reference.forward(seq[: max(rows) + 1], rows, selections=sel)
        want = fwd["logits"]
        ours = got[:, : want.shape[1]].to(want.device)
        swaps: list[dict] = []
        if fwd.get("route_margins"):
            want = _route_ties(reference, seq[: max(rows) + 1], rows, sel, ours, want, fwd["route_margins"], swaps)
        m = compare_rows(ours, want, per_row=True)
        m["positions"] = rows
        if fwd.get("route_margins"):
            # the narrowest expert choice on each row's way through the MoE layers (layer, margin)
            stacked = torch.stack([v.float() for v in fwd["route_margins"].values()])
            layers_ = list(fwd["route_margins"])
            low = stacked.min(dim=0)
            m["row_route_margins"] = [
                [layers_[int(i)], round(float(v), 6)] for v, i in zip(low.values, low.indices, strict=True)
            ]
            m["route_swaps"] = swaps
        m["argmax_agree"] = int((ours.argmax(-1) == want.argmax(-1)).sum())
        m["tolerance"] = LOGITS_TOLERANCE
        m["passed"] = m["max_relative_error"] <= LOGITS_TOLERANCE
        return m

    m = compare(selections or None)
    m["selection"] = "engine" if selections else "reference"
    if selections:
        m["own_topk"] = compare(None)
    return m


def _route_ties(reference: Any, seq: list[int], rows: list[int], sel, ours, want, margins: dict, swaps: list):
    """The reference logits at `rows` with the engine's side of its routing near-ties taken: `want` (the reference's
    own routing) unless a row is off the engine by more than `LOGITS_TOLERANCE` and has a near-tie
    (`ROUTE_TIE_MARGIN`). Rows are taken in order; an off row's near-ties are tried narrowest first (at most
    `ROUTE_SWAP_ROUNDS`), each a forward with that expert choice swapped on top of the swaps kept so far, and the
    first that brings the row within tolerance is kept, its forward then judging the rows after it (a swap moves
    later rows too, through the row's keys). What comes back is one routing of the whole sequence, never a mix; at
    most `ROUTE_SWAP_FORWARDS` forwards, and none when more rows than that are off (a fault, not a tie: the
    comparison fails as it is). `swaps` gets one entry a try: position, layer, margin, the row's error before
    and after, and whether it was kept."""
    torch = reference.torch
    layers = list(margins)
    stacked = torch.stack([margins[n].float() for n in layers]).to(want.device)  # [layers, rows]

    def errors(ref) -> list[float]:
        return ((ours - ref).norm(dim=-1) / ref.norm(dim=-1).clamp_min(1e-12)).tolist()

    current, errs, plan, left = want, errors(want), {}, ROUTE_SWAP_FORWARDS
    off = [i for i, e in enumerate(errs) if e > LOGITS_TOLERANCE]
    if len(off) > ROUTE_SWAP_FORWARDS:
        # more rows off than near-ties could be tried for: not a tie's doing, and the comparison fails as it stands
        swaps.append({"skipped": f"{len(off)} of {len(rows)} rows off the reference, over {ROUTE_SWAP_FORWARDS}"})
        return current
    for i in off:
        if errs[i] <= LOGITS_TOLERANCE:  # brought within tolerance by an earlier row's swap
            continue
        ties = [int(j) for j in stacked[:, i].argsort() if float(stacked[j, i]) <= ROUTE_TIE_MARGIN]
        for j in ties[:ROUTE_SWAP_ROUNDS]:
            if left == 0:
                return current
            left -= 1
            trial = {n: list(v) for n, v in plan.items()}
            trial.setdefault(layers[j], []).append(rows[i])
            swapped = reference.forward(seq, rows, selections=sel, route_swaps=trial)["logits"]
            after = errors(swapped)
            kept = after[i] <= LOGITS_TOLERANCE
            swaps.append(
                {
                    "position": rows[i],
                    "layer": layers[j],
                    "margin": round(float(stacked[j, i]), 6),
                    "error_routed": round(errs[i], 4),
                    "error_swapped": round(after[i], 4),
                    "kept": kept,
                }
            )
            if kept:
                current, errs, plan = swapped, after, trial
                break
    return current


__all__ = [
    "LAYER_TOLERANCE",
    "LOGITS_TOLERANCE",
    "ROUTE_SWAP_FORWARDS",
    "ROUTE_SWAP_ROUNDS",
    "ROUTE_TIE_MARGIN",
    "TOPK_MIN_RECALL",
    "TOPK_TIE_TOLERANCE",
    "LayerProbeError",
    "arm",
    "check_rows",
    "clear",
    "forget",
    "install",
    "judge",
    "judged_topk",
]
