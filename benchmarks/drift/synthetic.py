"""Synthetic drift: the target made from the source release itself, with one change of a named class, so that the
ground truth follows by construction.  (Every case is also applied to its own base: see `drift_benchmark.py`.)

========================  ===================================================  ==================================
class                     what the target did                                  ground truth
========================  ===================================================  ==================================
``adjacent``              inserted its own element right after the anchor      both: the hunk's element right
                          (``import-statement``: its own import statement,     after the anchor, the target's
                          "the import block grew")                             after it — where order carries no
                                                                               meaning or the hunk appends
                                                                               (``param``, ``kwarg*``,
                                                                               ``list-element``, ``import-*``,
                                                                               ``__all__``, keyword-only
                                                                               parameters);
                                                                               must reject where the hunk puts
                                                                               an ordered element between two
                                                                               (``param-mid``, ``list-mid``) or
                                                                               a statement (``statement``)
``restructured``          moved the anchor and the two elements before it     must reject: never merge into a
                          into a sub-list defined above the statement and      sub-list the hunk did not show
                          spliced in as ``*_bench_sub`` (``list-mid`` only)
========================  ===================================================  ==================================
"""

from __future__ import annotations

import ast

from .sites import Site, _index, apply_edit, new_element_text, order_free

SYNTHETIC_CLASSES = ("adjacent", "restructured")

#: kinds whose `adjacent` case must be rejected: an ordered element the hunk puts between two others, or a statement
_ADJACENT_MUST_REJECT = frozenset({"param-mid", "list-mid", "statement"})


def adjacent_target(text: str, site: Site, theirs: str) -> str | None:
    """`text` with the target's own element `theirs` (a name) inserted right after the site's anchor."""
    return apply_edit(text, site, new_element_text(site.kind, theirs, site))


def adjacent_truth(target: str, site: Site, new: str) -> str | None:
    """The ground truth of an `adjacent` case (see the module table); `new` is the hunk's element text.  Elements
    whose order carries no meaning (`sites.order_free`: ``__all__``, keyword-only parameters) commute whatever
    their kind."""
    if site.kind in _ADJACENT_MUST_REJECT and not (site.kind != "statement" and order_free(target, site)):
        return None
    return apply_edit(target, site, new)


def restructured_target(text: str, site: Site, sub: str) -> str | None:
    """`text` with the anchor of a `list-mid` site and the two elements before it moved into a list `sub` defined
    right above the top-level statement holding the list, spliced in as ``*sub``; None when the list's layout
    does not allow it (or the result does not parse)."""
    if site.kind != "list-mid":
        return None
    index = _index(text)
    if index is None:
        return None
    lines, by_identity = index
    matches = by_identity.get(site.identity, [])
    if len(matches) != 1:
        return None
    anchor = matches[0]
    tree = ast.parse(text)
    target_list = None
    for node in ast.walk(tree):
        if isinstance(node, ast.List):
            for i, el in enumerate(node.elts):
                if el.lineno == anchor.start_line and el.end_lineno == anchor.end_line:
                    target_list, at = node, i
    if target_list is None or at < 2:
        return None
    moved = target_list.elts[at - 2 : at + 1]
    first, last = moved[0].lineno, moved[-1].end_lineno
    if any(el.lineno != el.end_lineno for el in moved):
        return None
    indent = lines[first - 1][: len(lines[first - 1]) - len(lines[first - 1].lstrip())]
    body = [lines[k - 1].strip() for k in range(first, last + 1)]
    body = [b if b.endswith(",") else b + "," for b in body]
    out = list(lines)
    out[first - 1 : last] = [f"{indent}*{sub},"]
    definition = [f"{sub} = ["] + [f"    {b}" for b in body] + ["]", "", ""]
    top = anchor.top_start - 1
    out[top:top] = definition
    result = "\n".join(out)
    try:
        ast.parse(result)
    except (SyntaxError, ValueError):
        return None
    return result
