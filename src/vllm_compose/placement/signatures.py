"""The signature-only fallback: a hunk whose one change adds a parameter to a def's signature, which its context
cannot place.

One line rewritten (``def f(a) -> T:`` -> ``def f(a, b=None) -> T:``), where the target re-flowed the signature,
changed its annotations or the body around it: the parameter goes into the signature of the only def of that name at
the same level, inside the classes the hunk shows, right after the same parameter, under the container rules' order
(`containers.commute`; `place_signature`).
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass

from ..patchfile import Hunk
from ..scope import HunkIntent, PythonLayout
from ..verdicts import Verdict
from .containers import single_insertion
from .groups import hunk_groups
from .outcome import Placement
from .refusal import Refusal, RefusalKind
from .target import Target, indent_of, strip_cr

_DEF_HEAD = re.compile(r"^([ \t]*)(?:async\s+)?def\s+(\w+)\s*\(")
#: most lines a signature may span for `_signature_header`
_MAX_HEADER = 60


@dataclass
class _Param:
    """One element of a signature: a parameter (``name``), or a marker (``/``, ``*``, ``*args``, ``**kwargs``);
    `end` is where its text ends (1-based line, 0-based column of the header text), None for a bare marker."""

    key: str
    start: tuple[int, int] | None
    end: tuple[int, int] | None


def _signature_header(lines: list[str], d: int) -> int | None:
    """The index of the last line of the def header starting at line d (the line whose code ends with the colon,
    outside brackets), or None."""
    lay = PythonLayout(lines[d : d + _MAX_HEADER])
    for k in range(len(lay.lines)):
        if lay.frame_at[k + 1] is None and not lay.in_string_at[k + 1]:
            code = lay.lines[k].split("#", 1)[0].rstrip() if "#" in lay.lines[k] else lay.lines[k].rstrip()
            return d + k if code.endswith(":") else None
    return None


def _signature(header: list[str]) -> tuple[str, list[_Param]] | None:
    """(def name, elements in order) of a def header given as its lines (the first one's indentation is dropped, so
    columns on the first line are counted from the ``def``), or None when it does not parse as one."""
    first = strip_cr(header[0])
    text = "\n".join([first.lstrip()] + [strip_cr(x) for x in header[1:]]) + "\n    pass\n"
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError):
        return None
    if len(tree.body) != 1 or not isinstance(tree.body[0], (ast.FunctionDef, ast.AsyncFunctionDef)):
        return None
    fn = tree.body[0]
    a = fn.args

    def param(node, default=None) -> _Param:
        end = (node.end_lineno, node.end_col_offset)
        if default is not None:
            end = max(end, (default.end_lineno, default.end_col_offset))
        return _Param(node.arg, (node.lineno, node.col_offset), end)

    positional = a.posonlyargs + a.args
    defaults = [None] * (len(positional) - len(a.defaults)) + list(a.defaults)
    out = [param(n, dv) for n, dv in zip(a.posonlyargs, defaults, strict=False)]
    if a.posonlyargs:
        out.append(_Param("/", None, None))
    out += [param(n, dv) for n, dv in zip(a.args, defaults[len(a.posonlyargs) :], strict=True)]
    if a.vararg is not None:
        out.append(_Param("*" + a.vararg.arg, None, (a.vararg.end_lineno, a.vararg.end_col_offset)))
    elif a.kwonlyargs:
        out.append(_Param("*", None, None))
    out += [param(n, dv) for n, dv in zip(a.kwonlyargs, a.kw_defaults, strict=True)]
    if a.kwarg is not None:
        out.append(_Param("**" + a.kwarg.arg, None, None))
    return fn.name, out


def _segment(header: list[str], start: tuple[int, int], end: tuple[int, int]) -> str | None:
    """The header text from `start` to `end` (as `_signature` counts them), when it lies on one line."""
    if start[0] != end[0]:
        return None
    line = strip_cr(header[start[0] - 1])
    if start[0] == 1:
        line = line.lstrip()
    return line[start[1] : end[1]]


@dataclass
class _NewParameter:
    """What a signature-only hunk adds: one parameter of the function `name`, after `anchor` and before `follower`
    (None: first / last) in the hunk's signature."""

    name: str
    param: _Param
    #: the new parameter's text in the hunk (``b: int = 0``)
    text: str
    anchor: str | None
    follower: str | None
    #: the parameters before it include a bare ``*`` or ``*args``: its position among the others means nothing
    keyword_only: bool
    #: nothing, or only ``*``, ``*args``, ``**kwargs`` or ``/``, follows it: "right after the anchor" says it all
    appends: bool
    #: the def's line in the hunk is indented (a method, or a function inside a block)
    nested: bool
    #: the classes and blocks the hunk shows around the def
    shown: HunkIntent


