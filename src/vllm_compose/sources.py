"""Upstream releases and entry content, behind one content-addressed cache.

Two things come from outside this repository, and both are pinned by content:

* **Releases.** `ensure_release(repo, "v0.26.0", cache)` returns the release's commit: the repository's own tag if
  it has one, else the tag fetched from its `origin` remote, else the PyPI sdist `vllm-0.26.0.tar.gz` — found on the
  index pip is configured to use, verified against the index's sha256, unpacked safely and in memory into git
  objects, committed with its provenance and tagged `v0.26.0`. A second run finds the tag and does nothing.
* **PR content.** `fetch_entry_patch(entry, cache)` returns an upstream PR entry's patch bytes: the diff of its
  pinned commits when the repository has them, else the bytes of its pinned URL, checked against the pinned sha256.

Downloads land in the cache (`$VLLM_COMPOSE_CACHE`, else the platform's user cache dir) at `sha256/<hex>`, written
atomically and re-verified on every read; `seed_cache(DIR)` adds local files (`--sources DIR`) for offline use. When
something cannot be obtained the `SourceError` names the object, the expected sha256 and how to provide it.

This module is the package's one network layer: every request goes through `_http_get` (tests replace it), every
file through `download` into the cache, and every package-index page through `list_index_files` (PEP 691 JSON, PEP
503 HTML as a fallback), which lists sdists and wheels alike — the stock wheel (`artifacts.wheel`) comes this way too.

Library code never prints: long steps report through an optional `progress(event, done, total)` callback.
"""

from __future__ import annotations

import contextlib
import fnmatch
import hashlib
import html.parser
import http.client
import json
import os
import posixpath
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import urllib.error
import urllib.parse
import urllib.request
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import platformdirs
import pygit2
from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename
from packaging.version import InvalidVersion, Version

from . import gitstore
from .errors import RepositoryError, SourceError
from .progress import ProgressCallback, Throttled
from .series import Entry

CACHE_ENV = "VLLM_COMPOSE_CACHE"
DEFAULT_INDEX_URL = "https://pypi.org/simple"
PROJECT = "vllm"
IMPORTER_NAME = "vllm-compose importer"
IMPORTER_EMAIL = "importer@vllm-compose.invalid"
#: the origin recorded for files added with --sources (the index was not consulted for them)
SEEDED_ORIGIN = "(not consulted: sdist given with --sources)"

#: seconds to wait for a server before giving up (per socket operation, not for the whole download)
NETWORK_TIMEOUT = 30
#: seconds a `git fetch` from the repository's remote may take before we fall back to PyPI
GIT_FETCH_TIMEOUT = 60
#: refuse sdists that unpack to more than this (a decompression bomb is not a release)
MAX_UNPACKED_BYTES = 4 << 30
_CHUNK = 1 << 16

_UMASK = os.umask(0o022)
os.umask(_UMASK)

_NETWORK_ERRORS = (urllib.error.URLError, http.client.HTTPException, ConnectionError, TimeoutError, OSError)


# ---------------------------------------------------------------------------------------------------------------
# The content-addressed cache


def default_cache_root() -> Path:
    """`$VLLM_COMPOSE_CACHE`, else the platform's user cache dir for vllm-compose (e.g. ~/.cache/vllm-compose)."""
    env = os.environ.get(CACHE_ENV)
    return Path(env) if env else Path(platformdirs.user_cache_dir("vllm-compose"))


def _sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


