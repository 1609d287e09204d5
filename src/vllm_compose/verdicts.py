"""The words the stages judge in: a hunk's placement verdict, the audit's verdict and its JSON record, a check's
status and a finding's severity; the vocabulary the placement engine, the audit, the checks, the run's results and
the reports share.

A leaf module: it imports nothing from the package, so the audit and the checks can speak of a verdict without
loading the engine that reaches it, nor the results that hold every stage's report (tests/tool/test_layering.py
holds the audit to that). `results` re-exports these words with its own.
"""

from __future__ import annotations

import enum


class Verdict(enum.StrEnum):
    """What placing one hunk found."""

    EXACT = "exact"  # pre-image found verbatim at the header's line
    OFFSET = "offset"  # pre-image found verbatim, unique, at another line
    RELOCATED = "relocated"  # context partly differs; unique best site in the same scope
    MERGED = "merged"  # target changed lines the hunk does not touch; merged 3-way style
    ALREADY_APPLIED = "already-applied"  # post-image already present (and pre-image not)
    CONFLICT = "conflict"  # not placeable: no site, no unique best site, overlapping change, scope mismatch

    def __str__(self) -> str:
        return self.value


class CheckStatus(enum.StrEnum):
    """The outcome of one check (`checks`)."""

    PASS = "pass"
    FAIL = "fail"
    WARN = "warn"
    SKIPPED = "skipped"  # could not run here (no runtime, --no-checks); never reads as "pass"


class Severity(enum.StrEnum):
    """How bad a check's finding is: an error fails the check, a warning is shown."""

    ERROR = "error"
    WARNING = "warning"


class AuditVerdict(enum.StrEnum):
    """What the audit found for one hunk."""

    EXACT = "exact"  # landed where the engine puts it; pre-image verbatim at the header's line
    OFFSET = "offset"  # landed where the engine puts it; pre-image verbatim at another line
    FUZZY = "fuzzy"  # landed at the engine's unique best site though the context differed
    ALREADY_APPLIED = "already-applied"  # stock (or the earlier patches) already contained the change
    MISPLACED = "misplaced"  # landed elsewhere than the engine's site, or where the engine finds no site
    FAILED = "failed"  # the change is not present in the patched file
    AMBIGUOUS = "ambiguous"  # the engine finds no unique right site

    def __str__(self) -> str:
        return self.value


def hunk_json(h) -> dict:
    """One hunk's record in the apply and the audit JSON reports (`apply.AppliedHunk`, `audit.AuditHunk`): one
    schema, so a reader of either report reads both. Here, in the vocabulary both share, so that the audit's JSON
    needs no renderer (the renderers import the pipeline the audit must stay out of)."""
    return {
        "patch": h.patch,
        "file": h.file,
        "hunk": h.hunk,
        "verdict": h.verdict.value,
        "landed_at": h.landed_at,
        "expected_at": h.expected_at,
        "reason": h.reason,
    }
