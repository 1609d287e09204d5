"""The package's rooms and the imports allowed between them: the README's module table, held by a test.

Every module under `src/vllm_compose/` belongs to one room (`ROOMS`: a module, a few modules, or a subpackage), and
a room may import only itself and the rooms its row names. The modules are read with `ast`, never imported, and
every import of the package counts: at module level, inside a function (the imports a reader does not see at the
top of a file), and under `if TYPE_CHECKING:` (a type is a dependency too; `TYPE_ONLY` lists the few that are
allowed only there). Besides the table:

* no import cycle among the package's modules, through function-level and `TYPE_CHECKING` imports included;
* independence (`INDEPENDENT`): a room that must not load another, directly or through any module in between, at
  run time. The audit judges where the placement engine put every hunk, so it can catch the engine's own mistakes
  only if it shares no code with it; the Ampere gate and the GPU proof are two products with no import between them.
  Importing a module also runs the `__init__` of each package above it, so those count as imports here;
* every module path the package names in a string (a subprocess's `-m` or `-c` entry, a generator's name) exists.

A failure names the importing module and line, the imported module and the rule it breaks. When a new module is
added, give it a room here and in the README's table; when a room needs a new neighbour, change its row in both,
with the reason.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src"
PACKAGE = "vllm_compose"


@dataclass(frozen=True)
class Room:
    """A row of the table: the modules (top-level names under the package) in the room, and the rooms it may
    import."""

    modules: tuple[str, ...]
    imports: tuple[str, ...]


#: what every stage of the pipeline above the sources may read: the error base, git plumbing, patches, the typed
#: results, the series and its sources
FOUNDATION = ("errors", "plumbing", "patches", "results", "series", "sources")

#: the README's module table, bottom up: each room's modules and the rooms it may import
ROOMS: dict[str, Room] = {
    "errors": Room(("errors",), ()),
    "plumbing": Room(("gitstore", "trailers", "trees", "atomicfile", "checkout", "progress"), ("errors",)),
    "patches": Room(("patchfile",), ("errors",)),
    # the words every stage judges in (a leaf) and the typed results of a run
    "results": Room(("verdicts", "results"), ("errors",)),
    "series": Room(("series", "series_text"), ("errors", "patches")),
    "sources": Room(("cache", "index", "releases", "sources"), ("errors", "plumbing", "patches", "series")),
    "placement": Room(("scope", "placement"), ("errors", "patches", "results")),
    # independent of placement: see INDEPENDENT
    "audit": Room(("audit",), ("errors", "plumbing", "patches", "results")),
    "checks": Room(("checks",), ("errors", "plumbing", "patches", "results", "sources")),
    "conflicts": Room(("conflict",), ("errors", "plumbing", "patches", "results", "series", "placement")),
    "review": Room(("review",), ("errors", "plumbing", "patches", "series", "placement")),
    "replay": Room(("replay",), (*FOUNDATION, "placement", "conflicts", "review")),
    # the compose branch read back, and its last commit (the build over the precompiled stock wheel)
    "branch": Room(("composed_branch", "precompiled", "precompiled_hook"), ("errors", "plumbing", "results", "series")),
    "orchestrator": Room(
        ("compose",),
        (
            *FOUNDATION,
            "audit",
            "checks",
            "conflicts",
            "replay",
            "review",
            "branch",
        ),
    ),
    # the Ampere gate and its static DSA-path analysis; reads a compose branch, never the compose itself
    "ampere": Room(("ampere",), ("errors", "plumbing", "series", "sources", "branch")),
    # pipeline parallelism: the plan, and the top-k relay read with the DSA path's reader
    "pp": Room(("pp",), ("errors", "plumbing", "branch", "ampere")),
    # the GPU proof: the error base and the IndexCache rule of pp.plan, nothing of the pipeline nor of the gate
    "proof": Room(("proof",), ("errors", "pp")),
    "surveys": Room(
        ("apply", "status", "gpu_evidence", "series_diff", "pr_bump", "semantic", "validate"),
        (
            *FOUNDATION,
            "placement",
            "conflicts",
            "branch",
            "orchestrator",
            "ampere",
            "pp",
            "proof",
        ),
    ),
    "report": Room(
        ("report",),
        ("errors", "plumbing", "results", "placement", "audit", "checks", "review", "surveys"),
    ),
    "artifacts": Room(
        ("artifacts",),
        (
            *FOUNDATION,
            "audit",
            "checks",
            "review",
            "branch",
            "orchestrator",
            "ampere",
            "report",
        ),
    ),
    "cli": Room(("cli", "commands"), tuple()),  # filled below: the command layer may import every room
    # `vllm_compose/__init__.py` and the version file an install writes beside it
    "package": Room(("", "_version"), ()),
}
ROOMS["cli"] = Room(ROOMS["cli"].modules, tuple(r for r in ROOMS if r not in ("cli", "package")))

#: imports allowed only under `if TYPE_CHECKING:` (annotations, never executed): a run's results hold the report of
#: every stage, typed by the stage that writes it
TYPE_ONLY: dict[str, tuple[str, ...]] = {"results": ("audit", "checks", "review")}

#: (room, room it must not load at run time, directly or through any other module, and why)
INDEPENDENT: list[tuple[str, str, str]] = [
    (
        "audit",
        "placement",
        "the audit judges the engine's placements: it can catch the engine's mistakes only if it "
        "shares no code with it",
    ),
    ("ampere", "proof", "the Ampere gate and the GPU proof are two products"),
    ("proof", "ampere", "the Ampere gate and the GPU proof are two products"),
    ("ampere", "orchestrator", "the gate reads a compose branch; it never composes"),
    ("proof", "orchestrator", "the GPU proof runs on a machine where the package is a copied src/, not installed"),
]


@dataclass(frozen=True)
class Import:
    """One import of a package module by another, where it was written."""

    importer: str
    imported: str
    line: int
    #: "module" (module level), "function" (inside a def) or "type-checking" (under `if TYPE_CHECKING:`)
    kind: str


def modules(src: Path = SRC) -> dict[str, Path]:
    """Every module of the package under `src`: dotted name -> file (a package by its `__init__.py`)."""
    out = {}
    for path in sorted((src / PACKAGE).rglob("*.py")):
        parts = path.relative_to(src).with_suffix("").parts
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def imports_of(name: str, path: Path, known: dict[str, Path]) -> list[Import]:
    """The package modules `name` (the module in `path`) imports, each with its line and kind. `from X import y`
    counts as an import of the module `X.y` when that is a module, else of `X`; a name outside `known` resolves to
    its nearest known parent."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]

    def resolve(dotted: str) -> str | None:
        while dotted and dotted not in known:
            dotted = dotted.rpartition(".")[0]
        return dotted or None

    found: list[Import] = []

    def visit(node: ast.AST, kind: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and _is_type_checking(child):
                for stmt in child.body:
                    visit_one(stmt, "type-checking")
                for stmt in child.orelse:
                    visit_one(stmt, kind)
            else:
                visit_one(child, kind)

    def visit_one(node: ast.AST, kind: str) -> None:
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names if a.name.split(".")[0] == PACKAGE]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package
                for _ in range(node.level - 1):
                    base = base.rpartition(".")[0]
                source = base + ("." + node.module if node.module else "")
            else:
                source = node.module or ""
            if source.split(".")[0] == PACKAGE:
                targets = [f"{source}.{a.name}" if f"{source}.{a.name}" in known else source for a in node.names]
        for target in targets:
            resolved = resolve(target)
            if resolved is not None and resolved != name:
                found.append(Import(name, resolved, node.lineno, kind))
        inner = "function" if kind == "module" and isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) else kind
        visit(node, inner)

    visit(ast.parse(path.read_text(), str(path)), "module")
    return found


