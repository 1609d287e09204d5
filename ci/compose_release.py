#!/usr/bin/env python3
"""Compose the series onto TAG, publish the report, build the overlay wheel, write an issue body.

Writes into --out: `report-<TAG>.json` (the compose report), `summary-<TAG>.md` (also appended to
$GITHUB_STEP_SUMMARY when set), `issue-<TAG>.md` (only when the compose did not succeed: the conflicts and refusals;
or when the wheel was refused, e.g. by the Ampere gate: the kernels that do not compile for sm_80/86, with
`ampere-gate-<TAG>.json`; or when the semantic check found what the series neither fixes nor accepts: the findings
and their entries, with `semantic-<TAG>.json`; or when hunks landed relocated or merged without an approval for the
release: the landings to read, docs/review.md), and the overlay wheel when all succeeded. Exits with the compose's
exit code (0 composed, 1 conflict, 2 refused, 3 bad input), or the wheel's, so the workflow can decide what to
publish. Files an earlier run left in --out for TAG are removed first, so what is there after a run is this run's.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from vllm_compose.atomicfile import write_atomically
from vllm_compose.cli import main as vllm_compose
from vllm_compose.errors import ComposeError
from vllm_compose.report import (
    render_ci_gate_issue,
    render_ci_issue,
    render_ci_review_issue,
    render_ci_semantic_issue,
    render_ci_summary,
)
from vllm_compose.series import version_of_tag

#: what this script writes into --out for a tag (`{tag}`), besides the wheel (`vllm-compose wheel` names it)
OUTPUTS = ("report-{tag}.json", "summary-{tag}.md", "issue-{tag}.md", "semantic-{tag}.json", "ampere-gate-{tag}.json")


def clear_outputs(out: Path, tag: str) -> None:
    """Create `out`, and remove what an earlier run wrote there for `tag`: a stale report would be read as this
    run's when the compose stops on bad input before writing one, and a stale issue body or wheel published.
    Raises `ComposeError` naming the folder when it cannot be used."""
    try:
        out.mkdir(parents=True, exist_ok=True)
        for name in OUTPUTS:
            (out / name.format(tag=tag)).unlink(missing_ok=True)
        for wheel in out.glob(f"vllm-{tag.removeprefix('v')}+compose.*.whl"):
            wheel.unlink()
    except OSError as exc:
        raise ComposeError(
            f"cannot use the output folder: {exc.strerror or exc}", file=str(out), hint="pass --out a writable folder"
        ) from None


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
    p.add_argument("--no-semantic-check", action="store_true", help="build the wheel without the semantic check")
    args = p.parse_args(argv)
    try:
        version_of_tag(args.tag)  # before the tag names files to remove
        clear_outputs(args.out, args.tag)
    except ComposeError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code
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
    summary = render_ci_summary(report)
    write_atomically(args.out / f"summary-{args.tag}.md", summary)
    if os.environ.get("GITHUB_STEP_SUMMARY"):
        with open(os.environ["GITHUB_STEP_SUMMARY"], "a") as fh:
            fh.write(summary)
    if rc != 0:
        write_atomically(args.out / f"issue-{args.tag}.md", render_ci_issue(report))
        return rc
    if not args.no_semantic_check:  # before any wheel: a fix that no longer fits the release stops here
        semantic_path = args.out / f"semantic-{args.tag}.json"
        check = ["semantic-check", "--onto", args.tag, "--series", args.series, "--repo", args.repo, "--json"]
        rc = vllm_compose([*check, str(semantic_path)])
        if rc == 2 and semantic_path.is_file():
            issue = render_ci_semantic_issue(args.tag, json.loads(semantic_path.read_text()))
            write_atomically(args.out / f"issue-{args.tag}.md", issue)
        if rc != 0:
            return rc
    review = report.get("review") or {}
    if any(not x.get("approved") for x in review.get("landings", [])):  # the wheel would refuse them: say which
        write_atomically(args.out / f"issue-{args.tag}.md", render_ci_review_issue(args.tag, review))
        return 2
    wheel = ["wheel", "--onto", args.tag, "--series", args.series, "--repo", args.repo, "--out", str(args.out)]
    wheel += (["--stock-wheel", args.stock_wheel] if args.stock_wheel else []) + (
        ["--no-ampere-gate"] if args.no_ampere_gate else []
    )
    rc = vllm_compose(wheel)
    if rc == 2 and not args.no_ampere_gate:
        gate_path = args.out / f"ampere-gate-{args.tag}.json"
        gate = ["ampere-gate", "--onto", args.tag, "--series", args.series, "--repo", args.repo, "--json"]
        if vllm_compose([*gate, str(gate_path)]) == 1 and gate_path.is_file():
            issue = render_ci_gate_issue(args.tag, json.loads(gate_path.read_text()))
            write_atomically(args.out / f"issue-{args.tag}.md", issue)
    return rc


if __name__ == "__main__":
    sys.exit(main())
