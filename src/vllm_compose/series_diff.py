"""What moving the series from one release to the next cost: a per-entry diff of two compose branches.

In the spirit of `git range-diff`, but matched by identity, not by similarity: every commit the compose writes
carries `Series-Entry: <id>`, so an entry is compared with the same entry on the other branch. An entry present on
only one branch is `added` or `dropped` — never shown as unchanged because something similar exists. A matched entry
is `unchanged` when its change (the diff against its parent, with line numbers and blob ids left out) is identical,
else `changed`, with the interdiff (a unified diff of the two changes).
"""

from __future__ import annotations

import difflib
import enum
import re
from dataclasses import dataclass, field

import pygit2

from . import gitstore, trailers
from .errors import RepositoryError

_HUNK_HEADER = re.compile(r"^@@ -\d+(?:,\d+)? \+\d+(?:,\d+)? @@.*$")  # numbers and section heading move


class DiffStatus(enum.StrEnum):
    """What happened to one entry's commit between the compose branches of two tags."""

    UNCHANGED = "unchanged"  # the same change on both
    CHANGED = "changed"  # both have it, in different forms (the interdiff says how)
    ADDED = "added"  # only the new tag's branch has it
    DROPPED = "dropped"  # only the old tag's branch has it


@dataclass
class EntryDiff:
    """One entry's fate between the two branches."""

    id: str
    status: DiffStatus
    old_commit: str | None = None
    new_commit: str | None = None
    interdiff: str = ""
    #: files the entry touches on each side
    old_files: list[str] = field(default_factory=list)
    new_files: list[str] = field(default_factory=list)

    def to_json(self) -> dict:
        return {
            "id": self.id,
            "status": self.status,
            "old_commit": self.old_commit,
            "new_commit": self.new_commit,
            "old_files": self.old_files,
            "new_files": self.new_files,
            "interdiff": self.interdiff,
        }


@dataclass
class SeriesDiff:
    old: str
    new: str
    entries: list[EntryDiff]

    def to_json(self) -> dict:
        return {"old": self.old, "new": self.new, "entries": [e.to_json() for e in self.entries]}


def entry_commits(repo: pygit2.Repository, branch: str, base: str) -> list[tuple[str, pygit2.Commit]]:
    """(entry id, commit) for each commit of `base..branch`, oldest first; commits without the trailer are an
    error (the branch holds work that is not a compose)."""
    tip = gitstore.resolve_commit(repo, branch)
    stop = gitstore.resolve_commit(repo, base)
    if tip is None:
        raise RepositoryError(f"{branch} not found", hint="compose both tags first")
    if stop is None:
        raise RepositoryError(f"{base} not found", hint="compose both tags first")
    out = []
    commit = tip
    if trailers.BUILD_SETUP in commit.message and commit.parents:  # the build setup (precompiled): no entry
        commit = commit.parents[0]
    while commit.id != stop.id:
        m = trailers.ENTRY.search(commit.message)
        if not m:
            raise RepositoryError(
                f"commit {str(commit.id)[:12]} on {branch} has no Series-Entry trailer",
                hint="the branch holds commits not written by vllm-compose; compose the tag again",
            )
        out.append((m.group(1), commit))
        if not commit.parents:
            raise RepositoryError(f"{base} is not an ancestor of {branch}", hint="compose the tag again")
        commit = commit.parents[0]
    return out[::-1]


def _normalized_change(repo: pygit2.Repository, commit: pygit2.Commit) -> tuple[list[str], list[str]]:
    """The commit's diff against its parent without `index` lines and `@@` line numbers; and its files."""
    lines: list[str] = []
    files = []
    for path, text in gitstore.file_patches(repo, commit.parents[0], commit, context_lines=3):
        files.append(path)
        for line in text.splitlines():
            if line.startswith("index "):
                continue
            lines.append(_HUNK_HEADER.sub("@@", line))
    return lines, files


def series_diff(repo: pygit2.Repository, old: tuple[str, str], new: tuple[str, str]) -> SeriesDiff:
    """Compare the compose branch `old = (branch, base tag)` with `new = (branch, base tag)`, entry by entry.

    The order follows the new branch, with dropped entries placed where they stood in the old one.
    """
    old_commits = dict(entry_commits(repo, *old))
    new_list = entry_commits(repo, *new)
    new_commits = dict(new_list)
    order: list[str] = []
    for eid, _ in entry_commits(repo, *old):
        order.append(eid)
    for eid, _ in new_list:
        if eid not in order:
            # an added entry goes right after the entry that precedes it on the new branch
            idx = [e for e, _ in new_list].index(eid)
            before = [e for e, _ in new_list][:idx]
            pos = max((order.index(b) + 1 for b in before if b in order), default=0)
            order.insert(pos, eid)
    result = []
    for eid in order:
        o, n = old_commits.get(eid), new_commits.get(eid)
        if o is None:
            _, files = _normalized_change(repo, n)
            result.append(EntryDiff(eid, DiffStatus.ADDED, new_commit=str(n.id), new_files=files))
        elif n is None:
            _, files = _normalized_change(repo, o)
            result.append(EntryDiff(eid, DiffStatus.DROPPED, old_commit=str(o.id), old_files=files))
        else:
            a, fa = _normalized_change(repo, o)
            b, fb = _normalized_change(repo, n)
            inter = "\n".join(difflib.unified_diff(a, b, f"{eid} on {old[1]}", f"{eid} on {new[1]}", lineterm=""))
            status = DiffStatus.UNCHANGED if a == b else DiffStatus.CHANGED
            result.append(EntryDiff(eid, status, str(o.id), str(n.id), inter if a != b else "", fa, fb))
    return SeriesDiff(old[0], new[0], result)
