"""Helpers the tests share (plain functions and constants; the fixtures built on them are in conftest.py).

* `GIT_ENV`: the pinned git environment every test runs under (conftest's `_hermetic_env` sets it per test);
* `REAL_CACHE_ROOT`: the user's (or CI's) real cache, captured at import, before any fixture redirects the cache;
* real vLLM releases from their PyPI sdists through that cache, imported once per test session: `release_commit`
  (the repository and commit), `release_files` (some files' text), `release_tree` (a folder of the release's files);
* `release_functions`: functions of a release's source executed alone, to test the release's own code on a CPU;
* artifacts CI cannot have, each from one environment variable (a test without it skips, naming the variable):

  - `VLLM_COMPOSE_TEST_TREES` (`composed_tree`): a folder holding `c-<tag>/` per release, e.g. `c-v0.26.0/`, the
    files of the compose branch `vllm-compose rebase --onto <tag>` writes. Composing needs the two pinned PR diffs,
    which come from GitHub only, so CI has no composed tree;
  - `VLLM_COMPOSE_STOCK_WHEEL` (`stock_wheel`): the stock vLLM 0.26.0 wheel (`vllm-0.26.0-cp38-abi3-manylinux_2_28_
    x86_64.whl`, about 300 MB from PyPI); without it, the copy in the real cache, if a `vllm-compose wheel` run
    ever fetched it. The tool's precompiled build reads the same variable (`precompiled_hook.py`).

Import it as `from release_trees import ...` (tests/ is on sys.path, as for `toy_compose`).
"""

from __future__ import annotations

import os
from pathlib import Path

import pygit2
import pytest

from vllm_compose import index, releases
from vllm_compose.cache import Cache, default_cache_root
from vllm_compose.series import version_of_tag

#: the cache a real user (or CI) has, captured before any fixture redirects it; the `sdist` tests reuse it
REAL_CACHE_ROOT = default_cache_root()

PINNED_EPOCH = 1700000000  # 2023-11-14T22:13:20Z
GIT_ENV = {
    "GIT_CONFIG_GLOBAL": os.devnull,
    "GIT_CONFIG_SYSTEM": os.devnull,
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_AUTHOR_NAME": "Test Author",
    "GIT_AUTHOR_EMAIL": "author@example.invalid",
    "GIT_COMMITTER_NAME": "Test Committer",
    "GIT_COMMITTER_EMAIL": "committer@example.invalid",
    "GIT_AUTHOR_DATE": f"@{PINNED_EPOCH} +0000",
    "GIT_COMMITTER_DATE": f"@{PINNED_EPOCH} +0000",
    "GIT_TERMINAL_PROMPT": "0",
    "SOURCE_DATE_EPOCH": str(PINNED_EPOCH),
}


#: tag -> (repository, release commit) imported in this test session (an import takes 6-14 s; tests only read it)
_IMPORTED_RELEASES: dict[str, tuple[pygit2.Repository, pygit2.Commit]] = {}


def release_commit(tmp_path_factory, tag: str) -> tuple[pygit2.Repository, pygit2.Commit]:
    """vLLM release `tag` imported from its PyPI sdist through the user's (or CI's) cache into a repository, once per
    test session: downloaded once, reused by later runs. Skips the calling test when the sdist is not cached and
    PyPI is unreachable. For module-scoped fixtures (the per-test git environment is not set yet, so it is set
    here)."""
    from vllm_compose import gitstore
    from vllm_compose.errors import SourceError

    if tag in _IMPORTED_RELEASES:
        return _IMPORTED_RELEASES[tag]

    cache = Cache(REAL_CACHE_ROOT)
    version = version_of_tag(tag)
    name = f"vllm-{version}.tar.gz"
    known = cache.lookup_name(name)
    if not (known and cache.has(known[0])):
        try:
            index.find_sdist(version, index.pip_index_url())
        except SourceError as exc:
            pytest.skip(f"{name} is not cached in {cache.root} and PyPI is unreachable ({exc.message})")
    root = tmp_path_factory.mktemp("release")
    with pytest.MonkeyPatch.context() as mp:
        for key, value in GIT_ENV.items():
            mp.setenv(key, value)
        repo = gitstore.open_or_init_repo(root / "vllm")
        commit = releases.ensure_release(repo, tag, cache)
    _IMPORTED_RELEASES[tag] = repo, commit
    return repo, commit


def release_files(tmp_path_factory, tag: str, paths: list[str]) -> dict[str, str]:
    """The text of `paths` in vLLM release `tag` (from its PyPI sdist; see `release_commit`)."""
    repo, commit = release_commit(tmp_path_factory, tag)
    return {path: repo[commit.tree[path].id].peel(pygit2.Blob).data.decode() for path in paths}