@dataclass
class _SignatureSite:
    """A def of the function's name in the target, and what the new parameter finds in its signature."""

    line: int  # 0-based target line of the def
    header: list[str]  # the header's lines
    params: list[_Param]
    #: element position the new parameter goes at (None: it does not go in)
    at: int | None = None
    #: the target's parameter at that position (None: the signature ends there)
    theirs: str | None = None
    #: the target already has the parameter, with the same text
    already: bool = False
    #: why the parameter cannot go into this signature
    refusal: Refusal | None = None


def place_signature(hunk: Hunk, tgt: Target) -> Placement | None:
    """Place a hunk whose one change adds a parameter to a signature (``def f(a):`` -> ``def f(a, b=None):``) that
    its context could not place: in the target's signature of the same function, right after the same parameter.

    The function is found by its name: the only def of that name at the same level (a method for a method, a
    module-level function for one) inside the classes and blocks the hunk shows, whatever the target did to the
    rest of its signature (re-flowed it over several lines, annotated its return, added parameters of its own) and
    to the lines around it.  Two defs of that name are a conflict: only the ``@@`` section could tell them apart,
    and it is evidence of order (see `scope_check.shows_def_line`).  The parameter it follows must be in the target's
    signature, and the new one must not be (with the same text: already applied).  The order rules are those of
    `containers.commute`: the new parameter goes right after its anchor when the hunk appends (nothing, or only
    ``*``, ``*args``, ``**kwargs``, follows it) or it is keyword-only; a parameter the hunk puts *between* two others
    needs the same two next to each other in the target.  None when the hunk is not such a change or no single site
    is found (the conflict stands)."""
    new = _new_parameter(hunk)
    if new is None:
        return None
    sites = _signature_sites(new, tgt)
    # several functions of that name: nothing but the `@@` section, evidence of order that drift changes, could
    # choose (see `scope_check.shows_def_line`), so the conflict stands
    if len(sites) != 1 or sites[0].refusal is not None:
        return None
    site = sites[0]
    lay = tgt.layout
    t, name, anchor, theirs = site.line, new.name, new.anchor, site.theirs
    where = f"the signature of `{name}` at line {t + 1}"
    if site.already:
        return Placement(
            hunk,
            Verdict.ALREADY_APPLIED,
            landing_line=t + 1,
            scope=lay.scope(t),
            score=0.0,
            evidence=f"signature: {where} already has `{new.text}`",
        )
    edit = _signature_edit(tgt, t, site.header, site.params, site.at, new.text)
    if edit is None:
        return None
    start, end, lines = edit
    if theirs is None or new.appends or theirs == new.follower:
        order = (
            "the hunk appends right after it"
            if new.appends and theirs is not None and theirs != new.follower
            else "the same neighbours as in the hunk"
        )
    else:
        order = "keyword-only parameters: order carries no meaning"
    after = f"after `{anchor}`" if anchor is not None else "first"
    return Placement(
        hunk,
        Verdict.MERGED,
        start=start,
        end=end,
        replacement=lines,
        landing_line=start + 1,
        scope=lay.scope(start),
        score=0.0,
        evidence=(
            f"signature: the hunk adds parameter `{new.text}` to `{name}` {after}; the context does not place it, "
            f"{where} does (the function of that name"
            + (" in the classes the hunk shows" if new.shown.headers else "")
            + f"), the parameter merged {after} ({order})"
        ),
    )


def _new_parameter(hunk: Hunk) -> _NewParameter | None:
    """The parameter the hunk adds, when its one change rewrites one line of a def's signature to add one
    parameter (not ``*args``, ``**kwargs`` or ``/``, nor right after ``*``, ``/`` or ``**kwargs``); else None."""
    groups = hunk_groups(hunk)
    if len(groups) != 1:
        return None
    g = groups[0]
    if g.b - g.a != 1 or len(g.added) != 1:
        return None
    P = hunk.pre_image
    base_line, ours_line = strip_cr(P[g.a]), strip_cr(g.added[0])
    if single_insertion(base_line, ours_line) is None:
        return None
    d = next((k for k in range(g.a, -1, -1) if _DEF_HEAD.match(P[k])), None)
    if d is None:
        return None
    e = _signature_header(P, d)
    if e is None or not d <= g.a <= e:
        return None
    base_header = P[d : e + 1]
    ours_header = list(base_header)
    ours_header[g.a - d] = g.added[0]
    base, ours = _signature(base_header), _signature(ours_header)
    if base is None or ours is None or base[0] != ours[0]:
        return None
    bkeys, okeys = [p.key for p in base[1]], [p.key for p in ours[1]]
    i = next((k for k in range(len(bkeys)) if bkeys[k] != okeys[k]), len(bkeys))
    if len(okeys) != len(bkeys) + 1 or okeys[:i] + okeys[i + 1 :] != bkeys:
        return None
    new = ours[1][i]
    if new.start is None or new.key.startswith("*") or new.key == "/":
        return None
    new_text = _segment(ours_header, new.start, new.end)
    if new_text is None:
        return None
    anchor = bkeys[i - 1] if i > 0 else None
    follower = bkeys[i] if i < len(bkeys) else None
    if anchor is not None and (anchor in ("*", "/") or anchor.startswith("**")):
        return None
    hunk_lay = PythonLayout(P[: d + 1])
    heads = [k for k in hunk_lay.header_lines(d, hunk_lay.indent[d]) if hunk_lay.is_header(k)]
    return _NewParameter(
        name=base[0],
        param=new,
        text=new_text,
        anchor=anchor,
        follower=follower,
        keyword_only=any(k.startswith("*") and not k.startswith("**") for k in bkeys[:i]),
        appends=follower is None or follower.startswith("*") or follower == "/",
        nested=bool(indent_of(strip_cr(P[d]))),
        shown=HunkIntent(None, None, tuple(hunk_lay.header_key(k) for k in heads)),
    )


