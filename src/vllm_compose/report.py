"""Every human-readable report, and the JSON files of every command's result.

One renderer per result, each taking the typed result and returning text (stable: tests/tool/test_golden.py compares
them with golden files): `render_compose` (a compose run), `render_audit` (where every hunk landed), `render_status`
(the status table, Markdown), `render_series_diff` (two compose branches entry by entry), `render_image_overlay`
(composing onto an installed vLLM), and the CI's Markdown (`render_ci_summary`, `render_ci_issue`,
`render_ci_gate_issue`), which read a compose's JSON report because the CI renders in a later step. `write_json`
writes any result's `to_json()`: the one place JSON is produced. (The Ampere gate, `ampere/`, the pipeline plan,
`pp/`, and the GPU proof, `proof/`, render their own reports: they are products of their own, not the compose
pipeline.)
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import TYPE_CHECKING

from .atomicfile import write_atomically
from .checks import failure_hint
from .errors import ComposeError
from .results import STOPPING, CheckStatus, ComposeStatus, EntryStatus, HunkVerdict, Severity
from .series_diff import DiffStatus

#: the last line of a compose report, by how the compose ended
_COMPOSE_VERDICT = {
    ComposeStatus.COMPOSED: "OK",
    ComposeStatus.CONFLICT: "STOPPED (conflict)",
    ComposeStatus.REFUSED: "REFUSED",
}
#: the status table's "composed" cell
_STATUS_CELL = {
    ComposeStatus.COMPOSED: "yes",
    ComposeStatus.CONFLICT: "**conflict**",
    ComposeStatus.REFUSED: "**refused**",
}

if TYPE_CHECKING:
    from .audit import AuditReport
    from .review import Review
    from .scope import Scope
    from .series_diff import SeriesDiff
    from .status import ReleaseStatus


def write_json(path: str | os.PathLike, data: dict | list) -> None:
    """Write `data` as JSON to `path` atomically (temp file + rename): a report is whole or absent."""
    path = Path(path)
    try:
        write_atomically(path, json.dumps(data, indent=2, sort_keys=False) + "\n")
    except OSError as exc:
        raise ComposeError(
            f"cannot write the JSON report {path}: {exc.strerror}", hint="pass a writable --json path"
        ) from exc


def _counts(hunks) -> str:
    counts: dict[str, int] = {}
    for h in hunks:
        key = h.verdict + ("→" + h.resolved_by if getattr(h, "resolved_by", None) else "")
        counts[key] = counts.get(key, 0) + 1
    return ", ".join(f"{n} {v}" for v, n in sorted(counts.items())) or "-"


def _finding_key(f) -> tuple:
    return (f.check, f.file, f.name, f.message)


def _entry_check_lines(e, final_errors: set[tuple] | None, indent: str) -> list[str]:
    """The failing per-entry checks of `e`. An error a later entry cures (a fix defining a name the PR uses) is said
    to be gone from the composed tree, so a successful compose does not read as if it had failed a check."""
    out = []
    for c in e.checks.results if e.checks else []:
        if c.status != CheckStatus.FAIL:
            continue
        errors = [f for f in c.findings if f.severity == Severity.ERROR]
        left = errors if final_errors is None else [f for f in errors if _finding_key(f) in final_errors]
        if final_errors is not None and not left:
            out.append(
                f"{indent}check {c.name} after this entry: {len(errors)} error(s), none left in the composed "
                "tree (a later entry of the series cures them)"
            )
            continue
        out.append(f"{indent}check {c.name} after this entry: {len(errors)} error(s)")
        for f in errors[:5]:
            cured = "" if f in left else "  (cured by a later entry)"
            out.append(f"{indent}  {f.file}:{f.line}: {f.message}{cured}")
    return out


def _hunk_line(eid: str, h) -> str:
    """One notable hunk: where it landed, or which later fix carries it instead (then this entry leaves it out)."""
    scope = f" in {h.scope}" if h.scope else ""
    if h.resolved_by:
        if h.landing_line:
            alone = f"alone it would place as {h.verdict} at line {h.landing_line}{scope}"
        else:
            alone = f"alone it does not place on this release: {h.verdict}"
        return f"  {eid}: {h.file} hunk {h.hunk}: carried by {h.resolved_by}, not applied by {eid} ({alone})"
    where = f"at line {h.landing_line}{scope}" if h.landing_line else "(not placed)"
    return f"  {eid}: {h.file} hunk {h.hunk}: {h.verdict} {where}"


def render_compose(result) -> str:
    """The compose report: one line per entry with its status and hunks by verdict, then notable hunks."""
    out = [f"compose {result.branch}  (onto {result.tag}, base {(result.base or '?')[:12]})", ""]
    width = max([len(e.id) for e in result.entries] + [5])
    out.append(f"  {'entry'.ljust(width)}  {'status':<17} hunks")
    final_errors = None
    if result.final_checks and result.final_checks.results:
        final_errors = {_finding_key(f) for f in result.final_checks.findings if f.severity == Severity.ERROR}
    for e in result.entries:
        out.append(f"  {e.id.ljust(width)}  {e.status:<17} {_counts(e.hunks)}")
        if e.reason and e.status != EntryStatus.APPLIED:
            out.append(f"  {''.ljust(width)}  {'':<17} {e.reason}")
        out += _entry_check_lines(e, final_errors, f"  {''.ljust(width)}  ")
    notable = [
        (e.id, h) for e in result.entries for h in e.hunks if h.verdict not in (HunkVerdict.EXACT, HunkVerdict.OFFSET)
    ]
    if notable:
        out += ["", "hunks that needed more than an offset:"]
        for eid, h in notable:
            out.append(_hunk_line(eid, h))
            if h.verdict == HunkVerdict.CONFLICT and h.evidence and not h.resolved_by:
                out += [f"      {line}" for line in h.evidence.splitlines()[:6]]
    refused = [e for e in result.entries if e.audit is not None and not e.audit.ok]
    if refused:
        out += ["", "the audit refuses these landings (where the hunk belongs | where the engine put it):"]
        for e in refused:
            out += ["", f"entry {e.id}:", render_audit(e.audit).rstrip()]
    out.append("")
    if result.final_checks:
        out.append("checks of the composed tree against the release:")
        for c in result.final_checks.results:
            reason = f" ({c.reason})" if c.reason else ""
            out.append(f"  {c.name:<16} {c.status}{reason}")
            for f in c.findings[:10]:
                by = f" (entry {f.entry})" if f.entry else ""
                out.append(f"    {f.severity}: {f.file}:{f.line}: {f.message}{by}")
        out.append("")
    if result.accepted_failures:
        out.append("ACCEPTED CHECK FAILURES (--accept-check-failures): " + "; ".join(result.accepted_failures))
    if result.review is not None and (result.review.items or result.review.override):
        out.append(render_review_line(result.review))
    verdict = _COMPOSE_VERDICT[result.status]
    out.append(f"{verdict}: {result.message}")
    if result.status == ComposeStatus.REFUSED and result.final_checks and not result.final_checks.ok:
        fix = "fix the series with a skew-fix entry (or pass --accept-check-failures, recorded in the report)"
        out.append(f"  hint: {failure_hint(result.final_checks, fix)}")
    if result.status == ComposeStatus.COMPOSED:
        out.append(f"branch {result.branch} -> {(result.head or '')[:12]}")
        if result.other_branches:
            others = ", ".join(result.other_branches)
            out.append(
                f"note: {others} also compose{'s' if len(result.other_branches) == 1 else ''} {result.tag} in this "
                f"repository, from an earlier series (another PR set), and {'was' if len(result.other_branches) == 1 else 'were'} "
                f"not updated: build {result.branch}"
            )
        if result.build_setup is not None:
            out.append(("build: " if result.build_setup.commit else "") + result.build_setup.message)
    return "\n".join(out) + "\n"


def render_validate(checked) -> str:
    """`vllm-compose validate`: the series file and its entries, and which `resolves` the cached diffs checked."""
    out = [f"{checked.series.file}: {len(checked.series.entries)} entries OK"]
    if checked.checked:
        out.append(f"resolves checked against the cached diffs of {', '.join(checked.checked)}")
    if checked.unchecked:
        out.append(
            f"resolves naming {', '.join(checked.unchecked)} not checked: the diff is not in the cache "
            "(the compose checks them before writing anything)"
        )
    return "\n".join(out) + "\n"


def ampere_summary(report) -> str:
    """The Ampere gate in one phrase, for the artifact commands (None: it was skipped)."""
    if report is None:
        return "SKIPPED (--no-ampere-gate: nothing shows the DSA kernels compile for sm_80/86)"
    specs = ", ".join(f"{n} specializations for {t}" for t, n in report.derived.items())
    return f"pass ({len(report.kernels)} kernel x target compiled; {specs})"


def checks_line(report) -> str:
    """A check report in one line, each skipped check with its reason (an artifact's summary)."""
    return "checks: " + ", ".join(
        f"{r.name} {r.status}" + (f" ({r.reason})" if r.reason else "") for r in report.results
    )


def smoke_skipped(report) -> str | None:
    """Why the import smoke of `report` (a `CheckReport`, or None) was skipped, or None when it ran or is absent."""
    for r in report.results if report is not None else []:
        if r.name == "import-smoke" and r.status == CheckStatus.SKIPPED:
            return r.reason
    return None


def render_wheel(branch, stock: Path, checks, ampere, review: Review, verified: int | None, out: Path) -> str:
    """`vllm-compose wheel`: what it was built from, the gates it passed, and the wheel's path (last line)."""
    lines = [
        f"{branch.branch} ({len(branch.entries)} entries, {len(branch.changed)} changed files) onto {stock.name}",
        checks_line(checks),
        f"ampere gate: {ampere_summary(ampere)}",
        render_review_line(review),
    ]
    if verified is not None:
        lines.append(f"verified {verified} members against RECORD")
    lines.append(str(out))
    return "\n".join(lines) + "\n"


def render_apply(result, dry_run: bool = False) -> str:
    """`vllm-compose apply`: one line per hunk with its verdict and landing, then the count per verdict."""
    out = []
    for h in result.hunks:
        mark = "" if h.verdict != HunkVerdict.CONFLICT else "   <-- not applied"
        out.append(f"{h.patch}: {h.file} hunk {h.hunk}: {h.verdict} at {h.landed_at}{mark}")
    out.append(", ".join(f"{n} {v}" for v, n in result.summary.items()) + (" (dry run)" if dry_run else ""))
    return "\n".join(out) + "\n"


# ---------------------------------------------------------------------------------------------------------------
# The review


def render_review_line(review: Review) -> str:
    """One line for the compose and artifact reports: the landings, how many are approved, the override."""
    text = f"review: {review.summary()}"
    if review.unreviewed:
        text += f" — read them: vllm-compose review --onto {review.tag}"
    if review.override:
        text += f"\nREVIEW OVERRIDE ({review.override})"
    return text


def render_review(review: Review) -> str:
    """`vllm-compose review`: each landing with its approval, the hunk, the landing in context, the audit's word."""
    out = [f"review of the compose onto {review.tag}: {review.summary()}"]
    if review.stopped:
        out.append(f"the compose stopped ({review.stopped}): only the entries before the stop are reviewed")
    for x in review.items:
        land = x.landing
        if x.approval is not None:
            state = f"approved by {x.approval.by}: {x.approval.why}"
        else:
            state = "UNREVIEWED" + (f", and the fix was written for {x.outside}" if x.outside else "")
        out += ["", f"{land.id}  {land.verdict}, {_lines_span(land)}  landing {land.digest}", f"  {state}"]
        if x.audit_verdict is not None:
            where = f" (expected at stock line {x.audit_expected_at})" if x.audit_expected_at is not None else ""
            out.append(f"  audit: {x.audit_verdict}{where}: {x.audit_reason}")
        if x.hunk_lines:
            out.append("  the hunk:")
            out += [f"    {line}" for line in x.hunk_lines]
        if x.context:
            out.append(f"  the landing in {land.file} (> the lines it wrote):")
            out += [f"  {'>' if mine else ' '} {n:>6}  {text}".rstrip() for n, text, mine in x.context]
    if review.unreviewed:
        out += [
            "",
            f"approve after reading: vllm-compose review --onto {review.tag} --approve ID --by NAME --why TEXT "
            "(or --approve-all)",
        ]
    return "\n".join(out) + "\n"


def _lines_span(land) -> str:
    if land.last < land.first:
        return f"removed before line {land.first}"
    return f"line {land.first}" if land.last == land.first else f"lines {land.first}-{land.last}"


# ---------------------------------------------------------------------------------------------------------------
# The audit


def render_audit(report: AuditReport, width: int = 60) -> str:
    """Summary line, then for each bad hunk the expected site and the actual site side by side (stock context)."""
    out: list[str] = []
    counts = ", ".join(f"{n} {v}" for v, n in report.summary.items() if n)
    out.append(f"audit: {len(report.hunks)} hunks: {counts or 'none'} — {'OK' if report.ok else 'NOT OK'}")
    for h in report.bad_hunks:
        out.append("")
        out.append(f"{h.patch}: {h.file} hunk {h.hunk}: {h.verdict.value.upper()}: {h.reason}")
        left = _column("expected", h.expected_at, h.expected_scope, h.expected_excerpt, h.change_line, width)
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


# ---------------------------------------------------------------------------------------------------------------
# The status table

_SHORT = {
    EntryStatus.APPLIED: "applied",
    EntryStatus.DROPPED_UPSTREAM: "upstream",
    EntryStatus.PARTLY_UPSTREAM: "PARTLY upstream",
    EntryStatus.CONFLICT: "CONFLICT",
    EntryStatus.SKIPPED: "—",
    EntryStatus.NOT_REACHED: "not reached",
}


def _entry_cell(entry) -> str:
    text = _SHORT.get(entry.status, entry.status)
    if entry.status == EntryStatus.APPLIED:
        counts = entry.verdict_counts()
        moved = {v: n for v, n in counts.items() if v in (HunkVerdict.RELOCATED, HunkVerdict.MERGED)}
        carried = sum(1 for h in entry.hunks if h.resolved_by)
        notes = [f"{n} {v}" for v, n in sorted(moved.items())]
        if carried:
            notes.append(f"{carried} carried by fixes")
        if notes:
            text += " (" + ", ".join(notes) + ")"
    return text


def _checks_cell(result) -> str:
    if not result.final_checks:
        return "—"
    parts = []
    for c in result.final_checks.results:
        parts.append(f"{c.name}: {c.status}")
    return "; ".join(parts)


def _gate_cell(report, stock) -> str:
    def one(r) -> str:
        if r is None:
            return "not run"
        if isinstance(r, str):
            return f"not run ({r})"
        bad = sorted({k.qualname for k in r.kernels if not k.ok})
        missing = sorted({f"impl.{m}() missing" for _b, m, _site in r.missing_methods})
        check = getattr(r, "coverage_check", None)
        if check is not None and not check.ok:
            missing.append(f"coverage {check.state}")
        specs = sum(r.derived.values())
        methods = sum(len(c.answers) for c in r.contracts)
        if not bad and not missing:
            unrecorded = "; coverage unrecorded" if check is not None and not check.recorded else ""
            return (
                f"pass ({len(r.kernels)} kernel x arch, {specs} specializations; impl answers {methods} methods"
                f"{unrecorded})"
            )
        return f"FAIL ({len(bad) + len(missing)}: {', '.join(bad + missing)})"

    return f"{one(report)}; stock: {one(stock)}"


def _relay_cell(compose, stock) -> str:
    """The top-k relay of the compose and of stock (TopkCrossing each, or None: not read)."""
    if compose is None and stock is None:
        return "not read"
    return f"{compose.summary() if compose is not None else 'not read'}; stock: " + (
        stock.summary() if stock is not None else "not read"
    )


def _branch_cell(result) -> str:
    """The branch the compose wrote and the version its install and wheel carry: what the docs would otherwise copy
    by hand and let go stale."""
    if result.status != ComposeStatus.COMPOSED:
        return "—"
    setup = result.build_setup
    version = f"`{setup.version}`" if setup is not None and setup.version else "no build setup"
    return f"`{result.branch}`; {version}"


def render_status(rows: list[ReleaseStatus]) -> str:
    """Markdown: one row per release; columns: composed, audit, checks, Ampere gate (compose; stock), GPU runs, the
    IndexCache top-k relay (compose; stock), each PR entry, the local fixes applied."""
    if not rows:
        return "(no releases composed)\n"
    results = [row.compose for row in rows]
    pr_ids = []
    for r in results:
        for e in r.entries:
            if e.id.startswith("pr") and e.id not in pr_ids:
                pr_ids.append(e.id)
    head = [
        "tag",
        "composed",
        "audit",
        "checks of the composed tree",
        "Ampere gate, sm_80 + sm_86 (compose; stock)",
        "run on a GPU",
        "PP top-k relay, IndexCache (compose; stock)",
        *pr_ids,
        "skew fixes applied",
        "branch; version (`pip install -e vllm/`, wheel)",
    ]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for row in rows:
        r = row.compose
        by_id = {e.id: e for e in r.entries}
        fixes = [e.id for e in r.entries if e.id not in pr_ids and e.status == EntryStatus.APPLIED]
        composed = r.status == ComposeStatus.COMPOSED
        cells = [
            r.tag,
            _STATUS_CELL[r.status],
            "clean" if composed else "—",  # the branch is written only when the audit is clean
            _checks_cell(r),
            _gate_cell(row.gate, row.stock_gate),
            row.gpu.summary() if row.gpu is not None else "none",
            _relay_cell(row.topk_relay, row.stock_topk_relay),
            *[_entry_cell(by_id[p]) if p in by_id else "—" for p in pr_ids],
            f"{len(fixes)}: " + ", ".join(fixes) if fixes else "0",
            _branch_cell(r),
        ]
        lines.append("| " + " | ".join(cells) + " |")
    problems = [(r.tag, r.message) for r in results if r.status != ComposeStatus.COMPOSED]
    if problems:
        lines += ["", "Stopped or refused:", ""] + [f"- {tag}: {msg.splitlines()[0]}" for tag, msg in problems]
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------------------------------------------------------
# Series diff


def render_series_diff(d: SeriesDiff, show_interdiff: bool = True) -> str:
    """Human form: one line per entry, then the interdiffs of changed entries."""
    width = max([len(e.id) for e in d.entries] + [5])
    out = [f"series diff {d.old} -> {d.new}", ""]
    for e in d.entries:
        out.append(f"  {e.id.ljust(width)}  {e.status:<9}  {_short(e.old_commit)} -> {_short(e.new_commit)}")
    counts = {s.value: sum(e.status == s for e in d.entries) for s in DiffStatus}
    out += ["", ", ".join(f"{n} {s}" for s, n in counts.items())]
    if show_interdiff:
        for e in d.entries:
            if e.status == DiffStatus.CHANGED:
                out += ["", f"--- interdiff of {e.id} ---", e.interdiff]
    return "\n".join(out) + "\n"


def _short(commit: str | None) -> str:
    return commit[:10] if commit else "-"


# ---------------------------------------------------------------------------------------------------------------
# The image overlay


def render_image_overlay(result) -> str:
    """The image overlay's short summary (`artifacts.image.ImageOverlayResult`; the compose report is in its JSON)."""
    lines = [f"image overlay onto {result.site_packages} ({result.tag}): {result.status}"]
    if result.compose is not None:
        for e in result.compose.entries:
            lines.append(f"  {e.id:<50} {e.status}")
    if result.changed:
        lines.append(f"  {len(result.changed)} files changed")
    for c in result.checks.results if result.checks is not None else []:
        lines.append(f"  check {c.name:<16} {c.status}" + (f" ({c.reason})" if c.reason else ""))
    if result.gate_state is not None:
        lines.append(f"  ampere gate      {result.gate_state}")
    if result.version:
        lines.append(f"  installed version: {result.version}")
    if result.message:
        lines.append(result.message)
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------------------------------------------------------
# The CI's Markdown (from a compose's JSON report)


def render_ci_summary(report: dict) -> str:
    """The job summary: one row per entry, then the conflicting hunks and the final checks."""
    lines = [
        f"## Compose onto {report['tag']}: {report['status']}",
        "",
        report.get("message", ""),
        "",
        "| entry | status | hunks |",
        "|---|---|---|",
    ]
    for e in report.get("entries", []):
        counts: dict[str, int] = {}
        for h in e.get("hunks", []):
            counts[h["verdict"]] = counts.get(h["verdict"], 0) + 1
        lines.append(f"| {e['id']} | {e['status']} | " + ", ".join(f"{n} {v}" for v, n in counts.items()) + " |")
    conflicts = ci_conflict_lines(report)
    if conflicts:
        lines += ["", "### Conflicts", *conflicts]
    for c in (report.get("final_checks") or {}).get("checks", []):
        lines.append(f"- check `{c['name']}`: {c['status']}")
    return "\n".join(lines) + "\n"


def ci_conflict_lines(report: dict) -> list[str]:
    """One Markdown list item per conflicting hunk no later fix carries, with the first line of its evidence: the
    hunks of the entry that stopped the run. (A dropped entry's hunks are not applied: its conflicts show how
    upstream's form of the change differs, and there is nothing to resolve.)"""
    out = []
    for e in report.get("entries", []):
        if e["status"] not in STOPPING:
            continue
        for h in e.get("hunks", []):
            if h["verdict"] == "conflict" and not h.get("resolved_by"):
                first = (h.get("evidence") or "").splitlines()[:1]
                out.append(f"- `{e['id']}`: `{h['file']}` hunk {h['hunk']}" + (f" — {first[0]}" if first else ""))
    return out


def render_ci_issue(report: dict) -> str:
    """The issue the scheduled CI opens when a compose stops: the summary and how to resolve it locally."""
    tag = report["tag"]
    stopped = next((e for e in report.get("entries", []) if e["status"] in STOPPING), None)
    if report["status"] == ComposeStatus.CONFLICT and stopped and stopped["status"] == EntryStatus.CONFLICT:
        how = (
            f"To proceed: `vllm-compose rebase --onto {tag}` stops at `{stopped['id']}` as this run did and writes "
            f"the entry's files to `vllm-compose-conflict-{tag}/` next to the repository, with conflict markers where "
            "the engine found a hunk's site and each refused hunk, with its best candidate sites, in the `.rej` file "
            "beside its file; resolve them, then `vllm-compose rebase --continue` records the resolution as a "
            f"skew-fix entry for {tag} (its `resolves` names those hunks) and composes on (README: Conflicts).\n"
        )
    elif report["status"] == ComposeStatus.CONFLICT:  # partly upstream: the message says what to decide
        name = f"`{stopped['id']}`" if stopped else "the same entry"
        how = (
            f"To proceed: `vllm-compose rebase --onto {tag}` stops at {name} as this run did; decide per hunk as the "
            "message above says (README: Conflicts).\n"
        )
    else:  # refused: no branch and no worktree; the message says what refused it
        how = (
            f"Reproduce locally with `vllm-compose rebase --onto {tag}`; the refusal above says what failed. Read "
            f"unreviewed landings with `vllm-compose review --onto {tag}` (docs/review.md); fix a failed audit or "
            "check with a skew-fix entry.\n"
        )
    retry = (
        f"The weekly run composes {tag} again until `ci/composed.json` lists it: add {tag} there once its compose "
        "is published.\n"
    )
    return (
        f"The scheduled compose of the series onto vLLM {tag} stopped: **{report['status']}**.\n\n"
        + render_ci_summary(report)
        + "\n"
        + how
        + retry
    )


def render_ci_semantic_issue(tag: str, semantic: dict) -> str:
    """The issue when the compose succeeded but the semantic check found what the series neither fixes nor
    accepts (`semantic-check --json`: {branch: report})."""
    new = [f for report in semantic.values() for f in report.get("findings", []) if f.get("accepted") is None]
    lines = [
        f"The scheduled compose of the series onto vLLM {tag} composed, but the semantic check (ty) found "
        f"{len(new)} finding(s) the release does not have and the baseline does not accept, so no wheel was built. "
        "Such a finding is usually a TypeError or AttributeError once its code runs.",
        "",
        "| entry | file:line | rule | message |",
        "|---|---|---|---|",
    ]
    for f in new:
        message = f["message"].replace("|", "\\|")
        lines.append(f"| `{f['entry']}` | `{f['file']}:{f['line']}` | {f['rule']} | {message} |")
    lines += [
        "",
        f"Reproduce with `vllm-compose semantic-check --onto {tag}`. Fix the entry with a skew-fix entry, or, where "
        "the finding is meant, record it in `series/semantic-baseline.toml` with a reason.",
    ]
    return "\n".join(lines) + "\n"


def render_ci_review_issue(tag: str, review: dict) -> str:
    """The issue when the compose succeeded but landings of it have no approval for the release (`rebase --json`'s
    `review`): the wheel is not built until a person has read them."""
    todo = [x for x in review.get("landings", []) if not x.get("approved")]
    lines = [
        f"The scheduled compose of the series onto vLLM {tag} composed, but {len(todo)} hunk(s) landed relocated or "
        "merged without an approval for this release, so no wheel was built.",
        "",
        "| hunk | verdict | lines | landing | audit |",
        "|---|---|---|---|---|",
    ]
    for x in todo:
        audit = (x.get("audit") or {}).get("verdict", "")
        lines.append(f"| `{x['id']}` | {x['verdict']} | {x['lines'][0]}-{x['lines'][1]} | `{x['digest']}` | {audit} |")
    lines += [
        "",
        f"Read each with `vllm-compose review --onto {tag}`. Record the ones that are right with `--approve ID` (or "
        "`--approve-all`) `--by NAME --why TEXT`, and commit `series/reviews.toml`; fix the others with a skew-fix "
        "entry (docs/review.md).",
    ]
    return "\n".join(lines) + "\n"


def render_ci_gate_issue(tag: str, gate: dict) -> str:
    """The issue when the compose succeeded but its DSA kernels do not compile for sm_80/86."""
    failed = [k for k in gate.get("kernels", []) if not k["ok"]]
    lines = [
        f"The scheduled compose of the series onto vLLM {tag} composed, but it fails the Ampere gate: "
        f"{len(failed)} kernel x target do not compile, so no wheel was built.",
        "",
        "| kernel | target | failed / specializations | reason |",
        "|---|---|---|---|",
    ]
    lines += [
        f"| `{k['module']}.{k['qualname']}` | {k['target']} | {k['failed']}/{k['specializations']} | {k['reason']} |"
        for k in failed
    ]
    lines += ["", f"Reproduce with `vllm-compose ampere-gate --onto {tag}`; fix with a skew-fix entry."]
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------------------------------------------------------
# pr-bump: a PR entry moved to a new revision


def render_pr_bump(report, write: bool = False) -> str:
    """`vllm-compose pr-bump`: the two revisions, the hunk map, then per release how each hunk landed with the old
    and the new revision and what becomes of each skew fix; the verdict last (`pr_bump.BumpReport`)."""
    from .pr_bump import FixFate, HunkChange

    def pin(r) -> str:
        rev = r.revision or "not recorded"
        return f"PR #{r.pr}, revision {rev}, sha256 {r.sha256[:12]}, {r.patch.hunk_count} hunks"

    out = [f"pr-bump {report.entry}", f"  old: {pin(report.old)}", f"  new: {pin(report.new)}"]
    for label, r in (("old", report.old), ("new", report.new)):
        if r.origin:
            out.append(f"  {label} bytes from: {r.origin}")
    out += ["", "hunk map (old revision -> new revision):"]
    counts = {c: sum(m.change is c for m in report.matches) for c in HunkChange}
    width = max([len(m.file) for m in report.matches] + [4])
    for m in report.matches:
        old = f"#{m.old}" if m.old is not None else "-"
        new = f"#{m.new}" if m.new is not None else "-"
        out.append(f"  {m.file.ljust(width)}  {old:>4} -> {new:<4}  {m.change}")
    out.append("  " + ", ".join(f"{n} {c}" for c, n in counts.items()))
    if report.rewritten or report.unmapped:
        out += ["", "resolves rewritten through the map:"]
        for fix, (old, new) in report.rewritten.items():
            out.append(f"  {fix}: {_short_items(old)} -> {_short_items(new)}")
        for fix, items in report.unmapped.items():
            out.append(f"  {fix}: {_short_items(items)} name hunks the new revision no longer has")
    for r in report.releases:
        out += ["", _release_line(r)]
        hw = max([len(_hunk_label(h.match)) for h in r.hunks] + [4])
        ow = max([len(_landing_text(h.old)) for h in r.hunks] + [12])
        out.append(f"  {'hunk'.ljust(hw)}  {'old revision'.ljust(ow)}  new revision")
        for h in r.hunks:
            out.append(f"  {_hunk_label(h.match).ljust(hw)}  {_landing_text(h.old).ljust(ow)}  {_landing_text(h.new)}")
        verdicts = {}
        for h in r.hunks:
            if h.new is not None:
                v = str(h.new.verdict)
                verdicts[v] = verdicts.get(v, 0) + 1
        out.append("  new revision: " + (", ".join(f"{n} {v}" for v, n in sorted(verdicts.items())) or "no hunk"))
        for fate in (FixFate.UNNEEDED, FixFate.BROKEN):
            for f in r.fixes:
                if f.fate is fate:
                    out.append(f"  fix {fate}: {f.id} ({f.reason})")
        if r.entries is not None:
            moved = [f"{e.id} {e.status}" for e in r.entries.entries if e.status != DiffStatus.UNCHANGED]
            out.append("  entries against the old compose: " + (", ".join(moved) or "all unchanged"))
        review = r.result.review
        if review is not None and review.unreviewed:
            out.append(
                f"  {len(review.unreviewed)} relocated or merged landings unreviewed: vllm-compose review --onto "
                f"{r.tag} after the move"
            )
        if not r.clean:
            out.append(f"  stops: {r.result.message}")
    out.append("")
    if report.retired:
        out.append("fixes retired (unneeded on every release where they apply):")
        out += [f"  {fix}: {why}" for fix, why in report.retired.items()]
    else:
        out.append("fixes retired: none")
    if report.by_hand:
        out.append("left to a person:")
        out += [f"  {x}" for x in report.by_hand]
    out.append("")
    if report.clean:
        out.append(f"CLEAN: every release composes with the new revision ({', '.join(r.tag for r in report.releases)})")
    else:
        out.append(f"NOT CLEAN: {', '.join(report.stopped)} do not compose with the new revision")
    if report.clean and not write:
        out.append("nothing written; --write updates series.toml as above")
    return "\n".join(out) + "\n"


def _short_items(items: list[str]) -> str:
    """`pr38476:vllm/x.py#3, pr38476:vllm/x.py#4` -> `x.py#3, #4` (same file) for one line per fix."""
    parts, last = [], None
    for item in items:
        path, _, hunk = item.rpartition("#")
        name = path.rsplit("/", 1)[-1]
        parts.append(f"#{hunk}" if name == last else f"{name}#{hunk}")
        last = name
    return ", ".join(parts) or "-"


def _hunk_label(m) -> str:
    old = f"#{m.old}" if m.old is not None else "-"
    new = f"#{m.new}" if m.new is not None else "-"
    return f"{m.file.rsplit('/', 1)[-1]} {old}->{new}"


def _landing_text(h) -> str:
    if h is None:
        return "-"
    return str(h.verdict) + (f"→{h.resolved_by}" if h.resolved_by else "")


def _release_line(r) -> str:
    retired = " (the retired fixes left out)" if r.final is not None else ""
    return f"{r.tag}: old revision {r.old.status}, new revision {r.result.status}{retired}"
