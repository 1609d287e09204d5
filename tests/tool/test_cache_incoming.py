"""A download killed hard leaves its `.incoming-*` file in the cache; the next run removes it (cache.sweep_incoming),
while a write still in progress is left alone."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from vllm_compose import cache as cache_mod
from vllm_compose.cache import Cache


def test_a_download_killed_with_sigkill_leaves_no_partial_file_after_the_next_run(tmp_path):
    root = tmp_path / "cache"
    writer = textwrap.dedent(
        f"""\
        import time
        from vllm_compose.cache import Cache

        chunks = [b"x" * (1 << 20)] * 3
        def read(n):
            if chunks:
                return chunks.pop()
            time.sleep(3600)  # the server stalls: the process is killed here
        Cache({str(root)!r}).put_stream(read, what="a download")
        """
    )
    proc = subprocess.Popen([sys.executable, "-c", writer])
    try:
        deadline = time.time() + 60
        partial: list[Path] = []
        while time.time() < deadline:
            partial = [p for p in (root / "sha256").glob(".incoming-*") if p.stat().st_size >= 3 << 20]
            if partial:
                break
            time.sleep(0.1)
        assert partial, "the writer never got its 3 MiB into the cache"
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    assert partial[0].exists()  # SIGKILL: nothing could clean up
    assert Cache(root).get_path("0" * 64) is None  # the next run's first look at the cache
    assert list((root / "sha256").glob(".incoming-*")) == []


def test_a_write_in_progress_is_kept_and_an_old_foreign_one_goes(tmp_path):
    folder = tmp_path / "sha256"
    folder.mkdir()
    live = folder / f"{cache_mod.incoming_prefix()}live"  # this process: running
    live.write_bytes(b"half")
    elsewhere = folder / ".incoming-12345@another-host~abc"  # another machine sharing the cache: only its age counts
    elsewhere.write_bytes(b"half")
    legacy = folder / ".incoming-k2j3h4"  # the name of earlier versions: age only
    legacy.write_bytes(b"half")
    old = time.time() - cache_mod.STALE_AFTER_S - 60
    os.utime(legacy, (old, old))
    removed = cache_mod.sweep_incoming(folder)
    assert removed == [legacy]
    assert live.exists() and elsewhere.exists()
    os.utime(elsewhere, (old, old))
    assert cache_mod.sweep_incoming(folder) == [elsewhere]
    assert live.exists()
