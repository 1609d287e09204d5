"""Predictions for the cycle model's validation runs: greedy tokens, spec-decode counters, verdicts per run."""

from __future__ import annotations

import pytest

from vllm_compose.proof.expected import (
    SpecCounters,
    expected_tokens,
    first_difference,
    judge,
    logprob_agreement,
    min_top1_margin,
    predicted_spec_counters,
)
from vllm_compose.proof.tinyglm import TokenCycle

#: 3 -> 4 -> 5 -> 6 -> 7 -> 3; specials lead to 3
NEXT = (3, 3, 3, 4, 5, 6, 7, 3)


def cycle(paths: str) -> TokenCycle:
    """A hand-made cycle; `paths` gives tokens 3..7 their draft path by initial (e, h, w)."""
    names = {"e": "embedding", "h": "hidden", "w": "wrong"}
    return TokenCycle(NEXT, ("embedding",) * 3 + tuple(names[c] for c in paths))


def test_expected_tokens_follow_the_cycle_from_the_prompts_last_token():
    assert expected_tokens(cycle("eeeee"), [7, 5], 6) == [6, 7, 3, 4, 5, 6]


def test_drafts_right_for_every_token_accept_all_but_the_overshoot():
    # 10 tokens, 2 drafts a step: prefill emits 1; steps emit 3, 3, 3 -> 10. Every draft accepted.
    c = predicted_spec_counters(cycle("ehehe"), [3], 10, 2)
    assert c.as_dict() == {
        "num_drafts": 3,
        "num_draft_tokens": 6,
        "num_accepted_tokens": 6,
        "num_accepted_tokens_per_pos": [3, 3],
    }


def test_drafts_wrong_for_every_token_accept_nothing_one_token_a_step():
    c = predicted_spec_counters(cycle("wwwww"), [3], 10, 1)
    assert c.as_dict() == {
        "num_drafts": 9,
        "num_draft_tokens": 9,
        "num_accepted_tokens": 0,
        "num_accepted_tokens_per_pos": [0],
    }


def test_mixed_paths_counted_by_hand():
    # prompt ends at 3; target 4 5 6 7 3 4 5 6. Drafts after t are right unless t is 'wrong' (only 5 here).
    # prefill emits 4. step 1 from 4: drafts 5 (right), then after 5: wrong -> accepted 1, emits 5, 6 (3 total).
    # step 2 from 6: drafts 7, 3 (both right) -> emits 7, 3, 4 (6 total). step 3 from 4: 5 right, 5 wrong ->
    # accepted 1, emits 5, 6 (8 total): done.
    c = predicted_spec_counters(cycle("eewee"), [3], 8, 2)
    assert c.as_dict() == {
        "num_drafts": 3,
        "num_draft_tokens": 6,
        "num_accepted_tokens": 4,
        "num_accepted_tokens_per_pos": [3, 1],
    }


def test_counters_add_across_requests_and_refuse_zero_drafts():
    total = SpecCounters(num_accepted_tokens_per_pos=[0])
    total.add(SpecCounters(2, 4, 3, [2, 1]))
    total.add(SpecCounters(1, 2, 1, [1, 0]))
    assert total.as_dict() == {
        "num_drafts": 3,
        "num_draft_tokens": 6,
        "num_accepted_tokens": 4,
        "num_accepted_tokens_per_pos": [3, 1],
    }
    with pytest.raises(ValueError, match="num_speculative_tokens"):
        predicted_spec_counters(cycle("eeeee"), [3], 4, 0)


def test_first_difference_names_prompt_and_position():
    assert first_difference([[1, 2, 3]], [[1, 2, 3]]) is None
    assert first_difference([[1, 2, 3]], [[1, 9, 3]]) == {"prompt": 0, "position": 1, "expected": 2, "got": 9}
    assert first_difference([[1], [1, 2]], [[1], [1]]) == {"prompt": 1, "position": 1, "expected_len": 2, "got_len": 1}


def test_logprob_agreement_compares_runner_up_log_odds_where_top1_agrees():
    a = [[[[5, -0.01], [6, -5.0], [7, -6.0]], [[6, -0.02], [3, -4.0]]]]
    b = [[[[5, -0.02], [6, -5.25], [7, -6.0]], [[4, -0.02], [3, -4.0]]]]  # second position: other top-1, skipped
    got = logprob_agreement(a, b)
    assert got["positions"] == 1 and got["compared_values"] == 2
    assert got["max_abs_diff"] == pytest.approx(0.24) and got["median_abs_diff"] == pytest.approx(0.24)
    assert min_top1_margin(a) == pytest.approx(3.98)


