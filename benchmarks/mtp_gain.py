"""MTP's decode speed-up explained by measured step times and tokens per step (pure: no GPU, no vLLM).

`recall_e2e.py run` writes, per engine, the headline per-request decode rate r = (N - 1) / (t(N) - t(1)) and the
step records of one timed pair (`step_timing`). For an MTP 0 row and an MTP k row of the same batch, context and N,
`explain` predicts the speed-up from those records alone and says how far the headline is from it:

    steady    = (tau_k / tau_0) * (s_0 / s_k)       tau: tokens a request gets per decode step (MTP 0: 1)
                                                     s:   a full-batch decode step's period (its median), host included
    predicted = (n_0 * s_0) / (n_k * s_k)           n:   decode steps after the last prefill step, i.e. the steps of
                                                         the request that finished last (the batch waits for it)
    window    = W_0 / W_k                           W:   the seconds those steps took
    measured  = r_k / r_0                           the headline
    gap       = measured / predicted - 1            "explained" when |gap| <= 5%

so measured = steady x straggler x tail x offset: straggler = predicted / steady (the last request's steps against
the mean request's), tail = window / predicted (steps that were not full-batch median steps: a shrinking batch at
the end, variance), offset = measured / window (what the headline's t(N) - t(1) holds besides the decode steps: a
one-off cost in the first generation of a batch, a different pair than the instrumented one, noise). The step
splits into the target (verify) forward, sampling with the rejection, the draft and the GPU's idle time (the host's
share); per emitted token,

    MTP k: s_k / tau_k = (verify + sample + draft + idle) / tau_k,
    rejection = s_k / tau_k - s_k / (1 + k)         what the rejected verify rows cost per token

The offsets in seconds (each engine's t(N) - t(1) less its decode window, for the instrumented pair and for the cold
one) are good to about the host's time to launch a step: with async scheduling, the last prefill step's output of
t(N) is taken after the next step was launched.

The acceptance is checked too: tau_k - 1 (from the step records) against the engine's own spec-decode counters
(accepted tokens / drafts: the accepted tokens a step gets), and against the recall model's design for the same
prompts (`recall_model.predict_drafts`), within 5%.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from vllm_compose.errors import ComposeError

#: the largest |gap| (and acceptance disagreement) still called explained
TOLERANCE = 0.05

#: how a row is matched with its MTP 0 partner
KEY = ("path", "mode", "batch", "context", "tokens")


class ExplainError(ComposeError):
    """Rows that cannot be explained: missing step records, no partner row, figures that cannot be."""


@dataclass(frozen=True)
class EngineFigures:
    """One engine's measured figures (from one `recall_e2e.py run` row)."""

    mtp: int
    #: the headline per-request decode tok/s
    rate: float
    #: tokens a request gets per decode step
    tokens_per_step: float
    #: a full-batch decode step's period, ms (median)
    period_ms: float
    #: GPU spans of the step's parts, ms (medians): target (MTP k: verify), sample (with the rejection), draft
    target_ms: float | None
    sample_ms: float | None
    draft_ms: float | None
    #: the period less the spans: the GPU waiting for the host, ms (median)
    idle_ms: float | None
    #: the host's time in the runner's calls (target, sample, draft), ms (medians): a host-bound step shows here
    cpu_ms: dict[str, float]
    #: decode steps after the last prefill step, and their seconds (the instrumented pair's t(N))
    window_steps: int
    window_s: float
    #: the instrumented pair's own t(N) - t(1), s
    pair_difference_s: float
    #: the last request's decode steps over the mean request's
    straggler: float | None
    #: accepted tokens per draft step from the engine's counters (MTP k), and the design's for the same prompts
    counters_accepted_per_step: float | None
    designed_accepted_per_step: float | None
    #: the cold pair (the first generation of the batch): t(1) over the warm pairs' median t(1), its t(N) - t(1)
    #: less its own decode window (s), and the Triton specializations its t(1) compiled; None without a cold pair
    cold_extra_t_one_s: float | None = None
    cold_window_offset_s: float | None = None
    cold_triton_jit: int | None = None


