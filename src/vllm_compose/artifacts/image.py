"""The container image: compose the series onto the vLLM installed in an image's site-packages, in place.

The Dockerfile (`FROM docker.io/vllm/vllm-openai:<tag>`) runs `vllm-compose image-overlay --site-packages DIR`,
which calls `overlay_site_packages`. The steps, in order:

1. release   — read the installed version (`vllm-*.dist-info/METADATA`) and record the installed `vllm/` package
               (everything but compiled objects) as release commit `v<version>` in a scratch git repository. The
               installed files *are* the release here: composing onto them proves placement on exactly the files
               that will run, even where an image's build differs from the PyPI sdist. No sdist download is needed;
               only the entries' content (`--sources DIR` from a build context, or the network).
2. compose   — the ordinary compose (`compose.Composer`: placement, per-entry checks, audit) onto that commit. A
               conflict or refusal stops here and nothing in site-packages is touched.
3. install   — write the composed files into site-packages (each by temporary file + rename).
4. verify    — the audit of site-packages before/after against the composed diff (`check-fuzz`: every hunk where it
               belongs) and the checks of the installed tree against the release (compile, new undefined names,
               import smoke with the image's own torch). A failure restores the stock files and refuses (exit 2).
5. relabel   — the installed distribution says what it is: `vllm/_version.py`, `METADATA`, the `.dist-info` folder
               name and `RECORD` (new hashes for the changed files) carry `X.Y.Z+compose.<PRs>.g<digest>`, the same
               label the overlay wheel of the same compose gets (`composed_branch.overlay_digest`).
"""

from __future__ import annotations

import contextlib
import csv
import io
import os
import re
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import pygit2

from .. import gitstore
from ..atomicfile import write_atomically
from ..audit import AuditReport, audit
from ..cache import Cache
from ..checks import NO_IMPORT_SMOKE, CheckReport, failure_hint
from ..compose import ComposeOptions, Composer
from ..composed_branch import PACKAGE_DIR, open_branch
from ..errors import ComposeError, ExitCode, RefusedError
from ..patchfile import parse_patch
from ..report import render_audit
from ..results import ComposeResult, ComposeStatus, OverlayStatus, Severity
from ..series import version_of_tag
from ..trees import DirTree, GitTree
from .clearance import Clearance
from .wheel import overlay_version, record_hash, rewrite_metadata, rewrite_version_file

#: installed files left out of the release commit: compiled objects are never composed, and they are big
SKIP_SUFFIXES = (".so", ".pyc", ".cubin", ".fatbin", ".a", ".o")
#: files above this size are data (model configs are small; kernels are not): left out like compiled objects
MAX_FILE_BYTES = 8 << 20
#: where `overlay_site_packages` writes its report inside the image (the Dockerfile keeps it)
REPORT_NAME = "vllm-compose-overlay.json"


@dataclass
class ImageOverlayResult:
    """The outcome of composing onto site-packages; `exit_code` follows the README's contract."""

    site_packages: str
    tag: str
    status: OverlayStatus
    version: str | None = None
    compose: ComposeResult | None = None
    changed: list[str] = field(default_factory=list)
    audit: AuditReport | None = None
    #: the review, the checks of the installed files and the Ampere gate of the composed ones, as far as they ran
    clearance: Clearance = field(default_factory=lambda: Clearance("image-overlay"))
    message: str = ""

    @property
    def exit_code(self) -> ExitCode:
        if self.status in (OverlayStatus.INSTALLED, OverlayStatus.DRY_RUN):
            return ExitCode.OK
        return ExitCode.CONFLICT if self.status is OverlayStatus.CONFLICT else ExitCode.REFUSED

    def to_json(self) -> dict:
        return {
            "site_packages": self.site_packages,
            "tag": self.tag,
            "status": str(self.status),
            "version": self.version,
            "message": self.message,
            "changed": self.changed,
            "audit": self.audit.to_json() if self.audit is not None else None,
            "checks": self.checks.to_json() if self.checks is not None else None,
            "ampere_gate": self.clearance.ampere_gate_json(),
            "compose": self.compose.to_json() if self.compose else None,
        }

    @property
    def checks(self) -> CheckReport | None:
        """The checks of the installed files against the release (None until they ran)."""
        return self.clearance.checks

    @property
    def gate_state(self) -> str | None:
        """`pass`, `FAIL`, `skipped (why)`, or None when the compose stopped before the gate."""
        return self.clearance.gate_state


def installed_dist_info(site_packages: Path) -> Path:
    """The one `vllm-<version>.dist-info` folder in `site_packages` (a `ComposeError` when none or several)."""
    found = sorted(p for p in Path(site_packages).glob("vllm-*.dist-info") if p.is_dir())
    if len(found) != 1:
        raise ComposeError(
            f"{site_packages} has {len(found)} vllm-*.dist-info folders, expected one",
            file=str(site_packages),
            hint="point --site-packages at the folder where vLLM is installed "
            "(python -c 'import vllm, pathlib; print(pathlib.Path(vllm.__file__).parents[1])')",
        )
    return found[0]


