"""The wheel carries the files the package reads at run time, and the package finds them where a wheel puts them.

The project is copied without its git metadata, so setuptools-scm's file finder adds nothing and only pyproject's
`package-data` decides what ships; the wheel built from it is unpacked into a bare folder and imported there by an
interpreter that sees nothing else (`-S -I`: no site-packages, no PYTHONPATH), so a path that reaches back into a
source checkout would find nothing.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
RECORDING = "vllm_compose/ampere/recordings/composed-v0.26.0-sm80.json"
COVERAGE_RECORD = "vllm_compose/ampere/gate_coverage.json"

#: run in the unpacked wheel: where the gate looks for its recording, and what it reads there
PROBE = """
import sys
sys.path.insert(0, sys.argv[1])
from vllm_compose.ampere import coverage_record, gate
from vllm_compose.ampere.kernel_gate import load_records
recording = gate.RECORDINGS["0.26.0"]
print(gate.__file__)
print(recording)
print(recording.is_file(), len(load_records(recording)), coverage_record.RECORD_FILE.is_file())
"""


def test_the_wheel_ships_the_recording_and_the_gate_finds_it_there(tmp_path):
    pytest.importorskip("setuptools_scm", reason="the build backend's version plugin (the test extra installs it)")
    project = tmp_path / "project"
    shutil.copytree(
        REPO / "src",
        project / "src",
        ignore=shutil.ignore_patterns("__pycache__", "*.egg-info", "_version.py"),
    )
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / name, project / name)
    env = {**os.environ, "SETUPTOOLS_SCM_PRETEND_VERSION": "0.0.0"}
    build = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "--no-index"]
        + ["-w", str(tmp_path / "dist"), str(project)],
        env=env,
        capture_output=True,
        text=True,
    )
    assert build.returncode == 0, build.stdout[-2000:] + build.stderr[-2000:]
    (wheel,) = (tmp_path / "dist").glob("vllm_compose-*.whl")
    with zipfile.ZipFile(wheel) as zf:
        names = set(zf.namelist())
        assert {RECORDING, COVERAGE_RECORD} <= names
        assert zf.read(RECORDING) == (REPO / "src" / RECORDING).read_bytes()
        zf.extractall(tmp_path / "site")

    probe = subprocess.run(
        [sys.executable, "-S", "-I", "-c", PROBE, str(tmp_path / "site")], capture_output=True, text=True
    )
    assert probe.returncode == 0, probe.stderr[-2000:]
    module, recording, checks = probe.stdout.splitlines()
    site = str(tmp_path / "site")
    assert module.startswith(site) and recording == f"{site}/{RECORDING}"
    is_file, records, coverage = checks.split()
    assert (is_file, coverage) == ("True", "True") and int(records) > 100
