"""What the Ampere gate must reach per release: the recorded launch counts, and the check that makes them part of the
verdict.

A gate that compiles what it derived passes just as well when it derived less. The derivation executes the release's
Python, so its reach depends on what that code sees; in the tool's own environment (`gate_env`) that is only the
release's tree and the pinned torch and Triton, and the counts are a function of the two. They are recorded here per
release and tree (`composed`: the compose branch; `stock`: the release tag) in `gate_coverage.json` beside
this module, per target: the distinct specializations, each driver's launches, each kernel's specializations.

A run that derives a different count fails, naming the driver or kernel and the two numbers:

* fewer: the derivation did not reach what it reached when it was recorded. With the same tree, that is the
  environment (another torch or Triton, a vLLM or its `.so` files importable beside the tree, `VLLM_*` settings);
  with another tree, a change of the DSA path that must be looked at before the record is lowered.
* more: the tree or the drivers changed and the record no longer says what the gate covers. It fails too: a record
  left below the gate's reach would let a later loss of exactly that surplus pass. After review,
  `vllm-compose ampere-gate --onto TAG [--stock] --record-coverage` writes the new counts.

A release without a record (a new one) is gated without the check and says so ("coverage unrecorded").
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import ComposeError

#: the record, shipped with the package (the gate's drivers and pins live here too)
RECORD_FILE = Path(__file__).with_name("gate_coverage.json")
RECORD_FORMAT = 1
#: the trees of a release that have a record
KINDS = ("composed", "stock")


def record_command(tag: str, kind: str) -> str:
    return f"vllm-compose ampere-gate --onto {tag}{' --stock' if kind == 'stock' else ''} --record-coverage"


def counts_of(report) -> dict[str, dict[str, Any]]:
    """An `AmpereGateReport`'s counts per target: distinct specializations, launches per driver that ran, and
    specializations per kernel."""
    out: dict[str, dict[str, Any]] = {}
    for target, outcomes in report.drivers.items():
        out[target] = {
            "specializations": report.derived.get(target, 0),
            "drivers": {o.driver: o.launches for o in outcomes if o.status == "ran"},
            "kernels": {
                f"{k.module}.{k.qualname}": k.specializations for k in report.kernels if f"sm_{k.target}" == target
            },
        }
    return out


@dataclass(frozen=True)
class CountDifference:
    """One count that differs from the record."""

    target: str
    #: "specializations" (the target's total), "driver" (launches) or "kernel" (specializations)
    what: str
    name: str
    recorded: int
    derived: int

    @property
    def fewer(self) -> bool:
        return self.derived < self.recorded

    def line(self) -> str:
        unit = "launches" if self.what == "driver" else "specializations"
        subject = f"{self.what} {self.name!r}" if self.what != "specializations" else "in all"
        return f"{self.target}: {subject} derived {self.derived} {unit}, the record says {self.recorded}"


@dataclass
class CoverageCheck:
    """A gate run's counts against the record of its release and tree."""

    tag: str
    kind: str
    #: False: the record has no entry for this release and tree (nothing to compare)
    recorded: bool
    differences: list[CountDifference] = field(default_factory=list)
    #: the pinned versions the record was made with, when they are not the gate's pins now
    stale_tools: dict[str, str] | None = None
    #: the versions the run used (the gate environment's)
    tools: dict[str, str] = field(default_factory=dict)

    @property
    def fewer(self) -> list[CountDifference]:
        return [d for d in self.differences if d.fewer]

    @property
    def more(self) -> list[CountDifference]:
        return [d for d in self.differences if not d.fewer]

    @property
    def ok(self) -> bool:
        return not self.differences and self.stale_tools is None

    @property
    def state(self) -> str:
        if self.stale_tools is not None:
            return "record made with other tools"
        if not self.recorded:
            return "unrecorded"
        if self.fewer:
            return "BELOW the record"
        if self.more:
            return "ABOVE the record"
        return "as recorded"

    def lines(self) -> list[str]:
        """The check in the gate's text report: what differs, and what that may mean."""
        key = f"{self.tag} ({self.kind})"
        tools = " / ".join(f"{n} {v}" for n, v in self.tools.items())
        if self.stale_tools is not None:
            was = " / ".join(f"{n} {v}" for n, v in self.stale_tools.items())
            return [
                f"coverage FAIL: the record was made with {was}, the gate now runs {tools}: its counts do not hold",
                f"  re-record every release after review: {record_command(self.tag, self.kind)} (one per release)",
            ]
        if not self.recorded:
            return [
                f"coverage unrecorded: {RECORD_FILE.name} has no counts for {key}; the counts above are not checked",
                f"  record them after review: {record_command(self.tag, self.kind)}",
            ]
        if not self.differences:
            return [f"coverage as recorded for {key} ({tools})"]
        lines = [f"coverage FAIL: {key} derived {'fewer' if self.fewer else 'more'} launches than recorded ({tools})"]
        lines += [f"  {d.line()}" for d in self.fewer + self.more]
        if self.fewer:
            lines.append(
                "  fewer: this run did not reach what the recorded one did. For the recorded tree that is the "
                "environment the derivation ran in (a torch or Triton other than the pinned ones, a vLLM or another "
                "release's .so files importable beside the tree, VLLM_* settings): run the gate as `vllm-compose "
                "ampere-gate`, which uses its own environment. For a changed tree, read what the change did to the "
                "DSA path before lowering the record"
            )
        if self.more:
            lines.append(
                "  more: the tree or the drivers reach further than the record says; the record needs updating "
                f"after review: {record_command(self.tag, self.kind)}"
            )
        return lines

    def to_json(self) -> dict[str, Any]:
        return {
            "tag": self.tag,
            "kind": self.kind,
            "state": self.state,
            "ok": self.ok,
            "recorded": self.recorded,
            "tools": self.tools,
            "stale_tools": self.stale_tools,
            "differences": [
                {"target": d.target, "what": d.what, "name": d.name, "recorded": d.recorded, "derived": d.derived}
                for d in self.differences
            ],
        }


