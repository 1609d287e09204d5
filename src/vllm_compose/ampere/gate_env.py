"""The Ampere gate's own Python environment: isolated, cached, pinned, and the subprocess the gate runs in.

Why the gate does not run in the interpreter the tool was started from: that interpreter is often the one vLLM is
served from. Installing the gate's torch and Triton there replaces the torch vLLM was built for (pip resolves the
pins, prints an ERROR about vLLM's requirement and exits 0), and the serving environment's packages reach the
derivation: the loader executes the release's Python, and whatever else is importable (a vLLM of another release,
its `.so` files, packages the release probes for) can change which launches the release's code makes. The same
compose branch derived 125 specializations per architecture in a clean environment and 73 in a serving one, and
both passed.

So the tool keeps one environment per set of pins and interpreter, `<cache>/envs/gate-<key>/`: a venv holding only
`GATE_REQUIREMENTS` (and what pip resolves for them), built in a temporary folder next to it and renamed into place
when it imports as pinned (a venv run through its own `bin/python` works under any name), so a reader finds a
complete environment or none. It is created on the first gate that needs it (about 1.5 GB, half a minute from a
local wheel) and reused after; pip's own configuration (`PIP_INDEX_URL`, `PIP_EXTRA_INDEX_URL`, `pip.conf`) decides
where the wheels come from.

The derivation and the compile run in that environment's interpreter with `-I` (no `PYTHONPATH`, no user site, no
current folder on `sys.path`), with only this package linked onto `sys.path` and without the `VLLM_*` / `TRITON_*`
variables that change what the release's code or Triton does. The worker (`gate_worker`) checks before it starts that torch and
Triton are the pinned versions and that nothing named `vllm` is importable: the release is read from its tree by
the loader, never imported.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
import venv
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import ComposeError

#: what the gate runs on: Triton compiles for sm_80/86 on a CPU (3.6.0: the `knobs.runtime.jit_cache_hook` the
#: derivation records launches through); torch runs the release's wrappers on CPU tensors (any build of 2.13.0:
#: a CPU wheel is enough). The coverage record (`coverage.py`) holds for exactly these versions.
GATE_REQUIREMENTS: tuple[str, ...] = ("torch==2.13.0", "triton==3.6.0")

#: bump when the layout of an environment or its marker changes: old environments are then rebuilt, not reused
ENV_FORMAT = 1

#: the file written into a complete environment before it is renamed into place
MARKER = "vllm-compose-gate-env.json"

#: environment variables the worker does not inherit: vLLM's (the release's `envs.py` reads them, e.g.
#: VLLM_TRITON_FORCE_FIRST_CONFIG skips autotuning) and Triton's knobs, but where Triton keeps its cache
_DROPPED_PREFIXES = ("VLLM_", "TRITON_")
_KEPT = ("TRITON_CACHE_DIR", "TRITON_HOME")

#: seconds pip may take to install the pins (a slow index, a 190 MB CPU wheel or the CUDA build's 3 GB)
PIP_TIMEOUT = 3600
#: seconds one gate run may take in the worker (a cold Triton cache: ~3 min for v0.33.0 on 2 cores)
WORKER_TIMEOUT = 3600


class GateEnvironmentError(ComposeError):
    """The gate's environment cannot be created or does not hold what it must: the gate cannot run (exit 3)."""


@dataclass(frozen=True)
class GateEnvironment:
    """One managed environment: where it lives, and the pins it holds."""

    path: Path
    requirements: tuple[str, ...]

    @property
    def python(self) -> Path:
        return self.path / "bin" / "python"

    @property
    def ready(self) -> bool:
        return (self.path / MARKER).is_file() and self.python.exists()

    def marker(self) -> dict[str, Any]:
        """What the environment recorded when it was built: pins, interpreter, installed versions."""
        return json.loads((self.path / MARKER).read_text())


def interpreter_tag(python: str | os.PathLike | None = None) -> str:
    """The interpreter an environment is built for (wheels are per implementation, version and platform)."""
    if python is None:
        impl, ver = sys.implementation.name, f"{sys.version_info[0]}.{sys.version_info[1]}"
        return f"{impl}-{ver}-{sys.platform}-{platform.machine()}"
    code = (
        "import sys, platform; "
        "print(f'{sys.implementation.name}-{sys.version_info[0]}.{sys.version_info[1]}-{sys.platform}-"
        "{platform.machine()}')"
    )
    return subprocess.run([str(python), "-I", "-c", code], capture_output=True, text=True, check=True).stdout.strip()