#: tag -> the folder `release_tree` wrote for it, once per test session
_RELEASE_TREES: dict[str, Path] = {}


def release_tree(tmp_path_factory, tag: str) -> Path:
    """A folder holding release `tag`'s files as its PyPI sdist unpacks (see `release_commit`).

    Written once per test session and shared by every test that asks (about 150 MB a release): read it, never
    write to it. A test that edits a release copies it first (as `test_e4m3_numerics` does)."""
    if tag in _RELEASE_TREES:
        return _RELEASE_TREES[tag]
    repo, commit = release_commit(tmp_path_factory, tag)
    root = tmp_path_factory.mktemp(f"tree-{tag}")

    def write(tree: pygit2.Tree, folder: Path) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        for entry in tree:
            obj = repo[entry.id]
            if isinstance(obj, pygit2.Tree):
                write(obj, folder / entry.name)
            elif isinstance(obj, pygit2.Blob):
                (folder / entry.name).write_bytes(obj.data)

    write(commit.tree, root)
    _RELEASE_TREES[tag] = root
    return root


def release_functions(source: str, filename: str, names, namespace: dict, in_class: str | None = None) -> dict:
    """Functions `names` of a release's source text (module level, or the methods of class `in_class`), executed
    alone in `namespace` (which supplies the globals they use): the release's own code under test on a CPU."""
    import ast

    body = ast.parse(source).body
    if in_class is not None:
        body = next(n for n in body if isinstance(n, ast.ClassDef) and n.name == in_class).body
    fns = [n for n in body if isinstance(n, ast.FunctionDef) and n.name in names]
    exec(compile(ast.Module(fns, []), filename, "exec"), namespace)  # noqa: S102 - the release's own code
    return {f.name: namespace[f.name] for f in fns}


# --- artifacts CI cannot have ------------------------------------------------------------------------------------

TEST_TREES_ENV = "VLLM_COMPOSE_TEST_TREES"
STOCK_WHEEL_ENV = "VLLM_COMPOSE_STOCK_WHEEL"
STOCK_WHEEL_VERSION = "0.26.0"


def composed_tree(tag: str, probe: str) -> Path:
    """`$VLLM_COMPOSE_TEST_TREES/c-<tag>`, vLLM `tag` composed with series/, checked by a file it must hold (`probe`,
    relative to the tree). Skips the calling test, saying what to set, when the variable is unset or that release's
    tree is not there; fails when the variable names no folder (a typo, not a missing artifact)."""
    how = (
        f"set {TEST_TREES_ENV} to a folder holding c-{tag}/, the files of the compose branch "
        f"`vllm-compose rebase --onto {tag}` writes (composing needs the pinned PR diffs, which CI cannot fetch)"
    )
    root = os.environ.get(TEST_TREES_ENV)
    if not root:
        pytest.skip(f"no composed {tag} tree: {how}")
    if not Path(root).is_dir():
        pytest.fail(f"{TEST_TREES_ENV}={root} is not a folder; {how}")
    tree = Path(root) / f"c-{tag}"
    if not (tree / probe).is_file():
        pytest.skip(f"no composed {tag} tree: {tree} has no {probe}; {how}")
    return tree


def find_stock_wheel() -> Path | None:
    """The stock vLLM 0.26.0 wheel: `$VLLM_COMPOSE_STOCK_WHEEL`, else the one in the real cache (verified, never
    downloaded here), else None. Fails the calling test when the variable names no file."""
    from vllm_compose.artifacts.wheel import fetch_stock_wheel
    from vllm_compose.errors import SourceError

    given = os.environ.get(STOCK_WHEEL_ENV)
    if given:
        if not Path(given).is_file():
            pytest.fail(f"{STOCK_WHEEL_ENV}={given} is not a file (the stock vLLM {STOCK_WHEEL_VERSION} wheel)")
        return Path(given)
    try:
        return fetch_stock_wheel(STOCK_WHEEL_VERSION, Cache(REAL_CACHE_ROOT), offline=True)
    except SourceError:
        return None


def stock_wheel() -> Path:
    """`find_stock_wheel`, or a skip of the calling test saying what to set."""
    found = find_stock_wheel()
    if found is None:
        pytest.skip(
            f"the stock vLLM {STOCK_WHEEL_VERSION} wheel (about 300 MB) is not in the cache {REAL_CACHE_ROOT}: set "
            f"{STOCK_WHEEL_ENV} to the file (`pip download vllm=={STOCK_WHEEL_VERSION} --no-deps` fetches it)"
        )
    return found
