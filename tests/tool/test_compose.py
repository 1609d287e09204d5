"""End-to-end compose tests on a small synthetic upstream repository (tags v1.0.0 ... v1.4.0, `toy_compose`).

The upstream project is a toy package; the "PR" is a patch against v1.0.0 served through the cache (as a pinned
URL + sha256 would be); the series also has a local skew fix. Each test composes through the CLI entry point, so
exit codes, reports and refs are checked together.
"""

from __future__ import annotations

import hashlib
import json
import textwrap
from pathlib import Path

import pygit2
from toy_compose import MOD_V1, PR_PATCH, branch_log, commit_tag, compose, git, resume

from vllm_compose import gitstore
from vllm_compose.cli import main
from vllm_compose.conflict import MARKER_RE
from vllm_compose.patchfile import parse_patch


def test_clean_compose_writes_one_commit_per_entry(toy_series, toy_upstream, tmp_path):
    out = tmp_path / "r.json"
    assert compose(toy_series, toy_upstream, "v1.0.0", json_out=out) == 0
    assert branch_log(toy_upstream, "compose-101-v1.0.0") == [
        "Add a suffix to greet and Engine.reset",
        "Make farewell honour the new suffix",
    ]
    report = json.loads(out.read_text())
    assert report["branch"] == "compose-101-v1.0.0" and report["tag"] == "v1.0.0"
    assert [e["id"] for e in report["entries"]] == ["pr101", "fix-farewell"]
    assert [h["verdict"] for h in report["entries"][0]["hunks"]] == ["exact", "exact"]
    assert report["entries"][0]["hunks"][0] == {**report["entries"][0]["hunks"][0], "file": "pkg/mod.py", "hunk": 1}
    final = git(toy_upstream, "show", "compose-101-v1.0.0:pkg/mod.py")
    assert 'def farewell(name, suffix=""):' in final and "def reset(self):" in final
    # the worktree was not touched
    assert git(toy_upstream, "status", "--porcelain") == ""


def test_compose_is_reproducible_and_second_run_is_a_no_op(toy_series, toy_upstream):
    assert compose(toy_series, toy_upstream, "v1.0.0") == 0
    first = git(toy_upstream, "rev-parse", "compose-101-v1.0.0")
    assert compose(toy_series, toy_upstream, "v1.0.0") == 0
    assert git(toy_upstream, "rev-parse", "compose-101-v1.0.0") == first


def test_offset_release(toy_series, toy_upstream, tmp_path):
    out = tmp_path / "r.json"
    assert compose(toy_series, toy_upstream, "v1.1.0", json_out=out) == 0
    verdicts = [h["verdict"] for h in json.loads(out.read_text())["entries"][0]["hunks"]]
    assert verdicts == ["offset", "offset"]


def test_drifted_context_is_merged(toy_series, toy_upstream, tmp_path):
    out = tmp_path / "r.json"
    assert compose(toy_series, toy_upstream, "v1.2.0", json_out=out) == 0
    hunks = json.loads(out.read_text())["entries"][0]["hunks"]
    assert hunks[0]["verdict"] in ("merged", "relocated")
    final = git(toy_upstream, "show", "compose-101-v1.2.0:pkg/mod.py")
    assert '    text = "hello, " + name  # comma\n' in final + "\n"
    assert 'def greet(name, *, loud=False, suffix=""):' in final


def test_entry_already_upstream_is_dropped_with_evidence(toy_series, toy_upstream, tmp_path):
    out = tmp_path / "r.json"
    assert compose(toy_series, toy_upstream, "v1.3.0", json_out=out) == 0
    entries = json.loads(out.read_text())["entries"]
    assert entries[0]["status"] == "dropped-upstream"
    assert "already" in entries[0]["reason"]
    assert {h["verdict"] for h in entries[0]["hunks"]} == {"already-applied"}
    assert branch_log(toy_upstream, "compose-101-v1.3.0") == ["Make farewell honour the new suffix"]