@dataclass
class Cache:
    """Blobs stored by the sha256 of their bytes under `<root>/sha256/<hex>`, plus a small file-name index.

    Writes go to a temporary file in the same folder, are fsynced, then renamed into place, so a reader never sees
    half a file. Reads re-hash the file: a corrupt one is removed and treated as missing (`corrupt` keeps a note so
    the error raised when it cannot be fetched again can say what happened).
    """

    root: Path = field(default_factory=default_cache_root)
    #: hex -> note about a corrupt file this process removed
    corrupt: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.root = Path(self.root)

    @property
    def blob_dir(self) -> Path:
        return self.root / "sha256"

    def blob_path(self, sha256: str) -> Path:
        """Where the blob with this sha256 lives (whether or not it is there)."""
        if not re.fullmatch(r"[0-9a-f]{64}", sha256):
            raise ValueError(f"not a sha256 hex digest: {sha256!r}")
        return self.blob_dir / sha256

    def get_path(self, sha256: str) -> Path | None:
        """The path of the verified blob, or None when it is absent or was corrupt (then it is removed)."""
        path = self.blob_path(sha256)
        if not path.is_file():
            return None
        actual = _sha256_file(path)
        if actual != sha256:
            path.unlink(missing_ok=True)
            self.corrupt[sha256] = (
                f"cache file {path} is corrupt (sha256 {actual}, expected {sha256}); it was removed; "
                "run again to re-download"
            )
            return None
        return path

    def get(self, sha256: str) -> bytes | None:
        """The blob's bytes (verified), or None."""
        path = self.get_path(sha256)
        return path.read_bytes() if path else None

    def has(self, sha256: str) -> bool:
        return self.get_path(sha256) is not None

    def _tempfile(self) -> tuple[int, Path]:
        try:
            self.blob_dir.mkdir(parents=True, exist_ok=True)
            fd, name = tempfile.mkstemp(dir=self.blob_dir, prefix=".incoming-")
        except OSError as exc:
            raise SourceError(
                f"cannot write into the cache folder {self.blob_dir}: {exc.strerror or exc}",
                file=str(self.blob_dir),
                hint=f"check that it is writable and has free space, or point ${CACHE_ENV} elsewhere",
            ) from exc
        return fd, Path(name)

    def _commit(self, fd: int, tmp: Path, sha256: str) -> Path:
        # mkstemp creates 0600; a cache shared by a team (or CI and a person) wants the umask's usual 0644
        os.fchmod(fd, 0o666 & ~_UMASK)
        os.fsync(fd)
        os.close(fd)
        final = self.blob_path(sha256)
        os.replace(tmp, final)
        self.corrupt.pop(sha256, None)
        return final

    def put_bytes(self, data: bytes) -> str:
        """Store `data`; returns its sha256."""
        sha256 = hashlib.sha256(data).hexdigest()
        if self.get_path(sha256) is None:
            fd, tmp = self._tempfile()
            try:
                _write_all(fd, data)
                self._commit(fd, tmp, sha256)
            except BaseException:
                _discard(fd, tmp)
                raise
        return sha256

    def put_stream(
        self,
        read: Callable[[int], bytes],
        expected_sha256: str | None = None,
        progress: Throttled | None = None,
        what: str = "stream",
        expected_size: int | None = None,
    ) -> tuple[str, Path]:
        """Copy `read(n)` chunks into the cache, hashing on the way; returns (sha256, path).

        With `expected_size` (a server's Content-Length) fewer bytes are a truncation, and with `expected_sha256`
        other bytes a mismatch: both raise `SourceError` and store nothing. So does a full disk; any exception
        while reading (a dropped connection, an interrupt) removes the partial file: the cache never holds half a
        file.
        """
        fd, tmp = self._tempfile()
        digest = hashlib.sha256()
        done = 0
        try:
            while chunk := read(_CHUNK):
                digest.update(chunk)
                try:
                    _write_all(fd, chunk)
                except OSError as exc:
                    raise SourceError(
                        f"writing {what} into the cache failed after {done} bytes: {exc.strerror or exc}",
                        file=str(self.blob_dir),
                        hint=f"free disk space in the cache folder (or point ${CACHE_ENV} elsewhere) and run "
                        "again; nothing was kept",
                    ) from exc
                done += len(chunk)
                if progress:
                    progress(done)
            if expected_size is not None and done != expected_size:
                raise SourceError(
                    f"{what} was truncated: got {done} of {expected_size} bytes; it was not stored",
                    hint="run the command again; nothing was kept",
                )
            actual = digest.hexdigest()
            if expected_sha256 is not None and actual != expected_sha256:
                raise SourceError(
                    f"sha256 mismatch for {what}: expected {expected_sha256}, got {actual}; it was not stored",
                    hint="the server (or a proxy) sent other bytes than the pinned ones; nothing was kept: check "
                    "the URL and the pinned sha256, then retry",
                )
            if progress:
                progress(done, final=True)
            if self.get_path(actual) is not None:
                _discard(fd, tmp)
                return actual, self.blob_path(actual)
            try:
                return actual, self._commit(fd, tmp, actual)
            except OSError as exc:
                raise SourceError(
                    f"cannot store {what} in the cache at {self.blob_path(actual)}: {exc.strerror or exc}",
                    file=str(self.blob_dir),
                    hint="check permissions and free space in the cache folder; nothing was kept",
                ) from exc
        except BaseException:
            _discard(fd, tmp)
            raise

    def put_file(self, path: str | os.PathLike) -> str:
        """Store a copy of the file at `path`; returns its sha256."""
        with open(path, "rb") as f:
            sha256, _ = self.put_stream(f.read, what=str(path))
        return sha256

    # A small name index: which blob holds `vllm-0.26.0.tar.gz`, and where that knowledge came from. It lets an
    # offline run import a release seeded with --sources without asking the index for the sha256.
    def remember_name(self, filename: str, sha256: str, origin: str) -> None:
        """Record that `filename` has content `sha256`, learned from `origin` (an index URL or `SEEDED_ORIGIN`)."""
        names = self.root / "names"
        names.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=names, prefix=".incoming-")
        try:
            _write_all(fd, json.dumps({"sha256": sha256, "origin": origin}).encode())
            os.fsync(fd)
            os.close(fd)
            os.replace(tmp, names / _safe_name(filename))
        except BaseException:
            _discard(fd, tmp)
            raise

    def lookup_name(self, filename: str) -> tuple[str, str] | None:
        """(sha256, origin) recorded for `filename`, or None."""
        try:
            doc = json.loads((self.root / "names" / _safe_name(filename)).read_text())
            return doc["sha256"], doc["origin"]
        except (OSError, ValueError, KeyError, TypeError):
            return None

    def known_names(self) -> list[str]:
        """Every file name the name index holds, sorted (a cached wheel is found by its name's tags)."""
        names = self.root / "names"
        return sorted(p.name for p in names.iterdir() if not p.name.startswith(".")) if names.is_dir() else []

    def named_path(self, sha256: str, filename: str, folder: str) -> Path:
        """The blob `sha256` (present: the caller just verified it) under its own name, `<root>/<folder>/<filename>`.

        For readers that need the name as well as the bytes: pip and the wheel tools read a wheel's tags from its
        file name. The file is a hard link to the blob (a copy where the filesystem has none), made anew, atomically,
        whenever it is not the blob any more.
        """
        blob = self.blob_path(sha256)
        view = self.root / folder / _safe_name(filename)
        with contextlib.suppress(OSError):
            if os.path.samefile(view, blob):
                return view
        tmp = view.with_name(f".incoming-{os.getpid()}-{view.name}")
        try:
            view.parent.mkdir(parents=True, exist_ok=True)
            tmp.unlink(missing_ok=True)
            try:
                os.link(blob, tmp)
            except OSError:
                shutil.copyfile(blob, tmp)
            os.replace(tmp, view)
        except OSError as exc:
            tmp.unlink(missing_ok=True)
            raise SourceError(
                f"cannot place {filename} at {view}: {exc.strerror or exc}",
                file=str(view),
                hint="check permissions and free space in the cache folder",
            ) from exc
        return view


