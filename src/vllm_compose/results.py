"""Typed results of a compose, from the first stage to the last: enums for every verdict and status, dataclasses for
what happened to each hunk, each entry and the run, and the resumable run state.

Inside the package results stay objects (a `CheckReport`, an `AuditReport`, an `EntryStatus`); JSON is produced
once, at the edge, by the `to_json` methods the CLI calls when it writes `--json` (and by `RunState.to_json` when
the state is stored in its ref). Every enum is a `StrEnum`: its value is the word the JSON reports and the
renderers print, so neither changes when a comparison in the code becomes an enum comparison.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from .errors import ExitCode, RepositoryError
from .verdicts import AuditVerdict, CheckStatus, Severity, hunk_json
from .verdicts import Verdict as HunkVerdict

if TYPE_CHECKING:
    from .audit import AuditReport
    from .checks import CheckReport
    from .review import Landing, Review

__all__ = [
    "AuditVerdict",
    "CheckStatus",
    "ComposeResult",
    "ComposeStatus",
    "EntryOutcome",
    "EntryStatus",
    "HunkOutcome",
    "HunkVerdict",
    "Method",
    "OverlayStatus",
    "RunState",
    "Severity",
    "hunk_json",
]


class EntryStatus(enum.StrEnum):
    """What happened to one series entry on a tag."""

    APPLIED = "applied"  # its commit is on the branch
    DROPPED_UPSTREAM = "dropped-upstream"  # the release already has it: no commit
    PARTLY_UPSTREAM = "partly-upstream"  # some hunks are in the release, others not: stops the run for a person
    CONFLICT = "conflict"  # some hunk cannot be placed: stops the run
    SKIPPED = "skipped"  # its `tags` exclude this release, or it goes with an entry not applied (resolves, requires)
    NOT_REACHED = "not-reached"  # an earlier entry stopped the run


#: entry statuses that stop a compose at that entry
STOPPING = frozenset({EntryStatus.CONFLICT, EntryStatus.PARTLY_UPSTREAM})


class ComposeStatus(enum.StrEnum):
    """How a compose run ended."""

    COMPOSED = "composed"
    CONFLICT = "conflict"
    REFUSED = "refused"


class Method(enum.StrEnum):
    """How an entry's hunks were put on the tree."""

    PLACEMENT = "placement"  # the placement engine, hunk by hunk
    MERGE = "3-way merge"  # git's merge of the entry's pinned commits, file by file


class OverlayStatus(enum.StrEnum):
    """How composing onto an installed vLLM (`artifacts.image`) ended."""

    INSTALLED = "installed"
    DRY_RUN = "dry-run"
    CONFLICT = "conflict"
    REFUSED = "refused"


@dataclass
class HunkOutcome:
    """What happened to one hunk of an entry."""

    file: str
    hunk: int
    verdict: HunkVerdict
    landing_line: int | None = None
    scope: str | None = None
    evidence: str = ""
    #: a later series entry that carries this (conflicting) hunk in its own form
    resolved_by: str | None = None
    #: 1-based (first, last) line of what the hunk wrote in the entry commit's file (last = first - 1: it only
    #: removed); None when it wrote nothing there (conflict, carried, already applied, 3-way merge)
    span: tuple[int, int] | None = None

    def to_json(self) -> dict:
        d = {"file": self.file, "hunk": self.hunk, "verdict": str(self.verdict), "landing_line": self.landing_line}
        if self.scope:
            d["scope"] = self.scope
        if self.resolved_by:
            d["resolved_by"] = self.resolved_by
        if self.evidence:
            d["evidence"] = self.evidence
        return d


