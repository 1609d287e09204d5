"""A PROJECTION, not a measurement: GLM-5.x decode on 8x A100-80GB and 8x CMP 170HX at PP8, from H200 kernel times.

Nothing here ran on an A100 or a CMP 170HX. The inputs are `benchmarks/dsa_kernels.py`'s JSON (the compose's DSA
kernels timed on an H200) and public spec-sheet figures, combined by arithmetic that each part states:

* **DSA kernels.** Per decode step, every one of the 78 layers runs the sparse-MLA decode (64 heads: PP8 keeps all
  heads on one card) and the 21 layers that compute their own top-k (IndexCache: 0, 1, 2, 6, 10, ..., 74) run the
  indexer's paged decode logits over the whole context. Each kernel's H200 time is scaled by H200 peak / card peak,
  i.e. the kernel is taken to reach the same share of the card's HBM bandwidth it reached of the H200's. Top-k, the
  fused Q / norm-rope kernels, norms, rope, sampling and launch gaps are not counted.
* **Weights (MoE and dense GEMMs).** Not measured: the bytes of weights one step reads (attention projections, the
  indexer's, the dense MLP of layers 0-2, the shared expert, the routed experts the rows touch, the router, the LM
  head) divided by the card's peak bandwidth, a lower bound on that part. Quantized as the peers run GLM-5.2
  (symmetric int4/int8 mixes): routed experts int4, the other matrices int8, groups of 128 with a bf16 scale; the
  router, norms, the indexer's `wk_weights_proj`, the LM head and the MTP layer bf16 (the mix's MTP head is
  unquantized). Which matrices a given checkpoint keeps at int8 is an assumption, not read from one.
* **PP8 hand-offs.** 7 stage boundaries a step, each sends vLLM's `IntermediateTensors` (hidden states and residual,
  bf16: 2 x 6,144 x 2 bytes a row) plus, where the next stage starts on a shared layer (vLLM's default split
  9,10,10,10,10,10,10,9), the compose's relayed top-k rows (2,048 int32 a row), over the card's PCIe link one way,
  plus a fixed latency per hand-off (an assumption).
* **A step** is one batch through all 8 stages in turn (no overlap of stages: one stream's view). Without MTP it
  yields `batch` tokens; with MTP n it verifies n + 1 rows per request and runs the draft layer n times (top-k at
  draft step 0 only), and its yield depends on the acceptance, so the MTP rows give ms per step.

    python3 benchmarks/projection.py --kernels lab/results/2026-12-02/dsa_kernels_sm80.json --mtp 0 \\
        --out projection.json --table
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parent), str(Path(__file__).resolve().parents[1] / "src")]

import dsa_kernels  # noqa: E402  (the shape labels and top-k the kernel rows are keyed by)

from vllm_compose.pp import plan as pp_plan  # noqa: E402
from vllm_compose.proof.recall_model import GLM5_INDEXCACHE, GLM5_LAYER  # noqa: E402

LABEL = "PROJECTION (arithmetic from H200 kernel times and spec sheets; not measured on these cards)"


class ProjectionError(ValueError):
    """Input the projection cannot use: the message names the file, row or option and what to do."""


@dataclass(frozen=True)
class Card:
    """A GPU as the projection sees it: two bandwidths and where each figure comes from."""

    name: str
    hbm_gbs: float  # peak HBM bandwidth, GB/s (10^9 bytes)
    link_gbs: float  # the PCIe link's data rate one way, GB/s, after line coding
    source: str
    uncertain: str  # what in these figures is not settled ("" when nothing)


#: the cards of the published numbers (issue 31). A100 80GB: NVIDIA's A100 datasheet (PCIe card 1,935 GB/s; the SXM
#: module's 2,039 GB/s and NVLink would make the weight part 5% and the hand-offs far shorter). PCIe 4.0 x16: 16 GT/s
#: x 16 lanes, 128b/130b coding = 31.5 GB/s one way. CMP 170HX: NVIDIA's CMP product listing (HBM2e, 1,493 GB/s);
#: PCIe 1.1 x4 (2.5 GT/s x 4 lanes, 8b/10b coding = 1.0 GB/s one way) per public reviews, not an NVIDIA figure.
CARDS = {
    "A100-80GB": Card(
        "A100-80GB",
        1935.0,
        31.5,
        "NVIDIA A100 datasheet (80GB PCIe: 1,935 GB/s HBM2e); PCIe 4.0 x16",
        "the peers' A100 form factor is not stated: an SXM4 module reads HBM at 2,039 GB/s and hands off over NVLink",
    ),
    "CMP-170HX": Card(
        "CMP-170HX",
        1493.0,
        1.0,
        "NVIDIA CMP 170HX listing (8 GB HBM2e, 1,493 GB/s); PCIe 1.1 x4 per public reviews",
        "link width and generation from reviews, not NVIDIA; 8 GB a card (64 GB for 8) cannot hold the weights counted "
        "here, so the published setup differs from this card as listed (offload or more memory); its reported "
        "compute limits are not modelled (bandwidth only)",
    ),
}
#: NCCL point-to-point latency of one small hand-off between two GPUs over PCIe: an assumption (order of 10-20 us
#: in nccl-tests' small-message results), not measured here
HANDOFF_LATENCY_US = 15.0
PP = 8
#: bits of the quantized matrices as the peers run GLM-5.2 (int4/int8 mixes; see the module docstring)
EXPERT_BITS, OTHER_BITS, GROUP_SIZE = 4, 8, 128
#: the MTP layer: unquantized in the int4/int8 mix (docs/CONTEXT.md, "Serving on Ampere")
MTP_BITS = 16
#: what peers publish (issue 31), shown next to the projection; measured on their hardware, not reproduced here
PEERS = (
    {"setup": "8x CMP 170HX, PP8, int4/int8, no MTP (seed compose)", "tok_s": 28.47, "ms_per_step": None},
    {"setup": "8x CMP 170HX, PP8, no MTP (bespoke older recipe)", "tok_s": 30.2, "ms_per_step": None},
    {"setup": "8x A100, #47629 + #47644 image, no MTP (user report)", "tok_s": 39.0, "ms_per_step": None},
    {"setup": "8x CMP 170HX, PP8, MTP 3, fp8 KV, own kernels (512-256k tokens)", "tok_s": None, "ms_per_step": "66-88"},
)


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


def experts_touched(n_routed: int, per_token: int, rows: int) -> float:
    """Expected distinct routed experts `rows` tokens touch when each picks `per_token` of `n_routed` uniformly (real
    routing is skewed, which touches fewer)."""
    return n_routed * (1.0 - (1.0 - per_token / n_routed) ** rows)


def layer_read_bytes(shape: pp_plan.ModelShape, layer: int, rows: int, bits: int | None = None) -> float:
    """Weight bytes decoder layer `layer` reads for one step of `rows` query rows: attention projections (the bf16
    absorbed W_UK_T / W_UV instead of a quantized kv_b_proj), the indexer on full layers, the norms, and the dense
    MLP or the router, shared expert and the routed experts touched. `bits` overrides both widths (the MTP layer)."""
    other, expert_bits = (bits, bits) if bits is not None else (OTHER_BITS, EXPERT_BITS)
    lw = pp_plan.layer_weights(shape, layer, other, GROUP_SIZE)
    kv_b = pp_plan.matrix_bytes(shape.heads * (shape.qk_nope + shape.v_head), shape.kv_lora, other, GROUP_SIZE)
    attention = lw.attention - kv_b + lw.mla_absorbed if lw.mla_absorbed else lw.attention
    if not pp_plan.is_moe_layer(shape, layer):
        return attention + lw.indexer + lw.norms + lw.mlp
    h, width = shape.hidden, shape.moe_intermediate
    expert = pp_plan.matrix_bytes(2 * width, h, expert_bits, GROUP_SIZE) + pp_plan.matrix_bytes(
        h, width, expert_bits, GROUP_SIZE
    )
    shared = width * shape.n_shared
    mlp = shape.n_routed * h * pp_plan.BF16 + (shape.n_routed * 4 if shape.routing_bias else 0)  # router, bias
    mlp += pp_plan.matrix_bytes(2 * shared, h, other, GROUP_SIZE) + pp_plan.matrix_bytes(h, shared, other, GROUP_SIZE)
    mlp += experts_touched(shape.n_routed, shape.experts_per_token, rows) * expert
    return attention + lw.indexer + lw.norms + mlp


def lm_head_bytes(shape: pp_plan.ModelShape) -> int:
    """The LM head (bf16, padded vocabulary x hidden) and the final norm, read once a step."""
    return shape.vocab_padded * shape.hidden * pp_plan.BF16 + shape.hidden * pp_plan.BF16


def handoff_bytes(shape: pp_plan.ModelShape, rows: int, pp: int = PP) -> tuple[int, int]:
    """(bytes all boundaries of a step send, boundaries): hidden states and residual (bf16) per row at each of the
    `pp - 1` boundaries, plus the relayed top-k (int32 per index) where the next stage starts on a shared layer."""
    sizes = pp_plan.default_partition(shape.num_layers, pp)
    starts = [sum(sizes[:i]) for i in range(1, pp)]
    per_row = 2 * shape.hidden * pp_plan.BF16
    relays = sum(not pp_plan.computes_topk(shape, s) for s in starts)
    return rows * (per_row * len(starts) + relays * (shape.index_topk or 0) * 4), len(starts)


def kernel_ms(rows: list[dict], kernel: str, shape: str, source: str) -> float:
    """The H200 time (ms) of the one row of `kernel` at `shape`; a missing, unavailable or repeated row is refused."""
    hits = [r for r in rows if r.get("kernel") == kernel and r.get("shape") == shape]
    if not hits:
        raise ProjectionError(f"{source} has no row {kernel!r} / {shape!r}, which the projection needs")
    if len(hits) > 1:
        raise ProjectionError(f"{source} has {len(hits)} rows {kernel!r} / {shape!r}; keep one (one tree, one run)")
    ms = hits[0].get("ms")
    if not isinstance(ms, (int, float)) or isinstance(ms, bool) or not ms > 0:
        raise ProjectionError(
            f"{source}: row {kernel!r} / {shape!r} has no positive time ({hits[0].get('status', ms)!r})"
        )
    return float(ms)


@dataclass(frozen=True)
class Scenario:
    """One decode step to project: requests in the batch, MTP speculative tokens, context tokens per request."""

    batch: int
    mtp: int
    context: int


@dataclass(frozen=True)
class StepParts:
    """The card-independent inputs of one step: H200 kernel times already summed over the layers that run them."""

    weight_bytes: float  # weights read in the step (target model, LM head, and the draft's when MTP)
    kernel_ms_h200: float  # DSA kernel time on the H200, all layers (and draft steps)
    handoff_bytes: int  # sent over all stage boundaries in the step
    handoffs: int  # stage boundaries crossed in the step
    tokens: int  # tokens the step yields for sure (batch without MTP; 0 with MTP: acceptance decides)


def step_parts(shape: pp_plan.ModelShape, sc: Scenario, rows: list[dict], source: str) -> StepParts:
    """Sum one step's kernels (from the H200 rows), weight bytes and hand-offs for scenario `sc`."""
    label, heads = dsa_kernels.INDEXER[0]
    mla_label, mla_heads = next(m for m in dsa_kernels.MLA if m[1] == shape.heads)  # PP8: all heads on one card

    def indexer(batch: int, next_n: int) -> float:
        return kernel_ms(
            rows, "indexer paged logits", f"{label} {heads}h ctx {sc.context} B {batch} next_n {next_n}", source
        )

    def mla(n: int) -> float:
        return kernel_ms(
            rows, "sparse MLA decode", f"{mla_label} {mla_heads}h top-k {dsa_kernels.TOPK} rows {n}", source
        )

    next_n = sc.mtp + 1
    target_rows = sc.batch * next_n
    full = sum(pp_plan.computes_topk(shape, x) for x in range(shape.num_layers))
    ms = full * indexer(sc.batch, next_n) + shape.num_layers * mla(target_rows)
    weights = sum(layer_read_bytes(shape, x, target_rows) for x in range(shape.num_layers)) + lm_head_bytes(shape)
    if sc.mtp:  # the draft: the MTP layer (its own indexer's top-k at step 0 only), eh_proj and the shared LM head
        mtp_layer = shape.num_layers
        eh_proj = pp_plan.matrix_bytes(shape.hidden, 2 * shape.hidden, MTP_BITS, GROUP_SIZE)
        per_draft = layer_read_bytes(shape, mtp_layer, sc.batch, MTP_BITS) + eh_proj + lm_head_bytes(shape)
        weights += sc.mtp * per_draft
        ms += indexer(sc.batch, 1) + sc.mtp * mla(sc.batch)
    sent, boundaries = handoff_bytes(shape, target_rows)
    return StepParts(weights, ms, sent, boundaries, 0 if sc.mtp else sc.batch)


