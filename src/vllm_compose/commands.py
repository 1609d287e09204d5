"""One function per command: the parsed options in, the library called, its report printed, the exit code out.

`cli.main` parses the command line and dispatches here; the work itself is in the modules of its nouns (compose,
review, status, artifacts, ampere, proof, pp, ...), which return values and raise `ComposeError`s. Only this layer and
`cli` print.
"""

from __future__ import annotations

import contextlib
import json
import sys
from pathlib import Path

from .errors import CommandLineError, ComposeError, ExitCode


def _cache(args):
    from .cache import Cache, seed_cache

    cache = Cache(args.cache) if getattr(args, "cache", None) else Cache()
    if getattr(args, "sources", None):
        if not args.sources.is_dir():
            raise ComposeError(f"--sources {args.sources} is not a directory", hint="pass a folder of files")
        seed_cache(args.sources, cache)
    return cache


def rebase(args) -> int:
    from . import checkout, compose
    from .report import render_compose, write_json
    from .results import ComposeStatus

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
    with _progress(args.quiet) as progress, checkout.released(args.repo, branch) if branch else _nothing() as before:
        composer = compose.Composer(args.series, args.repo, _cache(args), options, progress)
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
    from .series import load_series

    if args.no_checkout or args.resume or not args.repo.is_dir():
        return None
    return load_series(args.series).branch_name(args.onto)


@contextlib.contextmanager
def _nothing():
    yield None


def apply(args) -> int:
    from .apply import apply_patches
    from .patchfile import read_patch_files
    from .report import render_apply, write_json
    from .series import load_series
    from .sources import series_patches

    if args.series:
        patches = series_patches(load_series(args.series), args.onto, _cache(args), offline=args.offline)
    else:
        patches = read_patch_files(args.patch, args.strip)
    result = apply_patches(args.to, patches, dry_run=args.dry_run, markers=args.markers)
    print(render_apply(result, dry_run=args.dry_run), end="")
    if args.json:
        write_json(args.json, result.to_json())
    return result.exit_code


def _tree(spec: str, repo_dir: Path | None):
    from .trees import DirTree, GitTree

    if repo_dir is None:
        return DirTree(spec)
    from . import gitstore

    repo = gitstore.open_or_init_repo(repo_dir, create=False)
    return GitTree.from_revision(repo, spec)


def check_fuzz(args) -> int:
    from .audit import audit
    from .patchfile import read_patch_files
    from .report import render_audit, write_json

    patches = read_patch_files(args.patches, args.strip)
    report = audit(_tree(args.stock, args.repo), _tree(args.patched, args.repo), patches)
    print(render_audit(report), end="" if render_audit(report).endswith("\n") else "\n")
    if args.json:
        write_json(args.json, report.to_json())
    return ExitCode.OK if report.ok else ExitCode.CONFLICT


def validate(args) -> int:
    from .report import render_validate
    from .validate import validate_series

    checked = validate_series(args.series, _cache(args))
    print(render_validate(checked), end="")
    return ExitCode.OK


def _stock_wheel(args, version: str, progress=None) -> Path:
    """`--stock-wheel`, or the release's stock wheel from the wheel cache (downloaded, sha256-checked, when absent)."""
    from .artifacts.wheel import fetch_stock_wheel
    from .cache import Cache

    if args.stock_wheel:
        return args.stock_wheel
    cache = Cache(args.wheel_cache) if args.wheel_cache else Cache()
    return fetch_stock_wheel(version, cache, index_url=args.index_url, progress=progress, offline=args.offline)


def _clearance(args, action: str):
    """The artifact clearance the command line asks for (`artifacts.clearance`)."""
    from .artifacts.clearance import Clearance

    return Clearance(
        action,
        allow_unreviewed=args.allow_unreviewed,
        import_smoke=not args.no_import_smoke,
        run_ampere_gate=not args.no_ampere_gate,
    )


def wheel(args) -> int:
    from .artifacts.wheel import build_overlay_wheel, verify_wheel
    from .composed_branch import open_branch
    from .report import render_wheel, write_json

    branch = open_branch(args.repo, args.series, args.onto, args.branch)
    cleared = _clearance(args, "wheel").clear(branch, args.series)
    with _progress(False) as progress:
        stock = _stock_wheel(args, branch.version, progress)
    out = build_overlay_wheel(stock, branch.composed_tree(), branch.changed, args.label or branch.label, args.out)
    checked = verify_wheel(out) if args.verify else None
    print(render_wheel(branch, stock, cleared.checks, cleared.ampere_gate, cleared.review, checked, out), end="")
    if args.json:
        data = {
            "wheel": str(out),
            "stock_wheel": str(stock),
            "branch": branch.to_json(),
            "checks": cleared.checks.to_json(),
            "ampere_gate": cleared.ampere_gate_json(),
            "review": cleared.review.to_json(),
        }
        write_json(args.json, data)
    return ExitCode.OK


