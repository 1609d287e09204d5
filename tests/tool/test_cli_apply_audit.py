"""`scripts/apply_series.py` and `scripts/check_fuzz.py` end to end: exit codes, JSON files, human output.

They run as the user runs them (a subprocess of the script), on the audit case folders of tests/cases/audit.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CASES = ROOT / "tests" / "cases" / "audit"


def run(script: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(ROOT / "scripts" / script), *map(str, args)], capture_output=True, text=True
    )


def copy_stock(case: str, dest: Path) -> Path:
    shutil.copytree(CASES / case / "stock", dest)
    return dest


def test_apply_clean_patch_exits_0_with_json(tmp_path):
    target = copy_stock("clean", tmp_path / "site")
    out = tmp_path / "apply.json"
    proc = run("apply_series.py", "--to", target, "--patch", CASES / "clean" / "patch.diff", "--json", out)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    data = json.loads(out.read_text())
    assert {h["verdict"] for h in data["hunks"]} <= {"exact", "offset"}
    assert all({"patch", "file", "hunk", "verdict", "landed_at"} <= set(h) for h in data["hunks"])
    assert (target / "pkg" / "config.py").read_text() != (CASES / "clean" / "stock" / "pkg" / "config.py").read_text()


def test_apply_dry_run_writes_nothing(tmp_path):
    target = copy_stock("clean", tmp_path / "site")
    before = (target / "pkg" / "config.py").read_bytes()
    proc = run("apply_series.py", "--to", target, "--patch", CASES / "clean" / "patch.diff", "--dry-run")
    assert proc.returncode == 0 and "(dry run)" in proc.stdout
    assert (target / "pkg" / "config.py").read_bytes() == before


def test_apply_conflict_exits_1_and_writes_a_reject(tmp_path):
    target = copy_stock("failed", tmp_path / "site")
    proc = run("apply_series.py", "--to", target, "--patch", CASES / "failed" / "patch.diff")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "not applied" in proc.stdout
    assert list(target.rglob("*.rej"))


def test_apply_bad_input_exits_3(tmp_path):
    proc = run("apply_series.py", "--to", tmp_path / "absent", "--patch", CASES / "clean" / "patch.diff")
    assert proc.returncode == 3 and proc.stderr.startswith("error: ")
    proc = run("apply_series.py", "--to", tmp_path, "--patch", tmp_path / "missing.diff")
    assert proc.returncode == 3 and "missing.diff" in proc.stderr


@pytest.mark.skipif(shutil.which("patch") is None, reason="GNU patch is not installed")
def test_check_fuzz_flags_gnu_patch_misplacement(tmp_path):
    stock = CASES / "kwarg-after-call" / "stock"
    patched = copy_stock("kwarg-after-call", tmp_path / "patched")
    subprocess.run(
        [
            "patch",
            "-p1",
            "--fuzz=3",
            "-N",
            "-s",
            "-d",
            str(patched),
            "-i",
            str(CASES / "kwarg-after-call" / "patch.diff"),
        ],
        check=False,
        capture_output=True,
    )
    out = tmp_path / "audit.json"
    proc = run(
        "check_fuzz.py",
        "--stock",
        stock,
        "--patched",
        patched,
        "--json",
        out,
        CASES / "kwarg-after-call" / "patch.diff",
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr
    data = json.loads(out.read_text())
    assert data["hunks"][0]["verdict"] == "misplaced" and data["summary"]["ok"] is False
    assert "expected" in proc.stdout and "landed" in proc.stdout  # the side-by-side view


def test_check_fuzz_clean_application_on_git_revisions(tmp_path):
    repo = tmp_path / "repo"
    shutil.copytree(CASES / "clean" / "stock", repo)
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@example.invalid"]
    subprocess.run([*git[:3], "init", "-q"], check=True)
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-qm", "stock"], check=True)
    subprocess.run([*git, "tag", "stock"], check=True)
    assert run("apply_series.py", "--to", repo, "--patch", CASES / "clean" / "patch.diff").returncode == 0
    subprocess.run([*git, "commit", "-qam", "patched"], check=True)
    proc = run("check_fuzz.py", "--repo", repo, "--stock", "stock", "--patched", "HEAD", CASES / "clean" / "patch.diff")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "OK" in proc.stdout
