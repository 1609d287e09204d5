"""Audit an application of patches: where did each hunk land, and is that where it belongs?

`audit(stock, patched, patches)` works on trees patched by anything (GNU patch, quilt, git, this project): it never
looks at how the application was made, only at its result.

For every file a patch touches, the stock and patched texts are aligned line by line. Each hunk's change groups
(a run of removed and/or added lines between context) are then looked up in that alignment: added lines must show up
as lines new in the patched file, removed lines as stock lines gone from it. Where the group sits, in stock line
numbers, is the hunk's *landing*.

Independently, the placement engine says where the hunk *belongs*: `place_file` on the stock file (for a sequence of
patches: on the stock file with the earlier patches' placements applied). That expected application is aligned with
stock the same way, so both sites are measured by one ruler. An inserted (or deleted) run whose first line repeats
the line after it can be aligned in several equivalent ways (a diff "slider"), and difflib's pick depends on the
text around it; every alignment therefore slides each run as far down as it goes, and a change group found by its
text is judged where that canonical run is. Two sites are the same when the group's text sits at the same stock
line or its canonical runs do; the line reported is where the group's own text sits (the hunk's site).

Verdicts: `exact`, `offset`, `fuzzy` (landed at the engine's site, which it found with offset/relocation/merge),
`already-applied` (stock already had it), and the bad ones: `misplaced` (landed elsewhere, or the engine finds no
acceptable site at all), `failed` (not present in the patched file), `ambiguous` (the engine finds no unique site).
"""

from __future__ import annotations

import difflib
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import PurePath

from .patchfile import FilePatch, Hunk, Patch, decode_text, split_lines
from .placement import Placement, Verdict, place_file, place_hunk
from .report import hunk_json
from .results import AuditVerdict
from .scope import Scope, scope_at
from .trees import FileTree

#: verdicts that make an audit fail
BAD_VERDICTS = frozenset({AuditVerdict.MISPLACED, AuditVerdict.FAILED, AuditVerdict.AMBIGUOUS})

#: lines around a placement window aligned to find its change groups (an inserted block slides at most this far)
_MARGIN = 100

#: lines of stock shown around each site in `render_text`
EXCERPT_RADIUS = 3


@dataclass
class AuditHunk:
    """The audit's finding for one hunk. Line numbers are 1-based stock line numbers of the hunk's first change:
    the first removed line, or, for a pure insertion, the stock line the added lines were inserted before."""

    patch: str
    file: str
    hunk: int
    verdict: AuditVerdict
    landed_at: int | None
    expected_at: int | None
    reason: str
    landed_scope: Scope | None = None
    expected_scope: Scope | None = None
    #: stock excerpts (line number, text) around each site, for the side-by-side view; filled for bad hunks only
    landed_excerpt: list[tuple[int, str]] = field(default_factory=list, repr=False)
    expected_excerpt: list[tuple[int, str]] = field(default_factory=list, repr=False)
    #: the hunk's first changed line, shown at both sites
    change_line: str = field(default="", repr=False)
    #: where the engine finds no acceptable site: its best candidate (stock line of the first agreeing pre-image
    #: line) and that site's score, shown in the side-by-side view so the reader sees where it would have gone
    rejected_at: int | None = None
    rejected_score: float | None = None
    rejected_excerpt: list[tuple[int, str]] = field(default_factory=list, repr=False)

    @property
    def bad(self) -> bool:
        return self.verdict in BAD_VERDICTS

    def to_json(self) -> dict:
        return hunk_json(self)


@dataclass
class AuditReport:
    """Every hunk's finding, in patch order, and the count per verdict."""

    hunks: list[AuditHunk]
    summary: dict[str, int]

    @property
    def ok(self) -> bool:
        """True when no hunk is misplaced, failed or ambiguous."""
        return not any(h.bad for h in self.hunks)

    @property
    def bad_hunks(self) -> list[AuditHunk]:
        return [h for h in self.hunks if h.bad]

    def to_json(self) -> dict:
        return {"hunks": [h.to_json() for h in self.hunks], "summary": {**self.summary, "ok": self.ok}}


# --------------------------------------------------------------------------------------------------------------
# Line alignment


def _is_significant(line: str) -> bool:
    """A line specific enough to identify a change: blank lines and lone brackets occur everywhere."""
    return sum(c.isalnum() for c in line) >= 3


