"""What the cycle model must do on the GPU, and how far each validation run is from it.

The tiny cycle model (`tinyglm.TokenCycle`) is built so that greedy decoding is known in advance: after token `t`
comes `next[t]`, with a designed logit margin far above bf16 rounding. Its MTP layer drafts `draft_next(t)`, right
for a known set of tokens, so vLLM's spec-decode counters are known in advance too. This module computes both
predictions and compares the runs' JSON (written by `lab/device/validate.py`) with them and with each other:

- `expected_tokens`: the greedy continuation of a prompt.
- `predicted_spec_counters`: drafts, draft tokens, accepted tokens (in total and per draft position) that vLLM's
  scheduler counts for greedy requests verified k drafts at a time (one verification per step; the prefill step
  emits one token and proposes the first drafts; a step emits the accepted drafts plus one token; a request is
  verified again while it has fewer than `max_tokens` tokens).
- `logprob_agreement`: where two runs report top-n log-probs, how much the log-odds of the runners-up against the
  top token differ between them (these depend on attention and the indexer, unlike the designed top-1).
- `judge`: the verdict per run.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from .tinyglm import TokenCycle


def expected_tokens(cycle: TokenCycle, prompt: Sequence[int], n: int) -> list[int]:
    """The `n` tokens greedy decoding emits after `prompt`."""
    out, t = [], prompt[-1]
    for _ in range(n):
        t = cycle.next[t]
        out.append(t)
    return out


@dataclass
class SpecCounters:
    """vLLM's spec-decode counters (`vllm:spec_decode_num_*`), summed over requests."""

    num_drafts: int = 0
    num_draft_tokens: int = 0
    num_accepted_tokens: int = 0
    num_accepted_tokens_per_pos: list[int] = field(default_factory=list)

    def add(self, other: SpecCounters) -> None:
        self.num_drafts += other.num_drafts
        self.num_draft_tokens += other.num_draft_tokens
        self.num_accepted_tokens += other.num_accepted_tokens
        width = max(len(self.num_accepted_tokens_per_pos), len(other.num_accepted_tokens_per_pos))
        mine = self.num_accepted_tokens_per_pos + [0] * (width - len(self.num_accepted_tokens_per_pos))
        theirs = other.num_accepted_tokens_per_pos + [0] * (width - len(other.num_accepted_tokens_per_pos))
        self.num_accepted_tokens_per_pos = [a + b for a, b in zip(mine, theirs, strict=True)]

    def as_dict(self) -> dict[str, Any]:
        return {
            "num_drafts": self.num_drafts,
            "num_draft_tokens": self.num_draft_tokens,
            "num_accepted_tokens": self.num_accepted_tokens,
            "num_accepted_tokens_per_pos": list(self.num_accepted_tokens_per_pos),
        }


def predicted_spec_counters(cycle: TokenCycle, prompt: Sequence[int], max_tokens: int, k: int) -> SpecCounters:
    """The counters of one greedy request of `max_tokens` tokens with `k` MTP drafts per step."""
    if k < 1:
        raise ValueError(f"num_speculative_tokens must be >= 1, got {k}")
    target = expected_tokens(cycle, prompt, max_tokens + k + 1)

    def drafts(emitted: int) -> list[int]:
        out, t = [], target[emitted - 1]
        for _ in range(k):
            t = cycle.draft_next(t)
            out.append(t)
        return out

    return count_verified_drafts(max_tokens, k, lambda emitted, i: drafts(emitted)[i] == target[emitted + i])


def count_verified_drafts(max_tokens: int, k: int, accepted_at) -> SpecCounters:
    """The counters of one greedy request of `max_tokens` tokens verified `k` drafts a step, as vLLM's scheduler
    counts them: the prefill step emits the first token and proposes the first drafts; each later step verifies `k`
    drafts and emits the accepted ones plus one token; a request is verified again while it has fewer than
    `max_tokens` tokens. `accepted_at(emitted, i)`: whether draft `i` of the step that follows `emitted` tokens is
    accepted, the drafts before it having been."""
    counters = SpecCounters(num_accepted_tokens_per_pos=[0] * k)
    emitted = 1
    while emitted < max_tokens:
        accepted = 0
        while accepted < k and accepted_at(emitted, accepted):
            counters.num_accepted_tokens_per_pos[accepted] += 1
            accepted += 1
        counters.num_drafts += 1
        counters.num_draft_tokens += k
        counters.num_accepted_tokens += accepted
        emitted += accepted + 1
    return counters


def measured_spec_counters(metrics: dict[str, Any]) -> SpecCounters | None:
    """The counters from a run's `spec_metrics` (names as vLLM's Prometheus metrics), None when absent."""
    if not any(name.startswith("vllm:spec_decode_num_") for name in metrics):
        return None

    def count(suffix: str) -> int:
        return int(metrics.get(f"vllm:spec_decode_{suffix}", 0) or 0)

    per_pos = metrics.get("vllm:spec_decode_num_accepted_tokens_per_pos") or []
    return SpecCounters(
        num_drafts=count("num_drafts"),
        num_draft_tokens=count("num_draft_tokens"),
        num_accepted_tokens=count("num_accepted_tokens"),
        num_accepted_tokens_per_pos=[int(x) for x in per_pos],
    )


def first_difference(expected: Sequence[Sequence[int]], got: Sequence[Sequence[int]]) -> dict[str, int] | None:
    """The first (prompt, position) where two runs' token ids differ (or a length differs), None if identical."""
    for p, (a, b) in enumerate(zip(expected, got, strict=False)):
        for i, (x, y) in enumerate(zip(a, b, strict=False)):
            if x != y:
                return {"prompt": p, "position": i, "expected": x, "got": y}
        if len(a) != len(b):
            return {"prompt": p, "position": min(len(a), len(b)), "expected_len": len(a), "got_len": len(b)}
    if len(expected) != len(got):
        return {"prompts_expected": len(expected), "prompts_got": len(got)}
    return None


