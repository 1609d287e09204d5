"""Synthetic edits at syntax-tree-chosen sites, and the same semantic edit located again in another release.

An edit inserts one new element right after an *anchor* element of a syntactic container:

================  ===========================================  ================================================
kind              container                                    anchor (the element the new one follows)
================  ===========================================  ================================================
param             a def's parameter list                       its last named parameter
kwarg             a call's argument list (by callee text)      its last keyword argument
statement         a statement block                            a simple statement (by what it assigns or calls)
list-element      a list display                               its last element (by text)
import-name       a ``from m import (...)`` list               its last imported name
param-mid         a long signature, one parameter a line       a parameter with 2 before it and 3 after it
kwarg-mid         a long call, one keyword argument a line     a keyword argument with 2 before and 3 after
list-mid          a long list display, one element a line      an element with 2 before it and 3 after it
import-statement  the module's import block                    a top-level ``import m`` / ``from m import``
================  ===========================================  ================================================

The ``-mid`` kinds are the cases whose 3 lines of context show no bracket at all (the hunk's lines are all
elements); `import-statement` inserts a whole statement, ``from <module>.aaa_<name> import <name>``, which sorts
right after its anchor.

A site is identified by *syntax*, never by line number: the enclosing class/def chain, the container's identity
(callee text, module name) and the anchor's identity (parameter name, keyword name, statement text, element text).
That identity is what lets the benchmark apply the *same* edit to another release as ground truth: find the site
with the same identity there (wherever it now is in its container: the target may have appended elements after it);
if there is not exactly one, or the edited file no longer parses, the ground truth is "must be rejected".

The layout of the inserted text follows the code around the anchor, the way a person would write it: an anchor
alone on its line (vertical layout) gets the new element on a new line below it with the same indentation (adding
the comma the anchor lacked); otherwise the element is spliced in as ``, new`` right after the anchor.
"""

from __future__ import annotations

import ast
import bisect
import functools
from dataclasses import dataclass

EDIT_KINDS = (
    "param",
    "kwarg",
    "statement",
    "list-element",
    "import-name",
    "param-mid",
    "kwarg-mid",
    "list-mid",
    "import-statement",
)
#: kinds whose elements' order carries no meaning: applying such an edit somewhere in the intended container, or
#: next to where the site was, is harmless; for the other kinds (parameters, statements, list elements) order is
#: meaning, and a must-reject case that is applied anyway is harmful
ORDER_FREE_KINDS = frozenset({"kwarg", "kwarg-mid", "import-name", "import-statement"})
#: the kind each ``-mid`` kind's elements are written like
BASE_KIND = {"param-mid": "param", "kwarg-mid": "kwarg", "list-mid": "list-element"}

#: statement types used as anchors: simple, one-per-line statements people add lines after
_ANCHOR_STATEMENTS = (ast.Assign, ast.AnnAssign, ast.AugAssign, ast.Expr)


@dataclass(frozen=True)
class Site:
    """Where an edit goes, by syntactic identity."""

    kind: str
    #: enclosing definitions outermost first, e.g. ("class Worker", "def forward"); for `param` it ends with the def
    chain: tuple[str, ...]
    #: the container's identity: callee text for `kwarg`, module for `import-name`, "" otherwise
    container: str
    #: the anchor's identity: parameter / keyword / imported name, statement or element source text
    anchor: str
    #: 1-based line of the anchor in the file the site was found in (reporting only, never used to locate)
    line: int = 0

    @property
    def identity(self) -> tuple[str, tuple[str, ...], str, str]:
        return (self.kind, self.chain, self.container, self.anchor)

    def describe(self) -> str:
        where = ".".join(c.split()[-1] for c in self.chain) or "<module>"
        box = f" {self.container}" if self.container else ""
        anchor = self.anchor if len(self.anchor) <= 50 else self.anchor[:47] + "..."
        return f"{self.kind} in {where}{box} after `{anchor}`"


@dataclass(frozen=True)
class _Anchor:
    """An anchor's extent in the text: 1-based lines, 0-based character columns (not UTF-8 byte offsets)."""

    site: Site
    start_line: int
    start_col: int
    end_line: int
    end_col: int
    #: statements are always inserted as a new line; elements pick a layout
    statement: bool = False
    #: the anchor is the last element of its container: only those are chosen as sites (an edit appends), but the
    #: ground truth finds the anchor wherever it now is, since the target may have appended elements after it
    last: bool = True
    #: 1-based line span of the top-level statement holding the anchor (decorators included): the region whose
    #: parse is re-checked after an edit, instead of the whole file
    top_start: int = 0
    top_end: int = 0


