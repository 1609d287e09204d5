"""Command line: argument parsing and dispatch only.

`vllm-compose rebase|apply|check-fuzz|validate ...`; `scripts/rebase_series.py`, `scripts/apply_series.py` and
`scripts/check_fuzz.py` are shims that call `main()` with their subcommand. Every `ComposeError` is caught here
once, printed as "error: <what, where>\\n  hint: <how to proceed>" and mapped to its exit code (README: exit codes).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from .errors import ComposeError, ExitCode

#: where things are when the user names nothing (relative to the current directory)
DEFAULTS = {
    "series": "series",  # the series folder of this repository
    "repo": "vllm",  # the vLLM submodule
}


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="vllm-compose", description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="command", required=True)

    r = sub.add_parser("rebase", help="replay the series onto a vLLM release tag into a compose branch")
    r.add_argument("--onto", metavar="TAG", help="release tag, e.g. v0.26.0 (imported from PyPI when needed)")
    r.add_argument("--series", default=DEFAULTS["series"], type=Path, help="series folder (default: series)")
    r.add_argument("--repo", default=DEFAULTS["repo"], type=Path, help="vLLM git repository (default: vllm)")
    r.add_argument("--json", type=Path, metavar="FILE", help="also write the report as JSON")
    r.add_argument("--sources", type=Path, metavar="DIR", help="seed the cache with the files in DIR (offline use)")
    r.add_argument("--cache", type=Path, metavar="DIR", help="cache folder (default: $VLLM_COMPOSE_CACHE or XDG)")
    r.add_argument("--offline", action="store_true", help="use only the repository, the cache and --sources")
    r.add_argument("--worktree", type=Path, metavar="DIR",
                   help="where a conflict is left for a person (default: <repo>/../vllm-compose-conflict-<tag>)")
    g = r.add_mutually_exclusive_group()
    g.add_argument("--continue", dest="resume", action="store_true",
                   help="record the resolution in the worktree as a new skew-fix entry and go on")
    g.add_argument("--abort", action="store_true", help="drop a stopped compose (keeps a worktree you edited)")
    r.add_argument("--message", "-m", help="with --continue: the fix's commit message (subject, blank, body)")
    r.add_argument("--accept-check-failures", action="store_true",
                   help="write the branch although checks fail (recorded in the report)")
    r.add_argument("--allow-dirty", action="store_true", help="go on although the repository has local changes")
    r.add_argument("--force", action="store_true", help="replace a branch whose tip was not written by this tool")
    r.add_argument("--no-checks", action="store_true", help="skip the per-entry checks (recorded in the report)")
    r.add_argument("--no-import-smoke", action="store_true",
                   help="skip importing the changed modules (it runs only where the vLLM runtime is importable)")
    r.add_argument("--quiet", "-q", action="store_true", help="no progress display")

    a = sub.add_parser("apply", help="apply a series or patches onto a plain directory (e.g. site-packages)")
    a.add_argument("--to", required=True, type=Path, metavar="DIR")
    src = a.add_mutually_exclusive_group(required=True)
    src.add_argument("--series", type=Path, metavar="DIR")
    src.add_argument("--patch", type=Path, action="append", metavar="FILE")
    a.add_argument("--onto", metavar="TAG", help="with --series: the release the entries are chosen for")
    a.add_argument("-p", dest="strip", type=int, default=1, help="strip level (default 1)")
    a.add_argument("--json", type=Path, metavar="FILE")
    a.add_argument("--dry-run", action="store_true")
    a.add_argument("--markers", action="store_true", help="write diff3-style markers instead of .rej files")
    a.add_argument("--sources", type=Path, metavar="DIR")
    a.add_argument("--cache", type=Path, metavar="DIR")
    a.add_argument("--offline", action="store_true")

    c = sub.add_parser("check-fuzz", help="audit where every hunk of an application landed")
    c.add_argument("--stock", required=True, help="stock tree: a directory, or a git revision with --repo")
    c.add_argument("--patched", required=True, help="patched tree: a directory, or a git revision with --repo")
    c.add_argument("--repo", type=Path, help="git repository for revisions")
    c.add_argument("-p", dest="strip", type=int, default=1)
    c.add_argument("--json", type=Path, metavar="FILE")
    c.add_argument("patches", nargs="+", type=Path, metavar="PATCH")

    v = sub.add_parser("validate", help="validate a series folder (series.toml and its patches)")
    v.add_argument("--series", default=DEFAULTS["series"], type=Path)
    return p


def main(argv: list[str] | None = None) -> int:
    """Entry point of the console command and the scripts; returns the exit code."""
    args = _parser().parse_args(argv)
    try:
        handler = {"rebase": _rebase, "apply": _apply, "check-fuzz": _check_fuzz, "validate": _validate}
        return int(handler[args.command](args))
    except ComposeError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return int(exc.exit_code)
    except KeyboardInterrupt:
        print("interrupted: no branch or ref was written", file=sys.stderr)
        return 130


def _cache(args):
    from .sources import Cache, seed_cache

    cache = Cache(args.cache) if getattr(args, "cache", None) else Cache()
    if getattr(args, "sources", None):
        if not args.sources.is_dir():
            raise ComposeError(f"--sources {args.sources} is not a directory", hint="pass a folder of files")
        seed_cache(args.sources, cache)
    return cache


def _rebase(args) -> int:
    from . import replay
    from .report import render_compose, write_json

    if args.abort:
        print(replay.abort(args.repo))
        return ExitCode.OK
    if not args.onto and not args.resume:
        raise ComposeError("--onto TAG is required", hint="e.g. --onto v0.26.0")
    if args.message and not args.resume:
        raise ComposeError("--message goes with --continue")
    options = replay.ComposeOptions(
        offline=args.offline,
        worktree=args.worktree,
        accept_check_failures=args.accept_check_failures,
        allow_dirty=args.allow_dirty,
        force=args.force,
        run_checks=not args.no_checks,
        import_smoke=not args.no_import_smoke,
    )
    with _progress(args.quiet) as progress:
        composer = replay.Composer(args.series, args.repo, _cache(args), options, progress)
        if args.resume:
            result = replay.resume(args.series, args.repo, composer, args.message)
        else:
            result = composer.run(args.onto)
    print(render_compose(result), end="")
    if args.json:
        write_json(args.json, result.to_json())
    return result.exit_code


def _load_patches(args):
    from .patchfile import parse_patch

    patches = []
    for path in args.patch:
        try:
            data = path.read_bytes()
        except OSError as exc:
            raise ComposeError(f"cannot read {path}: {exc.strerror}", file=str(path), hint="check the path") from None
        patches.append(parse_patch(data, name=path.name, strip=args.strip))
    return patches


def _series_patches(args):
    """The patches of a series folder's entries for `--onto` (all entries without it), fetched via the cache."""
    from .patchfile import parse_patch
    from .series import load_series
    from .sources import fetch_entry_patch

    series = load_series(args.series)
    cache = _cache(args)
    entries = series.entries_for(args.onto) if args.onto else series.entries
    patches = []
    for e in entries:
        if e.patch is not None:
            patches.append(e.patch)
            continue
        data = fetch_entry_patch(e, cache, offline=args.offline)
        patches.append(parse_patch(data, name=e.id, strip=e.source.strip if e.source else 1))
    return patches


