"""pre-commit: the project's config and the hooks offered to series maintainers parse and point at real commands."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from vllm_compose.cli import _parser, main

yaml = pytest.importorskip("yaml", reason="PyYAML not installed (add it to the test extra)")

ROOT = Path(__file__).resolve().parents[2]


def test_project_config_runs_ruff_and_skips_deliberately_bad_code() -> None:
    config = yaml.safe_load((ROOT / ".pre-commit-config.yaml").read_text())
    ids = {h["id"] for repo in config["repos"] for h in repo["hooks"]}
    assert {"ruff", "ruff-format"} <= ids
    excluded = re.compile(config["exclude"])
    assert excluded.search("tests/cases/checks/bad.py") and excluded.search("tests/cases/x/stock.py")
    assert not excluded.search("tests/tool/test_ci.py")


def test_offered_hooks_name_real_subcommands() -> None:
    hooks = yaml.safe_load((ROOT / ".pre-commit-hooks.yaml").read_text())
    assert {h["id"] for h in hooks} == {"validate-series", "audit-series"}
    commands = set(_parser()._subparsers._group_actions[0].choices)
    for hook in hooks:
        argv = shlex.split(hook["entry"])
        assert argv[0] == "vllm-compose" and argv[1] in commands
        assert hook["pass_filenames"] is False


def test_validate_series_hook_on_this_repository(capsys) -> None:
    assert main(["validate", "--series", str(ROOT / "series")]) == 0
    assert "entries OK" in capsys.readouterr().out


def test_audit_series_hook_needs_a_release_and_a_tag(tmp_path, capsys) -> None:
    import toy_vllm as toy

    series = toy.write_series(tmp_path / "series", tmp_path / "sources")
    # the scratch repository has no release: offline, the hook cannot obtain it and says so (exit 3)
    assert (
        main(
            [
                "audit-series",
                "--series",
                str(series),
                "--onto",
                toy.TAG,
                "--sources",
                str(tmp_path / "sources"),
                "--offline",
            ]
        )
        == 3
    )
    assert "not in the cache" in capsys.readouterr().err
    assert main(["audit-series", "--series", str(series)]) == 4  # no --onto: a usage error
