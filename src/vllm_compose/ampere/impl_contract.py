"""The methods the DSA path calls on its attention impl, against the impl of each sparse-MLA backend Ampere takes.

A backend the compose adds (TRITON_MLA_SPARSE) must answer every method the release's attention layers call on
`self.impl`: the release grows that contract as it goes (v0.30.0's `record_logical_topk_ready`: an impl without it
passes every check on a CPU and fails on a GPU at the first forward). This reads, from the tree's code and nothing
else:
- the calls `<...>.impl.NAME(...)` in the modules of the DSA path (`dsa_path.path_modules`), each with whether a
  condition of its own function decides if it runs (an enclosing `if`, a conditional expression, or an earlier
  operand of an `and`/`or`);
- the impl class of each backend that admits sm_8x (its `get_impl_cls` return), and the methods and class attributes
  it defines or inherits, following the bases through the tree's imports.

A method called unconditionally that the impl neither defines nor inherits is `MISSING` (an AttributeError on the
first forward). A conditional one is `CONDITIONAL`, shown with its condition for a person to judge. A base the tree
cannot resolve (outside vLLM, other than `ABC`/`Generic`/`object`) makes the class's answer unknown and is named.
"""

from __future__ import annotations

import ast
import enum
from dataclasses import dataclass, field

from ..trees import FileTree
from .dsa_path import _find_class, dsa_model_classes, mtp_drafts, path_modules, sparse_backends
from .release_source import DsaPathError, dotted_of, release_source

#: the layers that hold the impl, read beyond the DSA path's modules (the path's closure stops at its bound; these
#: call the impl on every forward): the MLA layer (v0.26.0 on) and its wrapper, the DSA model up to v0.28.0
LAYER_MODULES = (
    "vllm/model_executor/layers/attention/mla_attention.py",
    "vllm/model_executor/layers/mla.py",
    "vllm/model_executor/models/deepseek_v2.py",
)
#: bases that add no methods an impl could be asked for
_NEUTRAL_BASES = {"ABC", "Generic", "object", "Protocol"}


class Verdict(enum.Enum):
    OK = "ok"
    MISSING = "MISSING"
    CONDITIONAL = "conditional"


@dataclass(frozen=True)
class ImplCall:
    """One `impl.NAME(...)` call on the DSA path."""

    name: str
    site: str  # "vllm/...py:LINE"
    #: the condition of its own function that decides whether it runs, or None (runs whenever the function does)
    condition: str | None


@dataclass
class ImplAnswer:
    """One method the path calls, against one backend's impl."""

    name: str
    verdict: Verdict
    sites: list[ImplCall]
    defined_in: str | None  # the class of the MRO that defines it


@dataclass
class BackendContract:
    backend: str
    impl: str | None  # "path:Class"
    answers: list[ImplAnswer] = field(default_factory=list)
    #: bases the tree could not resolve (the answer is unknown for methods none of the resolved classes define)
    unresolved_bases: list[str] = field(default_factory=list)

    @property
    def missing(self) -> list[ImplAnswer]:
        return [a for a in self.answers if a.verdict is Verdict.MISSING]

    def lines(self) -> list[str]:
        """Plain text: the count of answered methods, then each method not answered with its call sites."""
        answered = sum(a.verdict is Verdict.OK for a in self.answers)
        out = [f"impl contract {self.backend} ({self.impl}): {answered} of {len(self.answers)} methods the path calls"]
        for a in self.answers:
            if a.verdict is not Verdict.OK:
                where = ", ".join(x.site + (f" if {x.condition}" if x.condition else "") for x in a.sites)
                out.append(f"  {a.verdict.value}: impl.{a.name}() at {where}")
        return out

    def to_json(self) -> dict:
        return {
            "backend": self.backend,
            "impl": self.impl,
            "unresolved_bases": self.unresolved_bases,
            "methods": {
                a.name: {
                    "verdict": a.verdict.value,
                    "defined_in": a.defined_in,
                    "sites": [{"site": x.site, "condition": x.condition} for x in a.sites],
                }
                for a in self.answers
            },
        }


def _condition(parents: dict, call: ast.Call, fn: ast.AST | None) -> str | None:
    node, child = parents.get(call), call
    while node is not None and node is not fn:
        if isinstance(node, (ast.If, ast.While, ast.IfExp)) and child is not node.test:
            return ast.unparse(node.test)[:120]
        if isinstance(node, ast.BoolOp):
            index = next((i for i, v in enumerate(node.values) if v is child), 0)
            if index:
                return ast.unparse(node.values[index - 1])[:120]
        if isinstance(node, ast.ExceptHandler):
            return "in an except block"
        node, child = parents.get(node), node
    return None


