"""Read-only views of a source tree — a directory, a git tree, or an in-memory overlay — behind one small protocol.

Placement, audit and checks read files through `FileTree` so they work the same on a plain directory (an installed
site-packages), a git revision, and a compose in progress that exists only as blobs in memory.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Protocol

import pygit2

from .errors import RepositoryError


class FileTree(Protocol):
    """A tree of files addressed by POSIX relative paths."""

    def read(self, path: str) -> bytes | None:
        """The file's bytes, or None when it does not exist."""

    def paths(self) -> Iterator[str]:
        """Every file path in the tree."""


class DirTree:
    """A directory on disk. Symlinks leaving the directory are not followed."""

    def __init__(self, root: str | os.PathLike) -> None:
        self.root = Path(root)
        if not self.root.is_dir():
            raise RepositoryError(f"{self.root} is not a directory", hint="pass an existing directory")

    def read(self, path: str) -> bytes | None:
        p = self.root / path
        try:
            if p.is_symlink() and not p.resolve().is_relative_to(self.root.resolve()):
                return None
            return p.read_bytes() if p.is_file() else None
        except OSError:
            return None

    def paths(self) -> Iterator[str]:
        for dirpath, dirnames, filenames in os.walk(self.root):
            dirnames[:] = [d for d in dirnames if d != ".git"]
            for name in filenames:
                yield Path(dirpath, name).relative_to(self.root).as_posix()

    def __repr__(self) -> str:
        return f"DirTree({str(self.root)!r})"


class GitTree:
    """A git tree object (a commit's tree) in a pygit2 repository."""

    def __init__(self, repo: pygit2.Repository, tree: pygit2.Tree, label: str = "") -> None:
        self.repo = repo
        self.tree = tree
        self.label = label or str(tree.id)

    @classmethod
    def from_revision(cls, repo: pygit2.Repository, rev: str) -> GitTree:
        """Resolve `rev` (tag, branch, commit id) to its tree."""
        try:
            obj = repo.revparse_single(rev)
            commit = obj.peel(pygit2.Commit)
        except (KeyError, ValueError, pygit2.GitError) as exc:
            raise RepositoryError(
                f"revision {rev!r} not found in {repo.path}", hint="check the tag or commit name"
            ) from exc
        return cls(repo, commit.tree, rev)

    def read(self, path: str) -> bytes | None:
        try:
            entry = self.tree[path]
        except KeyError:
            return None
        if entry.type_str != "blob":
            return None
        return self.repo[entry.id].data

    def paths(self) -> Iterator[str]:
        def walk(tree: pygit2.Tree, prefix: str) -> Iterator[str]:
            for e in tree:
                if e.type_str == "tree":
                    yield from walk(self.repo[e.id], prefix + e.name + "/")
                elif e.type_str == "blob":
                    yield prefix + e.name

        yield from walk(self.tree, "")

    def __repr__(self) -> str:
        return f"GitTree({self.label!r})"


class OverlayTree:
    """A base tree plus in-memory changes (path -> bytes, or None for a deleted file)."""

    def __init__(self, base: FileTree, changes: dict[str, bytes | None] | None = None) -> None:
        self.base = base
        self.changes: dict[str, bytes | None] = dict(changes or {})

    def read(self, path: str) -> bytes | None:
        if path in self.changes:
            return self.changes[path]
        return self.base.read(path)

    def write(self, path: str, data: bytes | None) -> None:
        self.changes[path] = data

    def paths(self) -> Iterator[str]:
        seen = set()
        for p in self.base.paths():
            seen.add(p)
            if self.changes.get(p, b"") is not None:
                yield p
        for p, data in self.changes.items():
            if p not in seen and data is not None:
                yield p


def export_tree(tree: FileTree, dest: str | os.PathLike) -> Path:
    """Write the `vllm/` files of `tree` (e.g. a compose branch's tree) to the folder `dest`; return `dest`. For the
    readers that need plain files: the Ampere gate's loader, the semantic check, the artifacts' clearance."""
    for path in tree.paths():
        if not path.startswith("vllm/"):
            continue
        data = tree.read(path)
        if data is None:
            continue
        out = Path(dest) / path
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_bytes(data)
    return Path(dest)