def new_element_text(kind: str, name: str, site: Site | None = None) -> str:
    """The source text of the element an edit of `kind` inserts, built around identifier `name` (an
    `import-statement` is built from its anchor's module too, so it sorts right after it: pass the `site`)."""
    kind = BASE_KIND.get(kind, kind)
    if kind == "import-statement":
        if site is None:
            raise ValueError("an import-statement edit is built from its site")
        # a submodule of the anchor's module named to sort right after it (before its other submodules)
        if site.anchor.startswith("from "):
            return f"{site.anchor}.aaa_{name} import {name}"
        return f"{site.anchor}.aaa_{name}"
    if kind == "param":
        return f"{name}: int | None = None"
    if kind == "kwarg":
        return f"{name}=None"
    if kind == "statement":
        return f"{name} = None"
    if kind == "list-element":
        return f'"{name}"'
    if kind == "import-name":
        return name
    raise ValueError(f"unknown edit kind {kind!r}")


def _char_col(line: str, byte_col: int) -> int:
    """ast columns are UTF-8 byte offsets; lines here are str."""
    if line.isascii():
        return byte_col
    return len(line.encode("utf-8", "surrogateescape")[:byte_col].decode("utf-8", "surrogateescape"))


def _walk(tree: ast.AST):
    """Yield (node, chain) in source order; chain names the defs/classes enclosing the node (a def's own
    signature and body get the def in their chain)."""
    stack: list[tuple[ast.AST, tuple[str, ...]]] = [(tree, ())]
    while stack:
        node, chain = stack.pop()
        yield node, chain
        inner = chain
        if isinstance(node, ast.ClassDef):
            inner = chain + (f"class {node.name}",)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            inner = chain + (f"def {node.name}",)
        children = list(ast.iter_child_nodes(node))
        for child in reversed(children):
            # decorators sit outside the def they decorate
            child_chain = chain if child in getattr(node, "decorator_list", ()) else inner
            stack.append((child, child_chain))


