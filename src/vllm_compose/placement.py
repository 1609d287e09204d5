"""Where a hunk belongs in a target file, and the 3-way-style merge that puts it there.

A hunk is placed without a base tree.  Its *pre-image* (context and removed lines) is what the patch author's file
looked like; its *post-image* (context and added lines) is what the author wanted; the target file is what we have.

Finding sites
    Target lines are indexed by their whitespace-collapsed text.  Every occurrence of a distinctive pre-image line
    (one that occurs at most `_MAX_VOTER_HITS` times) is a *hit*; hits vote for the window start they imply.  For
    each hit, strongest window first, a dynamic-programming alignment of the whole pre-image is computed that is
    forced through that hit (prefix aligned before it, suffix after it), so two overlapping or nearby copies of the
    same context are both found.  Each pre-image line ends up as:

    ============  ==========================================================  ======
    agreement     meaning                                                     credit
    ============  ==========================================================  ======
    exact         byte-identical                                              1.00
    line-end      identical but for a trailing ``\\r``                         0.90
    whitespace    identical once runs of whitespace are collapsed             0.90
    indentation   identical but for leading whitespace                        0.75
    missing       no target line (the target deleted it, or changed it:       0
                  a missing line facing an extra target line is "changed")
    ============  ==========================================================  ======

    Credit is weighted by how informative a line is (a blank line or a lone ``)`` counts 0.2, a line with ten or
    more letters/digits counts 1); every extra target line inside the aligned window costs 0.02.  The *score* is
    credit / total weight (0..1).  The line number of the ``@@`` header is never used to choose between sites: it
    only tells ``exact`` from ``offset``.

Choosing
    Sites are compared by where their changes land.  A site is acceptable when its score reaches `MIN_SCORE` and,
    for Python, its scope agrees with what the hunk implies (see `scope.HunkIntent`: role of the change — inside a
    call's parentheses, a signature, a list, a statement block —, the compound-statement headers the hunk shows,
    and the def/class its ``@@`` section names).  The only verbatim copy of the pre-image is checked against the
    section alone: the hunk's own lines are the target's lines there, so what they imply cannot disagree with it
    but by a guess about what the hunk does not show.  The best acceptable site must be unique: a verbatim site beats
    any non-verbatim one; otherwise it must out-score every other site by `MIN_MARGIN` weighted lines (about one
    informative line).  Anything else is a conflict with the candidate sites as evidence — never a guess.
    The ``@@`` section rule is evidence of order (the definition above the hunk), not of enclosure, when the hunk
    shows a def/class line of its own before its change: then a site rejected by that rule alone but scoring about
    as well as the best (see `_too_close`) makes the choice ambiguous.  For a change inside brackets, the context
    lines the hunk shows inside the same brackets must be inside the site's brackets in the target too (an
    alignment may stitch two look-alike calls together).

Merging (hunk pre-image = base, post-image = ours, target window = theirs)
    Context lines always come from the target, so whatever the target changed around the hunk is kept.  Each
    change group (a run of removed/added lines) must be anchored:

    - removed lines must all be present, adjacent to each other in the target;
    - added lines go between the target lines matching the pre-image lines around them.  When both neighbours are
      present and the target has lines of its own between them, both sides changed the same gap: conflict (unless
      those lines are the added lines: already applied) — but for elements of one container (parameters, call
      arguments, imported names, list/tuple/set/dict displays, ``__all__``, enum members) the insertions commute:
      the hunk's element goes right after its anchor, the target's stay after it, where order carries no meaning
      (keyword arguments, imported names, set/dict, ``__all__``, enum members, keyword-only parameters) or the
      anchor fixes it (the hunk appends); an ordered element the hunk puts *between* two, where the target put one,
      is a decision and a conflict (`_commute`).  Both sides inserting into one line of a container merge under the
      same rules (`_merge_line`).  When one neighbour is missing (the target deleted or
      changed it), the present neighbour anchors the insertion — but the nearest non-blank line the insertion
      follows (what it continues: the statement, parameter, argument or element before it) must not have been
      changed: a target line of its own where that line was is a conflict, unless exactly one such line keeps its
      identity (the same name assigned, annotated, called or passed), which then anchors the insertion; and it
      must not be gone with every mention of it: when nothing in a Python target names it any more (its name as
      `_element_name` reads it; an import, def, class or decorator excepted), the site is gone, a conflict;
    - indentation: the nearest non-blank context line before and after the group and every removed line give an
      indentation delta (target indent minus pre-image indent).  A consistent delta re-indents the added lines; an
      inconsistent one (context nested one level deeper on one side only) is a conflict — unless the group rewrites
      lines that all moved by one delta, as a neighbour did: the added lines replace them there; or it inserts
      lines written against one neighbour and parted from the other by a blank line: they keep that neighbour's.

    Added lines are written with the target's line ending.  A group whose removed lines are gone and whose added
    lines are already there is already applied; a hunk whose groups all are gets ``already-applied``.  When the
    pre-image cannot be placed, the post-image is searched: found verbatim-enough and unique, the hunk is
    ``already-applied`` too.

Import-only hunks
    A hunk that only adds imports at module level and that its context cannot place goes into the target's
    ``from m import`` statement for the same module if it has one, else into its import block; in the target's
    order (sorted, when its names or statements are), else after the statement the hunk follows (`_place_imports`).

Signature-only hunks
    A hunk whose one change adds a parameter to a def's signature (one line rewritten: ``def f(a) -> T:`` ->
    ``def f(a, b=None) -> T:``) and that its context cannot place (the target re-flowed the signature, changed its
    annotations or the body around it) goes into the signature of the only def of that name at the same level,
    inside the classes the hunk shows, right after the same parameter, under `_commute`'s order rules
    (`_place_signature`).

Restructured containers
    A site whose container the target spliced into another one (``*name``), or where the target put a splice among
    the elements the hunk shows, is refused unless the hunk shows that container's own opening line: a hunk is never
    merged into a sub-list it did not show (`_restructured_problem`).  Aligning a closing line, the one that closes
    the bracket the hunk shows open wins over a look-alike (`_repair_closers`).

Verdicts: ``exact`` (verbatim at the header's line), ``offset`` (verbatim elsewhere), ``relocated`` (only
whitespace/line-end/indentation differs), ``merged`` (the target has missing, changed or extra lines in the window),
``already-applied``, ``conflict``.

Per file (`place_file`): hunks are placed independently against the original target, then applied together;
overlapping hunks conflict.  A Python result that no longer parses (when the target did) turns the hunks whose new
lines contain the error into conflicts, and the file is re-assembled without them (all placed hunks, when the error
lies outside every hunk).  New files are created from the post-image; a deleted file's pre-image must match exactly.
"""

from __future__ import annotations

import ast
import enum
import functools
import hashlib
import keyword
import re
from collections import defaultdict
from dataclasses import dataclass, field
from operator import methodcaller

from .patchfile import FilePatch, Hunk, join_lines, split_lines
from .scope import HunkIntent, PythonLayout, Scope, SectionIndex, hunk_intent, parse_error, section_name

#: lowest score (weighted share of the pre-image that agrees) a site may have
MIN_SCORE = 0.5
#: how many weighted lines the best site must out-score every other site by (one informative line is 0.7..1)
MIN_MARGIN = 0.7
#: a line occurring more often than this in the target does not propose sites (it still counts in scoring)
_MAX_VOTER_HITS = 24
#: most forced alignments computed per hunk
_MAX_HITS = 48
_EXTRA_COST = 0.02
#: extra cost of each run of extra target lines: one block of foreign lines is likelier than many scattered ones
_RUN_COST = 0.1

_EXACT, _EOL, _WS, _INDENT = "exact", "line-end", "whitespace", "indentation"
_CREDIT = {_EXACT: 1.0, _EOL: 0.9, _WS: 0.9, _INDENT: 0.75}


class Verdict(enum.StrEnum):
    """What placing one hunk found."""

    EXACT = "exact"  # pre-image found verbatim at the header's line
    OFFSET = "offset"  # pre-image found verbatim, unique, at another line
    RELOCATED = "relocated"  # context partly differs; unique best site in the same scope
    MERGED = "merged"  # target changed lines the hunk does not touch; merged 3-way style
    ALREADY_APPLIED = "already-applied"  # post-image already present (and pre-image not)
    CONFLICT = "conflict"  # not placeable: no site, no unique best site, overlapping change, scope mismatch

    def __str__(self) -> str:
        return self.value


@dataclass
class Placement:
    """The verdict for one hunk, with evidence.

    Line numbers are 1-based and refer to the target file *before* any hunk of this file was applied.
    """

    hunk: Hunk
    verdict: Verdict
    #: 0-based half-open window [start, end) of target lines the hunk replaces; None for a conflict
    start: int | None = None
    end: int | None = None
    #: the lines that replace target[start:end] (already merged); None for a conflict / already-applied
    replacement: list[str] | None = None
    #: 1-based target line where the hunk's first change lands (or where it would, for already-applied)
    landing_line: int | None = None
    #: enclosing class/def chain and syntactic role at the landing site (None for non-Python files)
    scope: Scope | None = None
    #: human-readable explanation: scores, candidate sites, what differed, why rejected
    evidence: str = ""
    #: alignment score of the chosen site, 0..1 (1 = every pre-image line agreed exactly)
    score: float = 0.0
    #: other candidate sites considered (1-based lines) with their scores, best first
    candidates: list[tuple[int, float]] = field(default_factory=list)
    #: whether the file ends with a newline after this hunk (None: the hunk does not touch the end of the file)
    eof_newline: bool | None = None

    @property
    def ok(self) -> bool:
        return self.verdict is not Verdict.CONFLICT

    def to_json(self) -> dict:
        """The placement as a JSON-ready dict (hunk numbered as GNU patch numbers it)."""
        return {
            "hunk": self.hunk.index,
            "verdict": self.verdict.value,
            "landing_line": self.landing_line,
            "scope": self.scope.to_json() if self.scope else None,
            "score": round(self.score, 3),
            "evidence": self.evidence,
        }


