"""lab/device/collect.py on a made-up stage: the cycle model's runs judged against the prediction, failures kept."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("numpy", reason="the tiny checkpoint generator needs numpy (see .ci/run)")

from tinyglm_specs import CYCLE  # noqa: E402

from vllm_compose.proof.expected import SpecCounters, expected_tokens, predicted_spec_counters  # noqa: E402
from vllm_compose.proof.tinyglm import TokenCycle, generate, prompts  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
SPEC = CYCLE  # the small cycle model (tinyglm_specs.py)


def test_collect_judges_cycle_runs_and_keeps_the_failed_runs_log(tmp_path):
    stage, out = tmp_path / "vc", tmp_path / "out"
    generate(SPEC, stage / "tiny_cycle")
    (stage / "res").mkdir()
    (stage / "log").mkdir()
    cyc, ps = TokenCycle.of(SPEC), prompts(SPEC, 2)
    tokens = [expected_tokens(cyc, p, 20) for p in ps]
    predicted = SpecCounters(num_accepted_tokens_per_pos=[0])
    for p in ps:
        predicted.add(predicted_spec_counters(cyc, p, 20, 1))
    metrics = {f"vllm:spec_decode_{k}": v for k, v in predicted.as_dict().items()}
    off_path = [t[:] for t in tokens]
    off_path[1][7] = (off_path[1][7] + 1) % SPEC.vocab_size
    runs = {
        "cycle_pp1": {"ok": True, "token_ids": tokens, "mtp": 0},
        "cycle_pp2_mtp1": {"ok": True, "token_ids": tokens, "mtp": 1, "spec_metrics": metrics},
        "cycle_pp2": {"ok": True, "token_ids": off_path, "mtp": 0},
        "stock_cycle_pp1": {"ok": False, "error": "RuntimeError: needs DeepGEMM"},
    }
    for label, r in runs.items():
        (stage / "res" / f"{label}.json").write_text(json.dumps(r))
    (stage / "log" / "stock_cycle_pp1.log").write_text(
        "first line names the assert\n"
        + "x\n" * 10
        + "(EngineCore pid=41) RuntimeError: DeepGEMM backend is not available or outdated.\n"
        + "RuntimeError: Engine core initialization failed. See root cause above.\n"
    )
    rec = stage / "rec" / "cycle_pp1_mtp1"
    rec.mkdir(parents=True)
    (rec / "7.jsonl").write_text(
        json.dumps({"kind": "model-class", "class": "vllm.models.deepseek_v32.nvidia.model.X", "prefix": ""})
        + "\n"
        + json.dumps({"kind": "model-class", "class": "vllm.models.deepseek_v32.nvidia.mtp.Y", "prefix": ""})
        + "\n"
    )
    proc = subprocess.run(
        [sys.executable, str(REPO / "lab" / "device" / "collect.py"), str(stage), str(out)],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stderr
    v = json.loads((out / "results.json").read_text())["verdicts"]
    assert v["cycle_pp1"]["as_predicted"]
    assert v["cycle_pp2_mtp1"]["identical_to_baseline"] and v["cycle_pp2_mtp1"]["spec_as_predicted"]
    assert not v["cycle_pp2"]["as_predicted"]
    assert v["cycle_pp2"]["first_difference_from_baseline"]["position"] == 7
    assert "stock_cycle_pp1" not in v
    assert (out / "failed-logs" / "stock_cycle_pp1.log").read_text().startswith("first line names the assert")
    assert "OFF PREDICTION" in proc.stdout and "spec counters as predicted" in proc.stdout
    # the stock failure's root cause is in results.json, not only in the log
    stock = json.loads((out / "results.json").read_text())["runs"]["stock_cycle_pp1"]
    assert stock["log_errors"] == [
        "RuntimeError: DeepGEMM backend is not available or outdated.",
        "RuntimeError: Engine core initialization failed. See root cause above.",
    ]
    classes = json.loads((out / "records.json").read_text())["cycle_pp1_mtp1"]["model_classes"]
    assert [c["class"] for c in classes] == [
        "vllm.models.deepseek_v32.nvidia.model.X",
        "vllm.models.deepseek_v32.nvidia.mtp.Y",
    ]
