"""Where a hunk belongs in a target file, and the 3-way-style merge that puts it there.

A hunk is placed without a base tree.  Its *pre-image* (context and removed lines) is what the patch author's file
looked like; its *post-image* (context and added lines) is what the author wanted; the target file is what we have.

One hunk (`place_hunk`), strategy by strategy, each in its own module:

1. by its context (`choice`): the sites its pre-image has in the target (`search`), each with the merge plan that
   would put the hunk there (`plan`, with the `containers` rules for insertions both sides made in one container)
   and, for Python, the check that the site's scope agrees with the hunk's (`scope_check`); the best acceptable site
   wins when it is unique, else the post-image is looked for (already applied), else a conflict;
2. a conflict by context whose only change adds imports at module level: into the target's import block (`imports`);
3. one whose only change adds a parameter to a signature: into that function's signature (`signatures`).

A refusal anywhere says why in one typed form (`refusal.Refusal`), which the conflict's evidence quotes.

One file (`place_file`): hunks are placed independently against the original target, then applied together;
overlapping hunks conflict (`files`).  A Python result that no longer parses (when the target did) turns the hunks
whose new lines contain the error into conflicts, and the file is re-assembled without them (all placed hunks, when
the error lies outside every hunk; `parse_check`).  New files are created from the post-image; a deleted file's
pre-image must match exactly.

Verdicts (`verdicts.Verdict`): ``exact`` (verbatim at the header's line), ``offset`` (verbatim elsewhere),
``relocated`` (only whitespace/line-end/indentation differs), ``merged`` (the target has missing, changed or extra
lines in the window), ``already-applied``, ``conflict``.
"""

from __future__ import annotations

from ..patchfile import FilePatch, Hunk, split_lines
from ..verdicts import Verdict
from .choice import place_by_context
from .files import is_own_base, onto_no_file, onto_whole_file, resolve_overlaps
from .imports import place_imports
from .outcome import CandidateSite, FilePlacement, Placement, Site
from .parse_check import assemble_parsable
from .signatures import place_signature
from .target import Target, indexed_target

__all__ = ["CandidateSite", "FilePlacement", "Placement", "Site", "Verdict", "place_file", "place_hunk"]


def place_hunk(hunk: Hunk, target_lines: list[str], path: str) -> Placement:
    """Decide where `hunk` belongs in `target_lines` (a file's lines without line ends) and merge it there."""
    return _place(hunk, indexed_target(target_lines, path))


def _place(hunk: Hunk, tgt: Target, own_base: bool = False) -> Placement:
    """One hunk, by its context, then (a Python conflict) by the import-only and the signature-only fallbacks."""
    placed = place_by_context(hunk, tgt, own_base)
    if placed.verdict is Verdict.CONFLICT and tgt.is_py:
        # an import-only hunk the context cannot place still has a place: the target's import block
        fallback = place_imports(hunk, tgt)
        if fallback is None:
            # a hunk that adds a parameter to a signature still has a place: that function's signature
            fallback = place_signature(hunk, tgt)
        if fallback is not None:
            fallback.candidates = placed.candidates
            fallback.evidence = f"{fallback.evidence}; by context: {placed.evidence}"
            return fallback
    return placed


def place_file(file_patch: FilePatch, target_text: str | None, path: str | None = None) -> FilePlacement:
    """Place every hunk of `file_patch` onto `target_text` (None: the file does not exist) and apply the
    non-conflicting ones. Conflicting hunks are left out of `new_text`; a Python result that no longer parses turns
    every placed hunk of the file into a conflict whose evidence shows the parse error."""
    path = path or file_patch.path
    if target_text is None:
        return onto_no_file(file_patch, path)
    lines, final_nl = split_lines(target_text)
    if file_patch.is_new or file_patch.is_delete:
        return onto_whole_file(file_patch, target_text, lines, path)
    tgt = indexed_target(lines, path)
    own_base = is_own_base(file_patch, target_text)
    placements = [_place(h, tgt, own_base) for h in file_patch.hunks]
    resolve_overlaps(placements)
    text, regions, perr = assemble_parsable(tgt, final_nl, placements, target_text, path)
    return FilePlacement(file_patch, placements, text, perr, {p.hunk.index: span for p, span in regions})
