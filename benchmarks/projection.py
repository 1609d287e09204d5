"""A PROJECTION, not a measurement: GLM-5.x decode tok/s on 8 Ampere GPUs (A100, A800, CMP 170HX) at PP8, TP8 and
TP4 x PP2, with and without MTP, from the DSA kernels' H200 times, spec sheets and `vllm_compose.pp.step`.

Nothing here ran on an A100, an A800 or a CMP 170HX. The inputs are `benchmarks/dsa_kernels.py`'s JSON (the compose's
DSA kernels timed on an H200), the cards' spec-sheet figures (`vllm_compose.pp.card`) and the arithmetic of one decode
step under pipeline parallelism (`vllm_compose.pp.step`: stages in turn, the hand-offs with the relayed top-k over
the card's link, the verify rows and the draft round of MTP, the expected tokens at an acceptance). This script adds
only what a layer costs on a card (`KernelClock`), each part stated:

* **Weights.** The bytes a layer reads for the step's rows (`step.layer_read_bytes`: attention projections, the
  indexer, the dense MLP or the router, the shared expert and the routed experts the rows touch), on one of TP
  ranks, at a share of the card's peak HBM bandwidth. Quantized as the peers run GLM-5.2 (symmetric int4/int8
  mixes): routed experts int4, the other matrices int8, groups of 128 with a bf16 scale; the router, norms, the
  indexer's `wk_weights_proj`, the LM head and the MTP layer bf16 (the mix's MTP head is unquantized). Which
  matrices a given checkpoint keeps at int8 is an assumption, not read from one.
* **DSA kernels.** Every layer runs the sparse-MLA decode at the heads one rank holds (64 at PP, 8 at TP8, 16 at
  TP4: the 16-head rows are DeepSeek-V3.2's TP8 shape, the same 576-wide latent), and the 21 layers that compute their
  own top-k (IndexCache: 0, 1, 2, 6, 10, ..., 74) run the indexer's paged decode logits over the whole context (the
  indexer is replicated under TP). A shape the kernel file did not time (the verify step's 2 rows of MTP 1) is
  interpolated linearly in query rows between the nearest measured shapes of the same family.
* **Tensor parallelism.** Two all-reduces of the rows' hidden states a layer (after attention and after the MLP) and
  a gather of the logits, over the card's link (`Link.all_reduce_ms`: a ring, one fixed latency a collective).
* **The range.** Two ends (`ENDS`), each a set of stated assumptions: the fast end takes the DSA kernels at their
  H200 times (at 1-16 rows they reach under 5% of the H200's bandwidth: latency-bound, so a card with less bandwidth
  need not be slower), the weights at the card's peak and 15 us a transfer; the slow end scales the kernels by H200
  peak / card peak (as if bandwidth-bound), reads the weights at 75% of the peak and pays 50 us a transfer (vLLM's
  hand-off sends its metadata over the CPU process group first; cards without peer-to-peer access stage every
  transfer through host memory).
* **Not counted** at either end: the top-k kernel, the fused Q / norm-rope kernels, rope, norms, sampling, kernel
  launch gaps and Python time (the peers run `--enforce-eager`), the MoE kernels' own inefficiency at 1-8 rows beyond
  the 75%. The projection is a floor on a step's time more than a prediction of it.

    python3 benchmarks/projection.py --kernels lab/results/2026-12-02/dsa_kernels_sm80.json --out projection.json --table
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parent), str(Path(__file__).resolve().parents[1] / "src")]

import dsa_kernels  # noqa: E402  (the shape labels and top-k the kernel rows are keyed by)

from vllm_compose.pp import card as cards  # noqa: E402
from vllm_compose.pp import link as links  # noqa: E402
from vllm_compose.pp import plan as pp_plan  # noqa: E402
from vllm_compose.pp import step  # noqa: E402
from vllm_compose.proof.recall_model import GLM5_INDEXCACHE, GLM5_LAYER  # noqa: E402

LABEL = "PROJECTION (arithmetic from H200 kernel times and spec sheets; not measured on these cards)"


class ProjectionError(ValueError):
    """Input the projection cannot use: the message names the file, row or option and what to do."""


@dataclass(frozen=True)
class Layout:
    """How 8 GPUs split the model: tensor-parallel ranks a stage, pipeline stages."""

    name: str
    tp: int
    pp: int


LAYOUTS = {x.name: x for x in (Layout("PP8", 1, 8), Layout("TP8", 8, 1), Layout("TP4PP2", 4, 2))}
#: the cards of the published numbers; `vllm_compose.pp.card` holds their figures and sources
DEFAULT_CARDS = ("A100-SXM4-80GB", "A100-PCIe-80GB", "A800-SXM4-80GB", "CMP-170HX")
#: bits as the peers run GLM-5.2 (int4/int8 mixes; see the module docstring)
WEIGHTS = step.Weights(expert_bits=4, other_bits=8, mtp_bits=16, group_size=128)
#: the per-draft acceptance the MTP columns assume (`step.DEFAULT_ACCEPTANCE`: MiMo-7B's 70.9% under the original
#: compose); the break-even column says how far it may fall
ACCEPTANCE = step.DEFAULT_ACCEPTANCE


@dataclass(frozen=True)
class End:
    """One end of the projected range: the assumptions that make a step fast, or slow."""

    name: str
    kernels_scaled: bool  # DSA kernels: H200 time x H200 peak / card peak (else the H200 time)
    hbm_share: float  # the share of the card's peak HBM bandwidth the weight reads reach
    latency_us: float  # fixed cost of a hand-off or a collective
    why: str


ENDS = (
    End(
        "fast",
        False,
        1.0,
        links.HANDOFF_LATENCY_US,
        "DSA kernels at their H200 times (latency-bound at 1-16 rows), weights read at the card's peak, "
        f"{links.HANDOFF_LATENCY_US:g} us a transfer",
    ),
    End(
        "slow",
        True,
        0.75,
        50.0,
        "DSA kernels scaled by H200 peak / card peak (bandwidth-bound), weights read at 75% of the card's peak "
        "(small-batch quantized GEMMs: an assumption), 50 us a transfer (vLLM's CPU-side metadata, host-staged "
        "copies without peer-to-peer access)",
    ),
)


@dataclass(frozen=True)
class Peer:
    """A number peers published: their hardware, not reproduced here."""

    setup: str
    tok_s: float | None
    ms_per_step: str | None
    layout: str | None  # the projected layout it compares with (None: not comparable here)
    cards: tuple[str, ...]  # the projected cards it compares with
    source: str


PEERS = (
    Peer("GLM-5.3-Flash (another model: 320B total, 18B active, hybrid sparse and linear attention), native "
         "checkpoint, 8x A100-80GB, TP8, single stream", 93.0, None, "TP8", ("A100-SXM4-80GB",),
         "vllm#54059, comment of 2026-09-02"),
    Peer("GLM-5.x, 8x A800, TP4 PP2", 46.8, None, "TP4PP2", ("A800-SXM4-80GB",), "public report (issue 40)"),
    Peer("GLM-5.2 int4/int8, 8x CMP 170HX, PP8, no MTP (the original compose)", 28.47, None, "PP8", ("CMP-170HX",),
         "docs/CONTEXT.md"),
    Peer("GLM-5.2, 8x CMP 170HX, PP8, no MTP (bespoke older recipe)", 30.2, None, "PP8", ("CMP-170HX",),
         "public report (issue 31)"),
    Peer("GLM-5.2-Int4-Int8Mix, 8x A100, #47629 + #47644 image, no MTP (PP8 per issue 40; the report names no "
         "layout)", 39.0, None, "PP8", ("A100-SXM4-80GB", "A100-PCIe-80GB"), "wtdcode/vllm-backport#38"),
    Peer("GLM-5.x, 8x CMP 170HX, PP8, MTP 3, fp8 KV, own kernels (512-256k tokens)", None, "66-88", None, (),
         "docs/CONTEXT.md"),
    Peer("Qwen3.8-Flash-Next (another model), 4x sm_80 PP4 over PCIe 2.0 x4, MTP 2 at ~93% acceptance: 43.7 tok/s "
         "against 61.2 without MTP, about 25 ms a draft round", 43.7, None, None, (), "vllm#44697"),
)  # fmt: skip


def glm5_shape() -> pp_plan.ModelShape:
    """GLM-5.x as pp.plan reads a config: the per-layer sizes of the recall model's GLM-5 shape plus the whole-model
    sizes of docs/CONTEXT.md (78 layers, 256 routed experts top-8, one shared, first 3 dense, vocab 154,880, one MTP
    layer)."""
    cfg = {
        **GLM5_LAYER,
        **GLM5_INDEXCACHE,
        "model_type": "glm_moe_dsa",
        "num_hidden_layers": 78,
        "n_routed_experts": 256,
        "num_experts_per_tok": 8,
        "n_shared_experts": 1,
        "first_k_dense_replace": 3,
        "topk_method": "noaux_tc",
        "vocab_size": 154880,
        "num_nextn_predict_layers": 1,
        "max_position_embeddings": 202752,
    }
    return pp_plan.shape_from_config(cfg, "GLM-5.x (docs/CONTEXT.md)")


# --- the kernel rows --------------------------------------------------------------------------------------------

_INDEXER_TAIL = re.compile(r"(\d+) next_n (\d+)")
_MLA_TAIL = re.compile(r"(\d+)")


def _positive(ms) -> bool:
    return isinstance(ms, (int, float)) and not isinstance(ms, bool) and ms > 0


class KernelTable:
    """The H200 rows of a dsa_kernels.py result, looked up by shape. A shape it lacks is interpolated linearly in
    query rows between the nearest measured shapes of its family (same kernel and heads, same context); several
    shapes at one row count give their mean. A shape with no measured neighbour on both sides, a repeated shape or
    an unavailable one is refused."""

    def __init__(self, rows: list[dict], source: str) -> None:
        self.rows, self.source = rows, source

    def _ms(self, kernel: str, shape: str, family: str, rows: int, rows_of: Callable[[str], int | None]) -> float:
        hits = [r for r in self.rows if r.get("kernel") == kernel and r.get("shape") == shape]
        if len(hits) > 1:
            raise ProjectionError(f"{self.source} has {len(hits)} rows {kernel!r} / {shape!r}; keep one (one run)")
        if hits:
            ms = hits[0].get("ms")
            if not _positive(ms):
                raise ProjectionError(
                    f"{self.source}: row {kernel!r} / {shape!r} has no positive time ({hits[0].get('status', ms)!r})"
                )
            return float(ms)
        points: dict[int, list[float]] = {}
        for r in self.rows:
            other = r.get("shape")
            if r.get("kernel") != kernel or not isinstance(other, str) or not other.startswith(family):
                continue
            n = rows_of(other[len(family) :])
            if n is not None and _positive(r.get("ms")):
                points.setdefault(n, []).append(float(r["ms"]))
        mean = {n: sum(v) / len(v) for n, v in points.items()}
        if rows in mean:
            return mean[rows]
        below = max((n for n in mean if n < rows), default=None)
        above = min((n for n in mean if n > rows), default=None)
        if below is None or above is None:
            raise ProjectionError(
                f"{self.source} has no row {kernel!r} / {shape!r}, which the projection needs, and no measured "
                f"shapes of {family!r} on both sides of {rows} query rows to interpolate from"
            )
        return mean[below] + (mean[above] - mean[below]) * (rows - below) / (above - below)

    def indexer_ms(self, context: int, batch: int, next_n: int) -> float:
        """The paged decode logits for `batch` requests of `next_n` query rows each over `context` tokens."""
        label, heads = dsa_kernels.INDEXER[0]
        family = f"{label} {heads}h ctx {context} B "

        def rows_of(tail: str) -> int | None:
            m = _INDEXER_TAIL.fullmatch(tail)
            return int(m.group(1)) * int(m.group(2)) if m else None

        shape = f"{family}{batch} next_n {next_n}"
        return self._ms("indexer paged logits", shape, family, batch * next_n, rows_of)

    def mla_ms(self, heads: int, rows: int) -> float:
        """The sparse-MLA decode of `rows` query rows at `heads` heads a rank (top-k 2048)."""
        label = next((name for name, h in dsa_kernels.MLA if h == heads), None)
        if label is None:
            known = ", ".join(str(h) for _, h in dsa_kernels.MLA)
            raise ProjectionError(f"no sparse-MLA rows at {heads} heads a rank (dsa_kernels.py times {known})")
        family = f"{label} {heads}h top-k {dsa_kernels.TOPK} rows "

        def rows_of(tail: str) -> int | None:
            return int(tail) if _MLA_TAIL.fullmatch(tail) else None

        return self._ms("sparse MLA decode", f"{family}{rows}", family, rows, rows_of)


def with_mla_rows(doc: dict, source: str, sweep: dict, sweep_source: str, pick: str) -> dict:
    """`doc` with its sparse-MLA decode rows replaced by `sweep`'s (a dsa_kernels.py run with several trees or
    policies, e.g. lab/candidates/mla_gpu_run.sh's sweep, timed in CUDA graphs): the rows of tree `pick` (`v0260`)
    or of the launch that policy `pick` made (`bh16/kv16/min128/fill1.5`). Both runs must have timed on one kind of
    GPU (the same `peak_gbs`): the slow end scales every kernel time by that one peak."""
    if not isinstance(sweep, dict) or not isinstance(sweep.get("rows"), list):
        raise ProjectionError(f"{sweep_source} is not a dsa_kernels.py result (no 'rows' list)")
    if sweep.get("peak_gbs") != doc.get("peak_gbs"):
        raise ProjectionError(
            f"{sweep_source} was timed on a GPU of {sweep.get('peak_gbs')} GB/s, {source} on one of "
            f"{doc.get('peak_gbs')} GB/s; the projection scales both by one peak: take rows from one kind of GPU"
        )
    mla = [
        {k: v for k, v in r.items() if k not in ("tree", "policies")}
        for r in sweep["rows"]
        if r.get("kernel") == "sparse MLA decode" and (r.get("tree") == pick or pick in (r.get("policies") or ()))
    ]
    if not mla:
        trees = sorted({str(r.get("tree")) for r in sweep["rows"]})
        raise ProjectionError(
            f"{sweep_source} has no sparse-MLA decode rows of tree or policy {pick!r} (trees: {', '.join(trees)}; a "
            "policy is named as in the rows' 'policies')"
        )
    kept = [r for r in doc["rows"] if r.get("kernel") != "sparse MLA decode"]
    return {**doc, "rows": kept + mla, "mla_rows": {"source": sweep_source, "pick": pick, "timer": mla[0].get("timer")}}


# --- a layer on a card ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class KernelClock:
    """What each part of a step costs on one card at one end of the range (a `step.Clock`): the weights read at a
    share of the card's HBM peak, the DSA kernels from their H200 times, tensor parallelism over the card's link."""

    shape: pp_plan.ModelShape
    card: cards.Card
    end: End
    link: links.Link
    kernels: KernelTable
    h200_peak_gbs: float
    context: int
    batch: int
    tp: int

    def _read(self, nbytes: float) -> float:
        return nbytes / (self.card.hbm_gbs * self.end.hbm_share * 1e9) * 1e3

    def _dsa(self, ms: float) -> float:
        return ms * self.h200_peak_gbs / self.card.hbm_gbs if self.end.kernels_scaled else ms

    def _indexer(self, rows: int) -> float:
        return self.kernels.indexer_ms(self.context, self.batch, rows // self.batch)

    def _mla(self, rows: int) -> float:
        return self.kernels.mla_ms(self.shape.heads // self.tp, rows)

    def _collectives(self, rows: int) -> float:
        return 2 * self.link.all_reduce_ms(rows * self.shape.hidden * pp_plan.BF16, self.tp)

    def _logits(self, rows: int) -> float:
        """The vocabulary-parallel logits gathered to one rank (fp32)."""
        if self.tp == 1:
            return 0.0
        return self.link.transfer_ms(rows * self.shape.vocab_padded * 4 * (self.tp - 1) / self.tp)

    def parts(self, layer: int, rows: int) -> tuple[float, float, float]:
        """Decoder layer `layer`'s (weights, DSA kernels, collectives) ms."""
        dsa = self._mla(rows) + (self._indexer(rows) if pp_plan.computes_topk(self.shape, layer) else 0.0)
        weights = self._read(step.layer_read_bytes(self.shape, layer, rows, WEIGHTS, self.tp))
        return weights, self._dsa(dsa), self._collectives(rows)

    def layer_ms(self, layer: int, rows: int) -> float:
        return sum(self.parts(layer, rows))

    def head_parts(self, rows: int) -> tuple[float, float]:
        """The LM head's (weights, logits gather) ms."""
        return self._read(step.lm_head_bytes(self.shape, self.tp)), self._logits(rows)

    def head_ms(self, rows: int) -> float:
        return sum(self.head_parts(rows))

    def draft_ms(self, step_: int, rows: int) -> float:
        dsa = self._mla(rows) + (self._indexer(rows) if step_ == 0 else 0.0)
        weights = self._read(step.draft_read_bytes(self.shape, WEIGHTS, rows, step_, self.tp))
        return weights + self._dsa(dsa) + self._collectives(rows) + self._logits(self.batch)

    def describe(self) -> str:
        return f"{self.card.name}, {self.end.name} end: {self.end.why}"