def _apply(args) -> int:
    from .apply import apply_patches
    from .report import write_json

    patches = _series_patches(args) if args.series else _load_patches(args)
    result = apply_patches(args.to, patches, dry_run=args.dry_run, markers=args.markers)
    for h in result.hunks:
        mark = "" if h.verdict != "conflict" else "   <-- not applied"
        print(f"{h.patch}: {h.file} hunk {h.hunk}: {h.verdict} at {h.landed_at}{mark}")
    print(", ".join(f"{n} {v}" for v, n in result.summary.items()) + (" (dry run)" if args.dry_run else ""))
    if args.json:
        write_json(args.json, result.to_json())
    return result.exit_code


def _tree(spec: str, repo_dir: Path | None):
    from .trees import DirTree, GitTree

    if repo_dir is None:
        return DirTree(spec)
    from . import gitstore

    repo = gitstore.open_or_init_repo(repo_dir)
    return GitTree.from_revision(repo, spec)


def _check_fuzz(args) -> int:
    from .audit import audit, render_text
    from .report import write_json

    patches = _load_patches(argparse.Namespace(patch=args.patches, strip=args.strip))
    report = audit(_tree(args.stock, args.repo), _tree(args.patched, args.repo), patches)
    print(render_text(report), end="" if render_text(report).endswith("\n") else "\n")
    if args.json:
        write_json(args.json, report.to_json())
    return ExitCode.OK if report.ok else ExitCode.CONFLICT


def _validate(args) -> int:
    from .series import load_series

    series = load_series(args.series)
    print(f"{series.file}: {len(series.entries)} entries OK")
    return ExitCode.OK


class _progress:
    """A rich progress display for downloads and imports, or a silent callback."""

    def __init__(self, quiet: bool) -> None:
        self.quiet = quiet or not sys.stderr.isatty()
        self._bar = None
        self._tasks: dict[str, int] = {}

    def __enter__(self):
        if self.quiet:
            return None
        from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeRemainingColumn

        self._bar = Progress(TextColumn("{task.description}"), BarColumn(), DownloadColumn(), TimeRemainingColumn(),
                             transient=True)
        self._bar.start()
        return self._update

    def _update(self, event: str, done: int, total: int | None) -> None:
        if event not in self._tasks:
            self._tasks[event] = self._bar.add_task(event, total=total)
        self._bar.update(self._tasks[event], completed=done, total=total)

    def __exit__(self, *exc) -> None:
        if self._bar is not None:
            self._bar.stop()


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
