"""The container rules: when both sides inserted at one point of a container, whether the insertions commute.

For the elements of one container (parameters, call arguments, imported names, list/tuple/set/dict displays,
``__all__``, enum members) the insertions commute: the hunk's element goes right after its anchor, the target's stay
after it, where order carries no meaning (keyword arguments, imported names, set/dict, ``__all__``, enum members,
keyword-only parameters) or the anchor fixes it (the hunk appends); an ordered element the hunk puts *between* two,
where the target put one, is a decision and a conflict (`commute`).  Both sides inserting into one line of a container
merge under the same rules (`merge_line`).
"""

from __future__ import annotations

import re

from ..scope import PythonLayout
from .groups import Group
from .refusal import Refusal, RefusalKind
from .target import Target, indent_of, strip_cr

#: a keyword argument or ``**mapping`` element: its position among keyword arguments carries no meaning
_KEYWORD_ELEMENT = re.compile(r"^\s*(?:\*\*|\w+\s*=(?!=))")
#: a bare ``*`` or ``*args`` parameter: the parameters after it are keyword-only
_STAR_PARAMETER = re.compile(r"(?:^|[(,])\s*\*(?!\*)\s*(?:\w+\s*(?::[^,]*)?)?(?:,|$)")
#: an enum's bases: its members are named, their order is only their iteration order
_ENUM_BASES = re.compile(r"^\s*class\s+\w+\s*\((?:[^)]*[\s,(.])?(?:Enum|IntEnum|StrEnum|Flag|IntFlag)\s*[,)]")
_MEMBER = re.compile(r"^\s*[A-Za-z_]\w*\s*(?::[^=]+)?=(?!=)")


def _order_free(role: str, opener: str, elements: list[str], before: list[str]) -> str | None:
    """What makes order carry no meaning among `elements` (element texts) of a container with this role opened by
    the line `opener` ("imported names", "keyword arguments", ...), or None when their order carries meaning.
    `before`: the container's lines up to the insertion point (a bare ``*`` there makes parameters keyword-only)."""
    if role == "import-names":
        return "imported names"
    if role in ("set", "dict"):
        return "set elements" if role == "set" else "dict entries"
    if role in ("list", "tuple") and re.match(r"^\s*__all__\s*[:=+]", opener):
        return "the names of `__all__`"
    code = [x for x in elements if x.strip() and not x.strip().startswith("#")]
    if role == "call-arguments" and code and all(_KEYWORD_ELEMENT.match(x) for x in code):
        return "keyword arguments"
    if role == "parameters" and any(_STAR_PARAMETER.search(x) for x in before):
        return "keyword-only parameters"
    return None


def _complete_elements(lines: list[str]) -> bool:
    """Whether `lines` are whole elements of a bracketed container: balanced, and the last code line ends with a
    comma (an element followed by further elements)."""
    lay = PythonLayout(lines)
    if lay.unmatched_closers or lay.frame_at[len(lines)] is not None or lay.in_string_at[len(lines)]:
        return False
    code = [ln.split("#", 1)[0].rstrip() for ln in lines if ln.strip() and not ln.strip().startswith("#")]
    return bool(code) and code[-1].endswith(",")


def commute(P: list[str], g: Group, prev: int, nxt: int, tgt: Target) -> str | Refusal | None:
    """Both sides inserted at the same point of a container: the hunk's element goes right after its anchor (the
    element before it, which the alignment found by its text), the target's own elements stay after it.

    Applies to the elements of one bracketed container (parameters, call arguments, imported names, list, tuple,
    set and dict displays, ``__all__``) and to the members of an enum.  Done where order carries no meaning
    (keyword arguments, imported names, set elements, dict entries, ``__all__``, enum members, keyword-only
    parameters) or where the anchor fixes it: in an ordered container (positional parameters or arguments, a list
    or tuple) only when the hunk appends (the pre-image line after its insertion closes the container), so that
    "right after the anchor" is all the hunk says about its position.  An element the hunk puts *between* two
    elements, where the target put one of its own, is a decision (a priority list), refused.

    Returns the evidence note, a `Refusal`, or None when the site is no such container."""
    if not tgt.is_py:
        return None
    T = tgt.lines
    lay = tgt.layout
    lay.ensure(nxt)
    between = T[prev + 1 : nxt]
    added = g.added
    frame = lay.frame_at[prev + 1]
    if frame is None:
        return _commute_members(prev, nxt, between, added, tgt)
    role = frame.role
    if role not in ("parameters", "call-arguments", "import-names", "list", "tuple", "set", "dict"):
        return None
    # the anchor, the target's own lines and the line after them are elements of this very container
    if lay.frame_at[nxt] is not frame or not (lay.frame_at[prev] is frame or frame.line == prev):
        return None
    for k in range(prev + 1, nxt):
        f = lay.frame_at[k]
        while f is not None and f is not frame:
            f = f.parent
        if f is None:
            return None
    anchor = T[prev].split("#", 1)[0].rstrip() if "#" in T[prev] else T[prev].rstrip()
    if frame.line != prev and not anchor.endswith(","):
        return None
    if not _complete_elements(added) or not _complete_elements(between):
        return None
    theirs = next(x.strip() for x in between if x.strip())
    opener = T[frame.line].strip()
    free = _order_free(role, opener, added + between, [T[k] for k in range(frame.line, prev + 1)])
    where = f"the {role} opened at `{opener}`"
    if free is not None:
        return (
            f"commuted: the target's own `{theirs}` stays after the hunk's lines, which follow their anchor "
            f"`{T[prev].strip()}` in {where}; order carries no meaning ({free})"
        )
    closes = P[g.b].strip()[:1] in (")", "]", "}") if g.b < len(P) else False
    if closes:
        return (
            f"commuted: the target's own `{theirs}` stays after the hunk's lines, which follow their anchor "
            f"`{T[prev].strip()}` in {where}; the anchor fixes the order (the hunk appends right after it)"
        )
    return Refusal(
        RefusalKind.ORDER,
        f"in {where} order carries meaning, and the hunk puts its lines between `{T[prev].strip()}` and "
        f"`{T[nxt].strip()}`, where the target put `{theirs}`: which comes first is a decision",
    )


