"""The import-only fallback: a hunk that only adds imports at module level, which its context cannot place.

It goes into the target's ``from m import`` statement for the same module if it has one, else into its import block;
in the target's order (sorted, when its names or statements are), else after the statement the hunk follows
(`place_imports`).
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass

from ..patchfile import Hunk
from ..scope import PythonLayout
from ..verdicts import Verdict
from .groups import Group, hunk_groups
from .outcome import Placement
from .plan import Edit, spliced
from .target import Target, indent_of, strip_cr


@dataclass
class _ImportUnit:
    """What one group of an import-only hunk imports: names from a module (`names` of ``from m import``), or
    whole modules (``import m``, module None); `lines` are the hunk's own lines for it."""

    module: str | None
    names: list[str]
    lines: list[str]


_FROM_OPENER = re.compile(r"^\s*from\s+(\.*[\w.]*)\s+import\s*\(\s*(?:#.*)?$")


def _import_units(hunk: Hunk) -> list[_ImportUnit] | None:
    """The import units of a hunk whose every change adds imports at module level, or None for any other hunk.

    A group adds whole statements (``import m``, ``from m import a, b``, a parenthesised one), or names inside a
    ``from m import (`` list the hunk shows the opening line of."""
    if hunk.removed or not hunk.added:
        return None
    units: list[_ImportUnit] = []
    for g in hunk_groups(hunk):
        added = [strip_cr(x) for x in g.added]
        text = "\n".join(added) + "\n"
        try:
            tree = ast.parse(text) if not indent_of(added[0]) else None
        except SyntaxError:
            tree = None
        if tree is not None and tree.body and all(isinstance(n, (ast.Import, ast.ImportFrom)) for n in tree.body):
            for n in tree.body:
                lines = added[n.lineno - 1 : n.end_lineno]
                if isinstance(n, ast.ImportFrom):
                    if any(a.name == "*" for a in n.names):
                        return None
                    module = "." * n.level + (n.module or "")
                    units.append(_ImportUnit(module, [_alias(a) for a in n.names], lines))
                else:
                    units.append(_ImportUnit(None, [_alias(a) for a in n.names], lines))
            continue
        # names inside an import list whose opener the hunk shows
        post_before = [t for op, t in _hunk_lines_before(hunk, g)]
        lay = PythonLayout(post_before)
        frame = lay.frame_at[len(post_before)]
        m = _FROM_OPENER.match(frame.text) if frame is not None and frame.role == "import-names" else None
        if m is None or frame.parent is not None:
            return None
        names = []
        for x in added:
            code = x.split("#", 1)[0].strip().rstrip(",").strip()
            if not code:
                continue
            if not re.fullmatch(r"\w+(?:\s+as\s+\w+)?", code):
                return None
            names.append(" ".join(code.split()))
        units.append(_ImportUnit(m.group(1), names, added))
    return units or None


def _hunk_lines_before(hunk: Hunk, g: Group) -> list[tuple[str, str]]:
    """The hunk's post-image lines before group `g` (as (op, text))."""
    out = []
    pre = 0
    for op, text in hunk.lines:
        if op != "+" and pre >= g.a:
            break
        if op != "-":
            out.append((op, text))
        if op != "+":
            pre += 1
    return out


def _alias(a) -> str:
    return a.name + (f" as {a.asname}" if a.asname else "")


def _sort_key(name: str) -> tuple[str, str]:
    return (name.lower(), name)


def _is_sorted(keys: list) -> bool:
    return all(a <= b for a, b in zip(keys, keys[1:], strict=False))


