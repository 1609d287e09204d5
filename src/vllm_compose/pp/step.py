"""One decode step under pipeline parallelism, with and without MTP: whether MTP pays on a given link.

A step here is one batch in flight, a single stream's view: every stage runs in turn and no two steps overlap in the
pipeline (vLLM's batch queue overlaps the steps of different requests; that is not modelled).

    step = the stages' compute + a hand-off at each stage boundary + (MTP only) the draft round

* **Compute.** A stage takes the sum of its layers' times at the step's rows; the last stage adds the final norm and
  the LM head. A `Clock` says what each part costs. `ReadClock` takes the time to read a part's weights once (decode
  at a few rows is memory-bound): at a card's peak HBM bandwidth (`card_clock`, `--card`: a lower bound on the
  time), or from a measured per-layer time (`measured_clock`, `--layer-ms`): alone, at the rate that reads the mean
  decoder layer's weights at the step's batch in that time, so that every other part (the verify step's extra rows,
  the LM head, the MTP layer) is read at the same effective rate and all of the time grows with the bytes; with a
  card, the weights at the card's peak and the rest of the measured time a fixed cost a layer (attention kernels,
  launches) that does not grow with a few more rows. Rows cost through the routed experts they touch: one
  row picks 8 of GLM-5.x's 256, two rows touch 15.8 on average (`experts_touched`), so a verify step at batch 1
  reads about 1.5 times a plain step's weights.
* **Hand-offs.** At each stage boundary vLLM's `IntermediateTensors` carries the hidden states and the residual
  (`plan.INTERMEDIATE_KEYS`: bf16, `hidden` wide a row) and, where the next stage starts on a layer that reuses the
  top-k (`plan.computes_topk`), the relay's `index_topk` indices a row (`plan.TOPK_INDEX_BYTES`), as one transfer
  on the `link.Link`. Under tensor parallelism each rank sends its 1/TP share (vLLM's `all_gather_group`); the
  all-gather on the receiving side is not counted.
* **Rows.** A plain step has `batch` rows; under MTP k the target verifies `batch x (1 + k)` rows, on every stage
  and across every boundary.
* **The draft round** (MTP only, on the last stage): k draft steps, each the MTP layer, its `eh_proj` and the shared
  LM head. The first runs on the verified rows and computes the MTP layer's top-k; the later ones run one row a
  request and reuse that top-k (`index_share_for_mtp_iteration`). Plus a fixed cost a round (`--draft-round-ms`):
  by default the accepted counts' broadcast from the last stage to the others, one transfer's fixed cost per earlier
  stage, and nothing else. A measured value replaces it: vllm#44697 reports about 25 ms a round at PP4 over PCIe
  2.0 x4 (another model; extra launches and collectives, not bytes).
* **Tokens.** Each of the k drafts is accepted with probability a, independently of the others, and counts only when
  every draft before it was accepted (verification stops at the first rejection): a step yields 1 + a + a^2 + ... +
  a^k tokens a request, the target's own token included. Real acceptance falls with depth, so for k > 1 this is an
  upper bound unless a is the rate at the deepest position.

Out (`MtpEstimate`): tok/s with and without MTP, the speed-up, the break-even acceptance (where 1 + a + ... + a^k
equals MTP's step time over the plain one, solved by bisection: MTP pays above it), and the most the fixed draft
round may cost at the given acceptance. The plain step runs on the same partition as the MTP one. Pure arithmetic:
nothing here prints.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from ..errors import CommandLineError
from . import link as links
from .card import Card
from .card import card as find_card
from .plan import (
    BF16,
    INTERMEDIATE_KEYS,
    TOPK_INDEX_BYTES,
    ModelShape,
    Plan,
    PlanError,
    Settings,
    computes_topk,
    is_moe_layer,
    layer_weights,
    matrix_bytes,
)

#: the per-draft acceptance assumed when none is given: MiMo-7B's 70.9% under the original compose (docs/CONTEXT.md)
DEFAULT_ACCEPTANCE = 0.7
#: halvings of [0, 1] when solving for the break-even acceptance (2^-60: far below any acceptance anyone measures)
BISECTION_STEPS = 60


class StepError(PlanError):
    """A step the model cannot estimate: an acceptance, batch, time or partition out of range."""


# --- what a step reads ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Weights:
    """Bits per weight of what a step reads: the routed experts, the other quantizable matrices, the MTP layer."""

    expert_bits: int
    other_bits: int
    mtp_bits: int
    group_size: int

    @classmethod
    def of(cls, settings: Settings) -> Weights:
        """As pp-plan counts them: `--bits` for every quantized matrix, `--mtp-bits` (default `--bits`) for the MTP
        layer."""
        mtp = settings.mtp_bits if settings.mtp_bits is not None else settings.bits
        return cls(settings.bits, settings.bits, mtp, settings.group_size)


def experts_touched(n_routed: int, per_token: int, rows: int) -> float:
    """Expected distinct routed experts `rows` tokens touch when each picks `per_token` of `n_routed` uniformly (real
    routing is skewed, which touches fewer)."""
    return n_routed * (1.0 - (1.0 - per_token / n_routed) ** rows)


def layer_read_bytes(shape: ModelShape, layer: int, rows: int, weights: Weights, tp: int = 1) -> float:
    """Weight bytes decoder layer `layer` reads for one forward of `rows` query rows, on one of `tp` ranks.

    Attention projections (the bf16 absorbed W_UK_T / W_UV in place of a quantized `kv_b_proj`), the indexer on
    layers that compute their top-k, the norms, and the dense MLP or the router, the shared expert and the routed
    experts the rows touch. An MTP layer (`layer >= num_layers`) is read at `weights.mtp_bits`. Under tensor
    parallelism every rank reads its 1/TP of the split matrices and all of the replicated ones (the attention's
    down-projection and latent norms, the indexer, the layer norms, the router)."""
    bits_other, bits_expert = weights.other_bits, weights.expert_bits
    if layer >= shape.num_layers:
        bits_other = bits_expert = weights.mtp_bits
    group = weights.group_size
    lw = layer_weights(shape, layer, bits_other, group)
    kv_b = matrix_bytes(shape.heads * (shape.qk_nope + shape.v_head), shape.kv_lora, bits_other, group)
    attention = lw.attention - kv_b + lw.mla_absorbed if lw.mla_absorbed else lw.attention
    replicated = lw.attention_replicated + lw.indexer + lw.norms
    split = attention - lw.attention_replicated
    if not is_moe_layer(shape, layer):
        return replicated + (split + lw.mlp) / tp
    assert shape.n_routed is not None
    h, width = shape.hidden, shape.moe_intermediate
    expert = matrix_bytes(2 * width, h, bits_expert, group) + matrix_bytes(h, width, bits_expert, group)
    router = shape.n_routed * h * BF16 + (shape.n_routed * 4 if shape.routing_bias else 0)  # gate, fp32 bias
    shared = width * shape.n_shared
    shared_bytes = matrix_bytes(2 * shared, h, bits_other, group) + matrix_bytes(h, shared, bits_other, group)
    routed = experts_touched(shape.n_routed, shape.experts_per_token, rows) * expert
    return replicated + router + (split + shared_bytes + routed) / tp


def lm_head_bytes(shape: ModelShape, tp: int = 1) -> float:
    """The LM head (bf16, padded vocabulary x hidden, split over the ranks) and the final norm, read once a step."""
    return shape.vocab_padded * shape.hidden * BF16 / tp + shape.hidden * BF16


def draft_read_bytes(shape: ModelShape, weights: Weights, rows: int, step: int, tp: int = 1) -> float:
    """What draft step `step` (0-based) reads for `rows` rows: the MTP layer (its indexer at step 0 only: the later
    steps reuse its top-k), `eh_proj` (a plain bf16 linear, on every rank), enorm, hnorm, the shared head's norm and
    the LM head. Draft steps beyond the config's MTP layers reuse them in turn, as vLLM does."""
    layer = shape.num_layers + step % max(shape.mtp_layers, 1)
    nbytes = layer_read_bytes(shape, layer, rows, weights, tp)
    if step > 0:
        nbytes -= layer_weights(shape, layer, weights.mtp_bits, weights.group_size).indexer
    h = shape.hidden
    return nbytes + 2 * h * h * BF16 + 3 * h * BF16 + lm_head_bytes(shape, tp)


