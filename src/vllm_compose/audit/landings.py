"""Audit an application of patches: where did each hunk land, and is that where it belongs?

`audit(stock, patched, patches)` works on trees patched by anything (GNU patch, quilt, git, this project): it never
looks at how the application was made, only at its result, and it shares no code with the placement engine, so it
can catch the engine's own mistakes.

**Where it landed.** For every file a patch touches, the stock and patched texts are aligned line by line
(`align.py`). Each hunk's change groups (a run of removed and/or added lines between context) are looked up in that
alignment: added lines must show up as lines new in the patched file, removed lines as stock lines gone from it.
Where the first group sits, in stock line numbers, is the hunk's *landing*.

**Where it belongs**, by two independent rulers:

- *Text.* The hunk's post-image sits verbatim around the landing in the patched file (a context line that a later
  patch of the sequence rewrote counts as present). Then the landing is `exact` (at the line the ``@@`` header,
  shifted by the earlier patches' lines, says) or `offset` — unless the pre-image also occurs verbatim elsewhere in
  stock, where the syntax anchors must tell the copies apart (else `ambiguous`).
- *Syntax anchors* (`anchors.py`, on parso's tokens): for a Python file, what the hunk's own lines say about each
  change group — its container by identity (the callee, the def, the name a list is assigned to, the import's
  module), the siblings it shows by identity, the def/class it shows or names in its section — compared with what
  the patched file has at the landing and at every other site those anchors point at. A landing whose text differs
  is `fuzzy` only when the anchors confirm it; contradicted, or confirmed nowhere, it is `misplaced`, and where
  another site fits the anchors better that site is reported as where it belongs. An insertion the anchors confirm
  is still `misplaced`, with no site to offer, when the element it is inserted after is named nowhere in the
  stock file nor in the other hunks' lines (`anchors.vanished_anchor`): the release removed it outright.

Verdicts: `exact`, `offset`, `fuzzy`, `already-applied` (stock already had it), and the bad ones: `misplaced`,
`failed` (not present in the patched file), `ambiguous` (the anchors fit another site as well as the landing).
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import PurePath

from ..patchfile import Hunk, Patch, decode_text, split_lines
from ..trees import FileTree
from ..verdicts import AuditVerdict, hunk_json
from . import anchors
from .align import Alignment, ChangeGroup, Site, change_groups, claim, group_sites

#: verdicts that make an audit fail
BAD_VERDICTS = frozenset({AuditVerdict.MISPLACED, AuditVerdict.FAILED, AuditVerdict.AMBIGUOUS})

#: lines of stock shown around each site in `report.render_audit`
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
    #: what the anchors say is at each site (`anchors.Spot`: the def chain and the container), when known
    landed_scope: anchors.Spot | None = None
    expected_scope: anchors.Spot | None = None
    #: stock excerpts (line number, text) around each site, for the side-by-side view; filled for bad hunks only
    landed_excerpt: list[tuple[int, str]] = field(default_factory=list, repr=False)
    expected_excerpt: list[tuple[int, str]] = field(default_factory=list, repr=False)
    #: the hunk's first changed line, shown at both sites
    change_line: str = field(default="", repr=False)

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
# Per-file state across a sequence of patches


@dataclass
class _FileState:
    """One file's stock and patched lines, their alignment, and what the patches audited so far did to it."""

    path: str
    stock: list[str]
    patched: list[str]
    landing: Alignment  # stock -> patched
    claimed_old: set[int] = field(default_factory=set)
    claimed_new: set[int] = field(default_factory=set)
    #: lines removed / added by the patches still to come (texts)
    removed_later: Counter = field(default_factory=Counter)
    added_later: Counter = field(default_factory=Counter)
    #: (stock index, lines added minus removed) of every landed hunk of the earlier patches: a later patch's @@
    #: header counts the lines of the file with them applied
    shifts: list[tuple[int, int]] = field(default_factory=list)
    #: the same for the patch being audited, moved to `shifts` when it is done
    pending: list[tuple[int, int]] = field(default_factory=list)
    #: the lines each hunk of the audited patches adds to or removes from this file (a name they use is not gone)
    changed: list[tuple[Hunk, list[str]]] = field(default_factory=list)
    _stock_text: str | None = None
    _patched_outline: anchors.Outline | None = None
    _stock_outline: anchors.Outline | None = None
    _patched_at: list[int] | None = None
    _stock_index: dict[str, list[int]] | None = None

    @property
    def python(self) -> bool:
        return self.path.endswith(".py")

    def patched_outline(self) -> anchors.Outline:
        if self._patched_outline is None:
            self._patched_outline = anchors.outline(self.patched)
        return self._patched_outline

    def stock_outline(self) -> anchors.Outline:
        if self._stock_outline is None:
            self._stock_outline = anchors.outline(self.stock)
        return self._stock_outline

    def texts_besides(self, hunk: Hunk) -> list[str]:
        """The stock file, and every line the other hunks of the audited patches add or remove, as strings: all
        that can name an element of the file, but for what `hunk` itself writes."""
        if self._stock_text is None:
            self._stock_text = "\n".join(self.stock)
        return [self._stock_text, "\n".join(line for h, lines in self.changed if h is not hunk for line in lines)]

    def stock_index(self) -> dict[str, list[int]]:
        """Stock line -> its positions."""
        if self._stock_index is None:
            index: dict[str, list[int]] = {}
            for i, line in enumerate(self.stock):
                index.setdefault(line, []).append(i)
            self._stock_index = index
        return self._stock_index

    def to_stock(self, j: int) -> int:
        """The stock index of patched line `j` (a line new in the patched file: the stock line after its gap)."""
        return self.landing.old_site_of_new(min(j, len(self.landing.new)))

    def to_patched(self, i: int) -> int:
        """The patched index where stock line `i` is, or where it would be (the next surviving line's)."""
        if self._patched_at is None:
            # one walk: for every stock index, the first patched line that comes from it or from a later one
            at, j = [], 0
            origin = self.landing.origin
            for old in range(len(self.stock) + 1):
                while j < len(origin) and (origin[j] is None or origin[j] < old):
                    j += 1
                at.append(j)
            self._patched_at = at
        return self._patched_at[min(max(i, 0), len(self.stock))]


