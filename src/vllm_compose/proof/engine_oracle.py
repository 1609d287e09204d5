"""The DSA oracle inside a running vLLM engine: each layer's indexer logits, top-k, slot mapping and sparse-MLA
output, as the release's path computed them, against `dsa_oracle` on the same inputs.

`install()` runs in the engine's process (an in-process engine, `VLLM_ENABLE_V1_MULTIPROCESSING=0`, one GPU) before
the engine is built, so that CUDA-graph captures see it. It wraps, by module attribute (each caller looks the name
up at call time):

| wrapped | module (the same in the v0.26.0-v0.33.0 composes) | what is recorded |
|---|---|---|
| `fp8_paged_mqa_logits_triton` | `vllm.model_executor.layers.sparse_attn_indexer` | decode q, weights, context lengths, block table, the kernel's logits (the paged cache by reference) |
| `fp8_mqa_logits_triton` | same | prefill: a sample of rows, the chunk's gathered keys, the kernel's logits of those rows |
| `triton_convert_req_index_to_global_index` | `vllm.v1.attention.backends.mla.xpu_mla_sparse` | the layer's logical top-k (the indexer's output), request ids, block table, the cache slots |
| `triton_mla_sparse_attention` | `vllm.v1.attention.backends.mla.triton_mla_sparse` | q, slots, the kernel's output (the latent cache by reference) |
| `XPUMLASparseImpl.forward_mqa` | `vllm.v1.attention.backends.mla.xpu_mla_sparse` | the layer's name; the records since the last layer are its group |

That is TRITON_MLA_SPARSE's path (`PROFILES`). `install("FLASHMLA_SPARSE")` wraps the native Hopper path instead
(DeepGEMM's `fp8_fp4_paged_mqa_logits` / `fp8_fp4_mqa_logits` in the indexer module, `flash_mla_sparse_fwd`, the
slot mapping and `FlashMLASparseImpl.forward_mqa` in `flashmla_sparse`): the same checks against the same reference,
a second opinion on the oracle from kernels written by others. Inputs the oracle does not model (FP4 indexer q) are
counted in `summary()["unsupported"]` and fail the verdict rather than pass unchecked.

A layer's group is checked when the layer ends (eager) or, when the layer ran inside a CUDA-graph capture, after
each replay of that graph: the records are clones made inside the capture, so each replay refreshes them (the
capture and replay are followed by wrapping `torch.cuda.CUDAGraph.capture_begin/capture_end/replay`). Checks run
only while `arm(True)`: warm-up, profiling and capture runs hold dummy data.

The checks (thresholds: `dsa_oracle`'s defaults, set from measured noise; a profile may widen the logits' bound
for kernels that round more, `Profile.logits_tolerance`):
- `decode_logits` / `prefill_logits`: `compare_logits` on the columns the reference holds finite (the kernels run
  with `clean_logits=False` and leave the rest unwritten);
- `decode_topk` / `prefill_topk`: the layer's top-k rows against `topk_indices` of the reference logits
  (`compare_topk`, tie-aware);
- `slots`: every selected position mapped through the block table to the cache slot the backend passed on
  (exact);
- `attention`: `compare_attention` of the kernel's output against `sparse_mla_attention` over the same slots;
- `index_share`: a layer without an indexer (IndexCache's shared layers) reads exactly the top-k rows the last
  layer with an indexer wrote in the same forward.

`corrupt(kind)` perturbs one wrapped output (eager only) so that a run shows each check can fail on the GPU.
Nothing here prints; `summary()` returns the verdicts as a JSON-able dict.
"""

from __future__ import annotations

import importlib
import inspect
import re
import time
from dataclasses import dataclass, field
from typing import Any

from ..errors import ComposeError

#: (module, attribute) of each wrapped function
INDEXER_MODULE = "vllm.model_executor.layers.sparse_attn_indexer"
SPARSE_MODULE = "vllm.v1.attention.backends.mla.xpu_mla_sparse"
TRITON_MODULE = "vllm.v1.attention.backends.mla.triton_mla_sparse"
FLASHMLA_MODULE = "vllm.v1.attention.backends.mla.flashmla_sparse"


