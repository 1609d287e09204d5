"""The merge plan: the edits that put a hunk at one site, 3-way style (hunk pre-image = base, post-image = ours,
target window = theirs), or the reason they cannot (a `Refusal`).

Context lines always come from the target, so whatever the target changed around the hunk is kept.  Each change group
(a run of removed/added lines) must be anchored:

- removed lines must all be present, adjacent to each other in the target;
- added lines go between the target lines matching the pre-image lines around them.  When both neighbours are
  present and the target has lines of its own between them, both sides changed the same gap: conflict (unless
  those lines are the added lines: already applied) — but for the elements of one container the insertions commute
  under the container rules (`containers`), and both sides inserting into one line of a container merge under the
  same rules.  When one neighbour is missing (the target deleted or changed it), the present neighbour anchors the
  insertion — but the nearest non-blank line the insertion follows (what it continues: the statement, parameter,
  argument or element before it) must not have been changed: a target line of its own where that line was is a
  conflict, unless exactly one such line keeps its identity (the same name assigned, annotated, called or passed),
  which then anchors the insertion; and it must not be gone with every mention of it: when nothing in a Python
  target names it any more (its name as `_element_name` reads it; an import, def, class or decorator excepted), the
  site is gone, a conflict;
- indentation: the nearest non-blank context line before and after the group and every removed line give an
  indentation delta (target indent minus pre-image indent).  A consistent delta re-indents the added lines; an
  inconsistent one (context nested one level deeper on one side only) is a conflict — unless the group rewrites
  lines that all moved by one delta, as a neighbour did: the added lines replace them there; or it inserts
  lines written against one neighbour and parted from the other by a blank line: they keep that neighbour's.

Added lines are written with the target's line ending.  A group whose removed lines are gone and whose added lines
are already there is already applied; a hunk whose groups all are gets ``already-applied``.
"""

from __future__ import annotations

import keyword
import re
from dataclasses import dataclass

from ..patchfile import Hunk
from .containers import commute, merge_line
from .groups import Group
from .refusal import Refusal, RefusalKind
from .search import Alignment
from .target import Target, indent_of, norm_text, strip_cr


@dataclass
class Edit:
    """One group's change at the site: target lines [start, end) become `lines`."""

    start: int
    end: int
    lines: list[str]
    applied: bool  # the target already has this group's result


@dataclass
class Plan:
    """The edits that merge a hunk at one site (one per change group, in group order), or why it cannot be merged
    there."""

    edits: list[Edit]
    #: why the hunk cannot be merged at this site (None: `edits` merge it)
    refusal: Refusal | None = None
    #: what the merge did beyond copying the hunk's lines (re-indented them, commuted them), for the evidence
    indent_note: str = ""


def _delta(pre: str, tgt: str) -> int | Refusal:
    """Indentation delta (in columns) between a pre-image line and its target line; a refusal explains a tab/space
    mix-up that has no delta."""
    a, b = indent_of(strip_cr(pre)), indent_of(strip_cr(tgt))
    if a == b:
        return 0
    if set(a + b) <= {" "} or set(a + b) <= {"\t"}:
        return len(b) - len(a)
    return Refusal(RefusalKind.INDENTATION, f"indentation changed between tabs and spaces ({a!r} -> {b!r})")


def _reindent(line: str, delta: int, unit: str) -> str | None:
    if delta == 0 or not line.strip():
        return line
    if delta > 0:
        return unit * delta + line
    lead = indent_of(line)
    if len(lead) < -delta or set(lead[:-delta]) != {unit}:
        return None
    return line[-delta:]


