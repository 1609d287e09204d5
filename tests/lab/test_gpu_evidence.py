"""The status table's GPU column: a summary of device result files, never more than they show."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from vllm_compose.errors import ComposeError
from vllm_compose.gpu_evidence import RunConfig, collect_gpu_evidence

RESULTS = Path(__file__).resolve().parents[2] / "lab" / "results"


def _run(version="0.26.0", pp=1, mtp=0, ok=True, sync=False, capability="8.0"):
    env = {"VC_FAKE_CAPABILITY": capability} if capability else {}
    return {"vllm_version": version, "pp": pp, "mtp": mtp, "ok": ok, "sync_scheduling": sync, "env": env}


def _write(root: Path, session: str, runs: dict, verdicts: dict | None = None) -> None:
    (root / session).mkdir(parents=True)
    (root / session / "results.json").write_text(json.dumps({"runs": runs, "verdicts": verdicts or {}}))


def test_runs_group_by_release_and_a_failed_verdict_is_not_as_predicted(tmp_path):
    _write(
        tmp_path,
        "s1",
        {
            "cycle_pp1": _run(),
            "cycle_pp2_mtp2": _run(pp=2, mtp=2),
            "stock_pp1": _run(ok=False),  # stock runs are not evidence about the compose
            "new_pp1": _run(version="0.33.0", capability=None),
        },
        {"cycle_pp2_mtp2": {"as_predicted": True, "spec_as_predicted": False}},
    )
    ev = collect_gpu_evidence(tmp_path)
    assert set(ev) == {"0.26.0", "0.33.0"}
    assert ev["0.26.0"].as_predicted == {RunConfig(1, 0)}
    assert ev["0.26.0"].not_as_predicted == {RunConfig(2, 2)}
    assert ev["0.26.0"].runs == 2
    assert "NOT as predicted: PP2+MTP2" in ev["0.26.0"].summary()
    assert "none forced" in ev["0.33.0"].summary()


def test_a_configuration_fixed_in_a_later_session_counts_once_as_predicted(tmp_path):
    _write(tmp_path, "a", {"r": _run(pp=2, mtp=2, ok=False)})
    _write(tmp_path, "b", {"r": _run(pp=2, mtp=2, sync=True), "s": _run(pp=2, mtp=2)})
    ev = collect_gpu_evidence(tmp_path)["0.26.0"]
    assert ev.as_predicted == {RunConfig(2, 2), RunConfig(2, 2, True)}
    assert ev.not_as_predicted == set() and ev.failed == {}
    assert ev.sessions == {"a", "b"}
    assert "PP2+MTP2 sync" in ev.summary()


def test_an_unreadable_results_file_is_a_typed_error_naming_it(tmp_path):
    (tmp_path / "s").mkdir()
    (tmp_path / "s" / "results.json").write_text("{")
    with pytest.raises(ComposeError) as exc:
        collect_gpu_evidence(tmp_path)
    assert exc.value.file.endswith("results.json")


def test_a_run_that_did_not_finish_is_failed_with_its_root_cause_not_a_wrong_prediction(tmp_path):
    failed = {
        **_run(version="0.33.0", mtp=1, ok=False),
        "error": "RuntimeError: Engine core initialization failed. See root cause above.",
        "log_errors": ["AttributeError: 'X' object has no attribute 'y'", "RuntimeError: ... See root cause above."],
    }
    _write(tmp_path, "s6", {"cycle_pp1_mtp1": failed, "cycle_pp1": {**_run(version="0.33.0", ok=False), "error": "E"}})
    ev = collect_gpu_evidence(tmp_path)["0.33.0"]
    assert ev.as_predicted == set() and ev.not_as_predicted == set()
    assert ev.failed == {RunConfig(1, 1): "AttributeError: 'X' object has no attribute 'y'", RunConfig(1, 0): "E"}
    assert "FAILED: PP1+MTP1 (AttributeError: 'X' object has no attribute 'y')" in ev.summary()
    assert "as predicted:" not in ev.summary()


def test_a_failure_after_a_pass_shows_and_a_pass_outranks_a_failure_of_the_same_session(tmp_path):
    _write(tmp_path, "2026-01-01", {"r": _run(mtp=1), "q": _run(mtp=2)})
    _write(tmp_path, "2026-01-02", {"r": {**_run(mtp=1, ok=False), "error": "RuntimeError: later"}})
    (tmp_path / "2026-01-02" / "b.results.json").write_text(
        json.dumps({"runs": {"q": {**_run(mtp=2, ok=False), "error": "set-up"}, "p": _run(mtp=0)}})
    )
    (tmp_path / "2026-01-02" / "c.results.json").write_text(json.dumps({"runs": {"q": _run(mtp=2)}}))
    (tmp_path / "2026-01-02" / "d.results.json").write_text(
        json.dumps({"runs": {"q": {**_run(mtp=2, ok=False), "error": "after the pass, same session"}}})
    )
    ev = collect_gpu_evidence(tmp_path)["0.26.0"]
    assert ev.failed == {RunConfig(1, 1): "RuntimeError: later"}  # the earlier session's pass does not hide it
    assert ev.as_predicted == {RunConfig(1, 0), RunConfig(1, 2)}  # the session's pass stands, whatever the order
    assert ev.runs == 7


def test_the_repository_results_show_the_pp1_runs_of_v0_29_0_and_v0_33_0():
    ev = collect_gpu_evidence(RESULTS)
    assert set(ev) == {"0.26.0", "0.29.0", "0.33.0", "0.34.0"}
    assert {RunConfig(1, 2), RunConfig(2, 2), RunConfig(2, 2, True)} <= ev["0.26.0"].as_predicted
    # v0.33.0's compose ran twice: without series entry 0031 it failed on the first forward
    # (record_logical_topk_ready), with it (and v0.29.0's) it ran at PP1 as predicted; both folders count
    for version in ("0.29.0", "0.33.0"):
        assert ev[version].as_predicted == {RunConfig(1, 0), RunConfig(1, 1), RunConfig(1, 2)}, version
        assert ev[version].failed == {} and ev[version].not_as_predicted == set(), version
    assert ev["0.33.0"].sessions == {"2026-12-01-s6", "2026-12-01-s7"}


def test_the_repository_recall_results_of_v0_33_0_and_v0_34_0_are_their_current_composes_on_sm80_ptx():
    """The recall runs of the v0.33.0 and v0.34.0 composes (one H200, every kernel built as sm_80 PTX): each suite
    as predicted, the eager one with its five faults caught, in a folder of their own; the v0.34.0 run without entry
    0043, which stopped at the JIT warm-up, is kept outside `recall/` and counts for no suite."""
    ev = collect_gpu_evidence(RESULTS)
    for version, labels in (
        ("0.33.0", {"eager", "mtp1", "mtp2", "graph_mtp1", "graph_mtp2"}),
        ("0.34.0", {"eager", "mtp1", "mtp2", "graph", "graph_mtp1", "graph_mtp2"}),
    ):
        recall = ev[version].recall
        assert labels <= set(recall), version
        assert all(recall[label].passed for label in labels), version
        assert {recall[label].folder for label in labels} == {f"2026-12-04-v{version}"}
    assert "5 of 5 faults caught" in ev["0.34.0"].summary()
    warmup = json.loads((RESULTS / "2026-12-04-v0.34.0" / "other" / "without-0043-graph.json").read_text())
    assert not warmup["passed"] and "fp8e4nv not supported" in warmup["error"]


def _recall(root: Path, folder: str, name: str, label: str, passed: bool, version="0.26.0", **suite) -> None:
    (root / folder / "recall").mkdir(parents=True, exist_ok=True)
    checks = [["clean tokens as predicted", passed]]
    if suite.get("faults"):
        checks += [[f"fault {f} changes the tokens", True] for f in suite.pop("faults")]
    data = {
        "suite": {"label": label, "lengths": [8192, 131072], "eager": True, "mtp": 0, "block_size": 64, **suite},
        "vllm_version": version,
        "passed": passed,
        "checks": checks,
        "rotation": {"first_free_block_id": 60000},
    }
    if not passed:
        data["error"] = "RuntimeError: boom\nmore"
    (root / folder / "recall" / name).write_text(json.dumps(data))


def test_recall_suites_join_the_cell_with_their_faults_contexts_and_offsets(tmp_path):
    _recall(tmp_path, "2026-12-02", "a.json", "eager", True, faults=["shift", "unfilled"])
    _recall(tmp_path, "2026-12-02", "b.json", "graph_mtp2", True, eager=False, mtp=2, compilation={"mode": 0})
    _recall(tmp_path, "2026-12-02", "c.json", "graph_default", False, eager=False)
    cell = collect_gpu_evidence(tmp_path)["0.26.0"].summary()
    assert cell == (
        "recall model at GLM-5's per-layer shape: as predicted: eager (2 of 2 faults caught), graphs+MTP2 "
        "(contexts to 131,072, KV offsets past 2**31); FAILED: graphs+Inductor (RuntimeError: boom) "
        "[2026-12-02; DSA files: not recorded]"
    )


def test_recall_cell_says_whether_each_run_imported_this_composes_dsa_files(tmp_path):
    """A result records the DSA files it imported (`dsa_sources`); the status knows the current compose's: the cell
    says which runs were of this compose, which of an earlier one, and which did not record it."""
    from vllm_compose.gpu_evidence import tree_provenance

    current = {"vllm.a": "1111", "vllm.b": "2222"}
    _recall(tmp_path, "2026-12-03", "a.json", "eager", True, version="0.33.0")
    _recall(tmp_path, "2026-12-03", "b.json", "mtp1", True, version="0.33.0", mtp=1)
    _recall(tmp_path, "2026-12-03", "c.json", "mtp2", True, version="0.33.0", mtp=2)
    for name, sources in (("a.json", current), ("b.json", {**current, "vllm.b": "3333"})):
        path = tmp_path / "2026-12-03" / "recall" / name
        path.write_text(json.dumps({**json.loads(path.read_text()), "dsa_sources": sources}))
    ev = collect_gpu_evidence(tmp_path)["0.33.0"]
    ev.current_sources = current
    assert ev.summary().endswith(
        "[2026-12-03; DSA files: an earlier compose's (mtp1); not recorded (mtp2); this compose's (eager)]"
    )
    only_current = [o for o in ev.recall.values() if o.label == "eager"]
    assert tree_provenance(only_current, current) == "DSA files: this compose's"
    assert tree_provenance(only_current, None) == "DSA files: recorded, not compared"


def test_recall_suites_with_the_oracle_say_how_many_layer_checks_agreed(tmp_path):
    _recall(tmp_path, "2026-12-02", "a.json", "eager", True, faults=["shift"])
    data = json.loads((tmp_path / "2026-12-02" / "recall" / "a.json").read_text())
    data["oracle"] = {"total": 1858, "failed": 0, "passed": True}
    (tmp_path / "2026-12-02" / "recall" / "a.json").write_text(json.dumps(data))
    cell = collect_gpu_evidence(tmp_path)["0.26.0"].summary()
    assert "eager (1 of 1 faults caught, 1,858 per-layer oracle checks agree)" in cell
    outcome = collect_gpu_evidence(tmp_path)["0.26.0"].recall["eager"]
    assert (outcome.oracle_checks, outcome.oracle_failed) == (1858, 0)


def test_a_recall_pass_outranks_a_failure_in_its_folder_and_a_later_folder_wins(tmp_path):
    _recall(tmp_path, "2026-12-02", "a.json", "mtp2", False, mtp=2)
    _recall(tmp_path, "2026-12-02", "b.json", "mtp2", True, mtp=2)
    assert collect_gpu_evidence(tmp_path)["0.26.0"].recall["mtp2"].passed
    _recall(tmp_path, "2026-12-03", "a.json", "mtp2", False, mtp=2)
    assert not collect_gpu_evidence(tmp_path)["0.26.0"].recall["mtp2"].passed


def test_recall_offsets_below_int32_are_not_claimed(tmp_path):
    _recall(tmp_path, "2026-12-02", "a.json", "eager", True)
    data = json.loads((tmp_path / "2026-12-02" / "recall" / "a.json").read_text())
    data["rotation"] = {"error": "no pool"}
    (tmp_path / "2026-12-02" / "recall" / "a.json").write_text(json.dumps(data))
    assert "2**31" not in collect_gpu_evidence(tmp_path)["0.26.0"].summary()


def test_an_unreadable_recall_result_names_its_file(tmp_path):
    (tmp_path / "x" / "recall").mkdir(parents=True)
    (tmp_path / "x" / "recall" / "bad.json").write_text("{")
    with pytest.raises(ComposeError) as err:
        collect_gpu_evidence(tmp_path)
    assert "bad.json" in str(err.value)


def test_the_repository_recall_results_show_both_releases_and_every_fault_caught():
    ev = collect_gpu_evidence(RESULTS)
    for version in ("0.26.0", "0.33.0"):
        eager = ev[version].recall["eager"]
        assert eager.passed and eager.faults == eager.faults_caught == 5 and eager.longest == 131072
        assert eager.past_int32
        assert ev[version].recall["graph_mtp2"].passed
    # the per-layer oracle on v0.26.0 (sm_80 PTX): every suite, eager and graphs, MTP 0 to 2
    for label in ("eager", "mtp1", "mtp2", "graph", "graph_mtp1", "graph_mtp2", "graph_default"):
        outcome = ev["0.26.0"].recall[label]
        assert outcome.passed and outcome.oracle_checks > 900 and outcome.oracle_failed == 0, label
