"""The git plumbing layer: opening repositories, in-memory trees, compare-and-swap refs, the state ref."""

from __future__ import annotations

import subprocess

import pygit2
import pytest

from vllm_compose import gitstore
from vllm_compose.errors import RepositoryError


def _read(repo, tree_id, path):
    tree = repo[tree_id]
    try:
        entry = tree[path]
    except KeyError:
        return None
    return repo[entry.id].data, entry.filemode


def _commit_files(repo, files, parents=(), message="base"):
    tree = gitstore.tree_with_changes(repo, None, files)
    sig = gitstore.signature("T", "t@example.invalid")
    return gitstore.commit_tree(repo, tree, list(parents), message, sig)


# -- opening ---------------------------------------------------------------------------------------------------


def test_missing_folder_becomes_a_repository_only_when_asked(tmp_path):
    with pytest.raises(RepositoryError, match="does not exist"):
        gitstore.open_or_init_repo(tmp_path / "vllm", create=False)
    assert not (tmp_path / "vllm").exists()
    repo = gitstore.open_or_init_repo(tmp_path / "vllm", create=True)
    assert repo.is_empty and (tmp_path / "vllm" / ".git").is_dir()


def test_empty_folder_as_left_by_an_uninitialized_submodule_becomes_a_repository(tmp_path):
    (tmp_path / "vllm").mkdir()
    repo = gitstore.open_or_init_repo(tmp_path / "vllm")
    assert not repo.is_bare and repo.is_empty


def test_existing_repository_is_opened_not_reinitialized(tmp_path):
    repo = gitstore.open_or_init_repo(tmp_path / "r")
    oid = _commit_files(repo, {"a.txt": b"a\n"})
    repo.references.create("refs/heads/main", oid)
    again = gitstore.open_or_init_repo(tmp_path / "r")
    assert again.references["refs/heads/main"].target == oid


def test_non_empty_folder_that_is_no_repository_is_refused_even_inside_another_repository(tmp_path):
    outer = gitstore.open_or_init_repo(tmp_path)  # must not be found by searching upwards
    assert outer is not None
    (tmp_path / "vllm").mkdir()
    (tmp_path / "vllm" / "notes.txt").write_text("mine\n")
    with pytest.raises(RepositoryError) as exc:
        gitstore.open_or_init_repo(tmp_path / "vllm")
    assert "not a git repository" in exc.value.message
    assert "submodule" in exc.value.hint
    assert (tmp_path / "vllm" / "notes.txt").read_text() == "mine\n"


def test_a_file_is_refused(tmp_path):
    (tmp_path / "vllm").write_text("x")
    with pytest.raises(RepositoryError, match="is a file"):
        gitstore.open_or_init_repo(tmp_path / "vllm")


def test_is_dirty(tmp_path, git_env):
    repo = gitstore.open_or_init_repo(tmp_path / "r")
    (tmp_path / "r" / "a.txt").write_text("a\n")
    subprocess.run(["git", "add", "a.txt"], cwd=tmp_path / "r", check=True, env=git_env)
    subprocess.run(["git", "commit", "-qm", "a"], cwd=tmp_path / "r", check=True, env=git_env)
    assert not gitstore.is_dirty(repo)
    (tmp_path / "r" / "new.txt").write_text("untracked\n")
    assert not gitstore.is_dirty(repo)
    assert gitstore.is_dirty(repo, untracked=True)
    (tmp_path / "r" / "a.txt").write_text("changed\n")
    assert gitstore.is_dirty(repo)


# -- trees and commits -----------------------------------------------------------------------------------------


