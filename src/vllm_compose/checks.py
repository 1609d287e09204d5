"""Checks on a composed tree: compile, new undefined names, import smoke.

Each check looks only at the files an entry changed and compares against the tree before it (`stock`), so a finding
is attributed to the entry that introduced it:

1. `compile` — every changed `.py` file compiles (a SyntaxError is reported with file and line).
2. `undefined-names` — pyflakes on the stock and the composed file; names undefined in the composed file that were
   not undefined in stock are errors. Messages are compared as a multiset of (kind, name), so a line that merely
   moved is not new. This is the check that catches a hunk calling a helper no patch defines, which compiling and
   importing both pass. New redefinitions (F811), unused imports and star-import uses are warnings.
3. `import-smoke` — import every changed module in a subprocess with the composed tree first on `sys.path`, the
   compiled members the source tree lacks (`vllm/_C.abi3.so`, ...) taken from the installed vLLM. It runs only where
   its result is about the series (`smoke_unready`, decided up front in a second or two, before the minutes the
   imports take): the installed vLLM is the release being composed (its distribution version) and holds compiled
   kernels, the CUDA driver loads (the kernels link against `libcuda.so.1`), and the vLLM runtime (torch and
   `RUNTIME_PROBE_MODULES`) imports. Elsewhere the check is "skipped" with the reason, never "pass" and never
   "fail": a machine that cannot load the release's kernels says nothing about the series. (A cached environment
   per release with its own wheels would make the smoke independent of what is installed, at 7–9 GB and minutes
   per release, and still could not load the kernels without a CUDA driver: skipping with the reason is the
   honest answer on exactly the machines where that environment would not help.)
"""

from __future__ import annotations

import ast
import difflib
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from packaging.version import InvalidVersion, Version
from pyflakes import checker as pyflakes_checker
from pyflakes import messages as pyflakes_messages

from .atomicfile import write_atomically
from .patchfile import decode_text
from .trees import DirTree, FileTree
from .verdicts import CheckStatus, Severity

#: the check statuses and finding severities by their short names (results.CheckStatus, results.Severity)
PASS, FAIL, WARN, SKIPPED = CheckStatus.PASS, CheckStatus.FAIL, CheckStatus.WARN, CheckStatus.SKIPPED
ERROR, WARNING = Severity.ERROR, Severity.WARNING

#: pyflakes messages that mean "this name does not exist here": a new one is an error
UNDEFINED_KINDS = (
    pyflakes_messages.UndefinedName,
    pyflakes_messages.UndefinedExport,
    pyflakes_messages.UndefinedLocal,
)
#: pyflakes messages worth a warning when an entry introduces them
WARNING_KINDS = (
    pyflakes_messages.RedefinedWhileUnused,
    pyflakes_messages.UnusedImport,
    pyflakes_messages.ImportStarUsage,
)

#: the modules the runtime probe imports: torch and packages that nearly every vLLM module imports through
#: vllm.logger / vllm.envs / vllm.config (torch alone is not enough: the Ampere gate's tests install a CPU torch
#: without the rest, and an import smoke there would fail every module on `No module named 'regex'`)
RUNTIME_PROBE_MODULES = ("torch", "transformers", "pydantic", "regex", "msgspec")
#: the CUDA driver library vLLM's compiled kernels link against: where it does not load, neither do they
CUDA_DRIVER = "libcuda.so.1"
#: seconds allowed for the whole import smoke (vLLM imports are slow: CUDA init, Triton)
DEFAULT_SMOKE_TIMEOUT = 600
#: what the user passes to skip the import smoke, named in every hint that concerns it
NO_IMPORT_SMOKE = "--no-import-smoke"


