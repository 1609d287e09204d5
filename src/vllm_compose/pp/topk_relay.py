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

The keys come in two forms, and a tree may hold either (or, by mistake, both):

- named by the model itself (the series' relay entries, up to v0.33.0): `forward` writes `tensors["topk_indices"]`
  and reads `intermediate_tensors["topk_indices"]`, and a function of the model's file that `__init__` calls puts
  the key into the receive buffers;
- a map of keys to the model's own buffers (vLLM's own relay from v0.34.0, `pp_topk_buffers` and `copy_pp_buffers`
  of vllm/model_executor/models/utils.py): `__init__` binds `self.pp_buffers = pp_topk_buffers(config,
  self.topk_indices_buffer, ...)`, a function that maps string keys to the buffer it is given; the map is declared
  when it is passed to the factory assigned to `make_empty_intermediate_tensors`, received when `forward` passes it
  with `intermediate_tensors` to a function that copies (`.copy_`) the received tensors into it, and sent when
  `forward` expands it into a dict display (`**{k: v[:n] for k, v in self.pp_buffers.items()}`). The builder and
  the copier are read from the file the model imports them from. vLLM fills the map at run time only where a later
  stage starts on a layer that reuses the top-k (an empty map sends nothing): relayed where it is needed.

A key that is sent, received and declared is a relay; one relayed in both forms is relayed twice (the same rows
copied twice into the receiver's buffer: a series entry applied on a release that relays by itself). What the relay
carries and that it is right is shown on the release's own code by tests/series/test_indexcache_pp_relay.py; this is
the per-release property the status table and `ampere-path` print.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

from ..ampere.dsa_path import dsa_model_classes
from ..ampere.release_source import DsaPathError, absolute_module, module_path, release_source
from ..trees import FileTree
from .plan import INTERMEDIATE_KEYS

#: where the V2 runner shares the target's top-k buffer with the MTP drafter
DRAFTER_SETUP = "vllm/v1/worker/gpu/spec_decode/eagle/utils.py"
HIDDEN_KEYS = frozenset(INTERMEDIATE_KEYS)


@dataclass(frozen=True)
class BufferMap:
    """A relay through a map of keys to the model's buffers (vLLM's own form from v0.34.0; the module docstring)."""

    #: the model attribute that holds the map (`pp_buffers`)
    attr: str
    #: the function that builds it from the top-k buffer (`pp_topk_buffers`) and the file that defines it
    builder: str
    builder_path: str
    #: the keys the builder maps a buffer to
    keys: tuple[str, ...]
    #: the function `forward` copies the received tensors into the map with (`copy_pp_buffers`), or None: none
    copier: str | None
    #: the map is passed to the factory of the receive buffers, and `forward` expands it into what it sends
    declared: bool
    sent: bool

    @property
    def relays(self) -> bool:
        """Sent, copied in and declared: its keys cross the boundary."""
        return self.sent and self.copier is not None and self.declared

    def __str__(self) -> str:
        return f"{self.builder} and {self.copier}" if self.copier else self.builder

    def to_json(self) -> dict:
        return {
            "attr": self.attr,
            "builder": self.builder,
            "builder_path": self.builder_path,
            "keys": list(self.keys),
            "copier": self.copier,
            "declared": self.declared,
            "sent": self.sent,
        }


@dataclass(frozen=True)
class TopkCrossing:
    """How the top-k buffer of one tree's DSA model crosses a pipeline-stage boundary."""

    #: the file and class holding the buffer, or None when no serving file allocates one
    path: str | None
    cls: str | None
    #: keys beyond the hidden states that `forward` sends, reads from intermediate_tensors, and declares (both forms)
    sent: tuple[str, ...] = ()
    received: tuple[str, ...] = ()
    declared: tuple[str, ...] = ()
    #: the map of keys to buffers the model relays through, or None: the model names its keys itself, or relays none
    buffer_map: BufferMap | None = None
    #: keys relayed in both forms (named by the model and through the map)
    twice: tuple[str, ...] = ()
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
        if self.twice:
            return f"**relayed twice** ({', '.join(self.twice)}: by the model's own keys and by {self.buffer_map})"
        if self.relayed:
            by_map = f", by {self.buffer_map}" if self.buffer_map is not None and self.buffer_map.relays else ""
            return f"relayed ({', '.join(self.relay_keys)}{by_map})"
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
            "buffer_map": self.buffer_map.to_json() if self.buffer_map is not None else None,
            "relayed_twice": list(self.twice),
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


def _is_self_attr(node: ast.AST, attr: str | None = None) -> bool:
    """`node` is `self.<attr>` (any attribute of `self` when `attr` is None)."""
    return (
        isinstance(node, ast.Attribute)
        and isinstance(node.value, ast.Name)
        and node.value.id == "self"
        and (attr is None or node.attr == attr)
    )


def _mentions(node: ast.AST, attr: str) -> bool:
    return any(_is_self_attr(n, attr) for n in ast.walk(node))


def _call_args(call: ast.Call) -> list[ast.expr]:
    return [*call.args, *(k.value for k in call.keywords)]


def _module_function(src, path: str, module: ast.Module, name: str) -> tuple[str, ast.FunctionDef] | None:
    """(file, definition) of the module-level function `name` as file `path` sees it: its own, or the one it imports
    by `from ... import name` (through a re-export or two); None when neither is in the tree."""
    for _ in range(3):
        own = next((n for n in module.body if isinstance(n, ast.FunctionDef) and n.name == name), None)
        if own is not None:
            return path, own
        imported = next(
            (
                (absolute_module(path, n), a.name)
                for n in ast.walk(module)
                if isinstance(n, ast.ImportFrom)
                for a in n.names
                if (a.asname or a.name) == name
            ),
            None,
        )
        target = module_path(src, imported[0]) if imported is not None else None
        got = src.module(target) if target is not None else None
        if imported is None or target is None or got is None:
            return None
        path, module, name = target, got[0], imported[1]
    return None


def _copies_into_place(src, path: str, module: ast.Module, name: str) -> bool:
    """The function `name` (as `path` sees it) calls `.copy_`: it writes what it is given into the buffers."""
    found = _module_function(src, path, module, name)
    return found is not None and any(
        isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "copy_"
        for n in ast.walk(found[1])
    )


def _is_topk_buffer(node: ast.AST) -> bool:
    return (isinstance(node, ast.Name) and node.id == "topk_indices_buffer") or _is_self_attr(
        node, "topk_indices_buffer"
    )


def _buffer_map(src, path: str, module: ast.Module, init: ast.FunctionDef, forward: ast.FunctionDef):
    """The map of keys to buffers the model relays through (see the module docstring), or None: it has none."""
    for node in ast.walk(init):
        if not (
            isinstance(node, ast.Assign)
            and len(node.targets) == 1
            and isinstance(target := node.targets[0], ast.Attribute)
            and _is_self_attr(target)
            and isinstance(node.value, ast.Call)
            and isinstance(node.value.func, ast.Name)
            and any(_is_topk_buffer(a) for a in _call_args(node.value))
        ):
            continue
        found = _module_function(src, path, module, node.value.func.id)
        if found is None:
            continue
        builder_path, builder = found
        keys = tuple(sorted(_string_keys_stored(builder) - HIDDEN_KEYS))
        if not keys:
            continue
        attr = target.attr
        declared = any(
            isinstance(n, ast.Assign)
            and any(_is_self_attr(t, "make_empty_intermediate_tensors") for t in n.targets)
            and _mentions(n.value, attr)
            for n in ast.walk(init)
        )
        sent = any(
            isinstance(n, ast.Dict)
            and any(k is None and _mentions(v, attr) for k, v in zip(n.keys, n.values, strict=True))
            for n in ast.walk(forward)
        )
        copier = next(
            (
                n.func.id
                for n in ast.walk(forward)
                if isinstance(n, ast.Call)
                and isinstance(n.func, ast.Name)
                and any(isinstance(a, ast.Name) and a.id == "intermediate_tensors" for a in n.args)
                and any(_is_self_attr(a, attr) for a in n.args)
                and _copies_into_place(src, path, module, n.func.id)
            ),
            None,
        )
        return BufferMap(attr, node.value.func.id, builder_path, keys, copier, declared, sent)
    return None


def _methods(cls: ast.ClassDef) -> dict[str, ast.FunctionDef]:
    return {n.name: n for n in cls.body if isinstance(n, ast.FunctionDef)}


def serving_model_files(tree: FileTree) -> list[str]:
    """The files the registry's DSA architectures are served from on CUDA (deepseek_v2.py up to v0.28.0, the
    deepseek_v32 package from v0.29.0), GLM-5.x's first."""
    models = sorted(
        (m for m in dsa_model_classes(tree) if m.role == "model"), key=lambda m: m.arch != "GlmMoeDsaForCausalLM"
    )
    return list(dict.fromkeys(m.path for m in models))


def topk_crossing(tree: FileTree) -> TopkCrossing:
    """The top-k buffer's stage crossing in `tree` (see the module docstring): of the model class in the file the
    registry serves GLM-5.x from on CUDA."""
    setup = tree.read(DRAFTER_SETUP)
    drafter_shares = setup is not None and b"topk_indices_buffer" in setup
    try:
        paths = serving_model_files(tree)
    except DsaPathError as exc:
        return TopkCrossing(None, None, drafter_shares=drafter_shares, note=exc.message)
    src = release_source(tree)
    for path in paths:
        got = src.module(path)
        if got is None:
            continue
        module = got[0]
        for cls in (n for n in module.body if isinstance(n, ast.ClassDef)):
            methods = _methods(cls)
            init, forward = methods.get("__init__"), methods.get("forward")
            if init is None or forward is None or not (_allocates_topk_buffer(init) and _sets_factory(init)):
                continue
            # the keys the model names itself
            declared: set[str] = set()
            for fn in called_module_functions(module, init):
                declared |= _string_keys_stored(fn)
            sent = _string_keys_stored(forward) - HIDDEN_KEYS
            received = _keys_read_from(forward, "intermediate_tensors") - HIDDEN_KEYS
            declared -= HIDDEN_KEYS
            named = sent & received & declared
            # the keys of a map of buffers
            bmap = _buffer_map(src, path, module, init, forward)
            mapped = set(bmap.keys) if bmap is not None else set()
            if bmap is not None:
                sent |= mapped if bmap.sent else set()
                received |= mapped if bmap.copier else set()
                declared |= mapped if bmap.declared else set()
            by_map = mapped if bmap is not None and bmap.relays else set()
            return TopkCrossing(
                path=path,
                cls=cls.name,
                sent=tuple(sorted(sent)),
                received=tuple(sorted(received)),
                declared=tuple(sorted(declared)),
                drafter_shares=drafter_shares,
                buffer_map=bmap,
                twice=tuple(sorted(named & by_map)),
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