@dataclass(frozen=True)
class MtpGain:
    """The explanation of one MTP k row against its MTP 0 row. Speed-ups are ratios, times ms per emitted token."""

    key: dict[str, Any]
    k: int
    measured: float
    steady: float
    predicted: float
    window: float
    straggler: float
    tail: float
    offset: float
    gap: float
    #: the same ratio from each engine's first pair (the protocol of the first rows: one warm-up request, then one
    #: cold pair at the batch), when the rows have it
    measured_cold: float | None
    explained: bool
    #: MTP k's tok/s predicted from its own steps ((N - 1) / (n_k * s_k)) and measured
    predicted_rate: float
    measured_rate: float
    #: per emitted token, ms: MTP 0's step, MTP k's parts and the rejection cost
    per_token_ms: dict[str, float | None]
    #: tokens per step from the steps against 1 + the counters' and the design's accepted tokens per step
    acceptance: dict[str, float | None]
    acceptance_agrees: bool
    #: the instrumented pair's t(N) - t(1) less its step-measured decode window, per engine, s (and the cold pair's,
    #: when the row has one: negative is time its t(1) held beyond the prefill that t(N) also holds)
    window_offset_s: dict[str, float | None]
    mtp0: EngineFigures
    mtpk: EngineFigures

    def to_json(self) -> dict:
        return asdict(self)


def _key(row: dict) -> dict[str, Any]:
    return {k: row.get(k, "offline" if k == "path" else None) for k in KEY}


def _figures(row: dict) -> EngineFigures:
    """An engine's figures from its row; refuses a row that cannot be explained, saying how to get one that can."""
    where = f"the MTP {row.get('mtp')} row at batch {row.get('batch')}, context {row.get('context')}"
    timing = row.get("timing")
    if not timing or "all" not in timing:
        raise ExplainError(
            f"{where} has no step records",
            hint="run it again with `recall_e2e.py run ...` (step records are on unless --no-steps)",
        )
    if not row.get("as_predicted", False):
        raise ExplainError(f"{where}: its tokens were not the predicted ones (a fast wrong run is not a result)")
    steps = timing["all"]
    for name in ("period_ms", "tokens_per_step", "window_s", "window_steps"):
        value = steps.get(name)
        if value is None or value <= 0:
            raise ExplainError(
                f"{where}: the step records give no {name} ({value!r})",
                hint="a full-batch decode step is needed: use more tokens (--tokens) than the prefill takes steps",
            )
    k = int(row["mtp"])
    if not 1.0 <= steps["tokens_per_step"] <= 1 + k + 1e-9:
        raise ExplainError(f"{where}: {steps['tokens_per_step']} tokens per step is outside [1, {1 + k}]")
    if row.get("per_request_tok_s", 0) <= 0:
        raise ExplainError(f"{where}: no headline rate")
    gpu = steps.get("gpu_ms") or {}
    counters = row.get("spec_metrics") or {}

    def pick(suffix: str):
        return next((v for name, v in counters.items() if name.endswith(suffix)), None)

    drafts, accepted = pick("spec_decode_num_drafts"), pick("spec_decode_num_accepted_tokens")
    designed = row.get("designed") or {}
    cold = row.get("cold") or {}
    summaries = row.get("step_summaries") or {}
    cold_one, cold_all = summaries.get("cold/one") or {}, summaries.get("cold/all") or {}
    extra = offset = None
    if cold.get("t_one_s") is not None and row.get("headline") == "median of the warm pairs":
        extra = round(cold["t_one_s"] - float(row["t_one_s"]), 4)
    if cold.get("t_all_s") is not None and cold_all.get("window_s") is not None:
        offset = round(cold["t_all_s"] - cold["t_one_s"] - cold_all["window_s"], 4)
    return EngineFigures(
        mtp=k,
        rate=float(row["per_request_tok_s"]),
        tokens_per_step=float(steps["tokens_per_step"]),
        period_ms=float(steps["period_ms"]),
        target_ms=gpu.get("target"),
        sample_ms=gpu.get("sample"),
        draft_ms=gpu.get("draft"),
        idle_ms=steps.get("gpu_idle_ms"),
        cpu_ms=dict(steps.get("cpu_ms") or {}),
        window_steps=int(steps["window_steps"]),
        window_s=float(steps["window_s"]),
        pair_difference_s=float(timing["t_all_s"]) - float(timing["t_one_s"]),
        straggler=steps.get("straggler"),
        counters_accepted_per_step=(accepted / drafts) if k and drafts else None,
        designed_accepted_per_step=designed.get("accepted_per_step"),
        cold_extra_t_one_s=extra,
        cold_window_offset_s=offset,
        cold_triton_jit=cold_one.get("triton_jit"),
    )


