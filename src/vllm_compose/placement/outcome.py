"""What placing returns: the verdict for one hunk with its evidence (`Placement`), and for one file (`FilePlacement`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

from ..patchfile import FilePatch, Hunk
from ..scope import Scope
from ..verdicts import Verdict


class CandidateSite(NamedTuple):
    """One site the pre-image has in the target, as a conflict's evidence and a reject file list it."""

    #: 1-based target line of the first pre-image line that agrees there
    line: int
    #: alignment score, 0..1
    score: float
    #: why the hunk does not go there on this site's own merits ("" for a site acceptable alone)
    note: str = ""


@dataclass(frozen=True)
class Site:
    """The target lines a hunk lies on at the site the engine took for it."""

    #: 0-based half-open window [start, end) of target lines: from the first to the last line a pre-image line
    #: agrees with, the target's own lines between them included
    start: int
    end: int
    #: how many of the hunk's context lines lie before / after the window: the target has no lines for them there
    head: int = 0
    tail: int = 0


@dataclass
class Placement:
    """The verdict for one hunk, with evidence.

    Line numbers are 1-based and refer to the target file *before* any hunk of this file was applied.
    """

    hunk: Hunk
    verdict: Verdict
    #: 0-based half-open window [start, end) of target lines the hunk replaces; None for a conflict
    start: int | None = None
    end: int | None = None
    #: the lines that replace target[start:end] (already merged); None for a conflict / already-applied
    replacement: list[str] | None = None
    #: 1-based target line where the hunk's first change lands (or where it would, for already-applied)
    landing_line: int | None = None
    #: enclosing class/def chain and syntactic role at the landing site (None for non-Python files)
    scope: Scope | None = None
    #: human-readable explanation: scores, candidate sites, what differed, why rejected
    evidence: str = ""
    #: alignment score of the chosen site, 0..1 (1 = every pre-image line agreed exactly)
    score: float = 0.0
    #: other candidate sites considered, best first
    candidates: list[CandidateSite] = field(default_factory=list)
    #: whether the file ends with a newline after this hunk (None: the hunk does not touch the end of the file)
    eof_newline: bool | None = None
    #: the site the engine took for the hunk, placed there or not: a conflict with a site is one it cannot merge
    #: there (both sides changed the same place, no one indentation, partly applied, overlapping another hunk, the
    #: file no longer parses). None for a conflict the engine took no site for (none, none in the right scope, too
    #: little agreement, ambiguous: it is `refused`), and for a hunk placed other than by its context
    site: Site | None = None

    @property
    def ok(self) -> bool:
        return self.verdict is not Verdict.CONFLICT

    @property
    def refused(self) -> bool:
        """A conflict without a site: nothing says where the hunk belongs, so no conflict markers go anywhere."""
        return self.verdict is Verdict.CONFLICT and self.site is None

    def to_json(self) -> dict:
        """The placement as a JSON-ready dict (hunk numbered as GNU patch numbers it)."""
        return {
            "hunk": self.hunk.index,
            "verdict": self.verdict.value,
            "landing_line": self.landing_line,
            "scope": self.scope.to_json() if self.scope else None,
            "score": round(self.score, 3),
            "evidence": self.evidence,
        }


@dataclass
class FilePlacement:
    """The result of placing all hunks of one `FilePatch` onto one target file."""

    file_patch: FilePatch
    placements: list[Placement]
    #: the new file text (None when the patch deletes the file or nothing could be applied)
    new_text: str | None
    #: set when the merged Python file no longer parses: "line N: message"
    parse_error: str | None = None
    #: hunk index -> 1-based (first, last) line of what it wrote in `new_text` (last = first - 1: it only removed)
    spans: dict[int, tuple[int, int]] = field(default_factory=dict)

    @property
    def conflicts(self) -> list[Placement]:
        return [p for p in self.placements if p.verdict is Verdict.CONFLICT]