def test_entry_partly_upstream_stops_instead_of_guessing(toy_series, toy_upstream, tmp_path):
    out = tmp_path / "r.json"
    assert compose(toy_series, toy_upstream, "v1.4.0", json_out=out) == 1
    entries = json.loads(out.read_text())["entries"]
    assert entries[0]["status"] == "partly-upstream"
    assert "compose-101-v1.4.0" not in git(toy_upstream, "branch", "--list")
    assert main(["rebase", "--abort", "--repo", str(toy_upstream)]) == 0


def conflicting_release(toy_upstream: Path) -> None:
    """v2.0.0: greet's signature rewritten so the PR's first hunk has no site left."""
    text = MOD_V1.replace(
        'def greet(name, *, loud=False):\n    text = "hello " + name\n    if loud:\n',
        'def greet(person: str, shout: bool = False) -> str:\n    text = f"hello {person}"\n    if shout:\n',
    )
    git(toy_upstream, "checkout", "-q", "v1.0.0")
    commit_tag(toy_upstream, "v2.0.0", {"pkg/mod.py": text})
    git(toy_upstream, "checkout", "-q", "--detach")


def test_conflict_resolve_continue_records_a_fix(toy_series, toy_upstream, tmp_path):
    conflicting_release(toy_upstream)
    wt = tmp_path / "wt"
    out = tmp_path / "r.json"
    assert compose(toy_series, toy_upstream, "v2.0.0", "--worktree", str(wt), json_out=out) == 1
    report = json.loads(out.read_text())
    assert report["status"] == "conflict" and report["entries"][0]["status"] == "conflict"
    assert [e["status"] for e in report["entries"]] == ["conflict", "not-reached"]
    assert "compose-101-v2.0.0" not in git(toy_upstream, "branch", "--list")
    conflicted = (wt / "pkg/mod.py").read_text()
    assert "<<<<<<<" in conflicted and "def reset(self):" in conflicted  # the placeable hunk went in
    # a second compose refuses while the conflict waits
    assert compose(toy_series, toy_upstream, "v2.0.0") == 3
    # --continue with markers still there is refused and keeps the state
    assert resume(toy_series, toy_upstream) == 1
    # resolve by hand
    start = conflicted.index("<<<<<<<")
    end = conflicted.index("\n", conflicted.index(">>>>>>>")) + 1
    resolved = (
        conflicted[:start]
        + textwrap.dedent(
            """\
        def greet(person: str, shout: bool = False, suffix: str = "") -> str:
            text = f"hello {person}"
            if shout:
                text = text.upper()
            if suffix:
                text += suffix
            return text
        """
        )
        + conflicted[end:]
    )
    (wt / "pkg/mod.py").write_text(resolved)
    rc = resume(toy_series, toy_upstream, json_out=out)
    report = json.loads(out.read_text())
    assert rc == 0, report
    ids = [e["id"] for e in report["entries"]]
    assert ids[:2] == ["pr101", "fix-pr101-v2.0.0"]
    assert report["entries"][0]["hunks"][0]["resolved_by"] == "fix-pr101-v2.0.0"
    toml = (toy_series / "series.toml").read_text()
    assert 'id = "fix-pr101-v2.0.0"' in toml and 'resolves = ["pr101:pkg/mod.py#1"]' in toml
    assert toml.index('id = "pr101"') < toml.index('id = "fix-pr101-v2.0.0"') < toml.index('id = "fix-farewell"')
    assert len(list((toy_series / "patches").glob("0002-fix-pr101-v2.0.0.patch"))) == 1
    final = git(toy_upstream, "show", "compose-101-v2.0.0:pkg/mod.py")
    assert 'suffix: str = ""' in final and "def reset(self):" in final
    assert gitstore.read_state_ref(pygit2.Repository(str(toy_upstream))) is None
    # on other tags the recorded fix does not apply (tags ==2.0.0)
    assert compose(toy_series, toy_upstream, "v1.0.0") == 0


