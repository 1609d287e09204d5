"""`ampere-path`, `ampere-gate`, `semantic-check`, `kernel-gate`: what a compose branch does on Ampere and to the
types, each command's options and its handler."""

from __future__ import annotations

from pathlib import Path

from ..errors import ExitCode
from .shared import options, say


def add_parsers(sub) -> None:
    """Add this group's commands to `sub`, each with its handler (`handler` in the parsed arguments)."""
    ap = sub.add_parser(
        "ampere-path",
        help="the DSA path of each release on CUDA and its sm_89+ kernels",
        parents=[options("series", "repo", "json", json="also write every release's path as JSON")],
    )
    ap.add_argument("--onto", nargs="+", action="extend", required=True, metavar="TAG", help="one or more releases")
    ap.add_argument("--write", type=Path, metavar="FILE", help="put the tables into FILE's marked section")

    ag = sub.add_parser(
        "ampere-gate",
        help="derive a release's DSA-path Triton launches and compile them for sm_80/86",
        parents=[
            options(
                "series",
                "repo",
                "json",
                series="series folder (names the branch)",
                json="also write the per-kernel results as JSON",
            )
        ],
    )
    ag.add_argument("--onto", metavar="TAG", help="release tag: gate its compose branch (or, with --stock, the tag)")
    ag.add_argument("--stock", action="store_true", help="gate the release tag itself, not its compose branch")
    ag.add_argument(
        "--tree",
        type=Path,
        metavar="DIR",
        help="gate a plain folder holding vllm/ instead (with --onto TAG [--stock]: checked against TAG's record)",
    )
    ag.add_argument(
        "--record-coverage",
        action="store_true",
        help="write this run's launch counts as the release's coverage record (after review; see docs/ampere-path.md)",
    )

    sc = sub.add_parser(
        "semantic-check",
        help="type-check a compose branch against its release (ty) and name each new finding's entry",
        parents=[
            options(
                "series",
                "repo",
                "json",
                series="series folder (baseline and branch)",
                json="also write the findings of every release as JSON",
            )
        ],
    )
    sc.add_argument("--onto", required=True, nargs="+", action="extend", metavar="TAG", help="one or more releases")
    sc.add_argument("--python", type=Path, metavar="ENV", help="environment whose packages ty resolves (default: this)")

    kg = sub.add_parser(
        "kernel-gate",
        help="compile recorded Triton kernels (lab/recordings/) of a tree for sm_80/86",
        parents=[options("json", json="also write the per-kernel results as JSON")],
    )
    kg.add_argument("records", type=Path, help="a lab/recordings/*.json file of recorded launches")
    kg.add_argument("tree", type=Path, help="the folder that holds the vllm/ package of the tree to gate")
    ap.set_defaults(handler=ampere_path)
    ag.set_defaults(handler=ampere_gate)
    sc.set_defaults(handler=semantic_check)
    kg.set_defaults(handler=kernel_gate)


def ampere_path(args) -> int:
    from ..ampere import dsa_path
    from ..composed_branch import open_branch
    from ..pp.topk_relay import topk_crossing
    from ..report import write_json
    from ..status import write_marked_section

    paths = []
    for tag in args.onto:
        branch = open_branch(args.repo, args.series, tag)
        paths.append(dsa_path.ampere_path(branch.composed_tree(), branch.release_tree(), tag, relay=topk_crossing))
    text = dsa_path.render_ampere_path(paths)
    print(text, end="")
    if args.write:
        write_marked_section(args.write, text, dsa_path.BEGIN, dsa_path.END)
    if args.json:
        write_json(args.json, {"releases": [p.to_json() for p in paths]})
    return ExitCode.OK


def ampere_gate(args) -> int:
    from ..ampere.gate import gate_release, render, write_report
    from ..pp.topk_relay import topk_crossing

    report = gate_release(
        args.repo,
        args.series,
        args.onto,
        stock=args.stock,
        tree=args.tree,
        record=args.record_coverage,
        progress=say,
        relay=topk_crossing,
    )
    print(render(report), end="")
    if args.json:
        write_report(args.json, report)
    return ExitCode.OK if report.ok else ExitCode.CONFLICT


def kernel_gate(args) -> int:
    from ..ampere.kernel_gate import load_records, render_results, run_gate
    from ..report import write_json

    results = run_gate(load_records(args.records), args.tree)
    print(render_results(results), end="")
    if args.json:
        write_json(args.json, [r.to_dict() for r in results])
    return ExitCode.OK if all(r.ok for r in results) else ExitCode.CONFLICT


def semantic_check(args) -> int:
    from ..report import write_json
    from ..semantic import check_branch

    reports = []
    for tag in args.onto:  # each release's findings as soon as it is checked (1-2 min each)
        reports.append(check_branch(args.repo, args.series, tag, args.python))
        print("\n".join(reports[-1].lines()), flush=True)
    if args.json:
        write_json(args.json, {r.label: r.to_json() for r in reports})
    return ExitCode.OK if all(r.ok for r in reports) else ExitCode.REFUSED