def _per_token(f: EngineFigures) -> dict[str, float | None]:
    def per(x: float | None) -> float | None:
        return None if x is None else round(x / f.tokens_per_step, 4)

    return {"step": per(f.period_ms), "target": per(f.target_ms), "sample": per(f.sample_ms),
            "draft": per(f.draft_ms), "idle": per(f.idle_ms)}  # fmt: skip


def explain_pair(row0: dict, rowk: dict) -> MtpGain:
    """The explanation of MTP k's row `rowk` against the MTP 0 row `row0` (same path, mode, batch, context, N)."""
    if _key(row0) != _key(rowk):
        raise ExplainError(f"rows of different configurations: {_key(row0)} against {_key(rowk)}")
    f0, fk = _figures(row0), _figures(rowk)
    if f0.mtp != 0 or fk.mtp < 1:
        raise ExplainError(f"explain takes an MTP 0 row and an MTP k >= 1 row, got MTP {f0.mtp} and MTP {fk.mtp}")
    tokens = int(rowk["tokens"])
    steady = (fk.tokens_per_step / f0.tokens_per_step) * (f0.period_ms / fk.period_ms)
    predicted = (f0.window_steps * f0.period_ms) / (fk.window_steps * fk.period_ms)
    window = f0.window_s / fk.window_s
    measured = fk.rate / f0.rate
    gap = measured / predicted - 1
    cold0, coldk = (row0.get("cold") or {}).get("per_request_tok_s"), (rowk.get("cold") or {}).get("per_request_tok_s")
    k = fk.mtp
    per0, perk = _per_token(f0), _per_token(fk)
    per_token = {
        "mtp0_step": per0["step"],
        "mtp0_target": per0["target"],
        "mtp0_sample": per0["sample"],
        "mtp0_idle": per0["idle"],
        "mtpk_step": perk["step"],
        "mtpk_verify": perk["target"],
        "mtpk_sample": perk["sample"],
        "mtpk_draft": perk["draft"],
        "mtpk_idle": perk["idle"],
        "mtpk_rejection": round(fk.period_ms / fk.tokens_per_step - fk.period_ms / (1 + k), 4),
    }
    from_steps = fk.tokens_per_step - 1
    acceptance = {
        "steps_accepted_per_step": round(from_steps, 4),
        "counters_accepted_per_step": fk.counters_accepted_per_step,
        "designed_accepted_per_step": fk.designed_accepted_per_step,
    }
    agrees = all(
        abs((1 + from_steps) / (1 + other) - 1) <= TOLERANCE
        for other in (fk.counters_accepted_per_step, fk.designed_accepted_per_step)
        if other is not None
    )
    return MtpGain(
        key=_key(rowk),
        k=k,
        measured=round(measured, 4),
        steady=round(steady, 4),
        predicted=round(predicted, 4),
        window=round(window, 4),
        straggler=round(predicted / steady, 4),
        tail=round(window / predicted, 4),
        offset=round(measured / window, 4),
        gap=round(gap, 4),
        measured_cold=round(coldk / cold0, 4) if cold0 and coldk else None,
        explained=abs(gap) <= TOLERANCE,
        predicted_rate=round((tokens - 1) / (fk.window_steps * fk.period_ms / 1e3), 2),
        measured_rate=fk.rate,
        per_token_ms=per_token,
        acceptance=acceptance,
        acceptance_agrees=agrees,
        window_offset_s={
            "mtp0": round(f0.pair_difference_s - f0.window_s, 4),
            "mtpk": round(fk.pair_difference_s - fk.window_s, 4),
            "mtp0_cold": f0.cold_window_offset_s,
            "mtpk_cold": fk.cold_window_offset_s,
        },
        mtp0=f0,
        mtpk=fk,
    )