def test_tree_with_changes_creates_modifies_deletes_and_prunes(tmp_path):
    repo = gitstore.open_or_init_repo(tmp_path / "r")
    base = gitstore.tree_with_changes(
        repo,
        None,
        {"top.txt": b"top\n", "pkg/a.py": b"a\n", "pkg/sub/deep.py": b"deep\n", "run.sh": b"#!/bin/sh\n"},
        modes={"run.sh": gitstore.EXEC_MODE},
    )
    new = gitstore.tree_with_changes(
        repo,
        base,
        {"pkg/sub/deep.py": None, "pkg/a.py": b"a2\n", "run.sh": b"#!/bin/sh\necho\n", "x/y/z.txt": b"z\n"},
    )
    tree = repo[new]
    assert _read(repo, new, "pkg/a.py") == (b"a2\n", gitstore.BLOB_MODE)
    assert _read(repo, new, "run.sh") == (b"#!/bin/sh\necho\n", gitstore.EXEC_MODE)  # mode kept
    assert _read(repo, new, "x/y/z.txt") == (b"z\n", gitstore.BLOB_MODE)
    assert "sub" not in repo[tree["pkg"].id]  # emptied folder pruned
    assert _read(repo, new, "top.txt") == (b"top\n", gitstore.BLOB_MODE)
    # the base is untouched (objects are immutable; nothing was checked out)
    assert _read(repo, base, "pkg/sub/deep.py") == (b"deep\n", gitstore.BLOB_MODE)


def test_deleting_the_last_file_gives_the_empty_tree_and_missing_paths_are_ignored(tmp_path):
    repo = gitstore.open_or_init_repo(tmp_path / "r")
    base = gitstore.tree_with_changes(repo, None, {"d/only.txt": b"x"})
    empty = gitstore.tree_with_changes(repo, base, {"d/only.txt": None, "never/was.txt": None})
    assert len(repo[empty]) == 0


@pytest.mark.parametrize(
    "changes",
    [{"a.txt/b.txt": b"under a file"}, {"dir": b"a file over a folder"}, {"../up.txt": b"x"}],
)
def test_tree_with_changes_refuses_file_folder_clashes_and_bad_paths(tmp_path, changes):
    repo = gitstore.open_or_init_repo(tmp_path / "r")
    base = gitstore.tree_with_changes(repo, None, {"a.txt": b"a", "dir/f.txt": b"f"})
    with pytest.raises(RepositoryError):
        gitstore.tree_with_changes(repo, base, changes)


def test_tree_from_entries_refuses_a_path_that_is_file_and_folder(tmp_path):
    repo = gitstore.open_or_init_repo(tmp_path / "r")
    blob = repo.create_blob(b"x")
    with pytest.raises(RepositoryError):
        gitstore.tree_from_entries(repo, {"a": (blob, gitstore.BLOB_MODE), "a/b": (blob, gitstore.BLOB_MODE)})


def test_commits_are_reproducible_under_source_date_epoch(tmp_path, monkeypatch):
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1234567890")
    repo = gitstore.open_or_init_repo(tmp_path / "r")
    first = _commit_files(repo, {"a.txt": b"a\n"})
    second = _commit_files(repo, {"a.txt": b"a\n"})
    assert first == second
    assert repo[first].author.time == 1234567890
    assert repo[first].author.offset == 0


# -- revisions and diffs ---------------------------------------------------------------------------------------


def test_resolve_commit_follows_branches_annotated_tags_and_ids_and_is_none_for_the_rest(tmp_path):
    repo = gitstore.open_or_init_repo(tmp_path / "r")
    oid = _commit_files(repo, {"a.txt": b"a\n"})
    repo.references.create("refs/heads/main", oid)
    gitstore.create_tag(repo, "v1", oid, gitstore.signature("T", "t@example.invalid"), "v1\n")
    for rev in ("main", "v1", "refs/tags/v1", str(oid)):
        assert gitstore.resolve_commit(repo, rev).id == oid, rev
    tree = str(repo[oid].tree_id)
    for rev in ("nope", "main~3", tree):  # nothing, past the root, a tree
        assert gitstore.resolve_commit(repo, rev) is None, rev


def test_file_patches_give_each_changed_file_and_its_patch_with_the_context_asked(tmp_path):
    repo = gitstore.open_or_init_repo(tmp_path / "r")
    lines = b"".join(b"line %d\n" % i for i in range(1, 11))
    base = _commit_files(repo, {"a.txt": lines, "b.txt": b"b\n"})
    tree = gitstore.tree_with_changes(
        repo, repo[base].tree, {"a.txt": lines.replace(b"line 5", b"five"), "b.txt": None, "c.txt": b"c\n"}
    )
    child = gitstore.commit_tree(repo, tree, [base], "child", gitstore.signature("T", "t@example.invalid"))
    patches = gitstore.file_patches(repo, repo[base], repo[child])
    assert [path for path, _ in patches] == ["a.txt", "b.txt", "c.txt"]
    a_text = patches[0][1]
    assert "-line 5\n+five\n" in a_text and " line 2\n" in a_text and " line 8\n" in a_text
    # three lines of context, as git's default (" line 1" only as the `@@` section heading)
    assert " line 1" not in a_text.splitlines() and " line 9" not in a_text.splitlines()
    bare = dict(gitstore.file_patches(repo, repo[base], repo[child], context_lines=0))["a.txt"]
    assert "-line 5\n+five\n" in bare and " line 4" not in bare.splitlines()
    assert "-b\n" in patches[1][1] and "+c\n" in patches[2][1]


