"""Why the engine refuses a site, or the merge at a site: one typed reason, its kind and its words.

A refusal is evidence a person reads (it ends up in a conflict's evidence or a rejected site's note), and a fact the
engine decides on: the kind is what code tests, the detail what the report shows.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass


class RefusalKind(enum.Enum):
    """What kind of disagreement refuses a site or its merge."""

    # the merge plan at a site (`plan.merge_plan`)
    COPIED_CONTEXT = "copied-context"  # the target changed a context line of which the hunk adds a copy
    INTERLEAVED = "interleaved"  # the target has lines of its own inside the lines the hunk removes
    REMOVED_CHANGED = "removed-changed"  # the target changed lines the hunk removes
    REMOVED_GONE = "removed-gone"  # the target no longer has the lines the hunk removes
    SITE_GONE = "site-gone"  # a line the insertion follows was changed or is gone, or its neighbours swapped
    BOTH_CHANGED = "both-changed"  # the target has lines of its own in the gap where the hunk adds lines
    UNANCHORED = "unanchored"  # no line next to the change agrees with the target
    INDENTATION = "indentation"  # no one indentation for the added lines (drift, or tabs against spaces)
    # the container rules (`containers`) and the signature fallback (`signatures`)
    ORDER = "order"  # both sides inserted at one point where order carries meaning: which comes first is a decision
    TAKEN = "taken"  # the target has a parameter of the name the hunk adds, of its own
    # the scope check of a site (`scope_check`)
    INTENT = "intent"  # the site disagrees with what the hunk's lines imply (`scope.HunkIntent`, its own words)
    CONTAINER = "container"  # a line the hunk shows inside the change's brackets is outside the site's brackets
    RESTRUCTURED = "restructured"  # the target moved the site's container, or the elements shown, into a sub-list
    SECTION = "section"  # the `@@` section names a def/class the site does not follow: evidence of order only


#: the kinds whose words start with the kind's name, as `scope.HunkIntent`'s own reasons do (``role: ...``)
_NAMED = frozenset({RefusalKind.CONTAINER, RefusalKind.RESTRUCTURED, RefusalKind.SECTION})


@dataclass(frozen=True)
class Refusal:
    """One reason a site, or the merge at a site, is refused."""

    kind: RefusalKind
    #: what disagrees, in a person's words (lines quoted, target lines numbered 1-based)
    detail: str

    def __str__(self) -> str:
        return f"{self.kind.value}: {self.detail}" if self.kind in _NAMED else self.detail