def review(args) -> int:
    from . import compose
    from .report import render_review, write_json
    from .review import approve

    if (args.approve or args.approve_all) and not (args.by and args.why):
        raise CommandLineError(
            "--approve and --approve-all need --by NAME and --why TEXT", hint="say who read it and why"
        )
    if (args.by or args.why) and not (args.approve or args.approve_all):
        raise CommandLineError("--by and --why go with --approve ID or --approve-all")
    options = compose.ComposeOptions(
        offline=args.offline, keep_state=False, run_checks=False, publish=False, allow_unreviewed=True
    )
    with _progress(args.quiet) as progress:
        review = compose.review(args.series, args.repo, args.onto, _cache(args), options, progress)
    if args.approve or args.approve_all:
        written = approve(review, args.series, args.approve, args.by, args.why)
        print(f"recorded {len(written)} approvals in {args.series / 'reviews.toml'}")
    print(render_review(review), end="")
    if args.json:
        write_json(args.json, review.to_json())
    return ExitCode.CONFLICT if review.stopped else ExitCode.OK


def editable(args) -> int:
    from .artifacts.editable import editable_install, require_checked_out, run_install
    from .composed_branch import open_branch
    from .report import ampere_summary, checks_line, render_review_line

    branch = open_branch(args.repo, args.series, args.onto, args.branch)
    clearance = _clearance(args, "editable")
    for step in clearance.steps(branch, args.series):  # the checks show before the slower gate runs
        if step == "checks":
            print(checks_line(clearance.checks))
        elif step == "ampere gate":
            print(f"ampere gate: {ampere_summary(clearance.ampere_gate)}")
            print(render_review_line(clearance.review))
    require_checked_out(branch, args.repo)
    with _progress(False) as progress:
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
    from .artifacts.image import overlay_site_packages
    from .report import render_image_overlay, write_json

    result = overlay_site_packages(
        args.site_packages,
        args.series,
        _cache(args),
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


def status(args) -> int:
    from . import compose
    from .report import render_status, smoke_skipped, write_json
    from .results import ComposeStatus
    from .status import release_statuses, write_marked_section

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
        _cache(args),
        options,
        args.gpu_results,
        run_ampere_gate=not args.no_ampere_gate,
        say=_say,
        composed=composed,
    )
    table = render_status(rows)
    print(table, end="")
    if args.write:
        write_marked_section(args.write, table)
    return ExitCode.OK if all(r.compose.status == ComposeStatus.COMPOSED for r in rows) else ExitCode.CONFLICT


def ampere_path(args) -> int:
    from .ampere import dsa_path
    from .composed_branch import open_branch
    from .pp.topk_relay import topk_crossing
    from .report import write_json
    from .status import write_marked_section

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


def _say(line: str) -> None:
    """A progress line of a long step (the gate's environment being built), on stderr."""
    print(line, file=sys.stderr, flush=True)


def ampere_gate(args) -> int:
    from .ampere.gate import gate_release, render, write_report
    from .pp.topk_relay import topk_crossing

    report = gate_release(
        args.repo,
        args.series,
        args.onto,
        stock=args.stock,
        tree=args.tree,
        record=args.record_coverage,
        progress=_say,
        relay=topk_crossing,
    )
    print(render(report), end="")
    if args.json:
        write_report(args.json, report)
    return ExitCode.OK if report.ok else ExitCode.CONFLICT


def kernel_gate(args) -> int:
    from .ampere.kernel_gate import load_records, render_results, run_gate
    from .report import write_json

    results = run_gate(load_records(args.records), args.tree)
    print(render_results(results), end="")
    if args.json:
        write_json(args.json, [r.to_dict() for r in results])
    return ExitCode.OK if all(r.ok for r in results) else ExitCode.CONFLICT


def semantic_check(args) -> int:
    from .report import write_json
    from .semantic import check_branch

    reports = []
    for tag in args.onto:  # each release's findings as soon as it is checked (1-2 min each)
        reports.append(check_branch(args.repo, args.series, tag, args.python))
        print("\n".join(reports[-1].lines()), flush=True)
    if args.json:
        write_json(args.json, {r.label: r.to_json() for r in reports})
    return ExitCode.OK if all(r.ok for r in reports) else ExitCode.REFUSED


