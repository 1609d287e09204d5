"""A compose branch read back: its release and composed trees, the changed paths, its entries and the version label.

The wheel, the editable install and the image are built from `compose-<PRs>-<tag>` as `vllm-compose rebase` wrote
it; the Ampere gate, the top-k relay check and the semantic check read it too. `open_branch` reads that branch and
refuses one holding a commit this tool did not write (no `Composed-By` trailer: hand edits were never audited) or
that does not descend from the release: the compose writes the branch only when its audit and checks are clean, but
a branch is a ref anyone can move. (What an artifact re-checks before it is built is `artifacts.clearance`.)

This module sits below both the compose (which labels the branch it writes, `compose_label`) and the artifacts and
gates that read the branch, so neither has to import the other.

The version label (`local_label`): `compose.<PR numbers>.g<digest>`, e.g. `compose.46994.38476.g1a2b3c4`. The PR
numbers say what is in it. The `g` + first 7 hex digits of the overlay digest (sha256
over every changed `vllm/` path and its composed content, `overlay_digest`) make two different series (other fixes,
another PR revision) give different versions, while composing the same series onto the same release twice gives the
same version: the digest is content, not history, so a rebuild is recognised as the same thing, and the wheel and
the image agree. The `g` prefix keeps the segment alphanumeric (an all-digit hash would be read as a number and
lose leading zeros under PEP 440 normalisation).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path

import pygit2

from . import gitstore
from .errors import RefusedError, RepositoryError
from .precompiled import is_build_commit
from .series import load_series, version_of_tag
from .trailers import COMPOSED_BY
from .trailers import ENTRY as ENTRY_TRAILER
from .trailers import UPSTREAM_PR as PR_TRAILER
from .trees import FileTree, GitTree

#: the importable package: source-tree paths under it map 1:1 to wheel members and to site-packages files, and only
#: they count in the version label (`overlay_digest`)
PACKAGE_DIR = "vllm/"
#: commits walked from the branch tip back to the release before giving up (a series has tens of entries)
MAX_COMMITS = 10_000


@dataclass
class ComposedBranch:
    """The compose branch of one tag: release commit, tip, what changed and which entries it holds."""

    repo: pygit2.Repository
    tag: str
    branch: str
    base: pygit2.Commit
    #: the series' last commit: the branch tip, or the parent of its build-setup commit (`tip`)
    head: pygit2.Commit
    #: source-tree paths that differ between release and `head`, deleted ones included
    changed: list[str]
    #: series entry ids of the branch's commits, oldest first
    entries: list[str] = field(default_factory=list)
    #: upstream PR numbers of those entries, in order
    prs: list[int] = field(default_factory=list)
    #: the branch ref's commit: `head`, or the build-setup commit on top of it (`precompiled`)
    tip: pygit2.Commit | None = None
    #: the series' commits, `base` (exclusive) to `head`, oldest first
    commits: list[pygit2.Commit] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.tip = self.tip or self.head

    @property
    def version(self) -> str:
        """The release version (`v0.26.0` -> `0.26.0`)."""
        return str(version_of_tag(self.tag))

    @property
    def label(self) -> str:
        """The PEP 440 local label (see the module docstring): `compose.<PRs>.g<overlay digest[:7]>`."""
        return local_label(self.prs, overlay_digest(self.composed_tree(), self.changed))

    def release_tree(self) -> GitTree:
        return GitTree(self.repo, self.base.tree, self.tag)

    def composed_tree(self) -> GitTree:
        return GitTree(self.repo, self.head.tree, self.branch)

    def to_json(self) -> dict:
        return {
            "tag": self.tag,
            "branch": self.branch,
            "base": str(self.base.id),
            "head": str(self.head.id),
            "tip": str(self.tip.id),
            "tree": str(self.head.tree.id),
            "label": self.label,
            "entries": self.entries,
            "prs": self.prs,
            "changed": self.changed,
        }


def open_branch(repo_dir: Path, series_dir: Path, tag: str, branch: str | None = None) -> ComposedBranch:
    """Read the compose branch of `tag` (named by the series unless `branch` is given) in `repo_dir`.

    Raises `RepositoryError` (exit 3) when the tag or branch is missing, `RefusedError` (exit 2) when the branch holds
    a commit the compose did not write or does not descend from the release.
    """
    version_of_tag(tag)
    if branch is None:
        branch = load_series(series_dir).branch_name(tag)
    repo = gitstore.open_or_init_repo(repo_dir, create=False)
    base = gitstore.peel_commit(repo, f"refs/tags/{tag}")
    if base is None:
        raise RepositoryError(
            f"release tag {tag} is not in {repo_dir}",
            tag=tag,
            hint=f"compose first: vllm-compose rebase --onto {tag} --repo {repo_dir}",
        )
    head = gitstore.peel_commit(repo, f"refs/heads/{branch}")
    if head is None:
        raise RepositoryError(
            f"branch {branch} is not in {repo_dir}",
            tag=tag,
            hint=f"compose first: vllm-compose rebase --onto {tag} --repo {repo_dir} (a refused or stopped compose "
            "writes no branch)",
        )
    tip = head
    if is_build_commit(head) and head.parents:  # the build setup is not an entry: the series' tip is its parent
        head = head.parents[0]
    entries, prs, commits = _walk(head, base, branch, tag)
    changed = gitstore.changed_paths(repo, base.tree, head.tree)
    return ComposedBranch(repo, tag, branch, base, head, changed, entries, prs, tip, commits)


def _walk(
    head: pygit2.Commit, base: pygit2.Commit, branch: str, tag: str
) -> tuple[list[str], list[int], list[pygit2.Commit]]:
    """The entry ids, PR numbers and commits from `base` (exclusive) to `head`, oldest first; refuses a commit the
    compose did not write and a `head` that does not descend from `base`."""
    entries: list[str] = []
    prs: list[int] = []
    commits: list[pygit2.Commit] = []
    commit = head
    for _ in range(MAX_COMMITS):
        if commit.id == base.id:
            break
        if COMPOSED_BY not in commit.message:
            raise RefusedError(
                f"branch {branch} holds commit {str(commit.id)[:12]} ({commit.message.splitlines()[0]!r}) that "
                "vllm-compose did not write: its content was never audited",
                tag=tag,
                hint="turn the change into a series entry (a local patch) and compose again",
            )
        if m := ENTRY_TRAILER.search(commit.message):
            entries.append(m.group(1))
        if m := PR_TRAILER.search(commit.message):
            prs.append(int(m.group(1)))
        commits.append(commit)
        if not commit.parents:
            commit = None
            break
        commit = commit.parents[0]
    if commit is None or commit.id != base.id:
        raise RefusedError(
            f"branch {branch} does not descend from release {tag} ({str(base.id)[:12]})",
            tag=tag,
            hint=f"compose again: vllm-compose rebase --onto {tag}",
        )
    return entries[::-1], prs[::-1], commits[::-1]


def compose_label(repo: pygit2.Repository, base: pygit2.Commit, head: pygit2.Commit, branch: str, tag: str) -> str:
    """The version label of the series' commits `base..head` (what `ComposedBranch.label` says once it is written)."""
    _entries, prs, _commits = _walk(head, base, branch, tag)
    return local_label(
        prs, overlay_digest(GitTree(repo, head.tree), gitstore.changed_paths(repo, base.tree, head.tree))
    )


def overlay_digest(composed: FileTree, changed: list[str]) -> str:
    """sha256 over what the overlay does to the package: each changed `vllm/` path and its composed content.

    Only the package counts (what a wheel or an image carries), so the wheel of a compose branch and an image
    composed onto its site-packages get the same label when they change the same files the same way.
    """
    digest = hashlib.sha256()
    for path in sorted(p for p in changed if p.startswith(PACKAGE_DIR)):
        data = composed.read(path)
        content = hashlib.sha256(data).hexdigest() if data is not None else "deleted"
        digest.update(f"{path}\0{content}\n".encode("utf-8", "surrogateescape"))
    return digest.hexdigest()


def local_label(prs: list[int], digest: str) -> str:
    """`compose.<PR numbers>.g<digest[:7]>`."""
    return ".".join(["compose", *(str(n) for n in prs), "g" + digest[:7]])
