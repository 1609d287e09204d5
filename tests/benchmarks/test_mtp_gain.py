"""benchmarks/mtp_gain.py's arithmetic on rows made by hand (every expected figure worked out in the comments), its
refusals, and the recall model's designed draft counters (`predict_drafts`) that the rows are checked against.

The rows have the fields `recall_e2e.py run` writes (`timing.all` is `step_timing.summarize`'s output); their
numbers are made up to be computable by hand, not recorded from a GPU."""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

from mtp_gain import TOLERANCE, ExplainError, explain, explain_pair, render  # noqa: E402

from vllm_compose.proof.recall_model import (  # noqa: E402
    RecallModelError,
    RecallPrompt,
    glm5_spec,
    make_prompts,
    predict_drafts,
    tiny_spec,
    with_draft_acceptance,
)

N = 128


def _row(mtp, period_ms, tokens_per_step, window_steps, offset_s=0.0, gpu=None, counters=None, designed=None):
    """A `run` row whose decode window is `window_steps` steps of `period_ms`; its headline t(N) - t(1) is the window
    less `offset_s` (a one-off cost that landed in t(1))."""
    window_s = window_steps * period_ms / 1e3
    difference = window_s - offset_s
    steps = {"period_ms": period_ms, "tokens_per_step": tokens_per_step, "window_steps": window_steps,
             "window_s": window_s, "gpu_ms": gpu or {}, "gpu_idle_ms": None, "straggler": 1.0}  # fmt: skip
    return {
        "path": "offline", "mode": "graphs", "batch": 8, "context": 8192, "tokens": N, "mtp": mtp,
        "per_request_tok_s": round((N - 1) / difference, 2), "as_predicted": True,
        "timing": {"t_one_s": 1.0, "t_all_s": 1.0 + difference, "all": steps},
        "spec_metrics": counters or {}, "designed": designed,
    }  # fmt: skip


def _counters(drafts, accepted):
    return {"vllm:spec_decode_num_drafts": drafts, "vllm:spec_decode_num_accepted_tokens": accepted}


#: MTP 0: 127 steps of 20 ms. MTP 1: 1.8 tokens a step, a 22 ms step (verify 16 + sample 2 + draft 3 + idle 1),
#: 72 steps for the request that finished last (the mean request needed 127 / 1.8 = 70.6)
MTP0 = _row(0, 20.0, 1.0, 127, gpu={"target": 18.0, "sample": 1.5})
MTP1 = _row(1, 22.0, 1.8, 72, gpu={"target": 16.0, "sample": 2.0, "draft": 3.0},
            counters=_counters(700, 560), designed={"accepted_per_step": 0.8})  # fmt: skip


def test_a_headline_that_is_its_decode_steps_is_explained():
    g = explain_pair(MTP0, MTP1)
    # steady: 1.8 * 20 / 22 = 1.6364; predicted: 127 * 20 / (72 * 22) = 2540 / 1584 = 1.6035
    assert g.steady == 1.6364 and g.predicted == 1.6035
    assert g.straggler == round(1.6035 / 1.6364, 4)
    # the headline is the window: 127 / 1.584 s = 80.18 tok/s against 127 / 2.54 s = 50.0
    assert g.measured == round(80.18 / 50.0, 4) and g.window == 1.6035
    assert abs(g.gap) < 1e-3 and g.explained
    assert g.predicted_rate == 80.18 and g.measured_rate == 80.18
    # per token: MTP 0 20 ms; MTP 1 22 / 1.8 = 12.22 = (16 + 2 + 3) / 1.8 + idle; rejection 22 / 1.8 - 22 / 2 = 1.22
    p = g.per_token_ms
    assert p["mtp0_step"] == 20.0 and p["mtpk_step"] == 12.2222
    assert (p["mtpk_verify"], p["mtpk_sample"], p["mtpk_draft"]) == (8.8889, 1.1111, 1.6667)
    assert p["mtpk_rejection"] == 1.2222
    # 0.8 accepted a step from the steps, the counters (560 / 700) and the design
    assert g.acceptance == {"steps_accepted_per_step": 0.8, "counters_accepted_per_step": 0.8,
                            "designed_accepted_per_step": 0.8}  # fmt: skip
    assert g.acceptance_agrees
    assert g.window_offset_s == {"mtp0": 0.0, "mtpk": 0.0, "mtp0_cold": None, "mtpk_cold": None}


def test_a_one_off_cost_in_t1_inflates_the_ratio_and_is_shown_as_the_offset():
    """0.4 s that land in t(1) of both engines: 127 / 2.14 = 59.35 and 127 / 1.184 = 107.26 tok/s, a ratio of
    1.807 where the steps give 1.6035: the gap is +12.7%, all of it in the offset; each engine's t(N) - t(1) is
    0.4 s short of its decode window."""
    g = explain_pair(_row(0, 20.0, 1.0, 127, offset_s=0.4), _row(1, 22.0, 1.8, 72, offset_s=0.4))
    assert g.measured == round(107.26 / 59.35, 4)
    assert g.predicted == 1.6035 and g.tail == 1.0
    assert g.offset == round(g.measured / 1.6035, 4)
    assert g.gap == pytest.approx(g.measured / 1.6035 - 1, abs=1e-4) and g.gap > 0.12
    assert not g.explained
    assert (g.window_offset_s["mtp0"], g.window_offset_s["mtpk"]) == (-0.4, -0.4)