def _safe_name(filename: str) -> str:
    name = os.path.basename(filename)
    if name in ("", ".", ".."):
        raise ValueError(f"not a file name: {filename!r}")
    return name


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _discard(fd: int, tmp: Path) -> None:
    try:
        os.close(fd)
    except OSError:
        pass
    tmp.unlink(missing_ok=True)


def seed_cache(directory: str | os.PathLike, cache: Cache) -> dict[str, str]:
    """Add every file under `directory` (`--sources DIR`) to the cache; returns {relative path: sha256}.

    File names are remembered too, so a seeded sdist (`vllm-0.26.0.tar.gz`) can be imported offline.
    """
    directory = Path(directory)
    if not directory.is_dir():
        raise SourceError(
            f"sources folder {str(directory)!r} does not exist or is not a folder",
            file=str(directory),
            hint="pass --sources DIR naming a folder holding the patch files and sdists to use",
        )
    added: dict[str, str] = {}
    for path in sorted(directory.rglob("*")):
        if path.is_file():
            sha256 = cache.put_file(path)
            added[str(path.relative_to(directory))] = sha256
            # no local path in the origin: it ends up in the import commit, whose id must not depend on it
            cache.remember_name(path.name, sha256, SEEDED_ORIGIN)
    return added


# ---------------------------------------------------------------------------------------------------------------
# Network


def _http_get(url: str, headers: dict[str, str] | None = None, timeout: float = NETWORK_TIMEOUT):
    """Open `url` for reading; the one place this module touches the network (tests replace it)."""
    request = urllib.request.Request(url, headers={"User-Agent": "vllm-compose", **(headers or {})})
    return urllib.request.urlopen(request, timeout=timeout)


def redact_url(url: str) -> str:
    """The URL without user:password, for messages and provenance."""
    parts = urllib.parse.urlsplit(url)
    if parts.username or parts.password:
        host = parts.hostname or ""
        if parts.port:
            host += f":{parts.port}"
        parts = parts._replace(netloc=host)
    return urllib.parse.urlunsplit(parts)


def _describe_network_error(exc: BaseException) -> str:
    if isinstance(exc, urllib.error.HTTPError):
        return f"HTTP {exc.code} {exc.reason}"
    if isinstance(exc, urllib.error.URLError):
        return str(exc.reason)
    return f"{type(exc).__name__}: {exc}"


def seeded_mismatch(cache: Cache, filename: str, sha256: str) -> SourceError | None:
    """The error to give when a file named `filename` was passed with --sources but is not the pinned `sha256`."""
    seeded = cache.lookup_name(filename) if filename else None
    if seeded is None or seeded[1] != SEEDED_ORIGIN or seeded[0] == sha256:
        return None
    return SourceError(
        f"{filename} in --sources has sha256 {seeded[0]}, the series pins {sha256}",
        file=filename,
        hint="put the pinned file in the --sources folder (or fix the pin in series.toml if the file is right)",
    )


