"""`vllm-compose pr-bump`: a PR entry moved to a new revision, composed over every release in range.

Case folders (`tests/cases/pr-bump/<case>/`), each a toy PR `pr101` moving to a takeover `pr202` rebased on newer
upstream (a hunk added before the others, so every hunk number moves; the greet hunk rewritten for upstream's new
`color` parameter):

* `releases/<tag>/`: the files of each release (tagged in order in one repository);
* `series/`: the series (the PR entry, its skew fixes); `sources/pr101.diff`: the old revision it pins;
* `pr202.diff`: the new revision;
* `expected.json`: the arguments after `pr-bump pr101 --to pr202.diff`, the exit code, and whether series.toml
  must come out as `expected-series.toml` (written) or unchanged (refused);
* `expected-pr-bump.txt`: what the command prints (`render_pr_bump`).

`retires-a-fix`: the fix that re-targeted the greet hunk is unneeded once the new revision is rebased (its hunk
lands exact and offset alone), so it is retired and the series written. `breaks-a-fix`: the new revision rewrites
`reset`, which a second fix edits: the fix stops both releases, and `--write` refuses, writing nothing.

Temporary paths are written `<tmp>`; `VC_UPDATE_GOLDEN=1` rewrites the golden files.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from vllm_compose.cache import Cache
from vllm_compose.cli import main
from vllm_compose.errors import SeriesError
from vllm_compose.patchfile import parse_patch
from vllm_compose.pr_bump import HunkChange, match_hunks
from vllm_compose.series import load_series
from vllm_compose.series_text import rewrite_series_text

CASES = Path(__file__).resolve().parents[1] / "cases" / "pr-bump"
UPDATE = os.environ.get("VC_UPDATE_GOLDEN") == "1"


def _repo(case: Path, tmp: Path) -> Path:
    """One repository whose commits, tagged in order, hold the case's releases."""
    repo = tmp / "vllm"
    repo.mkdir()
    subprocess.run(["git", "init", "-q", "-b", "main"], cwd=repo, check=True)
    for release in sorted((case / "releases").iterdir()):
        for old in repo.iterdir():
            if old.name != ".git":
                shutil.rmtree(old) if old.is_dir() else old.unlink()
        shutil.copytree(release, repo, dirs_exist_ok=True)
        for args in (["add", "-A"], ["commit", "-qm", f"release {release.name}"], ["tag", release.name]):
            subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True)
    subprocess.run(["git", "checkout", "-q", "--detach"], cwd=repo, check=True)
    return repo


def _run(case: Path, tmp: Path, *args: str) -> tuple[int, Path, Path]:
    repo = _repo(case, tmp)
    series = tmp / "series"
    shutil.copytree(case / "series", series)
    argv = ["pr-bump", "pr101", "--to", str(case / "pr202.diff"), "--series", str(series), "--repo", str(repo)]
    code = main([*argv, "--sources", str(case / "sources"), "--offline", *args])
    return code, repo, series


def _golden(path: Path, text: str) -> None:
    if UPDATE:
        path.write_text(text)
        return
    assert path.is_file(), f"{path} is missing: run with VC_UPDATE_GOLDEN=1 to write it, then review it"
    assert text == path.read_text(), f"output differs from {path} (VC_UPDATE_GOLDEN=1 rewrites it)"


@pytest.mark.parametrize("name", sorted(p.name for p in CASES.iterdir() if p.is_dir()))
def test_pr_bump_case(name: str, tmp_path: Path, capsys) -> None:
    case = CASES / name
    want = json.loads((case / "expected.json").read_text())
    code, _repo_dir, series = _run(case, tmp_path, *want["args"])
    captured = capsys.readouterr()
    out = captured.out.replace(str(tmp_path), "<tmp>")
    assert code == want["exit"], captured.out + captured.err
    _golden(case / "expected-pr-bump.txt", out)
    text = (series / "series.toml").read_text()
    if want["written"]:
        _golden(case / "expected-series.toml", text)
        load_series(series)  # what was written loads
        for fix in want["retired"]:
            assert f'id = "{fix}"' not in text
            assert not list((series / "patches").glob(f"*{fix.removeprefix('fix-')}*"))
    else:
        assert text == (case / "series" / "series.toml").read_text(), "a refused bump changed series.toml"
        assert sorted(p.name for p in (series / "patches").iterdir()) == sorted(
            p.name for p in (case / "series" / "patches").iterdir()
        )
        assert "not written" in captured.err