class _Alignment:
    """A line alignment of `old` -> `new`: which new lines are old lines (and which), which old lines survive."""

    def __init__(self, old: Sequence[str], new: Sequence[str]) -> None:
        self.old = old
        self.new = new
        self.origin: list[int | None] = [None] * len(new)
        self.kept = [False] * len(old)
        for i, j, n in _matching_blocks(old, new):
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


def _matching_blocks(a: Sequence[str], b: Sequence[str]) -> list[tuple[int, int, int]]:
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
    """Append the matching blocks of a[alo:ahi] and b[blo:bhi] to `out` (see `_matching_blocks`)."""
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


def _change_groups(hunk: Hunk) -> list[tuple[list[str], list[str]]]:
    """The hunk's runs of removed/added lines between context, as (removed, added)."""
    groups: list[tuple[list[str], list[str]]] = []
    cur: tuple[list[str], list[str]] | None = None
    for op, text in hunk.lines:
        if op == " ":
            cur = None
            continue
        if cur is None:
            cur = ([], [])
            groups.append(cur)
        (cur[0] if op == "-" else cur[1]).append(text)
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
    while its first line equals the line just after it. `_Alignment` puts every run there, so a run found by
    its text is looked up at this position."""
    while n and at + n < len(seq) and seq[at] == seq[at + n]:
        at += 1
    return at


def _find_added(
    al: _Alignment, added: list[str], claimed: set[int], lo: int = 0, hi: int | None = None
) -> list[tuple[int, int]]:
    """New-side positions where `added` shows up as lines new in `al.new` (significant ones must all be new), as
    (position of the text, position after sliding it down like the alignment does)."""
    return _find_run(al.new, al.new_positions, added, claimed, lo, hi, lambda k: al.origin[k] is None)


def _find_removed(
    al: _Alignment, removed: list[str], claimed: set[int], lo: int = 0, hi: int | None = None
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
class _Site:
    """Where one change group sits in old-side line indices (0-based): removal start, or insertion gap."""

    old_pos: int
    new_pos: int | None
    old_len: int
    new_len: int
    #: old_pos of the equivalent alignment with the run slid down as far as it goes (equal keys: the same site)
    key: int = -1

    def same_place(self, other: _Site) -> bool:
        return self.old_pos == other.old_pos or self.key == other.key


def _locate_group(
    al: _Alignment,
    removed: list[str],
    added: list[str],
    claimed_old: set[int],
    claimed_new: set[int],
    near: int | None,
    new_range: tuple[int, int] | None = None,
    earlier_added: set[str] | None = None,
) -> _Site | None:
    """Find one change group in an alignment; several candidates: the one closest to `near` (old index).

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
                return None
    sites: list[_Site] = []
    if added:
        for j, jc in _find_added(al, added, claimed_new, lo, hi):
            if removed:
                gap = al.gap[jc]
                for i, ic in _find_removed(al, removed, claimed_old):
                    if gap <= ic and al.kept_prefix[ic] == al.kept_prefix[gap]:
                        sites.append(_Site(i, j, len(removed), len(added), ic))
                        break
            else:
                sites.append(_Site(al.gap[j], j, 0, len(added), al.gap[jc]))
    else:
        old_lo = al.gap[lo] if new_range else 0
        old_hi = al.gap[hi] + 1 if new_range else len(al.old)
        for i, ic in _find_removed(al, removed, claimed_old, old_lo, old_hi + len(removed)):
            sites.append(_Site(i, None, len(removed), 0, ic))
    if not sites:
        return None
    if near is not None:
        sites.sort(key=lambda s: abs(s.old_pos - near))
    return sites[0]


def _claim(site: _Site, claimed_old: set[int], claimed_new: set[int]) -> None:
    claimed_old.update(range(site.old_pos, site.old_pos + site.old_len))
    if site.new_pos is not None:
        claimed_new.update(range(site.new_pos, site.new_pos + site.new_len))


# --------------------------------------------------------------------------------------------------------------
# Per-file state across a sequence of patches


