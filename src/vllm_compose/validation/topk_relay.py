"""The IndexCache top-k across pipeline stages, read from a tree: does the DSA model relay the rows a shared layer
reads to the next stage?

GLM-5.x builds an indexer on some layers only (`index_topk_freq`, `index_skip_topk_offset`); the others attend with
the top-k rows the last full layer left in the model's buffer. Each pipeline rank allocates that buffer itself and
`IntermediateTensors` carries what the model's `forward` puts there, so a stage whose first layer shares the top-k
reads garbage and stale rows unless the previous stage sends them (series entries `fix-deepseek-v*-indexcache-pp-topk-
relay*`). This module reads the model class that holds the buffer (the one whose `__init__` allocates a tensor sized
as `topk_indices_buffer` and sets `make_empty_intermediate_tensors`) and answers, by syntax alone, from the tree's text:

- which keys its `forward` sends beyond the hidden states, and which it reads from `intermediate_tensors`;
- which keys its receive buffers hold (`make_empty_intermediate_tensors`, including functions `__init__` calls);
- whether the V2 runner's MTP set-up points the drafter's buffer at the target's (the drafter then writes the last
  stage's buffer between two target steps).

A key that is sent, received and declared is a relay. What the relay carries and that it is right is shown on the
release's own code by tests/series/test_indexcache_pp_relay.py; this is the per-release property the status table and
`ampere-path` print.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

from ..trees import FileTree

#: where the V2 runner shares the target's top-k buffer with the MTP drafter
DRAFTER_SETUP = "vllm/v1/worker/gpu/spec_decode/eagle/utils.py"
HIDDEN_KEYS = frozenset({"hidden_states", "residual"})


@dataclass(frozen=True)
class TopkCrossing:
    """How the top-k buffer of one tree's DSA model crosses a pipeline-stage boundary."""

    #: the file and class holding the buffer, or None when no serving file allocates one
    path: str | None
    cls: str | None
    #: keys beyond the hidden states that `forward` sends, reads from intermediate_tensors, and declares
    sent: tuple[str, ...] = ()
    received: tuple[str, ...] = ()
    declared: tuple[str, ...] = ()
    #: the V2 runner's MTP set-up points the drafter's top-k buffer at the target's
    drafter_shares: bool = False
    #: why no model class was read (the registry names no DSA architecture the tree serves on CUDA)
    note: str | None = None

    @property
    def relay_keys(self) -> tuple[str, ...]:
        return tuple(k for k in self.sent if k in self.received and k in self.declared)

    @property
    def relayed(self) -> bool:
        return bool(self.relay_keys)

    def summary(self) -> str:
        if self.path is None:
            return f"no DSA top-k buffer ({self.note})" if self.note else "no DSA top-k buffer"
        if self.relayed:
            return f"relayed ({', '.join(self.relay_keys)})"
        partial = [f"{name} {', '.join(keys)}" for name, keys in self._parts() if keys]
        return "**not relayed**" + (f" (only {'; '.join(partial)})" if partial else "")

    def _parts(self) -> list[tuple[str, tuple[str, ...]]]:
        return [("sent", self.sent), ("received", self.received), ("declared", self.declared)]

    def to_json(self) -> dict:
        return {
            "path": self.path,
            "class": self.cls,
            "sent": list(self.sent),
            "received": list(self.received),
            "declared": list(self.declared),
            "relayed": self.relayed,
            "drafter_shares_target_buffer": self.drafter_shares,
            "note": self.note,
        }


def _string_keys_stored(node: ast.AST) -> set[str]:
    """String keys written under `node`: dict-display keys and `x["key"] = ...` targets."""
    keys: set[str] = set()
    for n in ast.walk(node):
        if isinstance(n, ast.Dict):
            keys |= {k.value for k in n.keys if isinstance(k, ast.Constant) and isinstance(k.value, str)}
        elif isinstance(n, ast.Subscript) and isinstance(n.ctx, ast.Store):
            if isinstance(n.slice, ast.Constant) and isinstance(n.slice.value, str):
                keys.add(n.slice.value)
    return keys


def _keys_read_from(node: ast.AST, name: str) -> set[str]:
    """String keys read as `name["key"]` under `node`."""
    return {
        n.slice.value
        for n in ast.walk(node)
        if isinstance(n, ast.Subscript)
        and isinstance(n.ctx, ast.Load)
        and isinstance(n.value, ast.Name)
        and n.value.id == name
        and isinstance(n.slice, ast.Constant)
        and isinstance(n.slice.value, str)
    }