def project(parts: StepParts, card: Card, h200_peak_gbs: float) -> dict:
    """One card's step: kernels scaled by bandwidth, weights at the card's peak, hand-offs over its link."""
    kernels = parts.kernel_ms_h200 * h200_peak_gbs / card.hbm_gbs
    weights = parts.weight_bytes / (card.hbm_gbs * 1e9) * 1e3
    handoff = parts.handoffs * HANDOFF_LATENCY_US / 1e3 + parts.handoff_bytes / (card.link_gbs * 1e9) * 1e3
    step = kernels + weights + handoff
    # the same step with the kernels at their H200 times: kernels bound by launches and latency, not bytes (the
    # 1-8-row shapes reach under 5% of the H200's peak), do not slow down with the card's bandwidth
    step_unscaled = parts.kernel_ms_h200 + weights + handoff
    return {
        "kernels_ms": round(kernels, 3),
        "kernels_ms_unscaled": round(parts.kernel_ms_h200, 3),
        "weights_ms": round(weights, 3),
        "handoff_ms": round(handoff, 3),
        "step_ms": round(step, 3),
        "step_ms_unscaled": round(step_unscaled, 3),
        "tok_s": round(parts.tokens / step * 1e3, 2) if parts.tokens else None,
        "tok_s_unscaled": round(parts.tokens / step_unscaled * 1e3, 2) if parts.tokens else None,
    }