@dataclass(frozen=True)
class Profile:
    """Where one attention backend's DSA path lives: the function each record comes from, and the impl class whose
    `forward_mqa` is one layer."""

    targets: dict[str, tuple[str, str]]
    impl: tuple[str, str]
    #: the indexer logits' `compare_logits` bound, (atol, rtol); None: `dsa_oracle`'s defaults
    logits_tolerance: tuple[float, float] | None = None


#: per attention backend. TRITON_MLA_SPARSE is the Ampere path the compose adds. FLASHMLA_SPARSE is the native
#: Hopper path (DeepGEMM's indexer logits, FlashMLA's sparse kernel on a bf16 cache), run at the GPU's own capability
#: as the oracle's second opinion: its functions take the same inputs under the same parameter names, except that
#: DeepGEMM takes q as (values, scales) (fp8: scales None) and the decode context lengths as (batch, next_n) bounds,
#: and FlashMLA returns [out, max_logits, lse] (a list, from its torch op) and may pad the heads of q.
PROFILES = {
    "TRITON_MLA_SPARSE": Profile(
        targets={
            "decode_logits": (INDEXER_MODULE, "fp8_paged_mqa_logits_triton"),
            "prefill_logits": (INDEXER_MODULE, "fp8_mqa_logits_triton"),
            "slots": (SPARSE_MODULE, "triton_convert_req_index_to_global_index"),
            "attention": (TRITON_MODULE, "triton_mla_sparse_attention"),
        },
        impl=(SPARSE_MODULE, "XPUMLASparseImpl"),
    ),
    "FLASHMLA_SPARSE": Profile(
        targets={
            "decode_logits": (INDEXER_MODULE, "fp8_fp4_paged_mqa_logits"),
            "prefill_logits": (INDEXER_MODULE, "fp8_fp4_mqa_logits"),
            "slots": (FLASHMLA_MODULE, "triton_convert_req_index_to_global_index"),
            "attention": (FLASHMLA_MODULE, "flash_mla_sparse_fwd"),
        },
        impl=(FLASHMLA_MODULE, "FlashMLASparseImpl"),
        # DeepGEMM's FP8 logits: measured on an H100 (v0.26.0, sm_90) up to 5.0e-4 of the row's largest |logit| off
        # the fp32 reference (1.4e-3 absolute), where the compose's Triton kernels stay within the 1e-4 default;
        # the top-k they rank agreed with the reference's in every row. rtol 2e-3: 4x the worst seen
        logits_tolerance=(1e-4, 2e-3),
    ),
}
TARGETS = PROFILES["TRITON_MLA_SPARSE"].targets
IMPL_CLASS = PROFILES["TRITON_MLA_SPARSE"].impl

#: the check kinds, in report order
CHECKS = ("decode_logits", "decode_topk", "prefill_logits", "prefill_topk", "slots", "attention", "index_share")

#: what `corrupt` can perturb, and the check that must then fail
CORRUPTIONS = {
    "logits": "decode_logits",  # the decode logits rolled by one column: the top-k shifts too
    "slots": "slots",  # every cache slot + 1
    "attention": "attention",  # the sparse-MLA output negated
    "topk": "index_share",  # a shared layer's rows rewritten (+1) before it reads them
}

#: at most this many decode rows, prefill rows per chunk and attention tokens per record are checked
MAX_DECODE_ROWS = 16
PREFILL_ROWS = 4
MAX_ATTENTION_TOKENS = 16


class EngineOracleError(ComposeError):
    """The oracle could not be installed."""


@dataclass
class _Group:
    """The records of one layer in one forward."""

    layer: str = ""
    #: the layer's attention heads (`num_heads` of the impl); a kernel may run on q padded past them
    heads: int | None = None
    logits: list[dict] = field(default_factory=list)
    slots: dict | None = None
    attention: dict | None = None


