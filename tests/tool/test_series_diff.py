"""series_diff.entry_commits: a branch or base that names no commit is a typed error naming it."""

from __future__ import annotations

import pytest

from vllm_compose import gitstore
from vllm_compose.errors import RepositoryError
from vllm_compose.series_diff import entry_commits


def test_a_missing_branch_or_base_is_named_in_the_error(tmp_path):
    repo = gitstore.open_or_init_repo(tmp_path / "r")
    sig = gitstore.signature("T", "t@example.invalid")
    base = gitstore.commit_tree(repo, gitstore.tree_with_changes(repo, None, {"a.txt": b"a\n"}), [], "base", sig)
    gitstore.create_tag(repo, "v1", base, sig, "v1\n")
    repo.references.create("refs/heads/compose-v1", base)
    assert entry_commits(repo, "compose-v1", "v1") == []
    with pytest.raises(RepositoryError, match="compose-v2 not found"):
        entry_commits(repo, "compose-v2", "v1")
    with pytest.raises(RepositoryError, match="v2 not found"):
        entry_commits(repo, "compose-v1", "v2")