def _lines(data: bytes | None) -> tuple[list[str], bool]:
    if data is None:
        return [], True
    return split_lines(decode_text(data))


def _excerpt(lines: list[str], line_no: int | None) -> list[tuple[int, str]]:
    if line_no is None:
        return []
    lo = max(1, line_no - EXCERPT_RADIUS)
    hi = min(len(lines), line_no + EXCERPT_RADIUS - 1)
    return [(n, lines[n - 1]) for n in range(lo, hi + 1)]


def _patch_label(patch: Patch) -> str:
    return PurePath(patch.name).name or patch.name


def audit(stock: FileTree, patched: FileTree, patches: list[Patch]) -> AuditReport:
    """Audit how `patches` (in order) were applied to `stock` to give `patched`; one `AuditHunk` per hunk.

    Landings are found first, the last patch first: where a later patch carries lines an earlier hunk also adds (a
    fix that re-targets a hunk the tool failed to apply), the lines are the later patch's, and the earlier hunk is
    judged on what is left. Verdicts are then given in patch order."""
    states: dict[str, _FileState] = {}
    removed_by: dict[str, Counter] = {}
    #: per file, the lines added by the patches before each one (a removal of such a line is found by what replaces
    #: it: the line is not in stock)
    added_before: dict[tuple[int, str], set[str]] = {}
    added_after: dict[tuple[int, str], Counter] = {}
    so_far: dict[str, set[str]] = {}
    still: dict[str, Counter] = {}
    for patch in patches:
        for fp in patch.files:
            still.setdefault(fp.new_path or fp.old_path or "?", Counter()).update(
                line for h in fp.hunks for line in h.added
            )
    still_all = {path: Counter(c) for path, c in still.items()}
    changed: dict[str, list[tuple[Hunk, list[str]]]] = {}
    for patch in patches:
        for fp in patch.files:
            changed.setdefault(fp.new_path or fp.old_path or "?", []).extend(
                (h, [text for op, text in h.lines if op != " "]) for h in fp.hunks
            )
    for n, patch in enumerate(patches):
        for fp in patch.files:
            path = fp.new_path or fp.old_path or "?"
            still[path].subtract(line for h in fp.hunks for line in h.added)
        for fp in patch.files:
            path = fp.new_path or fp.old_path or "?"
            added_after[(n, path)] = +still[path]
        for fp in patch.files:
            path = fp.new_path or fp.old_path or "?"
            added_before[(n, path)] = set(so_far.get(path, set()))
            c = removed_by.setdefault(path, Counter())
            for h in fp.hunks:
                c.update(h.removed)
        for fp in patch.files:
            path = fp.new_path or fp.old_path or "?"
            so_far.setdefault(path, set()).update(line for h in fp.hunks for line in h.added)

    def state_of(fp) -> _FileState:
        path = fp.new_path or fp.old_path or "?"
        if path not in states:
            s_lines, _ = _lines(stock.read(fp.old_path or path))
            p_lines, _ = _lines(patched.read(path))
            states[path] = _FileState(
                path,
                s_lines,
                p_lines,
                Alignment(s_lines, p_lines),
                removed_later=removed_by.get(path, Counter()),
                added_later=Counter(still_all.get(path, Counter())),
                changed=changed.get(path, []),
            )
        return states[path]

    landings: dict[tuple[int, int, int], tuple[list[Site], int]] = {}
    for n in range(len(patches) - 1, -1, -1):
        for f, fp in enumerate(patches[n].files):
            state = state_of(fp)
            earlier, later = added_before[(n, state.path)], added_after[(n, state.path)]
            removed_later = Counter()
            for m in range(n + 1, len(patches)):
                for other in patches[m].files:
                    if (other.new_path or other.old_path or "?") == state.path:
                        removed_later.update(line for h in other.hunks for line in h.removed)
            for index, landing in _land_hunks(fp.hunks, state, earlier, later, removed_later).items():
                landings[(n, f, index)] = landing
    findings: list[AuditHunk] = []
    for n, patch in enumerate(patches):
        label = _patch_label(patch)
        for f, fp in enumerate(patch.files):
            if not fp.hunks:
                continue
            state = state_of(fp)
            for hunk in fp.hunks:
                state.removed_later.subtract(hunk.removed)
                state.added_later.subtract(hunk.added)
            for hunk in fp.hunks:
                findings.append(_audit_hunk(label, state.path, hunk, state, landings[(n, f, hunk.index)]))
        for state in states.values():
            state.shifts += state.pending
            state.pending = []
    summary = {v.value: 0 for v in AuditVerdict}
    for finding in findings:
        summary[finding.verdict.value] += 1
    return AuditReport(findings, summary)


