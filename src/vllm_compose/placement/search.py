"""The search for a hunk's sites: every way its pre-image (or post-image) lines map onto the target's lines, scored.

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

Aligning a closing line, the one that closes the bracket the hunk shows open wins over a look-alike
(`_repair_closers`).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from ..scope import PythonLayout
from .target import Target, norm_text, strip_cr

#: a line occurring more often than this in the target does not propose sites (it still counts in scoring)
_MAX_VOTER_HITS = 24
#: most forced alignments computed per hunk
_MAX_HITS = 48
_EXTRA_COST = 0.02
#: extra cost of each run of extra target lines: one block of foreign lines is likelier than many scattered ones
_RUN_COST = 0.1

#: how a hunk line agrees with its target line (the table above); a missing line has None
EXACT, EOL, WS, INDENT = "exact", "line-end", "whitespace", "indentation"
_CREDIT = {EXACT: 1.0, EOL: 0.9, WS: 0.9, INDENT: 0.75}


def _weight(norm: str) -> float:
    """How much a line's agreement tells: 0.2 for punctuation-only lines, up to 1 for ten letters/digits."""
    alnum = sum(1 for c in norm if c.isalnum())
    if alnum == 0:
        return 0.2
    return min(1.0, 0.3 + 0.07 * alnum)


def _agreement(p: str, t: str) -> str:
    """How hunk line p agrees with target line t, given that their normalised texts are equal."""
    if p == t:
        return EXACT
    p0, t0 = strip_cr(p), strip_cr(t)
    if p0 == t0:
        return EOL
    if p0.lstrip() == t0.lstrip() or norm_text(p0) != norm_text(p0.lstrip()):
        return INDENT if p0[: len(p0) - len(p0.lstrip())] != t0[: len(t0) - len(t0.lstrip())] else WS
    return WS


@dataclass
class Alignment:
    """One way the pre-image lines map onto target lines."""

    mapping: list[int | None]  # pre-image index -> target index (None: missing)
    cats: list[str | None]
    credit: float
    score: float
    extras: list[int]  # target lines inside the aligned window that no pre-image line matched

    @property
    def verbatim(self) -> bool:
        return not self.extras and all(c in (EXACT, EOL) for c in self.cats)

    def overlaps(self, other: Alignment) -> bool:
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


def _finish(P: list[str], W: list[float], total: float, tgt: Target, mapping: list[int | None]) -> Alignment:
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
    return Alignment(mapping, cats, credit, max(0.0, credit / total) if total else 0.0, extras)


def site_alignments(P: list[str], tgt: Target) -> list[Alignment]:
    """Candidate alignments of P (a pre- or post-image) in the target, one per distinct mapping."""
    m = len(P)
    Pn = [norm_text(p) for p in P]
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
    found: dict[tuple, Alignment] = {}
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
    P: list[str], mapping: list[int | None], tgt: Target, pairs: list[tuple[int, int]]
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
        want = norm_text(P[j])
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
            if out[jj] is None or pos + 1 >= out[jj] or tgt.norm[pos + 1] != norm_text(P[jj]):
                break
            out[jj] = pos = pos + 1
    return out


def describe_site(al: Alignment, P: list[str]) -> str:
    """The site as evidence reads it: its line, its score and how many of the lines `P` agree, and how."""
    f = al.first
    where = f"line {f[1] + 1}" if f else "?"
    counts: dict[str, int] = defaultdict(int)
    for c in al.cats:
        counts[c or "missing"] += 1
    changed = min(counts.get("missing", 0), len(al.extras))
    parts = [f"{counts[k]} {k}" for k in (EXACT, EOL, WS, INDENT) if counts.get(k)]
    if counts.get("missing", 0) - changed:
        parts.append(f"{counts['missing'] - changed} missing")
    if changed:
        parts.append(f"{changed} changed")
    if len(al.extras) - changed:
        parts.append(f"{len(al.extras) - changed} extra")
    return f"site at {where}: score {al.score:.2f} ({', '.join(parts)} of {len(P)} pre-image lines)"


def site_line(al: Alignment) -> int:
    """1-based target line of the first pre-image line that agrees."""
    f = al.first
    return f[1] + 1 if f else 0