def download(
    url: str,
    sha256: str,
    cache: Cache,
    progress: ProgressCallback | None = None,
    what: str | None = None,
    remedy: str | None = None,
) -> Path:
    """The cached, verified blob for `sha256`, downloading it from `url` when absent.

    Raises `SourceError` when the server cannot be reached, the transfer breaks off or is truncated, or the
    bytes are not the pinned ones; nothing partial is kept. `remedy` says how to get the file without this
    download (default: by hand, into a folder passed with --sources DIR).
    """
    path = cache.get_path(sha256)
    if path is not None:
        return path
    what = what or redact_url(url)
    remedy = remedy or f"download it by hand (sha256 {sha256}) into a folder and pass --sources DIR"
    filename = posixpath.basename(urllib.parse.urlsplit(url).path)
    event = f"download {filename or what}"
    done = 0

    def failed(exc: BaseException) -> SourceError:
        mismatch = seeded_mismatch(cache, filename, sha256)
        if mismatch is not None:
            return mismatch  # the person passed the file: "cannot download ... pass --sources" would mislead
        after = f"failed after {done} bytes: " if done else ""
        return SourceError(
            f"cannot download {what}: {after}{_describe_network_error(exc)}",
            hint=f"retry when the network is back, or {remedy}; nothing was kept",
        )

    try:
        response = _http_get(url)
    except _NETWORK_ERRORS as exc:
        raise failed(exc) from None
    with response:

        def read(n: int) -> bytes:
            nonlocal done
            try:
                chunk = response.read(n)
            except _NETWORK_ERRORS as exc:
                raise failed(exc) from None
            done += len(chunk)
            return chunk

        total = response.headers.get("Content-Length") if response.headers else None
        size = int(total) if total and total.isdigit() else None
        _, path = cache.put_stream(read, sha256, Throttled(progress, event, size), what=what, expected_size=size)
    return path


# ---------------------------------------------------------------------------------------------------------------
# PR content


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
        if not offline and not _has_commits(repo, src.commits):
            _fetch_pr_commits(repo, entry)
        span = resolve_entry_commits(entry, repo)
        if span is not None:
            data = diff_commits(repo, *span)
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


def _has_commits(repo: pygit2.Repository, commits: tuple[str, ...]) -> bool:
    return all(pygit2.Oid(hex=c) in repo.odb for c in commits)


def _fetch_pr_commits(repo: pygit2.Repository, entry: Entry) -> None:
    """Best effort: fetch the PR head from `origin` so its commits become available. Failure is not an error."""
    if "origin" not in [r.name for r in repo.remotes] or entry.pr is None:
        return
    for refspec in (f"refs/pull/{entry.pr}/head", entry.source.commits[-1]):
        if _git_fetch(repo, "origin", refspec) and _has_commits(repo, entry.source.commits):
            return


def _git_fetch(repo: pygit2.Repository, remote: str, refspec: str, timeout: float = GIT_FETCH_TIMEOUT) -> bool:
    """Best effort `git fetch --no-tags remote refspec` with a deadline; False when it fails or times out."""
    try:
        result = gitstore.run_git(repo, "fetch", "--no-tags", "--quiet", remote, refspec, timeout=timeout)
    except (OSError, RepositoryError):
        return False
    return result.returncode == 0


def resolve_entry_commits(entry: Entry, repo: pygit2.Repository) -> tuple[pygit2.Oid, pygit2.Oid] | None:
    """(base, head) of an upstream PR entry's pinned commits, or None when the repository lacks them.

    The commits must form a chain (each one's first parent is the previous one): the entry's content is then
    the diff base..head, and base is the tree a 3-way merge can start from.
    """
    src = entry.source
    if src is None or not src.commits or not _has_commits(repo, src.commits):
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


def diff_commits(repo: pygit2.Repository, base: pygit2.Oid, head: pygit2.Oid) -> bytes:
    """`git diff base head` as bytes (renames detected, as git does by default)."""
    diff = repo.diff(repo[base].peel(pygit2.Tree), repo[head].peel(pygit2.Tree))
    diff.find_similar()
    return b"".join(patch.data for patch in diff if patch is not None)


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


# ---------------------------------------------------------------------------------------------------------------
# Releases


def version_of_tag(tag: str) -> Version:
    """`v0.26.0` -> Version('0.26.0'); a tag that is not `v` + a PEP 440 version is a `SourceError`."""
    try:
        if not tag.startswith("v"):
            raise InvalidVersion(tag)
        return Version(tag[1:])
    except InvalidVersion:
        raise SourceError(
            f"tag {tag!r} does not name a release",
            tag=tag,
            hint="release tags are 'v' + the PyPI version, e.g. v0.26.0",
        ) from None


