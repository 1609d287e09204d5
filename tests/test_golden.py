"""Golden files: what the commands print, compared as a whole with a file checked in beside the case.

A wording change shows up as a diff of a golden file instead of slipping through (as "conflict at not placed" once
did). Cases are folders:

* `tests/cases/compose/<case>/`: `release/` (the files of release v1.0.0), `series/` (series.toml and patches;
  its PR entry pins the toy PR, `toy_compose.PR_PATCH`, which the test passes with --sources), `expected.json` (description, the tag, the exit code) and the
  golden files `expected-rebase.txt` (what `vllm-compose rebase` prints) and `expected-status.md` (the status
  table's row of that compose);
* `tests/cases/audit/<case>/`: `expected-audit.txt`, what `check-fuzz` prints for the case's stock and patched
  trees (patched by GNU `patch --fuzz=3`, as the audit cases are).

Temporary paths in the output are written as `<tmp>`. To accept a change on purpose, run with
`VC_UPDATE_GOLDEN=1`, then read the diff of the golden files before committing them.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from toy_compose import PR_PATCH

from vllm_compose.cache import Cache, seed_cache
from vllm_compose.cli import main
from vllm_compose.compose import ComposeOptions, Composer
from vllm_compose.report import render_status
from vllm_compose.status import ReleaseStatus

CASES = Path(__file__).parent / "cases"
UPDATE = os.environ.get("VC_UPDATE_GOLDEN") == "1"
GNU_PATCH = shutil.which("patch")


def _check_golden(path: Path, text: str) -> None:
    if UPDATE:
        path.write_text(text)
        return
    assert path.is_file(), f"{path} is missing: run with VC_UPDATE_GOLDEN=1 to write it, then review it"
    assert text == path.read_text(), f"output differs from {path} (VC_UPDATE_GOLDEN=1 rewrites it)"


def _normalize(text: str, tmp: Path) -> str:
    """Temporary paths as `<tmp>`, the interpreter (the import smoke names it) as `<python>`."""
    text = text.replace(str(tmp.resolve()), "<tmp>").replace(str(tmp), "<tmp>")
    return text.replace(sys.executable, "<python>")


def _release_repo(case: Path, tmp: Path, tag: str) -> Path:
    """A repository whose one commit, tagged `tag`, holds the case's release files (pinned dates: stable ids)."""
    repo = tmp / "vllm"
    shutil.copytree(case / "release", repo)
    for args in (["init", "-q", "-b", "main"], ["add", "-A"], ["commit", "-qm", f"release {tag}"], ["tag", tag]):
        subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True)
    subprocess.run(["git", "checkout", "-q", "--detach"], cwd=repo, check=True, capture_output=True)
    return repo


def _sources(tmp: Path) -> Path:
    """The --sources folder of the compose cases: the toy PR's diff, which their series.toml pins by sha256."""
    folder = tmp / "sources"
    folder.mkdir(exist_ok=True)
    (folder / "pr101.diff").write_text(PR_PATCH)
    return folder


def _compose_cases() -> list[str]:
    return sorted(p.name for p in (CASES / "compose").iterdir() if p.is_dir())


@pytest.mark.parametrize("case", _compose_cases())
def test_rebase_output(case: str, tmp_path: Path, capsys) -> None:
    folder = CASES / "compose" / case
    want = json.loads((folder / "expected.json").read_text())
    repo = _release_repo(folder, tmp_path, want["onto"])
    series = tmp_path / "series"
    shutil.copytree(folder / "series", series)
    argv = ["rebase", "--onto", want["onto"], "--series", str(series), "--repo", str(repo), "--offline", "-q"]
    argv += ["--sources", str(_sources(tmp_path)), "--worktree", str(tmp_path / "conflict")]
    capsys.readouterr()
    code = main(argv)
    out = capsys.readouterr().out
    assert code == want["exit"], out
    _check_golden(folder / "expected-rebase.txt", _normalize(out, tmp_path))


@pytest.mark.parametrize("case", _compose_cases())
def test_status_row(case: str, tmp_path: Path) -> None:
    folder = CASES / "compose" / case
    want = json.loads((folder / "expected.json").read_text())
    repo = _release_repo(folder, tmp_path, want["onto"])
    cache = Cache()
    seed_cache(_sources(tmp_path), cache)
    options = ComposeOptions(offline=True, keep_state=False)
    result = Composer(folder / "series", repo, cache, options).run(want["onto"])
    table = render_status([ReleaseStatus(result, gate="not run in this test", stock_gate="not run in this test")])
    _check_golden(folder / "expected-status.md", table)


@pytest.mark.skipif(GNU_PATCH is None, reason="GNU patch (/usr/bin/patch) is not installed")
@pytest.mark.parametrize("case", sorted(p.name for p in (CASES / "audit").iterdir() if p.is_dir()))
def test_check_fuzz_output(case: str, tmp_path: Path, capsys) -> None:
    folder = CASES / "audit" / case
    patched = tmp_path / "patched"
    shutil.copytree(folder / "stock", patched)
    single = folder / "patch.diff"
    patches = [single] if single.exists() else sorted((folder / "patches").glob("*.diff"))
    for p in patches:
        subprocess.run(
            [GNU_PATCH, "-s", "-p1", "--fuzz=3", "-N", "-r", "-", "--no-backup-if-mismatch", "-i", str(p)],
            cwd=patched,
            capture_output=True,
            check=False,
        )
    capsys.readouterr()
    code = main(["check-fuzz", "--stock", str(folder / "stock"), "--patched", str(patched), *map(str, patches)])
    out = capsys.readouterr().out
    want = json.loads((folder / "expected.json").read_text())
    assert code == (0 if want["ok"] else 1), out
    _check_golden(folder / "expected-audit.txt", _normalize(out, tmp_path))