def projection(doc: dict, source: str, scenarios: list[Scenario], cards: list[str]) -> dict:
    """The whole projection for a dsa_kernels.py JSON `doc`: a row per card and scenario, with the assumptions."""
    if not isinstance(doc, dict) or not isinstance(doc.get("rows"), list):
        raise ProjectionError(f"{source} is not a dsa_kernels.py result (no 'rows' list)")
    peak = doc.get("peak_gbs")
    if not isinstance(peak, (int, float)) or not peak > 0:
        raise ProjectionError(f"{source} has no positive 'peak_gbs' (the H200 peak its shares were taken of)")
    unknown = [c for c in cards if c not in CARDS]
    if unknown:
        raise ProjectionError(f"unknown card {', '.join(unknown)}; the projection knows {', '.join(CARDS)}")
    shape = glm5_shape()
    out_rows = []
    for sc in scenarios:
        if sc.batch < 1 or sc.mtp < 0 or sc.context < 1:
            raise ProjectionError(f"scenario {sc} is not a decode step (batch >= 1, mtp >= 0, context >= 1)")
        parts = step_parts(shape, sc, doc["rows"], source)
        for name in cards:
            out_rows.append(
                {
                    "card": name,
                    **asdict(sc),
                    "weight_gb": round(parts.weight_bytes / 1e9, 3),
                    **project(parts, CARDS[name], peak),
                }
            )
    return {
        "label": LABEL,
        "kernels": {"source": source, "sm80_ptx": doc.get("sm80_ptx"), "h200_peak_gbs": peak},
        "assumptions": {
            "pp": PP,
            "handoff_latency_us": HANDOFF_LATENCY_US,
            "bits": {
                "routed experts": EXPERT_BITS,
                "other matrices": OTHER_BITS,
                "mtp layer": MTP_BITS,
                "group": GROUP_SIZE,
            },
            "kernels": "H200 time x H200 peak / card peak (same share of peak); the unscaled H200 time gives the "
            "other end of the range (latency-bound kernels); top-k, fused Q/norm-rope, norms, rope, sampling and "
            "launch gaps not counted",
            "weights": "bytes read per step at the card's peak bandwidth (a lower bound on that part)",
            "step": "one batch through all stages in turn; MTP rows: ms per step (tokens depend on acceptance)",
        },
        "cards": {name: asdict(CARDS[name]) for name in cards},
        "rows": out_rows,
        "peers": list(PEERS),
    }