def merge_plan(hunk: Hunk, groups: list[Group], al: Alignment, tgt: Target) -> Plan:
    """The edits that merge the hunk at alignment `al`, or the reason it cannot be merged there.

    Each group in turn: where it lands (`_group_site`: the window its added lines replace, or an edit already
    decided), then how deep its added lines belong there (`_group_delta`), then the lines re-indented."""
    P = hunk.pre_image
    M = al.mapping
    duplicated = _changed_context_copied(hunk, al)
    if duplicated is not None:
        return Plan([], duplicated)
    edits: list[Edit] = []
    notes: list[str] = []
    for g in groups:
        site = _group_site(P, g, M, tgt, notes)
        if isinstance(site, Refusal):
            return Plan([], site)
        if isinstance(site, Edit):
            edits.append(site)
            continue
        start, end = site
        delta = _group_delta(P, g, M, tgt.lines, notes)
        if isinstance(delta, Refusal):
            return Plan([], delta)
        unit = "\t" if any(indent_of(tgt.lines[t]).startswith("\t") for t in M if t is not None) and delta else " "
        new_lines = []
        for line in g.added:
            r = _reindent(line, delta, unit)
            if r is None:
                return Plan(
                    [],
                    Refusal(
                        RefusalKind.INDENTATION, f"cannot re-indent added line `{line.strip()}` by {delta:+d} columns"
                    ),
                )
            new_lines.append(tgt.eol(r))
        if delta:
            notes.append(f"added lines re-indented by {delta:+d} columns")
        edits.append(Edit(start, end, new_lines, False))
    return Plan(edits, None, "; ".join(notes))


def _group_site(
    P: list[str], g: Group, M: list[int | None], tgt: Target, notes: list[str]
) -> tuple[int, int] | Edit | Refusal:
    """Where group `g` lands at the site mapped by `M`: the window [start, end) of target lines its re-indented added
    lines replace; or its edit, already decided (the target already has its result, or both sides changed one line
    and the line is merged); or why it cannot land there.  Appends to `notes` what the evidence must say."""
    m = len(P)
    removed_t = [M[j] for j in range(g.a, g.b)]
    if g.b > g.a and all(t is not None for t in removed_t):
        if any(removed_t[k + 1] != removed_t[k] + 1 for k in range(len(removed_t) - 1)):
            return Refusal(
                RefusalKind.INTERLEAVED,
                f"the target has lines of its own inside the lines the hunk removes "
                f"(target lines {removed_t[0] + 1}..{removed_t[-1] + 1})",
            )
        return removed_t[0], removed_t[-1] + 1
    if g.b > g.a and any(t is not None for t in removed_t):
        gone = [P[j].strip() for j in range(g.a, g.b) if M[j] is None]
        return Refusal(
            RefusalKind.REMOVED_CHANGED,
            f"the target changed lines the hunk removes: `{gone[0]}`"
            + (f" and {len(gone) - 1} more" if len(gone) > 1 else ""),
        )
    prev = M[g.a - 1] if g.a > 0 else None
    nxt = M[g.b] if g.b < m else None
    if g.b == g.a:
        anchors = _insertion_anchors(P, M, g, tgt)
        if isinstance(anchors, Refusal):
            return anchors
        prev = anchors[0] if prev is None else prev
        nxt = anchors[1] if nxt is None else nxt
    if prev is not None and nxt is not None:
        return _between_neighbours(P, g, prev, nxt, tgt, notes)
    if g.b > g.a:
        return _at_the_edge(P, g, M, prev, nxt, tgt, notes)
    if prev is not None or nxt is not None:
        return _beside_one_neighbour(g, prev, nxt, tgt)
    return Refusal(RefusalKind.UNANCHORED, "no line next to the change agrees with the target (nothing anchors it)")