@dataclass
class FilePlacement:
    """The result of placing all hunks of one `FilePatch` onto one target file."""

    file_patch: FilePatch
    placements: list[Placement]
    #: the new file text (None when the patch deletes the file or nothing could be applied)
    new_text: str | None
    #: set when the merged Python file no longer parses: "line N: message"
    parse_error: str | None = None
    #: hunk index -> 1-based (first, last) line of what it wrote in `new_text` (last = first - 1: it only removed)
    spans: dict[int, tuple[int, int]] = field(default_factory=dict)

    @property
    def conflicts(self) -> list[Placement]:
        return [p for p in self.placements if p.verdict is Verdict.CONFLICT]


# --------------------------------------------------------------------------------------------------------------
# Helpers: line normalisation and weights


def _norm(line: str) -> str:
    return " ".join(line.split())


def _strip_cr(line: str) -> str:
    return line[:-1] if line.endswith("\r") else line


def _weight(norm: str) -> float:
    """How much a line's agreement tells: 0.2 for punctuation-only lines, up to 1 for ten letters/digits."""
    alnum = sum(1 for c in norm if c.isalnum())
    if alnum == 0:
        return 0.2
    return min(1.0, 0.3 + 0.07 * alnum)


def _agreement(p: str, t: str) -> str:
    """How hunk line p agrees with target line t, given that their normalised texts are equal."""
    if p == t:
        return _EXACT
    p0, t0 = _strip_cr(p), _strip_cr(t)
    if p0 == t0:
        return _EOL
    if p0.lstrip() == t0.lstrip() or _norm(p0) != _norm(p0.lstrip()):
        return _INDENT if p0[: len(p0) - len(p0.lstrip())] != t0[: len(t0) - len(t0.lstrip())] else _WS
    return _WS


def _is_python(path: str | None) -> bool:
    return bool(path) and path.endswith((".py", ".pyi"))


def _lead(line: str) -> str:
    return line[: len(line) - len(line.lstrip(" \t"))]


class _Target:
    """One target file, indexed for placement (built once per file, shared by its hunks)."""

    def __init__(self, lines: list[str], path: str | None) -> None:
        self.lines = lines
        self.norm = [" ".join(ln.split()) for ln in lines]  # _norm, inlined: this runs over every target line
        self.by_norm: dict[str, list[int]] = defaultdict(list)
        for i, n in enumerate(self.norm):
            self.by_norm[n].append(i)
        self.crlf = sum(map(methodcaller("endswith", "\r"), lines)) * 2 > len(lines) > 0
        self.is_py = _is_python(path)
        self._layout: PythonLayout | None = None
        self._sections: SectionIndex | None = None

    @property
    def layout(self) -> PythonLayout:
        if self._layout is None:
            self._layout = PythonLayout(self.lines, lazy=True)
        return self._layout

    @functools.cached_property
    def statement_sensitive(self) -> tuple[int, bool]:
        """(last line of a ``from __future__`` import, -1 if none; whether any ``global``/``nonlocal`` statement
        exists): what makes a syntax check of some statements differ from one of the whole file."""
        last_future = -1
        scoped = False
        for i, n in enumerate(self.norm):
            if n.startswith("from __future__"):
                last_future = i
            elif n.startswith(("global ", "nonlocal ")):
                scoped = True
        return last_future, scoped

    @property
    def sections(self) -> SectionIndex:
        if self._sections is None:
            self._sections = SectionIndex(self.lines)
        return self._sections

    @functools.cached_property
    def _words(self) -> frozenset[str]:
        return frozenset(re.findall(r"\w+", "\n".join(self.lines)))

    def names(self, name: str) -> bool:
        """Whether any line of the file (code, comment or string) names `name`: as a word, or, for a string's
        text that is not one word, anywhere."""
        if re.fullmatch(r"\w+", name):
            return name in self._words
        return any(name in line for line in self.lines)

    def eol(self, line: str) -> str:
        """`line` written with the target's line ending."""
        line = _strip_cr(line)
        return line + "\r" if self.crlf else line


def _target(lines: list[str], path: str | None) -> _Target:
    """The indexed target for `lines`, shared by every placement onto the same content.

    A compose places onto the same file content more than once (the replay, then the audit re-placing each entry
    on the same text); the index, the lexed layout and the section table depend on the content alone."""
    return _cached_target("\n".join(lines), len(lines), _is_python(path))


@functools.lru_cache(maxsize=16)
def _cached_target(text: str, n: int, is_py: bool) -> _Target:
    return _Target(text.split("\n") if n else [], "x.py" if is_py else None)


# --------------------------------------------------------------------------------------------------------------
# Alignment


@dataclass
class _Alignment:
    """One way the pre-image lines map onto target lines."""

    mapping: list[int | None]  # pre-image index -> target index (None: missing)
    cats: list[str | None]
    credit: float
    score: float
    extras: list[int]  # target lines inside the aligned window that no pre-image line matched

    @property
    def verbatim(self) -> bool:
        return not self.extras and all(c in (_EXACT, _EOL) for c in self.cats)

    def overlaps(self, other: _Alignment) -> bool:
        return not {t for t in self.mapping if t is not None}.isdisjoint(t for t in other.mapping if t is not None)

    @property
    def first(self) -> tuple[int, int] | None:
        for j, t in enumerate(self.mapping):
            if t is not None:
                return j, t
        return None


def _dp(
    P: list[str], Pn: list[str], W: list[float], T: list[str], Tn: list[str], free_start: bool, free_end: bool
) -> tuple[float, list[int | None]]:
    """Align P to T (weighted credit, extras cost); returns (credit, mapping into T indices)."""
    m, n = len(P), len(T)
    if m == 0:
        return (0.0 if free_start or free_end else -_EXTRA_COST * n), []
    # back[i][j]: 0 = P[i-1] missing, 1 = T[j-1] extra, 2 = match
    prev = [0.0] * (n + 1) if free_start else [-_EXTRA_COST * j for j in range(n + 1)]
    backs: list[list[int]] = []
    for i in range(1, m + 1):
        p, pn, w = P[i - 1], Pn[i - 1], W[i - 1]
        cur = [prev[0]] + [0.0] * n
        back = [0] * (n + 1)
        for j in range(1, n + 1):
            best = prev[j]
            b = 0
            v = cur[j - 1] - _EXTRA_COST
            if v > best:
                best, b = v, 1
            if Tn[j - 1] == pn:
                v = prev[j - 1] + _CREDIT[_agreement(p, T[j - 1])] * w
                if v >= best:
                    best, b = v, 2
            cur[j] = best
            back[j] = b
        backs.append(back)
        prev = cur
    if free_end:
        j = max(range(n + 1), key=lambda k: (prev[k], -k))
    else:
        j = n
    credit = prev[j]
    mapping: list[int | None] = [None] * m
    i = m
    while i > 0:
        b = backs[i - 1][j]
        if b == 2:
            mapping[i - 1] = j - 1
            i -= 1
            j -= 1
        elif b == 1:
            j -= 1
        else:
            i -= 1
    return credit, mapping


def _finish(P: list[str], W: list[float], total: float, tgt: _Target, mapping: list[int | None]) -> _Alignment:
    cats: list[str | None] = []
    credit = 0.0
    for j, t in enumerate(mapping):
        if t is None:
            cats.append(None)
        else:
            c = _agreement(P[j], tgt.lines[t])
            cats.append(c)
            credit += _CREDIT[c] * W[j]
    matched = [t for t in mapping if t is not None]
    extras: list[int] = []
    if matched:
        used = set(matched)
        extras = [t for t in range(matched[0], matched[-1] + 1) if t not in used]
    runs = sum(1 for k, t in enumerate(extras) if k == 0 or extras[k - 1] != t - 1)
    credit -= _EXTRA_COST * len(extras) + _RUN_COST * runs
    return _Alignment(mapping, cats, credit, max(0.0, credit / total) if total else 0.0, extras)


def _alignments(P: list[str], tgt: _Target) -> list[_Alignment]:
    """Candidate alignments of P (a pre- or post-image) in the target, one per distinct mapping."""
    m = len(P)
    Pn = [_norm(p) for p in P]
    W = [_weight(n) for n in Pn]
    total = sum(W)
    counts = [len(tgt.by_norm.get(n, ())) for n in Pn]
    voters = [j for j in range(m) if 0 < counts[j] <= _MAX_VOTER_HITS and W[j] >= 0.5]
    if not voters:
        # nothing distinctive: fall back to the rarest lines that occur at all
        present = sorted((c, j) for j, c in enumerate(counts) if c > 0)
        voters = [j for c, j in present if c == present[0][0]] if present else []
    votes: dict[int, float] = defaultdict(float)
    hits: list[tuple[int, int]] = []
    for j in voters:
        for t in tgt.by_norm[Pn[j]]:
            votes[t - j] += W[j]
            hits.append((j, t))
    hits.sort(key=lambda h: (-votes[h[1] - h[0]], h[1] - h[0], h[0]))
    slack = 8 + m // 2
    found: dict[tuple, _Alignment] = {}
    explained: set[tuple[int, int]] = set()
    n_lines = len(tgt.lines)
    closers: list[tuple[int, int]] | None = None
    for j, t in hits[: _MAX_HITS * 4]:
        if (j, t) in explained:
            continue
        if len(found) >= _MAX_HITS:
            break
        lo = max(0, t - j - slack)
        hi = min(n_lines, t + (m - j) + slack)
        _, pre_map = _dp(P[:j], Pn[:j], W[:j], tgt.lines[lo:t], tgt.norm[lo:t], True, False)
        _, post_map = _dp(P[j + 1 :], Pn[j + 1 :], W[j + 1 :], tgt.lines[t + 1 : hi], tgt.norm[t + 1 : hi], False, True)
        mapping = (
            [None if x is None else x + lo for x in pre_map]
            + [t]
            + [None if x is None else x + t + 1 for x in post_map]
        )
        if closers is None:
            closers = _closer_pairs(P) if tgt.is_py else []
        if closers:
            mapping = _repair_closers(P, mapping, tgt, closers)
        key = tuple(mapping)
        if key in found:
            continue
        al = _finish(P, W, total, tgt, mapping)
        found[key] = al
        explained.update((jj, tt) for jj, tt in enumerate(mapping) if tt is not None)
    return list(found.values())


def _closer_pairs(P: list[str]) -> list[tuple[int, int]]:
    """(line, opener line) of each pre-image line that starts by closing a bracket the pre-image opened."""
    lay = PythonLayout(P)
    pairs = []
    for j, line in enumerate(P):
        frame = lay.frame_at[j]
        if frame is not None and line.lstrip()[:1] in (")", "]", "}"):
            pairs.append((j, frame.line))
    return pairs