def installed_version(site_packages: Path) -> str:
    """The installed vLLM version from its `METADATA` (`0.26.0`, or `0.26.0+cu129` for a local build)."""
    metadata = installed_dist_info(site_packages) / "METADATA"
    m = re.search(r"^Version:[ \t]*(\S+)", metadata.read_text(encoding="utf-8", errors="replace"), flags=re.M)
    if not m:
        raise ComposeError(
            f"{metadata} has no Version header", file=str(metadata), hint="the installed vLLM is damaged; reinstall it"
        )
    return m.group(1)


def commit_release(repo: pygit2.Repository, site_packages: Path, tag: str) -> pygit2.Commit:
    """Record the installed `vllm/` package (no compiled objects) as the commit of tag `tag`; return it."""
    entries: dict[str, tuple[pygit2.Oid, int]] = {}
    package = Path(site_packages) / PACKAGE_DIR
    if not package.is_dir():
        raise ComposeError(
            f"{package} does not exist",
            file=str(package),
            hint="point --site-packages at the folder holding the installed vllm/ package",
        )
    for path in sorted(package.rglob("*")):
        if not path.is_file() or path.is_symlink() or "__pycache__" in path.parts:
            continue
        if path.suffix in SKIP_SUFFIXES or path.stat().st_size > MAX_FILE_BYTES:
            continue
        rel = path.relative_to(site_packages).as_posix()
        mode = gitstore.EXEC_MODE if os.access(path, os.X_OK) else gitstore.BLOB_MODE
        entries[rel] = (gitstore.write_blob(repo, path.read_bytes()), mode)
    tree = gitstore.tree_from_entries(repo, entries)
    when = int(os.environ.get("SOURCE_DATE_EPOCH", "0"))
    who = gitstore.signature("vllm-compose image", "image@vllm-compose.invalid", when)
    oid = gitstore.commit_tree(repo, tree, [], f"installed vllm package as {tag}\n", who, who)
    gitstore.set_ref(repo, f"refs/tags/{tag}", oid)
    return repo[oid]


def overlay_site_packages(
    site_packages: Path,
    series_dir: Path,
    cache: Cache | None = None,
    *,
    tag: str | None = None,
    offline: bool = False,
    import_smoke: bool = True,
    dry_run: bool = False,
    work_dir: Path | None = None,
    python: str | None = None,
    ampere_gate: bool = True,
    allow_unreviewed: bool = False,
) -> ImageOverlayResult:
    """Compose the series onto the vLLM installed in `site_packages` and install the result there (module docstring).

    Raises `ComposeError` for bad input (no vLLM there, entry content unavailable); returns a result with status
    `conflict` or `refused` (site-packages untouched or restored) when the compose or the verification fails.
    """
    site_packages = Path(site_packages).resolve()
    version = installed_version(site_packages)
    tag = tag or "v" + version.split("+", 1)[0]
    clearance = Clearance(
        "image-overlay", allow_unreviewed=allow_unreviewed, import_smoke=import_smoke, run_ampere_gate=ampere_gate
    )
    result = ImageOverlayResult(str(site_packages), tag, OverlayStatus.INSTALLED, clearance=clearance)
    with _scratch(work_dir) as scratch:
        repo = gitstore.init_bare_repo(scratch / "repo")
        base = commit_release(repo, site_packages, tag)
        options = ComposeOptions(
            offline=offline, import_smoke=False, worktree=scratch / "conflict", allow_unreviewed=allow_unreviewed
        )
        composed = Composer(Path(series_dir), scratch / "repo", cache, options).run(tag)
        result.compose = composed
        if composed.status is not ComposeStatus.COMPOSED:
            result.status = OverlayStatus(composed.status)
            result.message = composed.message + " — site-packages not changed"
            return result
        try:  # an image is built unattended: every relocated or merged landing must be approved for this release
            clearance.require_review(composed.review)
        except RefusedError as exc:
            result.status = OverlayStatus.REFUSED
            result.message = f"{exc.message} — site-packages not changed\n  hint: {exc.hint}"
            return result
        branch = open_branch(scratch / "repo", Path(series_dir), tag)
        new_version = overlay_version(version, branch.label)
        result.changed = [p for p in branch.changed if p.startswith(PACKAGE_DIR)]
        stock = GitTree(repo, base.tree, tag)
        target = branch.composed_tree()
        # the diff as `git diff <tag> <branch>` writes it: what a person would hand to check-fuzz
        diff = gitstore.diff_bytes(repo, base.tree.id, branch.head.tree.id, renames=False)
        patch = parse_patch(diff, name=f"compose-{tag}") if diff else None
        try:  # before anything is written into site-packages: the composed files' DSA kernels for sm_80/86
            clearance.require_ampere_gate(branch)
        except RefusedError as exc:
            result.status = OverlayStatus.REFUSED
            result.message = f"{exc.message} — site-packages not changed\n  hint: {exc.hint}"
            return result
        if dry_run:
            result.status = OverlayStatus.DRY_RUN
            result.version = new_version
            result.message = f"dry run: {len(result.changed)} files would change"
            return result
        _install(site_packages, stock, target, result.changed)
        try:
            report = audit(stock, DirTree(site_packages), [patch]) if patch else None
            result.audit = report
            checks = clearance.run_checks(
                stock, DirTree(site_packages), result.changed, str(version_of_tag(tag)), python or sys.executable
            )
            _refuse_unless_clean(report, checks, tag)
        except RefusedError as exc:
            _install(site_packages, target, stock, result.changed)
            result.status = OverlayStatus.REFUSED
            result.message = f"{exc.message} — the stock files were restored"
            return result
        except BaseException:
            _install(site_packages, target, stock, result.changed)
            raise
        relabel_installed(site_packages, new_version, result.changed)
        result.version = new_version
        result.message = f"installed {len(result.changed)} composed files; vllm is now {new_version}"
    return result