# -- refs --------------------------------------------------------------------------------------------------------


def test_update_ref_is_compare_and_swap(tmp_path):
    repo = gitstore.open_or_init_repo(tmp_path / "r")
    c1 = _commit_files(repo, {"a": b"1"})
    c2 = _commit_files(repo, {"a": b"2"}, [c1])
    c3 = _commit_files(repo, {"a": b"3"}, [c2])
    ref = "refs/heads/compose-1-v1"
    gitstore.update_ref_atomically(repo, ref, c1, None)
    assert gitstore.ref_target(repo, ref) == c1
    with pytest.raises(RepositoryError, match="was not updated"):
        gitstore.update_ref_atomically(repo, ref, c2, None)  # expected absent, but it exists
    gitstore.update_ref_atomically(repo, ref, c2, c1)
    with pytest.raises(RepositoryError) as exc:
        gitstore.update_ref_atomically(repo, ref, c3, c1)  # someone moved it to c2 meanwhile
    assert str(c2) in exc.value.message
    assert gitstore.ref_target(repo, ref) == c2
    assert gitstore.delete_ref(repo, ref, c2)
    assert gitstore.ref_target(repo, ref) is None
    assert not gitstore.delete_ref(repo, ref)


def test_update_ref_refuses_invalid_names(tmp_path):
    repo = gitstore.open_or_init_repo(tmp_path / "r")
    c1 = _commit_files(repo, {"a": b"1"})
    for name in ("compose-1", "refs/heads/bad..name"):
        with pytest.raises(RepositoryError, match="not a valid full ref name"):
            gitstore.update_ref_atomically(repo, name, c1, None)


def test_state_ref_round_trip_and_versioning(tmp_path):
    repo = gitstore.open_or_init_repo(tmp_path / "r")
    assert gitstore.read_state_ref(repo) is None
    state = {"tag": "v0.26.0", "done": ["pr1"], "next": "fix-1"}
    gitstore.write_state_ref(repo, gitstore.STATE_REF, state)
    assert gitstore.read_state_ref(repo) == state
    gitstore.write_state_ref(repo, gitstore.STATE_REF, {"tag": "v0.27.0"})
    assert gitstore.read_state_ref(repo) == {"tag": "v0.27.0"}

    future = repo.create_blob(b'{"format": 99, "state": {}}')
    gitstore.update_ref_atomically(repo, gitstore.STATE_REF, future, gitstore.ref_target(repo, gitstore.STATE_REF))
    with pytest.raises(RepositoryError, match="format 99"):
        gitstore.read_state_ref(repo)
    garbage = repo.create_blob(b"{not json")
    gitstore.update_ref_atomically(repo, gitstore.STATE_REF, garbage, future)
    with pytest.raises(RepositoryError, match="not valid JSON"):
        gitstore.read_state_ref(repo)
    assert gitstore.delete_ref(repo, gitstore.STATE_REF)
    assert gitstore.read_state_ref(repo) is None


def test_state_ref_compare_and_swap(tmp_path):
    repo = gitstore.open_or_init_repo(tmp_path / "r")
    first = gitstore.write_state_ref(repo, gitstore.STATE_REF, {"n": 1}, expected_old=None)
    with pytest.raises(RepositoryError):
        gitstore.write_state_ref(repo, gitstore.STATE_REF, {"n": 2}, expected_old=None)
    gitstore.write_state_ref(repo, gitstore.STATE_REF, {"n": 2}, expected_old=first)
    assert gitstore.read_state_ref(repo) == {"n": 2}
    assert isinstance(first, pygit2.Oid)