@dataclass
class _Stats:
    """The verdicts of one (layer, check)."""

    count: int = 0
    failed: int = 0
    errors: list[str] = field(default_factory=list)
    worst: dict = field(default_factory=dict)
    first_failure: dict | None = None


class _State:
    def __init__(self) -> None:
        self.originals: dict[str, tuple[Any, str, Any]] = {}
        self.backend = ""
        self.logits_tolerance: dict[str, float] = {}  # compare_logits' atol/rtol for the installed profile
        self.armed = False
        self.corruption: str | None = None
        self.pending: list[dict] = []  # logits records since the last layer ended
        self.current = _Group()  # the layer running now
        self.layer_index = -1  # the last layer's index, to tell forwards apart in eager mode
        self.last_full: dict | None = None  # the last indexer layer's top-k rows of this forward
        self.capturing: list[Any] = []  # graphs being captured (innermost last)
        self.graph_groups: dict[int, list[_Group]] = {}
        self.stats: dict[tuple[str, str], _Stats] = {}
        self.forwards = 0
        self.replays_checked = 0
        self.unattached = 0
        self.check_s = 0.0
        #: inputs the oracle does not model, each with how often it was seen (no record is made of them)
        self.unsupported: dict[str, int] = {}


_S = _State()


def _unsupported(what: str) -> None:
    _S.unsupported[what] = _S.unsupported.get(what, 0) + 1


def _fp8_q(q):
    """The fp8 query values, or None: DeepGEMM takes q as (values, scales), scales None for fp8 (FP4 q is packed
    with block scales, which the oracle does not model)."""
    if isinstance(q, tuple):
        values, scales = q
        if scales is not None:
            _unsupported("FP4 indexer q (values with block scales)")
            return None
        return values
    return q


def _first_output(result):
    """A kernel's output tensor: the result itself, or the first of the several it returns, as a tuple (a Python
    wrapper) or as a list (a torch op declared `-> Tensor[]`, e.g. FlashMLA's `sparse_prefill_fwd`)."""
    return result[0] if isinstance(result, (tuple, list)) else result


def _capturing() -> bool:
    import torch

    return bool(torch.cuda.is_available() and torch.cuda.is_current_stream_capturing())


def _layer_index(name: str) -> int:
    m = re.search(r"layers\.(\d+)\.", name)
    return int(m.group(1)) if m else -1


def _binder(fn):
    """`bind(args, kwargs)` -> the call's arguments by name, defaults filled; the signature read once per wrapped
    function, not at every call (the wrappers run for every layer of every step)."""
    sig = inspect.signature(fn)

    def bind(args, kwargs) -> dict:
        bound = sig.bind(*args, **kwargs)
        bound.apply_defaults()
        return dict(bound.arguments)

    return bind


def _sample(n: int, k: int) -> list[int]:
    """Up to k row indices spread over [0, n), the first and the last included."""
    if n <= k:
        return list(range(n))
    return sorted({round(i * (n - 1) / (k - 1)) for i in range(k)})


# --- the wrappers ----------------------------------------------------------------------------------------------------