# --------------------------------------------------------------------------------------------------------------
# One hunk


def _header_index(hunk: Hunk, state: _FileState) -> int:
    """The stock index where the @@ header puts the hunk's first change, the earlier patches' lines taken out."""
    at = hunk.old_start - 1 + hunk.leading_context if hunk.old_len else hunk.old_start
    shift = 0
    for line, delta in sorted(state.shifts):
        start = line + shift  # where that earlier hunk's change starts in the numbering of this header
        if start >= at:
            break
        if delta > 0 and at < start + delta:
            return line  # inside the lines it added: they have no stock line, only its site
        shift += delta
    return at - shift


def _land_hunks(
    hunks: list[Hunk], state: _FileState, earlier: set[str], later: Counter, removed_later: Counter
) -> dict[int, tuple[list[Site], int]]:
    """The landings of one patch's hunks in one file.

    Several hunks may add the same lines (one keyword argument threaded into several calls), so a hunk's nearest
    copy may be a neighbour's. The landings are chosen together: in the hunks' order down the file (as a patch is
    applied), as many hunks landed as possible, and among those the choice whose offsets change least from one
    hunk to the next (GNU patch carries the previous hunk's offset the same way). A hunk none of whose copies fits
    that order is then looked up alone (a merge, a re-indented or later-edited insertion), near where the hunks
    around it landed."""
    headers = {h.index: _header_index(h, state) for h in hunks}
    options: list[list[tuple[Site, tuple[list[Site], int]]]] = []
    for h in hunks:
        g = change_groups(h)[0]
        sites = group_sites(
            state.landing,
            g.removed,
            g.added,
            state.claimed_old,
            state.claimed_new,
            headers[h.index],
            earlier_added=earlier,
        )
        found = []
        for site in sites[:_MAX_COPIES]:
            landing = _landed_sites(
                h, state, headers[h.index], earlier, later, removed_later, first=site, do_claim=False
            )
            if landing[1] == len(change_groups(h)):
                found.append((site, landing))
        options.append(found)
    chosen = _ordered_choice(hunks, headers, options)
    out: dict[int, tuple[list[Site], int]] = {}
    for h, pick in zip(hunks, chosen, strict=True):
        if pick is not None:
            out[h.index] = pick
            for site in pick[0]:
                claim(site, state.claimed_old, state.claimed_new)
    offset = 0
    for h in hunks:
        if h.index in out:
            offset = out[h.index][0][0].old_pos - headers[h.index]
            continue
        out[h.index] = _landed_sites(h, state, headers[h.index] + offset, earlier, later, removed_later)
    return out


