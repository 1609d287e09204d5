"""Tests for download.py: a download becomes visible only complete and verified; every failure leaves nothing."""

from __future__ import annotations

import errno
import hashlib
import io
import os
import urllib.error
from pathlib import Path

import pytest

from vllm_compose import download
from vllm_compose.download import download_verified, sha256_file
from vllm_compose.errors import SourceError

URL = "https://files.example.invalid/pkg/file.bin"
BODY = os.urandom(3 * download.CHUNK_SIZE + 123)
SHA = hashlib.sha256(BODY).hexdigest()


class _Response(io.BytesIO):
    """A response that can claim more bytes than it has, or reset the connection part-way."""

    def __init__(self, body: bytes, length: int | None = None, reset_after: int | None = None) -> None:
        super().__init__(body)
        self.headers = {"Content-Length": str(len(body) if length is None else length)}
        self.reset_after = reset_after

    def read(self, n: int = -1) -> bytes:
        if self.reset_after is not None and self.tell() >= self.reset_after:
            raise ConnectionResetError("connection reset by peer (simulated)")
        return super().read(n)


def _serve(monkeypatch, **kw) -> list[str]:
    asked: list[str] = []

    def fake_get(url, headers=None, timeout=None):
        asked.append(url)
        if kw.get("missing"):
            raise urllib.error.URLError("no route to host (simulated)")
        return _Response(BODY, kw.get("length"), kw.get("reset_after"))

    monkeypatch.setattr(download, "http_get", fake_get)
    return asked


def _leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


def test_download_ok(tmp_path: Path, monkeypatch) -> None:
    _serve(monkeypatch)
    seen = []
    dest = download_verified(URL, tmp_path / "c" / "file.bin", SHA, progress=lambda d, t: seen.append((d, t)))
    assert dest.read_bytes() == BODY
    assert sha256_file(dest) == SHA
    assert _leftovers(tmp_path / "c") == ["file.bin"]
    assert seen[-1] == (len(BODY), len(BODY)) and len(seen) == 4
    assert dest.stat().st_mode & 0o777 == 0o666 & ~_umask()


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def test_sha_mismatch_keeps_nothing(tmp_path: Path, monkeypatch) -> None:
    _serve(monkeypatch)
    with pytest.raises(SourceError, match="sha256 mismatch") as info:
        download_verified(URL, tmp_path / "file.bin", "0" * 64)
    assert info.value.hint and "nothing was kept" in info.value.hint
    assert _leftovers(tmp_path) == []


def test_interrupted_download_keeps_nothing_and_old_file_survives(tmp_path: Path, monkeypatch) -> None:
    _serve(monkeypatch, reset_after=download.CHUNK_SIZE)
    dest = tmp_path / "file.bin"
    dest.write_bytes(b"previous good copy")
    with pytest.raises(SourceError, match="failed after 1048576 bytes"):
        download_verified(URL, dest, SHA)
    assert _leftovers(tmp_path) == ["file.bin"]
    assert dest.read_bytes() == b"previous good copy"


def test_truncated_download(tmp_path: Path, monkeypatch) -> None:
    _serve(monkeypatch, length=len(BODY) + 10)
    with pytest.raises(SourceError, match="truncated"):
        download_verified(URL, tmp_path / "file.bin", SHA)
    assert _leftovers(tmp_path) == []


def test_unreachable(tmp_path: Path, monkeypatch) -> None:
    _serve(monkeypatch, missing=True)
    with pytest.raises(SourceError, match="no route to host"):
        download_verified(URL, tmp_path / "file.bin", SHA)
    assert _leftovers(tmp_path) == []


def test_progress_interrupt_keeps_nothing(tmp_path: Path, monkeypatch) -> None:
    _serve(monkeypatch)

    def stop(done, total):
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        download_verified(URL, tmp_path / "file.bin", SHA, progress=stop)
    assert _leftovers(tmp_path) == []


def test_disk_full_keeps_nothing(tmp_path: Path, monkeypatch) -> None:
    _serve(monkeypatch)
    real_fdopen = os.fdopen

    class FullDisk:
        def __init__(self, fh):
            self.fh = fh

        def write(self, data):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.fh.close()

    monkeypatch.setattr(download.os, "fdopen", lambda fd, mode: FullDisk(real_fdopen(fd, mode)))
    with pytest.raises(SourceError, match="No space left on device") as info:
        download_verified(URL, tmp_path / "file.bin", SHA)
    assert "free disk space" in info.value.hint
    assert _leftovers(tmp_path) == []
