"""The README's flow on a machine without a GPU: compose, `pip install -e vllm/`, then compose the next release.

The venv then holds an editable install of the previous release (or no CUDA driver is there for the kernels it
copied), so importing the composed modules cannot say anything about the series. `rebase`, `status`, `wheel` and
`editable` skip the import smoke then, with the reason in the report and the JSON, and go on; where the smoke does
run and an import fails, the refusal's hint names `--no-import-smoke`, because the failure may still be the
machine's.

The toy series' fix adds `import vllm._C` to the changed module, as vllm/platforms/cuda.py imports its kernels. The
"installed vLLM" is a stand-in on PYTHONPATH (toy_vllm.install_stand_in) whose `_C.abi3.so` is no loadable library:
where the smoke runs, that import fails as a kernel that does not load on this machine would.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import toy_vllm as toy
from toy_wheel import make_stock_wheel

from vllm_compose import checks
from vllm_compose.cli import main

# ruff: noqa: W293 -- blank context lines of the diff below are a single space, as in any unified diff

#: the fix: the changed module imports the compiled kernels (the unused import is a pyflakes warning, not an error)
KERNEL_FIX = """\
diff --git a/vllm/runner.py b/vllm/runner.py
--- a/vllm/runner.py
+++ b/vllm/runner.py
@@ -1,4 +1,5 @@
 import os
+import vllm._C
 
 
 class Runner:
"""
BRANCH = "compose-101-v0.26.0"


@pytest.fixture
def flow(tmp_path: Path, monkeypatch) -> dict[str, Path]:
    """The toy release and series, a stand-in driver that loads and a runtime that imports (json for torch); which
    vLLM is installed is each test's choice (`installed`)."""
    series = toy.write_series(tmp_path / "series", tmp_path / "sources", fix_body=KERNEL_FIX)
    repo = toy.make_release_repo(tmp_path / "vllm")
    monkeypatch.setattr(checks, "CUDA_DRIVER", "libc.so.6")
    monkeypatch.setattr(checks, "RUNTIME_PROBE_MODULES", ("json",))
    stock = make_stock_wheel(tmp_path / "stock")
    return {"series": series, "repo": repo, "sources": tmp_path / "sources", "tmp": tmp_path, "stock": stock}


def installed(flow: dict[str, Path], monkeypatch, version: str) -> None:
    site = toy.install_stand_in(flow["tmp"] / f"site-{version}", version)
    monkeypatch.setenv("PYTHONPATH", str(site))


def rebase(flow: dict[str, Path], *extra: str) -> int:
    argv = ["rebase", "--onto", toy.TAG, "--series", str(flow["series"]), "--repo", str(flow["repo"])]
    return main([*argv, "--sources", str(flow["sources"]), "--offline", "-q", *extra])


def test_rebase_skips_the_smoke_with_the_reason_where_another_release_is_installed(flow, monkeypatch, capsys):
    """The README's third command: the venv holds the previous release's editable install."""
    installed(flow, monkeypatch, "0.25.0+compose.101.g1234567")
    report = flow["tmp"] / "report.json"
    assert rebase(flow, "--json", str(report)) == 0
    out = capsys.readouterr().out
    reason = "is 0.25.0+compose.101.g1234567, not 0.26.0: its compiled kernels are another release's"
    assert "  import-smoke     skipped (the vLLM installed for " in out and reason in out
    assert f"OK: composed 2 entries onto {toy.TAG}" in out
    data = json.loads(report.read_text())
    (smoke,) = [c for c in data["final_checks"]["checks"] if c["name"] == "import-smoke"]
    assert smoke["status"] == "skipped" and reason in smoke["reason"]
    for entry in data["entries"]:  # each entry's checks say the same, not pass
        (own,) = [c for c in entry["checks"]["checks"] if c["name"] == "import-smoke"]
        assert own["status"] == "skipped" and reason in own["reason"]