@dataclass
class Finding:
    """One problem found by a check, tied to a file, a line and the entry that introduced it."""

    check: str
    severity: Severity
    file: str
    line: int | None
    message: str
    name: str | None = None
    entry: str | None = None

    def to_json(self) -> dict:
        return {
            "check": self.check,
            "severity": self.severity,
            "file": self.file,
            "line": self.line,
            "name": self.name,
            "message": self.message,
            "entry": self.entry,
        }

    def __str__(self) -> str:
        where = f"{self.file}:{self.line}" if self.line else self.file
        by = f" (entry {self.entry})" if self.entry else ""
        return f"{where}: {self.severity}: {self.message}{by}"


@dataclass
class CheckResult:
    """The outcome of one check: status in {pass, fail, warn, skipped}, its findings, and why it was skipped."""

    name: str
    status: CheckStatus
    findings: list[Finding] = field(default_factory=list)
    reason: str | None = None
    files: int = 0
    seconds: float = 0.0

    def to_json(self) -> dict:
        return {
            "name": self.name,
            "status": self.status,
            "reason": self.reason,
            "files": self.files,
            "seconds": round(self.seconds, 3),
            "findings": [f.to_json() for f in self.findings],
        }


@dataclass
class CheckReport:
    """All checks run for one entry (or for a whole compose when `entry` is None)."""

    entry: str | None
    results: list[CheckResult] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """No check failed. Warnings and skipped checks do not make a report fail; the report shows them."""
        return all(r.status != FAIL for r in self.results)

    def result(self, name: str) -> CheckResult:
        """The result of the check called `name`."""
        for r in self.results:
            if r.name == name:
                return r
        raise KeyError(name)

    @property
    def findings(self) -> list[Finding]:
        return [f for r in self.results for f in r.findings]

    def to_json(self) -> dict:
        return {"entry": self.entry, "ok": self.ok, "checks": [r.to_json() for r in self.results]}


def run_checks(
    stock: FileTree,
    composed: FileTree,
    changed_paths: Iterable[str],
    entry_id: str | None = None,
    import_smoke: bool = True,
    python: str | None = None,
    smoke_timeout: float = DEFAULT_SMOKE_TIMEOUT,
    release: str | None = None,
) -> CheckReport:
    """Run the checks on the changed files of `composed`, comparing with `stock` (the tree before the entry).

    `python` is the interpreter for the import smoke (default: this one); `release` (e.g. "0.26.0") is the vLLM
    release being composed, required with `import_smoke`: the smoke runs only where `python`'s installed vLLM is
    that release (`smoke_unready`).
    """
    if import_smoke and release is None:
        raise ValueError("run_checks: the import smoke needs the release being composed (release=...)")
    py_paths = sorted({p for p in changed_paths if p.endswith(".py")})
    report = CheckReport(entry=entry_id)
    report.results.append(check_compile(composed, py_paths, entry_id, stock=stock))
    report.results.append(check_undefined_names(stock, composed, py_paths, entry_id))
    if import_smoke:
        report.results.append(check_import_smoke(composed, py_paths, release, entry_id, python, smoke_timeout))
    else:
        report.results.append(CheckResult("import-smoke", SKIPPED, reason=f"{NO_IMPORT_SMOKE} given"))
    return report


def failure_hint(report: CheckReport, fix: str, skip_smoke: str = NO_IMPORT_SMOKE) -> str:
    """How to go on after `report` refused something: `fix` (the series' remedy), and where the import smoke is
    among the failures, that an import failure may be the machine's and `skip_smoke` skips it (recorded)."""
    smoke = [r for r in report.results if r.name == "import-smoke" and r.status is FAIL]
    if not smoke:
        return fix
    return (
        f"an import failure can be this machine's, not the series' (a CUDA driver, torch or a compiled kernel that "
        f"does not load in this environment): read the error; if it is the machine's, run again with {skip_smoke} "
        f"(recorded in the report); otherwise {fix}"
    )


