"""Replaying one entry: its hunks placed on the current tree (or its pinned commits merged 3-way), its status
decided, its commit written.

`replay_entry(repo, head, entry, patch, carried, tag)` places every hunk of the entry on `head`'s tree and returns an
`EntryReplay`: the changed files, the `EntryOutcome` (status applied / dropped-upstream / partly-upstream /
conflict, every hunk's verdict and evidence), the hunks that conflicted and, for a conflict, the files a person
resolving it starts from (`conflict.conflict_folder`). `commit_entry` writes its commit object (no ref moves).
The stages around it — preflight, checks, audit, publish, a stop for a person — are `compose.Composer`'s.

Commits are reproducible: author and committer date come from the release commit, so composing the same series onto
the same tag twice gives the same commit ids.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field

import pygit2

from . import gitstore
from .conflict import ConflictFolder, conflict_folder
from .errors import PatchFormatError
from .patchfile import FilePatch, Patch, decode_text, encode_text, ends_in_crlf, split_lines
from .placement import FilePlacement, Verdict, place_file, place_hunk
from .results import EntryOutcome, EntryStatus, HunkOutcome, Method
from .review import landings_of_file
from .series import Entry
from .sources import resolve_entry_commits
from .trailers import COMPOSED_BY, REVIEW_OVERRIDE
from .trees import GitTree


@dataclass
class EntryReplay:
    """One entry's content and placement on the current tree."""

    entry: Entry
    patch: Patch
    #: path -> new content (None: deleted) of every file the entry's commit changes
    changes: dict[str, bytes | None]
    #: path -> git file mode, for files whose mode the patch sets
    modes: dict[str, int]
    outcome: EntryOutcome
    #: (path, hunk index, evidence) of the hunks that conflicted and no later entry carries
    open_conflicts: list[tuple[str, int, str]]
    #: what a person resolving the conflict starts from: per file what could be applied, with diff3 markers where
    #: a hunk's site was found, and reject files listing the hunks refused (filled only when the entry stopped on a
    #: conflict)
    folder: ConflictFolder = field(default_factory=ConflictFolder)


def replay_entry(
    repo: pygit2.Repository,
    head: pygit2.Commit,
    entry: Entry,
    patch: Patch,
    carried: dict[tuple[str, str, int], str],
    tag: str,
) -> EntryReplay:
    """Place every hunk of `entry` on `head`'s tree (composing onto `tag`) and classify the entry: a real 3-way
    merge when its pinned commits are in the repository, else the placement engine."""
    span = resolve_entry_commits(entry, repo) if entry.kind == "upstream-pr" else None
    if span is not None:
        return _merge_entry(repo, head, entry, patch, span, carried)
    return _place_entry(repo, head, entry, patch, carried, tag)