def test_rebase_skips_the_smoke_without_a_cuda_driver(flow, monkeypatch, capsys):
    installed(flow, monkeypatch, "0.26.0+compose.101.g1234567")
    monkeypatch.setattr(checks, "CUDA_DRIVER", "libno-such-cuda.so.1")
    assert rebase(flow) == 0
    assert "import-smoke     skipped (no CUDA driver: libno-such-cuda.so.1 does not load" in capsys.readouterr().out


def test_where_the_smoke_runs_and_an_import_fails_the_refusal_names_the_switch(flow, monkeypatch, capsys):
    """The control: the release composed is installed and the driver loads, so the smoke runs; the kernel stand-in
    does not load, the compose is refused, and the hint says the failure may be the machine's."""
    installed(flow, monkeypatch, "0.26.0+compose.101.g1234567")
    assert rebase(flow) == 2
    out = capsys.readouterr().out
    assert "import vllm.runner failed: ImportError" in out
    assert "REFUSED: checks failed" in out
    assert "hint: an import failure can be this machine's" in out and "run again with --no-import-smoke" in out
    assert rebase(flow, "--no-import-smoke") == 0
    assert "import-smoke     skipped (--no-import-smoke given)" in capsys.readouterr().out


def test_status_says_why_the_smoke_was_skipped_and_can_skip_it(flow, monkeypatch, capsys):
    installed(flow, monkeypatch, "0.25.0")
    argv = ["status", "--onto", toy.TAG, "--series", str(flow["series"]), "--repo", str(flow["repo"])]
    argv += ["--sources", str(flow["sources"]), "--offline", "--no-ampere-gate", "--json-dir", str(flow["tmp"] / "j")]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert f"{toy.TAG}: composed (import smoke skipped: the vLLM installed for " in out and "is 0.25.0, not" in out
    installed(flow, monkeypatch, "0.26.0")  # the smoke would run, and fail on the kernel stand-in
    assert main([*argv, "--no-import-smoke"]) == 0
    assert f"{toy.TAG}: composed (import smoke skipped: --no-import-smoke given)" in capsys.readouterr().out
    data = json.loads((flow["tmp"] / "j" / f"{toy.TAG}.json").read_text())
    assert {"name": "import-smoke", "status": "skipped", "reason": "--no-import-smoke given"}.items() <= next(
        c for c in data["final_checks"]["checks"] if c["name"] == "import-smoke"
    ).items()


def artifact_argv(flow: dict[str, Path], command: str, *extra: str) -> list[str]:
    argv = [command, "--onto", toy.TAG, "--repo", str(flow["repo"]), "--series", str(flow["series"])]
    return [*argv, "--stock-wheel", str(flow["stock"]), "--no-ampere-gate", *extra]


def test_wheel_and_editable_preflight_skip_or_name_the_switch(flow, monkeypatch, capsys):
    assert rebase(flow, "--no-import-smoke") == 0
    installed(flow, monkeypatch, "0.25.0")
    out_dir = flow["tmp"] / "dist"
    assert main(artifact_argv(flow, "wheel", "--out", str(out_dir))) == 0
    assert "import-smoke skipped (the vLLM installed for " in capsys.readouterr().out
    assert main(artifact_argv(flow, "editable")) == 0
    assert "import-smoke skipped (the vLLM installed for " in capsys.readouterr().out

    installed(flow, monkeypatch, "0.26.0")  # now it runs, and the kernel stand-in does not load
    for argv in (artifact_argv(flow, "wheel", "--out", str(flow["tmp"] / "dist2")), artifact_argv(flow, "editable")):
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert "import vllm.runner failed: ImportError" in err
        assert "hint: an import failure can be this machine's" in err and "--no-import-smoke" in err
        assert "no artifact was built" in err
    assert not (flow["tmp"] / "dist2").exists()
    assert main(artifact_argv(flow, "wheel", "--out", str(flow["tmp"] / "dist3"), "--no-import-smoke")) == 0
    assert "import-smoke skipped (--no-import-smoke given)" in capsys.readouterr().out
