"""`pr-bump`: move a PR entry to a new revision of its PR or a takeover PR (docs/pr-bump.md), its options and its
handler."""

from __future__ import annotations

from pathlib import Path

from ..errors import ExitCode
from .shared import cache_of, options


def add_parsers(sub) -> None:
    """Add this group's commands to `sub`, each with its handler (`handler` in the parsed arguments)."""
    b = sub.add_parser(
        "pr-bump",
        help="move a PR entry to a new revision (or a takeover PR): compose every release with it, show what changes",
        parents=[
            options(
                "series",
                "sources",
                "cache",
                "offline",
                "no_import_smoke",
                "json",
                no_import_smoke="skip importing the changed modules",
            )
        ],
    )
    b.add_argument("entry", metavar="ENTRY", help="the PR entry's id in series.toml, e.g. pr38476")
    b.add_argument("--to", required=True, metavar="FILE_OR_URL", help="the new revision's diff: a file or a URL")
    b.add_argument("--onto", required=True, nargs="+", action="extend", metavar="TAG", help="releases to compose")
    b.add_argument("--sha256", metavar="HEX", help="the new diff's sha256 (required for a URL; checked for a file)")
    b.add_argument("--url", help="the URL series.toml pins (default: --to when it is a URL; needed to --write a file)")
    b.add_argument("--revision", metavar="COMMIT", help="the PR head commit the diff is of (recorded)")
    b.add_argument("--origin", metavar="TEXT", help="where the bytes came from (recorded)")
    b.add_argument("--pr", type=int, metavar="N", help="a takeover PR's number (default: the entry's)")
    b.add_argument("--pr-url", help="the takeover PR's URL (default: the entry's pr_url with the number replaced)")
    b.add_argument("--paths", nargs="+", metavar="GLOB", help="keep these files of the diff (default: the entry's)")
    b.add_argument("--repo", type=Path, metavar="DIR", help="compose in DIR (objects, tags; default: a scratch one)")
    b.add_argument("--write", action="store_true", help="update series.toml when every release composes cleanly")
    b.set_defaults(handler=pr_bump)


def pr_bump(args) -> int:
    from ..pr_bump import BumpRequest, bump, write_bump
    from ..report import render_pr_bump, write_json

    request = BumpRequest(
        series_dir=args.series,
        entry=args.entry,
        to=args.to,
        tags=args.onto,
        sha256=args.sha256,
        url=args.url,
        revision=args.revision,
        origin=args.origin,
        pr=args.pr,
        pr_url=args.pr_url,
        paths=tuple(args.paths) if args.paths else None,
        repo_dir=args.repo,
        offline=args.offline,
        import_smoke=not args.no_import_smoke,
    )
    report = bump(request, cache_of(args))
    if args.json:
        write_json(args.json, report.to_json())
    print(render_pr_bump(report, write=args.write), end="")
    if args.write:  # refuses a report that is not clean: nothing is written then
        for path in write_bump(report):
            print(f"wrote {path}" if path.exists() else f"removed {path}")
    return ExitCode.OK if report.clean else ExitCode.CONFLICT
