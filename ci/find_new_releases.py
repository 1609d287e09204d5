#!/usr/bin/env python3
"""Print the vLLM releases on PyPI newer than the newest composed one (ci/composed.json), oldest first.

`ci/composed.json` (`{"composed": ["v0.26.0", ...]}`) is the record of the releases whose compose is published:
every release the series composes, oldest first. The workflow only reads it; a person adds a release's tag at the
end of the list once its compose is published. Until then every weekly run composes that release again, so a release
that stopped on a conflict is retried, and composes once the series has its fix. Only the newest tag decides what is
new. Pre-releases and yanked releases are left out.
The releases come from the package index pip is configured to use, through the package's one network layer
(`vllm_compose.index`: PEP 691 JSON or PEP 503 HTML, yanked files left out); `--pypi-json FILE` reads PyPI's project
JSON (https://pypi.org/pypi/vllm/json) from a file instead (offline).
With $GITHUB_OUTPUT set, also writes `tags=<JSON list>` there for a job matrix.
A record or an index that cannot be read is an error (exit code 3) that names the file or the index; nothing is
printed or written then.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from packaging.version import InvalidVersion, Version

from vllm_compose import index
from vllm_compose.errors import ComposeError, SourceError
from vllm_compose.series import version_of_tag

#: the record of composed releases the workflow reads (it has no --composed)
COMPOSED_JSON = Path(__file__).with_name("composed.json")


def read_composed(path: Path) -> list[str]:
    """The tags `path` records as composed. Raises `ComposeError` naming the file when it is missing, not JSON,
    not `{"composed": [tag, ...]}`, empty, or lists something that is no release tag."""
    hint = 'the record is {"composed": ["v0.26.0", ...]}: every release the series composes, oldest first'
    try:
        data = json.loads(path.read_text())
    except OSError as exc:
        raise ComposeError(
            f"cannot read the record of composed releases: {exc.strerror}", file=str(path), hint=hint
        ) from None
    except ValueError as exc:
        raise ComposeError(f"the record of composed releases is not JSON ({exc})", file=str(path), hint=hint) from None
    composed = data.get("composed") if isinstance(data, dict) else None
    if not isinstance(composed, list) or not all(isinstance(t, str) for t in composed):
        raise ComposeError(
            "the record of composed releases has no list of tags under 'composed'", file=str(path), hint=hint
        )
    if not composed:
        # an empty record would make every release on PyPI new: a matrix of ~100 composes that cannot succeed
        raise ComposeError(
            "the record of composed releases lists no release",
            file=str(path),
            hint=f"add the newest release the series composes; {hint}",
        )
    for tag in composed:
        try:
            version_of_tag(tag)
        except ComposeError as exc:
            raise ComposeError(exc.message, file=str(path), tag=tag, hint=exc.hint) from None
    return composed


def read_project_json(path: Path) -> dict:
    """PyPI's project JSON for vllm from a file (`--pypi-json`); only its `releases` are read. Raises `SourceError`
    naming the file when it cannot be read or has no `releases` table."""
    hint = "save https://pypi.org/pypi/vllm/json to the file, or leave out --pypi-json to ask the package index"
    try:
        project = json.loads(path.read_text())
    except OSError as exc:
        raise SourceError(f"cannot read the project JSON: {exc.strerror}", file=str(path), hint=hint) from None
    except ValueError as exc:
        raise SourceError(f"the project JSON is not JSON ({exc})", file=str(path), hint=hint) from None
    releases = project.get("releases") if isinstance(project, dict) else None
    if not isinstance(releases, dict) or not all(isinstance(files, list) for files in releases.values()):
        raise SourceError("the project JSON has no 'releases' table of version -> files", file=str(path), hint=hint)
    return project


def new_releases(project: dict, composed: list[str]) -> list[str]:
    """Tags (`vX.Y.Z`) of stable, unyanked releases newer than every composed tag, oldest first."""
    newest = max((version_of_tag(t) for t in composed), default=None)
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
    (`{"releases": {version: [files]}}`, yanked files left out). Raises `SourceError` when the index cannot be read."""
    releases: dict[str, list[dict]] = {}
    for f in index.list_index_files(index_url):
        releases.setdefault(str(f.version), []).append({"filename": f.filename, "yanked": False})
    return {"releases": releases}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--composed", type=Path, default=COMPOSED_JSON, help="the record of composed releases")
    p.add_argument("--pypi-json", type=Path, help="read the project JSON from this file instead of PyPI")
    args = p.parse_args(argv)
    try:
        composed = read_composed(args.composed)
        project = read_project_json(args.pypi_json) if args.pypi_json else index_releases(index.pip_index_url())
    except ComposeError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code
    tags = new_releases(project, composed)
    print("\n".join(tags))
    if os.environ.get("GITHUB_OUTPUT"):
        with open(os.environ["GITHUB_OUTPUT"], "a") as fh:
            fh.write(f"tags={json.dumps(tags)}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
