"""lab/device/mtp_gain.sh with a stand-in benchmarks/recall_e2e.py (no GPU here): the model is written once, each MTP
setting runs with the default configuration, `explain` runs over every result so far, and the archive holds them."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "lab" / "device" / "mtp_gain.sh"

#: records its arguments; `model` writes the spec file, `run` its --out, `explain` a line per file
FAKE_E2E = """
import json, os, sys
from pathlib import Path
args = sys.argv[1:]
log = Path(os.environ["FAKE_LOG"])
log.write_text(log.read_text() + json.dumps(args) + "\\n" if log.exists() else json.dumps(args) + "\\n")
if args[0] == "model":
    Path(args[args.index("--out") + 1]).mkdir(parents=True, exist_ok=True)
    (Path(args[args.index("--out") + 1]) / "recall_spec.json").write_text("{}")
elif args[0] == "run":
    Path(args[args.index("--out") + 1]).write_text(json.dumps({"mtp": int(args[args.index("--mtp") + 1])}))
elif args[0] == "explain":
    print("| explained |", *[Path(a).name for a in args[1:] if a.endswith(".json")])
elif args[0] == "serve":
    mtp = int(args[args.index("--mtp") + 1])
    out = Path(args[args.index("--out") + 1])
    if os.environ.get("FAKE_CUT") == str(mtp):  # cut short: only the rows so far, in OUT.partial
        out.with_name(out.name + ".partial").write_text(json.dumps([{"mtp": mtp, "batch": 1}]))
        sys.exit(124)
    out.write_text(json.dumps([{"mtp": mtp, "batch": 1}, {"mtp": mtp, "batch": 8}]))
elif args[0] == "table":
    print("| table |", *[Path(a).name for a in args[1:]])
"""


@pytest.fixture
def repo(tmp_path):
    if shutil.which("bash") is None or shutil.which("timeout") is None:
        pytest.skip("no bash or timeout")
    (tmp_path / "lab" / "device").mkdir(parents=True)
    (tmp_path / "benchmarks").mkdir()
    shutil.copy(SCRIPT, tmp_path / "lab" / "device" / "mtp_gain.sh")
    (tmp_path / "benchmarks" / "recall_e2e.py").write_text(FAKE_E2E)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "python3").write_text(f'#!/bin/sh\nexec {sys.executable} "$@"\n')
    (bin_dir / "python3").chmod(0o755)
    return tmp_path


def _run(repo: Path, *mtp: str, **env: str) -> subprocess.CompletedProcess:
    environ = {**os.environ, "PATH": f"{repo / 'bin'}{os.pathsep}{os.environ['PATH']}",
               "VC_STAGE_DEST": str(repo / "vc"), "OUT": str(repo / "out"), "FAKE_LOG": str(repo / "calls"), **env}  # fmt: skip
    return subprocess.run(["bash", str(repo / "lab" / "device" / "mtp_gain.sh"), *mtp], env=environ,
                          capture_output=True, text=True)  # fmt: skip


def _calls(repo: Path) -> list[list[str]]:
    return [json.loads(line) for line in (repo / "calls").read_text().splitlines()]


def test_two_calls_write_the_model_once_run_each_setting_and_explain_both(repo):
    first = _run(repo, "0")
    assert first.returncode == 0, first.stderr
    second = _run(repo, "1")
    assert second.returncode == 0, second.stderr
    calls = _calls(repo)
    model = str(repo / "vc" / "models" / "recall_a80")
    assert calls[0] == ["model", "--out", model, "--acceptance", "0.8"]
    runs = [c for c in calls if c[0] == "run"]
    assert [c[c.index("--mtp") + 1] for c in runs] == ["0", "1"]
    assert runs[0][runs[0].index("--batch") :] == ["--batch", "8", "--context", "8192", "--tokens", "128",
                                                   "--graphs", "--repeats", "3", "--out",
                                                   str(repo / "vc" / "e2e" / "mtp0.json")]  # fmt: skip
    assert sum(c[0] == "model" for c in calls) == 1
    # explain only once both an MTP 0 and an MTP k result are there
    explains = [c for c in calls if c[0] == "explain"]
    assert len(explains) == 1 and [Path(a).name for a in explains[0][1:3]] == ["mtp0.json", "mtp1.json"]
    assert "| explained | mtp0.json mtp1.json" in second.stdout
    (archive,) = sorted((repo / "out").glob("e2e-*.tgz"))[-1:]
    with tarfile.open(archive) as t:
        names = {Path(n).name for n in t.getnames()}
    assert {"mtp0.json", "mtp1.json", "explain.md"} <= names


def test_a_dry_run_prints_the_commands_and_runs_nothing(repo):
    proc = _run(repo, "0", "1", VC_DRY_RUN="1", VC_E2E_ARGS="--batch 1 --tokens 16")
    assert proc.returncode == 0, proc.stderr
    runs = [line for line in proc.stdout.splitlines() if line.startswith("RUN ")]
    assert "recall_e2e.py model" in runs[0]
    assert runs[1].endswith("--mtp 0 --batch 1 --tokens 16 --out " + str(repo / "vc" / "e2e" / "mtp0.json"))
    assert not (repo / "calls").exists()


def test_serve_long_measures_the_left_out_pair_from_one_prefill_and_tables_them_with_the_rest(repo):
    assert _run(repo, "serve", "0").returncode == 0
    proc = _run(repo, "serve-long", "0", "2")
    assert proc.returncode == 0, proc.stderr
    serves = [c for c in _calls(repo) if c[0] == "serve"]
    assert [c[c.index("--mtp") + 1] for c in serves] == ["0", "0", "2"]
    assert serves[1][serves[1].index("--batches") :] == ["--batches", "32", "--context", "131072", "--tokens", "64",
                                                         "--graphs", "--reuse-prompts", "--python", "python3",
                                                         "--out", str(repo / "vc" / "e2e" / "serve-long-mtp0.json")]  # fmt: skip
    tables = [c for c in _calls(repo) if c[0] == "table"]
    assert sorted(Path(a).name for a in tables[-1][1:]) == [
        "serve-long-mtp0.json", "serve-long-mtp2.json", "serve-mtp0.json"
    ]  # fmt: skip


def test_serve_runs_one_server_per_setting_and_tables_every_result_including_a_cut_one(repo):
    proc = _run(repo, "serve", "0", "1", FAKE_CUT="1")
    assert proc.returncode == 0, proc.stderr
    calls = _calls(repo)
    serves = [c for c in calls if c[0] == "serve"]
    assert [c[c.index("--mtp") + 1] for c in serves] == ["0", "1"]
    assert serves[0][serves[0].index("--batches") :] == ["--batches", "1,8,32", "--context", "8192,32768,131072",
                                                         "--tokens", "64", "--graphs", "--reuse-prompts",
                                                         "--skip", "131072x32", "--python", "python3",
                                                         "--out", str(repo / "vc" / "e2e" / "serve-mtp0.json")]  # fmt: skip
    assert not any(c[0] in ("run", "explain") for c in calls)  # serve mode runs no offline engine
    (table,) = [c for c in calls if c[0] == "table"]
    assert sorted(Path(a).name for a in table[1:]) == ["serve-mtp0.json", "serve-mtp1.json.partial"]
    assert "| table | serve-mtp0.json serve-mtp1.json.partial" in proc.stdout
    (archive,) = sorted((repo / "out").glob("e2e-*.tgz"))[-1:]
    with tarfile.open(archive) as t:
        names = {Path(n).name for n in t.getnames()}
    assert {"serve-mtp0.json", "serve-mtp1.json.partial", "serve-table.md"} <= names