def release_without_greet(toy_upstream: Path) -> None:
    """v2.0.0: greet rewritten from its signature on, so the PR's first hunk agrees too little with any site."""
    greet = 'def greet(name, *, loud=False):\n    text = "hello " + name\n    if loud:\n        text = text.upper()\n'
    text = MOD_V1.replace(greet + "    return text\n", 'def greet(who):\n    return f"hi {who}"\n')
    git(toy_upstream, "checkout", "-q", "v1.0.0")
    commit_tag(toy_upstream, "v2.0.0", {"pkg/mod.py": text})
    git(toy_upstream, "checkout", "-q", "--detach")


def test_a_hunk_without_a_site_is_listed_in_a_reject_file_not_marked_and_continue_records_a_fix(
    toy_series, toy_upstream, tmp_path
):
    release_without_greet(toy_upstream)
    wt = tmp_path / "wt"
    out = tmp_path / "r.json"
    assert compose(toy_series, toy_upstream, "v2.0.0", "--worktree", str(wt), json_out=out) == 1
    report = json.loads(out.read_text())
    assert report["worktree"] == str(wt) and report["rejects"] == ["pkg/mod.py.rej"]
    assert f"have no markers: read them in {wt / 'pkg/mod.py.rej'}" in report["message"]
    mod = (wt / "pkg/mod.py").read_text()
    assert not MARKER_RE.search(mod) and "def reset(self):" in mod  # no markers anywhere; hunk 2 placed
    rej = (wt / "pkg/mod.py.rej").read_text()
    assert "# hunk 1 of pkg/mod.py (entry pr101) was not placed.\n" in rej
    assert "#   line 1 (1): score 0.24: agrees too little (below 0.50)\n" in rej
    assert rej.endswith(parse_patch(PR_PATCH).files[0].hunks[0].to_text())  # as the PR wrote it
    assert "  pkg/mod.py.rej: hunk 1\n" in (wt / "CONFLICT.txt").read_text()
    # nothing edited: nothing to record, and the run still waits
    assert resume(toy_series, toy_upstream) == 1
    # the person carries the hunk into the release's form of the function, and goes on
    greet = 'def greet(who):\n    return f"hi {who}"\n'
    (wt / "pkg/mod.py").write_text(mod.replace(greet, 'def greet(who, suffix=""):\n    return f"hi {who}" + suffix\n'))
    rc = resume(toy_series, toy_upstream, json_out=out)
    report = json.loads(out.read_text())
    assert rc == 0, report["message"]
    assert [e["id"] for e in report["entries"]][:2] == ["pr101", "fix-pr101-v2.0.0"]
    fix = (toy_series / "patches" / "0002-fix-pr101-v2.0.0.patch").read_text()
    assert '+def greet(who, suffix=""):' in fix and ".rej" not in fix
    assert 'resolves = ["pr101:pkg/mod.py#1"]' in (toy_series / "series.toml").read_text()
    assert not wt.exists()  # composed: the worktree is gone


def test_abort_drops_state_and_keeps_edited_worktree(toy_series, toy_upstream, tmp_path):
    conflicting_release(toy_upstream)
    wt = tmp_path / "wt"
    assert compose(toy_series, toy_upstream, "v2.0.0", "--worktree", str(wt)) == 1
    (wt / "pkg/mod.py").write_text((wt / "pkg/mod.py").read_text() + "# my notes\n")
    assert main(["rebase", "--abort", "--repo", str(toy_upstream)]) == 0
    assert (wt / "pkg/mod.py").read_text().endswith("# my notes\n")  # user work kept
    repo = pygit2.Repository(str(toy_upstream))
    assert gitstore.read_state_ref(repo) is None
    assert main(["rebase", "--abort", "--repo", str(toy_upstream)]) == 3  # nothing to abort


