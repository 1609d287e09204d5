"""Writing a file so that a reader sees the old content or the new one, never half of either.

Every file this tool writes outside git (reports, series.toml and its patches, docs sections, files of a plain
directory or site-packages, cache names) goes through `write_atomically`: a temporary file in the same folder,
flushed and fsynced, given its final mode, then renamed over the target. An interrupt or a full disk leaves the
target as it was and no temporary file behind. (The cache's blobs stream through their own temporary file because
they are hashed on the way in; `cache.Cache.put_stream`.)
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path

#: the mode of a new file: what `open()` would give under the usual umask (mkstemp alone gives 0600)
NEW_FILE_MODE = 0o644


def write_atomically(path: str | os.PathLike, data: bytes | str, mode: int | None = None) -> None:
    """Replace `path` with `data` (str is written as UTF-8) in one rename.

    `mode` is the file's permission bits; default: the mode the file has now, or `NEW_FILE_MODE` for a new file.
    Parent folders are created. Raises `OSError` as the filesystem reports it (callers turn it into their own
    error with a hint); the target is then unchanged.
    """
    path = Path(path)
    if isinstance(data, str):
        data = data.encode("utf-8")
    path.parent.mkdir(parents=True, exist_ok=True)
    if mode is None:
        try:
            mode = path.stat().st_mode & 0o7777
        except FileNotFoundError:
            mode = NEW_FILE_MODE
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