def _repair_closers(
    P: list[str], mapping: list[int | None], tgt: _Target, pairs: list[tuple[int, int]]
) -> list[int | None]:
    """Re-map a closing line the alignment matched to a look-alike: the hunk's ``)`` closes the bracket opened on
    its own pre-image line, so in the target it is the line that closes the bracket opened on the target line that
    opener matched.  Lines equal text can tie (one ``)`` closing the call the hunk shows, another a later call
    after lines the target added); the alignment is re-mapped to the real closer when that one comes earlier,
    with the lines right after it that agree with the pre-image lines after the closer."""
    lay = tgt.layout
    out = list(mapping)
    for j, o in pairs:
        t, to = out[j], out[o]
        if t is None or to is None:
            continue
        lay.ensure(t)
        f = lay.frame_at[t]
        if f is not None and f.line == to:
            continue
        lo = max((x for x in out[:j] if x is not None), default=to)
        want = _norm(P[j])
        k = next(
            (
                k
                for k in range(lo + 1, t)
                if tgt.norm[k] == want and (fk := lay.frame_at[k]) is not None and fk.line == to
            ),
            None,
        )
        if k is None:
            continue
        out[j] = k
        pos = k
        for jj in range(j + 1, len(P)):
            if out[jj] is None or pos + 1 >= out[jj] or tgt.norm[pos + 1] != _norm(P[jj]):
                break
            out[jj] = pos = pos + 1
    return out


# --------------------------------------------------------------------------------------------------------------
# Change groups and the merge plan


@dataclass
class _Group:
    """A run of removed/added lines: removes pre-image[a:b], adds `added` in their place."""

    a: int
    b: int
    added: list[str]
    intent: HunkIntent | None = None


def _groups(hunk: Hunk) -> list[_Group]:
    groups: list[_Group] = []
    pre = 0
    cur: _Group | None = None
    for op, text in hunk.lines:
        if op == " ":
            cur = None
            pre += 1
            continue
        if cur is None:
            cur = _Group(pre, pre, [])
            groups.append(cur)
        if op == "-":
            pre += 1
            cur.b = pre
        else:
            cur.added.append(text)
    return groups


def _intents(hunk: Hunk, groups: list[_Group]) -> None:
    """Attach to each group what the hunk's own lines imply about its site (Python only)."""
    lines = hunk.lines
    pos = 0
    spans = []
    while pos < len(lines):
        if lines[pos][0] == " ":
            pos += 1
            continue
        start = pos
        while pos < len(lines) and lines[pos][0] != " ":
            pos += 1
        spans.append((start, pos))
    # What each post-image line was in the pre-image: context is itself, an added line is the removed line of
    # its run that it rewrites (if any), so a header the hunk edits is compared with the target by its old text.
    pre_of: list[str | None] = [t if op == " " else None for op, t in lines]
    for s, e in spans:
        removed = [t for op, t in lines[s:e] if op == "-"]
        used = [False] * len(removed)
        for k in range(s, e):
            op, text = lines[k]
            if op != "+":
                continue
            sig = _line_sig(text)
            for r, old in enumerate(removed):
                if not used[r] and _line_sig(old) == sig:
                    used[r] = True
                    pre_of[k] = old
                    break
    for g, (s, e) in zip(groups, spans, strict=True):
        post_before = [t for op, t in lines[:s] if op != "-"]
        before_pre = [pre_of[k] for k in range(s) if lines[k][0] != "-"]
        change = [t for op, t in lines[s:e] if op == "+"] or [t for op, t in lines[s:e] if op == "-"]
        after = [t for op, t in lines[e:] if op != "-"]
        g.intent = hunk_intent(post_before, change, after, before_pre)


def _line_sig(line: str) -> tuple[int, str]:
    """Indentation and leading keyword of a line: an added line with the same signature as a removed line of the
    same change rewrites it (``if a:`` -> ``if a and b:``, ``def f(x):`` -> ``def f(x, y):``)."""
    line = _strip_cr(line)
    body = line.lstrip()
    words = re.split(r"[\s:(\[{=.,]", body, maxsplit=2)
    word = words[1] if words[0] == "async" and len(words) > 1 else words[0]
    return len(line[: len(line) - len(body)].expandtabs(8)), word


@dataclass
class _Edit:
    start: int
    end: int
    lines: list[str]
    applied: bool  # the target already has this group's result


@dataclass
class _Plan:
    edits: list[_Edit]
    error: str | None = None
    indent_note: str = ""


def _delta(pre: str, tgt: str) -> int | str:
    """Indentation delta (in columns) between a pre-image line and its target line; a str explains a tab/space
    mix-up that has no delta."""
    a, b = _lead(_strip_cr(pre)), _lead(_strip_cr(tgt))
    if a == b:
        return 0
    if set(a + b) <= {" "} or set(a + b) <= {"\t"}:
        return len(b) - len(a)
    return f"indentation changed between tabs and spaces ({a!r} -> {b!r})"


def _reindent(line: str, delta: int, unit: str) -> str | None:
    if delta == 0 or not line.strip():
        return line
    if delta > 0:
        return unit * delta + line
    lead = _lead(line)
    if len(lead) < -delta or set(lead[:-delta]) != {unit}:
        return None
    return line[-delta:]


def _plan(hunk: Hunk, groups: list[_Group], al: _Alignment, tgt: _Target) -> _Plan:
    """The edits that merge the hunk at alignment `al`, or the reason it cannot be merged there."""
    P = hunk.pre_image
    M = al.mapping
    m = len(P)
    T = tgt.lines
    duplicated = _changed_context_copied(hunk, al)
    if duplicated is not None:
        return _Plan([], duplicated)
    edits: list[_Edit] = []
    notes = []
    for g in groups:
        removed_t = [M[j] for j in range(g.a, g.b)]
        added_n = [_norm(x) for x in g.added]
        if g.b > g.a and all(t is not None for t in removed_t):
            if any(removed_t[k + 1] != removed_t[k] + 1 for k in range(len(removed_t) - 1)):
                return _Plan(
                    [],
                    f"the target has lines of its own inside the lines the hunk removes "
                    f"(target lines {removed_t[0] + 1}..{removed_t[-1] + 1})",
                )
            start, end = removed_t[0], removed_t[-1] + 1
        else:
            if g.b > g.a and any(t is not None for t in removed_t):
                gone = [P[j].strip() for j in range(g.a, g.b) if M[j] is None]
                return _Plan(
                    [],
                    f"the target changed lines the hunk removes: `{gone[0]}`"
                    + (f" and {len(gone) - 1} more" if len(gone) > 1 else ""),
                )
            prev = M[g.a - 1] if g.a > 0 else None
            nxt = M[g.b] if g.b < m else None
            if g.b == g.a:
                anchors = _insertion_anchors(P, M, g, tgt)
                if isinstance(anchors, str):
                    return _Plan([], anchors)
                prev = anchors[0] if prev is None else prev
                nxt = anchors[1] if nxt is None else nxt
            if prev is not None and nxt is not None:
                between = list(range(prev + 1, nxt))
                if between:
                    if [tgt.norm[t] for t in between] == added_n:
                        edits.append(_Edit(prev + 1, nxt, [], True))
                        continue
                    if g.b > g.a:
                        changed = (
                            f"the target changed lines the hunk removes (target lines "
                            f"{prev + 2}..{nxt}: `{T[between[0]].strip()}`)"
                        )
                        merged = None
                        if tgt.is_py and g.b - g.a == 1 and len(g.added) == 1 and len(between) == 1:
                            merged = _merge_line(P[g.a], g.added[0], T[between[0]], tgt, between[0])
                        if merged is None:
                            return _Plan([], changed)
                        if isinstance(merged, _Refusal):
                            return _Plan([], f"{changed}: {merged.why}")
                        line, note = merged
                        edits.append(_Edit(between[0], between[0] + 1, [tgt.eol(line)], False))
                        notes.append(note)
                        continue
                    both = (
                        f"both sides changed the same place: the target has "
                        f"{len(between)} line(s) of its own between target lines {prev + 1} and "
                        f"{nxt + 1} (`{T[between[0]].strip()}`) where the hunk adds lines"
                    )
                    commuted = _commute(P, g, prev, nxt, tgt)
                    if commuted is None:
                        return _Plan([], both)
                    if isinstance(commuted, _Refusal):
                        return _Plan([], f"{both}: {commuted.why}")
                    notes.append(commuted)
                    prev, nxt = prev, prev + 1
                if g.b > g.a:
                    # removed lines gone, nothing in their place: already applied when nothing is to be added
                    if not added_n:
                        edits.append(_Edit(prev + 1, nxt, [], True))
                        continue
                    return _Plan([], "the target no longer has the lines the hunk removes")
                start = end = nxt
            elif g.b > g.a:
                gone = "the target no longer has the lines the hunk removes, and no line next to them agrees"
                # a one-line change at the hunk's edge (nothing before it, or nothing after it): the target's line
                # right next to the neighbour that agrees is the changed line, if both sides inserted into it
                edge = None
                if tgt.is_py and g.b - g.a == 1 and len(g.added) == 1 and (prev is None) != (nxt is None):
                    edge = nxt - 1 if prev is None and g.a == 0 else (prev + 1 if nxt is None and g.b == m else None)
                merged = None
                if edge is not None and 0 <= edge < len(T) and edge not in M:
                    merged = _merge_line(P[g.a], g.added[0], T[edge], tgt, edge)
                if merged is None or isinstance(merged, _Refusal):
                    return _Plan([], gone if merged is None else f"{gone}: {merged.why}")
                line, note = merged
                edits.append(_Edit(edge, edge + 1, [tgt.eol(line)], False))
                notes.append(note)
                continue
            elif prev is not None or nxt is not None:
                # one neighbour anchors the insertion; already applied when the added lines sit right there
                start = end = prev + 1 if prev is not None else nxt
                if any(added_n):
                    k = len(added_n)
                    near = (prev + 1, prev + 1 + k) if prev is not None else (nxt - k, nxt)
                    if near[0] >= 0 and [tgt.norm[t] for t in range(*near) if t < len(T)] == added_n:
                        edits.append(_Edit(near[0], near[1], [], True))
                        continue
            else:
                return _Plan([], "no line next to the change agrees with the target (nothing anchors it)")
        # indentation: nearest non-blank matched context line on each side, and every removed line
        deltas: list[tuple[int | str, int]] = []
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
        bad = [d for d, _ in deltas if isinstance(d, str)]
        if bad:
            return _Plan([], bad[0])
        dset = {d for d, _ in deltas}
        delta = 0
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
            return _Plan(
                [],
                f"inconsistent indentation drift around the change ({desc}): cannot tell how "
                f"deep the added lines belong",
            )
        if dset:
            delta = dset.pop()
        unit = "\t" if any(_lead(T[t]).startswith("\t") for t in M if t is not None) and delta else " "
        new_lines = []
        for line in g.added:
            r = _reindent(line, delta, unit)
            if r is None:
                return _Plan([], f"cannot re-indent added line `{line.strip()}` by {delta:+d} columns")
            new_lines.append(tgt.eol(r))
        if delta:
            notes.append(f"added lines re-indented by {delta:+d} columns")
        edits.append(_Edit(start, end, new_lines, False))
    return _Plan(edits, None, "; ".join(notes))


