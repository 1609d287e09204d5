"""The command line as a new user meets it: what `--help` and `--version` say, the exit code of a usage error, the
scripts run by a `python3` that lacks the tool's dependencies, and the wording of a successful compose report."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from vllm_compose.cli import main
from vllm_compose.errors import ExitCode

ROOT = Path(__file__).resolve().parents[2]


def test_help_describes_the_tool_and_its_exit_codes(capsys):
    with pytest.raises(SystemExit) as done:
        main(["--help"])
    assert done.value.code == 0
    out = capsys.readouterr().out
    assert "argument parsing and dispatch" not in out
    assert "Compose upstream vLLM PRs" in out and "compose-<PRs>-<tag>" in out
    assert "4 bad command line (usage: an unknown or missing" in out.replace("\n", " ")


def test_version_names_the_tool(capsys):
    from importlib.metadata import version

    with pytest.raises(SystemExit) as done:
        main(["--version"])
    assert done.value.code == 0
    assert capsys.readouterr().out.strip() == f"vllm-compose {version('vllm-compose')}"


@pytest.mark.parametrize(
    "argv", [["rebase", "--onto"], ["no-such-command"], ["rebase", "--no-such-flag"], ["status"], []]
)
def test_usage_errors_have_their_own_exit_code(argv, capsys):
    assert main(argv) == ExitCode.USAGE == 4  # not 2: the README gives 2 to "refused by the audit or checks"
    err = capsys.readouterr().err
    assert err.startswith("usage: vllm-compose") and "error:" in err and "Traceback" not in err


@pytest.mark.parametrize(
    "argv",
    [
        ["rebase"],
        ["rebase", "--message", "Subject", "--onto", "v0.26.0"],
        ["audit-series"],
        ["review", "--onto", "v0.26.0", "--approve-all"],
        ["review", "--onto", "v0.26.0", "--by", "me"],
    ],
)
def test_options_that_need_one_another_are_usage_errors_too(argv, capsys, tmp_path, monkeypatch):
    """What argparse cannot require (--onto unless --continue or --abort) is the command line's fault all the same:
    exit 4, as the README's table says, with the option named; nothing read or written before."""
    monkeypatch.chdir(tmp_path)
    assert main(argv) == ExitCode.USAGE
    err = capsys.readouterr().err
    assert err.startswith("error: --") and "Traceback" not in err
    assert list(tmp_path.iterdir()) == []


def fresh_clone(tmp_path: Path, with_venv: bool) -> Path:
    """The scripts and sources as a fresh clone has them; `.venv` (this checkout's, linked) only when asked."""
    clone = tmp_path / "clone"
    shutil.copytree(ROOT / "scripts", clone / "scripts")
    shutil.copytree(ROOT / "src", clone / "src", ignore=shutil.ignore_patterns("__pycache__"))
    if with_venv:
        (clone / ".venv").symlink_to(Path(sys.prefix))
    return clone