def test_composing_again_after_abort_never_writes_over_an_edited_worktree(toy_series, toy_upstream, tmp_path, capsys):
    conflicting_release(toy_upstream)
    wt = tmp_path / "wt"
    assert compose(toy_series, toy_upstream, "v2.0.0", "--worktree", str(wt)) == 1
    mine = (wt / "pkg/mod.py").read_text() + "# my notes\n"
    (wt / "pkg/mod.py").write_text(mine)
    assert main(["rebase", "--abort", "--repo", str(toy_upstream)]) == 0
    capsys.readouterr()
    out = tmp_path / "again.json"
    assert compose(toy_series, toy_upstream, "v2.0.0", "--worktree", str(wt), json_out=out) == 1
    assert (wt / "pkg/mod.py").read_text() == mine  # the person's edits are where they left them
    again = Path(json.loads(out.read_text())["worktree"])
    assert again == tmp_path / "wt.2" and "<<<<<<<" in (again / "pkg/mod.py").read_text()
    assert f"{wt} was left as it is" in json.loads(out.read_text())["message"]


def test_the_conflict_worktree_is_recorded_absolute_so_continue_works_from_anywhere(
    toy_series, toy_upstream, tmp_path, monkeypatch
):
    conflicting_release(toy_upstream)
    monkeypatch.chdir(tmp_path)
    assert compose(toy_series, toy_upstream, "v2.0.0", "--worktree", "rel-wt") == 1  # a relative --worktree
    state = gitstore.read_state_ref(pygit2.Repository(str(toy_upstream)))
    assert state["worktree"] == str(tmp_path / "rel-wt")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    # the markers are still there: refused as unresolved (exit 1), not "has no worktree to read a resolution from"
    assert resume(toy_series, toy_upstream) == 1


def test_continue_after_the_stopped_entry_was_renamed_says_so(toy_series, toy_upstream, tmp_path, capsys):
    conflicting_release(toy_upstream)
    assert compose(toy_series, toy_upstream, "v2.0.0", "--worktree", str(tmp_path / "wt")) == 1
    toml = toy_series / "series.toml"
    toml.write_text(toml.read_text().replace('id = "pr101"', 'id = "pr101-renamed"'))
    capsys.readouterr()
    assert resume(toy_series, toy_upstream) == 3  # was a KeyError traceback
    err = capsys.readouterr().err
    assert "stopped at entry 'pr101', which" in err and "no longer has" in err and "--abort" in err
    assert gitstore.read_state_ref(pygit2.Repository(str(toy_upstream))) is not None  # the run can still go on


def test_rename_patch(toy_series, toy_upstream, tmp_path):
    patch = textwrap.dedent(
        """\
        From 0000000000000000000000000000000000000000 Mon Sep 17 00:00:00 2001
        From: Fixer <fixer@example.invalid>
        Date: Tue, 14 Nov 2023 22:13:20 +0000
        Subject: [PATCH] Move the package marker

        Renames the file and adds a docstring.
        ---
        diff --git a/pkg/__init__.py b/pkg/package.py
        similarity index 0%
        rename from pkg/__init__.py
        rename to pkg/package.py
        """
    )
    (toy_series / "patches" / "0002-rename.patch").write_text(patch)
    with open(toy_series / "series.toml", "a") as fh:
        fh.write(
            '\n[[entry]]\nid = "rename"\nfile = "patches/0002-rename.patch"\ntitle = "Move"\n'
            'upstream_status = "Inappropriate"\nwhy = "test"\n'
        )
    assert compose(toy_series, toy_upstream, "v1.0.0") == 0
    names = git(toy_upstream, "ls-tree", "-r", "--name-only", "compose-101-v1.0.0").splitlines()
    assert "pkg/package.py" in names and "pkg/__init__.py" not in names


def test_dirty_repo_and_foreign_branch_are_refused(toy_series, toy_upstream):
    (toy_upstream / "pkg" / "mod.py").write_text("dirty\n")
    assert compose(toy_series, toy_upstream, "v1.0.0") == 3
    git(toy_upstream, "checkout", "-q", "--", "pkg/mod.py")
    git(toy_upstream, "branch", "compose-101-v1.0.0", "v1.1.0")  # someone's own work under our branch name
    assert compose(toy_series, toy_upstream, "v1.0.0") == 3
    assert git(toy_upstream, "rev-parse", "compose-101-v1.0.0") == git(toy_upstream, "rev-parse", "v1.1.0")
    assert compose(toy_series, toy_upstream, "v1.0.0", "--force") == 0