def _signature_sites(new: _NewParameter, tgt: Target) -> list[_SignatureSite]:
    """Every def of the function's name in the target at the hunk's level, inside the classes and blocks the hunk
    shows, with where the new parameter goes in its signature or why it cannot."""
    lay = tgt.layout
    sites = []
    want = re.compile(rf"^[ \t]*(?:async\s+)?def\s+{re.escape(new.name)}\s*\(")
    for t, line in enumerate(tgt.lines):
        if f"def {new.name}" not in line or not want.match(line):
            continue
        lay.ensure(t)
        if not lay.code_start[t]:
            continue
        te = _signature_header(tgt.lines, t)
        if te is None:
            continue
        header = tgt.lines[t : te + 1]
        sig = _signature(header)
        if sig is None or sig[0] != new.name:
            continue
        if bool(indent_of(line)) != new.nested or new.shown.accepts(lay.scope(t)) is not None:
            continue  # a method is never a module-level function (nor the other way round)
        site = _SignatureSite(t, header, sig[1])
        tkeys = [p.key for p in sig[1]]
        if new.param.key in tkeys:
            have = sig[1][tkeys.index(new.param.key)]
            # the same text: already applied; a parameter of that name of the target's own: a conflict
            if have.start is not None and _segment(header, have.start, have.end) == new.text:
                site.already = True
            else:
                site.refusal = Refusal(
                    RefusalKind.TAKEN, f"the target's `{new.name}` has a parameter `{new.param.key}` of its own"
                )
        elif new.anchor is not None and new.anchor not in tkeys:
            site.refusal = Refusal(
                RefusalKind.SITE_GONE,
                f"the parameter the hunk follows, `{new.anchor}`, is gone from the target's `{new.name}`",
            )
        else:
            site.at = tkeys.index(new.anchor) + 1 if new.anchor is not None else 0
            site.theirs = tkeys[site.at] if site.at < len(tkeys) else None
            if not new.appends and not new.keyword_only and site.theirs != new.follower:
                site.refusal = Refusal(
                    RefusalKind.ORDER,
                    f"the hunk puts `{new.text}` between `{new.anchor}` and `{new.follower}`, where the target has "
                    f"`{site.theirs}`: which comes first is a decision",
                )
        sites.append(site)
    return sites


def _signature_edit(
    tgt: Target, t: int, header: list[str], params: list[_Param], at: int, new_text: str
) -> tuple[int, int, list[str]] | None:
    """(start, end, lines) replacing target lines [start, end) to put `new_text` at element position `at` of the
    signature whose header starts at target line t: on a line of its own when the anchor stands alone on its line
    (vertical layout), else spliced in as ``, new``."""
    T = tgt.lines
    lead = len(indent_of(strip_cr(T[t])))

    def pos(p: tuple[int, int]) -> tuple[int, int]:
        return t + p[0] - 1, p[1] + (lead if p[0] == 1 else 0)

    if at > 0:
        anchor = params[at - 1]
        if anchor.end is None:
            return None
        row, col = pos(anchor.end)
        line = strip_cr(T[row])
        rest = line[col:]
        start_ok = anchor.start is not None and anchor.start[0] == anchor.end[0]
        alone = (
            start_ok
            and row != t
            and not line[: pos(anchor.start)[1]].strip()
            and re.fullmatch(r"\s*,?\s*(?:#.*)?", rest) is not None
        )
        if alone:
            added = tgt.eol(indent_of(line) + new_text + ",")
            if rest.lstrip().startswith(","):
                return row + 1, row + 1, [added]
            return row, row + 1, [tgt.eol(line[:col] + "," + rest), added]  # the comma the anchor lacked
        return row, row + 1, [tgt.eol(line[:col] + ", " + new_text + rest)]
    if params:
        first = params[0]
        if first.start is None:
            return None
        row, col = pos(first.start)
        line = strip_cr(T[row])
        if row != t and not line[:col].strip():
            return row, row, [tgt.eol(indent_of(line) + new_text + ",")]
        return row, row + 1, [tgt.eol(line[:col] + new_text + ", " + line[col:])]
    line = strip_cr(T[t])
    m = _DEF_HEAD.match(line)
    if m is None or not line[m.end() :].lstrip().startswith(")"):
        return None
    return t, t + 1, [tgt.eol(line[: m.end()] + new_text + line[m.end() :])]
