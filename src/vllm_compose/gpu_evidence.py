"""What ran on a GPU, per vLLM release: a summary of the result files the device sessions brought back.

`lab/device/collect.py` writes `results.json` files (`{"runs": {label: run}, "verdicts": {label: verdict}}`);
sessions keep them under `lab/results/<session>/`. Each run records the vLLM version it imported, its pipeline
size, MTP depth, scheduling mode, the capability it forced (`VC_FAKE_CAPABILITY`), and whether it finished; each
verdict says whether its tokens and spec-decode counters were as predicted. The status table's GPU column is built
from these files, so it can say no more than the files show.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from .errors import ComposeError


@dataclass(frozen=True, order=True)
class RunConfig:
    """One engine configuration: pipeline size, MTP draft tokens, sync scheduling."""

    pp: int
    mtp: int
    sync: bool = False

    def label(self) -> str:
        text = f"PP{self.pp}" + (f"+MTP{self.mtp}" if self.mtp else "")
        return text + (" sync" if self.sync else "")


@dataclass
class ReleaseEvidence:
    """The GPU runs of one release's compose (stock runs excluded)."""

    version: str
    #: configurations whose run finished and whose verdict, where the run had one, was as predicted
    as_predicted: set[RunConfig] = field(default_factory=set)
    #: configurations that finished with a verdict that was not as predicted
    not_as_predicted: set[RunConfig] = field(default_factory=set)
    #: configurations whose engine did not finish -> the root cause (the log's first exception, else the error)
    failed: dict[RunConfig, str] = field(default_factory=dict)
    #: forced capability ("8.0") -> number of runs; runs without one used the GPU's own (sm_90)
    capabilities: dict[str, int] = field(default_factory=dict)
    sessions: set[str] = field(default_factory=set)
    runs: int = 0
    #: recall-model suites (`recall_run`), label -> the latest result's outcome
    recall: dict[str, RecallOutcome] = field(default_factory=dict)
    #: the current compose's DSA files (`proof.fingerprint.DSA_MODULES` -> sha256, first 16 hex digits), set by whoever
    #: knows the branch (`status`): the recall cell then says whether each run's tree was this compose's
    current_sources: dict[str, str] | None = None

    def summary(self) -> str:
        """One table cell: the configurations, the forced capability and the sessions."""
        parts = []
        if self.as_predicted:
            parts.append("as predicted: " + ", ".join(c.label() for c in sorted(self.as_predicted)))
        if self.not_as_predicted:
            parts.append("NOT as predicted: " + ", ".join(c.label() for c in sorted(self.not_as_predicted)))
        for error in sorted(set(self.failed.values())):
            configs = sorted(c for c, e in self.failed.items() if e == error)
            parts.append(f"FAILED: {', '.join(c.label() for c in configs)} ({error})")
        forced = ", ".join(f"sm_{c.replace('.', '')} paths forced in {n}" for c, n in sorted(self.capabilities.items()))
        sessions = f"{len(self.sessions)} result folder" + ("" if len(self.sessions) == 1 else "s")
        text = f"{'; '.join(parts)} ({self.runs} runs, {forced or 'none forced'}; {sessions})" if self.runs else ""
        if self.recall:
            text = (text + "; " if text else "") + recall_summary(self.recall, self.current_sources)
        return text


@dataclass(frozen=True)
class RecallOutcome:
    """One recall-model suite's latest result: what ran (config, longest context, KV block offsets) and its outcome."""

    label: str
    config: str
    passed: bool
    faults_caught: int
    faults: int
    longest: int
    past_int32: bool
    error: str = ""
    folder: str = ""
    #: per-layer DSA oracle checks made (`engine_oracle`, clean generation) and how many failed; 0 and 0 when the
    #: suite ran without it
    oracle_checks: int = 0
    oracle_failed: int = 0
    #: the DSA files the run imported (`proof.fingerprint.dsa_sources`); empty for results written before it was recorded
    sources: tuple[tuple[str, str], ...] = ()


