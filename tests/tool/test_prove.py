"""`vllm-compose prove` without a GPU: the suite table, the model writer, and the orchestration of one interpreter
per suite (a stand-in interpreter writes or withholds the result a real suite would)."""

from __future__ import annotations

import json
import sys
import textwrap

import pytest

from vllm_compose import cli
from vllm_compose.proof import suites as proof


def test_list_names_every_suite(capsys):
    assert cli.main(["prove", "--list"]) == 0
    out = capsys.readouterr().out
    assert [line.split()[0] for line in out.splitlines()] == list(proof.SUITES)


def test_unknown_suite_stops_before_anything_is_written(tmp_path, capsys):
    model = tmp_path / "m"
    assert cli.main(["prove", "--model-dir", str(model), "--suite", "nope"]) == 3
    assert "unknown suite 'nope'" in capsys.readouterr().err
    assert not model.exists()


def test_running_needs_a_model_dir(capsys):
    assert cli.main(["prove"]) == 4
    assert "--model-dir DIR is required" in capsys.readouterr().err


def test_every_default_suite_moves_blocks_and_graph_suites_capture(tmp_path):
    for name in proof.DEFAULT_SUITES:
        s = proof.suite(name, tmp_path)
        assert s.rotate_blocks == -1 and s.model_dir == str(tmp_path)
        assert s.eager == (s.compilation is None)
    assert proof.suite("eager", tmp_path).fault_lengths  # the faults run in the eager suite


def test_a_folder_with_other_files_is_refused(tmp_path):
    (tmp_path / "weights.bin").write_text("x")
    with pytest.raises(proof.ProofError, match="no recall_spec.json"):
        proof.ensure_model(tmp_path)


def test_the_tiny_model_is_written_once(tmp_path):
    pytest.importorskip("torch")
    pytest.importorskip("safetensors")
    model = tmp_path / "m"
    assert proof.ensure_model(model, "tiny") is True
    assert json.loads((model / "config.json").read_text())["index_topk_freq"] == 4
    index = json.loads((model / "model.safetensors.index.json").read_text())["weight_map"]
    assert "model.layers.3.self_attn.indexer.wq_b.weight" not in index  # a shared layer: no indexer
    assert "model.layers.2.self_attn.indexer.wq_b.weight" in index
    assert proof.ensure_model(model, "tiny") is False


def _fake_python(tmp_path, body: str):
    """A stand-in interpreter: `python -m vllm_compose.proof.recall_run SUITE OUT` runs `body`."""
    script = tmp_path / "fake_python.py"
    script.write_text("import json, sys\nsuite, out = json.loads(sys.argv[3]), sys.argv[4]\n" + textwrap.dedent(body))
    wrapper = tmp_path / "python"
    wrapper.write_text(f'#!/bin/sh\nexec {sys.executable} {script} "$@"\n')
    wrapper.chmod(0o755)
    return str(wrapper)


def test_run_collects_each_suites_result_and_reports_a_crash(tmp_path):
    python = _fake_python(
        tmp_path,
        """
        if suite["label"] == "mtp1":
            sys.stderr.write("Segmentation fault in the driver")
            sys.exit(139)
        ok = suite["label"] == "eager"
        json.dump({"suite": suite, "ok": True, "passed": ok, "checks": [["clean tokens as predicted", ok]]},
                  open(out, "w"))
        sys.exit(0 if ok else 1)
        """,
    )
    seen = []
    results = proof.run(tmp_path / "m", ["eager", "mtp1", "mtp2"], tmp_path / "out", on_done=seen.append, python=python)
    assert [r["passed"] for r in results] == [True, False, False]
    assert seen == results
    assert "exit 139" in results[1]["error"] and "Segmentation fault" in results[1]["error"]
    assert json.loads((tmp_path / "out" / "mtp1.json").read_text())["passed"] is False
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["eager.json", "mtp1.json", "mtp2.json"]


def test_a_stale_result_is_not_read_as_this_runs(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "eager.json").write_text(json.dumps({"passed": True, "checks": [], "suite": {"label": "eager"}}))
    python = _fake_python(tmp_path, "sys.exit(1)\n")
    [result] = proof.run(tmp_path / "m", ["eager"], out, python=python)
    assert result["passed"] is False and "no result written (exit 1)" in result["error"]


def test_a_model_of_another_variant_is_refused(tmp_path):
    pytest.importorskip("torch")
    pytest.importorskip("safetensors")
    model = tmp_path / "m"
    assert proof.ensure_model(model, "tiny") is True
    with pytest.raises(proof.ProofError, match="moe_quant '', not 'w4a16'"):
        proof.ensure_model(model, "tiny", "w4a16")