@dataclass(frozen=True)
class _Refusal:
    """Why a merge step that applies here is refused (as opposed to one that does not apply)."""

    why: str


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


def _commute(P: list[str], g: _Group, prev: int, nxt: int, tgt: _Target) -> str | _Refusal | None:
    """Both sides inserted at the same point of a container: the hunk's element goes right after its anchor (the
    element before it, which the alignment found by its text), the target's own elements stay after it.

    Applies to the elements of one bracketed container (parameters, call arguments, imported names, list, tuple,
    set and dict displays, ``__all__``) and to the members of an enum.  Done where order carries no meaning
    (keyword arguments, imported names, set elements, dict entries, ``__all__``, enum members, keyword-only
    parameters) or where the anchor fixes it: in an ordered container (positional parameters or arguments, a list
    or tuple) only when the hunk appends (the pre-image line after its insertion closes the container), so that
    "right after the anchor" is all the hunk says about its position.  An element the hunk puts *between* two
    elements, where the target put one of its own, is a decision (a priority list), refused.

    Returns the evidence note, a `_Refusal`, or None when the site is no such container."""
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
    return _Refusal(
        f"in {where} order carries meaning, and the hunk puts its lines between `{T[prev].strip()}` and "
        f"`{T[nxt].strip()}`, where the target put `{theirs}`: which comes first is a decision"
    )


def _insertion(base: str, new: str) -> tuple[int, str] | None:
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


def _merge_line(base: str, ours: str, theirs: str, tgt: _Target, at: int) -> tuple[str, str] | _Refusal | None:
    """Both sides inserted into the same line of a container (``f(a, b)``, ``[x, y]``, ``from m import a, b``): the
    hunk's insertion merged into the target's version of the line, as `_commute` does for element lines.  Insertions
    at different points of the line are both kept; at the same point the hunk's goes first, under `_commute`'s order
    rules.  `at` is the target line (its brackets open before it count, and the line after it says whether an
    insertion at the end of the line appends).  None when the line is not two insertions into brackets (or an
    import list)."""
    base, ours, theirs = _strip_cr(base), _strip_cr(ours), _strip_cr(theirs)
    mine, other = _insertion(base, ours), _insertion(base, theirs)
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
    opener = _strip_cr(tgt.lines[outer.line]) if outer is not None and roles[0] == outer.role else base
    free = _order_free(roles[0], opener, [text.lstrip(", "), text2.lstrip(", ")], [base[:p]])
    merged = base[:p] + text + text2 + base[p:]
    what = f"merged in the line: the target's own `{text2.strip(', ')}` stays after the hunk's `{text.strip(', ')}`"
    if free is not None:
        return merged, f"{what}; order carries no meaning ({free})"
    rest = base[p:].strip() or (_strip_cr(tgt.lines[at + 1]).strip() if at + 1 < len(tgt.lines) else "")
    if rest.lstrip(",")[:1] in (")", "]", "}"):
        return merged, f"{what}; the anchor fixes the order (the hunk appends right after it)"
    return _Refusal(
        f"in the {role} order carries meaning, and both sides inserted at the same point of the line: "
        "which comes first is a decision"
    )


def _commute_members(prev: int, nxt: int, between: list[str], added: list[str], tgt: _Target) -> str | None:
    """`_commute` for the members of an enum: one-line ``NAME = value`` statements of a class with an enum base."""
    lay = tgt.layout
    T = tgt.lines
    if not lay.code_start[prev] or not _MEMBER.match(T[prev]) or not lay.code_start[nxt]:
        return None
    members = [x for x in added + between if x.strip() and not x.strip().startswith("#")]
    if not members or not all(_MEMBER.match(x) and PythonLayout([x]).frame_at[1] is None for x in members):
        return None
    indent = lay.indent[prev]
    if any(len(_lead(x).expandtabs(8)) != indent for x in members):
        return None
    heads = lay.header_lines(prev, indent)
    if not heads or not _ENUM_BASES.match(T[heads[0]]):
        return None
    theirs = next(x.strip() for x in between if x.strip())
    return (
        f"commuted: the target's own `{theirs}` stays after the hunk's lines, which follow their anchor "
        f"`{T[prev].strip()}` among the members of `{T[heads[0]].strip()}`; order carries no meaning (enum members)"
    )


def _changed_context_copied(hunk: Hunk, al: _Alignment) -> str | None:
    """A context line the target changed or deleted, of which the hunk adds a copy: a conflict.

    When a hunk duplicates code (e.g. adds a second call whose arguments repeat the first call's), the diff had to
    choose which copy its context lines belong to, and that choice is arbitrary. If the target changed one of those
    repeated lines, keeping "the target's version of the context line" puts the target's change into whichever copy
    the diff happened to call context — possibly the new one, leaving the hunk's stale text in the old one. Nothing
    in the hunk tells which copy the target's change belongs to, so the merge is refused rather than guessed.
    """
    pre_ops = [op for op, _ in hunk.lines if op != "+"]
    added = {_norm(x) for x in hunk.added if _has_identity_text(x)}
    if not added:
        return None
    P = hunk.pre_image
    for j, t in enumerate(al.mapping):
        if t is None and pre_ops[j] == " " and _has_identity_text(P[j]) and _norm(P[j]) in added:
            return (
                f"the target changed the context line `{P[j].strip()}`, and the hunk adds a copy of that line: "
                "which copy the target's change belongs to depends on how the diff aligned the repeated lines, "
                "so the merge is not decided here"
            )
    return None


def _has_identity_text(line: str) -> bool:
    """Whether a line says something (a name), unlike `)`, `],` or a blank line that repeat everywhere."""
    return re.search(r"[A-Za-z_]\w", line) is not None


#: the head that names what a line is about: an assigned, annotated or called name (``x =``, ``self.y[i] +=``,
#: ``name:``, ``call(``), a keyword argument, a def/class name
_DEF_LINE = re.compile(r"\s*(?:async\s+)?(?:def|class)\s")
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
    body = _strip_cr(line).strip()
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
    P: list[str], M: list[int | None], g: _Group, tgt: _Target
) -> tuple[int | None, int | None] | str:
    """Check the lines that anchor a pure insertion, and re-find the changed ones.

    An insertion sits between the nearest non-blank pre-image lines before and after it (its anchors: the statement
    or element it follows, the one it precedes).  3-way merging treats a change touching the other side's change as
    a conflict; here an anchor the target changed (the alignment has no line for it) still anchors the insertion
    when exactly one target line where it was keeps its identity — the same name assigned, annotated, called or
    passed (``source: A,`` -> ``source: A | None = None,``).  An anchor before the insertion that was changed into
    something else (``x[i] = 0`` -> ``x[i].fill_(0)``, ``a * b,`` -> ``c,``), or deleted with every mention of its
    name (``actorder: X = None,`` gone, and nothing in the file names `actorder`), means the insertion's site is no
    longer there: the reason is returned.  (Deleted while the file still names it, it says nothing: the release
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
        ident = _identity(_strip_cr(P[j]))
        # the target lines the anchor could have become: between the nearest agreeing pre-image lines around it
        # (at the hunk's edge: as many lines as the pre-image has there, and one more)
        jp = next((k for k in range(j - 1, -1, -1) if M[k] is not None), None)
        jn = next((k for k in range(j + 1, m) if M[k] is not None), None)
        if jp is None and jn is None:
            continue
        lo = M[jp] + 1 if jp is not None else max(0, M[jn] - (jn - j) - 1)
        hi = M[jn] if jn is not None else min(len(tgt.lines), M[jp] + (j - jp) + 1)
        same = [t for t in range(lo, hi) if ident is not None and _identity(_strip_cr(tgt.lines[t])) == ident]
        if len(same) == 1:
            if j == (g.a - 1 if side == 0 else g.b):
                found[side] = same[0]
        elif side == 0:
            in_place = [t for t in range(lo, hi) if tgt.norm[t]]
            if in_place:
                t = in_place[-1]
                return (
                    f"the line the insertion follows, `{P[j].strip()}`, was changed in the target (target line "
                    f"{t + 1}: `{tgt.lines[t].strip()}`): the site the hunk was made for is gone"
                )
            name = _element_name(P[j]) if tgt.is_py else None
            if name is not None and not tgt.names(name):
                return (
                    f"the line the insertion follows, `{P[j].strip()}`, is gone from the target, and nothing in "
                    f"it names `{name}` any more: the site the hunk was made for is gone"
                )

    before = found[0] if found[0] is not None else (M[g.a - 1] if g.a > 0 else None)
    after = found[1] if found[1] is not None else (M[g.b] if g.b < m else None)
    if before is not None and after is not None and before >= after:
        return (
            f"the lines around the insertion are in another order in the target (target lines {before + 1} "
            f"and {after + 1}): the site the hunk was made for is gone"
        )
    return found[0], found[1]


def _approximate_plan(groups: list[_Group], al: _Alignment) -> _Plan | None:
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
        edits.append(_Edit(at, at, list(g.added), False))
    return _Plan(edits)


def _site_key(plan: _Plan, al: _Alignment) -> tuple:
    if plan.error is None:
        return tuple((e.start, e.end) for e in plan.edits)
    return ("unplannable",) + tuple(al.mapping)


# --------------------------------------------------------------------------------------------------------------
# Scope check


def _site_scope(tgt: _Target, edit: _Edit, group: _Group, hunk: Hunk) -> Scope:
    lay = tgt.layout
    lay.ensure(edit.start)
    first_code = next((ln for ln in edit.lines if ln.strip() and not ln.strip().startswith("#")), None)
    if first_code is not None:
        indent = len(_lead(_strip_cr(first_code)).expandtabs(8))
    elif edit.end > edit.start and lay.code_start[edit.start]:
        indent = lay.indent[edit.start]
    else:
        indent = None
    return lay.scope(edit.start, indent)


def _container_problem(P: list[str], g: _Group, al: _Alignment, tgt: _Target, at: int) -> str | None:
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
            return (
                f"container: the hunk shows `{P[j].strip()}` inside the same brackets as its change; in the "
                f"target it is outside the brackets of the site (target lines {t + 1} and {at + 1})"
            )
    return None


#: a container assigned to a name: ``NAME = [``, ``self.name: list[T] = (``
_NAMED_CONTAINER = re.compile(r"^\s*(?:self\.)?(\w+)\s*(?::[^=]*)?=\s*[\[({]\s*(?:#.*)?$")
#: an element that splices another container in: ``*name,`` / ``**name,``
_SPLICE = re.compile(r"^\s*\*\*?\s*((?:self\.)?\w+)\s*,?\s*(?:#.*)?$")


def _restructured_problem(P: list[str], al: _Alignment, tgt: _Target, at: int) -> str | None:
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
    if m is not None and _norm(opener) not in {_norm(x) for x in P}:
        name = m.group(1)
        spliced = next(
            (k for k, n in enumerate(tgt.norm) if ("*" + name) in n and re.search(rf"\*\s*(?:self\.)?{name}\b", n)),
            None,
        )
        if spliced is not None:
            return (
                f"restructured: the site's container `{opener.strip()}` (target line {frame.line + 1}) is spliced "
                f"into another one (`{T[spliced].strip()}`, target line {spliced + 1}), and the hunk does not show "
                "it: never merged into a sub-list the hunk did not show"
            )
    for t in al.extras:
        lay.ensure(t)
        if lay.frame_at[t] is frame and _SPLICE.match(T[t]):
            return (
                f"restructured: the target put `{T[t].strip()}` (target line {t + 1}) among the elements the hunk "
                "shows: they moved into a spliced sub-list the hunk does not show"
            )
    return None


#: how a section-heading disagreement starts (`_scope_problem`): the one scope rule that is order evidence
_SECTION = "section: "


def _shows_def_line(hunk: Hunk) -> bool:
    """Whether the hunk's pre-image shows a def/class line at or before its first change."""
    for op, text in hunk.lines:
        if op != "+" and _DEF_LINE.match(text):
            return True
        if op != " ":
            return False
    return False