#: elements of one sparse-MLA KV token (kv_lora 512 + rope 64): the first free block's element offset after the
#: rotation is block id * block size * this
_MLA_TOKEN_ELEMENTS = 576


def _recall_outcome(data: dict, folder: str) -> RecallOutcome:
    suite = data["suite"]
    mode = "eager" if suite.get("eager", True) else "graphs" + ("" if suite.get("compilation") else "+Inductor")
    config = mode + (f"+MTP{suite['mtp']}" if suite.get("mtp") else "")
    fault_checks = [ok for check, ok in data.get("checks", []) if check.startswith("fault ")]
    rotation = data.get("rotation") or {}
    first = rotation.get("first_free_block_id") or 0
    past = first * int(suite.get("block_size", 64)) * _MLA_TOKEN_ELEMENTS >= 2**31
    error = _root_cause([data["error"]]) if data.get("error") else ""
    oracle = data.get("oracle") or {}
    return RecallOutcome(
        suite["label"],
        config,
        bool(data.get("passed")),
        sum(fault_checks),
        len(fault_checks),
        max(suite.get("lengths") or [0]),
        past,
        error,
        folder,
        int(oracle.get("total", 0)),
        int(oracle.get("failed", 0)),
        tuple(sorted((data.get("dsa_sources") or {}).items())),
    )


def tree_provenance(outcomes: list[RecallOutcome], current: dict[str, str] | None) -> str:
    """Which tree the runs imported, against the current compose's DSA files: "this compose's", "an earlier
    compose's" (a file differs), "not recorded" (results from before `dsa_sources`), or a mix of them by suite."""

    def one(o: RecallOutcome) -> str:
        if not o.sources:
            return "not recorded"
        if current is None:
            return "recorded, not compared"
        return "this compose's" if dict(o.sources) == current else "an earlier compose's"

    kinds: dict[str, list[str]] = {}
    for o in outcomes:
        kinds.setdefault(one(o), []).append(o.label)
    if len(kinds) == 1:
        return f"DSA files: {next(iter(kinds))}"
    return "DSA files: " + "; ".join(f"{k} ({', '.join(sorted(v))})" for k, v in sorted(kinds.items()))


def recall_summary(outcomes: dict[str, RecallOutcome], current: dict[str, str] | None = None) -> str:
    """The recall model's part of a GPU cell: configurations as predicted (faults caught), and failures; the result
    folders and whether the runs' DSA files were the current compose's (`tree_provenance`)."""
    ok = [o for o in outcomes.values() if o.passed]
    bad = [o for o in outcomes.values() if not o.passed]
    parts = []
    if ok:
        items = []
        for o in ok:
            notes = [f"{o.faults_caught} of {o.faults} faults caught"] if o.faults else []
            if o.oracle_checks:
                notes.append(f"{o.oracle_checks:,} per-layer oracle checks agree")
            items.append(o.config + (f" ({', '.join(notes)})" if notes else ""))
        longest = max(o.longest for o in ok)
        past = ", KV offsets past 2**31" if all(o.past_int32 for o in ok) else ""
        parts.append(f"as predicted: {', '.join(sorted(items))} (contexts to {longest:,}{past})")
    for o in sorted(bad, key=lambda o: o.config):
        parts.append(f"FAILED: {o.config} ({o.error or 'a check did not hold'})")
    everything = list(outcomes.values())
    folders = ", ".join(sorted({o.folder for o in everything if o.folder}))
    where = (
        f"[{folders}; {tree_provenance(everything, current)}]"
        if folders
        else f"[{tree_provenance(everything, current)}]"
    )
    return "recall model at GLM-5's per-layer shape: " + "; ".join(parts) + " " + where


