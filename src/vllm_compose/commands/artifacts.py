"""`wheel`, `editable`, `image-overlay`: artifacts built from a compose (docs/install.md), each command's options and
its handler."""

from __future__ import annotations

import sys
from pathlib import Path

from ..errors import ExitCode
from .shared import ProgressDisplay, cache_of, options


def add_parsers(sub) -> None:
    """Add this group's commands to `sub`, each with its handler (`handler` in the parsed arguments)."""
    branch = ("series", "repo", "no_import_smoke", "no_ampere_gate", "allow_unreviewed")

    def stock_args(x) -> None:
        x.add_argument(
            "--stock-wheel",
            type=Path,
            metavar="FILE",
            help="the stock vLLM wheel of the release (default: fetched from the index into the wheel cache)",
        )
        x.add_argument(
            "--wheel-cache",
            type=Path,
            metavar="DIR",
            help="cache folder for the stock wheel, which "
            "appears as DIR/wheels/<name> (default: $VLLM_COMPOSE_CACHE or XDG)",
        )
        x.add_argument("--index-url", help="package index for the stock wheel (default: the one pip uses)")
        x.add_argument("--offline", action="store_true", help="use only the stock wheel already in the cache")

    def branch_args(x) -> None:
        x.add_argument("--onto", required=True, metavar="TAG", help="release tag whose compose branch to build from")
        x.add_argument("--branch", help="compose branch (default: the series' compose-<PRs>-<TAG>)")
        stock_args(x)

    w = sub.add_parser(
        "wheel",
        help="build the overlay wheel of a compose branch (no compiling)",
        parents=[options(*branch, "json", json="also write what was built as JSON")],
    )
    branch_args(w)
    w.add_argument("--out", default=Path("dist"), type=Path, metavar="DIR", help="output folder (default: dist)")
    w.add_argument("--label", help="PEP 440 local label (default: compose.<PRs>.g<tree>)")
    w.add_argument("--verify", action="store_true", help="re-check every RECORD hash of the written wheel")

    e = sub.add_parser(
        "editable",
        help="pip install -e the composed tree over the precompiled stock wheel",
        parents=[options(*branch)],
    )
    branch_args(e)
    e.add_argument("--run", action="store_true", help="run the install (default: print the command)")
    e.add_argument("--python", help="interpreter whose pip installs (default: this one)")
    e.add_argument("--no-build-isolation", action="store_true", help="build with the installed torch")

    i = sub.add_parser(
        "image-overlay",
        help="compose the series onto an installed vLLM (site-packages) in place",
        parents=[options("series", "sources", "cache", "offline", *branch[2:], "json")],
    )
    i.add_argument("--site-packages", required=True, type=Path, metavar="DIR", help="folder holding vllm/")
    i.add_argument("--onto", metavar="TAG", help="release tag (default: v + the installed vLLM version)")
    i.add_argument("--dry-run", action="store_true", help="compose and check, write nothing into site-packages")
    w.set_defaults(handler=wheel)
    e.set_defaults(handler=editable)
    i.set_defaults(handler=image_overlay)


def _stock_wheel(args, version: str, progress=None) -> Path:
    """`--stock-wheel`, or the release's stock wheel from the wheel cache (downloaded, sha256-checked, when absent)."""
    from ..artifacts.wheel import fetch_stock_wheel
    from ..cache import Cache

    if args.stock_wheel:
        return args.stock_wheel
    cache = Cache(args.wheel_cache) if args.wheel_cache else Cache()
    return fetch_stock_wheel(version, cache, index_url=args.index_url, progress=progress, offline=args.offline)


def _clearance(args, action: str):
    """The artifact clearance the command line asks for (`artifacts.clearance`)."""
    from ..artifacts.clearance import Clearance

    return Clearance(
        action,
        allow_unreviewed=args.allow_unreviewed,
        import_smoke=not args.no_import_smoke,
        run_ampere_gate=not args.no_ampere_gate,
    )


def wheel(args) -> int:
    from ..artifacts.wheel import WheelBuild, build_overlay_wheel, verify_wheel
    from ..composed_branch import open_branch
    from ..report import render_wheel, write_json

    branch = open_branch(args.repo, args.series, args.onto, args.branch)
    cleared = _clearance(args, "wheel").clear(branch, args.series)
    with ProgressDisplay(False) as progress:
        stock = _stock_wheel(args, branch.version, progress)
    out = build_overlay_wheel(stock, branch.composed_tree(), branch.changed, args.label or branch.label, args.out)
    checked = verify_wheel(out) if args.verify else None
    print(render_wheel(branch, stock, cleared.checks, cleared.ampere_gate, cleared.review, checked, out), end="")
    if args.json:
        write_json(args.json, WheelBuild(out, stock, branch, cleared).to_json())
    return ExitCode.OK


def editable(args) -> int:
    from ..artifacts.editable import editable_install, require_checked_out, run_install
    from ..composed_branch import open_branch
    from ..report import ampere_summary, checks_line, render_review_line

    branch = open_branch(args.repo, args.series, args.onto, args.branch)
    clearance = _clearance(args, "editable")
    for step in clearance.steps(branch, args.series):  # the checks show before the slower gate runs
        if step == "checks":
            print(checks_line(clearance.checks))
        elif step == "ampere gate":
            print(f"ampere gate: {ampere_summary(clearance.ampere_gate)}")
            print(render_review_line(clearance.review))
    require_checked_out(branch, args.repo)
    with ProgressDisplay(False) as progress:
        stock = _stock_wheel(args, branch.version, progress)
    install = editable_install(
        args.repo, stock, branch.label, python=args.python, build_isolation=not args.no_build_isolation
    )
    if not install.version_labelled:
        print(
            f"warning: {args.repo}/setup.py does not read VLLM_VERSION_OVERRIDE; the install will not say "
            f"{install.version}",
            file=sys.stderr,
        )
    print(install.shell())
    if not args.run:
        return ExitCode.OK
    run_install(install, args.repo)
    print(f"installed vllm {install.version} (editable, precompiled kernels from {stock.name})")
    return ExitCode.OK


def image_overlay(args) -> int:
    from ..artifacts.image import overlay_site_packages
    from ..report import render_image_overlay, write_json

    result = overlay_site_packages(
        args.site_packages,
        args.series,
        cache_of(args),
        tag=args.onto,
        offline=args.offline,
        import_smoke=not args.no_import_smoke,
        dry_run=args.dry_run,
        ampere_gate=not args.no_ampere_gate,
        allow_unreviewed=args.allow_unreviewed,
    )
    print(render_image_overlay(result), end="")
    if args.json:
        write_json(args.json, result.to_json())
    return result.exit_code