def _close(a: _Alignment, b: _Alignment) -> bool:
    """`_too_close` for two sites in either order."""
    if (int(b.verbatim), b.credit) > (int(a.verbatim), a.credit):
        a, b = b, a
    return _too_close(a, b)


def _scope_problem(
    hunk: Hunk, groups: list[_Group], plan: _Plan, al: _Alignment, tgt: _Target, own_lines: bool = False
) -> str | None:
    """Why the site disagrees with the scope the hunk implies (None when it agrees).

    own_lines: the site is the only verbatim copy of the pre-image in the target.  What the hunk's lines imply
    (role, headers, brackets) is then read off the very lines the target has there, so a disagreement can only
    come from guessing about what the hunk does not show: only the ``@@`` section, evidence from outside the
    hunk's lines, may still reject the site."""
    name = section_name(hunk.section)
    first_edit_scope = None
    for g, e in zip(groups, plan.edits, strict=True):
        sc = _site_scope(tgt, e, g, hunk)
        if first_edit_scope is None:
            first_edit_scope = sc
        if g.intent is not None and not own_lines:
            why = g.intent.accepts(sc)
            if why:
                return f"{why} (target line {e.start + 1})"
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
            return f"{_SECTION}the hunk's `@@` header names `{hunk.section.strip()}`, the target site follows " + (
                " / ".join(f"`{n}`" for n in names) or "no def/class"
            )
    return None


# --------------------------------------------------------------------------------------------------------------
# Placing one hunk


def _describe(al: _Alignment, P: list[str]) -> str:
    f = al.first
    where = f"line {f[1] + 1}" if f else "?"
    counts: dict[str, int] = defaultdict(int)
    for c in al.cats:
        counts[c or "missing"] += 1
    changed = min(counts.get("missing", 0), len(al.extras))
    parts = [f"{counts[k]} {k}" for k in (_EXACT, _EOL, _WS, _INDENT) if counts.get(k)]
    if counts.get("missing", 0) - changed:
        parts.append(f"{counts['missing'] - changed} missing")
    if changed:
        parts.append(f"{changed} changed")
    if len(al.extras) - changed:
        parts.append(f"{len(al.extras) - changed} extra")
    return f"site at {where}: score {al.score:.2f} ({', '.join(parts)} of {len(P)} pre-image lines)"


def _line_of(al: _Alignment) -> int:
    """1-based target line of the first pre-image line that agrees."""
    f = al.first
    return f[1] + 1 if f else 0


def place_hunk(hunk: Hunk, target_lines: list[str], path: str) -> Placement:
    """Decide where `hunk` belongs in `target_lines` (a file's lines without line ends) and merge it there."""
    return _place(hunk, _target(target_lines, path))


def _place(hunk: Hunk, tgt: _Target, own_base: bool = False) -> Placement:
    placed = _place_by_context(hunk, tgt, own_base)
    if placed.verdict is Verdict.CONFLICT and tgt.is_py:
        # an import-only hunk the context cannot place still has a place: the target's import block
        imported = _place_imports(hunk, tgt)
        if imported is None:
            # a hunk that adds a parameter to a signature still has a place: that function's signature
            imported = _place_signature(hunk, tgt)
        if imported is not None:
            imported.candidates = placed.candidates
            imported.evidence = f"{imported.evidence}; by context: {placed.evidence}"
            return imported
    return placed


def _place_by_context(hunk: Hunk, tgt: _Target, own_base: bool = False) -> Placement:
    P = hunk.pre_image
    groups = _groups(hunk)
    if tgt.is_py:
        _intents(hunk, groups)
    if not P:
        return _place_without_context(hunk, tgt)

    alignments = _alignments(P, tgt)
    ranked = []  # (alignment, plan), best first
    for al in alignments:
        if al.score > 0:
            ranked.append((al, _plan(hunk, groups, al, tgt)))
    ranked.sort(key=lambda x: (-int(x[0].verbatim), -x[0].credit, _line_of(x[0])))
    candidates = [(_line_of(a), round(a.score, 3)) for a, _ in ranked[:8]]
    # Scope checks cost a little; run them best first and stop once no later site can be the best acceptable
    # one or a close rival of it (see `_too_close`).
    eligible: list[tuple[_Alignment, _Plan, None]] = []
    rejected: list[tuple[_Alignment, _Plan, str]] = []
    # the unique verbatim site, if any: the hunk's own lines cannot disagree with it (see `_scope_problem`)
    verbatim = [al for al, _ in ranked if al.verbatim]
    own = verbatim[0] if len(verbatim) == 1 else None
    for al, plan in ranked:
        if eligible:
            top = eligible[0][0]
            if top.verbatim and not al.verbatim:
                break
            if not top.verbatim and al.credit < top.credit - MIN_MARGIN:
                break
        problem = None
        if tgt.is_py:
            probe = plan if plan.error is None else _approximate_plan(groups, al)
            if probe is not None:
                problem = _scope_problem(hunk, groups, probe, al, tgt, own_lines=al is own)
        if problem is None:
            eligible.append((al, plan, None))
        else:
            rejected.append((al, plan, problem))

    def conflict(msg: str, score: float = 0.0) -> Placement:
        return Placement(hunk, Verdict.CONFLICT, evidence=msg, score=score, candidates=candidates)

    best = eligible[0] if eligible else None
    if best is None or best[0].score < MIN_SCORE:
        applied = _already_applied(hunk, tgt, groups)
        if applied is not None:
            applied.candidates = candidates
            return applied
        if best is None and rejected:
            al, _, why = rejected[0]
            return conflict(f"no acceptable site: best {_describe(al, P)} is in the wrong scope: {why}", al.score)
        if best is None:
            return conflict("no site: no line of the hunk's context or removed lines occurs in the target")
        msg = f"too little agreement: best {_describe(best[0], P)} is below {MIN_SCORE:.2f}"
        if rejected and rejected[0][0].credit > best[0].credit:
            msg += f"; a better-matching {_describe(rejected[0][0], P)} is in the wrong scope: {rejected[0][2]}"
        return conflict(msg, best[0].score)
    al, plan, _ = best
    own_line = None
    if al.verbatim and own_base:
        # The target is the very file the patch was made from (its blob id is the one the diff's `index` line
        # names): of two verbatim copies of the pre-image, the one at the hunk's own line is the hunk's site.  The
        # line number decides nothing else.
        at_header = [s for s in eligible if s[0].verbatim and s[0].mapping[0] == hunk.old_start - 1]
        if len(at_header) == 1 and sum(1 for s in eligible if s[0].verbatim) > 1:
            best = own_line = at_header[0]
            al, plan, _ = best
    key = _site_key(plan, al)
    rival = next((s for s in eligible if s is not best and _site_key(s[1], s[0]) != key), None)
    if own_line is not None and rival is not None:
        rival = None  # the other copy: reported in the evidence below
        others = [s for s in eligible if s[0].verbatim and s is not own_line]
        own_note = (
            f"{len(others)} other verbatim cop{'y' if len(others) == 1 else 'ies'} (line "
            f"{', '.join(str(_line_of(s[0])) for s in others)}); the one at the hunk's own line {hunk.old_start} "
            "taken: the target is the patch's own base (the blob the diff's index line names)"
        )
    else:
        own_note = None
    if rival is not None and _too_close(al, rival[0]) and not _rival_lacks_what_best_holds(hunk, al, rival[0]):
        return conflict(
            f"ambiguous: {_describe(al, P)} and {_describe(rival[0], P)} agree about equally "
            f"(credit {al.credit:.2f} vs {rival[0].credit:.2f}; a margin of {MIN_MARGIN} is required)",
            al.score,
        )
    if tgt.is_py and _shows_def_line(hunk):
        # The hunk shows a def/class line of its own before its change, so its `@@` section names an earlier
        # definition, not the enclosing one: evidence of order, which drift changes (a method added above).  It
        # may not decide between sites the hunk's own lines cannot tell apart.
        for r_al, r_plan, why in rejected:
            if why.startswith(_SECTION) and _site_key(r_plan, r_al) != key and _close(al, r_al):
                return conflict(
                    f"ambiguous: {_describe(al, P)} and {_describe(r_al, P)} agree about equally, and only the "
                    f"`@@` section heading (the definition above the hunk) tells them apart: {why}",
                    al.score,
                )
    evidence = [_describe(al, P)]
    if own_note is not None:
        evidence.append(own_note)
    if rival is not None:
        evidence.append(f"runner-up {_describe(rival[0], P)}")
    if rejected:
        evidence.append(f"rejected {_describe(rejected[0][0], P)}: {rejected[0][2]}")
    if plan.error is not None:
        applied = _already_applied(hunk, tgt, groups)
        if applied is not None:
            return applied
        return conflict(f"{evidence[0]}: {plan.error}", al.score)
    if plan.indent_note:
        evidence.append(plan.indent_note)

    landing = plan.edits[0].start + 1 if plan.edits else _line_of(al)
    scope = _site_scope(tgt, plan.edits[0], groups[0], hunk) if tgt.is_py and plan.edits else None
    applied_flags = [e.applied for e in plan.edits]
    if all(applied_flags):
        return Placement(
            hunk,
            Verdict.ALREADY_APPLIED,
            start=plan.edits[0].start,
            end=plan.edits[-1].end,
            replacement=None,
            landing_line=landing,
            scope=scope,
            score=al.score,
            candidates=candidates,
            evidence="; ".join(["the target already has the hunk's result"] + evidence),
        )
    if any(applied_flags):
        done = sum(applied_flags)
        return conflict(
            f"{evidence[0]}: partly applied already ({done} of {len(applied_flags)} changes are in the target)",
            al.score,
        )
    start = min(e.start for e in plan.edits)
    end = max(e.end for e in plan.edits)
    replacement: list[str] = []
    pos = start
    for e in sorted(plan.edits, key=lambda e: e.start):
        replacement.extend(tgt.lines[pos : e.start])
        replacement.extend(e.lines)
        pos = e.end
    replacement.extend(tgt.lines[pos:end])

    verdict = _classify(hunk, al)
    eof = None
    last_t = max((t for t in al.mapping if t is not None), default=-1)
    if (hunk.old_no_newline or hunk.new_no_newline) and (last_t == len(tgt.lines) - 1 or end == len(tgt.lines)):
        eof = not hunk.new_no_newline
    return Placement(
        hunk,
        verdict,
        start=start,
        end=end,
        replacement=replacement,
        landing_line=landing,
        scope=scope,
        evidence="; ".join(evidence),
        score=al.score,
        candidates=candidates,
        eof_newline=eof,
    )


