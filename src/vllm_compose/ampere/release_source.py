"""A release's Python source as the static path reads it: each module of a tree parsed once, with parent links to
climb from a node to the conditions over it, and the syntax helpers every step of the DSA path shares.

`release_source(tree)` is the release loader of the static path (`dsa_path`, `dsa_blockers`, `partial_eval`,
`impl_contract`): one `ReleaseSource` per tree, however many steps read it. Nothing of the release is imported or
executed (the gate's loader, which executes it, is `kernel_gate.ReleaseLoader`).
"""

from __future__ import annotations

import ast
import re
import weakref

from ..errors import ComposeError
from ..trees import FileTree
from .facts import PLATFORM_IS


class DsaPathError(ComposeError):
    """A release whose code lacks what the DSA path needs (the registry entries, a parsable module)."""


class ReleaseSource:
    """The parsed modules of one tree, each parsed once; parent links for climbing from a node to its guards."""

    def __init__(self, tree: FileTree) -> None:
        self.tree = tree
        self._mods: dict[str, tuple[ast.Module, str] | None] = {}
        self.parents: dict[ast.AST, ast.AST] = {}
        #: id of a parsed module -> its path (to find the file a node belongs to)
        self.path_of: dict[int, str] = {}

    def module(self, path: str) -> tuple[ast.Module, str] | None:
        """(syntax tree, text) of `path`, or None when absent; `DsaPathError` when it does not parse."""
        if path not in self._mods:
            data = self.tree.read(path)
            if data is None:
                self._mods[path] = None
            else:
                text = data.decode("utf-8", "replace")
                try:
                    mod = ast.parse(text, filename=path)
                except SyntaxError as exc:
                    raise DsaPathError(f"cannot parse: {exc.msg} (line {exc.lineno})", file=path) from None
                for node in ast.walk(mod):
                    for child in ast.iter_child_nodes(node):
                        self.parents[child] = node
                self._mods[path] = (mod, text)
                self.path_of[id(mod)] = path
        return self._mods[path]

    def file_of(self, node: ast.AST) -> tuple[str, str]:
        """(path, text) of the module `node` is in."""
        while not isinstance(node, ast.Module):
            node = self.parents[node]
        path = self.path_of[id(node)]
        return path, self._mods[path][1]

    def exists(self, path: str) -> bool:
        return self.module(path) is not None


_SOURCES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def release_source(tree) -> ReleaseSource:
    """The one `ReleaseSource` of `tree` (each module parsed once however many steps read it)."""
    if isinstance(tree, ReleaseSource):
        return tree
    try:
        got = _SOURCES.get(tree)
        if got is None:
            got = _SOURCES[tree] = ReleaseSource(tree)
        return got
    except TypeError:  # not weak-referenceable: parse afresh
        return ReleaseSource(tree)


def node_text(src: str, node: ast.AST, limit: int = 160) -> str:
    """A node's source, on one line, shortened to `limit` characters."""
    seg = ast.get_source_segment(src, node) or ast.unparse(node)
    seg = re.sub(r"\s+", " ", seg).replace("( ", "(").replace(" )", ")").strip()
    return seg if len(seg) <= limit else seg[: limit - 1] + "…"


def module_path(tree_or_src, dotted: str) -> str | None:
    """The file of dotted module `dotted` in the tree (`a/b.py` or `a/b/__init__.py`), or None."""
    src = release_source(tree_or_src)
    base = dotted.replace(".", "/")
    for cand in (base + ".py", base + "/__init__.py"):
        if src.exists(cand):
            return cand
    return None


def dotted_of(path: str) -> str:
    p = path[: -len(".py")] if path.endswith(".py") else path
    p = p[: -len("/__init__")] if p.endswith("/__init__") else p
    return p.replace("/", ".")


def absolute_module(path: str, node: ast.ImportFrom) -> str:
    """The absolute module of a `from ... import` in file `path`."""
    if not node.level:
        return node.module or ""
    package = dotted_of(path).split(".")
    if not path.endswith("__init__.py"):
        package = package[:-1]
    package = package[: len(package) - (node.level - 1)]
    return ".".join(package + ([node.module] if node.module else []))


# ------------------------------------------------------------------------------------------ the CUDA branch


