"""Entry content: the patch bytes of a series entry, pinned by content, restricted to its path filter.

`fetch_entry_patch(entry, cache)` returns an entry's patch: a local entry's file; for an upstream PR entry, the diff
of its pinned commits when the repository has them (`resolve_entry_commits`; the compose then merges them 3-way),
else the bytes of its pinned URL from the cache (`index.download`), checked against the pinned sha256. When the
content cannot be obtained, the `SourceError` names the entry, the expected sha256 and how to provide it.
"""

from __future__ import annotations

import fnmatch
import posixpath
import re
import urllib.parse

import pygit2

from . import gitstore
from .cache import Cache
from .errors import ComposeError, SourceError
from .index import download, seeded_mismatch
from .patchfile import Patch, parse_patch
from .progress import ProgressCallback
from .series import Entry, Series


def fetch_entry_patch(
    entry: Entry,
    cache: Cache,
    offline: bool = False,
    progress: ProgressCallback | None = None,
    repo: pygit2.Repository | None = None,
) -> bytes:
    """The patch bytes of `entry`, restricted to its `source.paths` filter.

    Local entries read their file. Upstream PR entries use, in order: the diff of the pinned commits when `repo`
    has them (fetched from `origin` first when online), then the pinned URL's bytes from the cache, downloading
    them when online. Raises `SourceError` naming the entry, the expected sha256 and how to provide the content.
    """
    if entry.kind == "local":
        assert entry.file is not None
        return entry.file.read_bytes()
    src = entry.source
    assert src is not None
    data: bytes | None = None
    if src.commits and repo is not None:
        if not offline and not gitstore.has_objects(repo, src.commits):
            _fetch_pr_commits(repo, entry)
        span = resolve_entry_commits(entry, repo)
        if span is not None:
            data = gitstore.diff_bytes(repo, *span)
    if data is None and src.url:
        assert src.sha256 is not None
        path = cache.get_path(src.sha256)
        if path is None and not offline:
            try:
                path = download(src.url, src.sha256, cache, progress, what=f"{src.url} (entry {entry.id})")
            except SourceError as exc:
                raise SourceError(exc.message, entry=entry.id, key="source.url", hint=exc.hint) from None
        if path is None:
            mismatch = seeded_mismatch(cache, posixpath.basename(urllib.parse.urlsplit(src.url).path), src.sha256)
            if mismatch is not None:
                raise SourceError(mismatch.message, entry=entry.id, key="source.url", hint=mismatch.hint)
            raise _missing_source(entry, cache, offline)
        data = path.read_bytes()
    if data is None:
        raise _missing_source(entry, cache, offline)
    if src.paths:
        data = filter_patch_paths(data, src.paths, src.strip)
        if not data.strip():
            raise SourceError(
                f"the path filter {list(src.paths)} keeps no file of the patch",
                entry=entry.id,
                key="source.paths",
                hint="fix the globs in source.paths (fnmatch syntax on the stripped path; '*' also matches '/')",
            )
    return data


def _missing_source(entry: Entry, cache: Cache, offline: bool) -> SourceError:
    src = entry.source
    assert src is not None
    wants = []
    if src.commits:
        wants.append(f"commits {', '.join(c[:12] for c in src.commits)} (not in the repository)")
    if src.url:
        wants.append(f"the file {src.url} with sha256 {src.sha256}")
    note = cache.corrupt.get(src.sha256 or "", "")
    message = (note + "; " if note else "") + (
        f"content not available{' offline' if offline else ''}: " + " or ".join(wants)
    )
    hints = []
    if src.url:
        hints.append(
            f"download {src.url} by hand (check: sha256sum gives {src.sha256}) into a folder and pass "
            "--sources DIR" + ("" if offline else ", or retry when the network is back")
        )
    if src.commits:
        hints.append(f"fetch the commits into the repository (git fetch <remote> pull/{entry.pr}/head)")
    return SourceError(message, entry=entry.id, key="source", hint="; or ".join(hints))


def _fetch_pr_commits(repo: pygit2.Repository, entry: Entry) -> None:
    """Best effort: fetch the PR head from `origin` so its commits become available. Failure is not an error."""
    if entry.pr is None:
        return
    for refspec in (f"refs/pull/{entry.pr}/head", entry.source.commits[-1]):
        if gitstore.fetch(repo, "origin", refspec) and gitstore.has_objects(repo, entry.source.commits):
            return


