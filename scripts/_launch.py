"""Start the vllm-compose CLI from a script of this checkout, whichever `python3` runs it.

`scripts/rebase_series.py --onto v0.27.0` is run as written, so by the system `python3`, which usually lacks the
tool's dependencies (pygit2 first). Then the script re-executes itself under the project's environment
(`.venv/bin/python` next to `scripts/`) when that exists, and otherwise stops with the one command that creates it,
exit code 3 (bad configuration), instead of a `ModuleNotFoundError` traceback.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
VENV = ROOT / ".venv"
VENV_PYTHON = VENV / "bin" / "python"
#: the set-up command of the README's first screen
SETUP = "python3 -m venv .venv && .venv/bin/pip install -e ."
#: the modules the tool imports (pyproject's dependencies; GitPython is `git`)
MODULES = ("pygit2", "git", "pyflakes", "rich", "platformdirs", "packaging")
#: set in the re-executed process, so a `.venv` that lacks the tool as well is reported, not re-entered forever
_REEXEC = "VLLM_COMPOSE_SCRIPT_REEXEC"
BAD_CONFIGURATION = 3


def _missing() -> list[str]:
    if importlib.util.find_spec("vllm_compose") is None:  # a checkout never installed: its source tree
        sys.path.insert(0, str(ROOT / "src"))
    wanted = ("vllm_compose", *MODULES)
    return [name for name in wanted if importlib.util.find_spec(name) is None]


def run(command: str) -> int:
    """Run `vllm-compose <command> <the script's arguments>`; returns the exit code."""
    missing = _missing()
    if not missing:
        os.environ.pop(_REEXEC, None)
        from vllm_compose.cli import main

        return main([command, *sys.argv[1:]])
    in_venv = Path(sys.prefix) == VENV
    if VENV_PYTHON.is_file() and not in_venv and not os.environ.get(_REEXEC):
        os.environ[_REEXEC] = "1"
        os.execv(str(VENV_PYTHON), [str(VENV_PYTHON), sys.argv[0], *sys.argv[1:]])
    where = f"{VENV} lacks them too" if VENV_PYTHON.is_file() else f"{VENV} does not exist"
    print(
        f"error: {sys.executable} cannot run vllm-compose: no module {', '.join(missing)}; {where}\n"
        f"  hint: set the project up once: cd {ROOT} && "
        + (SETUP if not VENV_PYTHON.is_file() else ".venv/bin/pip install -e .")
        + f", then run {Path(sys.argv[0]).name} again",
        file=sys.stderr,
    )
    return BAD_CONFIGURATION