def bare_python(script: Path, *args: str) -> subprocess.CompletedProcess:
    """`python3 script` by an interpreter without the tool's dependencies: no site-packages (-S), no user site."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV"))}
    return subprocess.run(
        [sys.executable, "-S", "-s", str(script), *args], capture_output=True, text=True, env=env, cwd=script.parent
    )


def test_a_script_without_a_venv_names_the_one_command_that_sets_it_up(tmp_path):
    clone = fresh_clone(tmp_path, with_venv=False)
    proc = bare_python(clone / "scripts" / "rebase_series.py", "--onto", "v0.27.0")
    assert proc.returncode == 3, proc.stderr
    assert "ModuleNotFoundError" not in proc.stderr and "Traceback" not in proc.stderr
    assert "no module pygit2" in proc.stderr
    assert f"hint: set the project up once: cd {clone} && python3 -m venv .venv && .venv/bin/pip install -e ." in (
        proc.stderr
    )


@pytest.mark.parametrize("script", ["rebase_series.py", "apply_series.py", "check_fuzz.py"])
def test_a_script_run_by_a_bare_python3_re_executes_under_the_projects_venv(tmp_path, script):
    clone = fresh_clone(tmp_path, with_venv=True)
    proc = bare_python(clone / "scripts" / script, "--help")
    assert proc.returncode == 0, proc.stderr
    command = {"rebase_series.py": "rebase", "apply_series.py": "apply", "check_fuzz.py": "check-fuzz"}[script]
    assert proc.stdout.startswith(f"usage: vllm-compose {command}")


def test_the_editable_hint_names_no_missing_command(tmp_path):
    from vllm_compose.artifacts.editable import editable_install
    from vllm_compose.errors import ComposeError

    (tmp_path / "setup.py").write_text("")
    with pytest.raises(ComposeError) as err:
        editable_install(tmp_path, tmp_path / "vllm-0.26.0-cp38-abi3-manylinux_2_28_x86_64.whl", "compose.1.gabc")
    assert "--fetch" not in str(err.value) and "--stock-wheel" in str(err.value)
    assert "vllm-compose editable --onto TAG" in str(err.value)


def composed_result(final_errors: list[dict]):
    from vllm_compose.checks import CheckReport, CheckResult, Finding
    from vllm_compose.results import (
        CheckStatus,
        ComposeResult,
        ComposeStatus,
        EntryOutcome,
        EntryStatus,
        HunkOutcome,
        Severity,
    )

    def finding(**change):
        fields = {
            "check": "undefined-names",
            "severity": Severity.ERROR,
            "file": "vllm/x.py",
            "line": 754,
            "name": "has_deep_gemm",
            "message": "UndefinedName: undefined name 'has_deep_gemm'",
        }
        return Finding(**{**fields, **change})

    def report(findings):
        status = CheckStatus.FAIL if findings else CheckStatus.PASS
        return CheckReport(None, [CheckResult("undefined-names", status, findings)])

    pr = EntryOutcome(
        "pr38476",
        "PR",
        EntryStatus.APPLIED,
        hunks=[
            HunkOutcome("vllm/platforms/cuda.py", 1, "conflict", None, resolved_by="fix-priority"),
            HunkOutcome("vllm/x.py", 3, "merged", 120, scope="def f [function]"),
        ],
        checks=report([finding()]),
    )
    fix = EntryOutcome(
        "fix-priority", "Fix", EntryStatus.APPLIED, hunks=[HunkOutcome("vllm/platforms/cuda.py", 1, "exact", 40)]
    )
    return ComposeResult(
        "compose-1-v0.26.0",
        "v0.26.0",
        ComposeStatus.COMPOSED,
        "a" * 40,
        "b" * 40,
        [pr, fix],
        "composed 2 entries onto v0.26.0",
        final_checks=report([finding(**f) for f in final_errors]),
    )


def test_a_successful_compose_report_reads_as_a_success():
    from vllm_compose.report import render_compose

    text = render_compose(composed_result([]))
    assert "not placed" not in text and "at not" not in text
    assert (
        "pr38476: vllm/platforms/cuda.py hunk 1: carried by fix-priority, not applied by pr38476 (alone it does not "
        "place on this release: conflict)" in text
    )
    assert "pr38476: vllm/x.py hunk 3: merged at line 120 in def f [function]" in text
    assert (
        "check undefined-names after this entry: 1 error(s), none left in the composed tree (a later entry of the "
        "series cures them)" in text
    )
    assert "has_deep_gemm" not in text  # cured: not listed as if it were a problem


def test_an_error_still_in_the_composed_tree_is_listed():
    from vllm_compose.report import render_compose

    text = render_compose(composed_result([{"line": 760}]))
    assert "check undefined-names after this entry: 1 error(s)\n" in text
    assert "vllm/x.py:754: UndefinedName: undefined name 'has_deep_gemm'" in text
    assert "none left" not in text


def test_the_default_conflict_worktree_is_ignored_by_the_project(tmp_path):
    """`vllm-compose-conflict-<tag>/` is created next to vllm/, i.e. in the project root: git must not offer it."""
    probe = subprocess.run(
        ["git", "-C", str(ROOT), "check-ignore", "--no-index", "vllm-compose-conflict-v0.26.0/vllm/x.py"],
        capture_output=True,
        text=True,
    )
    assert probe.returncode == 0, probe.stderr


def test_the_parent_repository_does_not_report_the_checked_out_compose(tmp_path):
    """With this repository's .gitmodules, a new commit checked out in vllm/ is not `M vllm` in `git status`."""

    def git(cwd, *args):
        return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout

    parent = tmp_path / "parent"
    sub = parent / "vllm"
    sub.mkdir(parents=True)
    git(parent, "init", "-q")
    git(sub, "init", "-q")
    git(sub, "commit", "-q", "--allow-empty", "-m", "upstream")
    shutil.copy(ROOT / ".gitmodules", parent / ".gitmodules")
    git(parent, "add", ".gitmodules")
    git(parent, "update-index", "--add", "--cacheinfo", f"160000,{git(sub, 'rev-parse', 'HEAD').strip()},vllm")
    git(parent, "commit", "-q", "-m", "project")
    git(sub, "commit", "-q", "--allow-empty", "-m", "a compose commit")
    assert git(parent, "status", "--porcelain") == ""
    assert git(parent, "status", "--porcelain", "--ignore-submodules=none").strip() == "M vllm"  # it is there
