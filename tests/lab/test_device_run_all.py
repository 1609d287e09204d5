"""lab/device/run_all.sh's phase table and GPU scheduling, with a stand-in validate.py and collect.py (no GPU here)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "lab" / "device" / "run_all.sh"

FAKE_VALIDATE = """
import json, os, sys, time
args = sys.argv[1:]
out = args[args.index("--out") + 1]
label = args[args.index("--label") + 1]
time.sleep(0.3)
json.dump({"label": label, "ok": True, "gpus": os.environ["CUDA_VISIBLE_DEVICES"],
           "capability": os.environ.get("VC_FAKE_CAPABILITY"), "check_ids": os.environ.get("VC_CHECK_TOKEN_IDS"),
           "args": args, "start": time.time()}, open(out, "w"))
"""

FAKE_COLLECT = """
import sys
from pathlib import Path
Path(sys.argv[2]).mkdir(parents=True, exist_ok=True)
(Path(sys.argv[2]) / "collected").write_text("\\n".join(sorted(p.stem for p in (Path(sys.argv[1]) / "res").glob("*.json"))))
"""


@pytest.fixture
def repo(tmp_path):
    if shutil.which("bash") is None:
        pytest.skip("no bash")
    (tmp_path / "lab" / "device").mkdir(parents=True)
    shutil.copy(SCRIPT, tmp_path / "lab" / "device" / "run_all.sh")
    (tmp_path / "lab" / "device" / "validate.py").write_text(FAKE_VALIDATE)
    (tmp_path / "lab" / "device" / "collect.py").write_text(FAKE_COLLECT)
    return tmp_path


def _run(repo: Path, ngpu: int, *phases: str, **env: str) -> subprocess.CompletedProcess:
    bin_dir = repo / "bin"
    bin_dir.mkdir(exist_ok=True)
    (bin_dir / "python3").write_text(f'#!/bin/sh\nexec {sys.executable} "$@"\n')
    (bin_dir / "python3").chmod(0o755)
    environ = {
        **os.environ,
        "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
        "VC_NGPU": str(ngpu),
        "VC_STAGE_DEST": str(repo / "vc"),
        "OUT": str(repo / "out"),
        **env,
    }
    return subprocess.run(
        ["bash", str(repo / "lab" / "device" / "run_all.sh"), *phases], env=environ, capture_output=True, text=True
    )


def _results(repo: Path) -> dict:
    return {p.stem: json.loads(p.read_text()) for p in (repo / "vc" / "res").glob("*.json")}


def test_one_gpu_runs_the_pp1_suite_in_turn_and_records_pp2_as_not_run(repo):
    proc = _run(repo, 1, "c1", "c2", "c3")
    assert proc.returncode == 0, proc.stderr
    res = _results(repo)
    assert {k for k, r in res.items() if r["ok"]} == {
        "cycle_pp1",
        "cycle_pp1_mtp1",
        "cycle_pp1_mtp2",
        "stock_cycle_pp1",
    }
    assert {r["gpus"] for r in res.values() if r["ok"]} == {"0"}
    assert res["cycle_pp1_mtp1"]["start"] - res["cycle_pp1"]["start"] >= 0.3  # one after another on GPU 0
    assert res["cycle_pp2"] == {
        "label": "cycle_pp2",
        "ok": False,
        "error": "not run: needs 2 GPUs, the machine has 1",
    }
    assert res["stock_cycle_pp1"]["capability"] == "8.0" and "--backend" in res["stock_cycle_pp1"]["args"]
    assert (repo / "out" / "collected").read_text().split() == sorted(res)


def test_two_gpus_put_one_gpu_runs_side_by_side_and_give_pp2_both(repo):
    proc = _run(repo, 2, "c1", "c3", "d6")
    assert proc.returncode == 0, proc.stderr
    res = _results(repo)
    assert (res["cycle_pp1"]["gpus"], res["cycle_pp1_mtp1"]["gpus"]) == ("0", "1")
    assert abs(res["cycle_pp1_mtp1"]["start"] - res["cycle_pp1"]["start"]) < 0.3  # side by side
    assert res["cycle_pp2"]["gpus"] == "0,1" and res["cycle_pp2"]["start"] >= res["cycle_pp1"]["start"] + 0.3
    assert res["composed_pp2_mtp2_tally"]["check_ids"] == "async"  # the table's env column


def test_an_unknown_phase_is_named_and_the_list_is_the_table(repo):
    proc = _run(repo, 1, "nope")
    assert "unknown phase nope" in proc.stdout
    listed = _run(repo, 1, "--list").stdout.split("\n")
    assert any(line.split()[:2] == ["c1", "cycle_pp1"] for line in listed if line.strip())