def check_compile(
    composed: FileTree, py_paths: list[str], entry_id: str | None = None, stock: FileTree | None = None
) -> CheckResult:
    """Compile each changed Python file that exists in `composed`.

    A file that did not compile in `stock` either is a warning, not an error: the entry did not break it.
    """
    started = time.perf_counter()
    result = CheckResult("compile", PASS)
    for path in py_paths:
        source = composed.read(path)
        if source is None:
            continue
        result.files += 1
        error = _compile_error(source, path)
        if error is not None:
            line, message = error
            before = stock.read(path) if stock is not None else None
            if before is not None and _compile_error(before, path) is not None:
                result.findings.append(
                    Finding(
                        "compile",
                        WARNING,
                        path,
                        line,
                        message + " (the release's file does not compile either)",
                        entry=entry_id,
                    )
                )
            else:
                result.findings.append(Finding("compile", ERROR, path, line, message, entry=entry_id))
    if any(f.severity == ERROR for f in result.findings):
        result.status = FAIL
    else:
        result.status = WARN if result.findings else PASS
    result.seconds = time.perf_counter() - started
    return result


def _compile_error(source: bytes, path: str) -> tuple[int | None, str] | None:
    try:
        compile(source, path, "exec", dont_inherit=True)
    except SyntaxError as exc:
        return exc.lineno, f"{type(exc).__name__}: {exc.msg}"
    except ValueError as exc:  # e.g. a null byte in the source
        return None, f"cannot compile: {exc}"
    return None


def check_undefined_names(
    stock: FileTree, composed: FileTree, py_paths: list[str], entry_id: str | None = None
) -> CheckResult:
    """Report names pyflakes finds undefined in the composed file but not in the stock file, and new warnings."""
    started = time.perf_counter()
    result = CheckResult("undefined-names", PASS)
    for path in py_paths:
        new_source = composed.read(path)
        if new_source is None:
            continue
        new_messages = pyflakes_messages_for(new_source, path)
        if new_messages is None:
            continue  # the compile check reports the syntax error
        result.files += 1
        old_source = stock.read(path)
        old_messages = pyflakes_messages_for(old_source, path) if old_source is not None else []
        for message, severity in _new_messages(old_messages or [], new_messages, old_source, new_source):
            name = message.message_args[0] if message.message_args else None
            result.findings.append(
                Finding(
                    "undefined-names",
                    severity,
                    path,
                    message.lineno,
                    f"{type(message).__name__}: {message.message % message.message_args}",
                    name=str(name) if name is not None else None,
                    entry=entry_id,
                )
            )
    if any(f.severity == ERROR for f in result.findings):
        result.status = FAIL
    elif result.findings:
        result.status = WARN
    result.seconds = time.perf_counter() - started
    return result


#: pyflakes results by content: the same blob is checked again and again (stock of one entry = result of the
#: previous one; a repeated compose sees the same files), and pyflakes is the slowest step of a compose
_MEMO: dict[str, list | None] = {}


def pyflakes_messages_for(source: bytes, path: str) -> list | None:
    """pyflakes messages for a file, or None when it does not parse (memoized by content, in memory and on disk)."""
    key = hashlib.sha256(source).hexdigest() + ("-init" if PurePosixPath(path).name == "__init__.py" else "")
    if key in _MEMO:
        return _MEMO[key]
    stored = _load_memo(key)
    if stored is not _MISSING:
        _MEMO[key] = stored
        return stored
    messages = _pyflakes_messages(source, path)
    _MEMO[key] = messages
    _store_memo(key, messages)
    return messages


_MISSING = object()


def _memo_path(key: str) -> Path:
    from .cache import default_cache_root

    return default_cache_root() / "pyflakes" / f"{key}.json"


def _load_memo(key: str):
    """A stored result, rebuilt as real pyflakes message objects; `_MISSING` when absent or unreadable."""
    try:
        data = json.loads(_memo_path(key).read_text())
    except (OSError, ValueError):
        return _MISSING
    if data is None:
        return None
    messages = []
    try:
        for kind, lineno, col, args in data:
            cls = getattr(pyflakes_messages, kind)
            m = cls.__new__(cls)
            m.filename, m.lineno, m.col, m.message_args = "<memo>", lineno, col, tuple(args)
            messages.append(m)
    except (AttributeError, TypeError, ValueError):
        return _MISSING
    return messages