def place_imports(hunk: Hunk, tgt: Target) -> Placement | None:
    """Place an import-only hunk the context could not place: in the target's statement for the same module if it
    has one, else in its top-level import block; in the target's order (sorted, when its names or its statements
    are), else after the statement the hunk follows, else at the end of the block.  None when the hunk is not
    import-only, the target does not parse, or there is no import block."""
    units = _import_units(hunk)
    if units is None:
        return None
    text = "\n".join(strip_cr(x) for x in tgt.lines)
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError):
        return None
    imports = [n for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom))]
    if not imports:
        return None
    edits: list[Edit] = []
    notes: list[str] = []
    for unit in units:
        got = _import_edit(unit, imports, hunk, tgt)
        if got is None:
            return None
        edit, note = got
        if any(e.start < edit.end and edit.start < e.end or e.start == edit.start for e in edits):
            return None
        edits.append(edit)
        notes.append(note)
    if all(e.applied for e in edits):
        return Placement(
            hunk,
            Verdict.ALREADY_APPLIED,
            landing_line=edits[0].start + 1,
            scope=tgt.layout.scope(edits[0].start),
            score=1.0,
            evidence="import: the target already imports every name the hunk adds (" + "; ".join(notes) + ")",
        )
    start, end, replacement = spliced(tgt, [e for e in edits if not e.applied])
    return Placement(
        hunk,
        Verdict.MERGED,
        start=start,
        end=end,
        replacement=replacement,
        landing_line=start + 1,
        scope=tgt.layout.scope(start),
        score=1.0,
        evidence="import-only hunk placed in the import block: " + "; ".join(notes),
    )


def _import_edit(unit: _ImportUnit, imports: list, hunk: Hunk, tgt: Target) -> tuple[Edit, str] | None:
    """The edit that adds one import unit to the target, and its evidence."""
    T = tgt.lines
    if unit.module is not None:
        same = [
            n
            for n in imports
            if isinstance(n, ast.ImportFrom)
            and "." * n.level + (n.module or "") == unit.module
            and not any(a.name == "*" for a in n.names)
        ]
        if same:
            return _add_names(unit, same[0], tgt)
    else:
        have = {_alias(a) for n in imports if isinstance(n, ast.Import) for a in n.names}
        if set(unit.names) <= have:
            n = imports[0]
            return Edit(
                n.lineno - 1, n.lineno - 1, [], True
            ), f"the target already has `import {', '.join(unit.names)}`"
    # a statement of its own, in the block (the run of top-level imports separated by blank lines at most)
    key = (unit.module is not None, (unit.module or unit.names[0]).lower())
    stmts = [(n, (isinstance(n, ast.ImportFrom), _module_of(n).lower())) for n in imports]
    # sections (isort's): runs of statements with no blank line between them (comment lines may be)
    sections: list[list[tuple]] = []
    for n, k in stmts:
        gap = range(sections[-1][-1][0].end_lineno, n.lineno - 1) if sections else range(0)
        if sections and all(T[i].lstrip().startswith("#") for i in gap):
            sections[-1].append((n, k))
        else:
            sections.append([(n, k)])
    anchor = _import_anchor(hunk, unit)
    section = None
    after = None
    if anchor is not None:
        for sec in sections:
            for n, _ in sec:
                if _module_of(n) == anchor:
                    section, after = sec, n
    if section is None:
        # the section whose modules share the longest dotted prefix with the new one
        def shared(sec):
            return max(_shared_prefix(key[1], k[1]) for _, k in sec)

        section = max(sections, key=shared)
        if shared(section) == 0:
            section = sections[-1]
    keys = [k for _, k in section]
    lines = [tgt.eol(x) for x in unit.lines]
    what = unit.lines[0].strip() + (" ..." if len(unit.lines) > 1 else "")
    if _is_sorted(keys):
        at_node = next((n for n, k in section if k > key), None)
        if at_node is not None:
            at = _first_line(at_node, T)
            return Edit(
                at, at, lines, False
            ), f"`{what}` before `{T[at].strip()}` (line {at + 1}), in the order the block's statements are sorted in"
        last = section[-1][0]
        return (
            Edit(last.end_lineno, last.end_lineno, lines, False),
            f"`{what}` after `{T[last.lineno - 1].strip()}` (line {last.lineno}), the end of the block's sorted statements",
        )
    if after is not None:
        return (
            Edit(after.end_lineno, after.end_lineno, lines, False),
            f"`{what}` after `{T[after.lineno - 1].strip()}` (line {after.lineno}), the statement the hunk follows (the block is not sorted)",
        )
    last = section[-1][0]
    return (
        Edit(last.end_lineno, last.end_lineno, lines, False),
        f"`{what}` at the end of the import block (line {last.end_lineno + 1}; not sorted, and the statement the hunk follows is gone)",
    )