def _run(tokens, mtp=0, metrics=None, ok=True, top=None):
    r = {"ok": ok, "token_ids": tokens, "mtp": mtp, "spec_metrics": metrics or {}}
    if top is not None:
        r["top_logprobs"] = top
    return r


def test_judge_flags_a_token_off_the_cycle_and_counters_off_the_prediction():
    c = cycle("eewee")
    prompts = [[3], [6, 7]]
    good = [expected_tokens(c, p, 8) for p in prompts]
    bad = [good[0], good[1][:5] + [9] + good[1][6:]]
    predicted = SpecCounters(num_accepted_tokens_per_pos=[0, 0])
    for p in prompts:
        predicted.add(predicted_spec_counters(c, p, 8, 2))
    metrics = {f"vllm:spec_decode_{k}": v for k, v in predicted.as_dict().items()}
    off = {**metrics, "vllm:spec_decode_num_accepted_tokens": metrics["vllm:spec_decode_num_accepted_tokens"] - 1}
    bench_tokens = expected_tokens(c, prompts[0], 6)
    bench_counters = predicted_spec_counters(c, prompts[0], 6, 2)
    bench = {
        "token_ids": bench_tokens,
        "spec_counters": {
            "vllm:spec_decode_num_drafts": float(bench_counters.num_drafts),
            "vllm:spec_decode_num_accepted_tokens": float(bench_counters.num_accepted_tokens),
        },
    }
    runs = {
        "pp1": _run(good),
        "pp2": _run(good),
        "pp2_mtp2": _run(good, 2, metrics),
        "pp2_mtp2_off": _run(good, 2, off),
        "broken": _run(bad),
        "failed": _run(None, ok=False),
    }
    runs["pp2_mtp2"]["bench"] = bench
    runs["pp2_mtp2_off"]["bench"] = {**bench, "token_ids": bench_tokens[:-1] + [9]}
    v = judge(runs, c, prompts, "pp1")
    assert v["pp2_mtp2"]["bench_tokens_as_predicted"] and v["pp2_mtp2"]["bench_spec_as_predicted"]
    assert not v["pp2_mtp2_off"]["bench_tokens_as_predicted"]
    assert v["pp1"]["as_predicted"] and "identical_to_baseline" not in v["pp1"]
    assert v["pp2"]["as_predicted"] and v["pp2"]["identical_to_baseline"]
    assert v["pp2_mtp2"]["spec_as_predicted"] and v["pp2_mtp2"]["identical_to_baseline"]
    assert not v["pp2_mtp2_off"]["spec_as_predicted"]
    assert not v["broken"]["as_predicted"] and not v["broken"]["identical_to_baseline"]
    assert v["broken"]["first_difference_from_prediction"] == {"prompt": 1, "position": 5, "expected": 3, "got": 9}
    assert "failed" not in v


def test_judge_scales_the_prediction_by_the_repeats_of_one_engine():
    c = cycle("eewee")
    prompts = [[3], [6, 7]]
    good = [expected_tokens(c, p, 8) for p in prompts]
    once = SpecCounters(num_accepted_tokens_per_pos=[0, 0])
    for p in prompts:
        once.add(predicted_spec_counters(c, p, 8, 2))
    four = SpecCounters(num_accepted_tokens_per_pos=[0, 0])
    for _ in range(4):
        four.add(once)
    as_metrics = lambda s: {f"vllm:spec_decode_{k}": v for k, v in s.as_dict().items()}  # noqa: E731
    runs = {
        "pp1": _run(good),
        "x4": {**_run(good, 2, as_metrics(four)), "repeat": 4, "repeats_equal": [True, True, True]},
        "x4_counted_once": {**_run(good, 2, as_metrics(once)), "repeat": 4, "repeats_equal": [True, True, True]},
        "x4_differs": {**_run(good, 2, as_metrics(four)), "repeat": 4, "repeats_equal": [True, False, True]},
    }
    v = judge(runs, c, prompts, "pp1")
    assert v["x4"]["spec_as_predicted"] and v["x4"]["repeats_identical"]
    assert v["x4"]["spec_predicted"]["num_drafts"] == 4 * once.num_drafts
    assert not v["x4_counted_once"]["spec_as_predicted"]
    assert not v["x4_differs"]["repeats_identical"]
    assert "repeats_identical" not in v["pp1"]
