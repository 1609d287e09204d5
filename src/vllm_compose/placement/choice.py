"""The choice of a hunk's site by its context: rank the sites the search found, check their scope, take the best
acceptable one when it is unique, and merge the hunk there.

Sites are compared by where their changes land.  A site is acceptable when its score reaches `MIN_SCORE` and, for
Python, its scope agrees with what the hunk implies (`scope_check`).  The best acceptable site must be unique: a
verbatim site beats any non-verbatim one; otherwise it must out-score every other site by `MIN_MARGIN` weighted lines
(about one informative line).  Anything else is a conflict with the candidate sites as evidence — never a guess.  The
``@@`` section rule is evidence of order (the definition above the hunk), not of enclosure, when the hunk shows a
def/class line of its own before its change: then a site rejected by that rule alone but scoring about as well as the
best (see `too_close`) makes the choice ambiguous.

When the pre-image cannot be placed, the post-image is searched: found verbatim-enough and unique, the hunk is
``already-applied`` (`_already_applied`).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..patchfile import Hunk
from ..verdicts import Verdict
from .groups import Group, attach_intents, hunk_groups
from .outcome import CandidateSite, Placement, Site
from .plan import Plan, approximate_plan, merge_plan, site_key, spliced
from .refusal import Refusal, RefusalKind
from .scope_check import scope_refusal, shows_def_line, site_scope
from .search import EOL, EXACT, INDENT, WS, Alignment, describe_site, site_alignments, site_line
from .target import Target, norm_text

#: lowest score (weighted share of the pre-image that agrees) a site may have
MIN_SCORE = 0.5
#: how many weighted lines the best site must out-score every other site by (one informative line is 0.7..1)
MIN_MARGIN = 0.7


@dataclass(eq=False)
class _Site:
    """One candidate site: an alignment of the pre-image, its merge plan, and why its scope is refused (if it is).
    Sites are told apart by identity: two alignments may land their changes at the same place."""

    al: Alignment
    plan: Plan
    #: why the site's scope disagrees with the hunk's (None: not checked, or it agrees)
    refusal: Refusal | None = None


@dataclass
class _Choice:
    """The best acceptable site, the best other one, and what the evidence says about a copy taken by line."""

    best: _Site
    #: the best eligible site whose changes land elsewhere (None: there is none, or the own-line rule set it aside)
    rival: _Site | None
    #: why the copy at the hunk's own line was taken over other verbatim copies (None: it was not)
    own_note: str | None


def place_by_context(hunk: Hunk, tgt: Target, own_base: bool = False) -> Placement:
    """Place `hunk` at the site its context (pre-image) finds in the target, or return a conflict saying why not.

    own_base: the target is the very file the patch was made from (the blob its ``index`` line names)."""
    groups = hunk_groups(hunk)
    if tgt.is_py:
        attach_intents(hunk, groups)
    if not hunk.pre_image:
        return _place_without_context(hunk, tgt)
    ranked = _ranked_sites(hunk, groups, tgt)
    eligible, rejected = _scope_checked(hunk, groups, ranked, tgt)
    candidates = _candidates(ranked, eligible)
    if not eligible or eligible[0].al.score < MIN_SCORE:
        return _without_acceptable_site(hunk, tgt, groups, eligible, rejected, candidates)
    choice = _chosen(hunk, eligible, own_base)
    ambiguity = _ambiguity(hunk, tgt, choice, rejected)
    if ambiguity is not None:
        return _conflict(hunk, ambiguity, candidates, choice.best.al.score)
    return _merged(hunk, tgt, groups, choice, rejected, candidates)


def _ranked_sites(hunk: Hunk, groups: list[Group], tgt: Target) -> list[_Site]:
    """Every site with some agreement, with its merge plan, best first: verbatim ones, then by credit, then by line."""
    ranked = [
        _Site(al, merge_plan(hunk, groups, al, tgt)) for al in site_alignments(hunk.pre_image, tgt) if al.score > 0
    ]
    ranked.sort(key=lambda s: (-int(s.al.verbatim), -s.al.credit, site_line(s.al)))
    return ranked


def _scope_checked(
    hunk: Hunk, groups: list[Group], ranked: list[_Site], tgt: Target
) -> tuple[list[_Site], list[_Site]]:
    """(eligible, rejected) sites, each best first: the sites whose scope agrees with the hunk's, and the others with
    their refusal.  Scope checks cost a little; they run best first and stop once no later site can be the best
    acceptable one or a close rival of it (see `too_close`)."""
    eligible: list[_Site] = []
    rejected: list[_Site] = []
    # the unique verbatim site, if any: the hunk's own lines cannot disagree with it (see `scope_check.scope_refusal`)
    verbatim = [s.al for s in ranked if s.al.verbatim]
    own = verbatim[0] if len(verbatim) == 1 else None
    for site in ranked:
        al = site.al
        if eligible:
            top = eligible[0].al
            if top.verbatim and not al.verbatim:
                break
            if not top.verbatim and al.credit < top.credit - MIN_MARGIN:
                break
        if tgt.is_py:
            probe = site.plan if site.plan.refusal is None else approximate_plan(groups, al)
            if probe is not None:
                site.refusal = scope_refusal(hunk, groups, probe, al, tgt, own_lines=al is own)
        (eligible if site.refusal is None else rejected).append(site)
    return eligible, rejected


def _candidates(ranked: list[_Site], eligible: list[_Site], most: int = 8) -> list[CandidateSite]:
    """The best `most` sites as evidence lists them (one per line: the best alignment there), each with why the hunk
    does not go there on that site's own merits ("" for a site acceptable alone: whether it is chosen is the
    choice's word). Call after `_scope_checked`."""
    out: list[CandidateSite] = []
    for s in ranked:
        if len(out) == most:
            break
        if any(c.line == site_line(s.al) for c in out):
            continue
        if s.refusal is not None:
            note = f"wrong scope: {s.refusal}"
        elif s not in eligible:  # neither eligible nor refused: the scope check stopped before it
            note = "not compared: it agrees far less than a better site"
        elif s.al.score < MIN_SCORE:
            note = f"agrees too little (below {MIN_SCORE:.2f})"
        elif s.plan.refusal is not None:
            note = str(s.plan.refusal)
        else:
            note = ""
        out.append(CandidateSite(site_line(s.al), round(s.al.score, 3), note))
    return out


