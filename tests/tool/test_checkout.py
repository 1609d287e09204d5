"""After a compose the new compose branch is checked out in the repository's worktree when it is empty or clean;
a worktree with local changes is never touched, and the report says how to switch (checkout.py)."""

from __future__ import annotations

from pathlib import Path

from toy_compose import compose, git

BRANCH = "compose-101-v1.0.0"


def head(repo: Path) -> str:
    return git(repo, "rev-parse", "--abbrev-ref", "HEAD")


def test_an_empty_repository_gets_the_branch_checked_out(toy_series, toy_upstream, tmp_path, capsys):
    """A fresh clone's vllm/: only .git, HEAD unborn (here the release tags are fetched in, as from GitHub)."""
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    git(fresh, "init", "-q")
    git(fresh, "fetch", "-q", str(toy_upstream), "refs/tags/*:refs/tags/*")
    assert compose(toy_series, fresh, "v1.0.0") == 0
    assert f"checked out {BRANCH} in {fresh} (it had nothing (an empty repository) checked out)" in (
        capsys.readouterr().out
    )
    assert head(fresh) == BRANCH and git(fresh, "status", "--porcelain") == ""
    assert "suffix" in (fresh / "pkg" / "mod.py").read_text()


def test_a_clean_worktree_is_switched_to_the_new_branch(toy_series, toy_upstream, capsys):
    assert compose(toy_series, toy_upstream, "v1.0.0") == 0
    assert head(toy_upstream) == BRANCH
    assert compose(toy_series, toy_upstream, "v1.1.0") == 0  # the next release: the user's `rebase --onto` after it
    assert f"checked out compose-101-v1.1.0 in {toy_upstream} (it had branch {BRANCH} checked out)" in (
        capsys.readouterr().out
    )
    assert head(toy_upstream) == "compose-101-v1.1.0"
    assert (toy_upstream / "pkg" / "mod.py").read_text().startswith('"""The toy module."""')  # v1.1.0's file


def test_a_dirty_worktree_is_never_touched_and_the_tool_says_how_to_switch(toy_series, toy_upstream, capsys):
    assert compose(toy_series, toy_upstream, "v1.0.0") == 0
    (toy_upstream / "pkg" / "mod.py").write_text("my unfinished work\n")
    assert compose(toy_series, toy_upstream, "v1.1.0", "--allow-dirty") == 0
    out = capsys.readouterr().out
    assert f"{toy_upstream} has local changes, so it still has branch {BRANCH} checked out" in out
    assert f"git -C {toy_upstream} checkout compose-101-v1.1.0" in out
    assert head(toy_upstream) == BRANCH and (toy_upstream / "pkg" / "mod.py").read_text() == "my unfinished work\n"


def test_a_dirty_worktree_is_refused_with_a_hint_that_says_what_the_compose_does_to_it(
    toy_series, toy_upstream, capsys
):
    assert compose(toy_series, toy_upstream, "v1.0.0") == 0
    (toy_upstream / "pkg" / "mod.py").write_text("my unfinished work\n")
    assert compose(toy_series, toy_upstream, "v1.1.0") == 3
    err = capsys.readouterr().err
    assert "has uncommitted changes" in err
    assert "after writing its branch the compose checks it out, which it does only in a clean worktree" in err
    assert "never touches" not in err
    assert head(toy_upstream) == BRANCH and (toy_upstream / "pkg" / "mod.py").read_text() == "my unfinished work\n"


def test_an_untracked_file_in_the_way_is_not_overwritten(toy_series, toy_upstream, capsys):
    git(toy_upstream, "checkout", "-q", "v1.0.0")
    git(toy_upstream, "rm", "-q", "pkg/__init__.py")
    git(toy_upstream, "commit", "-qm", "release v2.5.0 drops __init__")
    git(toy_upstream, "tag", "v2.5.0")
    git(toy_upstream, "checkout", "-q", "--detach")
    (toy_upstream / "pkg" / "__init__.py").write_text("mine\n")  # untracked here, tracked on the compose branch
    assert compose(toy_series, toy_upstream, "v1.0.0") == 0
    assert "git checkout refused" in capsys.readouterr().out
    assert (toy_upstream / "pkg" / "__init__.py").read_text() == "mine\n"


def test_recomposing_the_checked_out_branch_moves_it_and_its_worktree(toy_series, toy_upstream, capsys):
    assert compose(toy_series, toy_upstream, "v1.0.0") == 0
    before = git(toy_upstream, "rev-parse", BRANCH)
    patch = toy_series / "patches" / "0001-farewell-suffix.patch"
    patch.write_text(patch.read_text().replace('return "bye " + name + suffix', 'return "bye, " + name + suffix'))
    assert compose(toy_series, toy_upstream, "v1.0.0") == 0  # was refused: "branch ... is checked out"
    assert git(toy_upstream, "rev-parse", BRANCH) != before and head(toy_upstream) == BRANCH
    assert '"bye, " + name + suffix' in (toy_upstream / "pkg" / "mod.py").read_text()
    assert git(toy_upstream, "status", "--porcelain") == ""


def test_a_refused_recompose_leaves_the_checked_out_branch_as_it_was(toy_series, toy_upstream, capsys):
    assert compose(toy_series, toy_upstream, "v1.0.0") == 0
    before = git(toy_upstream, "rev-parse", BRANCH)
    patch = toy_series / "patches" / "0001-farewell-suffix.patch"
    patch.write_text(patch.read_text().replace('return "bye " + name + suffix', "return bye_text(name) + suffix"))
    assert compose(toy_series, toy_upstream, "v1.0.0") == 2  # undefined name: refused, nothing written
    assert head(toy_upstream) == BRANCH and git(toy_upstream, "rev-parse", BRANCH) == before


def test_no_checkout_leaves_the_worktree(toy_series, toy_upstream, capsys):
    detached = git(toy_upstream, "rev-parse", "HEAD")
    assert compose(toy_series, toy_upstream, "v1.0.0", "--no-checkout") == 0
    assert "checked out" not in capsys.readouterr().out
    assert head(toy_upstream) == "HEAD" and git(toy_upstream, "rev-parse", "HEAD") == detached
