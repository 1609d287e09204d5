"""The last commit of a compose branch: `pip install -e vllm/` builds over the precompiled stock wheel of its release.

Written by the compose after the series' entries, audited and checked, and before the branch ref moves. It is not
a series entry (no `Series-Entry` trailer; `Build-Setup: precompiled-stock-wheel` instead), so the per-entry audit,
the checks, `series-diff` and the overlay of `vllm-compose wheel` / `image-overlay` see the series' tip, its parent
(`composed_branch.open_branch` steps over it). What it changes, and why:

* adds `.vllm-compose/precompiled.py` (`precompiled_hook.py` of this package, verbatim) and
  `.vllm-compose/precompiled.json` (the release, the version label of the compose, and per architecture the stock
  wheel of `series/stock-wheels.toml`: file name, size, sha256, URL), and `.vllm-compose/.gitignore`
  (`__pycache__/`: setup.py loads the hook as a module, which writes bytecode beside it);
* adds four lines to vLLM's `setup.py`, right after `ROOT_DIR = ...`: load that file and call `configure()`, which
  sets `VLLM_USE_PRECOMPILED`, `VLLM_PRECOMPILED_WHEEL_LOCATION` (the wheel, downloaded once into the cache and
  verified), `VLLM_VERSION_OVERRIDE` and `VLLM_SKIP_PRECOMPILED_VERSION_SUFFIX` unless the environment sets them;
* adds an `[editable_wheel]` section to `setup.cfg` (creating the file where the tree has none) that makes
  `pip install -e` path-based (setuptools' `compat` mode: a `.pth` file puts the tree's root on `sys.path`)
  instead of setuptools' default import hook. The hook is consulted only after the path search, and that search
  stops at the first folder called `vllm` on `sys.path`: run from a project holding the tree as its `vllm/`
  submodule, `import vllm` would give that folder as an empty namespace package. With the root on `sys.path` the
  search finds `vllm/vllm/__init__.py`, a regular package, which wins over a namespace portion found earlier;
  `pip install -e vllm/ --config-settings editable_mode=lenient` still asks for the hook;
* removes `vllm/_version.py`, `PKG-INFO` and `vllm.egg-info/` (what the sdist import brought and upstream's git
  tree does not have): the build writes all three, so tracked they would make the worktree dirty after every
  install and the next `rebase` refuse. Upstream's own `.gitignore` ignores them once untracked, and the `.so`
  files the precompiled build copies into the tree.

The label is the compose's (`composed_branch.local_label`), computed from the series' tip, so the editable install,
the overlay wheel and the image say the same version. A release `series/stock-wheels.toml` does not list, or a
`setup.py` without the anchors, gets no such commit; the compose says why.
"""

from __future__ import annotations

import json
import re
import tomllib
from importlib import resources
from pathlib import Path

import pygit2

from . import gitstore
from .errors import SeriesError
from .results import BuildSetup
from .series import version_of_tag
from .trailers import BUILD_SETUP, COMPOSED_BY
from .trees import GitTree

#: the trailer that marks the commit (and that `open_branch` and `series-diff` step over)
BUILD_TRAILER = BUILD_SETUP
#: the pins, next to series.toml
PINS_FILE = "stock-wheels.toml"
HOOK_DIR = ".vllm-compose"
#: build outputs the sdist import tracks and the build rewrites
BUILD_OUTPUTS = ("vllm/_version.py", "PKG-INFO", "vllm.egg-info")
_ANCHOR = re.compile(r"^ROOT_DIR = Path\(__file__\)\.parent\n", re.M)
_LOADER = re.compile(r"^def load_module_from_path\(", re.M)
#: appended to setup.cfg: `pip install -e` writes a .pth file naming the tree's root (module docstring); a command
#: line `--config-settings editable_mode=...` overrides it, as command-line options override setup.cfg
EDITABLE_SECTION = (
    "\n# vllm-compose: `pip install -e` puts this folder on sys.path (a .pth file), not an import hook, so `import\n"
    "# vllm` finds vllm/vllm/ from every folder, also from one whose vllm/ subfolder is this tree\n"
    "[editable_wheel]\nmode = compat\n"
)
_EDITABLE_HEADER = re.compile(r"^\[editable_wheel\]\s*$", re.M)
SETUP_LINES = (
    "# vllm-compose: take the compiled kernels from the release's stock wheel, sha256-checked (.vllm-compose/)\n"
    '_VLLM_COMPOSE_HOOK = os.path.join(ROOT_DIR, ".vllm-compose", "precompiled.py")\n'
    "if os.path.isfile(_VLLM_COMPOSE_HOOK):  # not in an sdist built from this tree: vLLM builds as it does\n"
    '    load_module_from_path("vllm_compose_precompiled", _VLLM_COMPOSE_HOOK).configure(ROOT_DIR)\n'
)


