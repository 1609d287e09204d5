"""Semantic findings of a compose: what a type checker reports on the composed tree that it does not report on the
release, each finding named after the series entry that introduced it.

The compose's own checks (checks.py) find syntax errors and undefined names. They cannot see a keyword argument the
callee does not take, an attribute the release's class lacks, or an override that no longer matches its base:
those are TypeError / AttributeError at run time, on the GPU. A compose onto v0.30.0 with a fix written for
v0.28.0/v0.29.0 exits 0, and the fix passes `propose()` a keyword argument it no longer accepts
(tests/tool/test_semantic.py).

The engine is ty (Astral's checker, Rust; ~10 s for the whole `vllm/` package on 2 cores, with a CPU torch in the
environment so tensor types resolve). A finding is (file, rule, message) without its line, compared as a multiset:
the composed tree's surplus over the release's is new, so a line that merely moved is not. Each new finding is
attributed by bisection over the compose branch's entry commits (the first commit whose tree has the surplus),
ty running once per commit it needs (cached by tree id, in memory and under the cache folder: `_FindingsStore`).

Accepted findings live in `series/semantic-baseline.toml`, each with the releases it holds for and a reason; a
finding that matches is "accepted", never silently dropped.
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import subprocess
import sys
import tempfile
import time
import tomllib
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path

from packaging.specifiers import InvalidSpecifier, SpecifierSet

from .errors import ComposeError, SeriesError
from .trailers import BUILD_SETUP, ENTRY

#: `path:line:col: severity[rule] message`, ty's `--output-format concise`
_CONCISE = re.compile(
    r"^(?P<file>[^:\s][^:]*):(?P<line>\d+):(?P<col>\d+): (?P<sev>\w+)\[(?P<rule>[\w-]+)\] (?P<msg>.*)$"
)
#: seconds one ty run may take (the whole tree takes ~10 s on 2 cores)
TY_TIMEOUT = 600
BASELINE_FILE = "semantic-baseline.toml"


class SemanticUnavailable(ComposeError):
    """ty cannot run here (not installed): the check cannot say anything, so the command fails (exit 3)."""


@dataclass(frozen=True)
class Diagnostic:
    file: str
    line: int
    severity: str
    rule: str
    message: str

    @property
    def key(self) -> tuple[str, str, str]:
        """What identifies a finding across trees: not its line, which moves when a hunk above it lands."""
        return (self.file, self.rule, self.message)

    def __str__(self) -> str:
        return f"{self.file}:{self.line}: {self.severity}[{self.rule}] {self.message}"


@dataclass
class Finding:
    """A diagnostic of the composed tree the release does not have, the entry that introduced it, and the baseline
    entry that accepts it (None: not accepted)."""

    diagnostic: Diagnostic
    entry: str | None = None
    accepted: str | None = None

    def to_json(self) -> dict:
        d = self.diagnostic
        return {
            "file": d.file,
            "line": d.line,
            "severity": d.severity,
            "rule": d.rule,
            "message": d.message,
            "entry": self.entry,
            "accepted": self.accepted,
        }


@dataclass
class SemanticReport:
    label: str
    findings: list[Finding] = field(default_factory=list)
    #: ty runs made, and their seconds in all; trees whose diagnostics came from the cache folder instead
    runs: int = 0
    seconds: float = 0.0
    cached: int = 0
    stock_diagnostics: int = 0
    composed_diagnostics: int = 0

    @property
    def new(self) -> list[Finding]:
        return [f for f in self.findings if f.accepted is None]

    @property
    def ok(self) -> bool:
        return not self.new

    def lines(self) -> list[str]:
        out = [
            f"semantic check of {self.label} (ty): {self.composed_diagnostics} diagnostics vs the release's "
            f"{self.stock_diagnostics}; {len(self.findings)} new, {len(self.findings) - len(self.new)} accepted by "
            f"the baseline; {self.runs} ty runs, {self.seconds:.1f} s, {self.cached} trees from the cache"
        ]
        for f in self.findings:
            state = f"accepted ({f.accepted})" if f.accepted else "NEW"
            out.append(f"  {state}: {f.diagnostic} (entry {f.entry or 'not found'})")
        return out

    def to_json(self) -> dict:
        return {
            "label": self.label,
            "ok": self.ok,
            "stock_diagnostics": self.stock_diagnostics,
            "composed_diagnostics": self.composed_diagnostics,
            "ty_runs": self.runs,
            "ty_cached": self.cached,
            "seconds": round(self.seconds, 1),
            "findings": [f.to_json() for f in self.findings],
        }


def ty_command() -> list[str]:
    """ty beside this interpreter (a venv's bin/), else on PATH."""
    beside = Path(sys.executable).with_name("ty")
    if beside.is_file():
        return [str(beside)]
    found = shutil.which("ty")
    if found:
        return [found]
    raise SemanticUnavailable("semantic check unavailable: ty is not installed", hint="pip install -e '.[semantic]'")


def ty_version() -> str:
    """ty's `--version` line: part of the key its cached diagnostics are kept under."""
    proc = subprocess.run([*ty_command(), "--version"], capture_output=True, text=True, timeout=60)
    return proc.stdout.strip() or f"unknown (exit {proc.returncode})"


def _env_dir(python_env: Path | None) -> Path:
    """The environment ty resolves imports in: `python_env` (a venv or prefix), else this interpreter's."""
    return Path(python_env).absolute() if python_env else Path(sys.prefix)


class _FindingsStore:
    """ty's diagnostics per tree id under `<root>/ty/<key>/<tree id>.json`, where the key hashes ty's version and
    the environment imports resolve in (a new ty or another environment checks again). A tree's content is its id,
    so its diagnostics under one key never change. Written to a temporary file in the folder and renamed, so a
    reader never sees half a file; a file that does not parse is treated as missing and written again. A cache
    folder that cannot be written only costs the next run its ty time: the check itself does not depend on it."""

    def __init__(self, root: Path, ty: str, env: Path) -> None:
        self.dir = Path(root) / "ty" / hashlib.sha256(f"{ty}\0{env}".encode()).hexdigest()[:16]

    def get(self, tree_id: str) -> list[Diagnostic] | None:
        try:
            data = json.loads((self.dir / f"{tree_id}.json").read_text())
            return [Diagnostic(**d) for d in data["diagnostics"]]
        except (OSError, ValueError, TypeError, KeyError):
            return None

    def put(self, tree_id: str, diagnostics: list[Diagnostic]) -> None:
        from .atomicfile import write_atomically

        try:
            write_atomically(
                self.dir / f"{tree_id}.json", json.dumps({"diagnostics": [asdict(d) for d in diagnostics]})
            )
        except OSError:
            pass  # the next check runs ty again; this one's result does not depend on the cache


def parse_concise(text: str) -> list[Diagnostic]:
    """The diagnostics of ty's concise output (other lines, e.g. the summary, are ignored)."""
    out = []
    for line in text.splitlines():
        m = _CONCISE.match(line.rstrip())
        if m:
            out.append(Diagnostic(m["file"], int(m["line"]), m["sev"], m["rule"], m["msg"]))
    return out


def run_ty(tree: Path, python_env: Path | None = None) -> list[Diagnostic]:
    """ty on the `vllm/` package of `tree`, resolving imports in `python_env` (a venv or prefix; default: this
    interpreter's). Raises ComposeError when ty itself fails (exit status 2 or more)."""
    env_dir = _env_dir(python_env)
    cmd = [*ty_command(), "check", "--output-format", "concise", "--python", str(env_dir), "vllm"]
    proc = subprocess.run(cmd, cwd=tree, capture_output=True, text=True, timeout=TY_TIMEOUT)
    if proc.returncode not in (0, 1):
        raise ComposeError(
            f"ty failed on {tree} (exit {proc.returncode}): {(proc.stderr or proc.stdout).strip()[-400:]}",
            hint="run the command by hand: " + " ".join(cmd),
        )
    return parse_concise(proc.stdout)


def surplus(stock: list[Diagnostic], composed: list[Diagnostic]) -> list[Diagnostic]:
    """The composed diagnostics beyond the stock ones, by key (for a key seen k more times, its last k)."""
    extra = Counter(d.key for d in composed) - Counter(d.key for d in stock)
    out = []
    for d in reversed(composed):
        if extra[d.key] > 0:
            extra[d.key] -= 1
            out.append(d)
    return sorted(out, key=lambda d: (d.file, d.line, d.rule, d.message))


# ---- the baseline -------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Accepted:
    """One `[[accept]]` of the baseline: findings of `file` (a `*` pattern) with `rule`, whose message matches `message`
    (a `*` pattern), on the releases of `tags`, accepted for `reason`."""

    file: str
    rule: str
    message: str
    tags: str
    reason: str

    def matches(self, version: str, d: Diagnostic) -> bool:
        return (
            version in SpecifierSet(self.tags)
            and d.rule == self.rule
            and _glob_match(self.file, d.file)
            and _glob_match(self.message, d.message)
        )


def _glob_match(pattern: str, text: str) -> bool:
    """`*` matches any run of characters (`/` included); everything else is literal. Not fnmatch: ty's messages
    hold `[`...`]` (`dict[str, Tensor]`), which fnmatch would read as character sets."""
    regex = ".*".join(re.escape(part) for part in pattern.split("*"))
    return re.fullmatch(regex, text, re.S) is not None


def load_baseline(series_dir: Path) -> list[Accepted]:
    """The series' accepted findings; none when the file is absent. SeriesError names a malformed entry."""
    path = Path(series_dir) / BASELINE_FILE
    if not path.is_file():
        return []
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise SeriesError(f"cannot read {path}: {exc}", file=str(path), hint="fix the TOML") from None
    out = []
    for i, raw in enumerate(data.get("accept", []), 1):
        missing = [k for k in ("file", "rule", "message", "tags", "reason") if not str(raw.get(k, "")).strip()]
        if missing:
            raise SeriesError(
                f"[[accept]] #{i} lacks {', '.join(missing)}",
                file=str(path),
                hint="every accepted finding names file, rule, message, tags and a reason",
            )
        try:
            SpecifierSet(raw["tags"])
        except InvalidSpecifier:
            raise SeriesError(
                f"[[accept]] #{i}: tags {raw['tags']!r} is not a version range", file=str(path), hint="e.g. '>=0.30.0'"
            ) from None
        out.append(Accepted(raw["file"], raw["rule"], raw["message"], raw["tags"], raw["reason"].strip()))
    return out


# ---- a compose branch ---------------------------------------------------------------------------------------


class _TreeRunner:
    """ty on commits of one repository, each tree exported once and checked once (cached by tree id)."""

    def __init__(self, repo, python_env: Path | None, store: _FindingsStore | None = None) -> None:
        self.repo = repo
        self.python_env = python_env
        self.store = store
        self.cache: dict[str, list[Diagnostic]] = {}
        self.counts: dict[str, Counter] = {}
        self.runs = 0
        self.cached = 0
        self.seconds = 0.0

    def diagnostics(self, commit) -> list[Diagnostic]:
        from .trees import GitTree, export_tree

        key = str(commit.tree_id)
        if key not in self.cache and self.store is not None:
            found = self.store.get(key)
            if found is not None:
                self.cache[key] = found
                self.cached += 1
        if key not in self.cache:
            start = time.monotonic()
            with tempfile.TemporaryDirectory(prefix="vllm-compose-semantic-") as tmp:
                export_tree(GitTree(self.repo, commit.tree), Path(tmp))
                self.cache[key] = run_ty(Path(tmp), self.python_env)
            if self.store is not None:
                self.store.put(key, self.cache[key])
            self.runs += 1
            self.seconds += time.monotonic() - start
        return self.cache[key]

    def count(self, commit) -> Counter:
        """The diagnostics of `commit` by key."""
        key = str(commit.tree_id)
        if key not in self.counts:
            self.counts[key] = Counter(d.key for d in self.diagnostics(commit))
        return self.counts[key]


def _entry_name(commit) -> str:
    m = ENTRY.search(commit.message)
    if m:
        return m.group(1)
    if BUILD_SETUP in commit.message:
        return "build-setup"
    return f"commit {str(commit.id)[:12]}"


def _attribute(runner: _TreeRunner, release, commits: list, wanted: list[Diagnostic]) -> dict:
    """key -> the first commit index whose tree has more of that key than stock (bisection; the count need not
    grow monotonically, so it finds *a* commit where the surplus appears, the first one when it does)."""
    base = runner.count(release)
    need = Counter(d.key for d in wanted)
    found: dict = {}
    for key, n in need.items():
        lo, hi = 0, len(commits) - 1  # the last commit has the surplus (it is the composed tree)
        while lo < hi:
            mid = (lo + hi) // 2
            have = runner.count(commits[mid])[key] - base[key]
            if have >= n:
                hi = mid
            else:
                lo = mid + 1
        found[key] = lo
    return found


def check_branch(repo_dir: Path, series_dir: Path, tag: str, python_env: Path | None = None) -> SemanticReport:
    """The semantic findings of `tag`'s compose branch against the tag, each attributed and matched against the
    baseline. Raises SemanticUnavailable without ty, ComposeError for a missing branch or tag."""
    from .composed_branch import open_branch
    from .series import version_of_tag

    ty_command()
    version = str(version_of_tag(tag))
    branch = open_branch(repo_dir, series_dir, tag)  # refuses a branch with commits the compose did not write
    base, tip = branch.base, branch.tip
    commits = branch.commits + ([tip] if tip.id != branch.head.id else [])  # the build-setup commit last
    baseline = load_baseline(series_dir)
    from .cache import default_cache_root

    store = _FindingsStore(default_cache_root(), ty_version(), _env_dir(python_env))
    runner = _TreeRunner(branch.repo, python_env, store)
    stock = runner.diagnostics(base)
    composed = runner.diagnostics(tip) if commits else stock
    new = surplus(stock, composed)
    where = _attribute(runner, base, commits, new) if new else {}
    report = SemanticReport(branch.branch, stock_diagnostics=len(stock), composed_diagnostics=len(composed))
    for d in new:
        accepted = next((a.reason for a in baseline if a.matches(version, d)), None)
        report.findings.append(Finding(d, _entry_name(commits[where[d.key]]), accepted))
    report.runs, report.seconds, report.cached = runner.runs, runner.seconds, runner.cached
    return report
