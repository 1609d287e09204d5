"""`vllm-compose pp-plan --link`: the link model (PCIe names, bandwidths from the spec's rates and line codes, bad
input named), the decode-step model's arithmetic on cases worked by hand (a free link and a free draft give exactly
1 + a for MTP 1; a draft that costs a tenth of the step breaks even at 0.1), the break-even acceptance rising as the
link slows, the verdict flipping between a fast and a slow link, the bytes a step reads counted by hand on a tiny
config, and the command end to end (exit codes, output, JSON, the golden text, the user guide's worked cases).

Golden file: tests/cases/pp-plan/expected-glm5-pp8-170hx.txt (`VC_UPDATE_GOLDEN=1` rewrites it).
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass
from pathlib import Path

import pytest

from vllm_compose.cli import main
from vllm_compose.errors import ExitCode
from vllm_compose.pp import card as cards
from vllm_compose.pp import link as links
from vllm_compose.pp import plan as pp_plan
from vllm_compose.pp import step
from vllm_compose.pp.link import Link, LinkError
from vllm_compose.pp.plan import PlanError
from vllm_compose.pp.step import StepError, Weights

ROOT = Path(__file__).resolve().parents[2]
CASES = ROOT / "tests" / "cases" / "pp-plan"
GLM5 = CASES / "glm5-config.json"
#: the user guide's plan: 8 x A100 80GB, GLM-5.2 int4 with an unquantized MTP layer
GUIDE = ["--pp", "8", "--gpu-memory", "79.2", "--mtp", "1", "--bits", "4", "--mtp-bits", "16",
         "--gpu-memory-utilization", "0.85"]  # fmt: skip
FREE = Link("free", math.inf, 0.0, "test: no cost")


def glm5():
    return pp_plan.read_config(GLM5)


@dataclass(frozen=True)
class FixedClock:
    """Every decoder layer costs `layer` ms and each draft step `draft` ms, whatever the rows; the head is free."""

    layer: float = 1.0
    draft: float = 0.0

    def layer_ms(self, layer: int, rows: int) -> float:
        return self.layer

    def head_ms(self, rows: int) -> float:
        return 0.0

    def draft_ms(self, step_: int, rows: int) -> float:
        return self.draft

    def describe(self) -> str:
        return "fixed (test)"


# --- the link -------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "generation,gbps",
    [
        (1, 2.5 * 8 / 10 / 8),
        (2, 5.0 * 8 / 10 / 8),
        (3, 8.0 * 128 / 130 / 8),
        (4, 16.0 * 128 / 130 / 8),
        (5, 4 * 128 / 130),
    ],
)
def test_a_lanes_rate_is_the_transfer_rate_after_the_line_code(generation, gbps):
    assert links.lane_gbps(generation) == pytest.approx(gbps)


def test_pcie_names_give_width_times_lane_at_the_payload_share():
    one = links.pcie("pcie1x4")
    assert one.name == "pcie1x4" and one.gbps == pytest.approx(1.0 * links.PAYLOAD_EFFICIENCY)  # 4 x 0.25 GB/s
    four = links.pcie(" PCIe4x16 ")
    assert four.name == "pcie4x16" and four.gbps == pytest.approx(31.5077 * 0.85, rel=1e-4)  # 16 x 1.969
    assert "8b/10b" in one.source and "128b/130b" in four.source and "assumed" in four.source
    assert one.latency_us == links.HANDOFF_LATENCY_US and links.pcie("pcie2x4", 40).latency_us == 40


def test_a_transfer_and_an_all_reduce_by_hand():
    link = Link("t", 2.0, 10.0, "test")
    # 10 us + 1e6 B / 2e9 B/s = 0.01 + 0.5 ms
    assert link.transfer_ms(1e6) == pytest.approx(0.51)
    # ring over 4: 2 x 3/4 of the bytes: 10 us + 1.5e6 / 2e9 s = 0.01 + 0.75 ms; one rank: nothing to reduce
    assert link.all_reduce_ms(1e6, 4) == pytest.approx(0.76) and link.all_reduce_ms(1e6, 1) == 0.0
    assert links.measured(0.8).gbps == 0.8 and links.measured(0.8, 50).with_latency(5).latency_us == 5


@pytest.mark.parametrize(
    "spec,needle",
    [
        ("pcie7x4", "generation 7 is not one of 1-5"),
        ("pcie0x16", "generation 0"),
        ("pcie3x3", "width x3 is not a PCIe link width"),
        ("pcie4x32", "width x32"),
        ("pci3x16", "is not a PCIe link name"),
        ("nvlink", "is not a PCIe link name"),
    ],
)
def test_a_bad_link_name_is_named(spec, needle):
    with pytest.raises(LinkError) as err:
        links.pcie(spec)
    text = str(err.value)
    assert repr(spec) in text and needle in text and "--link" in text and "pcie2x4" in text  # the hint's example


@pytest.mark.parametrize("gbps", [-1.0, 0, math.nan, math.inf, "3"])
def test_a_measured_bandwidth_must_be_a_positive_number(gbps):
    with pytest.raises(LinkError, match="--link-gbps is") as err:
        links.measured(gbps)
    assert repr(gbps) in str(err.value)


def test_a_negative_latency_is_named():
    with pytest.raises(LinkError, match=r"--link-latency-us is -5"):
        links.pcie("pcie4x16", -5)


def test_cards_are_found_by_name_and_an_unknown_one_lists_them():
    assert cards.card("cmp-170hx").link.name == "pcie1x16"
    assert cards.card("A100-PCIe-80GB").link.name == "pcie4x16"
    assert cards.card("A100-SXM4-80GB").link.gbps == pytest.approx(300 * 0.85)
    with pytest.raises(PlanError) as err:
        cards.card("H100")
    assert "'H100'" in str(err.value) and "CMP-170HX" in str(err.value)


# --- the step: arithmetic worked by hand ------------------------------------------------------------------------


def test_expected_tokens_is_the_geometric_sum():
    assert step.expected_tokens(0.7, 1) == pytest.approx(1.7)
    assert step.expected_tokens(0.5, 3) == pytest.approx(1 + 0.5 + 0.25 + 0.125)
    assert step.expected_tokens(0.0, 4) == 1.0 and step.expected_tokens(1.0, 4) == 5.0


@pytest.mark.parametrize("acceptance", [0.0, 0.3, 0.7, 1.0])
def test_a_free_link_and_a_free_draft_give_exactly_one_plus_a_for_mtp_1(acceptance):
    e = step.estimate(glm5(), [10] * 7 + [8], FixedClock(), FREE, k=1, acceptance=acceptance, draft_round_ms=0)
    assert e.plain.total_ms == e.mtp.total_ms == 78.0
    assert e.speedup == pytest.approx(1 + acceptance, rel=1e-12)
    assert e.tok_s_plain == pytest.approx(1000 / 78) and e.tok_s_mtp == pytest.approx((1 + acceptance) * 1000 / 78)


def test_a_draft_costing_a_tenth_of_the_step_breaks_even_at_a_tenth():
    # plain 78 ms; MTP 78 + 7.8 ms: 1 + a = 1.1 at break-even
    e = step.estimate(glm5(), [78], FixedClock(draft=7.8), FREE, k=1, acceptance=0.7, draft_round_ms=0)
    assert e.break_even == pytest.approx(0.1, abs=1e-12)
    # the round may cost what the gain buys: 1.7 x 78 - 85.8 = 46.8 ms
    assert e.max_round_ms == pytest.approx(0.7 * 78 - 7.8)
    assert e.verdict() == f"MTP 1 pays on this link at acceptance 0.70: {1.7 * 78 / 85.8:.2f}x"
    # at the break-even the speed-up is 1
    at = step.estimate(glm5(), [78], FixedClock(draft=7.8), FREE, k=1, acceptance=e.break_even, draft_round_ms=0)
    assert at.speedup == pytest.approx(1.0, abs=1e-12)


def test_break_even_bounds():
    assert step.break_even_acceptance(0.9, 1) == 0.0  # MTP's step is cheaper: pays with every draft rejected
    assert step.break_even_acceptance(2.5, 1) is None  # costs more than two plain steps: two tokens cannot pay it
    assert step.break_even_acceptance(1.875, 3) == pytest.approx(0.5)
    assert step.break_even_acceptance(4.0, 3) == pytest.approx(1.0)


def test_the_hand_off_carries_hidden_and_residual_and_the_top_k_where_the_next_stage_reuses_it():
    shape = glm5()
    # vLLM's default split: every later stage starts on a shared layer
    default = step.boundaries(shape, pp_plan.default_partition(78, 8))
    assert [b.first_layer for b in default] == [9, 19, 29, 39, 49, 59, 69] and all(b.relays_topk for b in default)
    assert {b.bytes_per_row for b in default} == {2 * 6144 * 2 + 2048 * 4}  # 24 KiB + 8 KiB
    # the plan's 12,10,...: layers 22, 42 and 62 compute their own top-k
    planned = step.boundaries(shape, [12, 10, 10, 10, 10, 10, 10, 6])
    assert [b.relays_topk for b in planned] == [True, False, True, False, True, False, True]
    assert planned[1].bytes_per_row == 24 * 1024
    with pytest.raises(StepError, match="does not split 78 layers"):
        step.boundaries(shape, [40, 40])


def test_rows_are_batch_times_one_plus_k_across_every_boundary_and_tp_splits_them():
    link = Link("t", 1.0, 20.0, "test")
    e = step.estimate(glm5(), [39, 39], FixedClock(), link, batch=4, k=3, acceptance=0.5, tp=2)
    assert (e.plain.rows, e.mtp.rows) == (4, 16)
    # layer 39 reuses the top-k: 32 KiB a row, half of it from each of the two ranks
    assert e.plain.handoff_bytes == (4 * 32768 / 2,) and e.mtp.handoff_bytes == (16 * 32768 / 2,)
    assert e.mtp.handoff_ms[0] == pytest.approx(0.02 + 16 * 32768 / 2 / 1e9 * 1e3)
    # three draft steps; the default fixed cost: one transfer's latency per earlier stage
    assert len(e.mtp.draft_ms) == 3 and e.mtp.round_ms == pytest.approx(0.02) and not e.round_measured


def test_break_even_rises_as_the_link_slows():
    evens = []
    for gbps in (100.0, 10.0, 1.0, 0.3, 0.1):
        link = Link("t", gbps, 15.0, "test")
        e = step.estimate(glm5(), [10] * 7 + [8], FixedClock(draft=2.0), link, batch=8, k=1, acceptance=0.7)
        evens.append(e.break_even)
    assert all(x is not None for x in evens) and evens == sorted(evens) and evens[-1] > evens[0] + 0.1


def test_the_verdict_flips_between_a_fast_and_a_slow_link():
    def verdict(link):
        return step.estimate(glm5(), [10] * 7 + [8], FixedClock(draft=2.0), link, batch=8, acceptance=0.7).verdict()

    # 78 ms of layers, 2 ms of draft; batch 8 sends 8 rows (16 under MTP) of 24 or 32 KiB over each of 7
    # boundaries: PCIe 4.0 x16 adds under 1 ms to either step (1.7 x 78 > 80); 5 MB/s adds 330 ms to the plain step
    # and twice that to MTP's, which 1.7 tokens no longer pay for
    assert verdict(links.pcie("pcie4x16")).startswith("MTP 1 pays on this link at acceptance 0.70: 1.6")
    assert verdict(links.measured(0.005)).startswith("MTP 1 does not pay on this link at acceptance 0.70: 0.9")


@pytest.mark.parametrize(
    "kw,option",
    [
        ({"acceptance": 1.2}, "--mtp-acceptance"),
        ({"acceptance": -0.1}, "--mtp-acceptance"),
        ({"acceptance": math.nan}, "--mtp-acceptance"),
        ({"batch": 0}, "--batch"),
        ({"k": 0}, "--mtp"),
        ({"draft_round_ms": -1.0}, "--draft-round-ms"),
    ],
)
def test_values_out_of_range_are_named(kw, option):
    with pytest.raises(StepError) as err:
        step.estimate(glm5(), [78], FixedClock(), FREE, **kw)
    assert str(err.value).startswith(f"key {option!r}: {option} is {next(iter(kw.values()))!r}")


# --- what a step reads --------------------------------------------------------------------------------------------


def _tiny():
    return pp_plan.shape_from_config(
        {
            "num_hidden_layers": 2,
            "hidden_size": 64,
            "vocab_size": 128,
            "num_attention_heads": 2,
            "q_lora_rank": 32,
            "kv_lora_rank": 16,
            "qk_nope_head_dim": 8,
            "qk_rope_head_dim": 8,
            "v_head_dim": 8,
            "intermediate_size": 32,
            "moe_intermediate_size": 16,
            "n_routed_experts": 4,
            "num_experts_per_tok": 2,
            "n_shared_experts": 1,
            "first_k_dense_replace": 1,
            "num_nextn_predict_layers": 1,
            "max_position_embeddings": 64,
        }
    )


BF16_ALL = Weights(16, 16, 16, 128)


def test_experts_touched():
    assert step.experts_touched(256, 8, 1) == pytest.approx(8.0)
    assert step.experts_touched(4, 2, 2) == pytest.approx(3.0)  # 4 x (1 - (1/2)^2)
    assert step.experts_touched(256, 8, 2) == pytest.approx(15.75)


def test_weight_bytes_read_by_hand_on_a_tiny_config():
    shape = _tiny()
    # bf16 attention: fused_qkv_a (32+16+8)x64 x2 = 7168, q_a_norm 64, kv_a_norm 32 (kept whole under TP: 7264);
    # q_b (2x16)x32 x2 = 2048, kv_b 2x16x16 x2 = 1024, o_proj 64x16 x2 = 2048 (split: 5120); the two norms 256
    replicated, split, norms = 7_264, 5_120, 256
    dense = 2 * 32 * 64 * 2 + 64 * 32 * 2  # gate_up + down = 12,288
    assert step.layer_read_bytes(shape, 0, 1, BF16_ALL) == replicated + split + norms + dense
    assert step.layer_read_bytes(shape, 0, 1, BF16_ALL, tp=2) == replicated + norms + (split + dense) / 2
    router, shared = 4 * 64 * 2, 2 * 16 * 64 * 2 + 64 * 16 * 2  # 512, 6,144
    expert = 6_144  # same width as the one shared expert
    # one row touches 2 of the 4 experts; two rows 3 on average
    base = replicated + split + norms + router + shared
    assert step.layer_read_bytes(shape, 1, 1, BF16_ALL) == base + 2 * expert
    assert step.layer_read_bytes(shape, 1, 2, BF16_ALL) == base + 3 * expert
    # the draft: the MTP layer (layer 2, MoE) + eh_proj 64x128 x2 + enorm, hnorm, head norm 3x64 x2 + LM head 128x64
    # x2 and the final norm 64 x2
    extra = 16_384 + 384 + 16_384 + 128
    assert step.draft_read_bytes(shape, BF16_ALL, 1, 0) == base + 2 * expert + extra


def test_a_measured_layer_time_reads_the_mean_layer_in_that_time():
    shape = glm5()
    w = Weights(4, 4, 16, 128)
    clock = step.measured_clock(shape, w, 0.45, 1)
    assert sum(clock.layer_ms(x, 1) for x in range(78)) == pytest.approx(78 * 0.45)
    with pytest.raises(StepError, match="--layer-ms is 0"):
        step.measured_clock(shape, w, 0, 1)


def test_with_a_card_the_measured_time_splits_into_its_reads_and_a_fixed_rest():
    shape, w, a100 = glm5(), Weights(4, 4, 16, 128), cards.card("A100-PCIe-80GB")
    clock = step.measured_clock(shape, w, 0.33, 1, a100)
    assert sum(clock.layer_ms(x, 1) for x in range(78)) == pytest.approx(78 * 0.33)
    # the rest does not grow with the rows: a second row adds only its experts' reads at the card's peak
    extra = (step.layer_read_bytes(shape, 40, 2, w) - step.layer_read_bytes(shape, 40, 1, w)) / 1935e9 * 1e3
    assert clock.layer_ms(40, 2) - clock.layer_ms(40, 1) == pytest.approx(extra)
    assert clock.fixed_ms == pytest.approx(0.33 - card_reads(shape, w, a100)) and clock.fixed_ms > 0
    with pytest.raises(StepError, match=r"--layer-ms 0.05 is less than reading the mean layer's weights"):
        step.measured_clock(shape, w, 0.05, 1, a100)


def card_reads(shape, w, card):
    return sum(step.layer_read_bytes(shape, x, 1, w) for x in range(78)) / 78 / (card.hbm_gbs * 1e9) * 1e3


def test_the_verify_step_reads_more_experts_than_the_plain_one():
    shape = glm5()
    clock = step.card_clock(shape, Weights(4, 4, 16, 128), cards.card("A100-PCIe-80GB"))
    one, two = clock.layer_ms(40, 1), clock.layer_ms(40, 2)
    assert 1.4 < two / one < 1.6  # 8 experts -> 15.75, in a layer whose experts are most of its bytes


# --- the command --------------------------------------------------------------------------------------------------


def run_cli(*argv: str) -> int:
    return main(["pp-plan", str(GLM5), *GUIDE, *argv])


def test_the_170hx_case_prints_the_link_section_and_a_verdict(capsys):
    assert run_cli("--card", "CMP-170HX") == ExitCode.OK
    out = capsys.readouterr().out
    assert "VLLM_PP_LAYER_PARTITION=12,10,10,10,10,10,10,6" in out
    assert "MTP 1 on this link: pcie1x16 (PCIe gen 1 x16: 2.5 GT/s x 16 lanes, 8b/10b = 4 GB/s coded" in out
    assert "1,493 GB/s (CMP-170HX's peak HBM bandwidth: a lower bound on the time)" in out
    assert out.rstrip().splitlines()[-1].startswith("MTP 1 pays on this link at acceptance 0.70: 1.0")


def test_the_text_matches_the_golden_file(capsys):
    assert run_cli("--card", "CMP-170HX") == 0
    got = capsys.readouterr().out.replace(str(GLM5), "glm5-config.json")
    golden = CASES / "expected-glm5-pp8-170hx.txt"
    if os.environ.get("VC_UPDATE_GOLDEN") == "1":
        golden.write_text(got)
    assert got == golden.read_text()


def test_a_measured_link_and_layer_time_replace_the_cards(capsys):
    assert run_cli("--link-gbps", "0.05", "--layer-ms", "0.45", "--batch", "8", "--json", "-") == 0
    doc = json.loads(capsys.readouterr().out)["mtp_on_link"]
    assert doc["link"]["gbps"] == 0.05 and "measured (--layer-ms)" in doc["compute"] and doc["batch"] == 8
    assert doc["verdict"].startswith("MTP 1 ") and doc["tok_s"]["plain"] > 0
    assert sum(doc["plain"]["stage_ms"]) > 78 * 0.45  # the layers, and the LM head on the last stage


def test_the_json_file_carries_the_estimate_beside_the_plan(tmp_path, capsys):
    out = tmp_path / "plan.json"
    assert run_cli("--link", "pcie4x16", "--card", "A100-PCIe-80GB", "--mtp-acceptance", "0.9", "--json", str(out)) == 0
    doc = json.loads(out.read_text())
    assert doc["VLLM_PP_LAYER_PARTITION"] == "12,10,10,10,10,10,10,6"
    assert doc["mtp_on_link"]["acceptance"] == 0.9 and doc["mtp_on_link"]["link"]["name"] == "pcie4x16"
    assert doc["mtp_on_link"]["verdict"] in capsys.readouterr().out


@pytest.mark.parametrize(
    "argv,code,needle",
    [
        (["--link", "pcie7x4", "--layer-ms", "0.4"], 3, "--link 'pcie7x4': PCIe generation 7"),
        (["--link", "pcie3x3", "--layer-ms", "0.4"], 3, "width x3"),
        (["--link-gbps", "-2", "--layer-ms", "0.4"], 3, "--link-gbps is -2.0"),
        (["--link", "pcie4x16"], 3, "needs a time per layer"),
        (["--card", "H100"], 3, "--card 'H100'"),
        (["--card", "CMP-170HX", "--mtp-acceptance", "1.5"], 3, "--mtp-acceptance is 1.5"),
        (["--card", "CMP-170HX", "--layer-ms", "-1"], 3, "--layer-ms is -1.0"),
        (["--card", "CMP-170HX", "--batch", "0"], 3, "--batch is 0"),
        (["--layer-ms", "0.4"], 4, "--layer-ms needs a link"),
        (["--link", "pcie4x16", "--link-gbps", "3"], 4, "not allowed with argument"),
    ],
)
def test_bad_link_options_exit_non_zero_and_name_the_value(capsys, argv, code, needle):
    assert run_cli(*argv) == code
    err = capsys.readouterr().err
    assert needle in err and "Traceback" not in err


def test_the_link_estimate_needs_mtp(capsys):
    argv = [str(GLM5), "--pp", "8", "--gpu-memory", "79.2", "--bits", "4", "--link", "pcie4x16", "--layer-ms", "0.4"]
    assert main(["pp-plan", *argv]) == 3
    err = capsys.readouterr().err
    assert "--mtp is 0" in err and "--mtp 1" in err


def test_the_user_guides_worked_cases_are_what_pp_plan_prints(capsys):
    guide = (ROOT / "docs" / "user-guide.md").read_text()
    cases = (
        ["--card", "CMP-170HX", "--link", "pcie2x4", "--layer-ms", "0.45"],
        ["--card", "CMP-170HX", "--link", "pcie2x4", "--layer-ms", "0.45", "--draft-round-ms", "25"],
        ["--card", "A100-PCIe-80GB", "--link", "pcie4x16", "--layer-ms", "0.33"],
        ["--card", "CMP-170HX"],
    )
    for argv in cases:
        assert run_cli(*argv) == 0
        out = capsys.readouterr().out
        assert " ".join(argv) in guide
        for line in out.rstrip().splitlines()[-2:]:  # the speed-up, break-even and budget line; the verdict
            assert line in guide, (argv, line)
    # the first case's whole link section, as the guide shows it (a code block: four spaces in)
    assert run_cli(*cases[0]) == 0
    out = capsys.readouterr().out
    section = out[out.index("MTP 1 on this link:") :].rstrip("\n").split("\n")
    assert "\n".join(f"    {line}".rstrip() for line in section) in guide