def _place_entry(
    repo: pygit2.Repository,
    head: pygit2.Commit,
    entry: Entry,
    patch: Patch,
    carried: dict[tuple[str, str, int], str],
    tag: str,
) -> EntryReplay:
    tree = GitTree(repo, head.tree)
    outcome = EntryOutcome(entry.id, entry.title, EntryStatus.APPLIED, method=Method.PLACEMENT)
    changes: dict[str, bytes | None] = {}
    modes: dict[str, int] = {}
    open_conflicts: list[tuple[str, int, str]] = []
    file_placements: list[tuple[FilePatch, FilePlacement, str | None]] = []
    for fp in patch.files:
        source_path = fp.old_path or fp.new_path
        current = changes[source_path] if source_path in changes else tree.read(source_path)
        text = decode_text(current) if current is not None else None
        _refuse_crlf_onto_lf(entry, fp, text)
        # Hunks a later fix carries are not applied here, whatever the engine would do with them: the series
        # says the fix holds their form for this release. They are still placed, for the report's evidence.
        carrier = {h.index: carried.get((entry.id, fp.path, h.index)) for h in fp.hunks}
        own = dataclasses.replace(fp, hunks=[h for h in fp.hunks if not carrier[h.index]])
        fpl = place_file(own, text, fp.path)
        file_placements.append((fp, fpl, text))
        by_index = {pl.hunk.index: pl for pl in fpl.placements}
        target_lines = split_lines(text)[0] if text is not None else []
        for h in fp.hunks:
            pl = by_index.get(h.index) or place_hunk(h, target_lines, fp.path)
            scope = pl.scope.describe() if pl.scope else None
            ho = HunkOutcome(
                fp.path,
                h.index,
                pl.verdict,
                pl.landing_line,
                scope,
                pl.evidence,
                resolved_by=carrier[h.index],
                span=None if carrier[h.index] else fpl.spans.get(h.index),
            )
            if pl.verdict is Verdict.CONFLICT and not ho.resolved_by:
                open_conflicts.append((fp.path, h.index, pl.evidence))
            outcome.hunks.append(ho)
        outcome.landings += landings_of_file(entry.id, fp.path, fpl, target_lines)
        if not own.hunks and not (fp.is_new or fp.is_delete or fp.is_rename):
            continue
        if fpl.new_text is not None or fp.is_delete:
            new = encode_text(fpl.new_text) if fpl.new_text is not None else None
            if fp.is_rename and fp.old_path and fp.old_path != fp.new_path:
                changes[fp.old_path] = None
            changes[fp.path] = new
            if fp.new_mode in ("100755", "100644"):
                modes[fp.path] = int(fp.new_mode, 8)
    own_hunks = [h for h in outcome.hunks if not h.resolved_by]
    verdicts = [h.verdict for h in own_hunks]
    upstream = [h for h in own_hunks if h.verdict is Verdict.ALREADY_APPLIED]
    shipped = entry.shipped_by(tag)
    if shipped and upstream:
        # Upstream merged the PR, usually in an evolved form: the pinned diff no longer describes the release's
        # code, so re-applying its remaining hunks would duplicate or fight upstream's version.
        outcome.status = EntryStatus.DROPPED_UPSTREAM
        outcome.reason = (
            f"merged upstream: the series says PR #{entry.pr} ships from {entry.upstream_release} "
            f"(upstream_release); evidence in {tag}: {len(upstream)} of {len(verdicts)} hunks are "
            f"present verbatim ({', '.join(f'{h.file.rsplit(chr(47), 1)[-1]}#{h.hunk}' for h in upstream[:6])}"
            f"{', ...' if len(upstream) > 6 else ''}); the others differ (upstream's evolved form)"
        )
        changes = {}
    elif shipped:
        outcome.status = EntryStatus.CONFLICT
        outcome.reason = (
            f"the series says PR #{entry.pr} ships from {entry.upstream_release}, but none of its "
            f"{len(verdicts)} hunks is present in {tag}: check upstream_release"
        )
    elif verdicts and len(upstream) == len(verdicts):
        outcome.status = EntryStatus.DROPPED_UPSTREAM
        outcome.reason = (
            f"all {len(verdicts)} hunks are already in the release (post-images present, pre-images absent)"
        )
        changes = {}
    elif upstream:
        outcome.status = EntryStatus.PARTLY_UPSTREAM
        outcome.reason = (
            f"{len(upstream)} of {len(verdicts)} hunks are already in the release, the others are not: "
            "upstream probably merged an evolved form. Decide per hunk: narrow the entry (source.paths, "
            "tags) or add a skew fix that resolves the rest"
        )
    elif open_conflicts:
        outcome.status = EntryStatus.CONFLICT
        outcome.reason = f"{len(open_conflicts)} hunk(s) cannot be placed: " + "; ".join(
            f"{path} hunk {n}: {evidence.splitlines()[0] if evidence else 'conflict'}"
            for path, n, evidence in open_conflicts[:5]
        )
    else:
        carried_n = sum(1 for h in outcome.hunks if h.resolved_by)
        if carried_n:
            outcome.reason = f"{carried_n} hunk(s) carried by later skew fixes (see resolved_by)"
    step = EntryReplay(entry, patch, changes, modes, outcome, open_conflicts)
    if outcome.status is EntryStatus.CONFLICT:
        step.folder = conflict_folder(entry.id, file_placements)
    return step


def _merge_entry(
    repo: pygit2.Repository,
    head: pygit2.Commit,
    entry: Entry,
    patch: Patch,
    span: tuple[pygit2.Oid, pygit2.Oid],
    carried: dict[tuple[str, str, int], str],
) -> EntryReplay:
    """A real 3-way merge: the PR's base tree, ours = the compose so far, theirs = the PR head.

    A file some of whose hunks a later fix carries keeps our version here (the fix brings the whole file's
    change in its own form); git's merge decides the rest, file by file. Verdicts are per file: every hunk of a
    file gets the file's outcome.
    """
    base_id, pr_head = span
    outcome = EntryOutcome(entry.id, entry.title, EntryStatus.APPLIED, method=Method.MERGE)
    index = gitstore.merge_trees(repo, base_id, head.id, pr_head)
    conflicted = {}
    for ancestor, ours, theirs in index.conflicts or []:
        conflicted[(ours or theirs or ancestor).path] = (ancestor, ours, theirs)
    before = GitTree(repo, head.tree)
    changes: dict[str, bytes | None] = {}
    open_conflicts: list[tuple[str, int, str]] = []
    worktree_files: dict[str, bytes] = {}
    for fp in patch.files:
        path = fp.path
        carrier = next(
            (carried[(entry.id, path, h.index)] for h in fp.hunks if (entry.id, path, h.index) in carried), None
        )
        old = before.read(path)
        if carrier:
            verdict, new = (Verdict.CONFLICT if path in conflicted else Verdict.MERGED), old
        elif path in conflicted:
            verdict = Verdict.CONFLICT
            new = encode_text(gitstore.merge_file(repo, *conflicted[path]))
            open_conflicts += [(path, h.index, "3-way merge conflict") for h in fp.hunks]
        else:
            entry_in_index = index[path] if path in index else None
            new = repo[entry_in_index.id].data if entry_in_index is not None else None
            verdict = Verdict.MERGED if new != old else Verdict.ALREADY_APPLIED
        if not carrier and path not in conflicted and new != old:
            changes[path] = new
        if new is not None:
            worktree_files[path] = new
        evidence = "3-way merge conflict" if verdict is Verdict.CONFLICT else f"3-way merge: {verdict}"
        for h in fp.hunks:
            outcome.hunks.append(HunkOutcome(path, h.index, verdict, evidence=evidence, resolved_by=carrier))
    if open_conflicts:
        outcome.status = EntryStatus.CONFLICT
        outcome.reason = "3-way merge conflicts in " + ", ".join(sorted({p for p, _, _ in open_conflicts}))
        return EntryReplay(entry, patch, changes, {}, outcome, open_conflicts, ConflictFolder(files=worktree_files))
    if not changes and not any(h.resolved_by for h in outcome.hunks):
        outcome.status = EntryStatus.DROPPED_UPSTREAM
        outcome.reason = "the 3-way merge changes nothing: the PR's changes are already in the release"
    return EntryReplay(entry, patch, changes, {}, outcome, [])