def test_missing_source_offline_names_entry_and_sha(toy_series, toy_upstream, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("VLLM_COMPOSE_CACHE", str(tmp_path / "empty-cache"))
    assert compose(toy_series, toy_upstream, "v1.0.0") == 3
    err = capsys.readouterr().err
    sha = hashlib.sha256(PR_PATCH.encode()).hexdigest()
    assert "pr101" in err and sha in err and "--sources" in err
    assert "compose-101-v1.0.0" not in git(toy_upstream, "branch", "--list")
    # and --sources DIR seeds it
    src = tmp_path / "src"
    src.mkdir()
    (src / "pr101.diff").write_text(PR_PATCH)
    assert compose(toy_series, toy_upstream, "v1.0.0", "--sources", str(src)) == 0


def test_unknown_tag_offline_is_bad_input(toy_series, toy_upstream, capsys):
    assert compose(toy_series, toy_upstream, "v9.9.9") == 3
    assert "v9.9.9" in capsys.readouterr().err


def test_uninitialized_submodule_dir_is_initialized(toy_series, tmp_path, toy_upstream):
    empty = tmp_path / "fresh"
    empty.mkdir()
    # an empty folder (what an uninitialized submodule looks like) becomes a repository; the tag is then missing
    assert compose(toy_series, empty, "v1.0.0") == 3
    assert (empty / ".git").exists()


def test_pr_pinned_by_commits_is_merged_three_way(toy_series, toy_upstream, tmp_path):
    """With the PR's commits in the repository, the entry is a real 3-way merge (base = the PR's parent)."""
    git(toy_upstream, "checkout", "-q", "v1.0.0")
    git(toy_upstream, "checkout", "-q", "-b", "pr-101")
    (toy_upstream / "pkg" / "mod.py").write_text(
        MOD_V1.replace("def greet(name, *, loud=False):", 'def greet(name, *, loud=False, suffix=""):').replace(
            "        text = text.upper()\n    return text",
            "        text = text.upper()\n    if suffix:\n        text += suffix\n    return text",
        )
    )
    git(toy_upstream, "commit", "-qam", "PR 101")
    sha = git(toy_upstream, "rev-parse", "HEAD")
    git(toy_upstream, "checkout", "-q", "--detach", "v1.0.0")
    toml = (toy_series / "series.toml").read_text()
    start = toml.index("[entry.source]")
    end = toml.index("[[entry]]", start)
    (toy_series / "series.toml").write_text(toml[:start] + f'[entry.source]\ncommits = ["{sha}"]\n\n' + toml[end:])
    out = tmp_path / "r.json"
    assert compose(toy_series, toy_upstream, "v1.1.0", json_out=out) == 0
    entry = json.loads(out.read_text())["entries"][0]
    assert entry["method"] == "3-way merge" and entry["status"] == "applied"
    final = git(toy_upstream, "show", "compose-101-v1.1.0:pkg/mod.py")
    assert final.startswith('"""The toy module."""') and 'suffix=""' in final and "text += suffix" in final
    # v1.2.0 changed the line right below the PR's changed `def` line: git's merge calls that a conflict
    wt = tmp_path / "wt"
    assert compose(toy_series, toy_upstream, "v1.2.0", "--worktree", str(wt), json_out=out) == 1
    assert "3-way merge conflicts in pkg/mod.py" in json.loads(out.read_text())["entries"][0]["reason"]
    marked = (wt / "pkg" / "mod.py").read_text()
    assert "<<<<<<<" in marked and ">>>>>>>" in marked
    # resolve: both sides' changes, then --continue records the fix and composes
    start, end = marked.index("<<<<<<<"), marked.index("\n", marked.index(">>>>>>>")) + 1
    merged_head = 'def greet(name, *, loud=False, suffix=""):\n    text = "hello, " + name  # comma\n'
    (wt / "pkg" / "mod.py").write_text(marked[:start] + merged_head + marked[end:])
    rc = resume(toy_series, toy_upstream, json_out=out)
    report = json.loads(out.read_text())
    assert rc == 0, report["message"]
    assert [e["id"] for e in report["entries"]][:2] == ["pr101", "fix-pr101-v1.2.0"]
    assert {h["resolved_by"] for h in report["entries"][0]["hunks"]} == {"fix-pr101-v1.2.0"}
    final = git(toy_upstream, "show", "compose-101-v1.2.0:pkg/mod.py")
    assert '"hello, " + name  # comma' in final and 'suffix=""' in final and "text += suffix" in final


def test_series_diff_matches_entries_by_identity(toy_series, toy_upstream, tmp_path, capsys):
    for tag in ("v1.0.0", "v1.1.0", "v1.2.0", "v1.3.0"):
        assert compose(toy_series, toy_upstream, tag) == 0
    out = tmp_path / "d.json"

    def diff(old, new):
        rc = main(
            ["series-diff", old, new, "--series", str(toy_series), "--repo", str(toy_upstream), "--json", str(out)]
        )
        assert rc == 0
        return {e["id"]: e for e in json.loads(out.read_text())["entries"]}

    same = diff("v1.0.0", "v1.1.0")  # only line numbers moved
    assert {e["status"] for e in same.values()} == {"unchanged"}
    drift = diff("v1.0.0", "v1.2.0")  # the PR's context drifted
    assert drift["pr101"]["status"] == "changed" and "comma" in drift["pr101"]["interdiff"]
    assert drift["fix-farewell"]["status"] == "unchanged"
    gone = diff("v1.0.0", "v1.3.0")  # the PR is upstream there: no commit of it on the new branch
    assert gone["pr101"]["status"] == "dropped" and gone["pr101"]["new_commit"] is None
    back = diff("v1.3.0", "v1.0.0")
    assert back["pr101"]["status"] == "added"
    assert "dropped" in capsys.readouterr().out


def test_no_checks_is_recorded_in_the_report(toy_series, toy_upstream, tmp_path, capsys):
    out = tmp_path / "r.json"
    assert compose(toy_series, toy_upstream, "v1.0.0", "--no-checks", json_out=out) == 0
    checks = json.loads(out.read_text())["final_checks"]["checks"]
    # the shape of every check result (a skipped one ran on no file, for no time)
    assert checks == [
        {
            "name": "checks",
            "status": "skipped",
            "reason": "--no-checks given",
            "files": 0,
            "seconds": 0.0,
            "findings": [],
        }
    ]
    assert "skipped (--no-checks given)" in capsys.readouterr().out


def test_an_earlier_series_branch_of_the_release_is_named_not_updated(toy_series, toy_upstream, tmp_path, capsys):
    """A compose branch of the same release under another PR set (an earlier series) stays as it was, and the
    report names it so nobody builds it by habit."""
    git(toy_upstream, "branch", "compose-99-101-v1.0.0", "v1.0.0")
    stale = git(toy_upstream, "rev-parse", "compose-99-101-v1.0.0")
    git(toy_upstream, "branch", "compose-101-v1.1.0", "v1.1.0")  # another release's: not this one's business
    out = tmp_path / "r.json"
    assert (
        main(
            [
                "rebase",
                "--onto",
                "v1.0.0",
                "--series",
                str(toy_series),
                "--repo",
                str(toy_upstream),
                "--offline",
                "--json",
                str(out),
            ]
        )
        == 0
    )
    assert json.loads(out.read_text())["other_branches"] == ["compose-99-101-v1.0.0"]
    text = capsys.readouterr().out
    assert (
        "note: compose-99-101-v1.0.0 also composes v1.0.0 in this repository, from an earlier series "
        "(another PR set), and was not updated: build compose-101-v1.0.0"
    ) in text
    assert git(toy_upstream, "rev-parse", "compose-99-101-v1.0.0") == stale