def test_the_acceptance_must_agree_with_the_counters_and_the_design():
    # the design says 0.7 accepted a step: 1.8 / 1.7 - 1 = 5.9% > 5%
    g = explain_pair(MTP0, _row(1, 22.0, 1.8, 72, counters=_counters(700, 560), designed={"accepted_per_step": 0.7}))
    assert not g.acceptance_agrees and TOLERANCE == 0.05


def test_explain_pairs_rows_by_configuration_and_renders_them():
    other0 = {**MTP0, "batch": 1}
    other1 = {**MTP1, "batch": 1}
    gains = explain([MTP0, other0], [MTP1, other1])
    assert [g.key["batch"] for g in gains] == [8, 1]
    text = render(gains)
    row = text.splitlines()[2]
    assert row.startswith("| graphs | 8 | 1 | 1.604 (-) | 1.603 | 1.636 |")
    assert "| 12.22 = 8.89 + 1.11 + 1.67 + - | 1.22 | 0.800, 0.800, 0.800 | +0.000, +0.000 |" in row
    assert "- graphs, batch 8, MTP 1: explained (gap +0.0%" in text


@pytest.mark.parametrize(
    "mtp0, mtpk, message",
    [
        ([MTP0], [], "no MTP k row"),
        ([MTP1], [MTP1], "an MTP 1 row among the MTP 0 rows"),
        ([MTP0, MTP0], [MTP1], "two MTP 0 rows"),
        ([MTP0], [{**MTP1, "context": 4096}], "no MTP 0 row for"),
        ([MTP0], [MTP0], "an MTP 0 row and an MTP k >= 1 row"),
        ([MTP0], [{**MTP1, "timing": None}], "has no step records"),
        ([MTP0], [{**MTP1, "as_predicted": False}], "a fast wrong run is not a result"),
        ([MTP0], [_row(1, 22.0, 2.5, 72)], "2.5 tokens per step is outside \\[1, 2\\]"),
        ([{**MTP0, "timing": {**MTP0["timing"], "all": {**MTP0["timing"]["all"], "period_ms": None}}}], [MTP1],
         "give no period_ms"),
    ],
)  # fmt: skip
def test_rows_that_cannot_be_explained_are_refused(mtp0, mtpk, message):
    with pytest.raises(ExplainError, match=message):
        explain(mtp0, mtpk)


def test_a_row_without_steps_is_refused_with_the_command_that_makes_one():
    with pytest.raises(ExplainError) as err:
        explain([MTP0], [{**MTP1, "timing": None}])
    assert "--no-steps" in err.value.hint


# --- the design's draft counters --------------------------------------------------------------------------------


def _cycle_prompt(spec):
    """A prompt whose cycle is a_0 -> a_1 -> ... -> a_11 -> a_0 (the tokens do not matter to the counters)."""
    return RecallPrompt(tokens=(0,), cycle=tuple(range(spec.chain)), planted_at=(), edges=())


@pytest.mark.parametrize(
    "wrong, drafts, accepted",
    [
        # a_3 wrong: the tokens are a_1, a_2, ...; drafts go to a_2, a_4, a_6, ..., all accepted: a_3 is always the
        # bonus token of the step that accepted a_2, never drafted. 8 steps to 16 tokens, acceptance 1.0
        ((3,), 8, 8),
        # a_2 wrong: the first draft (a_2) is rejected, then a_3, a_5, ..., a_11, a_1, a_3 are drafted and accepted:
        # 8 steps, 7 accepted (0.875). Both designs are 11/12 = 0.917 right per chain position.
        ((2,), 8, 7),
    ],
)
def test_the_drafts_counted_are_not_the_chain_positions(wrong, drafts, accepted):
    spec = replace(tiny_spec(), mtp_wrong=wrong)
    c = predict_drafts(spec, _cycle_prompt(spec), 16, 1)
    assert (c.num_drafts, c.num_accepted_tokens, c.num_accepted_tokens_per_pos) == (drafts, accepted, [accepted])


def test_later_drafts_are_rejected_when_the_mtp_layer_reuses_its_first_top_k():
    spec = tiny_spec()  # GLM-5's IndexCache: index_share_for_mtp_iteration
    c = predict_drafts(spec, _cycle_prompt(spec), 16, 2)
    # every first draft right, every second wrong: 2 tokens a step, 8 steps to 16 tokens
    assert (c.num_drafts, c.num_draft_tokens, c.num_accepted_tokens_per_pos) == (8, 16, [8, 0])


def test_the_benchmark_prompts_give_the_acceptance_the_gpu_measured():
    """The end-to-end run at batch 8, 8k context, 128 tokens on the model written with `--acceptance 0.8` (5 of 24
    chain tokens drafted wrong: 0.79 right per position) measured 0.83 of first drafts accepted. The design gives
    0.828 for those prompts, and 74 decode steps for the slowest request (69-70 for the others)."""
    spec = with_draft_acceptance(glm5_spec(), 0.8)
    assert 1 - len(spec.mtp_wrong) / spec.chain == pytest.approx(0.7917, abs=1e-4)
    counters = [predict_drafts(spec, p, N, 1) for p in make_prompts(spec, [8192 + 64 * i for i in range(8)])]
    accepted = sum(c.num_accepted_tokens for c in counters)
    drafts = sum(c.num_drafts for c in counters)
    assert round(accepted / drafts, 3) == 0.828
    assert [c.num_drafts for c in counters] == [69, 69, 69, 70, 69, 69, 74, 69]


def test_a_draft_count_of_zero_is_refused():
    with pytest.raises(RecallModelError, match="num_speculative_tokens must be >= 1"):
        predict_drafts(tiny_spec(), _cycle_prompt(tiny_spec()), 16, 0)
