"""Applying patches onto a plain directory: placed hunks written atomically, conflicts to .rej or markers."""

from __future__ import annotations

import os
import shutil
import stat
from pathlib import Path

import pytest

from vllm_compose.apply import apply_patches
from vllm_compose.conflict import MARKER_BASE, MARKER_OURS, MARKER_SEP, MARKER_THEIRS
from vllm_compose.errors import ComposeError, ExitCode
from vllm_compose.patchfile import FilePatch, Patch, PatchHeader, parse_patch
from vllm_compose.placement import Verdict

CASES = Path(__file__).resolve().parents[1] / "cases" / "audit"
CONFIG = "pkg/config.py"


def target_from(case: str, tmp_path: Path) -> Path:
    target = tmp_path / "site-packages"
    shutil.copytree(CASES / case / "stock", target)
    return target


def load(case: str) -> Patch:
    path = CASES / case / "patch.diff"
    return parse_patch(path.read_bytes(), path.name)


def snapshot(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_clean_apply_keeps_mode(tmp_path: Path) -> None:
    target = target_from("clean", tmp_path)
    os.chmod(target / CONFIG, 0o750)

    result = apply_patches(target, [load("clean")])

    assert [h.verdict for h in result.hunks] == [Verdict.EXACT, Verdict.EXACT]
    assert result.exit_code is ExitCode.OK and result.ok
    text = (target / CONFIG).read_text()
    assert '    "block_size": 16,\n    "enforce_eager": False,\n    "dtype": "auto",\n' in text
    assert "    for line in text.splitlines():\n        if not line.strip():\n            continue\n" in text
    assert stat.S_IMODE((target / CONFIG).stat().st_mode) == 0o750
    assert result.written == [CONFIG] and result.rejects == []
    assert not list(target.rglob("*.rej")) and not list(target.rglob("*.tmp"))


def test_conflict_goes_to_rej_and_rest_is_applied(tmp_path: Path) -> None:
    target = target_from("failed", tmp_path)

    result = apply_patches(target, [load("failed")])

    assert [h.verdict for h in result.hunks] == [Verdict.EXACT, Verdict.CONFLICT]
    assert result.exit_code is ExitCode.CONFLICT
    assert '"enforce_eager": False,' in (target / CONFIG).read_text()
    rej = (target / (CONFIG + ".rej")).read_text()
    assert rej.startswith("--- a/pkg/config.py\n+++ b/pkg/config.py\n@@ -18,6 +19,6 @@")
    assert '-        key, _, value = line.partition("=")\n+        key, _, value = line.partition(":")\n' in rej
    assert "enforce_eager" not in rej  # only the rejected hunk
    assert result.rejects == [CONFIG + ".rej"]
    assert result.hunks[1].reason


def test_markers_mode_marks_a_conflict_at_the_site_the_engine_took(tmp_path: Path) -> None:
    # the engine takes lines 15-19 as the hunk's site, but the line its insertion follows is gone there
    target = target_from("kwarg-after-call", tmp_path)
    stock = (target / "pkg/drafter.py").read_text().splitlines()

    result = apply_patches(target, [load("kwarg-after-call")], markers=True)

    assert result.exit_code is ExitCode.CONFLICT and result.hunks[0].landed_at == 15
    lines = (target / "pkg/drafter.py").read_text().splitlines()
    assert not (target / "pkg/drafter.py.rej").exists() and result.rejects == []
    marks = [lines.index(m) for m in (MARKER_OURS, MARKER_BASE, MARKER_SEP, MARKER_THEIRS)]
    assert marks == sorted(marks) and marks[0] == 14  # right before the site's first line
    assert lines[marks[0] + 1 : marks[1]] == stock[14:19]  # the target's side: the site's lines
    assert "            upper," in lines[marks[1] + 1 : marks[2]]
    assert "            extra=extra," in lines[marks[2] + 1 : marks[3]]


def test_markers_mode_sends_a_hunk_without_a_site_to_rej(tmp_path: Path) -> None:
    # hunk 2 agrees too little with its best site: markers there would be a guess the engine rejected
    target = target_from("failed", tmp_path)

    result = apply_patches(target, [load("failed")], markers=True)

    assert result.exit_code is ExitCode.CONFLICT
    text = (target / CONFIG).read_text()
    assert '    "enforce_eager": False,' in text  # hunk 1 applied
    assert not any(m in text for m in (MARKER_OURS, MARKER_BASE, MARKER_SEP, MARKER_THEIRS))
    rej = (target / (CONFIG + ".rej")).read_text()
    assert rej.startswith("--- a/pkg/config.py\n+++ b/pkg/config.py\n@@ -18,6 +19,6 @@")
    assert result.rejects == [CONFIG + ".rej"]


def test_dry_run_writes_nothing(tmp_path: Path) -> None:
    target = target_from("failed", tmp_path)
    before = snapshot(target)

    result = apply_patches(target, [load("failed")], dry_run=True)

    assert snapshot(target) == before
    assert result.dry_run and result.written == [CONFIG] and result.rejects == [CONFIG + ".rej"]
    assert [h.verdict for h in result.hunks] == [Verdict.EXACT, Verdict.CONFLICT]


def test_json_matches_audit_schema(tmp_path: Path) -> None:
    target = target_from("offset", tmp_path)
    data = apply_patches(target, [load("offset")]).to_json()
    for h in data["hunks"]:
        assert set(h) == {"patch", "file", "hunk", "verdict", "landed_at", "expected_at", "reason"}
        assert h["verdict"] == "offset" and h["patch"] == "patch.diff"
    assert [h["landed_at"] for h in data["hunks"]] == [12, 25]
    assert data["summary"]["offset"] == 2 and data["summary"]["ok"] is True


def test_path_traversal_is_refused(tmp_path: Path) -> None:
    target = target_from("clean", tmp_path)
    good = load("clean")
    evil = Patch("evil.diff", PatchHeader(), [FilePatch("../outside.py", "../outside.py", good.files[0].hunks)])
    before = snapshot(target)

    with pytest.raises(ComposeError) as err:
        apply_patches(target, [good, evil])

    assert err.value.exit_code is ExitCode.BAD_INPUT
    assert err.value.file == "../outside.py" and err.value.hint
    assert snapshot(target) == before  # the good patch was not written either
    assert not (tmp_path / "outside.py").exists()


def test_symlink_out_of_target_is_refused(tmp_path: Path) -> None:
    target = target_from("clean", tmp_path)
    outside = tmp_path / "elsewhere"
    shutil.copytree(target / "pkg", outside / "pkg")
    shutil.rmtree(target / "pkg")
    (target / "pkg").symlink_to(outside / "pkg")

    with pytest.raises(ComposeError) as err:
        apply_patches(target, [load("clean")])

    assert err.value.exit_code is ExitCode.BAD_INPUT
    assert "symlink" in err.value.message


def test_target_must_be_a_directory(tmp_path: Path) -> None:
    with pytest.raises(ComposeError) as err:
        apply_patches(tmp_path / "missing", [load("clean")])
    assert err.value.exit_code is ExitCode.BAD_INPUT


def test_new_file_created_with_mode(tmp_path: Path) -> None:
    target = target_from("clean", tmp_path)
    patch = parse_patch(
        "diff --git a/pkg/tool.py b/pkg/tool.py\nnew file mode 100755\n--- /dev/null\n+++ b/pkg/tool.py\n"
        "@@ -0,0 +1,2 @@\n+#!/usr/bin/env python3\n+print('hi')\n",
        "new.diff",
    )

    result = apply_patches(target, [patch])

    assert result.ok
    assert (target / "pkg/tool.py").read_text() == "#!/usr/bin/env python3\nprint('hi')\n"
    assert stat.S_IMODE((target / "pkg/tool.py").stat().st_mode) == 0o755


def test_later_patch_sees_earlier_result(tmp_path: Path) -> None:
    target = target_from("sequence", tmp_path)
    folder = CASES / "sequence" / "patches"
    patches = [parse_patch(p.read_bytes(), p.name) for p in sorted(folder.glob("*.diff"))]

    result = apply_patches(target, patches)

    assert result.ok, [h.reason for h in result.hunks]
    assert '    "enforce_eager": True,\n' in (target / CONFIG).read_text()
