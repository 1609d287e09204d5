"""After a compose: the new compose branch goes into `vllm/`'s worktree when nothing there can be lost.

The compose itself never touches a worktree (it writes objects and moves one ref). The user's next command,
`pip install -e vllm/`, builds from the files on disk, so a compose that left an older compose checked out would
install that one. Here, once the branch is written:

* an empty repository (a fresh clone's `vllm/`: nothing but `.git`, HEAD unborn) gets the branch checked out;
* a clean worktree (no change to a tracked file, no staged change) is switched to the branch with `git checkout`,
  which also refuses to overwrite an untracked file; ignored files (build outputs such as the `.so` files of an
  editable install) stay;
* anything else is left exactly as it is, and the outcome says how to switch by hand.

`released` covers the one case the compose would otherwise refuse: re-composing the branch that is checked out.
The branch is detached (same commit, worktree unchanged) while the compose runs and checked out again afterwards,
at its new tip when the compose wrote one.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pygit2
from pygit2.enums import RepositoryOpenFlag

from . import gitstore


@dataclass
class CheckoutOutcome:
    """What happened to the worktree after a compose: `switched` or not, and the sentence that says so."""

    branch: str
    switched: bool
    message: str


def _open(repo_dir: Path) -> pygit2.Repository | None:
    try:
        return pygit2.Repository(str(repo_dir), flags=RepositoryOpenFlag.NO_SEARCH)
    except pygit2.GitError:
        return None


def _current(repo: pygit2.Repository) -> str:
    """What HEAD is, in words: `branch X`, `a detached HEAD at 1234abcd5678`, or `nothing (an empty repository)`."""
    if repo.head_is_unborn:
        return "nothing (an empty repository)"
    if repo.head_is_detached:
        return f"a detached HEAD at {str(repo.head.target)[:12]}"
    return f"branch {repo.head.shorthand}"


def _is_empty_worktree(repo: pygit2.Repository) -> bool:
    workdir = Path(repo.workdir)
    return repo.head_is_unborn and all(p.name == ".git" for p in workdir.iterdir())


def check_out_compose(repo_dir: Path, branch: str, before: str | None = None) -> CheckoutOutcome:
    """Check `branch` out in `repo_dir` when its worktree is empty or clean; otherwise leave it and say how.

    `before` describes what was checked out when `released` detached HEAD for the compose."""
    repo = _open(Path(repo_dir))
    switch = f"git -C {repo_dir} checkout {branch}"
    if repo is None or repo.is_bare:
        return CheckoutOutcome(branch, False, f"{repo_dir} has no worktree: nothing was checked out")
    before = before or _current(repo)
    if not repo.head_is_unborn and not repo.head_is_detached and repo.head.shorthand == branch:
        return CheckoutOutcome(branch, True, f"{branch} is checked out in {repo_dir}")
    if repo.head_is_unborn and not _is_empty_worktree(repo):
        return CheckoutOutcome(
            branch,
            False,
            f"{repo_dir} holds files but no commit, so it was left as it is; to use the compose: move the files "
            f"away, then {switch}",
        )
    elif not repo.head_is_unborn and gitstore.is_dirty(repo):
        return CheckoutOutcome(
            branch,
            False,
            f"{repo_dir} has local changes, so it still has {before} checked out; to switch: commit or stash them "
            f"(git -C {repo_dir} stash), then {switch}",
        )
    done = gitstore.run_git_in_worktree(repo, "checkout", "--quiet", branch)
    if done.returncode != 0:
        reason = (done.stderr or done.stdout or "").strip().splitlines()
        return CheckoutOutcome(
            branch,
            False,
            f"{repo_dir} still has {before} checked out: git checkout refused ({reason[0] if reason else 'no reason'})"
            f"; to switch: move the files it names away, then {switch}",
        )
    return CheckoutOutcome(branch, True, f"checked out {branch} in {repo_dir} (it had {before} checked out)")


@contextlib.contextmanager
def released(repo_dir: Path, branch: str) -> Iterator[str | None]:
    """Detach HEAD (same commit, worktree untouched) while a compose rewrites `branch`, when `branch` is checked out
    in a clean worktree; yields what HEAD was (for `check_out_compose`'s message), None when nothing was done.

    Afterwards, when the branch did not move (the compose stopped, was refused or failed), HEAD is attached to it
    again as it was; when it moved, `check_out_compose` switches the worktree to its new tip.
    """
    repo = _open(Path(repo_dir))
    if (
        repo is None
        or repo.is_bare
        or repo.head_is_unborn
        or repo.head_is_detached
        or repo.head.shorthand != branch
        or gitstore.is_dirty(repo)
    ):
        yield None
        return
    ref, before = repo.head.name, _current(repo)
    repo.set_head(repo.head.target)
    try:
        yield before
    finally:
        if repo.head_is_detached and gitstore.ref_target(repo, ref) == repo.head.target:
            repo.set_head(ref)