def platform_value(test: ast.expr) -> bool | None:
    """A platform test evaluated for CUDA (`current_platform.is_cuda()` true, the others false); None: not one."""
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        v = platform_value(test.operand)
        return None if v is None else not v
    if isinstance(test, ast.BoolOp):
        vals = [platform_value(v) for v in test.values]
        if isinstance(test.op, ast.And):
            return False if False in vals else (None if None in vals else True)
        return True if True in vals else (None if None in vals else False)
    if isinstance(test, ast.Call) and isinstance(test.func, ast.Attribute) and not test.args:
        return PLATFORM_IS.get(test.func.attr)
    return None


def is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def cuda_statements(body: list[ast.stmt]):
    """The statements of `body` a CUDA process runs at import: platform `if`s resolved, `try` bodies entered."""
    for stmt in body:
        if isinstance(stmt, ast.If):
            if is_type_checking(stmt.test):
                continue
            value = platform_value(stmt.test)
            if value is None:
                yield from cuda_statements(stmt.body)
                yield from cuda_statements(stmt.orelse)
            else:
                yield from cuda_statements(stmt.body if value else stmt.orelse)
        elif isinstance(stmt, ast.Try):
            yield from cuda_statements(stmt.body)
        else:
            yield stmt


# --------------------------------------------------------------------------------------- where a node stands


def qualname(src: ReleaseSource, node: ast.AST) -> str:
    names = []
    cur = src.parents.get(node)
    while cur is not None:
        if isinstance(cur, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.append(cur.name)
        cur = src.parents.get(cur)
    return ".".join(reversed(names)) or "<module>"


def enclosing(src: ReleaseSource, node: ast.AST, kinds) -> ast.AST | None:
    cur = src.parents.get(node)
    while cur is not None and not isinstance(cur, kinds):
        cur = src.parents.get(cur)
    return cur


def conditions(src: ReleaseSource, node: ast.AST, stop: ast.AST | None = None, exits: bool = True):
    """The conditions that hold where `node` runs, innermost first, as (test, negated): enclosing `if`s and ternaries,
    and (with `exits`) earlier `if ...: return/raise/continue` statements of the same blocks (their test negated).

    `exits=False` is for what Triton compiles in a `@triton.jit` body: it prunes only the branch of a constexpr `if`
    that is not taken, and still traces (so compiles) the statements after a constexpr early return — with the
    flag off, `if not QUANTIZE_MQA: return` does not keep the fp8e4nv stores after it from failing on sm_80
    ("type fp8e4nv not supported in this architecture"; Triton 3.6, nested in `if pid == 2:` as well)."""
    child = node
    cur = src.parents.get(node)
    while cur is not None and cur is not stop:
        for fieldname in ("body", "orelse"):
            block = getattr(cur, fieldname, None)
            if isinstance(block, list) and child in block:
                for earlier in reversed(block[: block.index(child)] if exits else []):
                    if isinstance(earlier, ast.If) and not earlier.orelse and earlier.body:
                        if isinstance(earlier.body[-1], ast.Return | ast.Raise | ast.Continue | ast.Break):
                            yield earlier.test, True
                if isinstance(cur, ast.If) and fieldname == "body":
                    yield cur.test, False
                elif isinstance(cur, ast.If):
                    yield cur.test, True
        if isinstance(cur, ast.IfExp) and child is not cur.test:
            yield cur.test, child is cur.orelse
        if isinstance(cur, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) and stop is None:
            break
        child, cur = cur, src.parents.get(cur)


def cond_text(text: str, test: ast.expr, negated: bool, limit: int = 80) -> str:
    """A condition as it holds: `not X` negated reads `X`."""
    if negated and isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        return node_text(text, test.operand, limit)
    return ("not " if negated else "") + node_text(text, test, limit)


def imports_of(src: ReleaseSource, path: str) -> dict[str, tuple[str, str]]:
    """Every name file `path` imports anywhere: local name -> (absolute module, original name)."""
    mod, _ = src.module(path)
    out: dict[str, tuple[str, str]] = {}
    for node in ast.walk(mod):
        if isinstance(node, ast.ImportFrom):
            base = absolute_module(path, node)
            for a in node.names:
                out[a.asname or a.name] = (base, a.name)
        elif isinstance(node, ast.Import):
            for a in node.names:
                out[a.asname or a.name.split(".")[0]] = (a.name if a.asname else a.name.split(".")[0], "")
    return out