def table(result: dict) -> str:
    """Markdown: the projection's rows, then the peers' published numbers, each part labelled for what it is."""
    lines = [
        f"**{result['label']}** (kernel times: `{result['kernels']['source']}`)",
        "",
        "| card (x8, PP8) | batch | MTP | context | DSA kernels ms (scaled / H200 time) | weights ms | hand-offs ms "
        "| step ms | tok/s |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in result["rows"]:
        tok = "-" if r["tok_s"] is None else f"{r['tok_s']:.1f}-{r['tok_s_unscaled']:.1f}"
        lines.append(
            f"| {r['card']} (projected) | {r['batch']} | {r['mtp']} | {r['context']:,} | {r['kernels_ms']:.1f} / "
            f"{r['kernels_ms_unscaled']:.1f} | {r['weights_ms']:.1f} | {r['handoff_ms']:.2f} | "
            f"{r['step_ms_unscaled']:.1f}-{r['step_ms']:.1f} | {tok} |"
        )
    lines += ["", "| published by peers (their hardware) | tok/s | ms per step |", "|---|---|---|"]
    for p in result["peers"]:
        lines.append(f"| {p['setup']} | {p['tok_s'] or '-'} | {p['ms_per_step'] or '-'} |")
    uncertain = [f"- {c['name']}: {c['uncertain']}" for c in result["cards"].values() if c["uncertain"]]
    if uncertain:
        lines += ["", "Uncertain figures:", *uncertain]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kernels", type=Path, required=True, help="benchmarks/dsa_kernels.py's JSON")
    ap.add_argument("--card", action="append", help=f"one of {', '.join(CARDS)} (default: both)")
    ap.add_argument("--batch", type=int, action="append", help="requests per step (default 1)")
    ap.add_argument("--mtp", type=int, action="append", help="speculative tokens (default 0 and 3)")
    ap.add_argument("--context", type=int, action="append", help="tokens per request (default 8k, 32k, 128k)")
    ap.add_argument("--out", type=Path, help="write the JSON here")
    ap.add_argument("--table", action="store_true", help="print the markdown table")
    args = ap.parse_args(argv)
    scenarios = [
        Scenario(b, m, c)
        for m in args.mtp or [0, 3]
        for b in args.batch or [1]
        for c in args.context or list(dsa_kernels.CONTEXTS)
    ]
    try:
        try:
            doc = json.loads(args.kernels.read_text())
        except (OSError, json.JSONDecodeError) as exc:
            raise ProjectionError(f"cannot read {args.kernels}: {exc}") from None
        result = projection(doc, str(args.kernels), scenarios, args.card or list(CARDS))
    except ProjectionError as exc:
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