def single_insertion(base: str, new: str) -> tuple[int, str] | None:
    """(offset, text) when `new` is `base` with one run of text inserted, else None."""
    if len(new) <= len(base):
        return None
    p = 0
    while p < len(base) and base[p] == new[p]:
        p += 1
    extra = len(new) - len(base)
    if base[p:] != new[p + extra :]:
        return None
    return p, new[p : p + extra]


def merge_line(base: str, ours: str, theirs: str, tgt: Target, at: int) -> tuple[str, str] | Refusal | None:
    """Both sides inserted into the same line of a container (``f(a, b)``, ``[x, y]``, ``from m import a, b``): the
    hunk's insertion merged into the target's version of the line, as `commute` does for element lines.  Insertions
    at different points of the line are both kept; at the same point the hunk's goes first, under `commute`'s order
    rules.  `at` is the target line (its brackets open before it count, and the line after it says whether an
    insertion at the end of the line appends).  None when the line is not two insertions into brackets (or an
    import list)."""
    base, ours, theirs = strip_cr(base), strip_cr(ours), strip_cr(theirs)
    mine, other = single_insertion(base, ours), single_insertion(base, theirs)
    if mine is None or other is None:
        return None
    (p, text), (q, text2) = mine, other
    lay_t = tgt.layout
    lay_t.ensure(at + 1)
    outer = lay_t.frame_at[at]
    roles = []
    for offset in (p, q):
        lay = PythonLayout([base[:offset]])
        frame = lay.frame_at[1]
        if lay.in_string_at[1] or lay.unmatched_closers:
            return None
        if frame is not None:
            roles.append(frame.role)
        elif outer is not None:
            roles.append(outer.role)
        elif re.match(r"^\s*from\s+\S+\s+import\s", base):
            roles.append("import-names")
        else:
            return None
    if p != q:
        first, second = sorted([(p, text), (q, text2)])
        merged = base[: first[0]] + first[1] + base[first[0] : second[0]] + second[1] + base[second[0] :]
        return (
            merged,
            f"merged in the line: the hunk's `{text.strip()}` and the target's `{text2.strip()}` are separate",
        )
    role = roles[0]
    opener = strip_cr(tgt.lines[outer.line]) if outer is not None and roles[0] == outer.role else base
    free = _order_free(roles[0], opener, [text.lstrip(", "), text2.lstrip(", ")], [base[:p]])
    merged = base[:p] + text + text2 + base[p:]
    what = f"merged in the line: the target's own `{text2.strip(', ')}` stays after the hunk's `{text.strip(', ')}`"
    if free is not None:
        return merged, f"{what}; order carries no meaning ({free})"
    rest = base[p:].strip() or (strip_cr(tgt.lines[at + 1]).strip() if at + 1 < len(tgt.lines) else "")
    if rest.lstrip(",")[:1] in (")", "]", "}"):
        return merged, f"{what}; the anchor fixes the order (the hunk appends right after it)"
    return Refusal(
        RefusalKind.ORDER,
        f"in the {role} order carries meaning, and both sides inserted at the same point of the line: "
        "which comes first is a decision",
    )


def _commute_members(prev: int, nxt: int, between: list[str], added: list[str], tgt: Target) -> str | None:
    """`commute` for the members of an enum: one-line ``NAME = value`` statements of a class with an enum base."""
    lay = tgt.layout
    T = tgt.lines
    if not lay.code_start[prev] or not _MEMBER.match(T[prev]) or not lay.code_start[nxt]:
        return None
    members = [x for x in added + between if x.strip() and not x.strip().startswith("#")]
    if not members or not all(_MEMBER.match(x) and PythonLayout([x]).frame_at[1] is None for x in members):
        return None
    indent = lay.indent[prev]
    if any(len(indent_of(x).expandtabs(8)) != indent for x in members):
        return None
    heads = lay.header_lines(prev, indent)
    if not heads or not _ENUM_BASES.match(T[heads[0]]):
        return None
    theirs = next(x.strip() for x in between if x.strip())
    return (
        f"commuted: the target's own `{theirs}` stays after the hunk's lines, which follow their anchor "
        f"`{T[prev].strip()}` among the members of `{T[heads[0]].strip()}`; order carries no meaning (enum members)"
    )