def env_key(requirements: tuple[str, ...], interpreter: str) -> str:
    """The name-giving digest of an environment: its format, its interpreter and its pins."""
    text = json.dumps({"format": ENV_FORMAT, "python": interpreter, "requirements": sorted(requirements)})
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def environment_for(cache_root: Path, requirements: tuple[str, ...] = GATE_REQUIREMENTS) -> GateEnvironment:
    """The environment of `requirements` for this interpreter under `cache_root` (not created here)."""
    return GateEnvironment(
        Path(cache_root) / "envs" / f"gate-{env_key(requirements, interpreter_tag())}", tuple(requirements)
    )


def ensure_environment(env: GateEnvironment, progress=None) -> GateEnvironment:
    """Return `env`, building it first when it is not there. Raises `GateEnvironmentError` (nothing left behind)
    when venv or pip fails or the result does not import the pins. `progress(str)` hears what is being done."""
    if env.ready:
        return env
    env.path.parent.mkdir(parents=True, exist_ok=True)
    _sweep_abandoned(env.path.parent)
    tmp = Path(tempfile.mkdtemp(prefix=f".incoming-{os.getpid()}-{env.path.name}-", dir=env.path.parent))
    try:
        if progress:
            progress(f"creating the Ampere gate's environment {env.path} ({', '.join(env.requirements)})")
        started = time.monotonic()
        try:
            venv.EnvBuilder(with_pip=bool(env.requirements), symlinks=os.name != "nt", clear=True).create(tmp)
        except (OSError, subprocess.CalledProcessError) as exc:
            raise _env_error(env, f"python -m venv failed: {exc}") from exc
        python = tmp / "bin" / "python"
        if env.requirements:
            cmd = [str(python), "-m", "pip", "install", "--disable-pip-version-check", "-q", *env.requirements]
            proc = _run(cmd, PIP_TIMEOUT)
            if proc.returncode != 0:
                raise _env_error(env, f"pip install {' '.join(env.requirements)} failed: {_tail(proc)}")
        versions = _installed_versions(python, env)
        marker = {
            "format": ENV_FORMAT,
            "requirements": list(env.requirements),
            "python": interpreter_tag(python),
            "versions": versions,
            "built_s": round(time.monotonic() - started, 1),
        }
        (tmp / MARKER).write_text(json.dumps(marker, indent=1) + "\n")
        if env.path.exists() and not env.ready:  # a damaged one (never renamed into place half-built): replace it
            shutil.rmtree(env.path, ignore_errors=True)
        try:
            tmp.rename(env.path)
        except OSError as exc:
            if not env.ready:  # not another process that finished first: a real failure
                raise _env_error(env, f"cannot move the new environment into place: {exc}") from exc
        return env
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


def _installed_versions(python: Path, env: GateEnvironment) -> dict[str, str]:
    """The versions the new environment imports for each pinned distribution; raise when one differs."""
    names = [r.split("==")[0] for r in env.requirements]
    code = "import importlib.metadata as m, json, sys; print(json.dumps({n: m.version(n) for n in sys.argv[1:]}))"
    proc = _run([str(python), "-I", "-c", code, *names], 120)
    if proc.returncode != 0:
        raise _env_error(env, f"the new environment cannot report its packages: {_tail(proc)}")
    versions = json.loads(proc.stdout)
    wrong = [
        f"{n} {versions.get(n)}" for n, want in _pins(env.requirements).items() if not _same(versions.get(n), want)
    ]
    if wrong:
        raise _env_error(env, f"pip installed {', '.join(wrong)}, not {', '.join(env.requirements)}")
    return versions


def _pins(requirements: tuple[str, ...]) -> dict[str, str]:
    return dict(r.split("==", 1) for r in requirements)


def _same(installed: str | None, pinned: str) -> bool:
    """`2.13.0+cpu` is the pinned 2.13.0 (a local build label, as pip's `==` matches it)."""
    return installed is not None and installed.split("+")[0] == pinned


