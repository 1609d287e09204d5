"""benchmarks/projection.py without a GPU: the step arithmetic on hand-made inputs worked out by hand here, the
GLM-5.x byte counts on a small config counted by hand, and the refusals (missing or unavailable rows, an unknown
card, a file that is not a kernel result) with nothing written."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

import projection  # noqa: E402
from projection import Card, ProjectionError, Scenario, StepParts  # noqa: E402

from vllm_compose.pp import plan as pp_plan  # noqa: E402

SM80 = ROOT / "lab/results/2026-12-02/dsa_kernels_sm80.json"


def test_one_step_on_a_made_up_card(monkeypatch):
    monkeypatch.setattr(projection, "HANDOFF_LATENCY_US", 10.0)
    card = Card("test", hbm_gbs=1000.0, link_gbs=1.0, source="-", uncertain="")
    parts = StepParts(weight_bytes=2e9, kernel_ms_h200=3.0, handoff_bytes=1_000_000, handoffs=7, tokens=1)
    got = projection.project(parts, card, h200_peak_gbs=4000.0)
    # kernels 3 ms x 4000/1000 = 12; weights 2e9 B / 1e12 B/s = 2 ms; hand-offs 7 x 10 us + 1e6 B / 1e9 B/s = 1.07 ms
    assert got == {
        "kernels_ms": 12.0,
        "kernels_ms_unscaled": 3.0,
        "weights_ms": 2.0,
        "handoff_ms": 1.07,
        "step_ms": 15.07,
        "step_ms_unscaled": 6.07,
        "tok_s": 66.36,  # 1000 / 15.07
        "tok_s_unscaled": 164.74,  # 1000 / 6.07
    }


def test_an_mtp_step_has_no_token_rate():
    parts = StepParts(weight_bytes=1e9, kernel_ms_h200=1.0, handoff_bytes=0, handoffs=0, tokens=0)
    got = projection.project(parts, projection.CARDS["A100-80GB"], 4800.0)
    assert got["tok_s"] is None and got["tok_s_unscaled"] is None and got["step_ms"] > 0


def test_experts_touched():
    assert projection.experts_touched(256, 8, 1) == pytest.approx(8.0)
    assert projection.experts_touched(4, 2, 2) == pytest.approx(3.0)  # 4 x (1 - (1/2)^2)


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
            "max_position_embeddings": 64,
        }
    )


def test_weight_bytes_read_by_hand_on_a_tiny_config():
    shape = _tiny()
    # bf16 attention: fused_qkv_a (32+16+8)x64 x2 = 7168, q_b (2x16)x32 x2 = 2048, q_a_norm 64, kv_b 2x16x16 x2 =
    # 1024, kv_a_norm 32, o_proj 64x16 x2 = 2048: 12,384; the two norms 2x64 x2 = 256
    attention, norms = 12_384, 256
    dense = 2 * 32 * 64 * 2 + 64 * 32 * 2  # gate_up + down = 12,288
    assert projection.layer_read_bytes(shape, 0, rows=1, bits=16) == attention + norms + dense
    router, shared = 4 * 64 * 2, 2 * 16 * 64 * 2 + 64 * 16 * 2  # 512, 6,144
    expert = 6_144  # same width as the one shared expert
    # one row touches 2 of the 4 experts; two rows 3 on average
    assert projection.layer_read_bytes(shape, 1, rows=1, bits=16) == attention + norms + router + shared + 2 * expert
    assert projection.layer_read_bytes(shape, 1, rows=2, bits=16) == attention + norms + router + shared + 3 * expert


def _rows(indexer_ms=0.1, mla_ms=0.2, next_n=1, mla_rows=1):
    return [
        {"kernel": "indexer paged logits", "shape": f"GLM-5 / DSv3.2 indexer 32h ctx 8192 B 1 next_n {next_n}",
         "ms": indexer_ms},
        {"kernel": "sparse MLA decode", "shape": f"GLM-5 TP1 64h top-k 2048 rows {mla_rows}", "ms": mla_ms},
    ]  # fmt: skip


def test_glm5_step_sums_21_indexer_layers_78_mla_layers_and_7_handoffs():
    parts = projection.step_parts(projection.glm5_shape(), Scenario(1, 0, 8192), _rows(), "t.json")
    assert parts.kernel_ms_h200 == pytest.approx(21 * 0.1 + 78 * 0.2)
    # every later stage of the default split 9,10,10,10,10,10,10,9 starts on a shared layer: all 7 relay the top-k
    assert parts.handoffs == 7
    assert parts.handoff_bytes == 7 * (2 * 6144 * 2) + 7 * 2048 * 4
    assert parts.tokens == 1


@pytest.mark.parametrize(
    "rows, needle",
    [
        ([], "has no row 'indexer paged logits'"),
        (_rows()[:1], "has no row 'sparse MLA decode'"),
        (_rows() + _rows()[:1], "has 2 rows 'indexer paged logits'"),
        ([{**_rows()[0], "ms": None, "status": "not available: boom"}, _rows()[1]], "not available: boom"),
    ],
)
def test_missing_repeated_or_unavailable_rows_are_refused(rows, needle):
    with pytest.raises(ProjectionError, match=needle.replace("(", r"\(")):
        projection.projection({"peak_gbs": 4800.0, "rows": rows}, "t.json", [Scenario(1, 0, 8192)], ["A100-80GB"])


def test_unknown_card_and_non_results_are_refused():
    doc = {"peak_gbs": 4800.0, "rows": _rows()}
    with pytest.raises(ProjectionError, match="unknown card RTX-3090"):
        projection.projection(doc, "t.json", [Scenario(1, 0, 8192)], ["RTX-3090"])
    with pytest.raises(ProjectionError, match="no 'rows' list"):
        projection.projection({"peak_gbs": 4800.0}, "t.json", [Scenario(1, 0, 8192)], ["A100-80GB"])
    with pytest.raises(ProjectionError, match="no positive 'peak_gbs'"):
        projection.projection({"rows": _rows()}, "t.json", [Scenario(1, 0, 8192)], ["A100-80GB"])


def test_the_command_refuses_with_status_2_and_writes_nothing(tmp_path, capsys):
    kernels = tmp_path / "k.json"
    kernels.write_text(json.dumps({"peak_gbs": 4800.0, "rows": _rows()}))
    out = tmp_path / "p.json"
    assert projection.main(["--kernels", str(kernels), "--mtp", "3", "--context", "8192", "--out", str(out)]) == 2
    assert "next_n 4" in capsys.readouterr().err
    assert not out.exists()
    assert projection.main(["--kernels", str(kernels), "--card", "H100", "--mtp", "0", "--out", str(out)]) == 2
    assert not out.exists()


def test_the_table_labels_every_row_a_projection_and_shows_the_peers(tmp_path, capsys):
    kernels = tmp_path / "k.json"
    kernels.write_text(json.dumps({"peak_gbs": 4800.0, "rows": _rows()}))
    out = tmp_path / "p.json"
    assert (
        projection.main(["--kernels", str(kernels), "--mtp", "0", "--context", "8192", "--out", str(out), "--table"])
        == 0
    )
    text = capsys.readouterr().out
    assert text.startswith("**PROJECTION")
    rows = [line for line in text.splitlines() if line.startswith(("| A100", "| CMP"))]
    assert len(rows) == 2 and all("(projected)" in r for r in rows)
    assert "28.47" in text and "66-88" in text and "Uncertain figures:" in text
    doc = json.loads(out.read_text())
    assert doc["label"].startswith("PROJECTION") and [r["card"] for r in doc["rows"]] == ["A100-80GB", "CMP-170HX"]


def test_from_the_recorded_h200_run_the_kernels_scale_by_the_bandwidth_ratio():
    doc = json.loads(SM80.read_text())
    got = projection.projection(doc, str(SM80), [Scenario(1, 0, c) for c in (8192, 131072)], list(projection.CARDS))
    for r in got["rows"]:
        ratio = 4800.0 / projection.CARDS[r["card"]].hbm_gbs
        assert r["kernels_ms"] == pytest.approx(r["kernels_ms_unscaled"] * ratio, abs=2e-3)
        assert r["step_ms"] == pytest.approx(r["kernels_ms"] + r["weights_ms"] + r["handoff_ms"], abs=2e-3)