# --- the projection ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Scenario:
    """One setup to project: the layout, the card, context tokens per request, requests in a step."""

    layout: str
    card: str
    context: int
    batch: int = 1


def project(
    shape: pp_plan.ModelShape, sc: Scenario, table: KernelTable, h200_peak: float, end: End, mtp: int, acceptance: float
) -> dict:
    """One scenario at one end: the plain step's parts and tok/s, and with `mtp` > 0 MTP's (`step.estimate`)."""
    layout, card = LAYOUTS[sc.layout], cards.card(sc.card)
    link = card.link.with_latency(end.latency_us)
    clock = KernelClock(shape, card, end, link, table, h200_peak, sc.context, sc.batch, layout.tp)
    sizes = pp_plan.default_partition(shape.num_layers, layout.pp)
    if mtp:
        e = step.estimate(shape, sizes, clock, link, batch=sc.batch, k=mtp, acceptance=acceptance, tp=layout.tp)
        plain = e.plain
    else:
        plain = step.step_times(shape, sizes, clock, link, sc.batch, tp=layout.tp)
    parts = [clock.parts(x, sc.batch) for x in range(shape.num_layers)]
    weights, dsa, collectives = (sum(p) for p in zip(*parts, strict=True))
    head, gather = clock.head_parts(sc.batch)
    out = {
        "weights_ms": weights + head,
        "dsa_ms": dsa,
        "links_ms": collectives + gather + plain.link_ms,
        "step_ms": plain.total_ms,
        "tok_s": plain.tok_s(sc.batch),
    }
    if mtp:
        out |= {
            "mtp_step_ms": e.mtp.total_ms,
            "mtp_tok_s": e.tok_s_mtp,
            "speedup": e.speedup,
            "break_even": e.break_even,
            "max_draft_round_ms": e.max_round_ms,
        }
    return {k: (round(v, 4) if isinstance(v, float) else v) for k, v in out.items()}


