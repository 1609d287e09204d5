"""Line alignment: which lines of a new text are lines of an old one, and where a hunk's change groups sit in it.

The audit (`landings`) finds where each hunk landed with this ruler (where it belongs is `anchors.py`'s question).
`Alignment(old, new)` aligns two texts line by line — unique lines first as anchors (patience-style), difflib
between them, every inserted or deleted run slid as far down as it goes so that equivalent "slider" alignments
compare equal — and `group_sites` finds every site of a change group (`change_groups`: a run of removed and/or added
lines) in it, as `Site`s in old line numbers. General over any two line sequences; nothing here knows about patches
beyond a `Hunk`'s lines.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ..patchfile import Hunk


def _is_significant(line: str) -> bool:
    """A line specific enough to identify a change: blank lines and lone brackets occur everywhere."""
    return sum(c.isalnum() for c in line) >= 3


class Alignment:
    """A line alignment of `old` -> `new`: which new lines are old lines (and which), which old lines survive."""

    def __init__(self, old: Sequence[str], new: Sequence[str]) -> None:
        self.old = old
        self.new = new
        self.origin: list[int | None] = [None] * len(new)
        self.kept = [False] * len(old)
        for i, j, n in matching_blocks(old, new):
            for t in range(n):
                self.origin[j + t] = i + t
                self.kept[i + t] = True
        self._canonicalize()
        # gap[j]: the old index the position just before new[j] corresponds to (1 + last surviving old line before j)
        self.gap = [0] * (len(new) + 1)
        last = 0
        for j, o in enumerate(self.origin):
            self.gap[j] = last
            if o is not None:
                last = o + 1
        self.gap[len(new)] = last
        self.kept_prefix = [0] * (len(old) + 1)
        for i, k in enumerate(self.kept):
            self.kept_prefix[i + 1] = self.kept_prefix[i] + k
        self._new_index: dict[str, list[int]] | None = None
        self._old_index: dict[str, list[int]] | None = None

    def _canonicalize(self) -> None:
        """Slide every inserted and every deleted run as far down as it goes.

        A run whose first line equals the line just after it can be aligned one line lower with the same cost (a
        diff "slider"); which of the equivalent alignments difflib picks depends on the whole text around it, so
        two alignments of the same change (stock -> patched, stock -> expected) could disagree on which lines are
        the new ones. Sliding every run to its lowest position makes that choice the same on both sides."""
        old, new, origin, kept = self.old, self.new, self.origin, self.kept
        partner: list[int | None] = [None] * len(old)
        for j, o in enumerate(origin):
            if o is not None:
                partner[o] = j
        # deleted runs: old[a:b] not kept; old[b] kept and equal to old[a] -> old[a] takes old[b]'s partner
        a = 0
        while a < len(old):
            if kept[a]:
                a += 1
                continue
            b = a
            while b < len(old) and not kept[b]:
                b += 1
            while b < len(old) and kept[b] and old[a] == old[b]:
                j = partner[b]
                partner[a], partner[b] = j, None
                kept[a], kept[b] = True, False
                origin[j] = a
                a += 1
                b += 1
                while b < len(old) and not kept[b]:
                    b += 1
            a = b
        # inserted runs: new[a:b] new; new[b] kept and equal to new[a] -> new[a] takes new[b]'s old line
        a = 0
        while a < len(new):
            if origin[a] is not None:
                a += 1
                continue
            b = a
            while b < len(new) and origin[b] is None:
                b += 1
            while b < len(new) and origin[b] is not None and new[a] == new[b]:
                origin[a], origin[b] = origin[b], None
                a += 1
                b += 1
                while b < len(new) and origin[b] is None:
                    b += 1
            a = b

    def new_positions(self, line: str) -> list[int]:
        if self._new_index is None:
            self._new_index = _index(self.new)
        return self._new_index.get(line, [])

    def old_positions(self, line: str) -> list[int]:
        if self._old_index is None:
            self._old_index = _index(self.old)
        return self._old_index.get(line, [])

    def old_site_of_new(self, j: int) -> int:
        """Old index for new position j: the line itself when it survived from old, else the gap it sits in."""
        o = self.origin[j] if j < len(self.new) else None
        return o if o is not None else self.gap[j]


def _index(lines: Sequence[str]) -> dict[str, list[int]]:
    idx: dict[str, list[int]] = {}
    for i, line in enumerate(lines):
        idx.setdefault(line, []).append(i)
    return idx


def matching_blocks(a: Sequence[str], b: Sequence[str]) -> list[tuple[int, int, int]]:
    """Matching blocks (i, j, n) of a line alignment of `a` and `b`, in order.

    difflib's `SequenceMatcher` costs up to |a|·|b| on files whose lines repeat (blank lines, ``return x``), which
    made the audit of a large file quadratic.  The alignment is therefore anchored first, patience-diff style: lines
    that occur exactly once in each side and keep their order (the longest increasing run of such pairs) are
    matched, and only the stretches between anchors — short in real code — are left to difflib, after trimming
    their common prefix and suffix.  A stretch with unique lines of its own is anchored again the same way."""
    blocks: list[tuple[int, int, int]] = []
    _align_region(a, b, 0, len(a), 0, len(b), blocks)
    merged: list[tuple[int, int, int]] = []
    for i, j, n in blocks:
        if merged and merged[-1][0] + merged[-1][2] == i and merged[-1][1] + merged[-1][2] == j:
            pi, pj, pn = merged[-1]
            merged[-1] = (pi, pj, pn + n)
        elif n:
            merged.append((i, j, n))
    return merged


def _align_region(
    a: Sequence[str], b: Sequence[str], alo: int, ahi: int, blo: int, bhi: int, out: list[tuple[int, int, int]]
) -> None:
    """Append the matching blocks of a[alo:ahi] and b[blo:bhi] to `out` (see `matching_blocks`)."""
    pre = 0
    while alo + pre < ahi and blo + pre < bhi and a[alo + pre] == b[blo + pre]:
        pre += 1
    if pre:
        out.append((alo, blo, pre))
        alo += pre
        blo += pre
    suf = 0
    while alo < ahi - suf and blo < bhi - suf and a[ahi - 1 - suf] == b[bhi - 1 - suf]:
        suf += 1
    ahi -= suf
    bhi -= suf
    if alo < ahi and blo < bhi:
        anchors = _unique_anchors(a, b, alo, ahi, blo, bhi)
        if anchors:
            i0, j0 = alo, blo
            for i, j in anchors:
                _align_region(a, b, i0, i, j0, j, out)
                out.append((i, j, 1))
                i0, j0 = i + 1, j + 1
            _align_region(a, b, i0, ahi, j0, bhi, out)
        else:
            sm = difflib.SequenceMatcher(None, a[alo:ahi], b[blo:bhi], autojunk=False)
            out.extend((i + alo, j + blo, n) for i, j, n in sm.get_matching_blocks() if n)
    if suf:
        out.append((ahi, bhi, suf))


def _unique_anchors(
    a: Sequence[str], b: Sequence[str], alo: int, ahi: int, blo: int, bhi: int
) -> list[tuple[int, int]]:
    """Pairs (i, j) of lines occurring once in a[alo:ahi] and once in b[blo:bhi], the longest run of them in the
    same order on both sides (patience sorting: O(k log k) for k such lines)."""
    count_a: dict[str, int] = {}
    where_a: dict[str, int] = {}
    for i in range(alo, ahi):
        line = a[i]
        count_a[line] = count_a.get(line, 0) + 1
        where_a[line] = i
    count_b: dict[str, int] = {}
    where_b: dict[str, int] = {}
    for j in range(blo, bhi):
        line = b[j]
        if line in count_a:
            count_b[line] = count_b.get(line, 0) + 1
            where_b[line] = j
    pairs = sorted((where_a[line], j) for line, j in where_b.items() if count_b[line] == 1 and count_a[line] == 1)
    if not pairs:
        return []
    # longest increasing subsequence of j over pairs sorted by i
    tails: list[int] = []  # tails[k]: index into pairs of the smallest j ending a run of length k + 1
    back: list[int] = [-1] * len(pairs)
    for k, (_, j) in enumerate(pairs):
        pos = _bisect_tails(pairs, tails, j)
        if pos:
            back[k] = tails[pos - 1]
        if pos == len(tails):
            tails.append(k)
        else:
            tails[pos] = k
    run = []
    k = tails[-1]
    while k >= 0:
        run.append(pairs[k])
        k = back[k]
    run.reverse()
    return run


def _bisect_tails(pairs: list[tuple[int, int]], tails: list[int], j: int) -> int:
    """The first position in `tails` whose pair's j is not below `j`."""
    lo, hi = 0, len(tails)
    while lo < hi:
        mid = (lo + hi) // 2
        if pairs[tails[mid]][1] < j:
            lo = mid + 1
        else:
            hi = mid
    return lo


