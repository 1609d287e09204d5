#!/usr/bin/env python3
"""Compose the series onto TAG, publish the report, build the overlay wheel, write an issue body.

Writes into --out: `report-<TAG>.json` (the compose report), `summary-<TAG>.md` (also appended to
$GITHUB_STEP_SUMMARY when set), `issue-<TAG>.md` (only when the compose did not succeed: the conflicts and refusals;
or when the wheel was refused, e.g. by the Ampere gate: the kernels that do not compile for sm_80/86, with
`ampere-gate-<TAG>.json`), and the overlay wheel when both succeeded. Exits with the compose's exit code (0 composed,
1 conflict, 2 refused, 3 bad input), or the wheel's, so the workflow can decide what to publish.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from vllm_compose.cli import main as vllm_compose


def summary_markdown(report: dict) -> str:
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
    conflicts = conflict_lines(report)
    if conflicts:
        lines += ["", "### Conflicts", *conflicts]
    for c in (report.get("final_checks") or {}).get("checks", []):
        lines.append(f"- check `{c['name']}`: {c['status']}")
    return "\n".join(lines) + "\n"


def conflict_lines(report: dict) -> list[str]:
    out = []
    for e in report.get("entries", []):
        for h in e.get("hunks", []):
            if h["verdict"] == "conflict" and not h.get("resolved_by"):
                first = (h.get("evidence") or "").splitlines()[:1]
                out.append(f"- `{e['id']}`: `{h['file']}` hunk {h['hunk']}" + (f" — {first[0]}" if first else ""))
    return out


def issue_body(report: dict) -> str:
    return (
        f"The scheduled compose of the series onto vLLM {report['tag']} stopped: **{report['status']}**.\n\n"
        + summary_markdown(report)
        + "\nResolve locally with `vllm-compose rebase --onto "
        + report["tag"]
        + "`, edit the conflict worktree, then `--continue` (README: Conflicts).\n"
    )


def gate_issue_body(tag: str, gate: dict) -> str:
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


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("tag")
    p.add_argument("--series", default="series")
    p.add_argument("--repo", default="vllm")
    p.add_argument("--out", type=Path, default=Path("ci-out"))
    p.add_argument("--sources")
    p.add_argument("--offline", action="store_true")
    p.add_argument("--stock-wheel", help="the stock wheel (default: fetched from PyPI, cached)")
    p.add_argument("--no-ampere-gate", action="store_true", help="build the wheel without the Ampere gate")
    args = p.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    report_path = args.out / f"report-{args.tag}.json"
    extra = (["--sources", args.sources] if args.sources else []) + (["--offline"] if args.offline else [])
    rc = vllm_compose(
        [
            "rebase",
            "--onto",
            args.tag,
            "--series",
            args.series,
            "--repo",
            args.repo,
            "-q",
            "--json",
            str(report_path),
            *extra,
        ]
    )
    if not report_path.is_file():
        return rc  # bad input: the error is on stderr
    report = json.loads(report_path.read_text())
    summary = summary_markdown(report)
    (args.out / f"summary-{args.tag}.md").write_text(summary)
    if os.environ.get("GITHUB_STEP_SUMMARY"):
        with open(os.environ["GITHUB_STEP_SUMMARY"], "a") as fh:
            fh.write(summary)
    if rc != 0:
        (args.out / f"issue-{args.tag}.md").write_text(issue_body(report))
        return rc
    wheel = ["wheel", "--onto", args.tag, "--series", args.series, "--repo", args.repo, "--out", str(args.out)]
    wheel += (["--stock-wheel", args.stock_wheel] if args.stock_wheel else []) + (
        ["--no-ampere-gate"] if args.no_ampere_gate else []
    )
    rc = vllm_compose(wheel)
    if rc == 2 and not args.no_ampere_gate:
        gate_path = args.out / f"ampere-gate-{args.tag}.json"
        gate = ["ampere-gate", "--onto", args.tag, "--series", args.series, "--repo", args.repo, "--json"]
        if vllm_compose([*gate, str(gate_path)]) == 1 and gate_path.is_file():
            (args.out / f"issue-{args.tag}.md").write_text(gate_issue_body(args.tag, json.loads(gate_path.read_text())))
    return rc


if __name__ == "__main__":
    sys.exit(main())