def projection(doc: dict, source: str, scenarios: list[Scenario], mtp: int = 1, acceptance: float = ACCEPTANCE) -> dict:
    """The whole projection for a dsa_kernels.py JSON `doc`: a row per scenario with both ends, the assumptions and
    the peers' numbers, each placed against the projected range of its setup."""
    if not isinstance(doc, dict) or not isinstance(doc.get("rows"), list):
        raise ProjectionError(f"{source} is not a dsa_kernels.py result (no 'rows' list)")
    peak = doc.get("peak_gbs")
    if not _positive(peak):
        raise ProjectionError(f"{source} has no positive 'peak_gbs' (the H200 peak its shares were taken of)")
    names = [c.name for c in cards.CARDS.values()]
    for sc in scenarios:
        if sc.card not in cards.CARDS:
            raise ProjectionError(f"unknown card {sc.card}; the projection knows {', '.join(names)}")
        if sc.layout not in LAYOUTS:
            raise ProjectionError(f"unknown layout {sc.layout}; the projection knows {', '.join(LAYOUTS)}")
        if sc.batch < 1 or sc.context < 1:
            raise ProjectionError(f"scenario {sc} is not a decode step (batch >= 1, context >= 1)")
    if mtp < 0 or not 0 <= acceptance <= 1:
        raise ProjectionError(f"--mtp {mtp} / --acceptance {acceptance}: MTP >= 0, acceptance from 0 to 1")
    shape, table = glm5_shape(), KernelTable(doc["rows"], source)
    rows = []
    for sc in scenarios:
        ends = {end.name: project(shape, sc, table, float(peak), end, mtp, acceptance) for end in ENDS}
        rows.append({**asdict(sc), **ends})
    return {
        "label": LABEL,
        "kernels": {
            "source": source,
            "sm80_ptx": doc.get("sm80_ptx"),
            "h200_peak_gbs": peak,
            "sparse_mla_rows": doc.get("mla_rows"),
        },
        "assumptions": {
            "weights": asdict(WEIGHTS),
            "mtp": mtp,
            "acceptance": acceptance,
            "ends": [asdict(end) for end in ENDS],
            "link_payload_share": links.PAYLOAD_EFFICIENCY,
            "step": "one batch in flight: stages in turn (vllm_compose.pp.step); vLLM's default layer split",
            "not_counted": "top-k, fused Q / norm-rope, rope, norms, sampling, launch gaps, Python time",
        },
        "cards": {name: cards.card(name).to_json() for name in dict.fromkeys(sc.card for sc in scenarios)},
        "rows": rows,
        "peers": [_placed(p, rows) for p in PEERS],
    }