def _refuse_unless_clean(report, checks: CheckReport, tag: str) -> None:
    problems = []
    if report is not None and not report.ok:
        problems.append("the audit of site-packages before/after found misplaced hunks:\n" + render_audit(report))
    if not checks.ok:
        problems += [str(f) for f in checks.findings if f.severity == Severity.ERROR]
    if problems:
        hint = failure_hint(
            checks,
            "fix the series and build again",
            f"{NO_IMPORT_SMOKE} (VLLM_COMPOSE_IMPORT_SMOKE=0 in a docker build)",
        )
        raise RefusedError("; ".join(problems), tag=tag, hint=hint)


def _install(site_packages: Path, before: GitTree, after: GitTree, paths: list[str]) -> None:
    """Make each of `paths` in `site_packages` hold `after`'s content (deleting where `after` has none)."""
    for rel in paths:
        dest = site_packages / rel
        data = after.read(rel)
        if data is None:
            dest.unlink(missing_ok=True)
            continue
        dest.parent.mkdir(parents=True, exist_ok=True)
        write_atomically(dest, data)


def relabel_installed(site_packages: Path, new_version: str, changed: list[str]) -> Path:
    """Make the installed distribution say `new_version`: `vllm/_version.py`, `METADATA`, the `.dist-info` folder
    name, and `RECORD` (hashes and sizes of `changed` files and the rewritten ones). Returns the new dist-info path."""
    site_packages = Path(site_packages)
    old_info = installed_dist_info(site_packages)
    new_info = site_packages / f"vllm-{new_version}.dist-info"
    touched = set(changed)
    version_py = site_packages / "vllm" / "_version.py"
    if version_py.is_file():
        write_atomically(version_py, rewrite_version_file(version_py.read_text("utf-8"), new_version).encode())
        touched.add("vllm/_version.py")
    metadata = old_info / "METADATA"
    write_atomically(metadata, rewrite_metadata(metadata.read_text("utf-8"), new_version).encode())
    old_prefix, new_prefix = old_info.name + "/", new_info.name + "/"
    touched.add(old_prefix + "METADATA")
    rows = []
    record = old_info / "RECORD"
    seen = set()
    for row in csv.reader(io.StringIO(record.read_text("utf-8"))):
        if not row:
            continue
        name = row[0]
        seen.add(name)
        if name in touched:
            file = site_packages / name
            if not file.is_file():
                continue  # deleted by the compose
            data = file.read_bytes()
            row = [name, record_hash(data), str(len(data))]
        if name.startswith(old_prefix):
            row = [new_prefix + name[len(old_prefix) :], *row[1:]]
        rows.append(row)
    for name in sorted(touched - seen):
        file = site_packages / name
        if file.is_file():
            data = file.read_bytes()
            rows.append([name, record_hash(data), str(len(data))])
    buf = io.StringIO()
    csv.writer(buf, lineterminator="\n").writerows(rows)
    write_atomically(record, buf.getvalue().encode())
    os.replace(old_info, new_info)
    return new_info


@contextlib.contextmanager
def _scratch(work_dir: Path | None):
    if work_dir is not None:
        Path(work_dir).mkdir(parents=True, exist_ok=True)
        yield Path(work_dir)
        return
    with tempfile.TemporaryDirectory(prefix="vllm-compose-image-") as tmp:
        yield Path(tmp)