def tag_of_version(version: str | Version) -> str:
    """Version('0.26.0') -> 'v0.26.0'."""
    return f"v{version}"


def pip_index_url() -> str:
    """The index pip is configured to use: $PIP_INDEX_URL, else `pip config`'s index-url, else PyPI."""
    env = os.environ.get("PIP_INDEX_URL")
    if env:
        return env.split()[0]
    for key in ("global.index-url", "install.index-url"):
        try:
            result = subprocess.run(
                [sys.executable, "-m", "pip", "config", "get", key],
                capture_output=True,
                text=True,
                timeout=30,
                stdin=subprocess.DEVNULL,
                check=False,
            )
        except (subprocess.TimeoutExpired, OSError):
            continue
        if result.returncode == 0 and result.stdout.strip():
            return result.stdout.strip().splitlines()[-1].strip()
    return DEFAULT_INDEX_URL


class IndexUnreachable(SourceError):
    """The index page could not be read (network down, no page for the project); a cached file may still do."""


@dataclass(frozen=True)
class IndexFile:
    """One release file of a project, an sdist or a wheel, as a package index lists it."""

    filename: str
    #: absolute URL of the file
    url: str
    #: lower-case hex digest the index publishes; "" when it publishes none
    sha256: str
    version: Version
    #: the index it is listed on, without credentials: provenance for imports and the cache's name index
    index_url: str
    size: int | None = None

    @property
    def is_wheel(self) -> bool:
        return self.filename.endswith(".whl")


#: PEP 691 JSON first; PEP 503 HTML from indexes that serve nothing else (plain mirrors, `python -m http.server`)
_INDEX_ACCEPT = "application/vnd.pypi.simple.v1+json, application/vnd.pypi.simple.v1+html;q=0.2, text/html;q=0.1"


class _LinkParser(html.parser.HTMLParser):
    """The anchors of a PEP 503 (HTML) simple-index page: (text, href, yanked)."""

    def __init__(self) -> None:
        super().__init__()
        self.links: list[tuple[str, str, bool]] = []
        self._attrs: dict[str, str | None] | None = None
        self._text: list[str] = []

    def handle_starttag(self, tag, attrs):
        if tag == "a":
            self._attrs = dict(attrs)
            self._text = []

    def handle_data(self, data):
        if self._attrs is not None:
            self._text.append(data)

    def handle_endtag(self, tag):
        if tag == "a" and self._attrs is not None:
            href = self._attrs.get("href")
            if href:
                self.links.append(("".join(self._text).strip(), href, "data-yanked" in self._attrs))
            self._attrs = None


def _file_version(filename: str, project: str = PROJECT) -> Version | None:
    """The version of `project`'s sdist or wheel `filename`; None for any other file."""
    if filename.endswith(".whl"):
        try:
            name, version, _build, _tags = parse_wheel_filename(filename)
        except InvalidWheelFilename:
            return None
        return version if name == canonicalize_name(project) else None
    m = re.fullmatch(rf"{re.escape(project)}-(.+)\.tar\.gz", filename)
    if not m:
        return None
    try:
        return Version(m.group(1))
    except InvalidVersion:
        return None


def _json_rows(body: bytes, page: str) -> list[tuple[str, str, str | None, int | None]]:
    try:
        return [
            (f["filename"], f["url"], (f.get("hashes") or {}).get("sha256"), f.get("size"))
            for f in json.loads(body).get("files", [])
            if not f.get("yanked")
        ]
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise SourceError(
            f"the package index {redact_url(page)} sent an unreadable answer ({exc})",
            hint="check the index URL pip is configured with (pip config get global.index-url)",
        ) from None


def _html_rows(body: bytes) -> list[tuple[str, str, str | None, int | None]]:
    parser = _LinkParser()
    parser.feed(body.decode("utf-8", "replace"))
    rows = []
    for text, href, yanked in parser.links:
        if yanked:
            continue
        url, _, fragment = href.partition("#")
        sha = fragment[len("sha256=") :] if fragment.startswith("sha256=") else None
        rows.append((text or posixpath.basename(urllib.parse.urlsplit(url).path), url, sha, None))
    return rows