def _placed(peer: Peer, rows: list[dict]) -> dict:
    """The peer's number and where it falls against the projected tok/s (no MTP) of its setup."""
    out = asdict(peer)
    ours = [r[e.name]["tok_s"] for r in rows for e in ENDS if r["layout"] == peer.layout and r["card"] in peer.cards]
    if peer.tok_s is None or not ours:
        return out | {"projected": None, "falls": None}
    lo, hi = min(ours), max(ours)
    falls = "inside" if lo <= peer.tok_s <= hi else "above" if peer.tok_s > hi else "below"
    return out | {"projected": [lo, hi], "falls": falls}


def _range(r: dict, key: str, fmt: str = "{:.1f}") -> str:
    a, b = r["fast"].get(key), r["slow"].get(key)
    if a is None or b is None:
        return "never" if key == "break_even" else "-"
    lo, hi = sorted((a, b))
    return fmt.format(lo) if fmt.format(lo) == fmt.format(hi) else f"{fmt.format(lo)}-{fmt.format(hi)}"


def _mla_note(result: dict) -> str:
    mla = result["kernels"].get("sparse_mla_rows")
    if not mla:
        return ""
    return f", the sparse-MLA decode's from `{mla['source']}`, {mla['pick']}, timed by {mla['timer'] or 'do_bench'}"