def _decode_logits(orig):
    bind = _binder(orig)

    def wrapper(*args, **kwargs):
        logits = orig(*args, **kwargs)
        if not (_S.armed or _capturing()):
            return logits
        a = bind(args, kwargs)
        q = _fp8_q(a["q"])
        if q is None:
            return logits
        # (batch, next_n) per-row bounds (DeepGEMM's form): the last column is the request's length
        context_lens = a["context_lens"]
        if context_lens.ndim == 2:
            context_lens = context_lens[:, -1]
        b = min(q.shape[0], max(1, MAX_DECODE_ROWS // max(1, q.shape[1])))
        rows = b * q.shape[1]
        if _S.corruption == "logits" and not _capturing():
            logits.copy_(logits.roll(1, dims=1))
        _S.pending.append(
            {
                "kind": "decode",
                "q": q[:b].clone(),
                "kv_cache": a["kv_cache"],
                "weights": a["weights"][:rows].clone(),
                "context_lens": context_lens[:b].clone(),
                "block_table": a["block_tables"][:b].clone(),
                "logits": logits[:rows].clone(),
            }
        )
        return logits

    return wrapper


def _prefill_logits(orig):
    bind = _binder(orig)

    def wrapper(*args, **kwargs):
        logits = orig(*args, **kwargs)
        if not _S.armed or _capturing():
            # a capture of prefill (piecewise modes) has no static row sample; only eager prefill is checked
            return logits
        import torch

        a = bind(args, kwargs)
        q, weights = _fp8_q(a["q"]), a["weights"]
        if q is None:
            return logits
        k, k_scale = a["kv"]
        sel = torch.tensor(_sample(q.shape[0], PREFILL_ROWS), device=q.device)
        # the chunk's first row in the forward: `q` is the caller's `q_quant[row_start:row_end]` view of the
        # forward's quantized queries
        start = q.storage_offset() // max(1, q.stride(0))
        _S.pending.append(
            {
                "kind": "prefill",
                "rows": (sel + start).tolist(),
                "q": q[sel].clone(),
                "k": k.clone(),
                "k_scale": k_scale.reshape(-1).clone(),
                "weights": weights[sel].clone(),
                "ks": a["cu_seqlen_ks"][sel].clone(),
                "ke": a["cu_seqlen_ke"][sel].clone(),
                "logits": logits[sel].clone(),
            }
        )
        return logits

    return wrapper


def _slots(orig):
    bind = _binder(orig)

    def wrapper(*args, **kwargs):
        import torch

        a = bind(args, kwargs)
        ti = a["token_indices"]
        if _S.corruption == "topk" and _S.armed and not _capturing() and not _S.current.logits:
            ti.copy_(torch.where(ti >= 0, ti + 1, ti))  # a shared layer reads rows nobody wrote
        result = orig(*args, **kwargs)
        if not (_S.armed or _capturing()):
            return result
        out = _first_output(result)
        if _S.corruption == "slots" and not _capturing():
            out.copy_(torch.where(out >= 0, out + 1, out))
        n = min(ti.shape[0], MAX_DECODE_ROWS)
        rows = list(range(n))
        for rec in _S.current.logits:
            if rec["kind"] == "prefill":
                rows += [r for r in rec["rows"] if r < ti.shape[0]]
        if _capturing():
            idx = slice(0, n)
            rows = rows[:n]
        else:
            rows = sorted(set(rows))
            idx = torch.tensor(rows, device=ti.device)
        _S.current.slots = {
            "rows": rows,
            "token_indices": ti[idx].clone(),
            "req_id": a["req_id"][idx].clone(),
            "block_table": a["block_table"].clone(),
            "block_size": int(a["BLOCK_SIZE"]),
            "stride": int(a.get("BLOCK_STRIDE_ROWS") or a["BLOCK_SIZE"]),
            "out": out[idx].clone(),
        }
        return result

    return wrapper


def _attention(orig):
    bind = _binder(orig)

    def wrapper(*args, **kwargs):
        result = orig(*args, **kwargs)
        if not (_S.armed or _capturing()):
            return result
        import torch

        # FlashMLA returns [out, max_logits, lse]; the Triton kernel the output alone
        out = _first_output(result)
        a = bind(args, kwargs)
        q, indices = a["q"], a["indices"]
        # heads past the layer's own are padding (FlashMLA's bf16 kernel takes a multiple of 64), left unwritten
        heads = min(q.shape[1], _S.current.heads or q.shape[1])
        if _S.corruption == "attention" and not _capturing():
            out.neg_()
        if _capturing():
            idx: Any = slice(0, min(q.shape[0], MAX_ATTENTION_TOKENS))
        else:
            idx = torch.tensor(_sample(q.shape[0], MAX_ATTENTION_TOKENS), device=q.device)
        _S.current.attention = {
            "q": q[idx, :heads].clone(),
            "kv": a["kv"],
            "indices": indices[idx].clone(),
            "sm_scale": float(a["sm_scale"]),
            "out": out[idx, :heads].clone(),
        }
        return result

    return wrapper


def _forward_mqa(orig):
    def wrapper(self, *args, **kwargs):
        if not (_S.armed or _capturing()):
            return orig(self, *args, **kwargs)
        layer = kwargs.get("layer", args[3] if len(args) > 3 else None)
        heads = getattr(self, "num_heads", None)
        _S.current = _Group(
            layer=str(getattr(layer, "layer_name", "?")),
            heads=heads if isinstance(heads, int) else None,
            logits=_S.pending,
        )
        _S.pending = []
        out = orig(self, *args, **kwargs)
        group, _S.current = _S.current, _Group()
        if _capturing():
            if _S.capturing:
                _S.graph_groups.setdefault(id(_S.capturing[-1]), []).append(group)
            else:
                _S.unattached += 1
        else:
            _check_group(group)
        return out

    return wrapper


def _capture_begin(orig):
    def wrapper(self, *args, **kwargs):
        _S.capturing.append(self)
        _S.graph_groups[id(self)] = []
        _S.pending = []
        return orig(self, *args, **kwargs)

    return wrapper


def _capture_end(orig):
    def wrapper(self, *args, **kwargs):
        try:
            return orig(self, *args, **kwargs)
        finally:
            if _S.capturing and _S.capturing[-1] is self:
                _S.capturing.pop()
            _S.pending = []

    return wrapper


def _replay(orig):
    def wrapper(self, *args, **kwargs):
        out = orig(self, *args, **kwargs)
        groups = _S.graph_groups.get(id(self))
        if _S.armed and groups:
            _S.replays_checked += 1
            _S.layer_index = -1
            for g in groups:
                _check_group(g)
        return out

    return wrapper


# --- the checks ------------------------------------------------------------------------------------------------------


def _record(layer: str, check: str, passed: bool, metrics: dict, error: str | None = None) -> None:
    st = _S.stats.setdefault((layer, check), _Stats())
    st.count += 1
    if error is not None:
        st.failed += 1
        if len(st.errors) < 3:
            st.errors.append(error)
        return
    if not passed:
        st.failed += 1
        if st.first_failure is None:
            st.first_failure = metrics
    for key, value in metrics.items():
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            continue
        low = key.startswith(("min", "mean_recall", "mean_cosine"))
        old = st.worst.get(key)
        st.worst[key] = value if old is None else (min(old, value) if low else max(old, value))


def _guarded(layer: str, check: str, fn) -> None:
    try:
        passed, metrics = fn()
    except Exception as exc:  # a refusal of the reference (NaN, an index outside the cache) is a failed check
        _record(layer, check, False, {}, f"{type(exc).__name__}: {exc}"[:400])
        return
    _record(layer, check, passed, metrics)


def _verdict(v) -> tuple[bool, dict]:
    return v.passed, {k: val for k, val in vars(v).items() if k != "passed"}


def _check_group(group: _Group) -> None:
    """Every check of one layer's records; the verdicts go to `_S.stats`."""
    import torch

    from . import dsa_oracle as o

    t0 = time.perf_counter()
    idx = _layer_index(group.layer)
    if _S.layer_index < 0 or idx <= _S.layer_index:  # a new forward
        _S.forwards += 1
        _S.last_full = None
    _S.layer_index = idx
    slots = group.slots
    topk_rows = None
    if slots is not None:
        topk_rows = dict(zip(slots["rows"], range(len(slots["rows"])), strict=True))
    for rec in group.logits:
        if rec["kind"] == "decode":
            _check_decode(group.layer, rec, slots, topk_rows, o, torch)
        else:
            _check_prefill(group.layer, rec, slots, topk_rows, o, torch)
    if slots is not None:
        _guarded(group.layer, "slots", lambda: _check_slots(slots, torch))
        rows = slots["token_indices"]
        if group.logits:
            _S.last_full = {"layer": group.layer, "rows": rows}
        elif _S.last_full is not None and "mtp" not in group.layer and idx >= 0:
            full = _S.last_full

            def share():
                n = min(rows.shape[0], full["rows"].shape[0])
                same = bool(torch.equal(rows[:n], full["rows"][:n]))
                return same, {"rows": n, "from_layer": _layer_index(full["layer"])}

            _guarded(group.layer, "index_share", share)
    if group.attention is not None:
        att = group.attention
        _guarded(group.layer, "attention", lambda: _check_attention(att, o))
    _S.check_s += time.perf_counter() - t0


def _check_decode(layer, rec, slots, topk_rows, o, torch) -> None:
    q = rec["q"]
    bs = rec["kv_cache"].shape[1]
    width = rec["logits"].shape[1]
    box: dict = {}

    def logits():
        ref = o.paged_decode_logits(
            q, rec["kv_cache"], rec["weights"], rec["context_lens"], rec["block_table"], bs, width=width
        )
        box["ref"] = ref
        got = torch.where(torch.isfinite(ref), rec["logits"].float(), torch.full_like(ref, float("-inf")))
        passed, metrics = _verdict(o.compare_logits(got, ref, **_S.logits_tolerance))
        if not passed:
            metrics["where"] = _mismatch_rows(got, ref, rec["context_lens"], q.shape[1], torch)
        return passed, metrics

    _guarded(layer, "decode_logits", logits)
    if "ref" not in box or slots is None:
        return
    ref = box["ref"]
    n = ref.shape[0]

    def topk():
        have = [topk_rows.get(r) for r in range(n)]
        if any(h is None for h in have):
            raise EngineOracleError(f"the layer's top-k rows hold {len(topk_rows)} of the {n} decode rows")
        got = slots["token_indices"][torch.tensor(have, device=ref.device)]
        want = o.topk_indices(ref, got.shape[1])
        passed, metrics = _verdict(o.compare_topk(got, want, logits=ref))
        if not passed:
            row = metrics["worst_row"]
            metrics["diagnosis"] = _topk_diagnosis(got[row], want[row], ref[row], torch)
            metrics["diagnosis"]["context_len"] = int(rec["context_lens"].flatten()[row // q.shape[1]])
        return passed, metrics

    _guarded(layer, "decode_topk", topk)


def _topk_diagnosis(got, want, ref, torch) -> dict:
    """Where a top-k row went wrong, for the report: the reference's k-th and largest logits, how many picks are
    padding or past the row's finite columns, and the reference logits of the picks the reference left out (a
    kernel that read past the context picks columns the reference holds -inf; one that ranked another layer's or
    request's logits picks keys from the whole range of this row)."""
    ref = ref.float()
    finite = torch.isfinite(ref)
    n = ref.shape[0]
    g = got.long()
    valid = (g >= 0) & (g < n)
    wanted = want.long()[want.long() >= 0]
    missed = g[valid & ~torch.isin(g, wanted)]
    picked = ref[missed]
    kth = ref[wanted].min() if wanted.numel() else torch.tensor(float("nan"))
    out = {
        "finite_columns": int(finite.sum()),
        "reference_kth": float(kth),
        "reference_max": float(ref[finite].max()) if finite.any() else None,
        "reference_median": float(ref[finite].median()) if finite.any() else None,
        "picks": int(g.numel()),
        "padding_picks": int((g < 0).sum()),
        "picks_past_row": int((g >= n).sum()),
        "picks_not_finite": int((valid & ~finite[g.clamp(0, max(n - 1, 0))]).sum()),
        "picks_left_out": int(missed.numel()),
    }
    ok = torch.isfinite(picked)
    if ok.any():
        vals = picked[ok]
        out["left_out_logits"] = {
            "min": float(vals.min()),
            "median": float(vals.median()),
            "max": float(vals.max()),
        }
    return out


def _mismatch_rows(got, ref, context_lens, next_n: int, torch, limit: int = 4) -> list[dict]:
    """Where a decode logits check failed, for the report: per row (at most `limit`), its request's context length,
    how many columns the reference holds finite and the kernel does not, and the first and last such column."""
    out = []
    bad = torch.isfinite(ref) & ~torch.isfinite(got)
    lens = context_lens.tolist()
    for row in bad.any(dim=1).nonzero().flatten().tolist()[:limit]:
        cols = bad[row].nonzero().flatten()
        out.append(
            {
                "row": row,
                "context_len": int(lens[row // next_n]),
                "columns": int(cols.numel()),
                "first": int(cols[0]),
                "last": int(cols[-1]),
            }
        )
    return out


def _check_prefill(layer, rec, slots, topk_rows, o, torch) -> None:
    box: dict = {}

    def logits():
        ref = o.prefill_logits(rec["q"], rec["k"], rec["k_scale"], rec["weights"], rec["ks"], rec["ke"])
        box["ref"] = ref
        got = torch.where(torch.isfinite(ref), rec["logits"].float(), torch.full_like(ref, float("-inf")))
        return _verdict(o.compare_logits(got, ref, **_S.logits_tolerance))

    _guarded(layer, "prefill_logits", logits)
    if "ref" not in box or slots is None:
        return
    ref = box["ref"]

    def topk():
        have = [topk_rows.get(r) for r in rec["rows"]]
        if any(h is None for h in have):
            raise EngineOracleError(f"prefill rows {rec['rows']} are not all among the layer's top-k rows")
        got = slots["token_indices"][torch.tensor(have, device=ref.device)]
        want = o.topk_indices(ref, got.shape[1], row_starts=rec["ks"])
        return _verdict(o.compare_topk(got, want, logits=ref, row_starts=rec["ks"]))

    _guarded(layer, "prefill_topk", topk)


def _check_slots(slots: dict, torch) -> tuple[bool, dict]:
    ti = slots["token_indices"].long()
    bt = slots["block_table"].long()
    req = slots["req_id"].long()
    bs, stride = slots["block_size"], slots["stride"]
    col = torch.div(ti.clamp_min(0), bs, rounding_mode="floor")
    inside = (ti >= 0) & (col < bt.shape[1])
    block = bt[req[:, None].expand_as(col), col.clamp_max(bt.shape[1] - 1)]
    want = torch.where(inside, block * stride + ti.clamp_min(0) % bs, torch.full_like(ti, -1))
    wrong = int((slots["out"].long() != want).sum())
    return wrong == 0, {"rows": int(ti.shape[0]), "mismatched_slots": wrong, "max_slot": int(want.max())}


def _check_attention(att: dict, o) -> tuple[bool, dict]:
    q = att["q"]
    ref, _lse = o.sparse_mla_attention(q, att["kv"], att["indices"], att["sm_scale"])
    got = att["out"][:, : q.shape[1], : ref.shape[2]].float()
    passed, metrics = _verdict(o.compare_attention(got, ref))
    metrics["tokens"] = int(q.shape[0])
    metrics["max_slot"] = int(att["indices"].max())
    return passed, metrics


# --- the API ---------------------------------------------------------------------------------------------------------


def install(backend: str = "TRITON_MLA_SPARSE") -> dict:
    """Wrap the DSA path's functions of the attention backend `backend` (`PROFILES`; see the module doc); returns
    what was wrapped. Idempotent for one backend; a second backend needs `uninstall` first."""
    import torch

    profile = PROFILES.get(backend)
    if profile is None:
        raise EngineOracleError(
            f"the oracle has no profile for attention backend {backend!r}", hint=f"one of: {', '.join(PROFILES)}"
        )
    if _S.originals:
        if _S.backend != backend:
            raise EngineOracleError(
                f"the oracle is installed for {_S.backend}, not {backend}", hint="uninstall() first"
            )
        return {"backend": backend, "wrapped": sorted(_S.originals)}
    makers = {
        "decode_logits": _decode_logits,
        "prefill_logits": _prefill_logits,
        "slots": _slots,
        "attention": _attention,
    }
    targets: list[tuple[str, Any, str, Any]] = []
    for key, (mod_name, attr) in profile.targets.items():
        try:
            mod = importlib.import_module(mod_name)
        except ImportError as exc:
            raise EngineOracleError(
                f"cannot import {mod_name}: {exc}", hint=f"the oracle needs a tree with {backend}'s DSA path"
            ) from exc
        fn = getattr(mod, attr, None)
        if fn is None:
            raise EngineOracleError(f"{mod_name} has no {attr}", hint="the release names the DSA functions otherwise")
        targets.append((key, mod, attr, makers[key](fn)))
    impl_module, impl_name = profile.impl
    mod = importlib.import_module(impl_module)
    impl = getattr(mod, impl_name, None)
    if impl is None or not hasattr(impl, "forward_mqa"):
        raise EngineOracleError(f"{impl_module}.{impl_name}.forward_mqa not found")
    targets.append(("forward_mqa", impl, "forward_mqa", _forward_mqa(impl.forward_mqa)))
    graph = torch.cuda.CUDAGraph
    for name, maker in (("capture_begin", _capture_begin), ("capture_end", _capture_end), ("replay", _replay)):
        targets.append((f"graph.{name}", graph, name, maker(getattr(graph, name))))
    for key, holder, attr, wrapper in targets:
        _S.originals[key] = (holder, attr, getattr(holder, attr))
        setattr(holder, attr, wrapper)
    _S.current = _Group()
    _S.backend = backend
    tol = profile.logits_tolerance
    _S.logits_tolerance = {"atol": tol[0], "rtol": tol[1]} if tol else {}
    return {"backend": backend, "wrapped": sorted(_S.originals)}


def uninstall() -> None:
    """Put every wrapped attribute back."""
    for holder, attr, orig in _S.originals.values():
        setattr(holder, attr, orig)
    _S.originals.clear()
    _S.backend = ""
    _S.logits_tolerance = {}


def arm(on: bool = True) -> None:
    """Check from now on (True) or stop (False)."""
    _S.armed = on
    _S.pending = []
    _S.layer_index = -1
    _S.last_full = None


def corrupt(kind: str | None) -> None:
    """Perturb the output `CORRUPTIONS[kind]` names from now on (eager layers only); None stops."""
    if kind is not None and kind not in CORRUPTIONS:
        raise EngineOracleError(f"unknown corruption {kind!r}", hint=f"one of: {', '.join(CORRUPTIONS)}")
    _S.corruption = kind


def reset() -> None:
    """Forget the verdicts so far (the wrappers and the captured records stay)."""
    _S.stats.clear()
    _S.forwards = _S.replays_checked = _S.unattached = 0
    _S.check_s = 0.0
    _S.unsupported.clear()


def summary() -> dict:
    """The verdicts since the last `reset`: per check, per layer and in total; `passed` when every check passed."""
    per_check: dict[str, dict] = {}
    for (layer, check), st in sorted(_S.stats.items()):
        entry = per_check.setdefault(check, {"count": 0, "failed": 0, "layers": {}})
        entry["count"] += st.count
        entry["failed"] += st.failed
        entry["layers"][layer] = {
            "count": st.count,
            "failed": st.failed,
            "worst": st.worst,
            **({"errors": st.errors} if st.errors else {}),
            **({"first_failure": st.first_failure} if st.first_failure else {}),
        }
    total = sum(e["count"] for e in per_check.values())
    return {
        "checks": {c: per_check[c] for c in CHECKS if c in per_check},
        "total": total,
        "failed": sum(e["failed"] for e in per_check.values()),
        "forwards": _S.forwards,
        "graph_replays_checked": _S.replays_checked,
        "captured_graphs": sum(1 for g in _S.graph_groups.values() if g),
        "unattached_capture_groups": _S.unattached,
        "check_s": round(_S.check_s, 2),
        "backend": _S.backend,
        "unsupported": dict(_S.unsupported),
        "passed": total > 0 and not _S.unsupported and all(e["failed"] == 0 for e in per_check.values()),
    }