def resolve_entry_commits(entry: Entry, repo: pygit2.Repository) -> tuple[pygit2.Oid, pygit2.Oid] | None:
    """(base, head) of an upstream PR entry's pinned commits, or None when the repository lacks them.

    The commits must form a chain (each one's first parent is the previous one): the entry's content is then
    the diff base..head, and base is the tree a 3-way merge can start from.
    """
    src = entry.source
    if src is None or not src.commits or not gitstore.has_objects(repo, src.commits):
        return None
    commits = [repo.get(c) for c in src.commits]
    for c in commits:
        if not isinstance(c, pygit2.Commit):
            raise SourceError(f"{c.id} is not a commit", entry=entry.id, key="source.commits")
    for prev, cur in zip(commits, commits[1:], strict=False):
        if not cur.parent_ids or cur.parent_ids[0] != prev.id:
            raise SourceError(
                f"commit {cur.id} does not follow {prev.id}: source.commits must be a chain",
                entry=entry.id,
                key="source.commits",
                hint="list the PR's commits oldest first, as `git rev-list --reverse --first-parent base..head` does",
            )
    first = commits[0]
    if not first.parent_ids:
        raise SourceError(f"commit {first.id} has no parent to diff against", entry=entry.id, key="source.commits")
    return first.parent_ids[0], commits[-1].id


def _section_path(raw: bytes, strip: int) -> str | None:
    text = raw.decode("utf-8", "surrogateescape").strip()
    if "\t" in text:
        text = text.split("\t", 1)[0]
    if text.startswith('"') and text.endswith('"'):
        text = text[1:-1]
    if text == "/dev/null":
        return None
    parts = [p for p in text.split("/") if p]
    return "/".join(parts[strip:]) or None


def filter_patch_paths(data: bytes, globs: tuple[str, ...] | list[str], strip: int = 1) -> bytes:
    """Keep the header and the file sections of a patch whose old or new path matches one of `globs`.

    Paths are matched after stripping `strip` leading components, with `fnmatch` (where '*' also matches '/'),
    so `vllm/*` keeps everything under `vllm/`. Sections start at `diff --git`, or at `---`/`+++` pairs in a
    patch without git headers.
    """
    lines = data.splitlines(keepends=True)
    git_style = any(line.startswith(b"diff --git ") for line in lines)
    starts: list[int] = []
    for i, line in enumerate(lines):
        if git_style:
            if line.startswith(b"diff --git "):
                starts.append(i)
        elif line.startswith(b"--- ") and i + 1 < len(lines) and lines[i + 1].startswith(b"+++ "):
            starts.append(i)
    if not starts:
        return data
    out = lines[: starts[0]]
    for n, start in enumerate(starts):
        section = lines[start : starts[n + 1] if n + 1 < len(starts) else len(lines)]
        paths: list[str | None] = []
        if git_style:
            m = re.match(rb"^diff --git (\S+) (\S+)", section[0])
            if m:
                paths = [_section_path(m.group(1), strip), _section_path(m.group(2), strip)]
        else:
            paths = [_section_path(section[0][4:], strip), _section_path(section[1][4:], strip)]
        if any(p and fnmatch.fnmatchcase(p, g) for p in paths for g in globs):
            out.extend(section)
    return b"".join(out)


def entry_patch(
    entry: Entry,
    cache: Cache,
    offline: bool = False,
    progress: ProgressCallback | None = None,
    repo: pygit2.Repository | None = None,
) -> Patch:
    """The entry's content parsed (`fetch_entry_patch`, then `patchfile.parse_patch`); a local entry's patch is the
    one the series loaded. A parse error names the entry."""
    if entry.patch is not None:
        return entry.patch
    data = fetch_entry_patch(entry, cache, offline=offline, progress=progress, repo=repo)
    try:
        return parse_patch(data, name=entry.id, strip=entry.source.strip if entry.source else 1)
    except ComposeError as exc:
        exc.entry = entry.id
        raise


def series_patches(series: Series, tag: str | None, cache: Cache, offline: bool = False) -> list[Patch]:
    """The patches of the series' entries for release `tag` (every entry when None), fetched through the cache:
    what `apply --series` lays onto a plain folder."""
    entries = series.entries_for(tag) if tag else series.entries
    return [entry_patch(e, cache, offline=offline) for e in entries]
