#!/usr/bin/env python3
"""Print the vLLM releases on PyPI newer than the newest composed one (ci/composed.json), oldest first.

The newest composed release is recorded in `ci/composed.json` (`{"composed": ["v0.26.0", ...]}`); the scheduled
workflow adds a tag there once its compose is published. Pre-releases and yanked releases are left out.
The releases come from the package index pip is configured to use, through the package's one network layer
(`vllm_compose.index`: PEP 691 JSON or PEP 503 HTML, yanked files left out); `--pypi-json FILE` reads PyPI's project
JSON (https://pypi.org/pypi/vllm/json) from a file instead (tests, offline).
With $GITHUB_OUTPUT set, also writes `tags=<JSON list>` there for a job matrix.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from packaging.version import InvalidVersion, Version

from vllm_compose import index
from vllm_compose.errors import ComposeError


def new_releases(project: dict, composed: list[str]) -> list[str]:
    """Tags (`vX.Y.Z`) of stable, unyanked releases newer than every composed tag, oldest first."""
    newest = max((Version(t.lstrip("v")) for t in composed), default=None)
    found = []
    for text, files in project.get("releases", {}).items():
        try:
            version = Version(text)
        except InvalidVersion:
            continue
        if version.is_prerelease or version.is_devrelease or not files or all(f.get("yanked") for f in files):
            continue
        if newest is None or version > newest:
            found.append(version)
    return [f"v{v}" for v in sorted(found)]


def index_releases(index_url: str) -> dict:
    """The project's releases as the package index lists them, in the shape of PyPI's project JSON
    (`{"releases": {version: [files]}}`, yanked files left out)."""
    releases: dict[str, list[dict]] = {}
    for f in index.list_index_files(index_url):
        releases.setdefault(str(f.version), []).append({"filename": f.filename, "yanked": False})
    return {"releases": releases}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--composed", type=Path, default=Path(__file__).with_name("composed.json"))
    p.add_argument("--pypi-json", type=Path, help="read the project JSON from this file instead of PyPI")
    args = p.parse_args(argv)
    if args.pypi_json:
        project = json.loads(args.pypi_json.read_text())
    else:
        try:
            project = index_releases(index.pip_index_url())
        except ComposeError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return exc.exit_code
    composed = json.loads(args.composed.read_text()).get("composed", [])
    tags = new_releases(project, composed)
    print("\n".join(tags))
    if os.environ.get("GITHUB_OUTPUT"):
        with open(os.environ["GITHUB_OUTPUT"], "a") as fh:
            fh.write(f"tags={json.dumps(tags)}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