def _between_neighbours(
    P: list[str], g: Group, prev: int, nxt: int, tgt: Target, notes: list[str]
) -> tuple[int, int] | Edit | Refusal:
    """`_group_site` when target lines `prev` and `nxt` anchor the group on both sides (its removed lines gone)."""
    T = tgt.lines
    added_n = [norm_text(x) for x in g.added]
    between = list(range(prev + 1, nxt))
    if between:
        if [tgt.norm[t] for t in between] == added_n:
            return Edit(prev + 1, nxt, [], True)
        if g.b > g.a:
            changed = (
                f"the target changed lines the hunk removes (target lines {prev + 2}..{nxt}: `{T[between[0]].strip()}`)"
            )
            one_line = tgt.is_py and g.b - g.a == 1 and len(g.added) == 1 and len(between) == 1
            return _line_merged(
                P, g, between[0] if one_line else None, tgt, notes, RefusalKind.REMOVED_CHANGED, changed
            )
        both = (
            f"both sides changed the same place: the target has "
            f"{len(between)} line(s) of its own between target lines {prev + 1} and "
            f"{nxt + 1} (`{T[between[0]].strip()}`) where the hunk adds lines"
        )
        commuted = commute(P, g, prev, nxt, tgt)
        if commuted is None:
            return Refusal(RefusalKind.BOTH_CHANGED, both)
        if isinstance(commuted, Refusal):
            return Refusal(RefusalKind.BOTH_CHANGED, f"{both}: {commuted.detail}")
        notes.append(commuted)
        prev, nxt = prev, prev + 1
    if g.b > g.a:
        # removed lines gone, nothing in their place: already applied when nothing is to be added
        if not added_n:
            return Edit(prev + 1, nxt, [], True)
        return Refusal(RefusalKind.REMOVED_GONE, "the target no longer has the lines the hunk removes")
    return nxt, nxt


def _at_the_edge(
    P: list[str], g: Group, M: list[int | None], prev: int | None, nxt: int | None, tgt: Target, notes: list[str]
) -> Edit | Refusal:
    """`_group_site` for a group whose removed lines are gone, anchored on one side only."""
    m = len(P)
    gone = "the target no longer has the lines the hunk removes, and no line next to them agrees"
    # a one-line change at the hunk's edge (nothing before it, or nothing after it): the target's line right next to
    # the neighbour that agrees is the changed line, if both sides inserted into it
    edge = None
    if tgt.is_py and g.b - g.a == 1 and len(g.added) == 1 and (prev is None) != (nxt is None):
        edge = nxt - 1 if prev is None and g.a == 0 else (prev + 1 if nxt is None and g.b == m else None)
    if edge is not None and not (0 <= edge < len(tgt.lines) and edge not in M):
        edge = None
    return _line_merged(P, g, edge, tgt, notes, RefusalKind.REMOVED_GONE, gone)


def _line_merged(
    P: list[str], g: Group, at: int | None, tgt: Target, notes: list[str], kind: RefusalKind, why: str
) -> Edit | Refusal:
    """A one-line change whose line the target changed too (target line `at`; None: no such line): the hunk's
    insertion merged into the target's version of the line (`containers.merge_line`), or a refusal of `kind` saying
    `why`, and why the line cannot be merged when the container rules say so."""
    merged = merge_line(P[g.a], g.added[0], tgt.lines[at], tgt, at) if at is not None else None
    if merged is None:
        return Refusal(kind, why)
    if isinstance(merged, Refusal):
        return Refusal(kind, f"{why}: {merged.detail}")
    line, note = merged
    notes.append(note)
    return Edit(at, at + 1, [tgt.eol(line)], False)


def _beside_one_neighbour(g: Group, prev: int | None, nxt: int | None, tgt: Target) -> tuple[int, int] | Edit:
    """`_group_site` for an insertion anchored on one side only: it goes right next to that neighbour, already
    applied when the added lines sit right there."""
    added_n = [norm_text(x) for x in g.added]
    start = prev + 1 if prev is not None else nxt
    if any(added_n):
        k = len(added_n)
        near = (prev + 1, prev + 1 + k) if prev is not None else (nxt - k, nxt)
        if near[0] >= 0 and [tgt.norm[t] for t in range(*near) if t < len(tgt.lines)] == added_n:
            return Edit(near[0], near[1], [], True)
    return start, start


