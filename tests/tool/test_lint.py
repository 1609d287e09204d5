"""The repository is lint-clean and formatted: the same ruff (version pinned in the test extras and in
.pre-commit-config.yaml) that the pre-commit hooks run."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _ruff() -> str:
    sibling = Path(sys.executable).parent / "ruff"
    found = str(sibling) if sibling.is_file() else shutil.which("ruff")
    if found is None:
        pytest.skip("ruff is not installed (it comes with the test extras)")
    return found


@pytest.mark.parametrize("args", [["check", "."], ["format", "--check", "."]], ids=["check", "format"])
def test_ruff_is_clean(args):
    proc = subprocess.run([_ruff(), *args], cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