def commit_entry(
    repo: pygit2.Repository, parent: pygit2.Commit, step: EntryReplay, when: int, tag: str
) -> pygit2.Commit:
    """Write the entry's commit object on `parent` (no ref moves); author and dates from the entry and `when`."""
    tree_id = gitstore.tree_with_changes(repo, parent.tree, step.changes, step.modes)
    entry = step.entry
    author = _entry_author(entry, when)
    committer = gitstore.signature("vllm-compose", "vllm-compose@invalid", when)
    message = _commit_message(entry, step.outcome, step.patch, tag)
    oid = gitstore.commit_tree(repo, tree_id, [parent.id], message, author, committer)
    return repo[oid]


def carried_hunks(entries: list[Entry]) -> dict[tuple[str, str, int], str]:
    """(entry, path, hunk) -> id of the later fix that carries it, from the `resolves` of the entries."""
    return {(r.entry, r.path, r.hunk): e.id for e in entries for r in e.resolves}


def _refuse_crlf_onto_lf(entry: Entry, fp: FilePatch, text: str | None) -> None:
    """A patch whose lines end in CRLF onto a file that ends them in LF (a patch saved by an editor or a mail
    client) is refused as such: placed, its lines would not match, or go in with a stray `\\r` each.

    The other way round (LF patch, CRLF file) is fine: the placement writes the file's line ends.
    """
    if text is None:
        return
    file_lines = split_lines(text)[0]
    for h in fp.hunks:
        if ends_in_crlf([t for _, t in h.lines]) and not ends_in_crlf(file_lines):
            name = entry.file.name if entry.file else entry.id
            raise PatchFormatError(
                f"line endings differ: the patch's lines end in CRLF (\\r\\n), the release's {fp.path} ends them in LF",
                entry=entry.id,
                file=fp.path,
                hunk=h.index,
                hint=f"convert {name} to LF line ends (e.g. `dos2unix {name}`, or export it again from git), "
                "then compose again",
            )


def placed_only(patch: Patch, outcome: EntryOutcome) -> Patch:
    """The entry's patch without the hunks that did not go in (carried by fixes, or already upstream): the audit
    checks what this commit claims to contain."""
    return patch.without(
        {
            (h.file, h.hunk)
            for h in outcome.hunks
            if h.resolved_by or h.verdict in (Verdict.CONFLICT, Verdict.ALREADY_APPLIED)
        }
    )


def _entry_author(entry: Entry, when: int) -> pygit2.Signature:
    m = re.match(r"^\s*(.*?)\s*<([^>]*)>\s*$", entry.author or "")
    if m:
        return gitstore.signature(m.group(1) or m.group(2), m.group(2), when)
    if entry.author:
        return gitstore.signature(entry.author, "unknown@invalid", when)
    return gitstore.signature("vllm-compose", "vllm-compose@invalid", when)


def _commit_message(entry: Entry, outcome: EntryOutcome, patch: Patch, tag: str) -> str:
    title = entry.title or (patch.header.subject if patch.header else "") or entry.id
    lines = [title, ""]
    if entry.why:
        lines += [entry.why.strip(), ""]
    elif patch.header and patch.header.body:
        lines += [patch.header.body.strip(), ""]
    if outcome.reason:
        lines += [outcome.reason, ""]
    lines.append(f"Series-Entry: {entry.id}")
    if entry.pr:
        lines.append(f"Upstream-PR: {entry.pr_url or entry.pr}")
    lines.append(
        f"Upstream-Status: {entry.upstream_status}"
        + (f" ({entry.upstream_status_detail})" if entry.upstream_status_detail else "")
    )
    if entry.source and entry.source.sha256:
        lines.append(f"Source-Sha256: {entry.source.sha256}")
    if entry.source and entry.source.commits:
        lines.append("Source-Commits: " + " ".join(entry.source.commits))
    # which revision of a moving PR the branch holds: what a bug report must name
    if entry.source and entry.source.revision:
        lines.append(f"Source-Revision: {entry.source.revision}")
    lines.append(f"Onto: {tag}")
    lines += [x.trailer() for x in outcome.landings]
    if outcome.review_override:
        lines.append(f"{REVIEW_OVERRIDE} {outcome.review_override}")
    lines.append(COMPOSED_BY)
    return "\n".join(lines) + "\n"