def _site(hunk: Hunk, al: Alignment) -> Site:
    """The site an alignment puts the hunk on: from the first to the last target line a pre-image line agrees with,
    and the hunk's context lines beyond them (lines the target does not have there)."""
    mapped = [(j, t) for j, t in enumerate(al.mapping) if t is not None]
    (j0, t0), (j1, t1) = mapped[0], mapped[-1]
    unmatched_tail = len(al.mapping) - 1 - j1
    return Site(t0, t1 + 1, min(j0, hunk.leading_context), min(unmatched_tail, hunk.trailing_context))


def _conflict(
    hunk: Hunk, evidence: str, candidates: list[CandidateSite], score: float = 0.0, site: Site | None = None
) -> Placement:
    """A conflict; `site`: the site the engine took for the hunk, when it took one."""
    return Placement(hunk, Verdict.CONFLICT, evidence=evidence, score=score, candidates=candidates, site=site)


def _without_acceptable_site(
    hunk: Hunk,
    tgt: Target,
    groups: list[Group],
    eligible: list[_Site],
    rejected: list[_Site],
    candidates: list[CandidateSite],
) -> Placement:
    """No site is acceptable (none in the right scope, or the best one agrees too little): already applied when the
    post-image is there, else a conflict naming the best site and why it falls short."""
    P = hunk.pre_image
    applied = _already_applied(hunk, tgt, groups)
    if applied is not None:
        applied.candidates = candidates
        return applied
    if not eligible and rejected:
        al, why = rejected[0].al, rejected[0].refusal
        return _conflict(
            hunk, f"no acceptable site: best {describe_site(al, P)} is in the wrong scope: {why}", candidates, al.score
        )
    if not eligible:
        return _conflict(
            hunk, "no site: no line of the hunk's context or removed lines occurs in the target", candidates
        )
    best = eligible[0].al
    msg = f"too little agreement: best {describe_site(best, P)} is below {MIN_SCORE:.2f}"
    if rejected and rejected[0].al.credit > best.credit:
        msg += f"; a better-matching {describe_site(rejected[0].al, P)} is in the wrong scope: {rejected[0].refusal}"
    return _conflict(hunk, msg, candidates, best.score)