@dataclass
class EntryOutcome:
    """What happened to one series entry on this tag."""

    id: str
    title: str
    status: EntryStatus
    reason: str = ""
    commit: str | None = None
    method: Method | str = ""  # "" for entries never replayed (skipped, not reached)
    hunks: list[HunkOutcome] = field(default_factory=list)
    #: the checks of this entry's commit against its parent (None: not run)
    checks: CheckReport | None = None
    #: the audit of this entry's commit against its parent (None: not run)
    audit: AuditReport | None = None
    #: its hunks that landed relocated or merged, for a person to review (`review`)
    landings: list[Landing] = field(default_factory=list)
    #: what `--allow-unreviewed` let through in this entry (a fix outside its `written_for`); in its commit too
    review_override: str | None = None

    def verdict_counts(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for h in self.hunks:
            counts[h.verdict] = counts.get(h.verdict, 0) + 1
        return counts

    def to_json(self) -> dict:
        d = {
            "id": self.id,
            "title": self.title,
            "status": str(self.status),
            "reason": self.reason,
            "commit": self.commit,
            "method": str(self.method),
            "hunks": [h.to_json() for h in self.hunks],
        }
        if self.checks is not None:
            d["checks"] = self.checks.to_json()
        if self.audit is not None:
            d["audit"] = self.audit.to_json()
        if self.landings:
            d["landings"] = [x.to_json() for x in self.landings]
        if self.review_override:
            d["review_override"] = self.review_override
        return d


@dataclass
class BuildSetup:
    """The build-setup commit a compose ends its branch with (`precompiled`), or why there is none."""

    #: the commit id; None when the release got no build setup (then `message` says why)
    commit: str | None
    message: str
    #: the version `pip install -e` gives the tree
    version: str | None = None
    #: architecture -> the pinned stock wheel (filename, size, sha256, url)
    wheels: dict | None = None

    def to_json(self) -> dict:
        return {"commit": self.commit, "message": self.message, "version": self.version, "wheels": self.wheels}


@dataclass
class ComposeResult:
    """The outcome of a compose run; `exit_code` follows the documented contract."""

    branch: str
    tag: str
    status: ComposeStatus
    base: str | None = None
    head: str | None = None
    entries: list[EntryOutcome] = field(default_factory=list)
    message: str = ""
    #: the conflict worktree a stopped run wrote, absolute (None: none was written)
    worktree: str | None = None
    #: its reject files (relative to it): one per file with hunks the engine took no site for, which have no markers
    rejects: list[str] = field(default_factory=list)
    accepted_failures: list[str] = field(default_factory=list)
    #: the checks of the whole composed tree against the release (what decides a refusal)
    final_checks: CheckReport | None = None
    #: the branch's last commit, after the entries: `pip install -e` over the precompiled stock wheel
    build_setup: BuildSetup | None = None
    #: the relocated and merged landings and their approvals (None: the compose did not get that far)
    review: Review | None = None
    #: other compose branches of the same release in the repository (an earlier series' PR set), not updated
    other_branches: list[str] = field(default_factory=list)

    @property
    def exit_code(self) -> ExitCode:
        return {
            ComposeStatus.COMPOSED: ExitCode.OK,
            ComposeStatus.CONFLICT: ExitCode.CONFLICT,
            ComposeStatus.REFUSED: ExitCode.REFUSED,
        }[self.status]

    def to_json(self) -> dict:
        return {
            "branch": self.branch,
            "tag": self.tag,
            "status": str(self.status),
            "message": self.message,
            "base": self.base,
            "head": self.head,
            "worktree": self.worktree,
            "rejects": self.rejects,
            "accepted_failures": self.accepted_failures,
            "final_checks": self.final_checks.to_json() if self.final_checks is not None else None,
            "build_setup": self.build_setup.to_json() if self.build_setup is not None else None,
            "review": self.review.to_json() if self.review is not None else None,
            "other_branches": self.other_branches,
            "entries": [e.to_json() for e in self.entries],
        }


@dataclass
class RunState:
    """A compose stopped at an entry, waiting for a person: stored as JSON under `gitstore.STATE_REF` (versioned by
    `gitstore.STATE_FORMAT`), read back by `--continue` and `--abort`."""

    tag: str
    branch: str
    #: the series folder, absolute (`--continue` may run from another directory)
    series: str
    #: the id of the entry that stopped the run
    entry: str
    #: the last entry commit made before it (kept reachable by the wip ref)
    head: str
    #: the conflict worktree, absolute; None when none was written (a partly-upstream stop, a 3-way merge)
    worktree: str | None
    #: path -> sha256 of each file written into the worktree (abort keeps the folder when one was edited)
    written: dict[str, str]
    #: the hunks that conflicted and no later entry carries: (path, hunk number)
    conflicts: list[tuple[str, int]]

    def to_json(self) -> dict:
        return {
            "tag": self.tag,
            "branch": self.branch,
            "series": self.series,
            "entry": self.entry,
            "head": self.head,
            "worktree": self.worktree,
            "written": self.written,
            "conflicts": [{"file": path, "hunk": n} for path, n in self.conflicts],
        }

    @classmethod
    def from_json(cls, doc: dict) -> RunState:
        """The state as `to_json` stored it; a `RepositoryError` when a field is missing or of the wrong type."""
        try:
            return cls(
                tag=str(doc["tag"]),
                branch=str(doc["branch"]),
                series=str(doc["series"]),
                entry=str(doc["entry"]),
                head=str(doc["head"]),
                worktree=str(doc["worktree"]) if doc.get("worktree") else None,
                written={str(k): str(v) for k, v in (doc.get("written") or {}).items()},
                conflicts=[(str(c["file"]), int(c["hunk"])) for c in doc.get("conflicts") or []],
            )
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise RepositoryError(
                f"the stored compose state lacks or garbles {exc}",
                hint="drop it with --abort (or `git update-ref -d refs/vllm-compose/state`) and compose again",
            ) from None