def list_index_files(index_url: str, project: str = PROJECT) -> list[IndexFile]:
    """The sdists and wheels the index lists for `project`, yanked files left out.

    Reads the PEP 691 JSON page, or the PEP 503 HTML page (digest in the link's `#sha256=` fragment) from an index
    that has no JSON. Files that are no sdist or wheel of `project` are skipped. Raises `IndexUnreachable` when the
    page cannot be read, `SourceError` when it cannot be understood.
    """
    page = index_url.rstrip("/") + f"/{project}/"
    try:
        with _http_get(page, {"Accept": _INDEX_ACCEPT}) as response:
            body = response.read()
            ctype = (response.headers.get("Content-Type") or "") if response.headers else ""
            final_url = response.geturl() if hasattr(response, "geturl") else page
    except urllib.error.HTTPError as exc:
        raise IndexUnreachable(
            f"the package index answered {exc.code} {exc.reason} for {redact_url(page)}",
            hint=f"check the index URL (PIP_INDEX_URL, pip config get global.index-url): the project page must "
            f"exist at <index>/{project}/",
        ) from None
    except _NETWORK_ERRORS as exc:
        raise IndexUnreachable(
            f"cannot read the package index {redact_url(page)}: {_describe_network_error(exc)}",
            hint="retry when the network is back",
        ) from None
    is_json = "json" in ctype or body.lstrip().startswith(b"{")
    out = []
    for filename, url, sha, size in _json_rows(body, page) if is_json else _html_rows(body):
        version = _file_version(filename, project)
        if version is not None:
            out.append(
                IndexFile(
                    filename,
                    urllib.parse.urljoin(final_url, url),
                    (sha or "").lower(),
                    version,
                    redact_url(index_url),
                    size,
                )
            )
    return out


def find_sdist(version: Version, index_url: str, project: str = PROJECT) -> IndexFile:
    """The index's sdist for `version`; a version it does not list is a `SourceError` naming nearby versions."""
    sdists = [f for f in list_index_files(index_url, project) if not f.is_wheel]
    for info in sdists:
        if info.version == version:
            if not re.fullmatch(r"[0-9a-f]{64}", info.sha256):
                raise SourceError(
                    f"the index lists {info.filename} without a sha256, so it cannot be verified",
                    tag=tag_of_version(version),
                    hint="use an index that publishes hashes (PyPI does), or pass the file with --sources DIR",
                )
            return info
    available = sorted({i.version for i in sdists if not i.version.is_prerelease})
    below = [str(v) for v in available if v < version][-3:]
    above = [str(v) for v in available if v > version][:3]
    nearby = ", ".join(below + above) or "none"
    raise SourceError(
        f"vLLM {version} has no sdist on {redact_url(index_url)} (nearby releases: {nearby})",
        tag=tag_of_version(version),
        hint="pick a released version (e.g. --onto v" + (above or below or ["0.26.0"])[0] + ")",
    )


def ensure_release(
    repo: pygit2.Repository,
    tag: str,
    cache: Cache | None = None,
    progress: ProgressCallback | None = None,
    *,
    offline: bool = False,
    index_url: str | None = None,
    remote: str = "origin",
) -> pygit2.Commit:
    """The commit of release `tag` in `repo`, importing it when needed.

    In order: the repository's tag; the tag fetched from `remote` (failure falls through); the PyPI sdist, verified
    against the index's sha256 and imported as tag `tag` (offline: an sdist seeded into the cache). Raises
    `SourceError` for a tag that is no release, a version the index lacks, or a release that cannot be obtained.
    """
    version = version_of_tag(tag)
    ref = f"refs/tags/{tag}"
    commit = _peel_tag(repo, ref)
    if commit is not None:
        return commit
    if not offline and remote in [r.name for r in repo.remotes]:
        if _git_fetch(repo, remote, f"{ref}:{ref}"):
            commit = _peel_tag(repo, ref)
            if commit is not None:
                return commit
    sdist = fetch_sdist(version, cache or Cache(), progress, offline=offline, index_url=index_url, tag=tag)
    return import_sdist(
        repo,
        tag,
        sdist.path,
        sdist_name=sdist.filename,
        sdist_sha256=sdist.sha256,
        index_url=sdist.origin,
        progress=progress,
    )


@dataclass(frozen=True)
class CachedSdist:
    """A release sdist in the cache: its verified blob, file name, sha256 and where it was listed."""

    path: Path
    filename: str
    sha256: str
    origin: str