# --- what a step costs ------------------------------------------------------------------------------------------


class Clock(Protocol):
    """What each part of a decode step costs, in milliseconds, and where those figures come from."""

    def layer_ms(self, layer: int, rows: int) -> float:
        """Decoder layer `layer` for `rows` query rows."""
        ...

    def head_ms(self, rows: int) -> float:
        """The final norm and the LM head for `rows` rows."""
        ...

    def draft_ms(self, step: int, rows: int) -> float:
        """Draft step `step` for `rows` rows: the MTP layer, `eh_proj` and the LM head."""
        ...

    def describe(self) -> str: ...


@dataclass(frozen=True)
class ReadClock:
    """Every part of a step takes the time to read its weights once at `gbps`, and each decoder layer (the MTP
    layer's draft steps included) `fixed_ms` more that does not grow with the rows."""

    shape: ModelShape
    weights: Weights
    gbps: float  # effective read bandwidth, GB/s
    source: str  # where the figures come from
    fixed_ms: float = 0.0  # a layer's time beyond its weight reads: attention kernels, launches
    tp: int = 1

    def _ms(self, nbytes: float) -> float:
        return nbytes / (self.gbps * 1e9) * 1e3

    def layer_ms(self, layer: int, rows: int) -> float:
        return self._ms(layer_read_bytes(self.shape, layer, rows, self.weights, self.tp)) + self.fixed_ms

    def head_ms(self, rows: int) -> float:
        return self._ms(lm_head_bytes(self.shape, self.tp))

    def draft_ms(self, step: int, rows: int) -> float:
        return self._ms(draft_read_bytes(self.shape, self.weights, rows, step, self.tp)) + self.fixed_ms

    def describe(self) -> str:
        fixed = f" plus {self.fixed_ms:.3f} ms a layer that does not grow with the rows" if self.fixed_ms else ""
        return f"weights read once a step at {self.gbps:,.0f} GB/s{fixed} ({self.source})"