def _allocates_topk_buffer(init: ast.FunctionDef) -> bool:
    """`__init__` assigns a new tensor (torch.empty / zeros / full) to a `topk_indices_buffer` name or attribute."""
    for n in ast.walk(init):
        if not (isinstance(n, ast.Assign) and isinstance(n.value, ast.Call)):
            continue
        func = n.value.func
        if not (isinstance(func, ast.Attribute) and func.attr in ("empty", "zeros", "full")):
            continue
        names = [
            t.id if isinstance(t, ast.Name) else t.attr for t in n.targets if isinstance(t, ast.Name | ast.Attribute)
        ]
        if "topk_indices_buffer" in names:
            return True
    return False


def _sets_factory(init: ast.FunctionDef) -> bool:
    return any(
        isinstance(t, ast.Attribute) and t.attr == "make_empty_intermediate_tensors"
        for n in ast.walk(init)
        if isinstance(n, ast.Assign)
        for t in n.targets
    )


def called_module_functions(module: ast.Module, node: ast.AST) -> list[ast.FunctionDef]:
    """Module-level functions `node` names, and those they name in turn."""
    defs = {n.name: n for n in module.body if isinstance(n, ast.FunctionDef)}
    found: dict[str, ast.FunctionDef] = {}
    todo = [node]
    while todo:
        for name in {n.id for n in ast.walk(todo.pop()) if isinstance(n, ast.Name)}:
            if name in defs and name not in found:
                found[name] = defs[name]
                todo.append(defs[name])
    return list(found.values())


def _methods(cls: ast.ClassDef) -> dict[str, ast.FunctionDef]:
    return {n.name: n for n in cls.body if isinstance(n, ast.FunctionDef)}


def serving_model_files(tree: FileTree) -> list[str]:
    """The files the registry's DSA architectures are served from on CUDA (deepseek_v2.py up to v0.28.0, the
    deepseek_v32 package from v0.29.0), GLM-5.x's first."""
    from .dsa_path import dsa_model_classes

    models = sorted(
        (m for m in dsa_model_classes(tree) if m.role == "model"), key=lambda m: m.arch != "GlmMoeDsaForCausalLM"
    )
    return list(dict.fromkeys(m.path for m in models))


def topk_crossing(tree: FileTree) -> TopkCrossing:
    """The top-k buffer's stage crossing in `tree` (see the module docstring): of the model class in the file the
    registry serves GLM-5.x from on CUDA."""
    from .dsa_path import DsaPathError

    setup = tree.read(DRAFTER_SETUP)
    drafter_shares = setup is not None and b"topk_indices_buffer" in setup
    try:
        paths = serving_model_files(tree)
    except DsaPathError as exc:
        return TopkCrossing(None, None, drafter_shares=drafter_shares, note=exc.message)
    for path in paths:
        data = tree.read(path)
        if data is None:
            continue
        module = ast.parse(data.decode(), filename=path)
        for cls in (n for n in module.body if isinstance(n, ast.ClassDef)):
            methods = _methods(cls)
            init, forward = methods.get("__init__"), methods.get("forward")
            if init is None or forward is None or not (_allocates_topk_buffer(init) and _sets_factory(init)):
                continue
            declared: set[str] = set()
            for fn in called_module_functions(module, init):
                declared |= _string_keys_stored(fn)
            return TopkCrossing(
                path=path,
                cls=cls.name,
                sent=tuple(sorted(_string_keys_stored(forward) - HIDDEN_KEYS)),
                received=tuple(sorted(_keys_read_from(forward, "intermediate_tensors") - HIDDEN_KEYS)),
                declared=tuple(sorted(declared - HIDDEN_KEYS)),
                drafter_shares=drafter_shares,
            )
    return TopkCrossing(None, None, drafter_shares=drafter_shares, note="no serving file allocates one")


def branch_crossings(
    repo_dir, series_dir, tag: str, composed: bool = True
) -> tuple[TopkCrossing | None, TopkCrossing | None]:
    """(compose, stock) crossings of release `tag` in `repo_dir`: the compose's None when it wrote no branch, the
    stock's None when the repository lacks the tag."""
    from .. import gitstore
    from ..composed_branch import open_branch
    from ..trees import GitTree

    if composed:
        branch = open_branch(repo_dir, series_dir, tag)
        return topk_crossing(branch.composed_tree()), topk_crossing(branch.release_tree())
    repo = gitstore.open_or_init_repo(repo_dir, create=False)
    base = gitstore.peel_commit(repo, f"refs/tags/{tag}")
    return None, (topk_crossing(GitTree(repo, base.tree, tag)) if base is not None else None)
