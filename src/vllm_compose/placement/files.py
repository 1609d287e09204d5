"""A whole file around its hunks: the patches that need no hunk placed (a new, missing or deleted file), hunks that
overlap, and the assembly of the placed hunks into the file's new text."""

from __future__ import annotations

import hashlib

from ..patchfile import FilePatch, join_lines
from ..verdicts import Verdict
from .outcome import FilePlacement, Placement, Site
from .target import Target, norm_text, strip_cr


def onto_no_file(file_patch: FilePatch, path: str) -> FilePlacement:
    """The patch placed where the target has no file: a new file is created from the post-image, a deleted one is
    already gone, any other patch has nothing to go into."""
    hunks = file_patch.hunks
    if file_patch.is_new:
        lines: list[str] = []
        placements = []
        for h in hunks:
            placements.append(
                Placement(
                    h,
                    Verdict.EXACT,
                    start=len(lines),
                    end=len(lines),
                    replacement=list(h.added),
                    landing_line=len(lines) + 1,
                    evidence="new file",
                    score=1.0,
                )
            )
            lines.extend(h.added)
        final_nl = not (hunks and hunks[-1].new_no_newline)
        spans = {p.hunk.index: (p.start + 1, p.start + len(p.replacement)) for p in placements}
        return FilePlacement(file_patch, placements, join_lines(lines, final_nl) if hunks else "", spans=spans)
    if file_patch.is_delete:
        return FilePlacement(
            file_patch,
            [Placement(h, Verdict.ALREADY_APPLIED, evidence="the file is already gone") for h in hunks],
            None,
        )
    return FilePlacement(
        file_patch,
        [Placement(h, Verdict.CONFLICT, evidence=f"{path} does not exist in the target") for h in hunks],
        None,
    )


def onto_whole_file(file_patch: FilePatch, target_text: str, lines: list[str], path: str) -> FilePlacement:
    """A patch that creates or deletes the file, placed where the target has one (its `lines`): already applied when
    the file is the patch's content, deleted when it is exactly what the patch removes, else a conflict."""
    hunks = file_patch.hunks
    if file_patch.is_new:
        post = [x for h in hunks for x in h.added]
        if [norm_text(x) for x in post] == [norm_text(x) for x in lines]:
            return _each_hunk(
                file_patch,
                target_text,
                Verdict.ALREADY_APPLIED,
                "the file already exists with the patch's content",
                landing_line=1,
            )
        return _each_hunk(
            file_patch,
            target_text,
            Verdict.CONFLICT,
            f"the patch creates {path}, but the target already has a different file there",
            site=Site(0, len(lines)),  # both sides made the file: the whole file is the place
        )
    pre = [x for h in hunks for x in h.pre_image]
    if [strip_cr(x) for x in pre] == [strip_cr(x) for x in lines]:
        return _each_hunk(
            file_patch,
            None,
            Verdict.EXACT,
            "deleted file matches the patch exactly",
            deletes=len(lines),
            landing_line=1,
            score=1.0,
        )
    return _each_hunk(
        file_patch,
        target_text,
        Verdict.CONFLICT,
        f"the patch deletes {path}, but the target's content differs from what the patch removes",
        site=Site(0, len(lines)),
    )


def _each_hunk(
    file_patch: FilePatch, new_text: str | None, verdict: Verdict, evidence: str, deletes: int | None = None, **fields
) -> FilePlacement:
    """The one verdict of every hunk of a patch placed as a whole file.  deletes: the file's line count, when each
    hunk replaces all of its lines with none."""
    placements = []
    for h in file_patch.hunks:
        if deletes is not None:
            fields.update(start=0, end=deletes, replacement=[])  # a list of its own for each hunk
        placements.append(Placement(h, verdict, evidence=evidence, **fields))
    return FilePlacement(file_patch, placements, new_text)


def is_own_base(file_patch: FilePatch, target_text: str) -> bool:
    """Whether the target is the very file the patch was made from: its git blob id is the one the diff's ``index``
    line names."""
    return file_patch.old_blob is not None and _blob_id(target_text).startswith(file_patch.old_blob.lower())


def _blob_id(text: str) -> str:
    """The git blob id of a file with this text."""
    data = text.encode("utf-8", "surrogateescape")
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def to_conflict(p: Placement, why: str) -> None:
    """Turn a placed hunk into a conflict, keeping what it was in its evidence and its site (the engine took it:
    the hunk cannot go there for another reason)."""
    p.evidence = f"{why}; was: {p.verdict.value}: {p.evidence}"
    p.verdict = Verdict.CONFLICT
    p.replacement = None
    if p.site is None and p.start is not None:  # placed other than by its context: its changed lines only
        p.site = Site(p.start, p.end if p.end is not None else p.start, p.hunk.leading_context, p.hunk.trailing_context)


def resolve_overlaps(placements: list[Placement]) -> None:
    """Turn into conflicts the placed hunks that overlap an earlier hunk's target lines (the earlier one stays)."""
    taken: list[tuple[int, int, int]] = []
    for p in placements:
        if p.verdict is Verdict.CONFLICT or p.replacement is None or p.start is None:
            continue
        s, e = p.start, p.end
        clash = None
        for ts, te, idx in taken:
            if (s < te and ts < e) or (s == e and ts < s < te) or (ts == te and s < ts < e):
                clash = idx
                break
        if clash is not None:
            to_conflict(p, f"overlaps hunk {clash}, placed at the same target lines")
            continue
        taken.append((s, e, p.hunk.index))


def assemble(
    tgt: Target, final_nl: bool, placements: list[Placement]
) -> tuple[str, list[tuple[Placement, tuple[int, int]]]]:
    """Apply the placed hunks; returns the text and each applied placement's 1-based line span in it."""
    applied = sorted(
        (p for p in placements if p.verdict is not Verdict.CONFLICT and p.replacement is not None),
        key=lambda p: (p.start, p.end, p.hunk.index),
    )
    out: list[str] = []
    regions: list[tuple[Placement, tuple[int, int]]] = []
    pos = 0
    eof = final_nl
    for p in applied:
        out.extend(tgt.lines[pos : p.start])
        s = len(out) + 1
        out.extend(p.replacement)
        regions.append((p, (s, len(out))))
        pos = p.end
        if p.eof_newline is not None:
            eof = p.eof_newline
    out.extend(tgt.lines[pos:])
    return join_lines(out, eof), regions
