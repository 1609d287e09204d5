"""`pip install -e vllm/` without compiling: the environment and command for vLLM's precompiled path.

vLLM's `setup.py` skips the CMake/CUDA and Rust builds when `VLLM_USE_PRECOMPILED=1`, and takes the compiled
members from the wheel named by `VLLM_PRECOMPILED_WHEEL_LOCATION` (a local path or a URL). Pointing it at the cached
stock wheel of the same version gives an editable install of the composed Python tree over the stock kernels.

The version: vLLM 0.26.0's `get_vllm_version()` honours `VLLM_VERSION_OVERRIDE`: it copies the value into
`SETUPTOOLS_SCM_PRETEND_VERSION` inside the setup.py process and returns it without any suffix. Without the
override a precompiled build reads `<scm version>+precompiled` (`.precompiled` after an existing local part) unless
`VLLM_SKIP_PRECOMPILED_VERSION_SUFFIX=1`. We set the override and the suffix switch. We do not set
`SETUPTOOLS_SCM_PRETEND_VERSION` in pip's environment: pip may build other sdists that use setuptools-scm while
resolving vLLM's dependencies, and they would all get vLLM's version. `EditableInstall.honoured` lists which of our
variables the tree's setup.py actually reads, so a release without the override is noticed rather than mislabelled.

Side effects the caller should know: setuptools-scm writes `vllm/_version.py` and the precompiled path copies the
`.so` files into the source tree, so the tree is modified in place (both are build outputs, not compose content).
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pygit2

from .. import gitstore
from ..composed_branch import ComposedBranch
from ..errors import ComposeError, RepositoryError
from ..trees import DirTree
from .wheel import overlay_version, split_wheel_name, tree_release

#: environment variables vLLM's setup.py reads, and why we set them
PRECOMPILED_ENV = {
    "VLLM_USE_PRECOMPILED": "skip the CUDA/C++ and Rust builds; take compiled members from a wheel",
    "VLLM_PRECOMPILED_WHEEL_LOCATION": "the wheel to take them from: the cached stock wheel of the same version",
    "VLLM_VERSION_OVERRIDE": "the version setup.py reports, verbatim (no +precompiled suffix)",
    "VLLM_SKIP_PRECOMPILED_VERSION_SUFFIX": "no '+precompiled' suffix where the override is not honoured",
}


@dataclass
class EditableInstall:
    """How to run the precompiled editable install: `subprocess.run(argv, env={**os.environ, **env})`."""

    argv: list[str]
    #: only the variables to add to the caller's environment
    env: dict[str, str]
    #: what `pip show vllm` and `vllm.__version__` will say
    version: str
    #: version variables the tree's setup.py was seen to read (empty when it has no setup.py we can read)
    honoured: list[str] = field(default_factory=list)

    @property
    def version_labelled(self) -> bool:
        """Whether the tree's setup.py reads `VLLM_VERSION_OVERRIDE`, i.e. the install will say `version`."""
        return "VLLM_VERSION_OVERRIDE" in self.honoured

    def shell(self) -> str:
        """The command as one shell line, for documentation and reports."""
        env = " ".join(f"{k}={shlex.quote(v)}" for k, v in self.env.items())
        return f"{env} {shlex.join(self.argv)}"


def editable_install(
    source_dir: Path,
    stock_wheel: Path,
    local_label: str,
    python: str | None = None,
    build_isolation: bool = True,
) -> EditableInstall:
    """The environment and argv for `pip install -e <source_dir>` over the precompiled `stock_wheel`.

    `source_dir` is the composed vLLM tree (with `setup.py`); `stock_wheel` the cached stock wheel, whose version
    must be the tree's (compiled kernels are tied to the Python code of their release). Nothing is run here.
    `build_isolation=False` adds `--no-build-isolation` (use the torch already installed instead of downloading the
    pinned one into a build environment).
    """
    source_dir = Path(source_dir).resolve()
    stock_wheel = Path(stock_wheel).resolve()
    setup_py = source_dir / "setup.py"
    if not setup_py.is_file():
        raise ComposeError(
            f"{source_dir} has no setup.py",
            file=str(source_dir),
            hint="pass the root of the composed vLLM source tree (the folder holding setup.py and vllm/)",
        )
    if not stock_wheel.is_file():
        raise ComposeError(
            f"the stock wheel {stock_wheel} does not exist",
            file=str(stock_wheel),
            hint="check the path given to --stock-wheel, or leave --stock-wheel out: `vllm-compose editable --onto "
            "TAG` fetches the release's stock wheel into the cache (sha256 from the index)",
        )
    _dist, stock_version, _tags = split_wheel_name(stock_wheel)
    tree_version = tree_release(DirTree(source_dir))
    if tree_version is not None and _base(tree_version) != _base(stock_version):
        raise ComposeError(
            f"the tree is vLLM {tree_version} but the stock wheel is {stock_version}",
            file=str(stock_wheel),
            hint="use the stock wheel of the tree's release: compiled kernels must match their Python code",
        )
    version = overlay_version(_base(stock_version), local_label)
    env = {
        "VLLM_USE_PRECOMPILED": "1",
        "VLLM_PRECOMPILED_WHEEL_LOCATION": str(stock_wheel),
        "VLLM_VERSION_OVERRIDE": version,
        "VLLM_SKIP_PRECOMPILED_VERSION_SUFFIX": "1",
    }
    argv = [python or sys.executable, "-m", "pip", "install", "--editable", str(source_dir)]
    if not build_isolation:
        argv.append("--no-build-isolation")
    setup_text = setup_py.read_text(encoding="utf-8", errors="replace")
    honoured = [name for name in PRECOMPILED_ENV if name in setup_text or _reads_via_envs(name, source_dir)]
    return EditableInstall(argv=argv, env=env, version=version, honoured=honoured)


def require_checked_out(branch: ComposedBranch, worktree: Path) -> None:
    """Refuse unless `worktree` (the repository's work tree) holds exactly the branch's tree.

    `pip install -e` builds from the files on disk, so they must be the composed ones. Untracked files are allowed:
    the precompiled build writes `.so` files and `vllm/_version.py` there.
    """
    repo = branch.repo
    if repo.is_bare or repo.head_is_unborn or repo.head.peel(pygit2.Commit).tree.id != branch.tip.tree.id:
        raise RepositoryError(
            f"{worktree} does not have {branch.branch} checked out",
            tag=branch.tag,
            hint=f"git -C {worktree} checkout {branch.branch}",
        )
    if gitstore.is_dirty(repo):
        raise RepositoryError(
            f"{worktree} has local changes to tracked files",
            tag=branch.tag,
            hint="commit them as a series entry, or `git checkout .` them away, then run again",
        )


def run_install(install: EditableInstall, source_dir: Path) -> None:
    """Run `install` (pip's output goes to the terminal); `ComposeError` when pip fails."""
    done = subprocess.run(install.argv, env={**os.environ, **install.env}, check=False)
    if done.returncode != 0:
        raise ComposeError(
            f"pip install -e {source_dir} failed (exit {done.returncode})",
            hint="read pip's output above; the command is printed above to rerun by hand",
        )


def _base(version: str) -> str:
    """The public part of a version (`0.26.0+cu129` -> `0.26.0`)."""
    return version.split("+", 1)[0]


def _reads_via_envs(name: str, source_dir: Path) -> bool:
    # setup.py reads some flags through vllm/envs.py (`envs.VLLM_USE_PRECOMPILED`)
    envs_py = source_dir / "vllm" / "envs.py"
    return envs_py.is_file() and f'"{name}"' in envs_py.read_text(errors="replace")
