"""The scope check: whether a site agrees with what the hunk implies about where it belongs (Python only).

A site is acceptable when its scope agrees with what the hunk implies (see `scope.HunkIntent`: role of the change —
inside a call's parentheses, a signature, a list, a statement block —, the compound-statement headers the hunk shows,
and the def/class its ``@@`` section names).  The only verbatim copy of the pre-image is checked against the section
alone: the hunk's own lines are the target's lines there, so what they imply cannot disagree with it but by a guess
about what the hunk does not show.  For a change inside brackets, the context lines the hunk shows inside the same
brackets must be inside the site's brackets in the target too (an alignment may stitch two look-alike calls
together).

Restructured containers: a site whose container the target spliced into another one (``*name``), or where the target
put a splice among the elements the hunk shows, is refused unless the hunk shows that container's own opening line: a
hunk is never merged into a sub-list it did not show (`_restructured_problem`).
"""

from __future__ import annotations

import re

from ..patchfile import Hunk
from ..scope import PythonLayout, Scope, section_name
from .groups import Group
from .plan import Edit, Plan
from .refusal import Refusal, RefusalKind
from .search import Alignment
from .target import Target, indent_of, norm_text, strip_cr

#: a def or class line
_DEF_LINE = re.compile(r"\s*(?:async\s+)?(?:def|class)\s")


def site_scope(tgt: Target, edit: Edit, group: Group, hunk: Hunk) -> Scope:
    """The enclosing class/def chain and syntactic role where `edit` lands (at the indentation of its first code
    line, or of the line it replaces)."""
    lay = tgt.layout
    lay.ensure(edit.start)
    first_code = next((ln for ln in edit.lines if ln.strip() and not ln.strip().startswith("#")), None)
    if first_code is not None:
        indent = len(indent_of(strip_cr(first_code)).expandtabs(8))
    elif edit.end > edit.start and lay.code_start[edit.start]:
        indent = lay.indent[edit.start]
    else:
        indent = None
    return lay.scope(edit.start, indent)


def _container_problem(P: list[str], g: Group, al: Alignment, tgt: Target, at: int) -> Refusal | None:
    """Whether the context lines the hunk shows inside the same brackets as its change (the arguments, parameters
    or elements before it) sit inside the brackets of the target site too.  An alignment can stitch two look-alike
    calls together (the first arguments from one, the last from another): the site is then neither."""
    lay = PythonLayout(P[: g.a])
    n = g.a
    inner = lay.frame_at[n]
    closers = {i for i, _ in lay.unmatched_closers}
    same: list[int] = []
    for j in range(n - 1, -1, -1):
        if j in closers and inner is None:
            break
        f = lay.frame_at[j]
        if inner is None:
            if f is not None or not P[j].strip():
                continue
        else:
            chain = []
            while f is not None:
                chain.append(f)
                f = f.parent
            if inner not in chain:
                break
        same.append(j)
    lay_t = tgt.layout
    lay_t.ensure(at)
    frame = lay_t.frame_at[at]
    if frame is None:
        return None
    for j in same:
        t = al.mapping[j]
        if t is None:
            continue
        lay_t.ensure(t)
        f = lay_t.frame_at[t]
        while f is not None and f is not frame:
            f = f.parent
        if f is None:
            return Refusal(
                RefusalKind.CONTAINER,
                f"the hunk shows `{P[j].strip()}` inside the same brackets as its change; in the "
                f"target it is outside the brackets of the site (target lines {t + 1} and {at + 1})",
            )
    return None


#: a container assigned to a name: ``NAME = [``, ``self.name: list[T] = (``
_NAMED_CONTAINER = re.compile(r"^\s*(?:self\.)?(\w+)\s*(?::[^=]*)?=\s*[\[({]\s*(?:#.*)?$")
#: an element that splices another container in: ``*name,`` / ``**name,``
_SPLICE = re.compile(r"^\s*\*\*?\s*((?:self\.)?\w+)\s*,?\s*(?:#.*)?$")