@dataclass
class _FileState:
    """One file's stock and patched lines, their alignment, and the engine's expected text so far."""

    stock: list[str]
    patched: list[str]
    landing: _Alignment  # stock -> patched
    expected: list[str]  # stock with the earlier patches' placements applied
    expected_to_stock: _Alignment  # stock -> expected
    claimed_old: set[int] = field(default_factory=set)
    claimed_new: set[int] = field(default_factory=set)
    final_newline: bool = True
    #: lines added by the patches audited so far / removed by the patches still to come (texts)
    added_so_far: set[str] = field(default_factory=set)
    removed_later: Counter = field(default_factory=Counter)


def _lines(data: bytes | None) -> tuple[list[str], bool]:
    if data is None:
        return [], True
    return split_lines(decode_text(data))


def _expected_to_stock(state: _FileState, pos: int, removal: bool) -> int:
    """Map an index of the expected text to a stock index (an inserted line maps to its gap)."""
    al = state.expected_to_stock
    if removal and pos < len(al.new) and al.origin[pos] is not None:
        return al.origin[pos]
    return al.gap[pos]


def _apply_placements(lines: list[str], placements: list[Placement]) -> list[str]:
    """Apply placed hunks (windows refer to `lines` before any of them) in order; overlaps are skipped."""
    out: list[str] = []
    at = 0
    for p in sorted(
        (p for p in placements if p.replacement is not None and p.start is not None and p.ok),
        key=lambda p: p.start,
    ):
        if p.start < at:
            continue
        out += lines[at : p.start]
        out += p.replacement
        at = p.end if p.end is not None else p.start
    out += lines[at:]
    return out


def _place(fp: FilePatch, text_lines: list[str], final_newline: bool, exists: bool, path: str) -> list[Placement]:
    """The engine's placements for every hunk of `fp`; per hunk when the file-level result does not parse
    (the audit wants each hunk's own site, not a file-wide refusal)."""
    from .patchfile import join_lines

    result = place_file(fp, join_lines(text_lines, final_newline) if exists else None, path)
    if result.parse_error:
        return [place_hunk(h, text_lines, path) for h in fp.hunks]
    return result.placements


def _is_ambiguous(p: Placement) -> bool:
    """A conflict because no single site stands out (rather than because no site agrees enough)."""
    text = p.evidence.lower()
    if "ambiguous" in text or "not unique" in text or "tie" in text.split():
        return True
    # two sites that both agree completely; a tie among poor sites means "no acceptable site", not ambiguity
    return len(p.candidates) >= 2 and p.candidates[1][1] >= 0.999


def _excerpt(lines: list[str], line_no: int | None) -> list[tuple[int, str]]:
    if line_no is None:
        return []
    lo = max(1, line_no - EXCERPT_RADIUS)
    hi = min(len(lines), line_no + EXCERPT_RADIUS - 1)
    return [(n, lines[n - 1]) for n in range(lo, hi + 1)]


def _safe_scope(lines: list[str], line_no: int | None, path: str) -> Scope | None:
    if line_no is None or not path.endswith(".py") or not lines:
        return None
    try:
        return scope_at(lines, min(max(line_no, 1), len(lines)))
    except (NotImplementedError, SyntaxError, ValueError):
        return None


def _change_scope(text: list[str] | None, site: _Site, stock: list[str], path: str) -> Scope | None:
    """The scope of a change where it ended up: the first added line in the text that contains it (what the code
    means there), else the stock line at the site."""
    if text is not None and site.new_pos is not None:
        scope = _safe_scope(text, site.new_pos + 1, path)
        if scope is not None:
            return scope
    return _safe_scope(stock, site.old_pos + 1, path)


def _scope_difference(a: Scope | None, b: Scope | None) -> str:
    if a is None or b is None or a == b:
        return ""
    if a.chain != b.chain:
        return "another scope"
    if a.branch != b.branch:
        return "another branch"
    return "another role"


def _patch_label(patch: Patch) -> str:
    return PurePath(patch.name).name or patch.name


