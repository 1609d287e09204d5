"""The one small layer of git plumbing the rest of the tool uses.

Everything here works on object ids and refs, never on the user's index or worktree: trees are built in memory
from a base tree plus a set of changes, commits are written without moving any ref, and refs move only through a
compare-and-swap (`update_ref_atomically`), so an interrupted run leaves at most unreferenced objects behind.

Run state lives in the repository itself, as a versioned JSON blob that `refs/vllm-compose/state` points at.
Signature times come from `SOURCE_DATE_EPOCH` when it is set, so that builds and tests are reproducible.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import time
from collections.abc import Mapping
from pathlib import Path

import git
import pygit2
from pygit2.enums import FileMode, FileStatus, ObjectType, RepositoryOpenFlag

from .errors import RepositoryError

#: where compose keeps its resumable run state
STATE_REF = "refs/vllm-compose/state"
#: bumped whenever the state's layout changes incompatibly; a reader refuses other versions
STATE_FORMAT = 1
ZERO_OID = "0" * 40
#: seconds a `git fetch` from a remote may take before the caller falls back (to PyPI, to the pinned URL)
FETCH_TIMEOUT = 60

TREE_MODE = int(FileMode.TREE)
BLOB_MODE = int(FileMode.BLOB)
EXEC_MODE = int(FileMode.BLOB_EXECUTABLE)
LINK_MODE = int(FileMode.LINK)


# ---------------------------------------------------------------------------------------------------------------
# Opening a repository


def open_or_init_repo(path: str | os.PathLike, create: bool = True) -> pygit2.Repository:
    """Open the git repository at `path`, or create one there when the folder is empty or (with `create`) missing.

    An uninitialized git submodule is an empty folder, so `vllm/` works whether or not `git submodule update
    --init` ran. The commands pass `create=False` unless asked (`rebase --init`): a typo in `--repo` must not become
    a new repository holding a compose nobody finds, and a command that only reads never creates one. A folder that holds files but is not itself a
    repository is refused: it is never searched upwards (that would silently pick the enclosing project repository)
    and never initialized over (it may be someone's work).
    """
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise RepositoryError(
            f"{str(path)!r} is a file, not a git repository",
            file=str(path),
            hint="pass --repo DIR naming a vLLM git checkout (or a missing/empty folder to create one)",
        )
    if not path.exists() and not create:
        parent = path.resolve().parent
        raise RepositoryError(
            f"the repository folder {str(path)!r} does not exist"
            + ("" if parent.is_dir() else f" (nor does {str(parent)!r})"),
            file=str(path),
            hint="check the path given to --repo; to create a new repository there, compose with "
            f"`vllm-compose rebase --init --repo {path} ...`",
        )
    if not path.exists() or not any(path.iterdir()):
        path.mkdir(parents=True, exist_ok=True)
        return pygit2.init_repository(str(path), bare=False)
    try:
        return pygit2.Repository(str(path), flags=RepositoryOpenFlag.NO_SEARCH)
    except pygit2.GitError as exc:
        raise RepositoryError(
            f"{str(path)!r} is not empty and is not a git repository ({exc})",
            file=str(path),
            hint="point --repo at a vLLM git checkout, run `git submodule update --init vllm`, "
            "or move the folder away so the tool can create a fresh repository there",
        ) from None


def init_bare_repo(path: str | os.PathLike) -> pygit2.Repository:
    """A new bare repository at `path` (scratch space: the image overlay composes in one)."""
    return pygit2.init_repository(str(path), bare=True)


def is_dirty(repo: pygit2.Repository, untracked: bool = False) -> bool:
    """Whether the worktree or index differ from HEAD (untracked files count only when `untracked`)."""
    if repo.is_bare:
        return False
    status = repo.status(untracked_files="normal" if untracked else "no")
    clean = {FileStatus.CURRENT, FileStatus.IGNORED}
    return any(flags not in clean for flags in status.values())


# ---------------------------------------------------------------------------------------------------------------
# Objects


def signature(name: str, email: str, when: int | None = None) -> pygit2.Signature:
    """A signature at `when`, else at `SOURCE_DATE_EPOCH` when set, else now; always UTC for reproducibility."""
    if when is None:
        epoch = os.environ.get("SOURCE_DATE_EPOCH")
        when = int(epoch) if epoch and epoch.strip().isdigit() else int(time.time())
    return pygit2.Signature(name, email, when, 0)


def write_blob(repo: pygit2.Repository, data: bytes) -> pygit2.Oid:
    """Store `data` as a blob; returns its id."""
    return repo.create_blob(data)


def write_blob_stream(repo: pygit2.Repository, stream: io.IOBase) -> pygit2.Oid:
    """Store what `stream` reads to its end as a blob, chunk by chunk (libgit2's write stream); returns its id."""
    return repo.create_blob_fromiobase(stream)


def commit_tree(
    repo: pygit2.Repository,
    tree_id: pygit2.Oid | str,
    parents: list[pygit2.Oid | str],
    message: str,
    author: pygit2.Signature,
    committer: pygit2.Signature | None = None,
) -> pygit2.Oid:
    """Write a commit object for `tree_id` without moving any ref; returns its id."""
    return repo.create_commit(None, author, committer or author, message, _oid(tree_id), [_oid(p) for p in parents])


def _oid(value: pygit2.Oid | str) -> pygit2.Oid:
    return value if isinstance(value, pygit2.Oid) else pygit2.Oid(hex=str(value))


def has_objects(repo: pygit2.Repository, ids: tuple[str, ...] | list[str]) -> bool:
    """Whether the object database holds every one of `ids` (hex)."""
    return all(pygit2.Oid(hex=c) in repo.odb for c in ids)


def peel_commit(repo: pygit2.Repository, ref: str) -> pygit2.Commit | None:
    """The commit `ref` (a full ref name) points at, through annotated tags; None when there is none."""
    try:
        return repo.references[ref].peel(pygit2.Commit)
    except (KeyError, pygit2.InvalidSpecError, ValueError):
        return None


def resolve_commit(repo: pygit2.Repository, rev: str) -> pygit2.Commit | None:
    """The commit `rev` names (a branch or tag name, a commit id, anything `git rev-parse` takes), through annotated
    tags; None when `rev` names nothing or names no commit (a tree, a blob)."""
    try:
        return repo.revparse_single(rev).peel(pygit2.Commit)
    except (KeyError, ValueError):  # pygit2.InvalidSpecError is a ValueError
        return None


def create_tag(
    repo: pygit2.Repository, tag: str, commit_id: pygit2.Oid, tagger: pygit2.Signature, message: str
) -> pygit2.Commit:
    """Create annotated tag `tag` on `commit_id`; returns the tagged commit. When another process created the tag
    meanwhile, theirs is kept and its commit returned."""
    try:
        repo.create_tag(tag, commit_id, ObjectType.COMMIT, tagger, message)
    except (ValueError, pygit2.AlreadyExistsError, pygit2.GitError):
        existing = peel_commit(repo, f"refs/tags/{tag}")
        if existing is None:
            raise
        return existing
    return repo[commit_id]


def diff_bytes(repo: pygit2.Repository, base: pygit2.Oid, head: pygit2.Oid, *, renames: bool = True) -> bytes:
    """`git diff base head` (commits or trees) as bytes; renames detected as git does by default, unless
    `renames=False` (then a rename is a deletion and an addition)."""
    diff = repo.diff(repo[base].peel(pygit2.Tree), repo[head].peel(pygit2.Tree))
    if renames:
        diff.find_similar()
    return b"".join(patch.data for patch in diff if patch is not None)


def file_patches(repo: pygit2.Repository, old, new, *, context_lines: int = 3) -> list[tuple[str, str]]:
    """`git diff -U<context_lines> old new` (commits or trees) file by file: each changed file's path (a deleted
    file's old path) and its patch text, in git's order. No rename detection: a rename is a deletion and an
    addition."""
    return [(patch.delta.new_file.path, patch.text) for patch in repo.diff(old, new, context_lines=context_lines)]


def merge_trees(repo: pygit2.Repository, base: pygit2.Oid, ours: pygit2.Oid, theirs: pygit2.Oid) -> pygit2.Index:
    """git's 3-way merge of three commits' (or trees') trees, in memory: an index whose `conflicts` name the files
    that need a person; nothing is written to any ref, index file or worktree."""
    return repo.merge_trees(repo[base].peel(pygit2.Tree), repo[ours].peel(pygit2.Tree), repo[theirs].peel(pygit2.Tree))


def merge_file(repo: pygit2.Repository, ancestor, ours, theirs) -> str:
    """One conflicted file of `merge_trees` (its index entries) as text with git's conflict markers."""
    return repo.merge_file_from_index(ancestor, ours, theirs).contents


def changed_paths(repo: pygit2.Repository, a: pygit2.Tree, b: pygit2.Tree, *, deleted: bool = True) -> list[str]:
    """Paths whose content differs between two trees, sorted: added and modified ones, and deleted ones unless
    `deleted=False` (then only paths present in `b`)."""
    paths = set()
    for patch in repo.diff(a, b):
        delta = patch.delta
        status = delta.status_char()
        if status != "D":
            paths.add(delta.new_file.path)
        if deleted and status in ("D", "R"):
            paths.add(delta.old_file.path)
    return sorted(paths)


def _split(path: str) -> list[str]:
    parts = [p for p in path.split("/") if p]
    if not parts or any(p in (".", "..") for p in parts) or path.startswith("/"):
        raise RepositoryError(f"path {path!r} cannot be stored in a git tree", file=path, hint="use a relative path")
    return parts


def _nest(flat: Mapping[str, object]) -> dict:
    """`{"a/b/c": v}` -> `{"a": {"b": {"c": v}}}`; a path that is both a file and a folder is a `RepositoryError`."""
    root: dict = {}
    for path, value in flat.items():
        parts = _split(path)
        node = root
        for part in parts[:-1]:
            child = node.setdefault(part, {})
            if not isinstance(child, dict):
                raise RepositoryError(f"{path!r} lies under {part!r}, which is a file", file=path)
            node = child
        if isinstance(node.get(parts[-1]), dict):
            raise RepositoryError(f"{path!r} is both a file and a folder", file=path)
        node[parts[-1]] = value
    return root


def tree_with_changes(
    repo: pygit2.Repository,
    base_tree: pygit2.Tree | pygit2.Oid | str | None,
    changes: Mapping[str, bytes | None],
    modes: Mapping[str, int] | None = None,
) -> pygit2.Oid:
    """The id of `base_tree` with `changes` applied: `{path: new content, or None to delete}`.

    Parent folders are created as needed and folders left empty by a deletion are pruned (git has no empty
    folders). A changed file keeps its mode unless `modes` names one; a new file is 100644 unless `modes` says
    otherwise. Deleting a path that does not exist is a no-op. A file where the change needs a folder (or the
    reverse) is a `RepositoryError`: it would silently replace a whole subtree.
    """
    if base_tree is not None and not isinstance(base_tree, pygit2.Tree):
        base_tree = repo[_oid(base_tree)].peel(pygit2.Tree)
    nested = _nest({path: (data, (modes or {}).get(path), path) for path, data in changes.items()})
    oid = _apply_nested(repo, base_tree, nested, "")
    if oid is None:
        oid = repo.TreeBuilder().write()
    return oid


def _apply_nested(repo: pygit2.Repository, tree: pygit2.Tree | None, nested: dict, prefix: str) -> pygit2.Oid | None:
    builder = repo.TreeBuilder(tree) if tree is not None else repo.TreeBuilder()
    for name, change in nested.items():
        existing = builder.get(name)
        here = f"{prefix}{name}"
        if isinstance(change, dict):
            subtree = None
            if existing is not None:
                if existing.filemode != TREE_MODE:
                    raise RepositoryError(
                        f"{here!r} is a file in the base tree, but the changes put files under it",
                        file=here,
                        hint="delete the file in an earlier change before creating a folder of that name",
                    )
                subtree = repo[existing.id]
            sub_oid = _apply_nested(repo, subtree, change, here + "/")
            if sub_oid is None:
                if existing is not None:
                    builder.remove(name)
            else:
                builder.insert(name, sub_oid, TREE_MODE)
            continue
        data, mode, path = change
        if existing is not None and existing.filemode == TREE_MODE:
            raise RepositoryError(
                f"{path!r} is a folder in the base tree and cannot be replaced by a file",
                file=path,
                hint="delete the folder's files first",
            )
        if data is None:
            if existing is not None:
                builder.remove(name)
            continue
        if mode is None:
            mode = existing.filemode if existing is not None else BLOB_MODE
        builder.insert(name, repo.create_blob(data), mode)
    if len(builder) == 0:
        return None
    return builder.write()


def tree_from_entries(repo: pygit2.Repository, entries: Mapping[str, tuple[pygit2.Oid, int]]) -> pygit2.Oid:
    """Build a tree from `{path: (blob id, mode)}` in one bottom-up pass (used to import whole releases).

    Raises `RepositoryError` when a path is both a file and a folder.
    """
    root = _nest(entries)

    def write(node: dict) -> pygit2.Oid:
        builder = repo.TreeBuilder()
        for name, value in node.items():
            if isinstance(value, dict):
                builder.insert(name, write(value), TREE_MODE)
            else:
                builder.insert(name, value[0], value[1])
        return builder.write()

    return write(root)


# ---------------------------------------------------------------------------------------------------------------
# Refs


def run_git(repo: pygit2.Repository, *args: str, timeout: float | None = None) -> subprocess.CompletedProcess:
    """Run a git command on `repo` through GitPython (never prompting); returns its status and output.

    pygit2 has no compare-and-swap ref update and no fetch with a deadline, so those two go through git itself;
    GitPython runs it (killing it after `timeout` seconds) and hands back status, stdout and stderr.
    """
    env = {"GIT_TERMINAL_PROMPT": "0", "GIT_ASKPASS": "true", "SSH_ASKPASS": "true"}
    try:
        status, out, err = git.Git().execute(
            ["git", f"--git-dir={repo.path}", *args],
            with_extended_output=True,
            with_exceptions=False,
            kill_after_timeout=timeout,
            env=env,
        )
    except git.GitCommandNotFound as exc:
        raise RepositoryError(
            "the git command is not installed", hint="install git (it is needed for ref updates and fetches)"
        ) from exc
    return subprocess.CompletedProcess(args, status, out, err)


def run_git_in_worktree(repo: pygit2.Repository, *args: str) -> subprocess.CompletedProcess:
    """Run a porcelain git command (checkout) in `repo`'s worktree, never prompting; returns status and output.

    The one place the tool changes a worktree: `checkout.check_out_compose`, after a compose, when it is clean."""
    env = {"GIT_TERMINAL_PROMPT": "0", "GIT_ASKPASS": "true", "SSH_ASKPASS": "true"}
    try:
        status, out, err = git.Git(repo.workdir).execute(
            ["git", *args], with_extended_output=True, with_exceptions=False, env=env
        )
    except git.GitCommandNotFound as exc:
        raise RepositoryError("the git command is not installed", hint="install git") from exc
    return subprocess.CompletedProcess(args, status, out, err)


def _git(repo: pygit2.Repository, *args: str) -> subprocess.CompletedProcess:
    return run_git(repo, *args)


def fetch(repo: pygit2.Repository, remote: str, refspec: str, timeout: float = FETCH_TIMEOUT) -> bool:
    """Best effort `git fetch --no-tags remote refspec` with a deadline; False when it fails or times out."""
    if remote not in [r.name for r in repo.remotes]:
        return False
    try:
        result = run_git(repo, "fetch", "--no-tags", "--quiet", remote, refspec, timeout=timeout)
    except (OSError, RepositoryError):
        return False
    return result.returncode == 0


def _check_ref_name(name: str) -> None:
    if not name.startswith("refs/") or not pygit2.reference_is_valid_name(name):
        raise RepositoryError(f"{name!r} is not a valid full ref name", hint="use a name like refs/heads/<branch>")


def ref_target(repo: pygit2.Repository, name: str) -> pygit2.Oid | None:
    """The id `name` points at (not peeled), or None when the ref does not exist."""
    try:
        return repo.references[name].resolve().target
    except KeyError:
        return None


def set_ref(repo: pygit2.Repository, name: str, target: pygit2.Oid) -> None:
    """Point `name` at `target` whatever it held: only for refs of a scratch repository this tool owns (no one
    else can be moving them); everything else goes through `update_ref_atomically`."""
    _check_ref_name(name)
    repo.references.create(name, target, force=True)


def update_ref_atomically(
    repo: pygit2.Repository,
    name: str,
    new: pygit2.Oid | str,
    expected_old: pygit2.Oid | str | None,
    message: str = "vllm-compose",
) -> None:
    """Point ref `name` at `new`, but only if it still points at `expected_old` (None: only if it does not exist).

    This is a compare-and-swap done by `git update-ref` under git's own ref lock, so a concurrent writer is
    detected instead of overwritten. Raises `RepositoryError` naming both ids when someone moved the ref.
    """
    _check_ref_name(name)
    old = ZERO_OID if expected_old is None else str(expected_old)
    result = _git(repo, "update-ref", "-m", message, name, str(new), old)
    if result.returncode != 0:
        current = ref_target(repo, name)
        raise RepositoryError(
            f"ref {name} was not updated: expected it at {expected_old or '(absent)'}, "
            f"found {current or '(absent)'} ({result.stderr.strip()})",
            hint="another process moved the ref; inspect it with `git log " + name + "` and run again",
        )


def delete_ref(repo: pygit2.Repository, name: str, expected_old: pygit2.Oid | str | None = None) -> bool:
    """Delete ref `name` (only if it still points at `expected_old`, when given). Returns whether it existed."""
    _check_ref_name(name)
    current = ref_target(repo, name)
    if current is None:
        return False
    args = ["update-ref", "-d", name] + ([str(expected_old)] if expected_old is not None else [])
    result = _git(repo, *args)
    if result.returncode != 0:
        raise RepositoryError(
            f"ref {name} was not deleted: {result.stderr.strip()}",
            hint="another process moved the ref; inspect it and run again",
        )
    return True


def read_state_ref(repo: pygit2.Repository, ref: str = STATE_REF) -> dict | None:
    """The run state stored under `ref`, or None when there is none.

    Raises `RepositoryError` when the stored state has another format version or is not valid JSON.
    """
    oid = ref_target(repo, ref)
    if oid is None:
        return None
    obj = repo[oid]
    if obj.type != ObjectType.BLOB:
        raise RepositoryError(f"{ref} does not point at a state blob", hint=f"remove it with `git update-ref -d {ref}`")
    try:
        doc = json.loads(obj.data)
    except ValueError as exc:
        raise RepositoryError(
            f"the state under {ref} is not valid JSON ({exc})",
            hint=f"remove it with `git update-ref -d {ref}`",
        ) from None
    if not isinstance(doc, dict) or doc.get("format") != STATE_FORMAT or not isinstance(doc.get("state"), dict):
        found = doc.get("format") if isinstance(doc, dict) else None
        raise RepositoryError(
            f"the state under {ref} has format {found!r}; this version reads format {STATE_FORMAT}",
            hint="finish or abort the run with the vllm-compose version that started it, "
            f"or drop the state with `git update-ref -d {ref}`",
        )
    return doc["state"]


def write_state_ref(
    repo: pygit2.Repository, ref: str, state: dict, expected_old: pygit2.Oid | str | None | bool = True
) -> pygit2.Oid:
    """Store `state` as versioned JSON in a blob and point `ref` at it; returns the blob id.

    `expected_old=True` (default) replaces whatever is there; pass an id or None for compare-and-swap.
    """
    doc = {"format": STATE_FORMAT, "state": state}
    blob = repo.create_blob(json.dumps(doc, indent=1, sort_keys=True).encode() + b"\n")
    old = ref_target(repo, ref) if expected_old is True else expected_old
    update_ref_atomically(repo, ref, blob, old, message="vllm-compose: save state")
    return blob