def card_clock(shape: ModelShape, weights: Weights, card: Card) -> ReadClock:
    """Weights read at the card's peak HBM bandwidth: a lower bound on the compute (attention kernels, launches and
    the rest are not counted)."""
    return ReadClock(shape, weights, card.hbm_gbs, f"{card.name}'s peak HBM bandwidth: a lower bound on the time")


def measured_clock(
    shape: ModelShape, weights: Weights, layer_ms: float, batch: int, card: Card | None = None
) -> ReadClock:
    """A clock that gives the mean decoder layer `layer_ms` at `batch` rows. Without a card, every part is read at
    the rate that implies (all of a layer's time grows with the bytes its rows read); with one, a layer reads its
    weights at the card's peak and the rest of the measured time is a fixed cost a layer (attention kernels, launches:
    they do not grow with a few more rows)."""
    if isinstance(layer_ms, bool) or not isinstance(layer_ms, (int, float)) or not layer_ms > 0:
        raise StepError(
            f"--layer-ms is {layer_ms!r}; it must be a positive number of milliseconds",
            key="--layer-ms",
            hint="pass one decoder layer's time in a decode step at your batch, e.g. from a profile: the step's "
            "time over its layers",
        )
    n = shape.num_layers
    mean = sum(layer_read_bytes(shape, x, batch, weights) for x in range(n)) / n
    measured = f"{layer_ms:g} ms a decoder layer at batch {batch}, measured (--layer-ms)"
    if card is None:
        gbps = mean / (layer_ms / 1e3) / 1e9
        return ReadClock(shape, weights, gbps, f"{measured}: the rate that reads the mean layer's weights in that time")
    reads = mean / (card.hbm_gbs * 1e9) * 1e3
    if layer_ms < reads:
        raise StepError(
            f"--layer-ms {layer_ms:g} is less than reading the mean layer's weights at {card.name}'s peak "
            f"({reads:.3f} ms at batch {batch})",
            key="--layer-ms",
            hint="check the measurement, its batch (--batch) and the weights' bits (--bits, --mtp-bits)",
        )
    return ReadClock(
        shape,
        weights,
        card.hbm_gbs,
        f"{measured}, split into reads at {card.name}'s peak and the rest",
        layer_ms - reads,
    )