def audit(stock: FileTree, patched: FileTree, patches: list[Patch]) -> AuditReport:
    """Audit how `patches` (in order) were applied to `stock` to give `patched`; one `AuditHunk` per hunk."""
    states: dict[str, _FileState] = {}
    findings: list[AuditHunk] = []
    removed_by: dict[str, Counter] = {}
    for patch in patches:
        for fp in patch.files:
            c = removed_by.setdefault(fp.new_path or fp.old_path or "?", Counter())
            for h in fp.hunks:
                c.update(h.removed)
    for patch in patches:
        label = _patch_label(patch)
        for fp in patch.files:
            if not fp.hunks:
                continue
            path = fp.new_path or fp.old_path or "?"
            state = states.get(path)
            if state is None:
                s_lines, s_nl = _lines(stock.read(fp.old_path or path))
                p_lines, _ = _lines(patched.read(path))
                state = _FileState(
                    stock=s_lines,
                    patched=p_lines,
                    landing=_Alignment(s_lines, p_lines),
                    expected=list(s_lines),
                    expected_to_stock=_Alignment(s_lines, s_lines),
                    final_newline=s_nl,
                    removed_later=removed_by.get(path, Counter()),
                )
                states[path] = state
            exists = bool(state.expected) or stock.read(fp.old_path or path) is not None
            placements = _place(fp, state.expected, state.final_newline, exists, path)
            for hunk in fp.hunks:
                state.removed_later.subtract(hunk.removed)
            for hunk, placement in zip(fp.hunks, placements, strict=True):
                findings.append(_audit_hunk(label, path, hunk, placement, state))
            for hunk in fp.hunks:
                state.added_so_far.update(hunk.added)
            state.expected = _apply_placements(state.expected, placements)
            state.expected_to_stock = _Alignment(state.stock, state.expected)
    summary = {v.value: 0 for v in AuditVerdict}
    for f in findings:
        summary[f.verdict.value] += 1
    return AuditReport(findings, summary)


def _expected_sites(hunk: Hunk, placement: Placement, state: _FileState) -> tuple[list[_Site], list[str]] | None:
    """Where the engine's placement puts each change group (stock indices; `new_pos` indexes the returned text,
    the expected file with this hunk applied); None when it places nothing."""
    if placement.start is None or placement.replacement is None:
        return None
    end = placement.end if placement.end is not None else placement.start
    base = state.expected
    applied = base[: placement.start] + placement.replacement + base[end:]
    # align only a neighbourhood of the window: the rest of the file is identical, and a whole-file alignment
    # per hunk would dominate the audit's cost on large files
    lo = max(0, placement.start - _MARGIN)
    hi_old = min(len(base), end + _MARGIN)
    hi_new = hi_old + len(applied) - len(base)
    al = _Alignment(base[lo:hi_old], applied[lo:hi_new])
    window = (placement.start - lo, placement.start - lo + len(placement.replacement))
    sites: list[_Site] = []
    c_old: set[int] = set()
    c_new: set[int] = set()
    for removed, added in _change_groups(hunk):
        site = _locate_group(al, removed, added, c_old, c_new, placement.start - lo, window)
        if site is None:
            return None
        _claim(site, c_old, c_new)
        sites.append(
            _Site(
                site.old_pos + lo,
                None if site.new_pos is None else site.new_pos + lo,
                site.old_len,
                site.new_len,
                site.key + lo,
            )
        )
    stock_sites = [
        _Site(
            _expected_to_stock(state, s.old_pos, bool(s.old_len)),
            s.new_pos,
            s.old_len,
            s.new_len,
            _expected_to_stock(state, s.key, bool(s.old_len)),
        )
        for s in sites
    ]
    return stock_sites, applied


def _landed_sites(hunk: Hunk, state: _FileState, near: list[_Site] | None) -> tuple[list[_Site], int]:
    """Where each change group shows up in the patched file (stock indices); and how many groups were found."""
    found: list[_Site] = []
    groups = _change_groups(hunk)
    for g, (removed, added) in enumerate(groups):
        hint = near[g].old_pos if near and g < len(near) else (found[-1].old_pos if found else hunk.old_start - 1)
        site = _locate_group(
            state.landing, removed, added, state.claimed_old, state.claimed_new, hint, earlier_added=state.added_so_far
        )
        if site is None:
            continue
        found.append(site)
    if len(found) == len(groups):
        for s in found:
            _claim(s, state.claimed_old, state.claimed_new)
    return found, len(found)