def _rival_lacks_what_best_holds(hunk: Hunk, best: _Alignment, rival: _Alignment) -> bool:
    """`rival` is no rival of `best` when `best` holds what the hunk needs and `rival` lacks part of it altogether:
    - the hunk replaces lines: `best` holds every one of them (verbatim but for whitespace or indentation) and
      `rival` lacks one; a replacement can only land where its lines are;
    - `best` holds every pre-image line so (re-indented, nothing in between) and `rival` lacks one: as a verbatim
      site beats any other, the whole pre-image beats a part of it."""
    whole = (_EXACT, _EOL, _WS, _INDENT)
    removed = [k for k, op in enumerate(op for op, _ in hunk.lines if op != "+") if op == "-"]
    if removed and all(best.cats[k] in whole for k in removed):
        return any(rival.mapping[k] is None for k in removed)
    if not best.extras and all(c in whole for c in best.cats):
        return any(t is None for t in rival.mapping)
    return False


def _too_close(best: _Alignment, rival: _Alignment) -> bool:
    """Whether `rival` (another site, ranked below `best`) leaves the choice ambiguous.

    Two verbatim sites always do; a verbatim site beats any other.  A rival that shares target lines with the best
    is a variant of the same region: only an equal score makes it ambiguous.  A disjoint rival must trail by
    `MIN_MARGIN` weighted lines."""
    if best.verbatim or rival.verbatim:
        return best.verbatim and rival.verbatim
    if best.overlaps(rival):
        return rival.credit >= best.credit - 1e-9
    return best.credit - rival.credit < MIN_MARGIN


def _classify(hunk: Hunk, al: _Alignment) -> Verdict:
    if not al.extras and all(c == _EXACT for c in al.cats):
        first = al.mapping[0]
        return Verdict.EXACT if first == hunk.old_start - 1 else Verdict.OFFSET
    if not al.extras and all(c is not None for c in al.cats):
        return Verdict.RELOCATED
    return Verdict.MERGED


def _place_without_context(hunk: Hunk, tgt: _Target) -> Placement:
    """A hunk with no pre-image: only an empty target (or a new file) gives it a place."""
    added = [tgt.eol(x) for x in hunk.added]
    if not tgt.lines:
        return Placement(
            hunk,
            Verdict.EXACT,
            start=0,
            end=0,
            replacement=added,
            landing_line=1,
            evidence="empty target: the hunk's lines make the file",
            score=1.0,
            eof_newline=not hunk.new_no_newline,
        )
    if [_norm(x) for x in tgt.lines] == [_norm(x) for x in hunk.added]:
        return Placement(
            hunk,
            Verdict.ALREADY_APPLIED,
            start=0,
            end=len(tgt.lines),
            landing_line=1,
            evidence="the target already is the hunk's post-image",
            score=1.0,
        )
    return Placement(
        hunk,
        Verdict.CONFLICT,
        evidence="the hunk has no context lines, and the target is not empty: nothing anchors it "
        "(a line number alone is never enough)",
    )


def _already_applied(hunk: Hunk, tgt: _Target, groups: list[_Group]) -> Placement | None:
    """The hunk's post-image found (unique, agreeing well, every added line present) where its pre-image is not."""
    Q = hunk.post_image
    if not hunk.added and not hunk.removed:
        return None
    if not Q:
        # a pure removal with no context: applied when no removed line is left
        return None
    # positions of the added lines inside Q
    added_idx = []
    k = 0
    for op, _ in hunk.lines:
        if op == "+":
            added_idx.append(k)
        if op != "-":
            k += 1
    als = [a for a in _alignments(Q, tgt) if a.score >= 0.8]
    if not als:
        return None
    als.sort(key=lambda a: (-int(a.verbatim), -a.credit))
    best = als[0]
    if any(best.mapping[j] is None for j in added_idx):
        return None
    if len(als) > 1 and _too_close(best, als[1]):
        return None
    if hunk.removed and not added_idx:
        # pure removal: the context must close up around the removed lines
        pass
    ts = [best.mapping[j] for j in added_idx]
    landing = (ts[0] + 1) if ts else _line_of(best)
    scope = tgt.layout.scope(ts[0]) if tgt.is_py and ts else None
    return Placement(
        hunk,
        Verdict.ALREADY_APPLIED,
        start=None,
        end=None,
        landing_line=landing,
        scope=scope,
        score=best.score,
        evidence=f"post-image found: {_describe(best, Q)}; the pre-image is not in the target",
    )


# --------------------------------------------------------------------------------------------------------------
# Import-only hunks


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
    for g in _groups(hunk):
        added = [_strip_cr(x) for x in g.added]
        text = "\n".join(added) + "\n"
        try:
            tree = ast.parse(text) if not _lead(added[0]) else None
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


def _hunk_lines_before(hunk: Hunk, g: _Group) -> list[tuple[str, str]]:
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


def _place_imports(hunk: Hunk, tgt: _Target) -> Placement | None:
    """Place an import-only hunk the context could not place: in the target's statement for the same module if it
    has one, else in its top-level import block; in the target's order (sorted, when its names or its statements
    are), else after the statement the hunk follows, else at the end of the block.  None when the hunk is not
    import-only, the target does not parse, or there is no import block."""
    units = _import_units(hunk)
    if units is None:
        return None
    text = "\n".join(_strip_cr(x) for x in tgt.lines)
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError):
        return None
    imports = [n for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom))]
    if not imports:
        return None
    edits: list[_Edit] = []
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
    edits = [e for e in edits if not e.applied]
    edits.sort(key=lambda e: e.start)
    start, end = edits[0].start, max(e.end for e in edits)
    replacement: list[str] = []
    pos = start
    for e in edits:
        replacement.extend(tgt.lines[pos : e.start])
        replacement.extend(e.lines)
        pos = e.end
    replacement.extend(tgt.lines[pos:end])
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