#: copies of a first change group considered per hunk (nearest to its header first)
_MAX_COPIES = 8
#: how many hunks back a chain of landings looks for its previous landed hunk
_WINDOW = 6


def _ordered_choice(hunks, headers, options):
    """One option (or None) per hunk: positions strictly increasing in hunk order, most hunks landed, then the
    least total change of offset between consecutive landed hunks (the first hunk's offset counts a tenth)."""
    # best[k][c]: (landed, -cost, previous (k, c) or None) for chains that end with hunk k at option c
    best: list[list[tuple[int, float, tuple[int, int] | None]]] = []
    for k, opts in enumerate(options):
        row = []
        for site, _ in opts:
            off = site.old_pos - headers[hunks[k].index]
            top = (1, -abs(off) / 10, None)
            for j in range(max(0, k - _WINDOW), k):
                for d, (other, _) in enumerate(options[j]):
                    if other.old_pos >= site.old_pos:
                        continue
                    n, cost, _prev = best[j][d]
                    change = abs(off - (other.old_pos - headers[hunks[j].index]))
                    cand = (n + 1, cost - change, (j, d))
                    if cand[:2] > top[:2]:
                        top = cand
            row.append(top)
        best.append(row)
    end = max(
        ((k, c) for k in range(len(options)) for c in range(len(options[k]))),
        key=lambda kc: best[kc[0]][kc[1]][:2],
        default=None,
    )
    chosen = [None] * len(hunks)
    while end is not None:
        k, c = end
        chosen[k] = options[k][c][1]
        end = best[k][c][2]
    return chosen


def _landed_sites(
    hunk: Hunk,
    state: _FileState,
    near: int,
    earlier_added: set[str],
    later_added: Counter | None = None,
    later_removed: Counter | None = None,
    first: Site | None = None,
    do_claim: bool = True,
) -> tuple[list[Site], int]:
    """Where each change group shows up in the patched file (stock indices); and how many groups were found
    (`earlier_added`: the lines the patches before this hunk's add to the file; `later_added` / `later_removed`:
    the lines the patches after it add and remove; `first`: the first group's site, already chosen)."""
    found: list[Site] = []
    groups = change_groups(hunk)
    for g in groups:
        hint = found[-1].old_pos if found else near
        if first is not None and not found:
            found.append(first)
            continue
        sites = group_sites(
            state.landing, g.removed, g.added, state.claimed_old, state.claimed_new, hint, earlier_added=earlier_added
        )
        site = sites[0] if sites else None
        if site is None:
            site = _merged_site(state, g.removed, g.added, hint)
        if site is None:
            site = _reflowed_item_site(state, g.removed, g.added, hint)
        if site is None and not g.removed:
            site = _reindented_site(state, g.added, hint)
        if site is None and not g.removed and later_added is not None and later_removed is not None:
            site = _edited_later_site(state, g.added, hint, later_added, later_removed)
        if site is None:
            continue
        found.append(site)
    if do_claim and len(found) == len(groups):
        for s in found:
            claim(s, state.claimed_old, state.claimed_new)
    return found, len(found)


_WORD = re.compile(r"\w+|\S")


def _edit(a: str, b: str) -> tuple[Counter, Counter]:
    """The word-level edit a -> b: (words added, words removed)."""
    wa, wb = Counter(_WORD.findall(a)), Counter(_WORD.findall(b))
    return wb - wa, wa - wb