def _restructured_problem(P: list[str], al: Alignment, tgt: Target, at: int) -> Refusal | None:
    """Whether the target restructured the container the change lands in: split it into a sub-list spliced into
    another one (``*name``).  A hunk is never merged into a sub-list it does not show: a site whose container is
    spliced elsewhere, unless the hunk shows that container's own opening line; or a site where the target put a
    splice of its own among the elements the hunk shows (they moved into it)."""
    lay = tgt.layout
    lay.ensure(at)
    frame = lay.frame_at[at]
    if frame is None:
        return None
    T = tgt.lines
    opener = T[frame.line]
    m = _NAMED_CONTAINER.match(opener)
    if m is not None and norm_text(opener) not in {norm_text(x) for x in P}:
        name = m.group(1)
        spliced = next(
            (k for k, n in enumerate(tgt.norm) if ("*" + name) in n and re.search(rf"\*\s*(?:self\.)?{name}\b", n)),
            None,
        )
        if spliced is not None:
            return Refusal(
                RefusalKind.RESTRUCTURED,
                f"the site's container `{opener.strip()}` (target line {frame.line + 1}) is spliced "
                f"into another one (`{T[spliced].strip()}`, target line {spliced + 1}), and the hunk does not show "
                "it: never merged into a sub-list the hunk did not show",
            )
    for t in al.extras:
        lay.ensure(t)
        if lay.frame_at[t] is frame and _SPLICE.match(T[t]):
            return Refusal(
                RefusalKind.RESTRUCTURED,
                f"the target put `{T[t].strip()}` (target line {t + 1}) among the elements the hunk "
                "shows: they moved into a spliced sub-list the hunk does not show",
            )
    return None


def shows_def_line(hunk: Hunk) -> bool:
    """Whether the hunk's pre-image shows a def/class line at or before its first change."""
    for op, text in hunk.lines:
        if op != "+" and _DEF_LINE.match(text):
            return True
        if op != " ":
            return False
    return False


def scope_refusal(
    hunk: Hunk, groups: list[Group], plan: Plan, al: Alignment, tgt: Target, own_lines: bool = False
) -> Refusal | None:
    """Why the site disagrees with the scope the hunk implies (None when it agrees).

    own_lines: the site is the only verbatim copy of the pre-image in the target.  What the hunk's lines imply
    (role, headers, brackets) is then read off the very lines the target has there, so a disagreement can only
    come from guessing about what the hunk does not show: only the ``@@`` section, evidence from outside the
    hunk's lines, may still reject the site."""
    name = section_name(hunk.section)
    first_edit_scope = None
    for g, e in zip(groups, plan.edits, strict=True):
        sc = site_scope(tgt, e, g, hunk)
        if first_edit_scope is None:
            first_edit_scope = sc
        if g.intent is not None and not own_lines:
            why = g.intent.accepts(sc)
            if why:
                return Refusal(RefusalKind.INTENT, f"{why} (target line {e.start + 1})")
            if g.intent.klass in ("(", "[", "{"):
                why = _container_problem(hunk.pre_image, g, al, tgt, e.start)
                if why:
                    return why
            why = _restructured_problem(hunk.pre_image, al, tgt, e.start)
            if why:
                return why
    if name:
        f = al.first
        start = max(0, f[1] - f[0]) if f else 0
        names = tgt.sections.names_at(start)
        chain_names = [c.split()[-1] for c in (first_edit_scope.chain if first_edit_scope else ())]
        if name not in names and name not in chain_names:
            return Refusal(
                RefusalKind.SECTION,
                f"the hunk's `@@` header names `{hunk.section.strip()}`, the target site follows "
                + (" / ".join(f"`{n}`" for n in names) or "no def/class"),
            )
    return None


# --------------------------------------------------------------------------------------------------------------
# Placing one hunk