# --- the step ---------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Boundary:
    """A stage boundary a step crosses."""

    into: int  # the receiving stage, 0-based
    first_layer: int  # its first decoder layer
    relays_topk: bool  # that layer reuses the top-k: the previous stage's selection crosses too
    bytes_per_row: int  # hidden states and residual, plus the relayed indices where `relays_topk`


def boundaries(shape: ModelShape, sizes: Sequence[int]) -> tuple[Boundary, ...]:
    """The boundaries of the partition `sizes` (layers per stage, as `VLLM_PP_LAYER_PARTITION` lists them)."""
    if not sizes or sum(sizes) != shape.num_layers or min(sizes) < 1:
        raise StepError(
            f"partition {','.join(map(str, sizes))} does not split {shape.num_layers} layers into non-empty stages",
            key="VLLM_PP_LAYER_PARTITION",
        )
    hidden = len(INTERMEDIATE_KEYS) * shape.hidden * BF16
    relay = (shape.index_topk or 0) * TOPK_INDEX_BYTES
    out, start = [], 0
    for i, n in enumerate(sizes[:-1]):
        start += n
        shared = shape.is_dsa and not computes_topk(shape, start)
        out.append(Boundary(i + 1, start, shared, hidden + (relay if shared else 0)))
    return tuple(out)


@dataclass(frozen=True)
class StepTimes:
    """One step's times at one number of rows."""

    rows: int  # query rows every stage runs
    stage_ms: tuple[float, ...]  # compute per stage (the last with the final norm and LM head)
    handoff_bytes: tuple[float, ...]  # per boundary, what one rank sends
    handoff_ms: tuple[float, ...]  # per boundary
    draft_ms: tuple[float, ...] = ()  # per draft step (MTP only)
    round_ms: float = 0.0  # the draft round's fixed cost (MTP only)

    @property
    def compute_ms(self) -> float:
        return sum(self.stage_ms)

    @property
    def link_ms(self) -> float:
        return sum(self.handoff_ms)

    @property
    def total_ms(self) -> float:
        return self.compute_ms + self.link_ms + sum(self.draft_ms) + self.round_ms

    def tok_s(self, batch: int, tokens_per_request: float = 1.0) -> float:
        """Tokens a second when each of `batch` requests gains `tokens_per_request` a step."""
        return batch * tokens_per_request / self.total_ms * 1e3

    def to_json(self) -> dict:
        return {
            "rows": self.rows,
            "stage_ms": list(self.stage_ms),
            "handoff_bytes": list(self.handoff_bytes),
            "handoff_ms": list(self.handoff_ms),
            "draft_ms": list(self.draft_ms),
            "round_ms": self.round_ms,
            "step_ms": self.total_ms,
        }


def step_times(
    shape: ModelShape,
    sizes: Sequence[int],
    clock: Clock,
    link: links.Link,
    rows: int,
    *,
    drafts: int = 0,
    batch: int | None = None,
    round_ms: float = 0.0,
    tp: int = 1,
) -> StepTimes:
    """The times of one step of `rows` rows on partition `sizes`; with `drafts` > 0, plus the draft round for
    `batch` requests (the first draft step on the `rows` verified rows, the later ones on `batch`)."""
    stage_ms, start = [], 0
    for n in sizes:
        stage_ms.append(sum(clock.layer_ms(x, rows) for x in range(start, start + n)))
        start += n
    stage_ms[-1] += clock.head_ms(rows)
    sent = [b.bytes_per_row * rows / tp for b in boundaries(shape, sizes)]
    draft = tuple(clock.draft_ms(i, rows if i == 0 else (batch or rows)) for i in range(drafts))
    return StepTimes(
        rows,
        tuple(stage_ms),
        tuple(sent),
        tuple(link.transfer_ms(s) for s in sent),
        draft,
        round_ms if drafts else 0.0,
    )


def expected_tokens(acceptance: float, k: int) -> float:
    """Tokens a request gains in a step with k drafts: 1 + a + a^2 + ... + a^k (the module docstring: each draft
    accepted with probability a, independently, counted while every earlier one was)."""
    return sum(acceptance**i for i in range(k + 1))