def room_of(module: str) -> str:
    """The room of a dotted module name, by its first name under the package."""
    head = module.split(".")[1] if "." in module else ""
    rooms = [r for r, room in ROOMS.items() if head in room.modules]
    assert len(rooms) == 1, f"{module} is in {rooms or 'no room'}: give it exactly one room in ROOMS (and the README)"
    return rooms[0]


def violations(found: list[Import]) -> list[str]:
    """Each import the table does not allow, said as importer, imported and the rule."""
    out = []
    for imp in found:
        src, dst = room_of(imp.importer), room_of(imp.imported)
        if src == dst or dst in ROOMS[src].imports:
            continue
        if imp.kind == "type-checking" and dst in TYPE_ONLY.get(src, ()):
            continue
        allowed = ", ".join(ROOMS[src].imports) or "nothing"
        out.append(
            f"{imp.importer} (line {imp.line}, {imp.kind} level) imports {imp.imported}: room `{src}` may import "
            f"{allowed}; not `{dst}`"
        )
    return out


def cycles(found: list[Import]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    graph: dict[str, set[str]] = {}
    for imp in found:
        graph.setdefault(imp.importer, set()).add(imp.imported)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []

    def connect(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                connect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            connect(v)
    return out


def loaded_by(module: str, found: list[Import]) -> dict[str, list[str]]:
    """Every module that importing `module` can load at run time (module- and function-level imports, and the
    `__init__` of each package above a loaded module), each with the chain of imports that reaches it."""
    graph: dict[str, set[str]] = {}
    for imp in found:
        if imp.kind != "type-checking":
            graph.setdefault(imp.importer, set()).add(imp.imported)
    for name in {imp.importer for imp in found} | {imp.imported for imp in found}:
        parent = name.rpartition(".")[0]
        if parent and parent != PACKAGE:
            graph.setdefault(name, set()).add(parent)
    chains = {module: [module]}
    todo = [module]
    while todo:
        v = todo.pop()
        for w in sorted(graph.get(v, ())):
            if w not in chains:
                chains[w] = [*chains[v], w]
                todo.append(w)
    return chains


@pytest.fixture(scope="module")
def package_imports() -> list[Import]:
    known = modules()
    return [imp for name, path in known.items() for imp in imports_of(name, path, known)]


def test_every_module_has_one_room():
    for name in modules():
        room_of(name)


def test_every_import_is_one_the_table_allows(package_imports):
    said = violations(package_imports)
    assert not said, "imports the table (ROOMS) does not allow:\n" + "\n".join(said)


def test_no_import_cycle_not_even_through_a_function_or_a_type(package_imports):
    found = cycles(package_imports)
    assert not found, "modules that import each other, directly or around a cycle:\n" + "\n".join(
        ", ".join(c) for c in found
    )


@pytest.mark.parametrize(("room", "other", "why"), INDEPENDENT, ids=[f"{a}-not-{b}" for a, b, _ in INDEPENDENT])
def test_a_room_does_not_load_the_room_it_must_stay_out_of(package_imports, room, other, why):
    reached = {}
    for name in modules():
        if room_of(name) == room:
            for loaded, chain in loaded_by(name, package_imports).items():
                if room_of(loaded) == other:
                    reached.setdefault(loaded, " -> ".join(chain))
    assert reached == {}, f"`{room}` loads `{other}` ({why}):\n" + "\n".join(reached.values())


def test_the_probe_sees_what_a_module_loads(package_imports):
    # the replay places hunks with the engine: the closure must see it there, or the independence above proves nothing
    loaded = loaded_by("vllm_compose.replay", package_imports)
    assert "vllm_compose.placement" in loaded and "vllm_compose.scope" in loaded
    # a submodule's import runs its package's __init__: the proof's import of pp.plan loads vllm_compose.pp
    assert "vllm_compose.pp" in loaded_by("vllm_compose.proof.recall_model", package_imports)


def test_the_reader_sees_function_level_and_type_checking_imports_and_the_checker_names_the_rule(tmp_path):
    pkg = tmp_path / PACKAGE
    (pkg / "audit").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "placement.py").write_text("")
    (pkg / "results.py").write_text("")
    (pkg / "audit" / "__init__.py").write_text("from .landings import audit\n")
    (pkg / "audit" / "landings.py").write_text(
        "from typing import TYPE_CHECKING\n"
        "from ..results import X\n"
        "if TYPE_CHECKING:\n"
        "    from .. import placement\n"
        "def audit():\n"
        "    import vllm_compose.placement\n"
    )
    known = modules(tmp_path)
    found = [imp for name, path in known.items() for imp in imports_of(name, path, known)]
    assert {(i.importer, i.imported, i.kind) for i in found} == {
        ("vllm_compose.audit", "vllm_compose.audit.landings", "module"),
        ("vllm_compose.audit.landings", "vllm_compose.results", "module"),
        ("vllm_compose.audit.landings", "vllm_compose.placement", "type-checking"),
        ("vllm_compose.audit.landings", "vllm_compose.placement", "function"),
    }
    said = violations(found)
    assert len(said) == 2
    assert said[1] == (
        "vllm_compose.audit.landings (line 6, function level) imports vllm_compose.placement: room `audit` may import "
        "errors, plumbing, patches, results; not `placement`"
    )
    assert "vllm_compose.placement" in loaded_by("vllm_compose.audit", found)


def test_every_module_path_the_package_names_in_a_string_exists():
    known = modules()
    named = re.compile(rf"\b{PACKAGE}(?:\.\w+)+")
    stale = []
    for name, path in known.items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                for dotted in named.findall(node.value):
                    # a module, or an attribute of one (`vllm_compose.cache.incoming_prefix`)
                    if dotted not in known and dotted.rpartition(".")[0] not in known:
                        stale.append(f"{name} (line {node.lineno}) names {dotted}, which is no module")
    assert not stale, "\n".join(stale)