def _collect_recall(results_dir: Path, evidence: dict[str, ReleaseEvidence]) -> None:
    """Recall-model results (`*/recall/*.json`, written by `recall_run`): per version and suite, the latest
    folder's, a pass outranking a failure within a folder."""
    for path in sorted(results_dir.glob("*/recall/*.json")):
        version, outcome = _read(
            path,
            lambda data, folder=path.parent.parent.name: (data.get("vllm_version"), _recall_outcome(data, folder)),
            "a recall result",
            "recall results are written by vllm-compose prove / lab/device/prove.py; fix or remove this one",
        )
        if not version:
            continue  # the engine never imported vLLM: nothing about a release
        ev = evidence.setdefault(version, ReleaseEvidence(version))
        old = ev.recall.get(outcome.label)
        if old is None or (outcome.folder, outcome.passed) >= (old.folder, old.passed):
            ev.recall[outcome.label] = outcome


def _read(path: Path, parse, what: str, hint: str):
    """`parse` of the JSON in `path`; a file that cannot be read or parsed is a ComposeError naming it."""
    try:
        return parse(json.loads(path.read_text()))
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ComposeError(f"cannot read {what}: {exc}", file=str(path), hint=hint) from None


def _verdict_ok(verdict: dict | None) -> bool:
    if not verdict:
        return True  # a run without a prediction (e.g. random weights) counts as finished, not as checked
    checks = [v for k, v in verdict.items() if isinstance(v, bool) and (k.endswith("as_predicted") or k == "ok")]
    return all(checks)


def _root_cause(errors: list[str]) -> str:
    """The first exception that is not the driver's "see root cause above", cut to one short line."""
    causes = [e for e in errors if "See root cause above" not in e] or errors
    return causes[0].splitlines()[0][:120]


#: within one session, the outcome that stands for a configuration run more than once: a pass outranks a wrong
#: prediction, which outranks a failure (a session's own notes say why an earlier run of it failed: a set-up error)
_RANK = {"failed": 0, "not_as_predicted": 1, "as_predicted": 2}


def collect_gpu_evidence(results_dir: Path) -> dict[str, ReleaseEvidence]:
    """Per vLLM version: the composed-tree runs found in `results_dir/*/*results.json`.

    Each configuration shows one outcome: that of its latest session (session folders sort by date, as
    `lab/results/` names them), and within that session the best one (`_RANK`). So a failure a later session
    fixed is gone, and a failure after a pass shows."""
    results_dir = Path(results_dir)
    evidence: dict[str, ReleaseEvidence] = {}
    #: (version, config) -> ((session, rank), outcome, root cause)
    latest: dict[tuple[str, RunConfig], tuple[tuple[str, int], str, str]] = {}
    for path in sorted(results_dir.glob("*/*results.json")):
        runs, verdicts = _read(
            path,
            lambda data: (data["runs"], data.get("verdicts", {})),
            "GPU results",
            "results files are written by lab/device/collect.py; fix or remove this one",
        )
        session = path.parent.name
        for label, run in runs.items():
            if label.startswith("stock") or "vllm_version" not in run:
                continue
            version = run["vllm_version"]
            ev = evidence.setdefault(version, ReleaseEvidence(version))
            config = RunConfig(int(run.get("pp", 1)), int(run.get("mtp", 0)), bool(run.get("sync_scheduling")))
            cause = ""
            if not run.get("ok"):
                outcome = "failed"
                cause = _root_cause(run.get("log_errors") or [run.get("error") or "no error recorded"])
            elif _verdict_ok(verdicts.get(label)):
                outcome = "as_predicted"
            else:
                outcome = "not_as_predicted"
            key = (session, _RANK[outcome])
            if (version, config) not in latest or key >= latest[version, config][0]:
                latest[version, config] = (key, outcome, cause)
            capability = (run.get("env") or {}).get("VC_FAKE_CAPABILITY")
            if capability:
                ev.capabilities[capability] = ev.capabilities.get(capability, 0) + 1
            ev.sessions.add(session)
            ev.runs += 1
    for (version, config), (_key, outcome, cause) in latest.items():
        ev = evidence[version]
        if outcome == "failed":
            ev.failed[config] = cause
        else:
            getattr(ev, outcome).add(config)
    _collect_recall(results_dir, evidence)
    return evidence