def table(result: dict) -> str:
    """Markdown: the projection's rows, then the peers' published numbers placed against them, then the
    assumptions that are not settled."""
    mtp, acc = result["assumptions"]["mtp"], result["assumptions"]["acceptance"]
    head = (
        "| layout | card (x8) | context | batch | weights ms | DSA kernels ms | links ms | step ms | tok/s "
        + (f"| tok/s MTP {mtp} at {acc:.2f} | MTP speed-up | break-even acceptance " if mtp else "")
        + "|"
    )
    lines = [
        f"**{result['label']}** (kernel times: `{result['kernels']['source']}`{_mla_note(result)}; each cell: "
        "fast end - slow end)",
        "",
        head,
        "|" + "---|" * (head.count("|") - 1),
    ]
    for r in result["rows"]:
        cells = [
            r["layout"],
            f"{r['card']} (projected)",
            f"{r['context']:,}",
            str(r["batch"]),
            _range(r, "weights_ms"),
            _range(r, "dsa_ms"),
            _range(r, "links_ms", "{:.2f}"),
            _range(r, "step_ms"),
            _range(r, "tok_s"),
        ]
        if mtp:
            cells += [_range(r, "mtp_tok_s"), _range(r, "speedup", "{:.2f}x"), _range(r, "break_even", "{:.2f}")]
        lines.append("| " + " | ".join(cells) + " |")
    lines += [
        "",
        "| published by peers (their hardware) | tok/s | ms per step | projected tok/s, no MTP | where it falls | source |",
        "|---|---|---|---|---|---|",
    ]
    for p in result["peers"]:
        projected = "-" if p["projected"] is None else f"{p['projected'][0]:.1f}-{p['projected'][1]:.1f}"
        lines.append(
            f"| {p['setup']} | {p['tok_s'] or '-'} | {p['ms_per_step'] or '-'} | {projected} | {p['falls'] or '-'} "
            f"| {p['source']} |"
        )
    lines += ["", "Ends of the range:", *(f"- {e['name']}: {e['why']}" for e in result["assumptions"]["ends"])]
    uncertain = [f"- {c['name']}: {c['uncertain']}" for c in result["cards"].values() if c["uncertain"]]
    if uncertain:
        lines += ["", "Uncertain figures:", *uncertain]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kernels", type=Path, required=True, help="benchmarks/dsa_kernels.py's JSON")
    ap.add_argument("--mla", type=Path, help="take the sparse-MLA decode rows from this dsa_kernels.py JSON instead")
    ap.add_argument("--mla-tree", help="with --mla: the rows of this tree or policy (e.g. bh16/kv16/min128/fill1.5)")
    ap.add_argument("--card", action="append", help=f"one of {', '.join(cards.CARDS)} (default: all)")
    ap.add_argument("--layout", action="append", help=f"one of {', '.join(LAYOUTS)} (default: all)")
    ap.add_argument("--batch", type=int, action="append", help="requests per step (default 1)")
    ap.add_argument("--context", type=int, action="append", help="tokens per request (default 8192)")
    ap.add_argument("--mtp", type=int, default=1, help="speculative tokens beside the plain step (default 1; 0: none)")
    ap.add_argument("--acceptance", type=float, default=ACCEPTANCE, help=f"per draft (default {ACCEPTANCE})")
    ap.add_argument("--out", type=Path, help="write the JSON here")
    ap.add_argument("--table", action="store_true", help="print the markdown table")
    args = ap.parse_args(argv)
    scenarios = [
        Scenario(layout, card, context, batch)
        for layout in args.layout or list(LAYOUTS)
        for card in args.card or list(DEFAULT_CARDS)
        for context in args.context or [8192]
        for batch in args.batch or [1]
    ]
    try:
        try:
            doc = json.loads(args.kernels.read_text())
        except (OSError, json.JSONDecodeError) as exc:
            raise ProjectionError(f"cannot read {args.kernels}: {exc}") from None
        if (args.mla is None) != (args.mla_tree is None):
            raise ProjectionError("--mla and --mla-tree go together: the file and which of its trees or policies")
        if args.mla is not None:
            try:
                sweep = json.loads(args.mla.read_text())
            except (OSError, json.JSONDecodeError) as exc:
                raise ProjectionError(f"cannot read {args.mla}: {exc}") from None
            doc = with_mla_rows(doc, str(args.kernels), sweep, str(args.mla), args.mla_tree)
        result = projection(doc, str(args.kernels), scenarios, args.mtp, args.acceptance)
    except (ProjectionError, pp_plan.PlanError) as exc:
        print(f"projection: {exc}", file=sys.stderr)
        print(
            "hint: regenerate the kernel rows with benchmarks/dsa_kernels.py, or narrow --mtp/--batch/--context "
            "to the rows it has",
            file=sys.stderr,
        )
        return 2
    if args.out:
        args.out.write_text(json.dumps(result, indent=1) + "\n")
    if args.table or not args.out:
        sys.stdout.write(table(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