def test_the_report_says_what_moved(tmp_path: Path, capsys) -> None:
    """The JSON report of the clean case: the hunk map renumbers, the fix's resolves follow, the fix is retired on
    both releases because its hunk lands exact (v1.0.0) and offset (v1.1.0) without it; with the old revision the
    fix carried a hunk that would have landed only merged."""
    case = CASES / "retires-a-fix"
    code, _, _ = _run(
        case, tmp_path, "--onto", "v1.0.0", "v1.1.0", "--no-import-smoke", "--json", str(tmp_path / "r.json")
    )
    capsys.readouterr()
    assert code == 0
    report = json.loads((tmp_path / "r.json").read_text())
    assert [(m["old"], m["new"], m["change"]) for m in report["hunk_map"]] == [
        (None, 1, "new"),
        (1, 2, "changed"),
        (2, 3, "same"),
    ]
    assert report["resolves_rewritten"] == {
        "fix-greet-color": {"old": ["pr101:pkg/mod.py#1"], "new": ["pr101:pkg/mod.py#2"]}
    }
    assert list(report["retired"]) == ["fix-greet-color"]
    landings = {r["tag"]: [h["new_landing"] for h in r["hunks"]] for r in report["releases"]}
    assert landings == {"v1.0.0": ["exact", "exact", "exact"], "v1.1.0": ["exact", "offset", "offset"]}
    old = {r["tag"]: [h["old_landing"] for h in r["hunks"]] for r in report["releases"]}
    assert old == {
        "v1.0.0": [None, "merged→fix-greet-color", "exact"],
        "v1.1.0": [None, "merged→fix-greet-color", "offset"],
    }
    assert all(r["clean"] for r in report["releases"]) and report["clean"]


# ---------------------------------------------------------------------------------------------------------------
# The hunk map


def _diff(*hunks: str) -> bytes:
    return ("diff --git a/m.py b/m.py\n--- a/m.py\n+++ b/m.py\n" + "".join(hunks)).encode()


def test_a_split_hunk_maps_to_both_halves_and_an_unmatched_one_is_gone() -> None:
    old = parse_patch(
        _diff(
            "@@ -1,4 +1,7 @@\n x = 1\n-run(a, b)\n+if fast:\n+    run_fast(a, b)\n+else:\n+    run(a, b)\n y = 2\n z = 3\n",
            "@@ -20,2 +23,3 @@\n def f():\n+    log('f')\n     return 1\n",
        )
    )
    new = parse_patch(
        _diff(
            "@@ -1,3 +1,3 @@\n x = 1\n-else:\n+elif fast:\n y = 2\n",
            "@@ -9,2 +9,4 @@\n q = 0\n+else:\n+    run(a, b)\n w = 1\n",
        )
    )
    rows = [(m.old, m.new, m.change) for m in match_hunks(old, new)]
    assert rows == [(1, 1, HunkChange.CHANGED), (1, 2, HunkChange.CHANGED), (2, None, HunkChange.GONE)]


def test_the_same_change_pairs_first_and_new_files_are_new() -> None:
    old = parse_patch(_diff("@@ -5,2 +5,3 @@\n a = 1\n+b = 2\n c = 3\n"))
    new = parse_patch(
        _diff("@@ -1,2 +1,3 @@\n import os\n+import sys\n x = 0\n", "@@ -7,2 +8,3 @@\n a = 1\n+b = 2\n c = 3\n")
        + b"diff --git a/n.py b/n.py\nnew file mode 100644\n--- /dev/null\n+++ b/n.py\n@@ -0,0 +1 @@\n+b = 2\n"
    )
    rows = [(m.file, m.old, m.new, m.change) for m in match_hunks(old, new)]
    assert rows == [
        ("m.py", None, 1, HunkChange.NEW),
        ("m.py", 1, 2, HunkChange.SAME),
        ("n.py", None, 1, HunkChange.NEW),
    ]


