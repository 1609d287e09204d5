#!/usr/bin/env python3
"""Compose speed and memory: the first compose onto a tag imported from PyPI, then repeated composes.

Targets (issue 2, on the 2-core development machine): first compose ≤ 60 s, repeated compose of the ~60-hunk series
≤ 3 s wall, peak memory ≤ 1 GB. Each run is a separate process (`scripts/rebase_series.py`), timed from outside;
peak RSS is the child's maximum resident set size.

    .venv/bin/python benchmarks/compose_speed.py [--sources DIR] [--tag v0.26.0] [--repeats 3] [--write-docs]

The PR diffs come from the user's cache (or --sources); the sdist is downloaded into a fresh, temporary cache so the
first run really imports from PyPI. Results go to stdout as JSON and, with --write-docs, into the marked section of
docs/benchmarks-compose.md.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "benchmarks-compose.md"
BEGIN, END = "<!-- compose-speed:begin -->", "<!-- compose-speed:end -->"


def run_once(argv: list[str], env: dict) -> dict:
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    t0 = time.perf_counter()
    proc = subprocess.run(argv, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    return {
        "wall_s": round(wall, 2),
        "peak_rss_mb": round(max(peak, before) / 1024, 1),
        "exit": proc.returncode,
        "last_line": (proc.stdout.strip().splitlines() or proc.stderr.strip().splitlines() or [""])[-1],
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tag", default="v0.26.0")
    ap.add_argument("--sources", type=Path, help="folder with the PR diffs (default: the user's cache has them)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--write-docs", action="store_true")
    args = ap.parse_args()

    from vllm_compose.cache import Cache, default_cache_root
    from vllm_compose.series import load_series

    work = Path(tempfile.mkdtemp(prefix="compose-speed-"))
    try:
        cache = work / "cache"
        user_cache = Cache(default_cache_root())
        fresh = Cache(cache)
        for e in load_series(ROOT / "series").entries_for(args.tag):  # PR diffs only: the sdist must be downloaded
            if e.source and e.source.sha256 and user_cache.has(e.source.sha256):
                fresh.put_file(user_cache.get_path(e.source.sha256))
        repo = work / "vllm"
        repo.mkdir()
        env = dict(os.environ, VLLM_COMPOSE_CACHE=str(cache))
        argv = [
            sys.executable,
            str(ROOT / "scripts" / "rebase_series.py"),
            "--onto",
            args.tag,
            "--series",
            str(ROOT / "series"),
            "--repo",
            str(repo),
            "-q",
        ]
        if args.sources:
            argv += ["--sources", str(args.sources)]
        first = run_once(argv, env)
        repeated = [run_once(argv, env) for _ in range(args.repeats)]
        hunks = sum(
            len(f.hunks) for e in load_series(ROOT / "series").entries_for(args.tag) if e.patch for f in e.patch.files
        )
        result = {
            "tag": args.tag,
            "machine": f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}",
            "date": time.strftime("%Y-%m-%d"),
            "first_compose_with_pypi_import": first,
            "repeated_compose": repeated,
            "local_fix_hunks": hunks,
        }
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(json.dumps(result, indent=2))
    if args.write_docs:
        best = min(r["wall_s"] for r in repeated)
        table = "\n".join(
            [
                BEGIN,
                f"Measured {result['date']} on {result['machine']} (`benchmarks/compose_speed.py`), tag {args.tag}:",
                "",
                "| run | wall | peak RSS | exit |",
                "|---|---|---|---|",
                f"| first compose (sdist downloaded from PyPI and imported) | {first['wall_s']} s | "
                f"{first['peak_rss_mb']} MB | {first['exit']} |",
                *[
                    f"| repeated compose #{i + 1} | {r['wall_s']} s | {r['peak_rss_mb']} MB | {r['exit']} |"
                    for i, r in enumerate(repeated)
                ],
                "",
                f"Best repeated compose: {best} s (target ≤ 3 s); first compose target ≤ 60 s; memory target ≤ 1 GB.",
                END,
            ]
        )
        text = DOC.read_text() if DOC.exists() else "# Compose speed\n\n" + BEGIN + "\n" + END + "\n"
        start, end = text.index(BEGIN), text.index(END) + len(END)
        DOC.write_text(text[:start] + table + text[end:])
    return 0 if first["exit"] == 0 and all(r["exit"] == 0 for r in repeated) else 1


if __name__ == "__main__":
    sys.exit(main())
