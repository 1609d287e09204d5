"""`rebase`, `apply`, `check-fuzz`, `validate`, `status`, `series-diff`, `review`, `audit-series`: composing the
series and proving it, each command's options and its handler."""

from __future__ import annotations

import tempfile
from pathlib import Path

from ..errors import CommandLineError, ExitCode
from .shared import OFFLINE_REPO, ProgressDisplay, cache_of, nothing, options, say


def add_parsers(sub) -> None:
    """Add this group's commands to `sub`, each with its handler (`handler` in the parsed arguments)."""
    r = sub.add_parser(
        "rebase",
        help="replay the series onto a vLLM release tag into a compose branch",
        parents=[
            options(
                "series",
                "repo",
                "init",
                "json",
                "sources",
                "cache",
                "offline",
                "quiet",
                "no_import_smoke",
                sources="seed the cache with the files in DIR (offline use)",
                offline=OFFLINE_REPO,
            )
        ],
    )
    r.add_argument("--onto", metavar="TAG", help="release tag, e.g. v0.26.0 (imported from PyPI when needed)")
    r.add_argument(
        "--worktree",
        type=Path,
        metavar="DIR",
        help="where a conflict is left for a person (default: <repo>/../vllm-compose-conflict-<tag>)",
    )
    g = r.add_mutually_exclusive_group()
    g.add_argument(
        "--continue",
        dest="resume",
        action="store_true",
        help="record the resolution in the worktree as a new skew-fix entry and go on",
    )
    g.add_argument("--abort", action="store_true", help="drop a stopped compose (keeps a worktree you edited)")
    r.add_argument("--message", "-m", help="with --continue: the fix's commit message (subject, blank, body)")
    r.add_argument(
        "--accept-check-failures",
        action="store_true",
        help="write the branch although checks fail (recorded in the report)",
    )
    r.add_argument("--allow-dirty", action="store_true", help="go on although the repository has local changes")
    r.add_argument(
        "--allow-unreviewed",
        action="store_true",
        help="write the branch although a fix outside its written_for landed unreviewed (recorded on the branch)",
    )
    r.add_argument("--force", action="store_true", help="replace a branch whose tip was not written by this tool")
    r.add_argument("--no-checks", action="store_true", help="skip the per-entry checks (recorded in the report)")
    r.add_argument(
        "--no-checkout",
        action="store_true",
        help="leave the repository's worktree as it is (default: check the new branch out when it is clean or empty)",
    )

    a = sub.add_parser(
        "apply",
        help="apply a series or patches onto a plain directory (e.g. site-packages)",
        parents=[options("json", "sources", "cache", "offline")],
    )
    a.add_argument("--to", required=True, type=Path, metavar="DIR")
    src = a.add_mutually_exclusive_group(required=True)
    src.add_argument("--series", type=Path, metavar="DIR")
    src.add_argument("--patch", type=Path, action="append", metavar="FILE")
    a.add_argument("--onto", metavar="TAG", help="with --series: the release the entries are chosen for")
    a.add_argument("-p", dest="strip", type=int, default=1, help="strip level (default 1)")
    a.add_argument("--dry-run", action="store_true")
    a.add_argument(
        "--markers",
        action="store_true",
        help="write diff3-style markers at the site found for a conflicting hunk instead of a .rej file (a hunk with no site found still goes to .rej)",
    )

    c = sub.add_parser("check-fuzz", help="audit where every hunk of an application landed", parents=[options("json")])
    c.add_argument("--stock", required=True, help="stock tree: a directory, or a git revision with --repo")
    c.add_argument("--patched", required=True, help="patched tree: a directory, or a git revision with --repo")
    c.add_argument("--repo", type=Path, help="git repository for revisions")
    c.add_argument("-p", dest="strip", type=int, default=1)
    c.add_argument("patches", nargs="+", type=Path, metavar="PATCH")

    v = sub.add_parser(
        "validate",
        help="validate a series folder (series.toml and its patches)",
        parents=[options("series", "cache", cache="cache folder the PR diffs are looked up in")],
    )

    st = sub.add_parser(
        "status",
        help="compose onto each tag (no branch state kept on conflict) and write the status table",
        parents=[
            options("series", "repo", "init", "sources", "cache", "offline", "no_import_smoke", offline=OFFLINE_REPO)
        ],
    )
    st.add_argument("--onto", action="append", required=True, metavar="TAG", help="repeat for each release")
    st.add_argument("--write", type=Path, metavar="FILE", help="put the table into FILE's marked section")
    st.add_argument("--json-dir", type=Path, metavar="DIR", help="also write each tag's report as DIR/TAG.json")
    st.add_argument(
        "--gpu-results",
        type=Path,
        default=Path("lab/results"),
        metavar="DIR",
        help="device result files for the GPU column (default: lab/results)",
    )
    st.add_argument("--no-ampere-gate", action="store_true", help="leave the Ampere gate column unfilled")

    sd = sub.add_parser(
        "series-diff",
        help="per-entry diff of the compose branches of two tags",
        parents=[options("series", "repo", "json")],
    )
    sd.add_argument("old", metavar="OLD_TAG")
    sd.add_argument("new", metavar="NEW_TAG")
    sd.add_argument("--no-interdiff", action="store_true")

    rv = sub.add_parser(
        "review",
        help="compose without publishing; list the relocated and merged landings, record approvals of them",
        parents=[
            options(
                "series",
                "repo",
                "json",
                "sources",
                "cache",
                "offline",
                "quiet",
                series="series folder (approvals: reviews.toml)",
                json="also write the review as JSON",
                offline="use only the cache and --sources for the PR diffs",
            )
        ],
    )
    rv.add_argument("--onto", required=True, metavar="TAG", help="release tag whose compose branch to review")
    ga = rv.add_mutually_exclusive_group()
    ga.add_argument("--approve", action="append", metavar="ID", help="approve this landing (<entry>:<path>#<hunk>)")
    ga.add_argument("--approve-all", action="store_true", help="approve every unreviewed landing listed")
    rv.add_argument("--by", help="with --approve: who read the landings")
    rv.add_argument("--why", help="with --approve: why they are right")

    s = sub.add_parser(
        "audit-series",
        help="compose the series onto a release in a scratch repository (pre-commit)",
        parents=[options("series", "sources", "cache", "offline")],
    )
    s.add_argument("--onto", action="append", metavar="TAG", help="release tag to compose onto (repeatable)")

    r.set_defaults(handler=rebase)
    a.set_defaults(handler=apply)
    c.set_defaults(handler=check_fuzz)
    v.set_defaults(handler=validate)
    st.set_defaults(handler=status)
    sd.set_defaults(handler=series_diff)
    rv.set_defaults(handler=review)
    s.set_defaults(handler=audit_series)