def test_rewriting_series_text_keeps_comments_and_multiline_lists() -> None:
    text = (
        '# head comment\n[series]\nname = \'x\'\n\n[[entry]]\nid = "p"\npr = 1\n# why this PR\ntitle = "t"\n'
        'upstream_status = "Submitted"\n\n[entry.source]\nurl = "u"\nsha256 = "s"\npaths = [\n    "a/*",\n]\n'
        'strip = 1\n\n[[entry]]\nid = "f"\nfile = "x.patch"\n# keep me\nresolves = [\n    "p:a#1",\n]\n'
        'why = "w"\n\n[[entry]]\nid = "g"\nfile = "y.patch"\nwhy = "w"\n'
    )
    out = rewrite_series_text(
        text, "p", {"revision": "abcdef1", "url": "v", "sha256": "t", "strip": 1}, 2, None, {"f": ["p:a#2"]}, ("g",)
    )
    assert out == (
        '# head comment\n[series]\nname = \'x\'\n\n[[entry]]\nid = "p"\npr = 2\n# why this PR\ntitle = "t"\n'
        'upstream_status = "Submitted"\n\n[entry.source]\nrevision = "abcdef1"\nurl = "v"\nsha256 = "t"\n'
        'strip = 1\n\n[[entry]]\nid = "f"\nfile = "x.patch"\n# keep me\nresolves = ["p:a#2"]\nwhy = "w"\n\n'
    )


def test_an_inline_source_table_is_refused() -> None:
    text = '[[entry]]\nid = "p"\npr = 1\nsource = { url = "u", sha256 = "s" }\n'
    with pytest.raises(SeriesError, match="inline table"):
        rewrite_series_text(text, "p", {"url": "v"}, None, None, {}, ())


# ---------------------------------------------------------------------------------------------------------------
# Bad input: each a clear error, exit 3, nothing written


def _bad(tmp_path: Path, capsys, *args: str, to: str | None = None, entry: str = "pr101") -> str:
    case = CASES / "retires-a-fix"
    repo = _repo(case, tmp_path)
    series = tmp_path / "series"
    shutil.copytree(case / "series", series)
    before = (series / "series.toml").read_bytes()
    argv = ["pr-bump", entry, "--to", to or str(case / "pr202.diff"), "--series", str(series), "--repo", str(repo)]
    code = main([*argv, "--sources", str(case / "sources"), "--offline", "--onto", "v1.0.0", "--write", *args])
    err = capsys.readouterr().err
    assert code == 3, err
    assert (series / "series.toml").read_bytes() == before
    return err


def test_an_unknown_entry_is_refused(tmp_path, capsys) -> None:
    err = _bad(tmp_path, capsys, entry="pr999")
    assert "the series has no entry 'pr999'" in err and "its PR entries: pr101" in err


def test_a_fix_is_not_a_pr_entry(tmp_path, capsys) -> None:
    assert "is a local fix, not an upstream PR entry" in _bad(tmp_path, capsys, entry="fix-greet-color")


def test_an_unreadable_file_is_refused(tmp_path, capsys) -> None:
    err = _bad(tmp_path, capsys, to=str(tmp_path / "missing.diff"))
    assert "cannot read the new revision's diff" in err and "No such file" in err


def test_a_sha256_mismatch_is_refused_with_both_hashes(tmp_path, capsys) -> None:
    data = (CASES / "retires-a-fix" / "pr202.diff").read_bytes()
    wrong = hashlib.sha256(b"something else").hexdigest()
    err = _bad(tmp_path, capsys, "--sha256", wrong)
    assert f"expected {wrong}, got {hashlib.sha256(data).hexdigest()}" in err


def test_a_url_needs_a_pinned_sha256(tmp_path, capsys) -> None:
    err = _bad(tmp_path, capsys, to="https://example.invalid/pr202.diff")
    assert "its sha256 must be pinned before it is downloaded" in err


def test_a_url_not_in_the_cache_is_not_downloaded_offline(tmp_path, capsys) -> None:
    err = _bad(tmp_path, capsys, "--sha256", "0" * 64, to="https://example.invalid/pr202.diff")
    assert "is not in the cache and --offline forbids a download" in err


def test_the_bytes_already_pinned_are_refused(tmp_path, capsys) -> None:
    err = _bad(tmp_path, capsys, to=str(CASES / "retires-a-fix" / "sources" / "pr101.diff"))
    assert "already pins these bytes" in err