@dataclass
class ChangeGroup:
    """A run of removed and/or added lines between context lines of a hunk, and where it starts in the hunk's
    pre-image and post-image."""

    removed: list[str]
    added: list[str]
    pre_start: int
    post_start: int


def change_groups(hunk: Hunk) -> list[ChangeGroup]:
    """The hunk's change groups, in order."""
    groups: list[ChangeGroup] = []
    pre = post = 0
    open_group = False
    for op, text in hunk.lines:
        if op == " ":
            open_group = False
            pre += 1
            post += 1
            continue
        if not open_group:
            groups.append(ChangeGroup([], [], pre, post))
            open_group = True
        if op == "-":
            groups[-1].removed.append(text)
            pre += 1
        else:
            groups[-1].added.append(text)
            post += 1
    return groups


def _run_matches(seq: Sequence[str], at: int, run: list[str]) -> bool:
    return at >= 0 and at + len(run) <= len(seq) and all(seq[at + t] == run[t] for t in range(len(run)))


def _mostly(flags) -> bool:
    """All of a short run, a clear majority of a long one. The line alignment may pair an added line with an
    identical stock line nearby (`continue`, `return x`), so a long added block is rarely new line for line."""
    flags = list(flags)
    if len(flags) <= 2:
        return all(flags)
    return sum(flags) * 3 >= len(flags) * 2