def _merged_site(state: _FileState, removed: list[str], added: list[str], near: int) -> Site | None:
    """A group whose lines are not there verbatim, because its edit was made to drifted lines (a merge): a run of
    stock lines replaced by as many patched lines, each pair carrying the hunk's own word-level edit (the words it
    adds appear, the words it removes go). The nearest such run to `near`; None when there is none."""
    if not removed or len(removed) != len(added):
        return None
    edits = [_edit(r, a) for r, a in zip(removed, added, strict=True)]
    if not any(plus or minus for plus, minus in edits):
        return None
    al = state.landing
    n = len(added)
    found: list[Site] = []
    j = 0
    while j < len(al.new):
        if al.origin[j] is not None:
            j += 1
            continue
        start = j
        while j < len(al.new) and al.origin[j] is None:
            j += 1
        # the stock lines this run of new lines replaced: those gone from the gap up to the next surviving line
        olds = []
        i = al.gap[start]
        while i < len(al.old) and not al.kept[i] and len(olds) < j - start:
            olds.append(i)
            i += 1
        for k in range(0, (j - start) - n + 1):
            if k + n > len(olds):
                break
            i0, j0 = olds[k], start + k
            if any(x in state.claimed_old for x in range(i0, i0 + n)) or any(
                x in state.claimed_new for x in range(j0, j0 + n)
            ):
                continue
            ok = True
            for t, (plus, minus) in enumerate(edits):
                got_plus, got_minus = _edit(al.old[i0 + t], al.new[j0 + t])
                if plus - got_plus or minus - got_minus:
                    ok = False
                    break
            if ok:
                found.append(Site(i0, j0, n, n, i0))
    if not found:
        return None
    return min(found, key=lambda s: abs(s.old_pos - near))


def _reflowed_item_site(state: _FileState, removed: list[str], added: list[str], near: int) -> Site | None:
    """A one-line edit that only inserts an item into a line (`a, b` -> `a, NEW, b`: a parameter, an argument),
    where the release had wrapped that list one item per line: the item landed as a line of its own. The nearest new
    line of the patched file that is exactly the inserted item (its trailing comma aside); None when there is none."""
    if len(removed) != 1 or len(added) != 1:
        return None
    old, new = removed[0], added[0]
    p = 0
    while p < min(len(old), len(new)) and old[p] == new[p]:
        p += 1
    q = 0
    while q < min(len(old), len(new)) - p and old[len(old) - 1 - q] == new[len(new) - 1 - q]:
        q += 1
    if p + q != len(old):
        return None  # not a pure insertion into the line
    item = new[p : len(new) - q].strip().strip(",").strip()
    if not item or "," in item and "(" not in item:
        return None
    al = state.landing
    found = [
        Site(al.gap[j], j, 0, 1, al.gap[j])
        for j in range(len(al.new))
        if al.origin[j] is None and al.new[j].strip().rstrip(",").strip() == item and j not in state.claimed_new
    ]
    return min(found, key=lambda s: abs(s.old_pos - near)) if found else None


def _edited_later_site(
    state: _FileState, added: list[str], near: int, later_added: Counter, later_removed: Counter
) -> Site | None:
    """An insertion that a later patch of the sequence edited inside (it added lines among these, or rewrote some):
    the nearest run of new lines that holds the hunk's lines in order, where every line in between is one a later
    patch adds and every line missing is one a later patch removes; at least half of the hunk's lines are there."""
    al = state.landing
    new = al.new
    found: list[Site] = []
    for j in range(len(new)):
        if al.origin[j] is not None or new[j] != added[0] or j in state.claimed_new:
            continue
        t, p, kept = 0, j, 0
        while t < len(added):
            if p < len(new) and al.origin[p] is None and new[p] == added[t] and p not in state.claimed_new:
                t, p, kept = t + 1, p + 1, kept + 1
            elif later_removed[added[t]] > 0:
                t += 1
            elif p < len(new) and al.origin[p] is None and later_added[new[p]] > 0:
                p += 1
            else:
                break
        if t == len(added) and kept * 2 >= len(added):
            found.append(Site(al.gap[j], j, 0, p - j, al.gap[j]))
    return min(found, key=lambda s: abs(s.old_pos - near)) if found else None


def _reindented_site(state: _FileState, added: list[str], near: int) -> Site | None:
    """An insertion whose lines are new in the patched file at another indentation (the release nested the code
    deeper or shallower): the nearest run of new lines equal to them but for leading whitespace."""
    want = [line.strip() for line in added]
    if not any(want):
        return None
    al = state.landing
    n = len(added)
    found = [
        Site(al.gap[j], j, 0, n, al.gap[j])
        for j in range(len(al.new) - n + 1)
        if al.origin[j] is None
        and all(al.origin[j + t] is None and al.new[j + t].strip() == want[t] for t in range(n))
        and not any(x in state.claimed_new for x in range(j, j + n))
    ]
    return min(found, key=lambda s: abs(s.old_pos - near)) if found else None