def _group_delta(P: list[str], g: Group, M: list[int | None], T: list[str], notes: list[str]) -> int | Refusal:
    """How many columns the target moved the lines around group `g` (the nearest non-blank matched context line on
    each side, and every removed line): the one delta its added lines are re-indented by, or why there is none.
    Appends to `notes` how a drift was resolved."""
    m = len(P)
    deltas: list[tuple[int | Refusal, int]] = []
    for j in range(g.a - 1, -1, -1):
        if M[j] is not None and P[j].strip():
            deltas.append((_delta(P[j], T[M[j]]), j))
            break
    for j in range(g.a, g.b):
        if P[j].strip():
            deltas.append((_delta(P[j], T[M[j]]), j))
    for j in range(g.b, m):
        if M[j] is not None and P[j].strip():
            deltas.append((_delta(P[j], T[M[j]]), j))
            break
    bad = [d for d, _ in deltas if isinstance(d, Refusal)]
    if bad:
        return bad[0]
    dset = {d for d, _ in deltas}
    own = {d for d, j in deltas if g.a <= j < g.b}
    one_for_one = g.b - g.a == len(g.added)
    if (
        len(dset) > 1
        and g.added
        and len(own) == 1
        and (one_for_one or any(d in own for d, j in deltas if not g.a <= j < g.b))
    ):
        # the lines the hunk rewrites moved by one delta, and a neighbour with them, or the hunk rewrites them
        # line for line: the added lines replace them there (a neighbour that moved otherwise belongs to a
        # construct the target nested differently)
        desc = ", ".join(f"`{P[j].strip()}` {d:+d}" for d, j in deltas)
        notes.append(f"re-indented as the lines it replaces (indentation drift around the change: {desc})")
        dset = set(own)
    elif len(dset) > 1 and g.a == g.b and len(deltas) == 2:
        # a pure insertion written against one neighbour and set apart from the other by a blank line: it
        # belongs with the one it is written against (a statement added after `x = f()`, before a blank line
        # and code the target wrapped in a block)
        (d_before, jb), (d_after, ja) = deltas
        if jb == g.a - 1 and g.b < m and not P[g.b].strip():
            side, d = f"`{P[jb].strip()}`", d_before
        elif ja == g.b and g.a > 0 and not P[g.a - 1].strip():
            side, d = f"`{P[ja].strip()}`", d_after
        else:
            side = None
        if side is not None:
            notes.append(
                f"indented as {side}, the line it is written against (a blank line parts it from the other, "
                f"which moved by {d_after if d == d_before else d_before:+d})"
            )
            dset = {d}
    if len(dset) > 1 and g.added:
        desc = ", ".join(f"`{P[j].strip()}` {d:+d}" for d, j in deltas)
        return Refusal(
            RefusalKind.INDENTATION,
            f"inconsistent indentation drift around the change ({desc}): cannot tell how deep the added lines belong",
        )
    return dset.pop() if dset else 0


def _changed_context_copied(hunk: Hunk, al: Alignment) -> Refusal | None:
    """A context line the target changed or deleted, of which the hunk adds a copy: a conflict.

    When a hunk duplicates code (e.g. adds a second call whose arguments repeat the first call's), the diff had to
    choose which copy its context lines belong to, and that choice is arbitrary. If the target changed one of those
    repeated lines, keeping "the target's version of the context line" puts the target's change into whichever copy
    the diff happened to call context — possibly the new one, leaving the hunk's stale text in the old one. Nothing
    in the hunk tells which copy the target's change belongs to, so the merge is refused rather than guessed.
    """
    pre_ops = [op for op, _ in hunk.lines if op != "+"]
    added = {norm_text(x) for x in hunk.added if _has_identity_text(x)}
    if not added:
        return None
    P = hunk.pre_image
    for j, t in enumerate(al.mapping):
        if t is None and pre_ops[j] == " " and _has_identity_text(P[j]) and norm_text(P[j]) in added:
            return Refusal(
                RefusalKind.COPIED_CONTEXT,
                f"the target changed the context line `{P[j].strip()}`, and the hunk adds a copy of that line: "
                "which copy the target's change belongs to depends on how the diff aligned the repeated lines, "
                "so the merge is not decided here",
            )
    return None


