"""benchmarks/projection.py without a GPU: the kernel table's look-ups and interpolation worked by hand, a layer's parts
on a card (21 indexer layers and 78 sparse-MLA layers, kernels scaled by bandwidth at the slow end, TP's all-reduces
by hand), the step's parts adding up through vllm_compose.pp.step, the refusals with nothing written, and the table
docs/benchmarks.md shows being what the script prints from the recorded H200 run."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

import projection  # noqa: E402
from projection import ENDS, KernelClock, KernelTable, ProjectionError, Scenario  # noqa: E402

from vllm_compose.pp import card as cards  # noqa: E402
from vllm_compose.pp import link as links  # noqa: E402
from vllm_compose.pp import step  # noqa: E402

SM80 = ROOT / "lab/results/2026-12-02/dsa_kernels_sm80.json"
FAST, SLOW = ENDS
INDEXER = "GLM-5 / DSv3.2 indexer 32h ctx 8192 B"
MLA = "GLM-5 TP1 64h top-k 2048 rows"


def _rows(indexer_ms=0.1, mla_ms=0.2, next_n=1, mla_rows=1):
    return [
        {"kernel": "indexer paged logits", "shape": f"{INDEXER} 1 next_n {next_n}", "ms": indexer_ms},
        {"kernel": "sparse MLA decode", "shape": f"{MLA} {mla_rows}", "ms": mla_ms},
    ]


def _mtp_rows():
    """Rows 1 and 16 for both kernels, plus 8-head and 16-head sparse-MLA rows: MTP 1 and every layout can run."""
    return [
        *_rows(),
        {"kernel": "indexer paged logits", "shape": f"{INDEXER} 8 next_n 2", "ms": 0.25},
        {"kernel": "sparse MLA decode", "shape": f"{MLA} 8", "ms": 0.34},
        *({"kernel": "sparse MLA decode", "shape": f"{label} {h}h top-k 2048 rows {n}", "ms": ms}
          for label, h in (("GLM-5 TP8", 8), ("DSv3.2 TP8", 16)) for n, ms in ((1, 0.05), (8, 0.12))),
    ]  # fmt: skip


# --- the kernel table -------------------------------------------------------------------------------------------


def test_a_measured_shape_is_read_and_a_missing_one_interpolated_in_rows():
    t = KernelTable(_mtp_rows(), "t.json")
    assert t.indexer_ms(8192, 1, 1) == 0.1 and t.mla_ms(64, 8) == 0.34
    # B 1 next_n 2 = 2 rows, between 1 row (0.1) and B 8 next_n 2 = 16 rows (0.25): 0.1 + 0.15 x 1/15
    assert t.indexer_ms(8192, 1, 2) == pytest.approx(0.11)
    # 2 rows between 1 (0.2) and 8 (0.34): 0.2 + 0.14 / 7
    assert t.mla_ms(64, 2) == pytest.approx(0.22)
    # GLM-5 at TP4 holds 16 heads a rank: DeepSeek-V3.2's TP8 rows (the same 576-wide latent)
    assert t.mla_ms(16, 8) == 0.12


def test_shapes_at_one_row_count_give_their_mean():
    rows = [*_rows(), *({"kernel": "indexer paged logits", "shape": f"{INDEXER} {b} next_n {n}", "ms": ms}
                        for b, n, ms in ((32, 2, 0.3), (64, 1, 0.5)))]  # fmt: skip
    # 64 rows twice (B 32 x 2, B 64 x 1): 0.4; 8 rows between 1 (0.1) and 64 (0.4)
    assert KernelTable(rows, "t").indexer_ms(8192, 8, 1) == pytest.approx(0.1 + 0.3 * 7 / 63)


@pytest.mark.parametrize(
    "rows, call, needle",
    [
        ([], lambda t: t.indexer_ms(8192, 1, 1), "has no row 'indexer paged logits'"),
        (_rows()[:1], lambda t: t.mla_ms(64, 1), "has no row 'sparse MLA decode'"),
        (_rows() + _rows()[:1], lambda t: t.indexer_ms(8192, 1, 1), "has 2 rows 'indexer paged logits'"),
        ([{**_rows()[0], "ms": None, "status": "not available: boom"}], lambda t: t.indexer_ms(8192, 1, 1),
         "not available: boom"),
        (_rows(), lambda t: t.indexer_ms(8192, 1, 4), "no measured shapes of"),
        (_mtp_rows(), lambda t: t.mla_ms(64, 128), "on both sides of 128 query rows"),
        (_rows(), lambda t: t.mla_ms(32, 1), "no sparse-MLA rows at 32 heads"),
    ],
)  # fmt: skip
def test_missing_repeated_or_unavailable_rows_are_refused(rows, call, needle):
    with pytest.raises(ProjectionError, match=needle.replace("(", r"\(")):
        call(KernelTable(rows, "t.json"))


# --- a layer on a card --------------------------------------------------------------------------------------------


def _clock(end, card="A100-SXM4-80GB", tp=1, batch=1):
    c = cards.card(card)
    shape = projection.glm5_shape()
    table = KernelTable(_mtp_rows(), "t.json")
    return KernelClock(shape, c, end, c.link.with_latency(end.latency_us), table, 4800.0, 8192, batch, tp)


def test_the_dsa_kernels_run_on_21_indexer_layers_and_78_mla_layers_scaled_at_the_slow_end():
    fast = sum(_clock(FAST).parts(x, 1)[1] for x in range(78))
    assert fast == pytest.approx(21 * 0.1 + 78 * 0.2)
    slow = sum(_clock(SLOW).parts(x, 1)[1] for x in range(78))
    assert slow == pytest.approx(fast * 4800 / 2039)


def test_weights_are_read_at_the_cards_peak_or_at_75_percent_of_it():
    w_fast, w_slow = _clock(FAST).parts(40, 1)[0], _clock(SLOW).parts(40, 1)[0]
    assert w_fast == pytest.approx(step.layer_read_bytes(projection.glm5_shape(), 40, 1, projection.WEIGHTS) / 2039e6)
    assert w_slow == pytest.approx(w_fast / 0.75)


def test_tensor_parallelism_pays_two_all_reduces_a_layer_over_the_cards_link():
    clock = _clock(FAST, card="CMP-170HX", tp=8)
    # a ring over 8 on the card's PCIe Gen1 x16 at 85%: 15 us + 2 x 7/8 x 12,288 B / 3.4e9 B/s, twice a layer
    one = 0.015 + 2 * 7 / 8 * 12288 / 3.4e9 * 1e3
    assert clock.parts(5, 1)[2] == pytest.approx(2 * one)
    assert _clock(FAST).parts(5, 1)[2] == 0.0  # PP: no collectives inside a stage


def test_the_step_is_its_parts_and_the_pp8_hand_offs_relay_the_top_k_at_all_seven_boundaries():
    doc = {"peak_gbs": 4800.0, "rows": _mtp_rows()}
    got = projection.projection(doc, "t.json", [Scenario("PP8", "CMP-170HX", 8192)])
    for end in ("fast", "slow"):
        r = got["rows"][0][end]
        assert r["step_ms"] == pytest.approx(r["weights_ms"] + r["dsa_ms"] + r["links_ms"], abs=1e-3)
        latency = {"fast": 15.0, "slow": 50.0}[end]
        hand_off = links.pcie("pcie1x16", latency).transfer_ms(2 * 6144 * 2 + 2048 * 4)
        assert r["links_ms"] == pytest.approx(7 * hand_off, abs=1e-3)
        assert r["tok_s"] == pytest.approx(1000 / r["step_ms"], rel=1e-3)
        assert r["mtp_tok_s"] == pytest.approx(1.7 * 1000 / r["mtp_step_ms"], rel=1e-3)


def test_without_mtp_rows_the_plain_step_still_projects():
    doc = {"peak_gbs": 4800.0, "rows": _rows()}
    got = projection.projection(doc, "t.json", [Scenario("PP8", "A100-PCIe-80GB", 8192)], mtp=0)
    assert got["rows"][0]["fast"]["tok_s"] > 0 and "speedup" not in got["rows"][0]["fast"]
    with pytest.raises(ProjectionError, match="'GLM-5 TP1 64h top-k 2048 rows 2'"):
        projection.projection(doc, "t.json", [Scenario("PP8", "A100-PCIe-80GB", 8192)], mtp=1)


def test_unknown_cards_layouts_and_non_results_are_refused():
    doc = {"peak_gbs": 4800.0, "rows": _rows()}
    with pytest.raises(ProjectionError, match="unknown card RTX-3090"):
        projection.projection(doc, "t.json", [Scenario("PP8", "RTX-3090", 8192)], mtp=0)
    with pytest.raises(ProjectionError, match="unknown layout PP4"):
        projection.projection(doc, "t.json", [Scenario("PP4", "CMP-170HX", 8192)], mtp=0)
    with pytest.raises(ProjectionError, match="no 'rows' list"):
        projection.projection({"peak_gbs": 4800.0}, "t.json", [Scenario("PP8", "CMP-170HX", 8192)])
    with pytest.raises(ProjectionError, match="no positive 'peak_gbs'"):
        projection.projection({"rows": _rows()}, "t.json", [Scenario("PP8", "CMP-170HX", 8192)])


def test_the_command_refuses_with_status_2_and_writes_nothing(tmp_path, capsys):
    kernels = tmp_path / "k.json"
    kernels.write_text(json.dumps({"peak_gbs": 4800.0, "rows": _rows()}))
    out = tmp_path / "p.json"
    assert projection.main(["--kernels", str(kernels), "--mtp", "3", "--layout", "PP8", "--out", str(out)]) == 2
    assert "'GLM-5 TP1 64h top-k 2048 rows 4'" in capsys.readouterr().err  # MTP 3 verifies 4 rows
    assert not out.exists()
    assert projection.main(["--kernels", str(kernels), "--card", "H100", "--mtp", "0", "--out", str(out)]) == 2
    assert not out.exists()


def test_the_table_labels_every_row_a_projection_and_places_the_peers(tmp_path, capsys):
    kernels = tmp_path / "k.json"
    kernels.write_text(json.dumps({"peak_gbs": 4800.0, "rows": _mtp_rows()}))
    out = tmp_path / "p.json"
    assert projection.main(["--kernels", str(kernels), "--out", str(out), "--table"]) == 0
    text = capsys.readouterr().out
    assert text.startswith("**PROJECTION")
    rows = [line for line in text.splitlines() if line.startswith(("| PP8", "| TP8", "| TP4PP2"))]
    assert len(rows) == 12 and all("(projected)" in r for r in rows)
    assert "28.47" in text and "66-88" in text and "vllm#44697" in text and "Uncertain figures:" in text
    doc = json.loads(out.read_text())
    assert doc["label"].startswith("PROJECTION") and len(doc["rows"]) == 12
    assert {p["falls"] for p in doc["peers"]} <= {"inside", "above", "below", None}


def test_the_recorded_run_is_the_table_docs_benchmarks_shows(capsys, monkeypatch):
    monkeypatch.chdir(ROOT)  # the table names the kernel file as the command line does
    assert projection.main(["--kernels", str(SM80.relative_to(ROOT)), "--table"]) == 0
    got = capsys.readouterr().out
    assert got in (ROOT / "docs" / "benchmarks.md").read_text()
    doc = projection.projection(
        json.loads(SM80.read_text()),
        str(SM80),
        [Scenario(layout, card, 8192) for layout in projection.LAYOUTS for card in projection.DEFAULT_CARDS],
    )
    falls = {p["tok_s"]: p["falls"] for p in doc["peers"] if p["falls"]}
    assert falls == {93.0: "above", 46.8: "inside", 28.47: "inside", 30.2: "inside", 39.0: "inside"}


# --- the sparse-MLA rows from another run (a policy sweep timed in CUDA graphs) -----------------------------------


def _sweep(peak=4800.0):
    """Two trees at the 64-head shape: the kernel before (`v0260`) and one launch two policies share."""
    return {
        "peak_gbs": peak,
        "rows": [
            {"tree": "v0260", "kernel": "sparse MLA decode", "shape": f"{MLA} 1", "ms": 0.02, "timer": "graph"},
            {"tree": "mla@bh16.kv16", "kernel": "sparse MLA decode", "shape": f"{MLA} 1", "ms": 0.015,
             "timer": "graph", "policies": ["bh16/kv16/min128/fill1.5", "bh16/kv16/min64/fill1.5"]},
        ],
    }  # fmt: skip


def test_the_sparse_mla_rows_can_come_from_a_sweeps_tree_or_policy():
    doc = {"peak_gbs": 4800.0, "rows": _rows(mla_ms=0.2)}
    before = projection.with_mla_rows(doc, "k.json", _sweep(), "s.json", "v0260")
    after = projection.with_mla_rows(doc, "k.json", _sweep(), "s.json", "bh16/kv16/min64/fill1.5")
    assert KernelTable(before["rows"], "b").mla_ms(64, 1) == 0.02
    assert KernelTable(after["rows"], "a").mla_ms(64, 1) == 0.015
    # the indexer's rows stay; the file's own sparse-MLA row is gone (one row a shape)
    assert KernelTable(after["rows"], "a").indexer_ms(8192, 1, 1) == 0.1
    assert [r["kernel"] for r in after["rows"]] == ["indexer paged logits", "sparse MLA decode"]
    assert after["mla_rows"] == {"source": "s.json", "pick": "bh16/kv16/min64/fill1.5", "timer": "graph"}
    assert doc["rows"] == _rows(mla_ms=0.2)  # the caller's document is not changed


@pytest.mark.parametrize(
    ("sweep", "pick", "needle"),
    [
        (_sweep(peak=3350.0), "v0260", "timed on a GPU of 3350.0 GB/s, k.json on one of 4800.0 GB/s"),
        (
            _sweep(),
            "bh64/kv16/min128/fill1.5",
            "no sparse-MLA decode rows of tree or policy 'bh64/kv16/min128/fill1.5'",
        ),
        ({"peak_gbs": 4800.0}, "v0260", "s.json is not a dsa_kernels.py result"),
    ],
)
def test_sweep_rows_from_another_gpu_or_an_unknown_pick_are_refused(sweep, pick, needle):
    with pytest.raises(ProjectionError, match=needle.replace("(", r"\(").replace(")", r"\)")):
        projection.with_mla_rows({"peak_gbs": 4800.0, "rows": _rows()}, "k.json", sweep, "s.json", pick)


def test_the_command_names_where_the_sparse_mla_rows_came_from(tmp_path, capsys):
    kernels, sweep = tmp_path / "k.json", tmp_path / "s.json"
    kernels.write_text(json.dumps({"peak_gbs": 4800.0, "rows": _rows()}))
    sweep.write_text(json.dumps(_sweep()))
    args = ["--kernels", str(kernels), "--mtp", "0", "--layout", "PP8", "--card", "A100-SXM4-80GB", "--table"]
    assert projection.main([*args, "--mla", str(sweep), "--mla-tree", "v0260"]) == 0
    assert f"the sparse-MLA decode's from `{sweep}`, v0260, timed by graph" in capsys.readouterr().out
    out = tmp_path / "p.json"
    assert projection.main([*args, "--mla", str(sweep), "--out", str(out)]) == 2
    assert "--mla and --mla-tree go together" in capsys.readouterr().err and not out.exists()