def impl_calls(tree: FileTree, modules: list[str]) -> list[ImplCall]:
    """Every `<expr>.impl.NAME(...)` call in `modules`."""
    src = release_source(tree)
    calls = []
    for path in modules:
        got = src.module(path)
        if got is None:
            continue
        mod, _text = got
        for node in ast.walk(mod):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
                continue
            owner = node.func.value
            if not (isinstance(owner, ast.Attribute) and owner.attr == "impl"):
                continue
            fn = node
            while fn is not None and not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                fn = src.parents.get(fn)
            calls.append(ImplCall(node.func.attr, f"{path}:{node.lineno}", _condition(src.parents, node, fn)))
    return calls


def _base_names(cls: ast.ClassDef) -> list[str]:
    out = []
    for base in cls.bases:
        if isinstance(base, ast.Subscript):
            base = base.value
        if isinstance(base, ast.Name):
            out.append(base.id)
        elif isinstance(base, ast.Attribute):
            out.append(base.attr)
    return out


def class_members(tree: FileTree, path: str, cls: ast.ClassDef) -> tuple[dict[str, str], list[str]]:
    """name -> defining class for the methods and class attributes of `cls` and its bases; the bases not found."""
    src = release_source(tree)
    members: dict[str, str] = {}
    unresolved: list[str] = []
    seen: set[tuple[str, str]] = set()

    def visit(path: str, cls: ast.ClassDef) -> None:
        if (path, cls.name) in seen:
            return
        seen.add((path, cls.name))
        for stmt in cls.body:
            names = []
            if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
                names = [stmt.name]
            elif isinstance(stmt, ast.Assign):
                names = [t.id for t in stmt.targets if isinstance(t, ast.Name)]
            elif isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name) and stmt.value is not None:
                names = [stmt.target.id]
            for name in names:
                members.setdefault(name, f"{path}:{cls.name}")
        for base in _base_names(cls):
            if base in _NEUTRAL_BASES:
                continue
            try:
                base_path, base_cls, _steps = _find_class(src, dotted_of(path), base)
            except DsaPathError:
                unresolved.append(f"{base} (base of {cls.name}, {path})")
                continue
            visit(base_path, base_cls)

    visit(path, cls)
    return members, unresolved


def _impl_class(tree: FileTree, path: str, backend_cls: str) -> tuple[str, ast.ClassDef] | None:
    src = release_source(tree)
    bpath, bcls, _ = _find_class(src, dotted_of(path), backend_cls)
    for stmt in bcls.body:
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)) and stmt.name == "get_impl_cls":
            for node in ast.walk(stmt):
                if isinstance(node, ast.Return) and isinstance(node.value, ast.Name):
                    ipath, icls, _ = _find_class(src, dotted_of(bpath), node.value.id)
                    return ipath, icls
    return None


def impl_contracts(tree: FileTree) -> list[BackendContract]:
    """For each sparse-MLA backend the tree's CUDA platform lists for 8.x and that admits sm_8x: the answers of its
    impl to every method the DSA path calls on an impl. Raises `DsaPathError` where the path cannot be read."""
    # the path's modules and backends only: the kernel blockers `dsa_path.tree_path` also scans are not needed here
    backends = sparse_backends(tree)
    models = dsa_model_classes(tree) + [d.serving for d in mtp_drafts(tree)]
    calls = impl_calls(tree, list(dict.fromkeys([*path_modules(tree, models, backends), *LAYER_MODULES])))
    by_name: dict[str, list[ImplCall]] = {}
    for call in calls:
        by_name.setdefault(call.name, []).append(call)
    out = []
    for backend in backends:
        if not backend.admits_ampere or backend.path is None or backend.cls is None:
            continue
        found = _impl_class(tree, backend.path, backend.cls)
        if found is None:
            out.append(BackendContract(backend.name, None))
            continue
        ipath, icls = found
        members, unresolved = class_members(tree, ipath, icls)
        contract = BackendContract(backend.name, f"{ipath}:{icls.name}", unresolved_bases=unresolved)
        for name, sites in sorted(by_name.items()):
            if name in members:
                verdict = Verdict.OK
            elif all(s.condition is not None for s in sites):
                verdict = Verdict.CONDITIONAL
            else:
                verdict = Verdict.MISSING
            contract.answers.append(ImplAnswer(name, verdict, sites, members.get(name)))
        out.append(contract)
    return out