def _import_edit(unit: _ImportUnit, imports: list, hunk: Hunk, tgt: _Target) -> tuple[_Edit, str] | None:
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
            return _Edit(
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
            return _Edit(
                at, at, lines, False
            ), f"`{what}` before `{T[at].strip()}` (line {at + 1}), in the order the block's statements are sorted in"
        last = section[-1][0]
        return (
            _Edit(last.end_lineno, last.end_lineno, lines, False),
            f"`{what}` after `{T[last.lineno - 1].strip()}` (line {last.lineno}), the end of the block's sorted statements",
        )
    if after is not None:
        return (
            _Edit(after.end_lineno, after.end_lineno, lines, False),
            f"`{what}` after `{T[after.lineno - 1].strip()}` (line {after.lineno}), the statement the hunk follows (the block is not sorted)",
        )
    last = section[-1][0]
    return (
        _Edit(last.end_lineno, last.end_lineno, lines, False),
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
        if op == "+" and _strip_cr(text) == unit.lines[0]:
            break
        if op != "+":
            pre.append(_strip_cr(text))
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


def _add_names(unit: _ImportUnit, node, tgt: _Target) -> tuple[_Edit, str] | None:
    """Add the unit's names to the target's ``from m import`` statement `node`."""
    T = tgt.lines
    have = [_alias(a) for a in node.names]
    missing = [x for x in unit.names if x not in have]
    first, last = node.lineno - 1, node.end_lineno - 1
    where = f"the target's `{T[first].strip()}` (line {first + 1})"
    if not missing:
        return _Edit(first, first, [], True), f"{where} already imports {', '.join(unit.names)}"
    ordered = _is_sorted([_sort_key(x) for x in have])
    order = "in its sorted order" if ordered else "at its end (its names are not sorted)"
    if first == last:
        line = _strip_cr(T[first])
        m = re.match(r"^(\s*from\s+\S+\s+import\s+)([^#()]*?)\s*(#.*)?$", line)
        if m is None:
            return None
        names = sorted(have + missing, key=_sort_key) if ordered else have + missing
        new = m.group(1) + ", ".join(names) + (f"  {m.group(3)}" if m.group(3) else "")
        return _Edit(first, first + 1, [tgt.eol(new)], False), f"added {', '.join(missing)} to {where}, {order}"
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
    indent = _lead(T[next(iter(name_lines))])
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
    return _Edit(at, at, lines, False), f"added {', '.join(missing)} to {where}, {order}"


# --------------------------------------------------------------------------------------------------------------
# Signature-only hunks


#: a def line: its indentation and name
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
    first = _strip_cr(header[0])
    text = "\n".join([first.lstrip()] + [_strip_cr(x) for x in header[1:]]) + "\n    pass\n"
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
    line = _strip_cr(header[start[0] - 1])
    if start[0] == 1:
        line = line.lstrip()
    return line[start[1] : end[1]]


def _place_signature(hunk: Hunk, tgt: _Target) -> Placement | None:
    """Place a hunk whose one change adds a parameter to a signature (``def f(a):`` -> ``def f(a, b=None):``) that
    its context could not place: in the target's signature of the same function, right after the same parameter.

    The function is found by its name: the only def of that name at the same level (a method for a method, a
    module-level function for one) inside the classes and blocks the hunk shows, whatever the target did to the
    rest of its signature (re-flowed it over several lines, annotated its return, added parameters of its own) and
    to the lines around it.  Two defs of that name are a conflict: only the ``@@`` section could tell them apart,
    and it is evidence of order (see `_shows_def_line`).  The parameter it follows must be in the target's
    signature, and the new one must not be (with the same text: already applied).  The order rules are those of
    `_commute`: the new parameter goes right after its anchor when the hunk appends (nothing, or only ``*``,
    ``*args``, ``**kwargs``, follows it) or it is keyword-only; a parameter the hunk puts *between* two others needs
    the same two next to each other in the target.  None when the hunk is not such a change or no single site is
    found (the conflict stands)."""
    groups = _groups(hunk)
    if len(groups) != 1:
        return None
    g = groups[0]
    if g.b - g.a != 1 or len(g.added) != 1:
        return None
    P = hunk.pre_image
    base_line, ours_line = _strip_cr(P[g.a]), _strip_cr(g.added[0])
    if _insertion(base_line, ours_line) is None:
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
    name = base[0]
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
    keyword_only = any(k.startswith("*") and not k.startswith("**") for k in bkeys[:i])
    appends = follower is None or follower.startswith("*") or follower == "/"
    if anchor is not None and (anchor in ("*", "/") or anchor.startswith("**")):
        return None
    # the classes and blocks the hunk shows around the def
    hunk_lay = PythonLayout(P[: d + 1])
    heads = [k for k in hunk_lay.header_lines(d, hunk_lay.indent[d]) if hunk_lay.is_header(k)]
    shown = HunkIntent(None, None, tuple(hunk_lay.header_key(k) for k in heads))

    lay = tgt.layout
    sites = []
    want = re.compile(rf"^[ \t]*(?:async\s+)?def\s+{re.escape(name)}\s*\(")
    for t, line in enumerate(tgt.lines):
        if f"def {name}" not in line or not want.match(line):
            continue
        lay.ensure(t)
        if not lay.code_start[t]:
            continue
        te = _signature_header(tgt.lines, t)
        if te is None:
            continue
        header = tgt.lines[t : te + 1]
        sig = _signature(header)
        if sig is None or sig[0] != name:
            continue
        if bool(_lead(line)) != bool(_lead(_strip_cr(P[d]))) or shown.accepts(lay.scope(t)) is not None:
            continue  # a method is never a module-level function (nor the other way round)
        tkeys = [p.key for p in sig[1]]
        if new.key in tkeys:
            have = sig[1][tkeys.index(new.key)]
            same = have.start is not None and _segment(header, have.start, have.end) == new_text
            # the same text: already applied; a parameter of that name of the target's own: a conflict
            sites.append((t, te, header, sig[1], None, "already" if same else "taken"))
            continue
        if anchor is not None and anchor not in tkeys:
            # the parameter the hunk follows is gone: the site the hunk was made for is gone
            sites.append((t, te, header, sig[1], None, "gone"))
            continue
        at = tkeys.index(anchor) + 1 if anchor is not None else 0
        theirs = tkeys[at] if at < len(tkeys) else None
        if not appends and not keyword_only and theirs != follower:
            # between two ordered parameters, where the target has another one: which comes first is a decision
            sites.append((t, te, header, sig[1], None, "decision"))
            continue
        sites.append((t, te, header, sig[1], at, theirs))
    # several functions of that name: nothing but the `@@` section, evidence of order that drift changes, could
    # choose (see `_shows_def_line`), so the conflict stands
    if len(sites) != 1:
        return None
    t, te, header, params, at, theirs = sites[0]
    if theirs in ("taken", "decision", "gone"):
        return None
    where = f"the signature of `{name}` at line {t + 1}"
    if theirs == "already":
        return Placement(
            hunk,
            Verdict.ALREADY_APPLIED,
            landing_line=t + 1,
            scope=lay.scope(t),
            score=0.0,
            evidence=f"signature: {where} already has `{new_text}`",
        )
    edit = _signature_edit(tgt, t, header, params, at, new_text)
    if edit is None:
        return None
    start, end, lines = edit
    if theirs is None or appends or theirs == follower:
        order = (
            "the hunk appends right after it"
            if appends and theirs is not None and theirs != follower
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
            f"signature: the hunk adds parameter `{new_text}` to `{name}` {after}; the context does not place it, "
            f"{where} does (the function of that name"
            + (" in the classes the hunk shows" if shown.headers else "")
            + f"), the parameter merged {after} ({order})"
        ),
    )


def _signature_edit(
    tgt: _Target, t: int, header: list[str], params: list[_Param], at: int, new_text: str
) -> tuple[int, int, list[str]] | None:
    """(start, end, lines) replacing target lines [start, end) to put `new_text` at element position `at` of the
    signature whose header starts at target line t: on a line of its own when the anchor stands alone on its line
    (vertical layout), else spliced in as ``, new``."""
    T = tgt.lines
    lead = len(_lead(_strip_cr(T[t])))

    def pos(p: tuple[int, int]) -> tuple[int, int]:
        return t + p[0] - 1, p[1] + (lead if p[0] == 1 else 0)

    if at > 0:
        anchor = params[at - 1]
        if anchor.end is None:
            return None
        row, col = pos(anchor.end)
        line = _strip_cr(T[row])
        rest = line[col:]
        start_ok = anchor.start is not None and anchor.start[0] == anchor.end[0]
        alone = (
            start_ok
            and row != t
            and not line[: pos(anchor.start)[1]].strip()
            and re.fullmatch(r"\s*,?\s*(?:#.*)?", rest) is not None
        )
        if alone:
            added = tgt.eol(_lead(line) + new_text + ",")
            if rest.lstrip().startswith(","):
                return row + 1, row + 1, [added]
            return row, row + 1, [tgt.eol(line[:col] + "," + rest), added]  # the comma the anchor lacked
        return row, row + 1, [tgt.eol(line[:col] + ", " + new_text + rest)]
    if params:
        first = params[0]
        if first.start is None:
            return None
        row, col = pos(first.start)
        line = _strip_cr(T[row])
        if row != t and not line[:col].strip():
            return row, row, [tgt.eol(_lead(line) + new_text + ",")]
        return row, row + 1, [tgt.eol(line[:col] + new_text + ", " + line[col:])]
    line = _strip_cr(T[t])
    m = _DEF_HEAD.match(line)
    if m is None or not line[m.end() :].lstrip().startswith(")"):
        return None
    return t, t + 1, [tgt.eol(line[: m.end()] + new_text + line[m.end() :])]


# --------------------------------------------------------------------------------------------------------------
# Placing a whole file


def place_file(file_patch: FilePatch, target_text: str | None, path: str | None = None) -> FilePlacement:
    """Place every hunk of `file_patch` onto `target_text` (None: the file does not exist) and apply the
    non-conflicting ones. Conflicting hunks are left out of `new_text`; a Python result that no longer parses turns
    every placed hunk of the file into a conflict whose evidence shows the parse error."""
    path = path or file_patch.path
    hunks = file_patch.hunks
    if file_patch.is_new and target_text is None:
        lines: list[str] = []
        placements = []
        for h in hunks:
            placements.append(
                Placement(
                    h,
                    Verdict.EXACT,
                    start=len(lines),
                    end=len(lines),
                    replacement=list(h.added),
                    landing_line=len(lines) + 1,
                    evidence="new file",
                    score=1.0,
                )
            )
            lines.extend(h.added)
        final_nl = not (hunks and hunks[-1].new_no_newline)
        spans = {p.hunk.index: (p.start + 1, p.start + len(p.replacement)) for p in placements}
        return FilePlacement(file_patch, placements, join_lines(lines, final_nl) if hunks else "", spans=spans)
    if target_text is None:
        if file_patch.is_delete:
            return FilePlacement(
                file_patch,
                [Placement(h, Verdict.ALREADY_APPLIED, evidence="the file is already gone") for h in hunks],
                None,
            )
        return FilePlacement(
            file_patch,
            [Placement(h, Verdict.CONFLICT, evidence=f"{path} does not exist in the target") for h in hunks],
            None,
        )
    lines, final_nl = split_lines(target_text)
    if file_patch.is_new:
        post = [x for h in hunks for x in h.added]
        if [_norm(x) for x in post] == [_norm(x) for x in lines]:
            return FilePlacement(
                file_patch,
                [
                    Placement(
                        h,
                        Verdict.ALREADY_APPLIED,
                        landing_line=1,
                        evidence="the file already exists with the patch's content",
                    )
                    for h in hunks
                ],
                target_text,
            )
        return FilePlacement(
            file_patch,
            [
                Placement(
                    h,
                    Verdict.CONFLICT,
                    evidence=f"the patch creates {path}, but the target already has a different file there",
                )
                for h in hunks
            ],
            target_text,
        )
    if file_patch.is_delete:
        pre = [x for h in hunks for x in h.pre_image]
        if [_strip_cr(x) for x in pre] == [_strip_cr(x) for x in lines]:
            return FilePlacement(
                file_patch,
                [
                    Placement(
                        h,
                        Verdict.EXACT,
                        start=0,
                        end=len(lines),
                        replacement=[],
                        landing_line=1,
                        evidence="deleted file matches the patch exactly",
                        score=1.0,
                    )
                    for h in hunks
                ],
                None,
            )
        return FilePlacement(
            file_patch,
            [
                Placement(
                    h,
                    Verdict.CONFLICT,
                    evidence=f"the patch deletes {path}, but the target's content differs from what the patch removes",
                )
                for h in hunks
            ],
            target_text,
        )

    tgt = _target(lines, path)
    own_base = file_patch.old_blob is not None and _blob_id(target_text).startswith(file_patch.old_blob.lower())
    placements = [_place(h, tgt, own_base) for h in hunks]
    _resolve_overlaps(placements)
    text, regions = _assemble(tgt, final_nl, placements)
    perr = None
    if tgt.is_py:
        for _ in range(len(placements) + 1):
            err = _result_parse_error(tgt, placements, text, path)
            if err is None:
                break
            if perr is None and parse_error(_strip_all_cr(target_text), path) is not None:
                break  # the target did not parse to begin with: not the hunks' doing
            line, msg = err
            perr = f"line {line}: {msg}"
            guilty = [p for p, (s, e) in regions if s <= line <= max(e, s)]
            if not guilty:
                guilty = [p for p, _ in regions]
            for p in guilty:
                where = f"the file no longer parses with this hunk: line {line}: {msg}"
                _to_conflict(p, where)
            text, regions = _assemble(tgt, final_nl, placements)
    return FilePlacement(file_patch, placements, text, perr, {p.hunk.index: span for p, span in regions})


def _blob_id(text: str) -> str:
    """The git blob id of a file with this text."""
    data = text.encode("utf-8", "surrogateescape")
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


#: first words of clauses that continue a compound statement: such a line never starts a statement
_CONTINUATIONS = frozenset({"else", "elif", "except", "finally"})


def _result_parse_error(tgt: _Target, placements: list[Placement], text: str, path: str) -> tuple[int, str] | None:
    """The first syntax error of the assembled file `text`, checked by compiling only the statements the hunks
    touched when that is equivalent (compiling a large module costs tens of milliseconds per check).

    The target parses (else `place_file` ignores the answer).  Each applied hunk lies inside a run of whole target
    statements [a, b) — top-level statements, or member statements of the classes (only classes) that enclose it,
    compiled inside stand-in ``class`` headers, followed by a stand-in for the statement after the run.  Runs that
    meet are joined.  Target lines outside the runs are unchanged complete statements, so the file parses exactly
    when every run does — but for the errors that depend on other statements: a file with a ``global``/
    ``nonlocal`` statement, or a ``from __future__`` import after the first hunk, is compiled whole.  An error
    found in a run is confirmed, and its line taken, by compiling the whole file."""
    applied = [p for p in placements if p.verdict is not Verdict.CONFLICT and p.replacement is not None]
    last_future, scoped = tgt.statement_sensitive
    if applied and not scoped and min(p.start for p in applied) > last_future:
        groups = [[p] for p in sorted(applied, key=lambda p: (p.start, p.end))]
        runs = [_statement_run(tgt, g) for g in groups]
        # runs that overlap or touch are checked as one (a hunk may edit the header of another one's class)
        joined = True
        while joined:
            joined = False
            for x in range(len(runs)):
                for y in range(x + 1, len(runs)):
                    if runs[x][0] <= runs[y][1] and runs[y][0] <= runs[x][1]:
                        groups[x] = groups[x] + groups.pop(y)
                        runs.pop(y)
                        runs[x] = _statement_run(tgt, groups[x])
                        joined = True
                        break
                if joined:
                    break
        for _, _, head, body in runs:
            chunk = "\n".join(head + [_strip_cr(ln) for ln in body]) + "\n"
            if any(w in chunk for w in ("__future__", "global", "nonlocal")) or parse_error(chunk, path) is not None:
                break
        else:
            return None
    return parse_error(_strip_all_cr(text), path)


def _statement_run(tgt: _Target, applied: list[Placement]) -> tuple[int, int, list[str], list[str]]:
    """(start, end, stand-in headers, result lines) of the smallest run [start, end) of whole target statements
    holding the given hunks: member statements of the classes that enclose the first one, or top-level ones."""
    lay = tgt.layout
    n = len(tgt.lines)
    lo = min(p.start for p in applied)
    hi = max(max(p.end, p.start) for p in applied)
    lay.ensure(min(lo, n))
    # the member level of the classes (only classes) that enclose the statement holding `lo`
    j = min(lo, n - 1)
    while j > 0 and not lay.code_start[j]:
        j -= 1
    outer_first = list(reversed(lay.header_lines(j, lay.indent[j]))) if j >= 0 and lay.code_start[j] else []
    classes = 0
    while classes < len(outer_first) and tgt.lines[outer_first[classes]].lstrip().startswith("class "):
        classes += 1
    level = 0
    if classes:
        level = lay.indent[outer_first[classes]] if classes < len(outer_first) else lay.indent[j]
    for k in [level, 0] if level else [0]:
        a = _statement_start(lay, lo, k)
        if a is None:
            continue
        head: list[str] = []
        if k:
            heads = lay.header_lines(a, k)
            if not heads or any(not tgt.lines[h].lstrip().startswith("class ") for h in heads):
                continue
            head = [_lead(_strip_cr(tgt.lines[h])) + "class _:" for h in reversed(heads)]
            new_lines = [ln for p in applied for ln in p.replacement]
            if any(ln.strip() and len(_lead(ln).expandtabs(8)) < k for ln in new_lines):
                continue  # an added line leaves the class body: the run would not bound its effect
            old_lines = [tgt.lines[i] for p in applied for i in range(p.start, min(p.end, n))]
            if any(ln.strip() and len(_lead(ln).expandtabs(8)) < k for ln in old_lines):
                continue  # a replaced line is outside the class body (e.g. the header of a later top-level block)
        b = _statement_end(lay, hi, k, n)
        body: list[str] = []
        pos = a
        for p in sorted(applied, key=lambda p: (p.start, p.end)):
            body.extend(tgt.lines[pos : p.start])
            body.extend(p.replacement)
            pos = p.end
        body.extend(tgt.lines[pos:b])
        if b < n:
            # a stand-in for the statement that follows: its indentation must close the run's blocks as it does
            # in the file ("unindent does not match" is an error of the line after the run)
            body.append(_lead(_strip_cr(tgt.lines[b])) + "pass")
        return a, b, head, body
    raise AssertionError("a top-level run always exists")  # k == 0 never continues


def _statement_start(lay: PythonLayout, lo: int, k: int) -> int | None:
    """The last line at or before `lo` starting a statement at indentation k inside the same block (0: the start
    of the file when k is 0); None when the block's header comes first."""
    j = min(lo, len(lay.lines) - 1)
    while j >= 0:
        if lay.code_start[j]:
            ind = lay.indent[j]
            if ind < k:
                return None
            if ind == k and _starts_statement(lay, j):
                return j
        j -= 1
    return 0 if k == 0 else None


def _starts_statement(lay: PythonLayout, j: int) -> bool:
    """Whether code line j starts a statement: not a continuing clause (``else:``), not a decorated def/class."""
    if _first_word(lay.lines[j]) in _CONTINUATIONS:
        return False
    p = j - 1
    while p >= 0 and not lay.code_start[p]:
        p -= 1
    return p < 0 or not (lay.lines[p].lstrip().startswith("@") and lay.indent[p] == lay.indent[j])


def _statement_end(lay: PythonLayout, hi: int, k: int, n: int) -> int:
    """The first line at or after `hi` that starts a statement at indentation k or less, or ends k's block."""
    for j in range(hi, n):
        lay.ensure(j)
        if lay.code_start[j]:
            ind = lay.indent[j]
            if ind < k or (ind == k and _starts_statement(lay, j)):
                return j
    return n


def _first_word(line: str) -> str:
    return re.split(r"[\s:(]", line.strip(), maxsplit=1)[0]


def _strip_all_cr(text: str) -> str:
    return text.replace("\r\n", "\n")


def _to_conflict(p: Placement, why: str) -> None:
    p.evidence = f"{why}; was: {p.verdict.value}: {p.evidence}"
    p.verdict = Verdict.CONFLICT
    p.replacement = None


def _resolve_overlaps(placements: list[Placement]) -> None:
    taken: list[tuple[int, int, int]] = []
    for p in placements:
        if p.verdict is Verdict.CONFLICT or p.replacement is None or p.start is None:
            continue
        s, e = p.start, p.end
        clash = None
        for ts, te, idx in taken:
            if (s < te and ts < e) or (s == e and ts < s < te) or (ts == te and s < ts < e):
                clash = idx
                break
        if clash is not None:
            _to_conflict(p, f"overlaps hunk {clash}, placed at the same target lines")
            continue
        taken.append((s, e, p.hunk.index))


def _assemble(
    tgt: _Target, final_nl: bool, placements: list[Placement]
) -> tuple[str, list[tuple[Placement, tuple[int, int]]]]:
    """Apply the placed hunks; returns the text and each applied placement's 1-based line span in it."""
    applied = sorted(
        (p for p in placements if p.verdict is not Verdict.CONFLICT and p.replacement is not None),
        key=lambda p: (p.start, p.end, p.hunk.index),
    )
    out: list[str] = []
    regions: list[tuple[Placement, tuple[int, int]]] = []
    pos = 0
    eof = final_nl
    for p in applied:
        out.extend(tgt.lines[pos : p.start])
        s = len(out) + 1
        out.extend(p.replacement)
        regions.append((p, (s, len(out))))
        pos = p.end
        if p.eof_newline is not None:
            eof = p.eof_newline
    out.extend(tgt.lines[pos:])
    return join_lines(out, eof), regions