def _audit_hunk(label: str, path: str, hunk: Hunk, placement: Placement, state: _FileState) -> AuditHunk:
    groups = _change_groups(hunk)
    placed = _expected_sites(hunk, placement, state)
    expected, expected_text = placed if placed else (None, None)
    landed, n_found = _landed_sites(hunk, state, expected)
    expected_at = expected[0].old_pos + 1 if expected else None
    if expected_at is None and placement.verdict is Verdict.ALREADY_APPLIED and placement.landing_line:
        expected_at = _expected_to_stock(state, placement.landing_line - 1, True) + 1
    complete = n_found == len(groups)
    landed_at = landed[0].old_pos + 1 if complete and landed else None

    def finding(verdict: AuditVerdict, reason: str, **kw) -> AuditHunk:
        h = AuditHunk(label, path, hunk.index, verdict, landed_at, expected_at, reason, **kw)
        if h.bad:
            h.expected_excerpt = _excerpt(state.stock, expected_at)
            h.landed_excerpt = _excerpt(state.stock, landed_at)
            h.change_line = next((op + t for op, t in hunk.lines if op != " "), "")
            if expected_at is None and verdict is not AuditVerdict.AMBIGUOUS:
                _note_rejected(h, placement, state)
        return h

    if placement.verdict is Verdict.ALREADY_APPLIED:
        if complete and any(g[1] for g in groups):
            return finding(
                AuditVerdict.MISPLACED,
                f"stock already contains this change (near line {expected_at}), yet it was applied again "
                f"at line {landed_at}",
            )
        return finding(AuditVerdict.ALREADY_APPLIED, "stock already contains the hunk's post-image")

    if (
        not complete
        and placement.ok
        and groups
        and all(all(state.removed_later[line] > 0 for line in added) and added for _, added in groups)
    ):
        # a later patch rewrote every line this hunk added: its landing cannot be seen in the patched file
        verdict = {Verdict.EXACT: AuditVerdict.EXACT, Verdict.OFFSET: AuditVerdict.OFFSET}.get(
            placement.verdict, AuditVerdict.FUZZY
        )
        return AuditHunk(
            label,
            path,
            hunk.index,
            verdict,
            None,
            expected_at,
            "its added lines were changed again by a later patch; landing not observable, the engine's site is "
            f"line {expected_at}",
            expected_scope=placement.scope,
        )

    if not complete:
        missing = len(groups) - n_found
        what = (
            "not present in the patched file"
            if n_found == 0
            else (f"only partly present ({missing} of {len(groups)} change groups missing)")
        )
        return finding(AuditVerdict.FAILED, what + _engine_note(placement), expected_scope=placement.scope)

    if not placement.ok or expected is None:
        l_scope = _safe_scope(state.stock, landed_at, path)
        if _is_ambiguous(placement):
            return finding(
                AuditVerdict.AMBIGUOUS,
                f"landed at line {landed_at}, but the hunk has no unique right site: {placement.evidence}",
                landed_scope=l_scope,
            )
        return finding(
            AuditVerdict.MISPLACED,
            f"landed at line {landed_at}, but the hunk has no acceptable site in stock: {placement.evidence}",
            landed_scope=l_scope,
        )

    same = len(expected) == len(landed) and all(e.same_place(s) for e, s in zip(expected, landed, strict=True))
    if same:
        verdict = {
            Verdict.EXACT: AuditVerdict.EXACT,
            Verdict.OFFSET: AuditVerdict.OFFSET,
        }.get(placement.verdict, AuditVerdict.FUZZY)
        reason = {
            AuditVerdict.EXACT: "landed where the patch says",
            AuditVerdict.OFFSET: f"landed at the engine's site (offset {_offset(hunk, expected_at):+d})"
            if expected_at is not None
            else "landed at the engine's site",
            AuditVerdict.FUZZY: f"context differed; landed at the engine's unique best site ({placement.verdict})",
        }[verdict]
        return finding(verdict, reason, landed_scope=placement.scope, expected_scope=placement.scope)

    l_scope = _change_scope(state.patched, landed[0], state.stock, path)
    e_scope = _change_scope(expected_text, expected[0], state.stock, path) or placement.scope
    diff = _scope_difference(l_scope, e_scope)
    where_l = f" ({l_scope.describe()})" if l_scope else ""
    where_e = f" ({e_scope.describe()})" if e_scope else ""
    if landed_at == expected_at:
        # first groups agree, a later group of the same hunk went elsewhere
        bad = next(g for g, (e, s) in enumerate(zip(expected, landed, strict=False)) if not e.same_place(s))
        reason = (
            f"change group {bad + 1} landed at line {landed[bad].old_pos + 1}, "
            f"belongs at line {expected[bad].old_pos + 1}"
        )
    else:
        reason = f"landed at line {landed_at}{where_l}, belongs at line {expected_at}{where_e}"
    if diff:
        reason += f" — {diff}"
    return finding(AuditVerdict.MISPLACED, reason, landed_scope=l_scope, expected_scope=e_scope)