def _has_identity_text(line: str) -> bool:
    """Whether a line says something (a name), unlike `)`, `],` or a blank line that repeat everywhere."""
    return re.search(r"[A-Za-z_]\w", line) is not None


#: the head that names what a line is about: an assigned, annotated or called name (``x =``, ``self.y[i] +=``,
#: ``name:``, ``call(``), a keyword argument, a def/class name
_IDENTITY = re.compile(
    r"\s*(?:(?:async\s+)?(def|class)\s+(\w+)|(\w+(?:\.\w+|\[[^\]]*\])*)\s*([-+*/%&|^@]?=(?!=)|:|\())"
)


def _identity(line: str) -> str | None:
    """What a line is about, when its head names it (see `_IDENTITY`); None for any other line (``return x``,
    ``)``, a comment): such a line has no identity a changed version of it could keep."""
    m = _IDENTITY.match(line)
    if m is None:
        return None
    if m.group(1):
        return f"{m.group(1)} {m.group(2)}"
    head = m.group(3)
    if keyword.iskeyword(head.split(".")[0].split("[")[0]):
        return None
    return f"{head} {m.group(4)}"


#: a line that is one of several peers whose order among themselves means nothing: another import, def, class or
#: decorator the release dropped next to the hunk's does not take the hunk's site with it
_PEER_LINE = re.compile(r"\s*(?:from\s|import\s|(?:async\s+)?def\s|class\s|@)")
_STRING_ELEMENT = re.compile(r"[rbuRBU]{0,2}(['\"])([^'\"\\]+)\1,?")
#: the head an element or statement is named by: ``x=``, ``x +=``, ``x:``, ``x(``, ``x,``, ``*x``, a bare ``x``
_ELEMENT_HEAD = re.compile(r"\**([A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*)\s*(?:[-+*/%&|^@]?=(?!=)|:|\(|,|$)")


def _element_name(line: str) -> str | None:
    """The name an element or statement is known by anywhere in a file: `x` for ``x=…``, ``x: T``, ``x(…)`` or
    ``x,``; the last part of a dotted head (``self.propose(`` -> `propose`); the text of a string element
    (``"name",``). None for an import, def, class or decorator (see `_PEER_LINE`), a keyword statement, a
    closing bracket or a comment: nothing a search of the file could find gone."""
    body = strip_cr(line).strip()
    if _PEER_LINE.match(body):
        return None
    s = _STRING_ELEMENT.fullmatch(body)
    if s is not None:
        text = s.group(2).strip()
        return text if sum(c.isalnum() for c in text) >= 3 else None
    m = _ELEMENT_HEAD.match(body)
    if m is None or keyword.iskeyword(m.group(1).split(".")[0]):
        return None
    name = m.group(1).rsplit(".", 1)[-1]
    return name if len(name) >= 2 else None


