#!/usr/bin/env python3
"""How often one compose computes the placement of each hunk, and in which stage.

Composes the series onto a release in a scratch repository (as `rebase` does, offline: the release sdist and the PR
diffs must be in the cache) with the placement engine's per-hunk core (`placement._place`) counted, attributed to
the stage that called it (replay or audit):

    .venv/bin/python benchmarks/placements_per_compose.py [--tag v0.26.0]

Prints JSON: hunks of the entries the engine placed, placements computed per stage, and the largest number of
placements of one hunk (identified by entry patch, file and hunk number).
"""

from __future__ import annotations

import argparse
import collections
import json
import tempfile
import traceback
from pathlib import Path

from vllm_compose import placement
from vllm_compose.compose import ComposeOptions, Composer

ROOT = Path(__file__).resolve().parent.parent


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tag", default="v0.26.0")
    args = ap.parse_args()

    calls: collections.Counter[tuple[str, str]] = collections.Counter()
    per_hunk: collections.Counter[tuple[int, int]] = collections.Counter()
    real_place = placement._place

    def counted(hunk, tgt, *rest):
        stages = [f.name for f in traceback.extract_stack()]
        stage = "audit" if "audit" in stages else "replay" if "replay_entry" in stages else "other"
        calls[stage, hunk.header] += 1
        per_hunk[id(hunk), hunk.index] += 1
        return real_place(hunk, tgt, *rest)

    placement._place = counted
    with tempfile.TemporaryDirectory(prefix="placements-") as tmp:
        options = ComposeOptions(offline=True, import_smoke=False, run_checks=False, init=True)
        result = Composer(ROOT / "series", Path(tmp) / "repo", options=options).run(args.tag)
    by_stage = collections.Counter()
    for (stage, _), n in calls.items():
        by_stage[stage] += n
    placed = sum(len(e.hunks) for e in result.entries if e.method == "placement")
    print(
        json.dumps(
            {
                "tag": args.tag,
                "compose": str(result.status),
                "hunks_of_entries_placed_by_the_engine": placed,
                "placements_computed": dict(by_stage),
                "most_placements_of_one_hunk_object": max(per_hunk.values(), default=0),
            },
            indent=2,
        )
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