def explain(mtp0_rows: list[dict], mtpk_rows: list[dict]) -> list[MtpGain]:
    """Each MTP k row explained against the MTP 0 row of its configuration (`KEY`)."""
    if not mtpk_rows:
        raise ExplainError("no MTP k row to explain", hint="pass the result files of `run --mtp 1` (or 2)")
    by_key: dict[tuple, dict] = {}
    for row in mtp0_rows:
        if row.get("mtp") != 0:
            raise ExplainError(f"an MTP {row.get('mtp')} row among the MTP 0 rows ({_key(row)})")
        key = tuple(_key(row).values())
        if key in by_key:
            raise ExplainError(f"two MTP 0 rows for {_key(row)}: which one is the baseline is ambiguous")
        by_key[key] = row
    out = []
    for row in mtpk_rows:
        partner = by_key.get(tuple(_key(row).values()))
        if partner is None:
            raise ExplainError(
                f"no MTP 0 row for {_key(row)}",
                hint="run `recall_e2e.py run --mtp 0` with the same --batch, --context, --tokens and --graphs",
            )
        out.append(explain_pair(partner, row))
    return out


def render(gains: list[MtpGain]) -> str:
    """Markdown: one row per explanation (speed-ups, factors, ms per token, acceptance), then the verdicts."""
    lines = [
        "| mode | batch | MTP | measured (cold) | predicted | steady | straggler | tail | offset | gap | MTP 0 ms/token "
        "| MTP k ms/token: verify + sample + draft + idle | rejection ms/token | accepted/step: steps, counters, "
        "design | t(N)-t(1) less window s (MTP 0, k) |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]

    def opt(x: float | None, fmt: str = "{:.2f}") -> str:
        return "-" if x is None else fmt.format(x)

    for g in gains:
        p, a = g.per_token_ms, g.acceptance
        parts = " + ".join(opt(p[n]) for n in ("mtpk_verify", "mtpk_sample", "mtpk_draft", "mtpk_idle"))
        lines.append(
            f"| {g.key['mode']} | {g.key['batch']} | {g.k} | {g.measured:.3f} ({opt(g.measured_cold, '{:.3f}')}) "
            f"| {g.predicted:.3f} | {g.steady:.3f} | {g.straggler:.3f} | {g.tail:.3f} | {g.offset:.3f} | {g.gap:+.1%} "
            f"| {opt(p['mtp0_step'])} "
            f"| {opt(p['mtpk_step'])} = {parts} | {opt(p['mtpk_rejection'])} "
            f"| {opt(a['steps_accepted_per_step'], '{:.3f}')}, {opt(a['counters_accepted_per_step'], '{:.3f}')}, "
            f"{opt(a['designed_accepted_per_step'], '{:.3f}')} "
            f"| {g.window_offset_s['mtp0']:+.3f}, {g.window_offset_s['mtpk']:+.3f} |"
        )
    lines.append("")
    for g in gains:
        host = "; ".join(
            f"MTP {f.mtp} period {f.period_ms:.2f} ms, GPU idle {opt(f.idle_ms)}, host in the runner's calls "
            + (", ".join(f"{part} {ms:.2f}" for part, ms in sorted(f.cpu_ms.items())) or "-")
            for f in (g.mtp0, g.mtpk)
        )
        lines.append(f"- a full-batch step: {host}")
        lines.append(
            f"- the cold pair, MTP 0 / MTP {g.k}: t(1) {opt(g.mtp0.cold_extra_t_one_s, '{:+.3f}')} / "
            f"{opt(g.mtpk.cold_extra_t_one_s, '{:+.3f}')} s against the warm median, t(N)-t(1) less its window "
            f"{opt(g.window_offset_s['mtp0_cold'], '{:+.3f}')} / {opt(g.window_offset_s['mtpk_cold'], '{:+.3f}')} s, "
            f"Triton specializations in its t(1) {opt(g.mtp0.cold_triton_jit, '{}')} / "
            f"{opt(g.mtpk.cold_triton_jit, '{}')}"
        )
    for g in gains:
        verdict = "explained" if g.explained else "NOT explained"
        lines.append(
            f"- {g.key['mode']}, batch {g.key['batch']}, MTP {g.k}: {verdict} (gap {g.gap:+.1%}, tolerance "
            f"{TOLERANCE:.0%}); acceptance {'agrees' if g.acceptance_agrees else 'DISAGREES'} with the counters "
            f"and the design"
        )
    return "\n".join(lines) + "\n"