def rebase(args) -> int:
    from .. import checkout, compose
    from ..report import render_compose, write_json
    from ..results import ComposeStatus

    if args.abort:
        print(compose.abort(args.repo))
        return ExitCode.OK
    if not args.onto and not args.resume:
        raise CommandLineError("--onto TAG is required (or --continue, --abort)", hint="e.g. --onto v0.26.0")
    if args.message and not args.resume:
        raise CommandLineError("--message goes with --continue")
    options = compose.ComposeOptions(
        offline=args.offline,
        worktree=args.worktree,
        accept_check_failures=args.accept_check_failures,
        allow_dirty=args.allow_dirty,
        force=args.force,
        run_checks=not args.no_checks,
        import_smoke=not args.no_import_smoke,
        init=args.init,
        allow_unreviewed=args.allow_unreviewed,
    )
    branch = _branch_to_release(args)
    with (
        ProgressDisplay(args.quiet) as progress,
        checkout.released(args.repo, branch) if branch else nothing() as before,
    ):
        composer = compose.Composer(args.series, args.repo, cache_of(args), options, progress)
        if args.resume:
            result = compose.resume(args.series, args.repo, composer, args.message)
        else:
            result = composer.run(args.onto)
    print(render_compose(result), end="")
    if result.status is ComposeStatus.COMPOSED and not args.no_checkout:
        print(checkout.check_out_compose(args.repo, result.branch, before).message)
    if args.json:
        write_json(args.json, result.to_json())
    return result.exit_code


def _branch_to_release(args) -> str | None:
    """The compose branch `rebase --onto` rewrites, when checking it out afterwards is wanted (`checkout.released`)."""
    from ..series import load_series

    if args.no_checkout or args.resume or not args.repo.is_dir():
        return None
    return load_series(args.series).branch_name(args.onto)


def apply(args) -> int:
    from ..apply import apply_patches
    from ..patchfile import read_patch_files
    from ..report import render_apply, write_json
    from ..series import load_series
    from ..sources import series_patches

    if args.series:
        patches = series_patches(load_series(args.series), args.onto, cache_of(args), offline=args.offline)
    else:
        patches = read_patch_files(args.patch, args.strip)
    result = apply_patches(args.to, patches, dry_run=args.dry_run, markers=args.markers)
    print(render_apply(result, dry_run=args.dry_run), end="")
    if args.json:
        write_json(args.json, result.to_json())
    return result.exit_code