def _reindented_occurrences(seq: list[str], run: list[str]) -> list[int]:
    """Where `run` occurs in `seq` but for leading whitespace (one shift for all its lines), blank runs excepted."""
    want = [line.strip() for line in run]
    if not any(want):
        return []
    n = len(run)
    out = []
    for i in range(len(seq) - n + 1):
        if all(seq[i + t].strip() == want[t] for t in range(n)):
            shifts = {
                len(seq[i + t]) - len(seq[i + t].lstrip()) - (len(run[t]) - len(run[t].lstrip()))
                for t in range(n)
                if want[t]
            }
            if len(shifts) == 1:
                out.append(i)
    return out


def _occurrences(seq: list[str], run: list[str], index: dict[str, list[int]] | None = None) -> list[int]:
    """Every index where `run` occurs verbatim in `seq` (`index`: line -> positions in `seq`, when one is kept)."""
    if not run:
        return []
    probe = max(range(len(run)), key=lambda t: len(run[t].strip()))
    positions = index.get(run[probe], []) if index is not None else [i for i, x in enumerate(seq) if x == run[probe]]
    out = []
    for i in positions:
        j = i - probe
        if 0 <= j and j + len(run) <= len(seq) and seq[j : j + len(run)] == run:
            out.append(j)
    return out


def _patched_start(site: Site, state: _FileState) -> int:
    return site.new_pos if site.new_pos is not None else state.to_patched(site.old_pos + site.old_len)


def _text_position(hunk: Hunk, state: _FileState, first: Site) -> int | None:
    """The stock index of the first change when the hunk's post-image sits verbatim around its landing in the
    patched file (a line that a later patch of the sequence rewrote counts as present), else None.

    An inserted run whose lines repeat its neighbours can be read at several equivalent positions (a slider): each
    is tried, top first, and the first that agrees is the hunk's own site."""
    post = hunk.post_image
    start = _patched_start(first, state)
    n = first.new_len
    seq = state.patched
    positions = [start]
    if n and first.old_len == 0:
        j = start
        while j > 0 and seq[j - 1] == seq[j - 1 + n]:
            j -= 1
            positions.insert(0, j)
        j = start
        while j + n < len(seq) and seq[j] == seq[j + n]:
            j += 1
            positions.append(j)
    for pos in positions:
        p0 = pos - hunk.leading_context
        if p0 < 0:
            continue
        if _post_image_at(post, seq, p0, state):
            return first.old_pos if pos == start else state.to_stock(pos)
    return None


def _post_image_at(post: list[str], seq: list[str], p0: int, state: _FileState) -> bool:
    """`post` reads from `seq[p0]` on, where a later patch of the sequence may have rewritten one of its lines or
    added lines among them."""
    t, p = 0, p0
    while t < len(post):
        if p < len(seq) and seq[p] == post[t]:
            t, p = t + 1, p + 1
        elif state.removed_later[post[t]] > 0:
            t += 1
            if p < len(seq) and state.added_later[seq[p]] > 0:
                p += 1  # rewritten in place
        elif p < len(seq) and state.added_later[seq[p]] > 0:
            p += 1
        else:
            return False
    return True


@dataclass
class _GroupView:
    """One change group as the anchors see it: in the hunk's fragment and at its landing."""

    anchor: anchors.Anchor
    outline: anchors.Outline  # the text the landing is judged in (patched; stock for a pure removal)
    at: int
    span: int
    in_stock: bool


def _group_view(hunk: Hunk, state: _FileState, g: ChangeGroup, site: Site) -> _GroupView:
    """A group that adds lines is judged where they are in the patched file; a pure removal where its lines were."""
    if g.added:
        anchor = anchors.anchor_of(hunk.post_image, g.post_start, len(g.added), hunk.section)
        return _GroupView(anchor, state.patched_outline(), site.new_pos, len(g.added), False)
    anchor = anchors.anchor_of(hunk.pre_image, g.pre_start, len(g.removed), hunk.section)
    return _GroupView(anchor, state.stock_outline(), site.old_pos, len(g.removed), True)