def test_a_release_the_entry_does_not_cover_is_refused(tmp_path, capsys) -> None:
    series = tmp_path / "s"
    shutil.copytree(CASES / "retires-a-fix" / "series", series)
    toml = series / "series.toml"
    toml.write_text(
        toml.read_text().replace('upstream_status = "Submitted"', 'upstream_status = "Submitted"\ntags = ">=1.1.0"')
    )
    code = main(
        ["pr-bump", "pr101", "--to", str(CASES / "retires-a-fix" / "pr202.diff"), "--series", str(series)]
        + ["--onto", "v1.0.0", "--offline"]
    )
    assert code == 3
    assert "does not apply to v1.0.0" in capsys.readouterr().err


def test_write_without_a_url_for_a_file_is_refused(tmp_path, capsys) -> None:
    """A clean bump from a local file: series.toml must pin where the bytes can be downloaded again."""
    case = CASES / "retires-a-fix"
    code, _, series = _run(case, tmp_path, "--onto", "v1.0.0", "--no-import-smoke", "--write")
    err = capsys.readouterr().err
    assert code == 3 and "pass --url URL" in err
    assert (series / "series.toml").read_text() == (case / "series" / "series.toml").read_text()


def test_a_seeded_file_with_other_bytes_is_refused_with_both_hashes(tmp_path, capsys) -> None:
    """The series pins the old revision by sha256; a --sources file of the URL's name with other bytes is named."""
    case = CASES / "retires-a-fix"
    sources = tmp_path / "sources"
    sources.mkdir()
    (sources / "pr101.diff").write_bytes((case / "sources" / "pr101.diff").read_bytes() + b"\n")
    series = tmp_path / "series"
    shutil.copytree(case / "series", series)
    code = main(
        ["pr-bump", "pr101", "--to", str(case / "pr202.diff"), "--series", str(series), "--sources", str(sources)]
        + ["--onto", "v1.0.0", "--offline", "--repo", str(_repo(case, tmp_path))]
    )
    err = capsys.readouterr().err
    pinned = load_series(series).entry("pr101").source.sha256
    seeded = hashlib.sha256((sources / "pr101.diff").read_bytes()).hexdigest()
    assert code == 3
    assert f"pr101.diff in --sources has sha256 {seeded}, the series pins {pinned}" in err
    assert not Cache().has(pinned)


def test_after_the_write_the_branch_and_its_commit_name_the_new_revision(tmp_path: Path, capsys) -> None:
    """What a bug report quotes: the branch carries the takeover's number, the entry commit its head revision."""
    case = CASES / "retires-a-fix"
    args = json.loads((case / "expected.json").read_text())["args"]
    code, repo, series = _run(case, tmp_path, *args)
    assert code == 0
    argv = ["rebase", "--onto", "v1.0.0", "--series", str(series), "--repo", str(repo), "--offline", "-q"]
    assert main([*argv, "--no-checkout", "--no-import-smoke"]) == 0, capsys.readouterr().out
    log = subprocess.run(
        ["git", "log", "--format=%B", "v1.0.0..compose-202-v1.0.0"],
        cwd=repo,
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    assert "Series-Entry: pr101" in log and "Source-Revision: 2020202" in log
    assert "Upstream-PR: https://example.invalid/pull/202" in log


def test_a_change_worded_with_other_comments_is_held_by_the_tree() -> None:
    """How a fix is found superseded: its hunk's post-image code is in the tree as a run of code lines, whatever
    the comments (0007 against #47629's sm_89 gate); a hunk that only removes lines is never held."""
    from vllm_compose.pr_bump import _holds

    hunk = (
        parse_patch(
            _diff(
                "@@ -1,3 +1,5 @@\n ok = (\n     is_cuda()\n+    # ours: fp8e4nv needs sm_89\n+    and cap(89)\n     and x\n"
            )
        )
        .files[0]
        .hunks[0]
    )
    tree = "ok = (\n    is_cuda()\n    # theirs: Triton stores fp8e4nv on SM89+ only\n    and cap(89)\n    and x\n)\n"
    assert _holds(tree, hunk)
    assert not _holds(tree.replace("cap(89)", "cap(90)"), hunk)
    removal = parse_patch(_diff("@@ -1,2 +1,1 @@\n a = 1\n-b = 2\n")).files[0].hunks[0]
    assert not _holds("a = 1\n", removal)
