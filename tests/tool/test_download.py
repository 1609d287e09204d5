"""Tests for `index.download`: a download becomes visible only complete and verified; every failure leaves nothing.

The network is `fake_http` (conftest): canned answers that can lie about their length or reset part-way.
"""

from __future__ import annotations

import errno
import hashlib
import os

import pytest

from vllm_compose import cache as cache_mod
from vllm_compose import index
from vllm_compose.cache import CACHE_ENV, Cache, sha256_file
from vllm_compose.errors import SourceError

URL = "https://files.example.invalid/pkg/file.bin"
MIB = 1 << 20
BODY = os.urandom(3 * MIB + 123)
SHA = hashlib.sha256(BODY).hexdigest()


def _leftovers(cache: Cache) -> list[str]:
    """Everything in the cache's blob folder, temporary files included."""
    return sorted(p.name for p in cache.blob_dir.iterdir()) if cache.blob_dir.is_dir() else []


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def test_download_ok(cache, fake_http) -> None:
    fake_http.serve(URL, BODY)
    seen = []
    path = index.download(URL, SHA, cache, progress=lambda *e: seen.append(e))
    assert path == cache.blob_path(SHA) and path.read_bytes() == BODY
    assert sha256_file(path) == SHA
    assert _leftovers(cache) == [SHA]
    # throttled to about one call per MiB, and the last call says the step is done
    assert seen[-1] == ("download file.bin", len(BODY), len(BODY)) and len(seen) == 4
    assert [d for _, d, _ in seen] == sorted(d for _, d, _ in seen)
    assert path.stat().st_mode & 0o777 == 0o666 & ~_umask()
    # a second call is served from the cache, without the network
    assert index.download(URL, SHA, cache) == path and fake_http.requests == [URL]


def test_sha_mismatch_keeps_nothing(cache, fake_http) -> None:
    fake_http.serve(URL, BODY)
    with pytest.raises(SourceError, match="sha256 mismatch") as info:
        index.download(URL, "0" * 64, cache)
    assert info.value.hint and "nothing was kept" in info.value.hint
    assert _leftovers(cache) == []


def test_interrupted_download_keeps_nothing_and_other_blobs_survive(cache, fake_http) -> None:
    fake_http.serve(URL, BODY, fail_after=MIB)
    previous = cache.put_bytes(b"previous good copy")
    with pytest.raises(SourceError, match="failed after 1048576 bytes"):
        index.download(URL, SHA, cache)
    assert _leftovers(cache) == [previous]
    assert cache.get(previous) == b"previous good copy"


def test_truncated_download(cache, fake_http) -> None:
    fake_http.serve(URL, BODY, length=len(BODY) + 10)
    with pytest.raises(SourceError, match="truncated") as info:
        index.download(URL, SHA, cache)
    assert "nothing was kept" in info.value.hint
    assert _leftovers(cache) == []


def test_unreachable(cache, fake_http) -> None:
    with pytest.raises(SourceError, match="no route to") as info:
        index.download(URL, SHA, cache)
    assert SHA in info.value.hint and "--sources DIR" in info.value.hint
    assert _leftovers(cache) == []


def test_remedy_names_the_callers_way_around(cache, fake_http) -> None:
    with pytest.raises(SourceError) as info:
        index.download(URL, SHA, cache, remedy="pass --stock-wheel FILE")
    assert "pass --stock-wheel FILE" in info.value.hint and "--sources" not in info.value.hint


def test_progress_interrupt_keeps_nothing(cache, fake_http) -> None:
    fake_http.serve(URL, BODY)

    def stop(event, done, total):
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        index.download(URL, SHA, cache, progress=stop)
    assert _leftovers(cache) == []


def test_disk_full_keeps_nothing(cache, fake_http, monkeypatch) -> None:
    fake_http.serve(URL, BODY)

    def full(fd, data):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(cache_mod, "_write_all", full)
    with pytest.raises(SourceError, match="No space left on device") as info:
        index.download(URL, SHA, cache)
    assert "free disk space" in info.value.hint
    assert _leftovers(cache) == []


def test_unwritable_cache_is_a_source_error(tmp_path, fake_http) -> None:
    fake_http.serve(URL, BODY)
    (tmp_path / "file").write_bytes(b"")
    cache = Cache(tmp_path / "file")  # a file where the cache folder should be
    with pytest.raises(SourceError, match="cannot write into the cache folder") as info:
        index.download(URL, SHA, cache)
    assert CACHE_ENV in info.value.hint