def _judge(hunk: Hunk, state: _FileState, sites: list[Site]) -> tuple[anchors.Judgement, _GroupView]:
    """The anchors' judgement of the landing: the first group's that is not confirmed, else the first group's.

    A group that removes lines occurring once in stock is where those lines were: its site is certain by text."""
    judged = []
    for g, site in zip(change_groups(hunk), sites, strict=True):
        v = _group_view(hunk, state, g, site)
        if g.removed and len(_occurrences(state.stock, g.removed, state.stock_index())) == 1:
            judged.append(
                (anchors.Judgement(anchors.Fit.CONFIRMED, "the lines it replaces are there, and only there"), v)
            )
        elif g.removed and _reindented_occurrences(state.stock, g.removed) == [site.old_pos]:
            why = "the lines it replaces are there, re-indented by the release, and only there"
            judged.append((anchors.Judgement(anchors.Fit.CONFIRMED, why), v))
        else:
            j = anchors.judge(v.anchor, v.outline, v.at, v.span)
            if j.status is anchors.Fit.CONFIRMED and not g.removed:
                j = _gone_anchor(hunk, state, g, v) or j
            judged.append((j, v))
    for j, v in judged:
        if j.status is not anchors.Fit.CONFIRMED:
            return j, v
    return judged[0]


def _gone_anchor(hunk: Hunk, state: _FileState, g: ChangeGroup, v: _GroupView) -> anchors.Judgement | None:
    """An insertion whose anchor, the element the hunk inserts it after, the release removed outright (nothing in
    the file names it any more): misplaced wherever it landed, with no site to offer."""
    context, post = set(), 0
    for op, _text in hunk.lines:
        if op == " ":
            context.add(post)
        if op != "-":
            post += 1
    gone = anchors.vanished_anchor(v.anchor, context, state.texts_besides(hunk))
    if gone is None:
        return None
    key, name = gone
    return anchors.Judgement(
        anchors.Fit.CONTRADICTED,
        f"the hunk inserts it after `{key}`, which the file no longer has: nothing in it names `{name}`, so there is "
        "no site to insert it after",
    )


def _twins_fit(hunk: Hunk, state: _FileState, view: _GroupView | None, twins: list[int], landed: int) -> list[int]:
    """The stock indices of the other verbatim copies of the pre-image that the anchors fit as well as the landing
    (without anchors, a file that is not Python: every other copy)."""
    here = None if view is None else anchors.fit(view.anchor, view.outline, view.at, view.span)
    out = []
    for t in twins:
        i = t + hunk.leading_context
        if i == landed:
            continue
        if view is None:
            out.append(i)
            continue
        there = anchors.fit(view.anchor, view.outline, i if view.in_stock else state.to_patched(i))
        if there is not None and (here is None or there >= here):
            out.append(i)
    return out


