"""Tests for checks.py: case folders under tests/cases/checks (stock tree, composed tree, expected verdicts), plus the
import-smoke behaviour and the report format, and a real-data run on the vLLM 0.26.0 sdist when it is present."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from vllm_compose import checks
from vllm_compose.checks import CheckReport, module_name, run_checks
from vllm_compose.trees import DirTree, OverlayTree

CASES = Path(__file__).parent / "cases" / "checks"


def _case_ids() -> list[str]:
    return sorted(p.name for p in CASES.iterdir() if (p / "expected.json").is_file())


@pytest.mark.parametrize("case", _case_ids())
def test_case(case: str) -> None:
    folder = CASES / case
    expected = json.loads((folder / "expected.json").read_text())
    report = run_checks(
        DirTree(folder / "stock"),
        DirTree(folder / "composed"),
        expected["changed"],
        entry_id=case,
        import_smoke=False,
    )
    for name, status in expected["status"].items():
        assert report.result(name).status == status, (name, report.to_json())
    got = [
        {"check": f.check, "severity": f.severity, "file": f.file, "line": f.line, "name": f.name}
        for f in report.findings
    ]
    assert got == expected["findings"]
    assert all(f.entry == case for f in report.findings)
    assert report.ok == all(s != "fail" for s in expected["status"].values())


def test_undefined_helper_message_names_file_line_entry() -> None:
    folder = CASES / "undefined-helper"
    report = run_checks(DirTree(folder / "stock"), DirTree(folder / "composed"), ["pkg/indexer.py"], entry_id="pr38476")
    (finding,) = report.result("undefined-names").findings
    assert str(finding) == (
        "pkg/indexer.py:6: error: UndefinedName: undefined name 'has_deep_gemm_probe' (entry pr38476)"
    )
    assert not report.ok


def test_syntax_error_message() -> None:
    folder = CASES / "syntax-error"
    report = run_checks(DirTree(folder / "stock"), DirTree(folder / "composed"), ["pkg/speculator.py"])
    (finding,) = report.result("compile").findings
    assert finding.message.startswith("IndentationError") or finding.message.startswith("SyntaxError")


def test_non_python_paths_are_ignored(tmp_path: Path) -> None:
    (tmp_path / "a.cu").write_text("this is not python {")
    report = run_checks(DirTree(tmp_path), DirTree(tmp_path), ["a.cu"], import_smoke=False)
    assert report.ok
    assert report.result("compile").files == 0


def test_overlay_tree_input(tmp_path: Path) -> None:
    (tmp_path / "m.py").write_text("x = 1\n")
    composed = OverlayTree(DirTree(tmp_path), {"m.py": b"x = y\n"})
    report = run_checks(DirTree(tmp_path), composed, ["m.py"], import_smoke=False)
    assert [f.name for f in report.findings] == ["y"]


def test_smoke_skipped_with_reason_when_runtime_missing(tmp_path: Path, monkeypatch) -> None:
    (tmp_path / "vllm").mkdir()
    (tmp_path / "vllm" / "__init__.py").write_text("")
    (tmp_path / "vllm" / "a.py").write_text("X = 1\n")
    monkeypatch.setattr(checks, "RUNTIME_PROBE_MODULES", ("json", "no_such_runtime_module_xyz"))
    report = run_checks(DirTree(tmp_path), DirTree(tmp_path), ["vllm/a.py"])
    smoke = report.result("import-smoke")
    assert smoke.status == "skipped"
    assert "not importable" in smoke.reason and "no_such_runtime_module_xyz" in smoke.reason
    assert report.ok  # skipped is not a failure, but it is never a pass
    assert report.to_json()["checks"][2]["status"] == "skipped"


def test_smoke_disabled_is_skipped(tmp_path: Path) -> None:
    (tmp_path / "m.py").write_text("x = 1\n")
    smoke = run_checks(DirTree(tmp_path), DirTree(tmp_path), ["m.py"], import_smoke=False).result("import-smoke")
    assert smoke.status == "skipped" and smoke.reason


def _smoke_tree(tmp_path: Path) -> OverlayTree:
    base = tmp_path / "base"
    (base / "vllm" / "sub").mkdir(parents=True)
    (base / "vllm" / "__init__.py").write_text("")
    (base / "vllm" / "sub" / "__init__.py").write_text("")
    (base / "vllm" / "sub" / "good.py").write_text("VALUE = 1\n")
    (base / "vllm" / "sub" / "bad.py").write_text("VALUE = 1\n")
    return OverlayTree(DirTree(base), {"vllm/sub/bad.py": b"import json\n\nraise RuntimeError('kernel missing')\n"})


def test_smoke_runs_where_runtime_importable(tmp_path: Path, monkeypatch) -> None:
    # stand in for torch with a module every interpreter has, so the subprocess path runs without a GPU stack
    monkeypatch.setattr(checks, "RUNTIME_PROBE_MODULES", ("json",))
    composed = _smoke_tree(tmp_path)
    report = run_checks(DirTree(tmp_path / "base"), composed, ["vllm/sub/good.py", "vllm/sub/bad.py"], entry_id="e1")
    smoke = report.result("import-smoke")
    assert smoke.status == "fail"
    (finding,) = smoke.findings
    assert finding.file == "vllm/sub/bad.py" and finding.line == 3 and finding.entry == "e1"
    assert "RuntimeError: kernel missing" in finding.message


def test_smoke_passes(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(checks, "RUNTIME_PROBE_MODULES", ("json",))
    composed = _smoke_tree(tmp_path)
    smoke = run_checks(DirTree(tmp_path / "base"), composed, ["vllm/sub/good.py"], python=sys.executable).result(
        "import-smoke"
    )
    assert smoke.status == "pass" and smoke.files == 1


def test_module_name() -> None:
    assert module_name("vllm/v1/worker/gpu/model_runner.py") == "vllm.v1.worker.gpu.model_runner"
    assert module_name("vllm/platforms/__init__.py") == "vllm.platforms"
    assert module_name("vllm/kernels/x.cu") is None
    assert module_name("tests/foo-bar/test_x.py") is None


def test_report_json_roundtrip() -> None:
    folder = CASES / "undefined-helper"
    report = run_checks(
        DirTree(folder / "stock"),
        DirTree(folder / "composed"),
        ["pkg/indexer.py"],
        entry_id="e",
        import_smoke=False,
    )
    data = json.loads(json.dumps(report.to_json()))
    assert data["ok"] is False and data["entry"] == "e"
    assert [c["name"] for c in data["checks"]] == ["compile", "undefined-names", "import-smoke"]
    assert data["checks"][1]["findings"][0]["name"] == "has_deep_gemm_probe"
    assert isinstance(report, CheckReport)


@pytest.mark.sdist
def test_real_sdist_against_itself_has_no_findings(release_v0260: Path) -> None:
    tree = DirTree(release_v0260)
    paths = [
        "vllm/platforms/cuda.py",
        "vllm/model_executor/layers/sparse_attn_indexer.py",
        "vllm/model_executor/models/registry.py",
        "vllm/v1/worker/gpu/spec_decode/autoregressive/speculator.py",
        "vllm/v1/attention/backends/mla/indexer.py",
        "vllm/model_executor/models/deepseek_mtp.py",
        "vllm/config/speculative.py",
        "vllm/v1/worker/gpu/model_runner.py",
    ]
    paths = [p for p in paths if tree.read(p) is not None]
    report = run_checks(tree, tree, paths, import_smoke=False)
    assert report.findings == []
    assert report.result("compile").files == len(paths) > 0
    assert report.result("undefined-names").status == "pass"


def test_smoke_takes_compiled_members_from_installed_vllm(tmp_path: Path, monkeypatch) -> None:
    # the installed package has a member the source tree lacks (standing in for vllm/_C.abi3.so)
    site = tmp_path / "site"
    (site / "vllm" / "kernels").mkdir(parents=True)
    (site / "vllm" / "__init__.py").write_text("")
    (site / "vllm" / "kernels" / "__init__.py").write_text("")
    (site / "vllm" / "kernels" / "_native.py").write_text("ADD = 'installed'\n")
    src = tmp_path / "src"
    (src / "vllm" / "kernels").mkdir(parents=True)
    (src / "vllm" / "__init__.py").write_text("")
    (src / "vllm" / "kernels" / "__init__.py").write_text("")
    (src / "vllm" / "kernels" / "ops.py").write_text("from vllm.kernels._native import ADD\n")
    monkeypatch.setattr(checks, "RUNTIME_PROBE_MODULES", ("json",))
    changed = ["vllm/kernels/ops.py"]

    monkeypatch.delenv("PYTHONPATH", raising=False)
    alone = run_checks(DirTree(src), DirTree(src), changed).result("import-smoke")
    assert alone.status == "fail" and "No module named 'vllm.kernels._native'" in alone.findings[0].message
    assert alone.findings[0].line == 1

    monkeypatch.setenv("PYTHONPATH", str(site))
    with_installed = run_checks(DirTree(src), DirTree(src), changed).result("import-smoke")
    assert with_installed.status == "pass", with_installed.to_json()