def load_pins(series_dir: Path) -> dict[str, dict[str, dict]]:
    """`series/stock-wheels.toml` as {version: {arch: wheel}}; {} when the file is absent."""
    file = Path(series_dir) / PINS_FILE
    if not file.is_file():
        return {}
    try:
        doc = tomllib.loads(file.read_text(encoding="utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise SeriesError(f"not valid TOML: {exc}", file=str(file), hint="fix the syntax at the line named") from None
    pins: dict[str, dict[str, dict]] = {}
    for n, row in enumerate(doc.get("wheel", []), 1):
        missing = [k for k in ("version", "arch", "filename", "size", "sha256", "url") if k not in row]
        if missing or not re.fullmatch(r"[0-9a-f]{64}", str(row.get("sha256", ""))):
            raise SeriesError(
                f"[[wheel]] #{n} lacks {', '.join(missing)}" if missing else f"[[wheel]] #{n}: sha256 is not 64 hex",
                file=str(file),
                key="wheel",
                hint="each [[wheel]] has version, arch, filename, size, sha256 and url (see the file's header)",
            )
        pins.setdefault(row["version"], {})[row["arch"]] = {k: row[k] for k in ("filename", "size", "sha256", "url")}
    return pins


def hook_source() -> bytes:
    """The bytes of `.vllm-compose/precompiled.py` (this package's `precompiled_hook.py`)."""
    return resources.files(__package__).joinpath("precompiled_hook.py").read_bytes()


def build_commit(
    repo: pygit2.Repository,
    series_dir: Path,
    series_tip: pygit2.Commit,
    tag: str,
    label: str,
    when: int,
) -> BuildSetup:
    """Write (no ref) the build commit on top of `series_tip`; returns it, or why there is none."""
    version = str(version_of_tag(tag))
    wheels = load_pins(series_dir).get(version)
    if not wheels:
        return BuildSetup(
            None,
            f"no precompiled build setup: {Path(series_dir) / PINS_FILE} pins no stock wheel of vLLM {version}, "
            "so `pip install -e vllm/` compiles the kernels (add the wheel there, or use `vllm-compose editable`)",
        )
    tree = GitTree(repo, series_tip.tree)
    setup = tree.read("setup.py")
    text = setup.decode("utf-8", "surrogateescape") if setup is not None else ""
    anchor = _ANCHOR.search(text)
    if anchor is None or not _LOADER.search(text[: anchor.start()]):
        return BuildSetup(
            None,
            "no precompiled build setup: setup.py has no `ROOT_DIR = Path(__file__).parent` after "
            "`def load_module_from_path(` to hook into, so `pip install -e vllm/` builds as vLLM does",
        )
    full_version = f"{version}+{label}"
    spec = {"release": version, "version": full_version, "wheels": wheels}
    changes: dict[str, bytes | None] = {
        "setup.py": (text[: anchor.end()] + SETUP_LINES + text[anchor.end() :]).encode("utf-8", "surrogateescape"),
        **_editable_mode(tree),
        f"{HOOK_DIR}/precompiled.py": hook_source(),
        f"{HOOK_DIR}/precompiled.json": (json.dumps(spec, indent=2, sort_keys=True) + "\n").encode(),
        # setup.py loads the hook as a module, which writes its bytecode beside it unless PYTHONDONTWRITEBYTECODE
        # is set: an untracked .vllm-compose/__pycache__/ after every install, which the next rebase would see
        f"{HOOK_DIR}/.gitignore": b"__pycache__/\n",
    }
    for path in BUILD_OUTPUTS:
        for member in _paths_under(repo, series_tip.tree, path):
            changes[member] = None
    tree_id = gitstore.tree_with_changes(repo, series_tip.tree, changes, {})
    arches = ", ".join(f"{a}: {w['filename']} (sha256 {w['sha256'][:12]}…)" for a, w in sorted(wheels.items()))
    message = (
        f"Build over the precompiled stock wheel of vLLM {version}\n\n"
        f"`pip install -e .` takes the compiled kernels from the stock wheel of this release instead of compiling\n"
        f"them, checks its sha256, and installs vllm {full_version}. .vllm-compose/precompiled.py says what it\n"
        f"downloads and how to build from source instead (VLLM_USE_PRECOMPILED=0). The build outputs the sdist\n"
        f"import tracked ({', '.join(BUILD_OUTPUTS)}) are removed, so an install leaves the worktree clean.\n"
        f"setup.cfg makes the editable install path-based ([editable_wheel] mode = compat): `import vllm` then\n"
        f"finds this tree also from a folder whose vllm/ subfolder it is, where an import hook comes too late.\n\n"
        f"Stock wheels: {arches}\n"
        f"Onto: {tag}\n{BUILD_TRAILER}\n{COMPOSED_BY}\n"
    )
    who = gitstore.signature("vllm-compose", "vllm-compose@invalid", when)
    oid = gitstore.commit_tree(repo, tree_id, [series_tip.id], message, who, who)
    return BuildSetup(
        str(oid),
        f"`pip install -e vllm/` builds vllm {full_version} over the stock wheel of the machine's architecture ("
        + "; ".join(
            f"{a}: {w['filename']}, {w['size'] / 1e6:.0f} MB, sha256 {w['sha256'][:12]}…"
            for a, w in sorted(wheels.items())
        )
        + "), downloaded once into the cache",
        full_version,
        wheels,
    )


def _editable_mode(tree: GitTree) -> dict[str, bytes]:
    """setup.cfg with `EDITABLE_SECTION` appended (the file created where the tree has none); nothing where it
    already has an `[editable_wheel]` section (a second one would make setup.cfg unreadable to setuptools, and the
    tree's own choice stands)."""
    cfg = tree.read("setup.cfg")
    text = cfg.decode("utf-8", "surrogateescape") if cfg is not None else ""
    if _EDITABLE_HEADER.search(text):
        return {}
    if not text:
        return {"setup.cfg": EDITABLE_SECTION.lstrip("\n").encode()}
    text += "" if text.endswith("\n") else "\n"
    return {"setup.cfg": (text + EDITABLE_SECTION).encode("utf-8", "surrogateescape")}


def is_build_commit(commit: pygit2.Commit) -> bool:
    return BUILD_TRAILER in commit.message and COMPOSED_BY in commit.message


def _paths_under(repo: pygit2.Repository, tree: pygit2.Tree, path: str) -> list[str]:
    """`path` when it is a file of `tree`, every file below it when it is a folder, else nothing."""
    try:
        obj = tree[path]
    except KeyError:
        return []
    if obj.type_str != "tree":
        return [path]
    out = []
    for child in repo[obj.id]:
        out += _paths_under(repo, tree, f"{path}/{child.name}")
    return out