def series_diff(args) -> int:
    from . import gitstore
    from .report import render_series_diff, write_json
    from .series import load_series
    from .series_diff import series_diff

    series = load_series(args.series)
    repo = gitstore.open_or_init_repo(args.repo, create=False)
    d = series_diff(repo, (series.branch_name(args.old), args.old), (series.branch_name(args.new), args.new))
    print(render_series_diff(d, show_interdiff=not args.no_interdiff), end="")
    if args.json:
        write_json(args.json, d.to_json())
    return ExitCode.OK


def audit_series(args) -> int:
    import tempfile

    from . import compose
    from .report import render_compose

    if not args.onto:
        raise CommandLineError("--onto TAG is required", hint="e.g. args: [--onto, v0.26.0] in .pre-commit-config.yaml")
    worst = ExitCode.OK
    for tag in args.onto:
        with tempfile.TemporaryDirectory(prefix="vllm-compose-audit-") as tmp:
            options = compose.ComposeOptions(
                offline=args.offline, import_smoke=False, worktree=Path(tmp) / "conflict", init=True
            )
            result = compose.Composer(args.series, Path(tmp) / "repo", _cache(args), options).run(tag)
        print(render_compose(result), end="")
        worst = max(worst, result.exit_code)
    return worst


def pp_plan(args) -> int:
    import json

    from .pp import plan as pp_plan
    from .pp.report import render_plan
    from .report import write_json

    settings = pp_plan.Settings(
        pp=args.pp,
        gpu_memory_gib=args.gpu_memory,
        mtp=args.mtp,
        bits=args.bits,
        mtp_bits=args.mtp_bits,
        group_size=args.group_size,
        gpu_memory_utilization=args.gpu_memory_utilization,
        max_num_batched_tokens=args.max_num_batched_tokens,
        max_num_seqs=args.max_num_seqs,
        max_model_len=args.max_model_len,
        block_size=args.block_size,
        kv_cache_dtype=args.kv_cache_dtype,
        tolerance=args.tolerance / 100,
    )
    result = pp_plan.plan(pp_plan.read_config(args.config), settings)
    if args.json is not None and str(args.json) == "-":
        print(json.dumps(result.to_json(), indent=2))
        return ExitCode.OK
    print(render_plan(result), end="")
    if args.json:
        write_json(args.json, result.to_json())
    return ExitCode.OK


def pr_bump(args) -> int:
    from .pr_bump import BumpRequest, bump, write_bump
    from .report import render_pr_bump, write_json

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
    report = bump(request, _cache(args))
    if args.json:
        write_json(args.json, report.to_json())
    print(render_pr_bump(report, write=args.write), end="")
    if args.write:  # refuses a report that is not clean: nothing is written then
        for path in write_bump(report):
            print(f"wrote {path}" if path.exists() else f"removed {path}")
    return ExitCode.OK if report.clean else ExitCode.CONFLICT


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

        self._bar = Progress(
            TextColumn("{task.description}"), BarColumn(), DownloadColumn(), TimeRemainingColumn(), transient=True
        )
        self._bar.start()
        return self._update

    def _update(self, event: str, done: int, total: int | None) -> None:
        if event not in self._tasks:
            self._tasks[event] = self._bar.add_task(event, total=total)
        self._bar.update(self._tasks[event], completed=done, total=total)

    def __exit__(self, *exc) -> None:
        if self._bar is not None:
            self._bar.stop()


def prove(args) -> int:
    from .proof import suites as proof

    if args.list:
        for name, fields in proof.SUITES.items():
            print(f"{name:14} {json.dumps(fields)}")
        return ExitCode.OK
    if args.model_dir is None:
        raise CommandLineError("--model-dir DIR is required to run suites", hint="e.g. --model-dir /data/recall-glm5")
    names = args.suite or list(proof.DEFAULT_SUITES)
    for name in names:
        proof.suite(name, args.model_dir)  # an unknown name stops before the model is written
    quant = "" if args.moe_quant == "none" else args.moe_quant
    if proof.ensure_model(args.model_dir, args.shape, quant):
        print(f"wrote the {args.shape} recall model{f' ({quant} experts)' if quant else ''} to {args.model_dir}")

    def done(result: dict) -> None:
        label = result["suite"]["label"]
        verdict = "passed" if result["passed"] else "FAILED"
        print(f"{label}: {verdict} ({result.get('vllm_version', '?')})")
        for check, ok in result.get("checks", []):
            print(f"  {'ok ' if ok else 'NO '} {check}")
        if result.get("error"):
            print(f"  error: {result['error'][:500]}")

    results = proof.run(args.model_dir, names, args.out, on_done=done, timeout_s=args.timeout)
    passed = sum(r["passed"] for r in results)
    print(f"{passed} of {len(results)} suites passed; results in {args.out}/")
    return ExitCode.OK if passed == len(results) else ExitCode.REFUSED