def _slide_down(seq: Sequence[str], at: int, n: int) -> int:
    """Lowest position an inserted/deleted run seq[at:at+n] can be aligned at with the same cost: it moves down
    while its first line equals the line just after it. `Alignment` puts every run there, so a run found by
    its text is looked up at this position."""
    while n and at + n < len(seq) and seq[at] == seq[at + n]:
        at += 1
    return at


def _find_added(
    al: Alignment, added: list[str], claimed: set[int], lo: int = 0, hi: int | None = None
) -> list[tuple[int, int]]:
    """New-side positions where `added` shows up as lines new in `al.new` (significant ones must all be new), as
    (position of the text, position after sliding it down like the alignment does)."""
    return _find_run(al.new, al.new_positions, added, claimed, lo, hi, lambda k: al.origin[k] is None)


def _find_removed(
    al: Alignment, removed: list[str], claimed: set[int], lo: int = 0, hi: int | None = None
) -> list[tuple[int, int]]:
    """Old-side positions where `removed` shows up as old lines gone from `al.new`, as (position of the text,
    position after sliding it down like the alignment does)."""
    return _find_run(al.old, al.old_positions, removed, claimed, lo, hi, lambda k: not al.kept[k])


def _find_run(
    seq: Sequence[str],
    positions: Callable[[str], list[int]],
    run: list[str],
    claimed: set[int],
    lo: int,
    hi: int | None,
    changed: Callable[[int], bool],
) -> list[tuple[int, int]]:
    """Where `run` occurs in `seq` (unclaimed, within [lo, hi)) as lines the alignment calls changed (`changed(k)`
    for the k-th line of `seq`): most significant lines and at least one line must be changed.

    The text may sit higher than the alignment's run of changed lines it is equivalent to (a slider): the lines are
    judged where the alignment puts that run; the flags follow the slid run, whose t-th line is a rotation."""
    hi = len(seq) if hi is None else hi
    sig = [t for t, line in enumerate(run) if _is_significant(line)]
    probe = min(sig, key=lambda t: len(positions(run[t]))) if sig else 0
    out = []
    for p in positions(run[probe]):
        j = p - probe
        if j < lo or j + len(run) > hi or not _run_matches(seq, j, run):
            continue
        if any(x in claimed for x in range(j, j + len(run))):
            continue
        c = _slide_down(seq, j, len(run))
        flags = [changed(c + (t - (c - j)) % len(run)) for t in range(len(run))]
        if sig and not _mostly(flags[t] for t in sig):
            continue
        if not any(flags):
            continue
        out.append((j, c))
    return out


