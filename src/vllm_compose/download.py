"""Streaming downloads that are verified before they become visible.

`download_verified` streams a URL into a temporary file next to its destination, hashing as it writes, and renames
it into place only when the sha256 matches. An interrupted download, a hash mismatch or a full disk therefore never
leaves a half file under the destination name: a cache that holds a file holds a verified one.
"""

from __future__ import annotations

import contextlib
import hashlib
import http.client
import os
import tempfile
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path

from .errors import SourceError

#: bytes per read; large enough to keep the per-chunk overhead small, small enough to keep memory flat
CHUNK_SIZE = 1 << 20

USER_AGENT = "vllm-compose"

#: progress(done_bytes, total_bytes_or_None) is called after every chunk
Progress = Callable[[int, int | None], None]


def _current_umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def sha256_file(path: str | os.PathLike, chunk_size: int = CHUNK_SIZE) -> str:
    """The hex sha256 of a file, read in chunks."""
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(chunk_size):
            digest.update(chunk)
    return digest.hexdigest()


def http_get(url: str, headers: dict[str, str] | None = None, timeout: float | None = None):
    """Open `url` with a GET and return the response (a file-like object with `.headers`).

    Every download of this package goes through here, so tests replace this one function to serve canned answers.
    """
    request = urllib.request.Request(url, headers={"User-Agent": USER_AGENT, **(headers or {})})
    return urllib.request.urlopen(request, timeout=timeout)


def download_verified(
    url: str,
    dest_path: str | os.PathLike,
    sha256: str,
    progress: Progress | None = None,
    timeout: float = 60,
) -> Path:
    """Download `url` to `dest_path`, verifying its sha256 while streaming; return the destination path.

    The bytes go to a temporary file in the destination directory (same filesystem, so the final `os.replace` is
    atomic) and replace `dest_path` only after the digest matched. On any failure the temporary file is removed and
    a `SourceError` says what failed; an existing `dest_path` is left untouched.
    """
    dest = Path(dest_path)
    expected = sha256.strip().lower()
    try:
        dest.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp_name = tempfile.mkstemp(prefix=f".{dest.name}.", suffix=".part", dir=dest.parent)
    except OSError as exc:
        raise SourceError(
            f"cannot write into {dest.parent}: {exc.strerror or exc}",
            file=str(dest),
            hint="check that the cache directory exists, is writable and has free space",
        ) from exc
    tmp = Path(tmp_name)
    try:
        digest = hashlib.sha256()
        done = 0
        try:
            with os.fdopen(fd, "wb") as out, http_get(url, timeout=timeout) as response:
                length = response.headers.get("Content-Length")
                total = int(length) if length and length.isdigit() else None
                while chunk := response.read(CHUNK_SIZE):
                    digest.update(chunk)
                    out.write(chunk)
                    done += len(chunk)
                    if progress is not None:
                        progress(done, total)
                out.flush()
                os.fsync(out.fileno())
        except (urllib.error.URLError, TimeoutError, ConnectionError, http.client.HTTPException) as exc:
            reason = getattr(exc, "reason", None) or exc
            raise SourceError(
                f"download of {url} failed after {done} bytes: {reason}",
                file=str(dest),
                hint="check the network or the index URL and run the command again; nothing was kept",
            ) from exc
        except OSError as exc:
            raise SourceError(
                f"writing {dest.name} failed after {done} bytes: {exc.strerror or exc}",
                file=str(dest),
                hint="free disk space in the cache directory (or point the cache elsewhere) and run again",
            ) from exc
        if total is not None and done != total:
            raise SourceError(
                f"download of {url} was truncated: got {done} of {total} bytes",
                file=str(dest),
                hint="run the command again; nothing was kept",
            )
        actual = digest.hexdigest()
        if actual != expected:
            raise SourceError(
                f"sha256 mismatch for {url}: expected {expected}, got {actual}",
                file=str(dest),
                hint="the index or a proxy served different bytes; nothing was kept. Retry, or check the index URL",
            )
        try:
            # mkstemp creates the file 0600; give the cached file the permissions a plain open() would have
            os.chmod(tmp, 0o666 & ~_current_umask())
            os.replace(tmp, dest)
        except OSError as exc:
            raise SourceError(
                f"cannot move the download into place at {dest}: {exc.strerror or exc}",
                file=str(dest),
                hint="check permissions and free space in the cache directory",
            ) from exc
        return dest
    finally:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