def fetch_sdist(
    version: Version,
    cache: Cache,
    progress: ProgressCallback | None = None,
    *,
    offline: bool = False,
    index_url: str | None = None,
    tag: str | None = None,
) -> CachedSdist:
    """The verified sdist of `version`: from the index (downloaded once, sha256-checked, name remembered), else —
    offline or with the index unreachable — the one the cache's name index knows. Raises `SourceError` when neither
    has it (`tag` names the release in the message; default: the version's tag)."""
    tag = tag or tag_of_version(version)
    filename = f"{PROJECT}-{version}.tar.gz"
    info: IndexFile | None = None
    network_error: SourceError | None = None
    if not offline:
        index_url = index_url or pip_index_url()
        try:
            info = find_sdist(version, index_url)
        except IndexUnreachable as exc:
            network_error = exc
    if info is not None:
        path = download(info.url, info.sha256, cache, progress, what=f"{info.filename} from {redact_url(info.url)}")
        cache.remember_name(info.filename, info.sha256, info.index_url)
        return CachedSdist(path, info.filename, info.sha256, info.index_url)
    known = cache.lookup_name(filename)
    path = cache.get_path(known[0]) if known else None
    if path is None:
        note = cache.corrupt.get(known[0], "") if known else ""
        reason = network_error.message if network_error else "offline"
        raise SourceError(
            (note + "; " if note else "") + f"release {tag} is not in the repository and {filename} is not in "
            f"the cache ({reason})",
            tag=tag,
            hint=f"download {filename} from PyPI by hand and pass --sources DIR holding it, "
            "or retry with the network on",
        )
    sha256, origin = known
    return CachedSdist(path, filename, sha256, origin)


def _peel_tag(repo: pygit2.Repository, ref: str) -> pygit2.Commit | None:
    try:
        return repo.references[ref].peel(pygit2.Commit)
    except (KeyError, pygit2.InvalidSpecError, ValueError):
        return None


# ---------------------------------------------------------------------------------------------------------------
# Safe sdist import


class _CountingReader:
    """A file wrapper counting the compressed bytes read, so import progress has a known total."""

    def __init__(self, f, meter: Throttled) -> None:
        self.f = f
        self.meter = meter
        self.done = 0

    def read(self, n: int = -1) -> bytes:
        data = self.f.read(n)
        self.done += len(data)
        self.meter(self.done)
        return data


def _refuse(tag: str, sdist: str, member: str, why: str) -> SourceError:
    return SourceError(
        f"{sdist}: member {member!r} {why}; the sdist was not imported",
        tag=tag,
        file=member,
        hint="a release sdist never contains this: check where the file came from "
        "(if it came from --sources, remove it from the cache and use the one on PyPI)",
    )


def _resolve_link(links: dict[str, str], path: str, depth: int = 0) -> list[str] | None:
    """Resolve symlink `path` through the tree's other symlinks; None when it leaves the tree or loops."""
    if depth > 40:
        return None
    target = links[path]
    if target.startswith("/"):
        return None
    parts = path.split("/")[:-1]
    for comp in target.split("/"):
        if comp in ("", "."):
            continue
        if comp == "..":
            if not parts:
                return None
            parts.pop()
            continue
        parts.append(comp)
        joined = "/".join(parts)
        if joined in links:
            resolved = _resolve_link(links, joined, depth + 1)
            if resolved is None:
                return None
            parts = resolved
    return parts


_COMMIT_ID = re.compile(r"""^__commit_id__\s*=\s*(?:\w+\s*=\s*)?(?:['"]([^'"]*)['"]|None)""", re.M)