def _params_with_ends(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> list[tuple[ast.arg, ast.AST]]:
    """The named parameters of `fn` in source order (`*args`/`**kwargs` left out), each with the node where it
    ends: its default, or the parameter itself."""
    a = fn.args
    pos = a.posonlyargs + a.args
    first_default = len(pos) - len(a.defaults)
    out: list[tuple[ast.arg, ast.AST]] = [
        (arg, a.defaults[i - first_default] if i >= first_default else arg) for i, arg in enumerate(pos)
    ]
    out += [(arg, default or arg) for arg, default in zip(a.kwonlyargs, a.kw_defaults, strict=True)]
    return out


def _statement_identity(stmt: ast.stmt) -> str:
    """What makes a statement "the same statement" in another release: what it assigns, or what it calls.

    Deliberately not the full text: a release that adds an argument to `super().__init__(...)` still has the same
    statement for an edit that inserts a line after it."""
    if isinstance(stmt, ast.Assign):
        return " = ".join(ast.unparse(t) for t in stmt.targets) + " = ..."
    if isinstance(stmt, ast.AnnAssign):
        return f"{ast.unparse(stmt.target)}: {ast.unparse(stmt.annotation)}" + (" = ..." if stmt.value else "")
    if isinstance(stmt, ast.AugAssign):
        return f"{ast.unparse(stmt.target)} {_AUG_OPS.get(type(stmt.op), '?')}= ..."
    value = stmt.value  # ast.Expr
    if isinstance(value, ast.Await):
        value = value.value
    if isinstance(value, ast.Call):
        return f"{ast.unparse(value.func)}(...)"
    return ast.unparse(stmt)


_AUG_OPS = {
    ast.Add: "+",
    ast.Sub: "-",
    ast.Mult: "*",
    ast.Div: "/",
    ast.FloorDiv: "//",
    ast.Mod: "%",
    ast.Pow: "**",
    ast.BitOr: "|",
    ast.BitAnd: "&",
    ast.BitXor: "^",
    ast.LShift: "<<",
    ast.RShift: ">>",
    ast.MatMult: "@",
}


def _anchors(tree: ast.Module, lines: list[str]) -> list[_Anchor]:
    """Every candidate anchor in the file, in source order (unique or not)."""
    found: list[_Anchor] = []
    # top-level statement spans, to find the one holding each anchor
    tops = []
    for stmt in tree.body:
        first = min([stmt.lineno] + [d.lineno for d in getattr(stmt, "decorator_list", ())])
        tops.append((first, stmt.end_lineno or stmt.lineno))
    starts = [t[0] for t in tops]

    def add(site: Site, start: ast.AST, end: ast.AST, statement: bool = False, last: bool = True) -> None:
        sl, el = start.lineno, end.end_lineno
        if sl is None or el is None or sl > len(lines) or el > len(lines):
            return
        found.append(
            _Anchor(
                site,
                sl,
                _char_col(lines[sl - 1], start.col_offset),
                el,
                _char_col(lines[el - 1], end.end_col_offset),
                statement,
                last,
                *tops[bisect.bisect_right(starts, sl) - 1],
            )
        )

    for stmt in tree.body:
        if isinstance(stmt, ast.ImportFrom) and stmt.module == "__future__":
            continue  # a new name there is no feature: the edit would not compile
        if isinstance(stmt, ast.ImportFrom) and stmt.level == 0 and stmt.module and stmt.names[0].name != "*":
            add(Site("import-statement", (), "", f"from {stmt.module}", stmt.lineno), stmt, stmt, statement=True)
        elif isinstance(stmt, ast.Import) and len(stmt.names) == 1 and not stmt.names[0].asname:
            add(Site("import-statement", (), "", f"import {stmt.names[0].name}", stmt.lineno), stmt, stmt, True)

    for node, chain in _walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            inner = chain + (f"def {node.name}",)
            params = _params_with_ends(node)
            for i, (arg, end) in enumerate(params):
                add(Site("param", inner, "", arg.arg, arg.lineno), arg, end, last=i == len(params) - 1)
                mid = _middle(node.lineno, [(a, e) for a, e in params], i)
                add(Site("param-mid", inner, "", arg.arg, arg.lineno), arg, end, last=mid)
        elif isinstance(node, ast.Call):
            named = [k for k in node.keywords if k.arg is not None]
            callee = ast.unparse(node.func) if named else ""
            for i, kw in enumerate(named):
                add(Site("kwarg", chain, callee, kw.arg, kw.lineno), kw, kw, last=i == len(named) - 1)
                mid = _middle(node.func.end_lineno or node.lineno, [(k, k) for k in named], i)
                add(Site("kwarg-mid", chain, callee, kw.arg, kw.lineno), kw, kw, last=mid)
        elif isinstance(node, ast.List) and isinstance(node.ctx, ast.Load) and node.elts:
            for i, el in enumerate(node.elts):
                last = i == len(node.elts) - 1
                add(Site("list-element", chain, "", ast.unparse(el), el.lineno), el, el, last=last)
                mid = _middle(node.lineno, [(e, e) for e in node.elts], i)
                add(Site("list-mid", chain, "", ast.unparse(el), el.lineno), el, el, last=mid)
        elif (
            isinstance(node, ast.ImportFrom)
            and node.names
            and node.names[-1].name != "*"
            and node.module != "__future__"
        ):
            module = "." * (node.level or 0) + (node.module or "")
            for i, al in enumerate(node.names):
                text = al.name + (f" as {al.asname}" if al.asname else "")
                add(Site("import-name", chain, module, text, al.lineno), al, al, last=i == len(node.names) - 1)
        elif isinstance(node, _ANCHOR_STATEMENTS):
            if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
                continue  # docstrings and bare constants
            add(Site("statement", chain, "", _statement_identity(node), node.lineno), node, node, statement=True)
    return found


def _middle(opener_line: int, elements: list[tuple[ast.AST, ast.AST]], i: int) -> bool:
    """Whether element i has 2 elements before it and 3 after it, each alone on the line after the previous one
    and none on the opener's line: a hunk with 3 lines of context around an insertion after it shows elements
    only, no bracket."""
    if i < 2 or i + 3 >= len(elements):
        return False
    window = elements[i - 2 : i + 4]
    if window[0][0].lineno <= opener_line:
        return False
    for (a, a_end), (b, _) in zip(window, window[1:], strict=False):
        if a.lineno != a_end.end_lineno or b.lineno != a_end.end_lineno + 1:
            return False
    return window[-1][0].lineno == window[-1][1].end_lineno


def _is_editable(anchor: _Anchor, lines: list[str]) -> bool:
    """Whether the anchor's surroundings allow the line-oriented edit (statements only: alone on their lines)."""
    if not anchor.statement:
        return True
    first, last = lines[anchor.start_line - 1], lines[anchor.end_line - 1]
    if first[: anchor.start_col].strip():
        return False  # something precedes the statement on its line (e.g. `if x: y = 1`)
    rest = last[anchor.end_col :].strip()
    return rest == "" or rest.startswith("#")


@functools.lru_cache(maxsize=64)
def _index(text: str) -> tuple[list[str], dict[tuple, list[_Anchor]]] | None:
    """The file's lines and its anchors grouped by site identity; None when it does not parse. Cached because the
    benchmark asks about the same few hundred files over and over."""
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError):
        return None
    lines = text.split("\n")
    by_identity: dict[tuple, list[_Anchor]] = {}
    for a in _anchors(tree, lines):
        by_identity.setdefault(a.site.identity, []).append(a)
    return lines, by_identity


