"""The words a hunk's placement is judged in: the vocabulary the placement engine, the run's results, the reports and
the audit share.

A leaf module: it imports nothing from the package, so the audit and the renderers can speak of a hunk's verdict
without loading the engine that reaches it (tests/test_audit_fence.py holds the audit to that).
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