def _chosen(hunk: Hunk, eligible: list[_Site], own_base: bool) -> _Choice:
    """The best eligible site and its rival.  On the patch's own base, of two verbatim copies of the pre-image the
    one at the hunk's own line is the hunk's site; the other copy is then evidence, not a rival."""
    best = eligible[0]
    own_line = None
    if best.al.verbatim and own_base:
        # The target is the very file the patch was made from (its blob id is the one the diff's `index` line
        # names): of two verbatim copies of the pre-image, the one at the hunk's own line is the hunk's site.  The
        # line number decides nothing else.
        at_header = [s for s in eligible if s.al.verbatim and s.al.mapping[0] == hunk.old_start - 1]
        if len(at_header) == 1 and sum(1 for s in eligible if s.al.verbatim) > 1:
            best = own_line = at_header[0]
    key = site_key(best.plan, best.al)
    rival = next((s for s in eligible if s is not best and site_key(s.plan, s.al) != key), None)
    if own_line is None or rival is None:
        return _Choice(best, rival, None)
    others = [s for s in eligible if s.al.verbatim and s is not own_line]
    own_note = (
        f"{len(others)} other verbatim cop{'y' if len(others) == 1 else 'ies'} (line "
        f"{', '.join(str(site_line(s.al)) for s in others)}); the one at the hunk's own line {hunk.old_start} "
        "taken: the target is the patch's own base (the blob the diff's index line names)"
    )
    return _Choice(best, None, own_note)  # the other copy: reported in the evidence


def _ambiguity(hunk: Hunk, tgt: Target, choice: _Choice, rejected: list[_Site]) -> str | None:
    """Why the choice is ambiguous (None: it is not): a rival about as good as the best site, or a site only the
    ``@@`` section heading sets aside, when that heading is evidence of order only."""
    P = hunk.pre_image
    al, rival = choice.best.al, choice.rival
    if rival is not None and too_close(al, rival.al) and not _rival_lacks_what_best_holds(hunk, al, rival.al):
        return (
            f"ambiguous: {describe_site(al, P)} and {describe_site(rival.al, P)} agree about equally "
            f"(credit {al.credit:.2f} vs {rival.al.credit:.2f}; a margin of {MIN_MARGIN} is required)"
        )
    if tgt.is_py and shows_def_line(hunk):
        # The hunk shows a def/class line of its own before its change, so its `@@` section names an earlier
        # definition, not the enclosing one: evidence of order, which drift changes (a method added above).  It
        # may not decide between sites the hunk's own lines cannot tell apart.
        key = site_key(choice.best.plan, al)
        for r in rejected:
            if r.refusal.kind is RefusalKind.SECTION and site_key(r.plan, r.al) != key and _close(al, r.al):
                return (
                    f"ambiguous: {describe_site(al, P)} and {describe_site(r.al, P)} agree about equally, and only "
                    f"the `@@` section heading (the definition above the hunk) tells them apart: {r.refusal}"
                )
    return None


def _merged(
    hunk: Hunk,
    tgt: Target,
    groups: list[Group],
    choice: _Choice,
    rejected: list[_Site],
    candidates: list[CandidateSite],
) -> Placement:
    """The hunk merged at the chosen site: its verdict, the replacement lines, and the evidence of the choice."""
    P = hunk.pre_image
    al, plan = choice.best.al, choice.best.plan
    evidence = [describe_site(al, P)]
    if choice.own_note is not None:
        evidence.append(choice.own_note)
    if choice.rival is not None:
        evidence.append(f"runner-up {describe_site(choice.rival.al, P)}")
    if rejected:
        evidence.append(f"rejected {describe_site(rejected[0].al, P)}: {rejected[0].refusal}")
    if plan.refusal is not None:
        applied = _already_applied(hunk, tgt, groups)
        if applied is not None:
            return applied
        return _conflict(hunk, f"{evidence[0]}: {plan.refusal}", candidates, al.score, _site(hunk, al))
    if plan.indent_note:
        evidence.append(plan.indent_note)

    landing = plan.edits[0].start + 1 if plan.edits else site_line(al)
    scope = site_scope(tgt, plan.edits[0], groups[0], hunk) if tgt.is_py and plan.edits else None
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
        return _conflict(
            hunk,
            f"{evidence[0]}: partly applied already ({done} of {len(applied_flags)} changes are in the target)",
            candidates,
            al.score,
            _site(hunk, al),
        )
    start, end, replacement = spliced(tgt, plan.edits)

    eof = None
    last_t = max((t for t in al.mapping if t is not None), default=-1)
    if (hunk.old_no_newline or hunk.new_no_newline) and (last_t == len(tgt.lines) - 1 or end == len(tgt.lines)):
        eof = not hunk.new_no_newline
    return Placement(
        hunk,
        _classify(hunk, al),
        start=start,
        end=end,
        replacement=replacement,
        landing_line=landing,
        scope=scope,
        evidence="; ".join(evidence),
        score=al.score,
        candidates=candidates,
        eof_newline=eof,
        site=_site(hunk, al),
    )


