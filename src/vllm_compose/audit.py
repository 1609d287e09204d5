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

from collections import Counter
from dataclasses import dataclass, field
from pathlib import PurePath

from .align import Alignment, Site, change_groups, claim, locate_group
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
# Per-file state across a sequence of patches


@dataclass
class _FileState:
    """One file's stock and patched lines, their alignment, and the engine's expected text so far."""

    stock: list[str]
    patched: list[str]
    landing: Alignment  # stock -> patched
    expected: list[str]  # stock with the earlier patches' placements applied
    expected_to_stock: Alignment  # stock -> expected
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


def _change_scope(text: list[str] | None, site: Site, stock: list[str], path: str) -> Scope | None:
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
                    landing=Alignment(s_lines, p_lines),
                    expected=list(s_lines),
                    expected_to_stock=Alignment(s_lines, s_lines),
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
            state.expected_to_stock = Alignment(state.stock, state.expected)
    summary = {v.value: 0 for v in AuditVerdict}
    for f in findings:
        summary[f.verdict.value] += 1
    return AuditReport(findings, summary)


def _expected_sites(hunk: Hunk, placement: Placement, state: _FileState) -> tuple[list[Site], list[str]] | None:
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
    al = Alignment(base[lo:hi_old], applied[lo:hi_new])
    window = (placement.start - lo, placement.start - lo + len(placement.replacement))
    sites: list[Site] = []
    c_old: set[int] = set()
    c_new: set[int] = set()
    for removed, added in change_groups(hunk):
        site = locate_group(al, removed, added, c_old, c_new, placement.start - lo, window)
        if site is None:
            return None
        claim(site, c_old, c_new)
        sites.append(
            Site(
                site.old_pos + lo,
                None if site.new_pos is None else site.new_pos + lo,
                site.old_len,
                site.new_len,
                site.key + lo,
            )
        )
    stock_sites = [
        Site(
            _expected_to_stock(state, s.old_pos, bool(s.old_len)),
            s.new_pos,
            s.old_len,
            s.new_len,
            _expected_to_stock(state, s.key, bool(s.old_len)),
        )
        for s in sites
    ]
    return stock_sites, applied


def _landed_sites(hunk: Hunk, state: _FileState, near: list[Site] | None) -> tuple[list[Site], int]:
    """Where each change group shows up in the patched file (stock indices); and how many groups were found."""
    found: list[Site] = []
    groups = change_groups(hunk)
    for g, (removed, added) in enumerate(groups):
        hint = near[g].old_pos if near and g < len(near) else (found[-1].old_pos if found else hunk.old_start - 1)
        site = locate_group(
            state.landing, removed, added, state.claimed_old, state.claimed_new, hint, earlier_added=state.added_so_far
        )
        if site is None:
            continue
        found.append(site)
    if len(found) == len(groups):
        for s in found:
            claim(s, state.claimed_old, state.claimed_new)
    return found, len(found)


def _audit_hunk(label: str, path: str, hunk: Hunk, placement: Placement, state: _FileState) -> AuditHunk:
    groups = change_groups(hunk)
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