def _store_memo(key: str, messages: list | None) -> None:
    """Best effort: a cache that cannot be written only costs time."""
    data = (
        None
        if messages is None
        else [
            [type(m).__name__, m.lineno, m.col, [a if isinstance(a, (int, str)) else str(a) for a in m.message_args]]
            for m in messages
        ]
    )
    path = _memo_path(key)
    try:
        write_atomically(path, json.dumps(data))
    except OSError:
        pass


def _pyflakes_messages(source: bytes, path: str) -> list | None:
    try:
        tree = ast.parse(source, filename=path)
    except (SyntaxError, ValueError):
        return None
    is_init = PurePosixPath(path).name == "__init__.py"
    w = pyflakes_checker.Checker(tree, filename=path, withDoctest=False)
    messages = list(w.messages)
    if is_init:
        # re-exports from a package's __init__ are its interface, not unused imports
        messages = [m for m in messages if not isinstance(m, pyflakes_messages.UnusedImport)]
    return messages


def _message_key(message) -> tuple[str, str]:
    # the name only: the rest of the args (line of the first definition) moves with unrelated edits
    arg = message.message_args[0] if message.message_args else ""
    return type(message).__name__, str(arg)


def _new_messages(old: list, new: list, old_source: bytes | None, new_source: bytes) -> list[tuple[object, str]]:
    """Messages in `new` beyond the count of the same (kind, name) in `old`, with their severity.

    When a (kind, name) occurs more often than before, the surplus is taken from the occurrences on lines the entry
    changed first, since those are the ones it most plausibly introduced.
    """
    relevant = [m for m in new if isinstance(m, UNDEFINED_KINDS + WARNING_KINDS)]
    old_counts = Counter(_message_key(m) for m in old if isinstance(m, UNDEFINED_KINDS + WARNING_KINDS))
    by_key: dict[tuple[str, str], list] = {}
    for m in relevant:
        by_key.setdefault(_message_key(m), []).append(m)
    changed_lines: set[int] | None = None
    picked = []
    for key, messages in by_key.items():
        surplus = len(messages) - old_counts.get(key, 0)
        if surplus <= 0:
            continue
        if surplus < len(messages):
            if changed_lines is None:
                changed_lines = _changed_lines(old_source or b"", new_source)
            messages = sorted(messages, key=lambda m: (m.lineno not in changed_lines, m.lineno))
        for m in messages[:surplus]:
            picked.append((m, ERROR if isinstance(m, UNDEFINED_KINDS) else WARNING))
    picked.sort(key=lambda mp: (mp[0].lineno, mp[0].col))
    return picked


def _changed_lines(old: bytes, new: bytes) -> set[int]:
    """1-based line numbers of `new` that are inserted or replaced relative to `old`."""
    a = decode_text(old).splitlines()
    b = decode_text(new).splitlines()
    lines: set[int] = set()
    for tag, _i1, _i2, j1, j2 in difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes():
        if tag in ("replace", "insert"):
            lines.update(range(j1 + 1, j2 + 1))
    return lines