def _note_rejected(h: AuditHunk, placement: Placement, state: _FileState) -> None:
    """Record the engine's best candidate site, which it rejected, in stock line numbers."""
    if placement.ok or not placement.candidates:
        return
    line, score = placement.candidates[0]
    if not 1 <= line <= len(state.expected):
        return
    h.rejected_at = _expected_to_stock(state, line - 1, True) + 1
    h.rejected_score = score
    h.rejected_excerpt = _excerpt(state.stock, h.rejected_at)


def _offset(hunk: Hunk, first_change_at: int) -> int:
    """Lines between where the `@@` header puts the hunk's first change and where it is."""
    header_at = hunk.old_start + hunk.leading_context if hunk.old_len else hunk.old_start + 1
    return first_change_at - header_at


def _engine_note(placement: Placement) -> str:
    if placement.ok:
        return f"; the engine would place it at line {placement.landing_line} ({placement.verdict})"
    return f"; the engine finds no site either: {placement.evidence}" if placement.evidence else ""


# --------------------------------------------------------------------------------------------------------------
# Human output


def render_text(report: AuditReport, width: int = 60) -> str:
    """Summary line, then for each bad hunk the expected site and the actual site side by side (stock context)."""
    out: list[str] = []
    counts = ", ".join(f"{n} {v}" for v, n in report.summary.items() if n)
    out.append(f"audit: {len(report.hunks)} hunks: {counts or 'none'} — {'OK' if report.ok else 'NOT OK'}")
    for h in report.bad_hunks:
        out.append("")
        out.append(f"{h.patch}: {h.file} hunk {h.hunk}: {h.verdict.value.upper()}: {h.reason}")
        left = _column("expected", h.expected_at, h.expected_scope, h.expected_excerpt, h.change_line, width)
        if h.expected_at is None and h.rejected_at is not None:
            # the site the engine would have taken had it accepted one; its pre-image starts at that line
            left += _column(
                "engine's best (rejected) site",
                h.rejected_at,
                None,
                h.rejected_excerpt,
                "",
                width,
                note=f"score {h.rejected_score:.2f}" if h.rejected_score is not None else "",
            )
        right = _column("landed", h.landed_at, h.landed_scope, h.landed_excerpt, h.change_line, width)
        for i in range(max(len(left), len(right))):
            a = left[i] if i < len(left) else ""
            b = right[i] if i < len(right) else ""
            out.append(f"  {a:<{width}} | {b}".rstrip())
    return "\n".join(out) + "\n"


def _column(
    title: str,
    line: int | None,
    scope: Scope | None,
    excerpt: list[tuple[int, str]],
    change: str,
    width: int,
    note: str = "",
) -> list[str]:
    """One side of the view: a heading, then the stock lines around `line` with `change` shown where it goes
    (no change row when `change` is empty: the line is where the hunk's pre-image starts, not its change)."""
    head = f"{title}: line {line}" if line is not None else f"{title}: (nowhere)"
    if note:
        head += f" ({note})"
    if scope is not None:
        head += f" {scope.describe()}"
    rows = [_clip(head, width)]
    if line is None:
        return rows
    for n, text in excerpt:
        if n == line:
            rows.append(_clip(f"{'':>5} >> {change}", width) if change else _clip(f"{n:>5} => {text}", width))
            if not change:
                continue
        rows.append(_clip(f"{n:>5}    {text}", width))
    if change and excerpt and line > excerpt[-1][0]:
        rows.append(_clip(f"{'':>5} >> {change}", width))
    return rows


def _clip(text: str, width: int) -> str:
    text = text.replace("\t", "    ").replace("\r", "")
    return text if len(text) <= width else text[: width - 1] + "…"