def _log_odds(top: Sequence[Sequence[float]]) -> dict[int, float]:
    """{token: logprob - top-1 logprob} for the runners-up of one position's top-n list [[token, logprob], ...]."""
    if not top:
        return {}
    best = max(lp for _t, lp in top)
    ranked = sorted(top, key=lambda x: -x[1])
    return {int(t): lp - best for t, lp in ranked[1:]}


def logprob_agreement(a: Sequence[Sequence[Any]], b: Sequence[Sequence[Any]]) -> dict[str, Any]:
    """Compare two runs' top-n log-probs position by position (only where both emitted the same top-1 token).

    Returns the largest and the median absolute difference of the runners-up's log-odds against the top-1 (tokens
    in both lists), the number of compared values, and, for scale, the spread (standard deviation) of those log-odds
    in run `a` across positions — the context-dependent signal the difference is measured against.
    """
    diffs: list[float] = []
    values: list[float] = []
    positions = 0
    for pa, pb in zip(a, b, strict=False):
        for ta, tb in zip(pa, pb, strict=False):
            if not ta or not tb:
                continue
            if max(ta, key=lambda x: x[1])[0] != max(tb, key=lambda x: x[1])[0]:
                continue
            oa, ob = _log_odds(ta), _log_odds(tb)
            positions += 1
            for tok in oa.keys() & ob.keys():
                diffs.append(abs(oa[tok] - ob[tok]))
            values.extend(oa.values())
    if not diffs:
        return {"compared_values": 0, "positions": positions}
    diffs.sort()
    mean = sum(values) / len(values)
    spread = (sum((x - mean) ** 2 for x in values) / len(values)) ** 0.5
    return {
        "positions": positions,
        "compared_values": len(diffs),
        "max_abs_diff": round(diffs[-1], 4),
        "median_abs_diff": round(diffs[len(diffs) // 2], 4),
        "log_odds_spread": round(spread, 4),
    }


def min_top1_margin(top: Sequence[Sequence[Any]]) -> float | None:
    """Smallest gap between the top-1 and top-2 log-probs over all positions of one run (None without log-probs)."""
    gaps = []
    for per_prompt in top:
        for pos in per_prompt:
            if len(pos) >= 2:
                lps = sorted((lp for _t, lp in pos), reverse=True)
                gaps.append(lps[0] - lps[1])
    return round(min(gaps), 4) if gaps else None


def judge(
    runs: dict[str, dict[str, Any]], cycle: TokenCycle, prompts: Sequence[Sequence[int]], baseline: str
) -> dict[str, dict[str, Any]]:
    """Verdict per successful run of the cycle model: tokens vs the prediction and vs `baseline`, spec counters vs
    the prediction, log-prob agreement with `baseline`."""
    verdicts: dict[str, dict[str, Any]] = {}
    base = runs.get(baseline, {})
    for label, run in runs.items():
        if not run.get("ok") or "token_ids" not in run:
            continue
        got = run["token_ids"]
        want = [expected_tokens(cycle, p, len(t)) for p, t in zip(prompts, got, strict=False)]
        v: dict[str, Any] = {"tokens": sum(len(t) for t in got)}
        v["first_difference_from_prediction"] = first_difference(want, got)
        v["as_predicted"] = v["first_difference_from_prediction"] is None and len(got) == len(prompts)
        if label != baseline and base.get("ok"):
            v["first_difference_from_baseline"] = first_difference(base["token_ids"], got)
            v["identical_to_baseline"] = v["first_difference_from_baseline"] is None
            if run.get("top_logprobs") and base.get("top_logprobs"):
                v["logprobs_vs_baseline"] = logprob_agreement(base["top_logprobs"], run["top_logprobs"])
        if run.get("top_logprobs"):
            v["min_top1_margin"] = min_top1_margin(run["top_logprobs"])
        bench = run.get("bench") or {}
        if bench.get("token_ids") and prompts:
            # the decode benchmark's timed request: the first prompt alone (benchmarks/mtp_decode.py)
            v["bench_tokens_as_predicted"] = bench["token_ids"] == expected_tokens(
                cycle, prompts[0], len(bench["token_ids"])
            )
        repeat = int(run.get("repeat") or 1)  # the prompts generated `repeat` times in one engine
        if repeat > 1:
            v["repeats_identical"] = all(run.get("repeats_equal") or [False])
        measured = measured_spec_counters(run.get("spec_metrics") or {})
        k = int(run.get("mtp") or 0)
        if k:
            predicted = SpecCounters(num_accepted_tokens_per_pos=[0] * k)
            for _ in range(repeat):
                for p, t in zip(prompts, got, strict=False):
                    predicted.add(predicted_spec_counters(cycle, p, len(t), k))
            v["spec_predicted"] = predicted.as_dict()
            v["spec_measured"] = measured.as_dict() if measured else None
            v["spec_as_predicted"] = measured is not None and measured.as_dict() == predicted.as_dict()
            if bench.get("token_ids") and prompts:
                want_bench = predicted_spec_counters(cycle, prompts[0], len(bench["token_ids"]), k)
                got_bench = bench.get("spec_counters") or {}
                v["bench_spec_as_predicted"] = (
                    int(got_bench.get("vllm:spec_decode_num_drafts", -1)) == want_bench.num_drafts
                    and int(got_bench.get("vllm:spec_decode_num_accepted_tokens", -1)) == want_bench.num_accepted_tokens
                )
        verdicts[label] = v
    return verdicts
