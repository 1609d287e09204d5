"""The content-addressed cache: every file that comes from outside this repository, stored by the sha256 of its bytes.

Downloads (`index.download`) and local files (`--sources DIR`, `seed_cache`) land at `<root>/sha256/<hex>`, written
atomically and re-verified on every read, so a corrupt or half-written file is never used. The root is
`$VLLM_COMPOSE_CACHE`, else the platform's user cache dir. A small name index remembers which blob holds a file name
(`vllm-0.26.0.tar.gz`) and where that was learned, so an offline run can import a release seeded with --sources.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shutil
import socket
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import platformdirs

from .atomicfile import write_atomically
from .errors import SourceError
from .progress import Throttled

CACHE_ENV = "VLLM_COMPOSE_CACHE"
#: the origin recorded for files added with --sources (the index was not consulted for them)
SEEDED_ORIGIN = "(not consulted: sdist given with --sources)"
_CHUNK = 1 << 16

_UMASK = os.umask(0o022)
os.umask(_UMASK)


#: an unfinished write's temporary file untouched this long is stale whoever wrote it (a live download writes every
#: few seconds and gives up after `index.NETWORK_TIMEOUT` without data)
STALE_AFTER_S = 3600
#: temporary files are `.incoming-<pid>@<host>~<random>`, so a later run can tell a write that will never finish
INCOMING = ".incoming-"
_INCOMING_NAME = re.compile(r"^\.incoming-(\d+)@(.*?)~")


def incoming_prefix() -> str:
    """The prefix of this process's temporary cache files (`sweep_incoming` reads the pid and host back)."""
    return f"{INCOMING}{os.getpid()}@{socket.gethostname()}~"


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process
        return True
    return True


def sweep_incoming(folder: Path, now: float | None = None) -> list[Path]:
    """Remove the temporary files of cache writes that will never finish; returns what was removed.

    A download killed hard (SIGKILL, a power cut) cannot remove its own `.incoming-*` file. Such a file is stale
    when the process named in it is gone (same host), or, whoever wrote it, when it has not changed for
    `STALE_AFTER_S`. A write in progress elsewhere is left alone.
    """
    removed = []
    now = time.time() if now is None else now
    host = socket.gethostname()
    with contextlib.suppress(OSError):  # no folder, not a folder, unreadable: nothing to sweep, never an error
        for path in folder.iterdir():
            if not path.name.startswith(INCOMING):
                continue
            m = _INCOMING_NAME.match(path.name)
            try:
                idle = now - path.stat().st_mtime
            except FileNotFoundError:  # its writer just finished or discarded it
                continue
            dead = m is not None and m.group(2) == host and not _pid_alive(int(m.group(1)))
            if dead or idle > STALE_AFTER_S:
                try:
                    path.unlink()
                except OSError:  # gone already, or someone else's file in a shared cache: theirs to remove
                    continue
                removed.append(path)
    return removed


def default_cache_root() -> Path:
    """`$VLLM_COMPOSE_CACHE`, else the platform's user cache dir for vllm-compose (e.g. ~/.cache/vllm-compose)."""
    env = os.environ.get(CACHE_ENV)
    return Path(env) if env else Path(platformdirs.user_cache_dir("vllm-compose"))


def sha256_file(path: Path) -> str:
    """The sha256 hex digest of the file at `path`, read in 1 MiB chunks."""
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

    #: the folders whose stale temporary files this instance removed (`swept`), once, before its first use
    _swept: bool = field(default=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        self.root = Path(self.root)

    def sweep(self) -> list[Path]:
        """Remove stale `.incoming-*` files (`sweep_incoming`) from the blob, name and wheel folders; once per
        instance, before the first read or write, so a run after a killed download leaves none behind."""
        if self._swept:
            return []
        self._swept = True
        return [p for d in (self.blob_dir, self.root / "names", self.root / "wheels") for p in sweep_incoming(d)]

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
        self.sweep()
        path = self.blob_path(sha256)
        if not path.is_file():
            return None
        actual = sha256_file(path)
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
            self.sweep()
            self.blob_dir.mkdir(parents=True, exist_ok=True)
            fd, name = tempfile.mkstemp(dir=self.blob_dir, prefix=incoming_prefix())
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
        write_atomically(self.root / "names" / _safe_name(filename), json.dumps({"sha256": sha256, "origin": origin}))

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
        tmp = view.with_name(f"{incoming_prefix()}{view.name}")
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


def iter_cached(cache: Cache) -> Iterator[Path]:
    """Every blob file in the cache (unverified), for `cache` listings."""
    if cache.blob_dir.is_dir():
        yield from (p for p in cache.blob_dir.iterdir() if not p.name.startswith("."))
