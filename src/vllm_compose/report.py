"""Human-readable reports (plain text, stable for snapshot tests) and JSON files for every command's result."""

from __future__ import annotations

import json
import os
from pathlib import Path

from .atomicfile import write_atomically
from .errors import ComposeError


def write_json(path: str | os.PathLike, data: dict) -> None:
    """Write `data` as JSON to `path` atomically (temp file + rename): a report is whole or absent."""
    path = Path(path)
    try:
        write_atomically(path, json.dumps(data, indent=2, sort_keys=False) + "\n")
    except OSError as exc:
        raise ComposeError(
            f"cannot write the JSON report {path}: {exc.strerror}", hint="pass a writable --json path"
        ) from exc


def hunk_json(h) -> dict:
    """The per-hunk record shared by the apply and audit JSON reports (issue 3's schema)."""
    return {
        "patch": h.patch,
        "file": h.file,
        "hunk": h.hunk,
        "verdict": h.verdict.value,
        "landed_at": h.landed_at,
        "expected_at": h.expected_at,
        "reason": h.reason,
    }


def _counts(hunks) -> str:
    counts: dict[str, int] = {}
    for h in hunks:
        key = h.verdict + ("→" + h.resolved_by if getattr(h, "resolved_by", None) else "")
        counts[key] = counts.get(key, 0) + 1
    return ", ".join(f"{n} {v}" for v, n in sorted(counts.items())) or "-"


def render_compose(result) -> str:
    """The compose report: one line per entry with its status and hunks by verdict, then notable hunks."""
    out = [f"compose {result.branch}  (onto {result.tag}, base {(result.base or '?')[:12]})", ""]
    width = max([len(e.id) for e in result.entries] + [5])
    out.append(f"  {'entry'.ljust(width)}  {'status':<17} hunks")
    for e in result.entries:
        out.append(f"  {e.id.ljust(width)}  {e.status:<17} {_counts(e.hunks)}")
        if e.reason and e.status != "applied":
            out.append(f"  {''.ljust(width)}  {'':<17} {e.reason}")
        if e.checks:
            for c in e.checks.results:
                if c.status == "fail":
                    errors = [f for f in c.findings if f.severity == "error"]
                    out.append(f"  {''.ljust(width)}  check {c.name} after this entry: {len(errors)} error(s)")
                    for f in errors[:5]:
                        out.append(f"  {''.ljust(width)}    {f.file}:{f.line}: {f.message}")
    notable = [(e.id, h) for e in result.entries for h in e.hunks if h.verdict not in ("exact", "offset")]
    if notable:
        out += ["", "hunks that needed more than an offset:"]
        for eid, h in notable:
            where = f"line {h.landing_line}" if h.landing_line else "not placed"
            extra = f" (carried by {h.resolved_by})" if h.resolved_by else ""
            scope = f" in {h.scope}" if h.scope else ""
            out.append(f"  {eid}: {h.file} hunk {h.hunk}: {h.verdict}{extra} at {where}{scope}")
            if h.verdict == "conflict" and h.evidence and not h.resolved_by:
                out += [f"      {line}" for line in h.evidence.splitlines()[:6]]
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
    verdict = {"composed": "OK", "conflict": "STOPPED (conflict)", "refused": "REFUSED"}[result.status]
    out.append(f"{verdict}: {result.message}")
    if result.status == "composed":
        out.append(f"branch {result.branch} -> {(result.head or '')[:12]}")
    return "\n".join(out) + "\n"