@dataclass
class Site:
    """Where one change group sits in old-side line indices (0-based): removal start, or insertion gap."""

    old_pos: int
    new_pos: int | None
    old_len: int
    new_len: int
    #: old_pos of the equivalent alignment with the run slid down as far as it goes (equal keys: the same site)
    key: int = -1

    def same_place(self, other: Site) -> bool:
        return self.old_pos == other.old_pos or self.key == other.key


def group_sites(
    al: Alignment,
    removed: list[str],
    added: list[str],
    claimed_old: set[int],
    claimed_new: set[int],
    near: int | None,
    new_range: tuple[int, int] | None = None,
    earlier_added: set[str] | None = None,
) -> list[Site]:
    """Every site of one change group in an alignment, the closest to `near` (old index) first.

    `earlier_added`: lines added by earlier patches; removed lines among them are not in the old text at all, so a
    group removing only such lines is located by its added lines alone."""
    lo, hi = new_range if new_range else (0, len(al.new))
    if new_range and added:
        # the alignment may mark an identical neighbour as the new line (a blank among blanks): widen the range
        # over neighbours that repeat the added lines
        same = set(added)
        while lo > 0 and al.new[lo - 1] in same:
            lo -= 1
        while hi < len(al.new) and al.new[hi] in same:
            hi += 1
    if removed and earlier_added and all(line in earlier_added for line in removed):
        if not _find_removed(al, removed, claimed_old):
            removed = []
            if not added:
                return []
    sites: list[Site] = []
    if added:
        for j, jc in _find_added(al, added, claimed_new, lo, hi):
            if removed:
                gap = al.gap[jc]
                for i, ic in _find_removed(al, removed, claimed_old):
                    if gap <= ic and al.kept_prefix[ic] == al.kept_prefix[gap]:
                        sites.append(Site(i, j, len(removed), len(added), ic))
                        break
            else:
                sites.append(Site(al.gap[j], j, 0, len(added), al.gap[jc]))
    else:
        old_lo = al.gap[lo] if new_range else 0
        old_hi = al.gap[hi] + 1 if new_range else len(al.old)
        for i, ic in _find_removed(al, removed, claimed_old, old_lo, old_hi + len(removed)):
            sites.append(Site(i, None, len(removed), 0, ic))
    if near is not None:
        sites.sort(key=lambda s: abs(s.old_pos - near))
    return sites


def claim(site: Site, claimed_old: set[int], claimed_new: set[int]) -> None:
    claimed_old.update(range(site.old_pos, site.old_pos + site.old_len))
    if site.new_pos is not None:
        claimed_new.update(range(site.new_pos, site.new_pos + site.new_len))