def _audit_hunk(label: str, path: str, hunk: Hunk, state: _FileState, landing: tuple[list[Site], int]) -> AuditHunk:
    groups = change_groups(hunk)
    header = _header_index(hunk, state)
    landed, n_found = landing
    complete = n_found == len(groups)
    landed_at = landed[0].old_pos + 1 if complete and landed else None

    def finding(verdict: AuditVerdict, reason: str, expected_at: int | None, **kw) -> AuditHunk:
        h = AuditHunk(label, path, hunk.index, verdict, landed_at, expected_at, reason, **kw)
        if h.bad:
            h.expected_excerpt = _excerpt(state.stock, expected_at)
            h.landed_excerpt = _excerpt(state.stock, landed_at)
            h.change_line = next((op + t for op, t in hunk.lines if op != " "), "")
        return h

    pre, post = hunk.pre_image, hunk.post_image
    adds = any(g.added for g in groups)
    twins = _occurrences(state.stock, pre, state.stock_index())
    in_stock = _occurrences(state.stock, post, state.stock_index()) if post != pre else []
    if in_stock and not twins:
        at = min(in_stock, key=lambda i: abs(i - header)) + hunk.leading_context + 1
        if complete and adds:
            return finding(
                AuditVerdict.MISPLACED,
                f"stock already contains this change (near line {at}), yet it was applied again at line {landed_at}",
                at,
            )
        landed_at = None
        return finding(AuditVerdict.ALREADY_APPLIED, "stock already contains the hunk's post-image", at)

    if not complete:
        if adds and all(all(state.removed_later[line] > 0 for line in g.added) for g in groups if g.added):
            # a later patch rewrote every line this hunk added: the landing cannot be seen, only implied
            if twins:
                at = min(twins, key=lambda i: abs(i - header)) + hunk.leading_context
                verdict = AuditVerdict.EXACT if at == header else AuditVerdict.OFFSET
                state.pending.append((at, len(post) - len(pre)))
                return finding(
                    verdict,
                    f"its added lines were changed again by a later patch; its pre-image is at line {at + 1}",
                    at + 1,
                )
            return finding(
                AuditVerdict.FUZZY,
                "its added lines were changed again by a later patch, so its landing cannot be seen; that patch "
                "found them",
                None,
            )
        missing = len(groups) - n_found
        what = (
            "not present in the patched file"
            if n_found == 0
            else f"only partly present ({missing} of {len(groups)} change groups missing)"
        )
        return finding(AuditVerdict.FAILED, what, None)

    first = landed[0]
    text_at = _text_position(hunk, state, first)
    text = text_at is not None
    if text and text_at != first.old_pos:
        landed_at = text_at + 1
    judgement = view = None
    # the hunk's whole post-image around the one place its pre-image is: certain by text, nothing to ask the anchors
    if state.python and not (text and len(twins) <= 1):
        judgement, view = _judge(hunk, state, landed)

    def expected_of(j: anchors.Judgement | None, v: _GroupView | None) -> int | None:
        if j is None or j.expected_line is None or v is None:
            return None
        return (j.expected_line if v.in_stock else state.to_stock(j.expected_line)) + 1

    def scopes(v: _GroupView | None, j: anchors.Judgement | None) -> dict:
        if v is None:
            return {}
        land = anchors.spot_at(v.outline, v.at, v.span)
        exp = None
        if j is not None and j.expected_line is not None:
            exp = anchors.spot_at(v.outline, j.expected_line, 0, range(v.at, v.at + v.span))
        return {"landed_scope": land, "expected_scope": exp}

    if judgement is not None and judgement.status is anchors.Fit.CONTRADICTED:
        return finding(
            AuditVerdict.MISPLACED,
            f"landed at line {landed_at}: {judgement.reason}",
            expected_of(judgement, view),
            **scopes(view, judgement),
        )

    if text:
        state.pending.append((first.old_pos, len(post) - len(pre)))
        if len(twins) > 1 and len(pre) > 0:
            fit = _twins_fit(hunk, state, view, twins, first.old_pos)
            if fit:
                return finding(
                    AuditVerdict.AMBIGUOUS,
                    f"landed at line {landed_at}, but its pre-image also occurs at line "
                    f"{', '.join(str(i + 1) for i in fit)}, and nothing the hunk shows tells the copies apart",
                    None,
                    **scopes(view, None),
                )
        if text_at == header or first.key == header:
            return finding(AuditVerdict.EXACT, "landed where the patch says", landed_at)
        return finding(
            AuditVerdict.OFFSET, f"landed with its context intact (offset {landed_at - 1 - header:+d})", landed_at
        )

    if judgement is None:
        # not Python: the lines right next to the change must be the hunk's
        if _text_neighbour(hunk, state, landed):
            state.pending.append((first.old_pos, len(post) - len(pre)))
            return finding(AuditVerdict.FUZZY, "context differed; a line next to the change is the hunk's", landed_at)
        return finding(
            AuditVerdict.MISPLACED,
            f"landed at line {landed_at}, but no line next to it is one the hunk shows there",
            None,
        )
    if judgement.status is anchors.Fit.AMBIGUOUS:
        return finding(
            AuditVerdict.AMBIGUOUS,
            f"landed at line {landed_at}: {judgement.reason}",
            expected_of(judgement, view),
            **scopes(view, judgement),
        )
    if judgement.status is anchors.Fit.UNCONFIRMED:
        return finding(
            AuditVerdict.MISPLACED,
            f"landed at line {landed_at}: {judgement.reason}",
            expected_of(judgement, view),
            **scopes(view, judgement),
        )
    state.pending.append((first.old_pos, len(post) - len(pre)))
    return finding(
        AuditVerdict.FUZZY, f"context differed; the anchors confirm the landing: {judgement.reason}", landed_at
    )


def _text_neighbour(hunk: Hunk, state: _FileState, sites: list[Site]) -> bool:
    """A context line right before the first change or right after the last is next to it in the patched file."""
    lines = hunk.lines
    lead = [t for op, t in lines[: hunk.leading_context]]
    trail = [t for op, t in lines[len(lines) - hunk.trailing_context :]] if hunk.trailing_context else []
    p = _patched_start(sites[0], state)
    if lead and p > 0 and state.patched[p - 1] == lead[-1] and lead[-1].strip():
        return True
    last = sites[-1]
    q = _patched_start(last, state) + last.new_len
    return bool(trail and q < len(state.patched) and state.patched[q] == trail[0] and trail[0].strip())