def module_name(path: str) -> str | None:
    """The importable module for a source-tree path (`vllm/a/b.py` -> `vllm.a.b`, `vllm/a/__init__.py` -> `vllm.a`)."""
    pure = PurePosixPath(path)
    if pure.suffix != ".py":
        return None
    parts = list(pure.with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    if not parts or not all(p.isidentifier() for p in parts):
        return None
    return ".".join(parts)


# ---------------------------------------------------------------------------------------------------------------
# The import smoke: whether it can mean something here, then the imports


@dataclass(frozen=True)
class SmokeMachine:
    """What an interpreter offers the import smoke besides its Python packages, asked once per process
    (`probe_machine`): the vLLM it has installed and whether the CUDA driver loads."""

    python: str
    #: the folder of the installed `vllm` package (as `import vllm` finds it outside the project), or None
    vllm_dir: str | None = None
    #: its distribution's version (`importlib.metadata`), or None when it has none
    vllm_version: str | None = None
    #: the compiled members directly in `vllm_dir` (`_C.abi3.so`, ...)
    compiled: tuple[str, ...] = ()
    #: why `CUDA_DRIVER` does not load, or None when it does
    driver_error: str | None = None
    #: why the probe itself failed (interpreter missing, timed out), or None
    error: str | None = None


#: runs in the interpreter being asked (argv: the driver library): locates the installed vLLM without importing it
#: (from a neutral folder, so a project's `vllm/` submodule folder is not taken for it), reads its version and its
#: compiled members, and loads the CUDA driver; one JSON line
_MACHINE_PROGRAM = """
import ctypes, importlib.metadata, importlib.util, json, os, sys
facts = {}
try:
    spec = importlib.util.find_spec("vllm")
except Exception:
    spec = None
origin = getattr(spec, "origin", None)
if origin and os.path.basename(origin) == "__init__.py":
    folder = os.path.dirname(origin)
    facts["vllm_dir"] = folder
    facts["compiled"] = sorted(n for n in os.listdir(folder) if n.endswith(".so"))
try:
    facts["vllm_version"] = importlib.metadata.version("vllm")
except Exception:
    facts["vllm_version"] = None
try:
    ctypes.CDLL(sys.argv[1])
    facts["driver_error"] = None
except OSError as exc:
    facts["driver_error"] = str(exc)
print("MACHINE-RESULT " + json.dumps(facts))
"""

#: (interpreter, search path, driver) -> its `SmokeMachine`; (interpreter, search path, modules) -> why the runtime
#: does not import, or None. Asked once per process: a compose runs the checks after every entry
_MACHINES: dict[tuple, SmokeMachine] = {}
_PROBED: dict[tuple, str | None] = {}


def probe_machine(python: str | None = None, timeout: float = 60) -> SmokeMachine:
    """The installed vLLM and the CUDA driver as `python` sees them (cached per process)."""
    python = python or sys.executable
    key = (python, os.environ.get("PYTHONPATH"), CUDA_DRIVER)
    if key not in _MACHINES:
        _MACHINES[key] = _probe_machine(python, timeout)
    return _MACHINES[key]


def _probe_machine(python: str, timeout: float) -> SmokeMachine:
    with tempfile.TemporaryDirectory(prefix="vllm-compose-probe-") as neutral:
        try:
            proc = subprocess.run(
                [python, "-c", _MACHINE_PROGRAM, CUDA_DRIVER],
                capture_output=True,
                text=True,
                timeout=timeout,
                cwd=neutral,
            )
        except FileNotFoundError:
            return SmokeMachine(python, error=f"interpreter {python} not found")
        except subprocess.TimeoutExpired:
            return SmokeMachine(python, error=f"asking {python} for its vLLM took longer than {timeout:.0f} s")
    for line in proc.stdout.splitlines():
        if line.startswith("MACHINE-RESULT "):
            facts = json.loads(line[len("MACHINE-RESULT ") :])
            return SmokeMachine(
                python,
                vllm_dir=facts.get("vllm_dir"),
                vllm_version=facts.get("vllm_version"),
                compiled=tuple(facts.get("compiled") or ()),
                driver_error=facts.get("driver_error"),
            )
    tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
    return SmokeMachine(python, error=f"{python} could not be asked for its vLLM (exit {proc.returncode}: {tail})")


def smoke_unready(release: str, python: str | None = None) -> str | None:
    """Why the import smoke of a compose onto `release` cannot mean anything with `python`, or None when it can.

    Cheap (two short subprocesses, cached), so it is decided before the minutes the imports take. An import of the
    composed modules tests the series only where the release's own compiled kernels load: `python`'s vLLM must be
    this release (a compose's editable install of another release, or its `.so` files, fail imports the series
    does not cause), hold compiled members, and find the CUDA driver they link against; and the vLLM runtime must
    import. Each reason says what to do.
    """
    python = python or sys.executable
    machine = probe_machine(python)
    if machine.error:
        return machine.error
    install = "to run it, `pip install -e vllm/` with this release's compose branch in vllm/, then run again"
    if machine.vllm_dir is None:
        return (
            f"no vLLM is installed for {python}, so the release's compiled kernels are not there to import the "
            f"composed modules against; {install}"
        )
    found = f"the vLLM installed for {python} ({machine.vllm_dir})"
    if machine.vllm_version is None:
        return f"{found} has no distribution metadata: which release its compiled kernels are of is unknown; {install}"
    try:
        same = Version(machine.vllm_version).public == Version(release).public
    except InvalidVersion:
        same = False
    if not same:
        return (
            f"{found} is {machine.vllm_version}, not {release}: its compiled kernels are another release's, so an "
            f"import failure would be about that mismatch, not the series; {install}"
        )
    if not machine.compiled:
        return f"{found} holds no compiled kernels (no .so file there); {install}"
    if machine.driver_error:
        return (
            f"no CUDA driver: {CUDA_DRIVER} does not load ({machine.driver_error}), and vLLM's compiled kernels "
            f"link against it; run the compose where a GPU driver is installed for the import smoke"
        )
    return probe_runtime(python)


def probe_runtime(python: str | None = None, timeout: float = 120) -> str | None:
    """None when `python` can import the vLLM runtime (RUNTIME_PROBE_MODULES); otherwise the reason it cannot (cached
    per process)."""
    python = python or sys.executable
    key = (python, os.environ.get("PYTHONPATH"), RUNTIME_PROBE_MODULES)  # the search path decides
    if key not in _PROBED:
        _PROBED[key] = _probe_runtime(python, timeout)
    return _PROBED[key]


def _probe_runtime(python: str, timeout: float) -> str | None:
    try:
        proc = subprocess.run(
            [python, "-c", f"import {', '.join(RUNTIME_PROBE_MODULES)}"],
            capture_output=True,
            text=True,
            timeout=timeout,
        )
    except FileNotFoundError:
        return f"interpreter {python} not found"
    except subprocess.TimeoutExpired:
        return f"importing {', '.join(RUNTIME_PROBE_MODULES)} with {python} took longer than {timeout:.0f} s"
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        return f"the vLLM runtime is not importable with {python} ({last})"
    return None


#: the program run in the smoke subprocess (argv: composed root, the installed vLLM's package folder or "", then
#: module names): imports each module and prints one JSON line of outcomes. A source tree has no compiled members
#: (`vllm/_C.abi3.so`, ...): a last-resort finder serves whatever the composed tree lacks from the installed package
#: `smoke_unready` found, so a module is not failed for a kernel library it was never meant to carry.
_SMOKE_PROGRAM = """
import importlib, importlib.machinery, json, os, sys, traceback
root = os.path.realpath(sys.argv[1])
installed_root = os.path.dirname(os.path.realpath(sys.argv[2])) if sys.argv[2] else None

class InstalledFallback:
    def find_spec(self, fullname, path=None, target=None):
        if installed_root is None or not fullname.startswith("vllm.") or path is None:
            return None
        mapped = []
        for entry in path:
            real = os.path.realpath(entry)
            if real.startswith(root + os.sep):
                mapped.append(os.path.join(installed_root, os.path.relpath(real, root)))
        return importlib.machinery.PathFinder.find_spec(fullname, mapped) if mapped else None

if installed_root is not None and installed_root != root:
    sys.meta_path.append(InstalledFallback())
results = {}
for name in sys.argv[3:]:
    try:
        importlib.import_module(name)
        results[name] = None
    except BaseException as exc:
        tb = traceback.extract_tb(exc.__traceback__)
        results[name] = {"error": f"{type(exc).__name__}: {exc}", "where": [[f.filename, f.lineno] for f in tb]}
print("SMOKE-RESULT " + json.dumps(results))
"""


def check_import_smoke(
    composed: FileTree,
    py_paths: list[str],
    release: str,
    entry_id: str | None = None,
    python: str | None = None,
    timeout: float = DEFAULT_SMOKE_TIMEOUT,
) -> CheckResult:
    """Import each changed module in one subprocess with the composed tree first on `sys.path`, where the smoke can
    mean something for `release` (`smoke_unready`); else the check is skipped with the reason."""
    started = time.perf_counter()
    modules = {}
    for path in py_paths:
        name = module_name(path)
        if name and composed.read(path) is not None:
            modules[name] = path
    if not modules:
        return CheckResult("import-smoke", SKIPPED, reason="no changed importable modules")
    reason = smoke_unready(release, python)
    if reason is not None:
        return CheckResult("import-smoke", SKIPPED, reason=reason, seconds=time.perf_counter() - started)
    installed = probe_machine(python).vllm_dir or ""
    result = CheckResult("import-smoke", PASS, files=len(modules))
    with _materialized(composed) as root:
        env = dict(os.environ)
        env["PYTHONPATH"] = str(root) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        env["PYTHONDONTWRITEBYTECODE"] = "1"
        try:
            proc = subprocess.run(
                [python or sys.executable, "-c", _SMOKE_PROGRAM, str(root), installed, *modules],
                capture_output=True,
                text=True,
                timeout=timeout,
                cwd=root,
                env=env,
            )
        except subprocess.TimeoutExpired:
            result.status = FAIL
            result.findings.append(
                Finding(
                    "import-smoke",
                    ERROR,
                    "",
                    None,
                    f"importing the changed modules took over {timeout:.0f} s",
                    entry=entry_id,
                )
            )
            result.seconds = time.perf_counter() - started
            return result
    outcome = None
    for line in proc.stdout.splitlines():
        if line.startswith("SMOKE-RESULT "):
            outcome = json.loads(line[len("SMOKE-RESULT ") :])
    if outcome is None:
        tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        result.findings.append(
            Finding(
                "import-smoke",
                ERROR,
                "",
                None,
                f"the import subprocess died (exit {proc.returncode}): {tail}",
                entry=entry_id,
            )
        )
    else:
        for name, failure in outcome.items():
            if failure is None:
                continue
            path = modules[name]
            line = None
            for filename, lineno in failure.get("where", []):
                if filename.replace(os.sep, "/").endswith(path):
                    line = lineno
            result.findings.append(
                Finding(
                    "import-smoke",
                    ERROR,
                    path,
                    line,
                    f"import {name} failed: {failure['error']}",
                    name=name,
                    entry=entry_id,
                )
            )
    result.status = FAIL if result.findings else PASS
    result.seconds = time.perf_counter() - started
    return result


class _materialized:
    """A directory holding `tree`: its own root for a `DirTree`, else a temporary copy of its Python files."""

    def __init__(self, tree: FileTree) -> None:
        self.tree = tree
        self._tmp: tempfile.TemporaryDirectory | None = None

    def __enter__(self) -> Path:
        if isinstance(self.tree, DirTree):
            return self.tree.root
        self._tmp = tempfile.TemporaryDirectory(prefix="vllm-compose-smoke-")
        root = Path(self._tmp.name)
        for path in self.tree.paths():
            if not path.startswith("vllm/"):
                continue
            data = self.tree.read(path)
            if data is None:
                continue
            dest = root / path
            dest.parent.mkdir(parents=True, exist_ok=True)
            dest.write_bytes(data)
        return root

    def __exit__(self, *exc) -> None:
        if self._tmp is not None:
            self._tmp.cleanup()