def _tree(spec: str, repo_dir: Path | None):
    from ..trees import DirTree, GitTree

    if repo_dir is None:
        return DirTree(spec)
    from .. import gitstore

    repo = gitstore.open_or_init_repo(repo_dir, create=False)
    return GitTree.from_revision(repo, spec)


def check_fuzz(args) -> int:
    from ..audit import audit
    from ..patchfile import read_patch_files
    from ..report import render_audit, write_json

    patches = read_patch_files(args.patches, args.strip)
    report = audit(_tree(args.stock, args.repo), _tree(args.patched, args.repo), patches)
    print(render_audit(report), end="" if render_audit(report).endswith("\n") else "\n")
    if args.json:
        write_json(args.json, report.to_json())
    return ExitCode.OK if report.ok else ExitCode.CONFLICT


def validate(args) -> int:
    from ..report import render_validate
    from ..validate import validate_series

    checked = validate_series(args.series, cache_of(args))
    print(render_validate(checked), end="")
    return ExitCode.OK


def status(args) -> int:
    from .. import compose
    from ..report import render_status, smoke_skipped, write_json
    from ..results import ComposeStatus
    from ..status import release_statuses, write_marked_section

    def composed(tag, result) -> None:
        skipped = smoke_skipped(result.final_checks)
        print(f"{tag}: {result.status}" + (f" (import smoke skipped: {skipped})" if skipped else ""), flush=True)
        if args.json_dir:
            write_json(args.json_dir / f"{tag}.json", result.to_json())

    options = compose.ComposeOptions(
        offline=args.offline, keep_state=False, init=args.init, import_smoke=not args.no_import_smoke
    )
    rows = release_statuses(
        args.series,
        args.repo,
        args.onto,
        cache_of(args),
        options,
        args.gpu_results,
        run_ampere_gate=not args.no_ampere_gate,
        say=say,
        composed=composed,
    )
    table = render_status(rows)
    print(table, end="")
    if args.write:
        write_marked_section(args.write, table)
    return ExitCode.OK if all(r.compose.status == ComposeStatus.COMPOSED for r in rows) else ExitCode.CONFLICT


def series_diff(args) -> int:
    from .. import gitstore
    from ..report import render_series_diff, write_json
    from ..series import load_series
    from ..series_diff import series_diff

    series = load_series(args.series)
    repo = gitstore.open_or_init_repo(args.repo, create=False)
    d = series_diff(repo, (series.branch_name(args.old), args.old), (series.branch_name(args.new), args.new))
    print(render_series_diff(d, show_interdiff=not args.no_interdiff), end="")
    if args.json:
        write_json(args.json, d.to_json())
    return ExitCode.OK


def review(args) -> int:
    from .. import compose
    from ..report import render_review, write_json
    from ..review import approve

    if (args.approve or args.approve_all) and not (args.by and args.why):
        raise CommandLineError(
            "--approve and --approve-all need --by NAME and --why TEXT", hint="say who read it and why"
        )
    if (args.by or args.why) and not (args.approve or args.approve_all):
        raise CommandLineError("--by and --why go with --approve ID or --approve-all")
    options = compose.ComposeOptions(
        offline=args.offline, keep_state=False, run_checks=False, publish=False, allow_unreviewed=True
    )
    with ProgressDisplay(args.quiet) as progress:
        review = compose.review(args.series, args.repo, args.onto, cache_of(args), options, progress)
    if args.approve or args.approve_all:
        written = approve(review, args.series, args.approve, args.by, args.why)
        print(f"recorded {len(written)} approvals in {args.series / 'reviews.toml'}")
    print(render_review(review), end="")
    if args.json:
        write_json(args.json, review.to_json())
    return ExitCode.CONFLICT if review.stopped else ExitCode.OK


def audit_series(args) -> int:

    from .. import compose
    from ..report import render_compose

    if not args.onto:
        raise CommandLineError("--onto TAG is required", hint="e.g. args: [--onto, v0.26.0] in .pre-commit-config.yaml")
    worst = ExitCode.OK
    for tag in args.onto:
        with tempfile.TemporaryDirectory(prefix="vllm-compose-audit-") as tmp:
            options = compose.ComposeOptions(
                offline=args.offline, import_smoke=False, worktree=Path(tmp) / "conflict", init=True
            )
            result = compose.Composer(args.series, Path(tmp) / "repo", cache_of(args), options).run(tag)
        print(render_compose(result), end="")
        worst = max(worst, result.exit_code)
    return worst
