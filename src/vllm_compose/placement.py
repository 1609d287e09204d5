"""Where a hunk belongs in a target file, and the 3-way-style merge that puts it there.

INTERFACE DRAFT (to be implemented): the dataclasses and signatures below are the contract other modules
(replay, apply, audit) code against.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from .patchfile import FilePatch, Hunk
from .scope import Scope


class Verdict(str, enum.Enum):
    """What placing one hunk found."""

    EXACT = "exact"  # pre-image found verbatim at the header's line
    OFFSET = "offset"  # pre-image found verbatim, unique, at another line
    RELOCATED = "relocated"  # context partly differs; unique best site in the same scope
    MERGED = "merged"  # target changed lines the hunk does not touch; merged 3-way style
    ALREADY_APPLIED = "already-applied"  # post-image already present (and pre-image not)
    CONFLICT = "conflict"  # not placeable: no site, no unique best site, overlapping change, scope mismatch

    def __str__(self) -> str:
        return self.value


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
    #: other candidate sites considered (1-based lines) with their scores, best first
    candidates: list[tuple[int, float]] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.verdict is not Verdict.CONFLICT


@dataclass
class FilePlacement:
    """The result of placing all hunks of one `FilePatch` onto one target file."""

    file_patch: FilePatch
    placements: list[Placement]
    #: the new file text (None when the patch deletes the file or nothing could be applied)
    new_text: str | None
    #: set when the merged Python file no longer parses: "line N: message"
    parse_error: str | None = None

    @property
    def conflicts(self) -> list[Placement]:
        return [p for p in self.placements if p.verdict is Verdict.CONFLICT]


def place_hunk(hunk: Hunk, target_lines: list[str], path: str) -> Placement:
    """Decide where `hunk` belongs in `target_lines` (a file's lines without line ends) and merge it there."""
    raise NotImplementedError


def place_file(file_patch: FilePatch, target_text: str | None, path: str | None = None) -> FilePlacement:
    """Place every hunk of `file_patch` onto `target_text` (None: the file does not exist) and apply the
    non-conflicting ones. Conflicting hunks are left out of `new_text`; a Python result that no longer parses turns
    every placed hunk of the file into a conflict whose evidence shows the parse error."""
    raise NotImplementedError