def _close(a: Alignment, b: Alignment) -> bool:
    """`too_close` for two sites in either order."""
    if (int(b.verbatim), b.credit) > (int(a.verbatim), a.credit):
        a, b = b, a
    return too_close(a, b)


def _rival_lacks_what_best_holds(hunk: Hunk, best: Alignment, rival: Alignment) -> bool:
    """`rival` is no rival of `best` when `best` holds what the hunk needs and `rival` lacks part of it altogether:
    - the hunk replaces lines: `best` holds every one of them (verbatim but for whitespace or indentation) and
      `rival` lacks one; a replacement can only land where its lines are;
    - `best` holds every pre-image line so (re-indented, nothing in between) and `rival` lacks one: as a verbatim
      site beats any other, the whole pre-image beats a part of it."""
    whole = (EXACT, EOL, WS, INDENT)
    removed = [k for k, op in enumerate(op for op, _ in hunk.lines if op != "+") if op == "-"]
    if removed and all(best.cats[k] in whole for k in removed):
        return any(rival.mapping[k] is None for k in removed)
    if not best.extras and all(c in whole for c in best.cats):
        return any(t is None for t in rival.mapping)
    return False


def too_close(best: Alignment, rival: Alignment) -> bool:
    """Whether `rival` (another site, ranked below `best`) leaves the choice ambiguous.

    Two verbatim sites always do; a verbatim site beats any other.  A rival that shares target lines with the best
    is a variant of the same region: only an equal score makes it ambiguous.  A disjoint rival must trail by
    `MIN_MARGIN` weighted lines."""
    if best.verbatim or rival.verbatim:
        return best.verbatim and rival.verbatim
    if best.overlaps(rival):
        return rival.credit >= best.credit - 1e-9
    return best.credit - rival.credit < MIN_MARGIN


def _classify(hunk: Hunk, al: Alignment) -> Verdict:
    if not al.extras and all(c == EXACT for c in al.cats):
        first = al.mapping[0]
        return Verdict.EXACT if first == hunk.old_start - 1 else Verdict.OFFSET
    if not al.extras and all(c is not None for c in al.cats):
        return Verdict.RELOCATED
    return Verdict.MERGED


def _place_without_context(hunk: Hunk, tgt: Target) -> Placement:
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
    if [norm_text(x) for x in tgt.lines] == [norm_text(x) for x in hunk.added]:
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


def _already_applied(hunk: Hunk, tgt: Target, groups: list[Group]) -> Placement | None:
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
    als = [a for a in site_alignments(Q, tgt) if a.score >= 0.8]
    if not als:
        return None
    als.sort(key=lambda a: (-int(a.verbatim), -a.credit))
    best = als[0]
    if any(best.mapping[j] is None for j in added_idx):
        return None
    if len(als) > 1 and too_close(best, als[1]):
        return None
    if hunk.removed and not added_idx:
        # pure removal: the context must close up around the removed lines
        pass
    ts = [best.mapping[j] for j in added_idx]
    landing = (ts[0] + 1) if ts else site_line(best)
    scope = tgt.layout.scope(ts[0]) if tgt.is_py and ts else None
    return Placement(
        hunk,
        Verdict.ALREADY_APPLIED,
        start=None,
        end=None,
        landing_line=landing,
        scope=scope,
        score=best.score,
        evidence=f"post-image found: {describe_site(best, Q)}; the pre-image is not in the target",
    )


# --------------------------------------------------------------------------------------------------------------
# Import-only hunks