def import_sdist(
    repo: pygit2.Repository,
    tag: str,
    sdist_path: str | os.PathLike,
    *,
    sdist_name: str | None = None,
    sdist_sha256: str | None = None,
    index_url: str = "",
    progress: ProgressCallback | None = None,
) -> pygit2.Commit:
    """Import an sdist's files as one commit tagged `tag`, straight from the tarball into git objects.

    Nothing touches the filesystem: each member streams into a blob. Refused (`SourceError`, no tag created):
    absolute paths, `..` components, members outside the top `<name>-<version>/` folder, `.git` entries, hard
    links, device files and FIFOs, symlinks leaving the tree, and more than `MAX_UNPACKED_BYTES` of content.
    The commit and annotated tag carry the provenance (file name, sha256, index, upstream `__commit_id__`); their
    time is the sdist's newest member time, so every importer of the same sdist gets the same commit id.
    """
    sdist_path = Path(sdist_path)
    sdist = sdist_name or sdist_path.name
    top = sdist[: -len(".tar.gz")] if sdist.endswith(".tar.gz") else None
    sdist_sha256 = sdist_sha256 or _sha256_file(sdist_path)
    entries: dict[str, tuple[pygit2.Oid, int]] = {}
    links: dict[str, str] = {}
    commit_id: str | None = None
    newest = 0
    unpacked = 0
    size = sdist_path.stat().st_size
    meter = Throttled(progress, f"import {sdist}", size)
    try:
        with open(sdist_path, "rb") as raw:
            with tarfile.open(fileobj=_CountingReader(raw, meter), mode="r|*") as tar:
                for member in tar:
                    rel = _member_path(tag, sdist, member.name, top)
                    if rel is None:
                        continue
                    newest = max(newest, int(member.mtime or 0))
                    if member.isdir():
                        continue
                    if member.islnk():
                        raise _refuse(tag, sdist, member.name, f"is a hard link (to {member.linkname!r})")
                    if member.issym():
                        links[rel] = member.linkname
                        entries[rel] = (
                            repo.create_blob(member.linkname.encode("utf-8", "surrogateescape")),
                            gitstore.LINK_MODE,
                        )
                        continue
                    if not member.isreg():
                        raise _refuse(tag, sdist, member.name, "is a device file, FIFO or other special file")
                    unpacked += member.size
                    if unpacked > MAX_UNPACKED_BYTES:
                        raise _refuse(tag, sdist, member.name, f"takes the content past {MAX_UNPACKED_BYTES} bytes")
                    f = tar.extractfile(member)
                    data = f.read() if f is not None else b""
                    if rel == "vllm/_version.py":
                        m = _COMMIT_ID.search(data.decode("utf-8", "replace"))
                        commit_id = m.group(1) if m and m.group(1) is not None else None
                    mode = gitstore.EXEC_MODE if member.mode & 0o111 else gitstore.BLOB_MODE
                    entries[rel] = (repo.create_blob(data), mode)
                    links.pop(rel, None)
    except SourceError:
        raise
    except (tarfile.TarError, EOFError, OSError, zlib.error) as exc:
        raise SourceError(
            f"{sdist} is not a readable tar.gz ({exc}); it was not imported",
            tag=tag,
            file=str(sdist_path),
            hint="delete the file and run again to download it afresh",
        ) from None
    meter(size, final=True)
    for path in links:
        if _resolve_link(links, path) is None:
            raise _refuse(tag, sdist, path, f"is a symlink to {links[path]!r}, which leaves the tree")
    if not entries:
        raise SourceError(
            f"{sdist} holds no files under {top}/",
            tag=tag,
            file=str(sdist_path),
            hint="is this the release's sdist?",
        )
    try:
        tree = gitstore.tree_from_entries(repo, entries)
    except Exception as exc:  # a file and a folder of the same name
        raise _refuse(tag, sdist, getattr(exc, "file", None) or "?", str(getattr(exc, "message", exc))) from None

    version = tag[1:]
    message = (
        f"Import vLLM {version} from its sdist\n\n"
        f"vllm-compose imported release {version} from its source distribution: the repository had no tag\n"
        f"{tag} and no reachable remote had one. The tree is the sdist's content with its top folder\n"
        f"{top}/ removed.\n\n"
        f"Sdist: {sdist}\n"
        f"Sdist-SHA256: {sdist_sha256}\n"
        f"Index: {index_url or '(not consulted)'}\n"
        f"Upstream-Commit-Id: {commit_id or '(not recorded in vllm/_version.py)'}\n"
    )
    sig = gitstore.signature(IMPORTER_NAME, IMPORTER_EMAIL, when=newest)
    commit_oid = gitstore.commit_tree(repo, tree, [], message, sig)
    try:
        repo.create_tag(tag, commit_oid, pygit2.enums.ObjectType.COMMIT, sig, message)
    except (ValueError, pygit2.AlreadyExistsError, pygit2.GitError):
        # another process imported it meanwhile: use theirs
        existing = _peel_tag(repo, f"refs/tags/{tag}")
        if existing is None:
            raise
        return existing
    return repo[commit_oid]


def _member_path(tag: str, sdist: str, name: str, top: str | None) -> str | None:
    """The tree path of tar member `name` (top folder stripped), or None for the top folder itself."""
    if name.startswith("/") or re.match(r"^[A-Za-z]:[\\/]", name):
        raise _refuse(tag, sdist, name, "has an absolute path")
    parts = [p for p in name.split("/") if p not in ("", ".")]
    if ".." in parts:
        raise _refuse(tag, sdist, name, "has a '..' path component")
    if not parts:
        return None
    if top is not None and parts[0] != top:
        raise _refuse(tag, sdist, name, f"lies outside the top folder {top}/")
    rel = parts[1:]
    if not rel:
        return None
    if any(p.lower() == ".git" for p in rel):
        raise _refuse(tag, sdist, name, "is a .git entry")
    return "/".join(rel)


def release_provenance(commit: pygit2.Commit) -> dict[str, str]:
    """The provenance trailers of an imported release commit (`Sdist`, `Sdist-SHA256`, `Index`, ...)."""
    out = {}
    for line in commit.message.splitlines():
        m = re.match(r"^(Sdist|Sdist-SHA256|Index|Upstream-Commit-Id): (.*)$", line)
        if m:
            out[m.group(1)] = m.group(2)
    return out


def iter_cached(cache: Cache) -> Iterator[Path]:
    """Every blob file in the cache (unverified), for `cache` listings."""
    if cache.blob_dir.is_dir():
        yield from (p for p in cache.blob_dir.iterdir() if not p.name.startswith("."))