def break_even_acceptance(ratio: float, k: int) -> float | None:
    """The acceptance at which 1 + a + ... + a^k equals `ratio` (MTP's step time over the plain step's): MTP pays
    above it. 0.0 when MTP pays with every draft rejected (ratio < 1); None when it cannot pay with every draft
    accepted (ratio > k + 1). Bisection: the left side rises with a on [0, 1]."""
    if ratio < 1:
        return 0.0
    if ratio > k + 1:
        return None
    lo, hi = 0.0, 1.0
    for _ in range(BISECTION_STEPS):
        mid = (lo + hi) / 2
        if expected_tokens(mid, k) < ratio:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


def default_round_ms(link: links.Link, pp: int) -> float:
    """The draft round's fixed cost when none is measured: the accepted counts' broadcast from the last stage to the
    `pp - 1` others, one transfer's fixed cost each (the bytes are a few per request)."""
    return (pp - 1) * link.latency_us / 1e3


@dataclass(frozen=True)
class MtpEstimate:
    """A step with MTP k against the plain step, on one link, and what follows for tok/s."""

    sizes: tuple[int, ...]  # the partition both steps run on
    batch: int
    k: int  # num_speculative_tokens
    acceptance: float  # per draft (the module docstring)
    link: links.Link
    clock: str  # where the compute times come from
    tp: int
    boundaries: tuple[Boundary, ...]
    plain: StepTimes
    mtp: StepTimes
    round_measured: bool  # the draft round's fixed cost was given (else `default_round_ms`)

    @property
    def tokens_per_step(self) -> float:
        """Expected tokens a request gains in an MTP step."""
        return expected_tokens(self.acceptance, self.k)

    @property
    def tok_s_plain(self) -> float:
        return self.plain.tok_s(self.batch)

    @property
    def tok_s_mtp(self) -> float:
        return self.mtp.tok_s(self.batch, self.tokens_per_step)

    @property
    def speedup(self) -> float:
        return self.tok_s_mtp / self.tok_s_plain

    @property
    def pays(self) -> bool:
        return self.speedup > 1

    @property
    def break_even(self) -> float | None:
        """The acceptance above which MTP pays on this link (None: at no acceptance)."""
        return break_even_acceptance(self.mtp.total_ms / self.plain.total_ms, self.k)

    @property
    def max_round_ms(self) -> float:
        """The most the draft round's fixed cost may be before MTP stops paying at this acceptance (< 0: MTP does
        not pay even with a free round)."""
        return self.tokens_per_step * self.plain.total_ms - (self.mtp.total_ms - self.mtp.round_ms)

    def verdict(self) -> str:
        pays = "pays" if self.pays else "does not pay"
        return f"MTP {self.k} {pays} on this link at acceptance {self.acceptance:.2f}: {self.speedup:.2f}x"

    def to_json(self) -> dict:
        return {
            "partition": list(self.sizes),
            "batch": self.batch,
            "mtp": self.k,
            "acceptance": self.acceptance,
            "tp": self.tp,
            "link": self.link.to_json(),
            "compute": self.clock,
            "boundaries": [
                {
                    "into_stage": b.into + 1,
                    "first_layer": b.first_layer,
                    "relays_topk": b.relays_topk,
                    "bytes_per_row": b.bytes_per_row,
                }
                for b in self.boundaries
            ],  # fmt: skip
            "plain": self.plain.to_json(),
            "with_mtp": self.mtp.to_json(),
            "draft_round_ms_measured": self.round_measured,
            "tokens_per_step": self.tokens_per_step,
            "tok_s": {"plain": self.tok_s_plain, "mtp": self.tok_s_mtp},
            "speedup": self.speedup,
            "pays": self.pays,
            "break_even_acceptance": self.break_even,
            "max_draft_round_ms": self.max_round_ms,
            "verdict": self.verdict(),
        }