def find_sites(text: str) -> list[Site]:
    """The sites of `text` (Python source) whose identity is unique in the file and whose edit keeps the file
    parseable, in source order. Empty when the file does not parse."""
    index = _index(text)
    if index is None:
        return []
    lines, by_identity = index
    unique = [
        group[0]
        for group in by_identity.values()
        if len(group) == 1 and group[0].last and _is_editable(group[0], lines)
    ]
    return [a.site for a in sorted(unique, key=lambda a: (a.start_line, a.start_col, a.site.kind))]


def _insert(lines: list[str], anchor: _Anchor, new: str) -> list[str]:
    """`lines` with `new` inserted after `anchor`, laid out like the code around it."""
    out = list(lines)
    start_text = lines[anchor.start_line - 1]
    end_text = lines[anchor.end_line - 1]
    indent = start_text[: anchor.start_col]
    if anchor.statement:
        out.insert(anchor.end_line, indent + new)
        return out
    after = end_text[anchor.end_col :]
    rest = after.strip()
    has_comma = rest.startswith(",")
    tail = rest[1:].strip() if has_comma else rest
    alone = indent.strip() == "" and (tail == "" or tail.startswith("#"))
    if alone:
        if has_comma:
            out.insert(anchor.end_line, indent + new + ",")
        else:
            out[anchor.end_line - 1] = end_text[: anchor.end_col] + "," + after
            out.insert(anchor.end_line, indent + new)
    else:
        out[anchor.end_line - 1] = end_text[: anchor.end_col] + ", " + new + after
    return out


def apply_edit(text: str, site: Site, new: str) -> str | None:
    """`text` with element `new` inserted at `site`, or None when the site does not exist exactly once in `text`
    or the edited text no longer parses (the edit cannot be made there: ground truth "must be rejected")."""
    index = _index(text)
    if index is None:
        return None
    lines, by_identity = index
    matches = by_identity.get(site.identity, [])
    if len(matches) != 1 or not _is_editable(matches[0], lines):
        return None
    anchor = matches[0]
    edited = _insert(lines, anchor, new)
    # an edit adds at most one line, inside the anchor's top-level statement: re-parse just that region
    region = "\n".join(edited[anchor.top_start - 1 : anchor.top_end + 1])
    try:
        ast.parse(region)
    except (SyntaxError, ValueError):
        return None
    return "\n".join(edited)


def order_free(text: str, site: Site) -> bool:
    """Whether the order of the site's elements carries no meaning: an order-free kind, the names of ``__all__``,
    or keyword-only parameters."""
    if site.kind in ORDER_FREE_KINDS:
        return True
    index = _index(text)
    if index is None:
        return False
    lines, by_identity = index
    matches = by_identity.get(site.identity, [])
    if len(matches) != 1:
        return False
    anchor = matches[0]
    if site.kind in ("list-element", "list-mid"):
        return lines[anchor.top_start - 1].lstrip().startswith("__all__")
    if site.kind in ("param", "param-mid"):
        tree = ast.parse(text)
        return any(
            a.arg == site.anchor and a.lineno == anchor.start_line
            for node in ast.walk(tree)
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
            for a in node.args.kwonlyargs
        )
    return False
