"""benchmarks/recall_e2e.py without a GPU: the decode-rate arithmetic and the table it writes into the docs."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

from recall_e2e import decode_rates, main, table  # noqa: E402


def test_decode_rate_is_the_difference_of_the_two_generations():
    # 8 requests, 128 tokens: 127 decode steps took 12.7 s - 0.7 s
    assert decode_rates(8, 128, 0.7, 12.7) == {"per_request_tok_s": 10.58, "aggregate_tok_s": 84.67}


@pytest.mark.parametrize("tokens, t_one, t_all", [(1, 0.5, 2.0), (128, 3.0, 3.0), (128, 3.0, 2.0)])
def test_a_rate_that_cannot_be_derived_is_refused(tokens, t_one, t_all):
    with pytest.raises(ValueError, match="cannot derive a decode rate"):
        decode_rates(4, tokens, t_one, t_all)


def _result(**kw):
    base = {
        "mode": "eager",
        "mtp": 0,
        "acceptance": 1.0,
        "first_draft_accepted": None,
        "batch": 1,
        "context": 8192,
        "per_request_tok_s": 30.1,
        "aggregate_tok_s": 30.1,
        "as_predicted": True,
    }
    return {**base, **kw}


def test_table_orders_rows_and_marks_wrong_tokens():
    rows = table(
        [
            _result(mtp=1, acceptance=0.8, first_draft_accepted=0.79, per_request_tok_s=41.0, aggregate_tok_s=41.0),
            _result(),
            _result(batch=8, as_predicted=False, aggregate_tok_s=200.0),
        ]
    ).splitlines()
    assert rows[2] == "| offline | eager | 0 | 1.00 | - | 1 | 8,192 | 30.1 | 30.1 | - | - | - | - | - | - | - | yes |"
    assert (
        rows[3] == "| offline | eager | 1 | 0.80 | 0.79 | 1 | 8,192 | 41.0 | 41.0 | - | - | - | - | - | - | - | yes |"
    )
    assert rows[4].endswith("| 200.0 | - | - | - | - | - | - | - | NO |")


def test_table_command_reads_result_files(tmp_path, capsys):
    f = tmp_path / "r.json"
    f.write_text(json.dumps(_result()))
    assert main(["table", str(f)]) == 0
    assert capsys.readouterr().out.splitlines()[2].startswith("| offline | eager | 0 |")


def test_table_reads_a_serve_file_of_rows_beside_an_offline_one(tmp_path, capsys):
    one, rows = tmp_path / "r.json", tmp_path / "s.json"
    one.write_text(json.dumps(_result(path="offline")))
    rows.write_text(json.dumps([_result(path="serve-stream"), _result(path="serve", batch=8)]))
    assert main(["table", str(one), str(rows)]) == 0
    got = [r.split(" | ")[0] for r in capsys.readouterr().out.splitlines()[2:]]
    assert got == ["| offline", "| serve-stream", "| serve"]


# --- `run` and `explain` end to end on the stand-in engine (tests/benchmarks/fake_engine.py) --------------------


@pytest.fixture
def fake_vllm(monkeypatch, tmp_path):
    """`run`'s engine, generation and counters replaced by the stand-in engine, whose GPU clock is the modules'
    clock; the first generation of a batch pays `ONE_OFF_MS` once (a kernel compiled for a new shape)."""
    import types

    import fake_engine as fe
    import recall_e2e
    import step_timing

    from vllm_compose.proof import recall_run
    from vllm_compose.proof.recall_model import spec_to_json, tiny_spec, with_draft_acceptance
    from vllm_compose.proof.suites import SERVING_ENV

    for key, value in SERVING_ENV.items():
        monkeypatch.setenv(key, value)  # restored after the test: run() sets them
    module = types.ModuleType("triton")
    module.knobs = types.SimpleNamespace(runtime=types.SimpleNamespace(jit_cache_hook=None))
    monkeypatch.setitem(sys.modules, "triton", module)
    gpu = fe.FakeGpu()
    monkeypatch.setattr(recall_e2e, "time", fe.FakeTime(gpu))
    monkeypatch.setattr(step_timing, "time", fe.FakeTime(gpu))
    monkeypatch.setattr(step_timing, "default_spans", lambda: fe.FakeSpans(gpu))

    def engine(suite, spec):
        return fe.FakeLLM(spec, suite.mtp, budget=512, batch=len(suite.lengths), one_off_ms=ONE_OFF_MS, gpu=gpu)

    monkeypatch.setattr(recall_run, "engine", engine)
    monkeypatch.setattr(recall_run, "generate", lambda llm, prompts, n: llm.fake_generate(prompts, n))
    monkeypatch.setattr(recall_run, "spec_metrics", lambda llm: llm.fake_metrics())
    model = tmp_path / "model"
    model.mkdir()
    (model / "recall_spec.json").write_text(json.dumps(spec_to_json(with_draft_acceptance(tiny_spec(), 0.75))))
    return model


#: GPU ms of the stand-in's one-off cost in the first generation of a batch
ONE_OFF_MS = 100.0


def _run(model, out, mtp, *extra):
    args = ["run", "--model", str(model), "--mtp", str(mtp), "--batch", "3", "--context", "256", "--tokens", "40",
            "--graphs", "--out", str(out), *extra]  # fmt: skip
    assert main(args) == 0
    return json.loads(out.read_text())


def test_run_times_a_cold_pair_then_warm_pairs_and_records_the_steps(fake_vllm, tmp_path):
    row = _run(fake_vllm, tmp_path / "r1.json", 1, "--repeats", "2")
    assert [p["label"] for p in row["pairs"]] == ["cold", "warm0", "warm1"]
    # the one-off cost landed in the cold t(1) and was subtracted from the cold pair's decode time
    assert row["cold"]["t_one_s"] == pytest.approx(row["pairs"][1]["t_one_s"] + ONE_OFF_MS / 1e3)
    assert row["cold"]["per_request_tok_s"] > row["per_request_tok_s"]
    assert row["headline"] == "median of the warm pairs" and row["as_predicted"]
    # the last pair's steps: the design's acceptance, the fake GPU's 10 + 1 + 2 ms a step, graphs throughout
    t = row["timing"]
    assert t["pair"] == "warm1" and t["spans"] == "fake"
    assert t["all"]["acceptance"] == row["designed"]["first_draft_rate"]
    assert t["all"]["period_ms"] == 13.0 and t["all"]["gpu_ms"] == {"draft": 2.0, "sample": 1.0, "target": 10.0}
    assert set(row["step_records"]) == {"cold/one", "cold/all", "warm1/one", "warm1/all"}
    assert set(row["step_summaries"]) == {f"{p}/{g}" for p in ("cold", "warm0", "warm1") for g in ("one", "all")}
    assert row["engine"]["async_scheduling"] is True and row["step_hooks"]["missing"] == []


def test_explain_of_two_runs_finds_the_speed_up_in_the_steps(fake_vllm, tmp_path, capsys):
    _run(fake_vllm, tmp_path / "r0.json", 0)
    _run(fake_vllm, tmp_path / "r1.json", 1)
    capsys.readouterr()
    files = [str(tmp_path / "r0.json"), str(tmp_path / "r1.json")]
    assert main(["explain", *files, "--json", str(tmp_path / "x.json")]) == 0
    (g,) = json.loads((tmp_path / "x.json").read_text())
    assert abs(g["gap"]) < 0.01 and g["explained"] and g["acceptance_agrees"]
    # the cold pairs (the first rows' protocol) carry the one-off cost: their ratio is off the steps', their t(1) is
    # 0.1 s longer than the warm ones' and their t(N) - t(1) 0.1 s shorter than their decode window
    assert g["measured_cold"] > g["measured"] * 1.05
    for engine in ("mtp0", "mtpk"):
        assert g[engine]["cold_extra_t_one_s"] == pytest.approx(ONE_OFF_MS / 1e3)
        # (to a step: in t(N) the last prefill step's output is taken after the next step was launched; the stand-in
        # runs a step when it is launched, so that is a whole step here, the host's launch time on a GPU)
        assert g["window_offset_s"][f"{engine}_cold"] == pytest.approx(-ONE_OFF_MS / 1e3, abs=0.015)
        assert g[engine]["cold_triton_jit"] == 0
    assert "MTP 1: explained" in capsys.readouterr().out


def test_explain_refuses_rows_without_steps(fake_vllm, tmp_path, capsys):
    _run(fake_vllm, tmp_path / "r0.json", 0, "--no-steps", "--repeats", "0")
    _run(fake_vllm, tmp_path / "r1.json", 1)
    assert main(["explain", str(tmp_path / "r0.json"), str(tmp_path / "r1.json")]) == 3
    err = capsys.readouterr().err
    assert "the MTP 0 row at batch 3, context 256 has no step records" in err and "--no-steps" in err


def test_run_refuses_a_negative_repeat_count(capsys):
    assert main(["run", "--model", "m", "--repeats", "-1", "--out", "o.json"]) == 4
    assert "--repeats -1" in capsys.readouterr().err