def _env_error(env: GateEnvironment, what: str) -> GateEnvironmentError:
    return GateEnvironmentError(
        f"the Ampere gate's environment could not be created: {what}",
        file=str(env.path),
        hint="check that pip can reach your package index (pip's own PIP_INDEX_URL / PIP_EXTRA_INDEX_URL apply; "
        "https://download.pytorch.org/whl/cpu serves the 190 MB CPU torch), then run the command again; or pass "
        "--no-ampere-gate to go on without the gate (recorded in the report)",
    )


def _run(cmd: list[str], timeout: int) -> subprocess.CompletedProcess:
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=_worker_environ())
    except subprocess.TimeoutExpired as exc:
        return subprocess.CompletedProcess(cmd, 124, exc.stdout or "", f"timed out after {timeout} s")


def _tail(proc: subprocess.CompletedProcess, n: int = 600) -> str:
    text = (proc.stderr or "").strip() or (proc.stdout or "").strip()
    lines = [ln for ln in text.splitlines() if not ln.startswith("WARNING: Location")]  # pip's find-links noise
    return "\n".join(lines)[-n:] or f"exit {proc.returncode}"


def _sweep_abandoned(folder: Path) -> None:
    """Remove the half-built environments of processes that are gone (killed during a build)."""
    for path in folder.glob(".incoming-*"):
        try:
            pid = int(path.name.split("-")[2])
        except (IndexError, ValueError):
            continue
        if pid != os.getpid() and not _alive(pid):
            shutil.rmtree(path, ignore_errors=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _worker_environ() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k in _KEPT or not k.startswith(_DROPPED_PREFIXES)}


# --- the worker --------------------------------------------------------------------------------------------------

#: how the worker starts: `-I` ignores PYTHONPATH and the user site; the folder that holds only a link to this
#: package is the one entry put in front of the environment's own sys.path. The worker's entry is a module of its
#: own (`gate_worker`), which imports the gate: this module, which the gate imports, does not.
_BOOT = "import sys; sys.path.insert(0, sys.argv[1]); from vllm_compose.ampere.gate_worker import main; main()"


def run_in_environment(
    env: GateEnvironment, tree: Path, label: str, capabilities: tuple[tuple[int, int], ...]
) -> dict[str, Any]:
    """Derive and compile the DSA-path launches of `tree` in `env`'s interpreter; return the worker's result
    (`gate.derive_and_compile`'s JSON plus the versions it ran on). A typed error the worker raised (a
    driver that cannot drive the release, a platform probe) is raised here as the same type."""
    package = Path(__file__).resolve().parents[1]
    with tempfile.TemporaryDirectory(prefix="vllm-compose-gate-worker-") as tmp:
        (Path(tmp) / "path").mkdir()
        os.symlink(package, Path(tmp) / "path" / package.name)
        request = {
            "tree": str(Path(tree).resolve()),
            "label": label,
            "capabilities": [list(c) for c in capabilities],
            "requirements": list(env.requirements),
            "out": str(Path(tmp) / "result.json"),
        }
        cmd = [str(env.python), "-I", "-c", _BOOT, str(Path(tmp) / "path"), json.dumps(request)]
        proc = _run(cmd, WORKER_TIMEOUT)
        result_file = Path(tmp) / "result.json"
        if not result_file.is_file():
            raise GateEnvironmentError(
                f"the Ampere gate's worker stopped without a result (exit {proc.returncode}): {_tail(proc, 1500)}",
                file=str(env.path),
                hint=f"remove {env.path} to have it rebuilt, then run the command again; or pass --no-ampere-gate",
            )
        result = json.loads(result_file.read_text())
    if "error" in result:
        raise _error_of(result["error"])
    return result


def _error_of(data: dict[str, Any]) -> ComposeError:
    from . import fake_platform, kernel_gate, kernel_launches

    kinds = {
        "DriverError": kernel_launches.DriverError,
        "PlatformProbeError": fake_platform.PlatformProbeError,
        "KernelGateError": kernel_gate.KernelGateError,
        "GateEnvironmentError": GateEnvironmentError,
    }
    cls = kinds.get(data.pop("type", ""), ComposeError)
    data.pop("exit_code", None)
    return cls(**data)