def _first_line(node, T: list[str]) -> int:
    """0-based first line of a statement, with the comment lines right above it (they belong to it)."""
    at = node.lineno - 1
    while at > 0 and T[at - 1].lstrip().startswith("#"):
        at -= 1
    return at


def _module_of(node) -> str:
    if isinstance(node, ast.ImportFrom):
        return "." * node.level + (node.module or "")
    return node.names[0].name


def _shared_prefix(a: str, b: str) -> int:
    n = 0
    for x, y in zip(a.split("."), b.split("."), strict=False):
        if x != y:
            break
        n += 1
    return n


def _import_anchor(hunk: Hunk, unit: _ImportUnit) -> str | None:
    """The module of the import statement the hunk's unit follows in the pre-image (its anchor), if any."""
    pre: list[str] = []
    for op, text in hunk.lines:
        if op == "+" and strip_cr(text) == unit.lines[0]:
            break
        if op != "+":
            pre.append(strip_cr(text))
    # the last complete top-level import statement among the context lines before the unit
    for k in range(len(pre) - 1, -1, -1):
        if not pre[k].startswith(("import ", "from ")):
            continue
        for end in range(len(pre), k, -1):
            try:
                tree = ast.parse("\n".join(pre[k:end]) + "\n")
            except SyntaxError:
                continue
            if tree.body and isinstance(tree.body[-1], (ast.Import, ast.ImportFrom)):
                return _module_of(tree.body[-1])
        return None
    return None


def _add_names(unit: _ImportUnit, node, tgt: Target) -> tuple[Edit, str] | None:
    """Add the unit's names to the target's ``from m import`` statement `node`."""
    T = tgt.lines
    have = [_alias(a) for a in node.names]
    missing = [x for x in unit.names if x not in have]
    first, last = node.lineno - 1, node.end_lineno - 1
    where = f"the target's `{T[first].strip()}` (line {first + 1})"
    if not missing:
        return Edit(first, first, [], True), f"{where} already imports {', '.join(unit.names)}"
    ordered = _is_sorted([_sort_key(x) for x in have])
    order = "in its sorted order" if ordered else "at its end (its names are not sorted)"
    if first == last:
        line = strip_cr(T[first])
        m = re.match(r"^(\s*from\s+\S+\s+import\s+)([^#()]*?)\s*(#.*)?$", line)
        if m is None:
            return None
        names = sorted(have + missing, key=_sort_key) if ordered else have + missing
        new = m.group(1) + ", ".join(names) + (f"  {m.group(3)}" if m.group(3) else "")
        return Edit(first, first + 1, [tgt.eol(new)], False), f"added {', '.join(missing)} to {where}, {order}"
    # parenthesised, one name per line: the name lines between the opener and the closer
    name_lines = {}
    for k in range(first + 1, last):
        code = T[k].split("#", 1)[0].strip()
        if not code:
            continue
        if not code.endswith(","):
            return None
        name_lines[k] = " ".join(code.rstrip(",").split())
    if not name_lines or sorted(name_lines.values()) != sorted(have):
        return None
    indent = indent_of(T[next(iter(name_lines))])
    if ordered:
        at = next((k for k, x in name_lines.items() if _sort_key(x) > _sort_key(missing[0])), last)
        if any(_sort_key(x) > _sort_key(missing[0]) for x in have) and len(missing) > 1:
            # several names to spread over the list: keep it simple and exact, one insertion point only when
            # they all fall in the same gap
            following = [x for x in have if _sort_key(x) > _sort_key(missing[0])]
            if following and any(_sort_key(y) > _sort_key(following[0]) for y in missing):
                return None
        missing = sorted(missing, key=_sort_key)
    else:
        at = last
    lines = [tgt.eol(indent + x + ",") for x in missing]
    return Edit(at, at, lines, False), f"added {', '.join(missing)} to {where}, {order}"