def _insertion_anchors(
    P: list[str], M: list[int | None], g: Group, tgt: Target
) -> tuple[int | None, int | None] | Refusal:
    """Check the lines that anchor a pure insertion, and re-find the changed ones.

    An insertion sits between the nearest non-blank pre-image lines before and after it (its anchors: the statement
    or element it follows, the one it precedes).  3-way merging treats a change touching the other side's change as
    a conflict; here an anchor the target changed (the alignment has no line for it) still anchors the insertion
    when exactly one target line where it was keeps its identity — the same name assigned, annotated, called or
    passed (``source: A,`` -> ``source: A | None = None,``).  An anchor before the insertion that was changed into
    something else (``x[i] = 0`` -> ``x[i].fill_(0)``, ``a * b,`` -> ``c,``), or deleted with every mention of its
    name (``actorder: X = None,`` gone, and nothing in the file names `actorder`), means the insertion's site is no
    longer there: the refusal is returned.  (Deleted while the file still names it, it says nothing: the release
    may have moved the value elsewhere, and the neighbours still anchor the insertion.)  Otherwise (re-found target
    line of the anchor before / after, when it is the line right next to the insertion; else None), so that the
    usual gap rules apply around it."""
    m = len(P)
    found: list[int | None] = [None, None]
    for side, (j, step) in enumerate(((g.a - 1, -1), (g.b, 1))):
        while 0 <= j < m and not P[j].strip():
            j += step
        if not 0 <= j < m or M[j] is not None:
            continue
        ident = _identity(strip_cr(P[j]))
        # the target lines the anchor could have become: between the nearest agreeing pre-image lines around it
        # (at the hunk's edge: as many lines as the pre-image has there, and one more)
        jp = next((k for k in range(j - 1, -1, -1) if M[k] is not None), None)
        jn = next((k for k in range(j + 1, m) if M[k] is not None), None)
        if jp is None and jn is None:
            continue
        lo = M[jp] + 1 if jp is not None else max(0, M[jn] - (jn - j) - 1)
        hi = M[jn] if jn is not None else min(len(tgt.lines), M[jp] + (j - jp) + 1)
        same = [t for t in range(lo, hi) if ident is not None and _identity(strip_cr(tgt.lines[t])) == ident]
        if len(same) == 1:
            if j == (g.a - 1 if side == 0 else g.b):
                found[side] = same[0]
        elif side == 0:
            in_place = [t for t in range(lo, hi) if tgt.norm[t]]
            if in_place:
                t = in_place[-1]
                return Refusal(
                    RefusalKind.SITE_GONE,
                    f"the line the insertion follows, `{P[j].strip()}`, was changed in the target (target line "
                    f"{t + 1}: `{tgt.lines[t].strip()}`): the site the hunk was made for is gone",
                )
            name = _element_name(P[j]) if tgt.is_py else None
            if name is not None and not tgt.names(name):
                return Refusal(
                    RefusalKind.SITE_GONE,
                    f"the line the insertion follows, `{P[j].strip()}`, is gone from the target, and nothing in "
                    f"it names `{name}` any more: the site the hunk was made for is gone",
                )

    before = found[0] if found[0] is not None else (M[g.a - 1] if g.a > 0 else None)
    after = found[1] if found[1] is not None else (M[g.b] if g.b < m else None)
    if before is not None and after is not None and before >= after:
        return Refusal(
            RefusalKind.SITE_GONE,
            f"the lines around the insertion are in another order in the target (target lines {before + 1} "
            f"and {after + 1}): the site the hunk was made for is gone",
        )
    return found[0], found[1]


def spliced(tgt: Target, edits: list[Edit]) -> tuple[int, int, list[str]]:
    """(start, end, lines): the window [start, end) of target lines the edits span, and the lines that replace it
    (the target's own lines between the edits kept)."""
    start = min(e.start for e in edits)
    end = max(e.end for e in edits)
    replacement: list[str] = []
    pos = start
    for e in sorted(edits, key=lambda e: e.start):
        replacement.extend(tgt.lines[pos : e.start])
        replacement.extend(e.lines)
        pos = e.end
    replacement.extend(tgt.lines[pos:end])
    return start, end, replacement


def approximate_plan(groups: list[Group], al: Alignment) -> Plan | None:
    """Where the changes of a site that cannot be merged would go (for its scope check only)."""
    edits = []
    m = len(al.mapping)
    for g in groups:
        removed = [al.mapping[j] for j in range(g.a, g.b) if al.mapping[j] is not None]
        prev = al.mapping[g.a - 1] if g.a > 0 else None
        nxt = al.mapping[g.b] if g.b < m else None
        at = removed[0] if removed else (prev + 1 if prev is not None else nxt)
        if at is None:
            return None
        edits.append(Edit(at, at, list(g.added), False))
    return Plan(edits)


def site_key(plan: Plan, al: Alignment) -> tuple:
    """What tells two sites apart: where their changes land (the alignment itself, for a site with no plan)."""
    if plan.refusal is None:
        return tuple((e.start, e.end) for e in plan.edits)
    return ("unplannable",) + tuple(al.mapping)