def load_record(path: Path = RECORD_FILE) -> dict[str, Any]:
    """The record file (an empty record when it does not exist); raise `ComposeError` when it cannot be read."""
    if not Path(path).is_file():
        return {"format": RECORD_FORMAT, "tools": {}, "releases": {}}
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError) as exc:
        raise ComposeError(
            f"cannot read the Ampere gate's coverage record: {exc}",
            file=str(path),
            hint="restore it from git (`git checkout -- FILE`), or re-record each release with --record-coverage",
        ) from exc
    if data.get("format") != RECORD_FORMAT or not isinstance(data.get("releases"), dict):
        raise ComposeError(
            f"the Ampere gate's coverage record has format {data.get('format')!r}, not {RECORD_FORMAT}",
            file=str(path),
            hint="restore it from git, or re-record each release with --record-coverage",
        )
    return data


def check(report, tag: str, kind: str, tools: dict[str, str], record: dict[str, Any]) -> CoverageCheck:
    """`report`'s counts against `record`'s for release `tag` and tree `kind`; `tools` are the gate's pinned
    versions (name -> version) the run used."""
    entry = record["releases"].get(tag, {}).get(kind)
    result = CoverageCheck(tag, kind, recorded=entry is not None, tools=dict(tools))
    if entry is None:
        return result
    if record.get("tools") and record["tools"] != result.tools:
        result.stale_tools = dict(record["tools"])
        return result
    derived = counts_of(report)
    for target in sorted(set(entry) | set(derived)):
        want, got = entry.get(target, {}), derived.get(target, {})
        if want.get("specializations", 0) != got.get("specializations", 0):
            result.differences.append(
                CountDifference(
                    target, "specializations", "", want.get("specializations", 0), got.get("specializations", 0)
                )
            )
        for what, section in (("driver", "drivers"), ("kernel", "kernels")):
            a, b = want.get(section, {}), got.get(section, {})
            for name in sorted(set(a) | set(b)):
                if a.get(name, 0) != b.get(name, 0):
                    result.differences.append(CountDifference(target, what, name, a.get(name, 0), b.get(name, 0)))
    return result


def with_counts(record: dict[str, Any], report, tag: str, kind: str, tools: dict[str, str]) -> dict[str, Any]:
    """`record` with `report`'s counts as those of release `tag`'s `kind` tree, made with `tools`. Refuses to mix
    tools: a record holds for one set of pins (re-record the others first, or start from an empty record)."""
    if record.get("tools") and record["tools"] != tools and any(record["releases"].values()):
        others = sorted(t for t in record["releases"] if t != tag)
        if others:
            raise ComposeError(
                f"the coverage record holds counts made with {record['tools']}, this run used {tools}",
                file=str(RECORD_FILE),
                hint=f"re-record all of {', '.join(others)} with the new pins, starting from an empty record",
            )
    releases = {t: dict(v) for t, v in record["releases"].items()}
    releases.setdefault(tag, {})[kind] = counts_of(report)
    return {"format": RECORD_FORMAT, "tools": dict(tools), "releases": dict(sorted(releases.items()))}


def write_record(record: dict[str, Any], path: Path = RECORD_FILE) -> None:
    from ..atomicfile import write_atomically

    write_atomically(path, json.dumps(record, indent=1, sort_keys=True) + "\n")