def estimate(
    shape: ModelShape,
    sizes: Sequence[int],
    clock: Clock,
    link: links.Link,
    *,
    batch: int = 1,
    k: int = 1,
    acceptance: float = DEFAULT_ACCEPTANCE,
    draft_round_ms: float | None = None,
    tp: int = 1,
) -> MtpEstimate:
    """MTP k against the plain step on partition `sizes` (module docstring: the model); a value out of range is a
    `StepError` naming its option."""
    _check(isinstance(batch, int) and batch >= 1, "--batch", batch, "requests in a step: an integer >= 1")
    _check(isinstance(k, int) and k >= 1, "--mtp", k, "num_speculative_tokens: an integer >= 1 (MTP against none)")
    _check(
        isinstance(acceptance, (int, float)) and 0 <= acceptance <= 1,
        "--mtp-acceptance",
        acceptance,
        "the chance a draft is accepted: a number from 0 to 1, e.g. 0.7 (vLLM logs it as the draft acceptance rate)",
    )
    _check(
        draft_round_ms is None or (isinstance(draft_round_ms, (int, float)) and draft_round_ms >= 0),
        "--draft-round-ms",
        draft_round_ms,
        "the draft round's fixed cost in milliseconds, >= 0",
    )
    _check(isinstance(tp, int) and tp >= 1, "tp", tp, "tensor-parallel size: an integer >= 1")
    sizes = tuple(sizes)
    bounds = boundaries(shape, sizes)
    round_ms = default_round_ms(link, len(sizes)) if draft_round_ms is None else float(draft_round_ms)
    plain = step_times(shape, sizes, clock, link, batch, tp=tp)
    mtp = step_times(
        shape, sizes, clock, link, batch * (1 + k), drafts=k, batch=batch, round_ms=round_ms, tp=tp
    )  # fmt: skip
    return MtpEstimate(
        sizes, batch, k, float(acceptance), link, clock.describe(), tp, bounds, plain, mtp, draft_round_ms is not None
    )


def _check(ok: bool, option: str, value, want: str) -> None:
    if not ok:
        raise StepError(f"{option} is {value!r}; it must be {want}", key=option)


def for_plan(
    plan: Plan,
    *,
    card: str | None = None,
    link: str | None = None,
    link_gbps: float | None = None,
    latency_us: float | None = None,
    layer_ms: float | None = None,
    draft_round_ms: float | None = None,
    acceptance: float | None = None,
    batch: int | None = None,
) -> MtpEstimate:
    """pp-plan's question: does the plan's MTP pay on this link, on the plan's partition? The link is `link` (a
    PCIe name), else `link_gbps` (measured), else the card's; the compute is `layer_ms` (measured; split into the
    card's weight reads and a fixed rest when a card is named), else the card's peak bandwidth."""
    the_card = find_card(card) if card is not None else None
    if link is not None:
        the_link = links.pcie(link, latency_us)
    elif link_gbps is not None:
        the_link = links.measured(link_gbps, latency_us)
    elif the_card is not None:
        the_link = the_card.link.with_latency(latency_us)
    else:
        given = [
            option
            for option, value in (
                ("--layer-ms", layer_ms),
                ("--draft-round-ms", draft_round_ms),
                ("--mtp-acceptance", acceptance),
                ("--batch", batch),
                ("--link-latency-us", latency_us),
            )
            if value is not None
        ]
        raise CommandLineError(
            f"{', '.join(given) or 'the MTP estimate'} needs a link",
            key=given[0] if given else None,
            hint="pass --link pcieGxW (e.g. pcie1x4), a measured --link-gbps, or --card NAME",
        )
    if plan.settings.mtp < 1:
        raise StepError(
            "the link estimate compares MTP with none, and --mtp is 0",
            key="--mtp",
            hint="pass the num_speculative_tokens you would serve with, e.g. --mtp 1",
        )
    shape, weights, n = plan.shape, Weights.of(plan.settings), 1 if batch is None else batch
    if layer_ms is not None:
        _check(isinstance(n, int) and n >= 1, "--batch", n, "requests in a step: an integer >= 1")
        clock = measured_clock(shape, weights, layer_ms, n, the_card)
    elif the_card is not None:
        clock = card_clock(shape, weights, the_card)
    else:
        raise StepError(
            "the link estimate needs a time per layer",
            key="--layer-ms",
            hint="pass a measured --layer-ms (one decoder layer's time in a decode step), or --card NAME for its "
            "peak HBM bandwidth (a lower bound on the time)",
        )
    return estimate(
        shape,
        plan.chosen.sizes,
        clock,
        the_link,
        batch=n,
        k=plan.settings.mtp,
        acceptance=DEFAULT_ACCEPTANCE if acceptance is None else acceptance,
        draft_round_ms=draft_round_ms,
    )
