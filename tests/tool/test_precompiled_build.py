"""`pip install -e vllm/` on a compose branch, as written: the branch's last commit makes the build take the compiled
kernels from the release's stock wheel (sha256-checked) and label the version, and the build's outputs leave the
worktree clean, so the next `rebase` works (precompiled.py, precompiled_hook.py).

The release is a toy vLLM whose setup.py does what vLLM's does at the points that matter: it loads modules with
`load_module_from_path`, fails like a CUDA build on a machine without CUDA unless `VLLM_USE_PRECOMPILED` is set,
then copies the `.so` out of `VLLM_PRECOMPILED_WHEEL_LOCATION` into the tree, and writes `vllm/_version.py` and
`vllm.egg-info/`. The stock wheel is a small zip served from a file:// URL: no test downloads the real one.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

import pygit2
import pytest
from toy_compose import MOD_V1, commit_tag, compose, git

from vllm_compose import precompiled, precompiled_hook
from vllm_compose.composed_branch import open_branch
from vllm_compose.series_diff import entry_commits

BRANCH = "compose-101-v1.0.0"

TOY_SETUP = textwrap.dedent(
    """\
    import importlib.util
    import os
    import sys
    import zipfile
    from pathlib import Path

    from setuptools import setup


    def load_module_from_path(module_name, path):
        spec = importlib.util.spec_from_file_location(module_name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[module_name] = module
        spec.loader.exec_module(module)
        return module


    ROOT_DIR = Path(__file__).parent
    if os.environ.get("VLLM_USE_PRECOMPILED", "").lower() not in ("1", "true"):
        raise RuntimeError("Could NOT find CUDA")  # what a source build says on a machine without CUDA
    with zipfile.ZipFile(os.environ["VLLM_PRECOMPILED_WHEEL_LOCATION"]) as wheel:
        (ROOT_DIR / "vllm" / "_C.abi3.so").write_bytes(wheel.read("vllm/_C.abi3.so"))
    version = os.environ.get("VLLM_VERSION_OVERRIDE") or "1.0.0"
    (ROOT_DIR / "vllm" / "_version.py").write_text(f"__version__ = version = {version!r}\\n")
    setup(name="vllm", version=version, packages=["vllm", "pkg"])
    """
)

RELEASE_FILES = {
    "pkg/mod.py": MOD_V1,
    "pkg/__init__.py": "",
    "setup.py": TOY_SETUP,
    "vllm/__init__.py": "from vllm._version import __version__\n",
    # what an sdist import tracks and the build rewrites
    "vllm/_version.py": "__version__ = version = '1.0.0'\n",
    "PKG-INFO": "Metadata-Version: 2.1\nName: vllm\nVersion: 1.0.0\n",
    "vllm.egg-info/PKG-INFO": "Metadata-Version: 2.1\nName: vllm\nVersion: 1.0.0\n",
    "vllm.egg-info/SOURCES.txt": "setup.py\n",
    # upstream's own .gitignore has these (vLLM's: /vllm/_version.py, __pycache__/, *.egg-info/, *.so, build/)
    ".gitignore": "/vllm/_version.py\n__pycache__/\n*.egg-info/\n*.so\nbuild/\n",
}


@pytest.fixture
def stock_wheel(tmp_path) -> Path:
    path = tmp_path / "wheels" / "vllm-1.0.0-cp38-abi3-manylinux_2_28_x86_64.whl"
    path.parent.mkdir()
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("vllm/_C.abi3.so", b"\x7fELF compiled kernels of 1.0.0")
    return path


def pin(series: Path, wheel: Path, versions=("1.0.0", "1.1.0"), sha256: str | None = None) -> str:
    digest = sha256 or hashlib.sha256(wheel.read_bytes()).hexdigest()
    rows = [
        f'[[wheel]]\nversion = "{v}"\narch = "{arch}"\nfilename = "{wheel.name}"\nsize = {wheel.stat().st_size}\n'
        f'sha256 = "{digest}"\nurl = "{wheel.as_uri()}"\n'
        for v in versions
        for arch in ("x86_64", "aarch64")
    ]
    (series / "stock-wheels.toml").write_text("\n".join(rows))
    return digest


@pytest.fixture
def toy_vllm(tmp_path) -> Path:
    """A clean worktree on a detached HEAD with releases v1.0.0 and v1.1.0 (lines added above: an offset)."""
    work = tmp_path / "vllm"
    work.mkdir()
    git(work, "init", "-q", "-b", "main")
    commit_tag(work, "v1.0.0", RELEASE_FILES)
    commit_tag(work, "v1.1.0", {"pkg/mod.py": '"""The toy module."""\n\nDEBUG = False\n' + MOD_V1})
    git(work, "checkout", "-q", "--detach", "v1.0.0")
    return work


def test_the_branch_ends_with_the_build_setup_and_the_entries_stay_as_they_are(
    toy_series,
    toy_vllm,
    stock_wheel,
    capsys,
):
    digest = pin(toy_series, stock_wheel)
    assert compose(toy_series, toy_vllm, "v1.0.0") == 0
    out = capsys.readouterr().out
    repo = pygit2.Repository(str(toy_vllm))
    tip = repo.revparse_single(BRANCH).peel(pygit2.Commit)
    assert tip.message.startswith("Build over the precompiled stock wheel of vLLM 1.0.0\n")
    assert precompiled.BUILD_TRAILER in tip.message and "Series-Entry" not in tip.message
    branch = open_branch(toy_vllm, toy_series, "v1.0.0")
    assert branch.tip.id == tip.id and branch.head.id == tip.parents[0].id
    assert branch.entries == ["pr101", "fix-farewell"]
    assert [e for e, _ in entry_commits(repo, BRANCH, "v1.0.0")] == ["pr101", "fix-farewell"]
    # what the overlay wheel and the image carry: the entries' changes only, not setup.py or the deletions
    assert branch.changed == ["pkg/mod.py"]
    spec = json.loads(repo[tip.tree[".vllm-compose/precompiled.json"].id].data)
    assert spec["version"] == f"1.0.0+{branch.label}" and spec["wheels"]["x86_64"]["sha256"] == digest
    assert repo[tip.tree[".vllm-compose/precompiled.py"].id].data == Path(precompiled_hook.__file__).read_bytes()
    setup_py = repo[tip.tree["setup.py"].id].data.decode()
    assert "ROOT_DIR = Path(__file__).parent\n" + precompiled.SETUP_LINES in setup_py
    for gone in ("vllm/_version.py", "PKG-INFO", "vllm.egg-info/PKG-INFO", "vllm.egg-info/SOURCES.txt"):
        with pytest.raises(KeyError):
            tip.tree[gone]
    assert f"build: `pip install -e vllm/` builds vllm 1.0.0+{branch.label} over the stock wheel" in out
    assert f"checked out {BRANCH}" in out  # the clean worktree now has the branch, build setup included


def test_a_release_without_a_pinned_wheel_gets_no_build_setup_and_says_so(toy_series, toy_vllm, capsys):
    assert compose(toy_series, toy_vllm, "v1.0.0") == 0
    assert "no precompiled build setup:" in capsys.readouterr().out
    tip = pygit2.Repository(str(toy_vllm)).revparse_single(BRANCH).peel(pygit2.Commit)
    assert "Series-Entry: fix-farewell" in tip.message


def run_setup(tree: Path, cache: Path, **env: str) -> subprocess.CompletedProcess:
    """vLLM's setup.py as pip's build backend runs it (here: `setup.py --version`, no install)."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith("VLLM_")}
    return subprocess.run(
        [sys.executable, "setup.py", "--version"],
        cwd=tree,
        env={**clean, "VLLM_COMPOSE_CACHE": str(cache), **env},
        capture_output=True,
        text=True,
    )


def test_the_build_takes_the_verified_stock_wheel_labels_the_version_and_leaves_the_tree_clean(
    toy_series,
    toy_vllm,
    stock_wheel,
    tmp_path,
    capsys,
):
    digest = pin(toy_series, stock_wheel)
    assert compose(toy_series, toy_vllm, "v1.0.0") == 0
    label = open_branch(toy_vllm, toy_series, "v1.0.0").label
    cache = tmp_path / "user-cache"
    done = run_setup(toy_vllm, cache)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == f"1.0.0+{label}"
    assert "downloading file://" in done.stderr
    assert (cache / "sha256" / digest).read_bytes() == stock_wheel.read_bytes()
    assert json.loads((cache / "names" / stock_wheel.name).read_text())["sha256"] == digest
    assert (cache / "names" / stock_wheel.name).stat().st_mode & 0o777 == 0o644  # readable by the cache's sharers
    assert (toy_vllm / "vllm" / "_C.abi3.so").read_bytes() == b"\x7fELF compiled kernels of 1.0.0"
    assert (toy_vllm / "vllm" / "_version.py").read_text() == f"__version__ = version = '1.0.0+{label}'\n"
    assert (toy_vllm / "vllm.egg-info" / "PKG-INFO").is_file()  # setuptools wrote it
    assert git(toy_vllm, "status", "--porcelain") == ""  # build outputs are untracked and ignored
    again = run_setup(toy_vllm, cache)  # the second build reads the cache (and checks it again)
    assert again.returncode == 0 and "from the cache" in again.stderr and "downloading" not in again.stderr
    # the next release composes (the worktree is clean) and is checked out
    capsys.readouterr()
    assert compose(toy_series, toy_vllm, "v1.1.0") == 0
    assert "checked out compose-101-v1.1.0" in capsys.readouterr().out
    assert git(toy_vllm, "rev-parse", "--abbrev-ref", "HEAD") == "compose-101-v1.1.0"


def test_without_the_build_setup_the_toy_build_fails_like_a_cuda_build(toy_series, toy_vllm, tmp_path):
    """The control: the toy setup.py is the plain `pip install -e vllm/` failure of a CUDA build."""
    assert compose(toy_series, toy_vllm, "v1.0.0") == 0  # no stock-wheels.toml: no build setup
    done = run_setup(toy_vllm, tmp_path / "cache")
    assert done.returncode != 0 and "Could NOT find CUDA" in done.stderr


def test_a_wheel_with_another_sha256_is_refused_and_nothing_is_kept(
    toy_series,
    toy_vllm,
    stock_wheel,
    tmp_path,
):
    pin(toy_series, stock_wheel, sha256="0" * 64)
    assert compose(toy_series, toy_vllm, "v1.0.0") == 0
    cache = tmp_path / "user-cache"
    done = run_setup(toy_vllm, cache)
    assert done.returncode != 0
    assert f"precompiled.json pins {stock_wheel.stat().st_size} bytes with sha256 {'0' * 64}" in done.stderr
    assert "Nothing was kept" in done.stderr
    assert [p.name for p in (cache / "sha256").iterdir()] == []  # no blob, no .incoming-* file
    assert not (toy_vllm / "vllm" / "_C.abi3.so").exists()


def test_the_environment_wins_and_use_precompiled_0_steps_aside(tmp_path, stock_wheel):
    tree = tmp_path / "tree"
    (tree / ".vllm-compose").mkdir(parents=True)
    pin_row = {
        "filename": stock_wheel.name,
        "size": stock_wheel.stat().st_size,
        "sha256": hashlib.sha256(stock_wheel.read_bytes()).hexdigest(),
        "url": stock_wheel.as_uri(),
    }
    spec = {
        "release": "1.0.0",
        "version": "1.0.0+compose.101.gabc1234",
        "wheels": {"x86_64": pin_row, "aarch64": pin_row},
    }
    (tree / ".vllm-compose" / "precompiled.json").write_text(json.dumps(spec))
    logs: list[str] = []
    assert precompiled_hook.configure(tree, {"VLLM_USE_PRECOMPILED": "0"}, logs.append) == {}
    env = {"VLLM_VERSION_OVERRIDE": "9.9.9", precompiled_hook.WHEEL_ENV: str(stock_wheel)}
    chosen = precompiled_hook.configure(tree, env, logs.append)
    assert env["VLLM_VERSION_OVERRIDE"] == "9.9.9" and "VLLM_VERSION_OVERRIDE" not in chosen
    assert chosen["VLLM_PRECOMPILED_WHEEL_LOCATION"] == str(stock_wheel) and chosen["VLLM_USE_PRECOMPILED"] == "1"
    bad = tmp_path / "other.whl"
    bad.write_bytes(b"not it")
    with pytest.raises(precompiled_hook.PrecompiledSetupError, match="is not vllm-1.0.0"):
        precompiled_hook.configure(tree, {precompiled_hook.WHEEL_ENV: str(bad)}, logs.append)


def test_plain_pip_install_e_builds_over_the_stock_wheel(toy_series, toy_vllm, stock_wheel, tmp_path):
    """The user's command itself, `pip install -e vllm/`, with no VLLM_* variable (into a separate prefix; the
    toy needs nothing from an index, so the build runs without isolation and without dependencies)."""
    pin(toy_series, stock_wheel)
    assert compose(toy_series, toy_vllm, "v1.0.0") == 0
    label = open_branch(toy_vllm, toy_series, "v1.0.0").label
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("VLLM_", "PIP_"))}
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "-q",
            "--no-build-isolation",
            "--no-deps",
            "--no-index",
            "--prefix",
            str(tmp_path / "prefix"),
            "-e",
            str(toy_vllm),
        ],
        env={**clean, "VLLM_COMPOSE_CACHE": str(tmp_path / "user-cache")},
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    installed = list((tmp_path / "prefix").rglob(f"vllm-1.0.0+{label}.dist-info"))
    assert installed, sorted(p.name for p in (tmp_path / "prefix").rglob("*.dist-info"))
    assert git(toy_vllm, "status", "--porcelain") == ""


def test_setup_py_without_the_hook_file_builds_as_vllm_does(toy_series, toy_vllm, stock_wheel, tmp_path):
    """An sdist built from the compose tree leaves `.vllm-compose/` out (vLLM's MANIFEST.in): setup.py then runs as
    vLLM's own, instead of failing on a missing file."""
    pin(toy_series, stock_wheel)
    assert compose(toy_series, toy_vllm, "v1.0.0") == 0
    (toy_vllm / ".vllm-compose" / "precompiled.py").unlink()
    done = run_setup(toy_vllm, tmp_path / "cache")
    assert done.returncode != 0 and "Could NOT find CUDA" in done.stderr and "FileNotFoundError" not in done.stderr


def editable_install(tree: Path, venv: Path, cache: Path, *pip_args: str) -> subprocess.CompletedProcess:
    """`pip install -e tree` into the virtual environment `venv` (made here, without pip: this interpreter's pip and
    setuptools build and install into it, so the build needs no index)."""
    if not venv.exists():
        subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("VLLM_", "PIP_", "PYTHON"))}
    argv = [sys.executable, "-m", "pip", "install", "-q", "--no-build-isolation", "--no-deps", "--no-index"]
    return subprocess.run(
        [*argv, "--prefix", str(venv), *pip_args, "-e", str(tree)],
        env={**clean, "VLLM_COMPOSE_CACHE": str(cache)},
        capture_output=True,
        text=True,
    )


def import_vllm(venv: Path, cwd: Path) -> subprocess.CompletedProcess:
    """The sanity check the docs give, run with the venv's interpreter from `cwd`."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    program = "import vllm; print(vllm.__version__, vllm.__file__)"
    return subprocess.run(
        [str(venv / "bin" / "python"), "-c", program], cwd=cwd, env=clean, capture_output=True, text=True
    )


def test_import_vllm_finds_the_editable_install_from_the_project_root(toy_series, toy_vllm, stock_wheel, tmp_path):
    """The user's layout: the project root holds the vLLM tree as its `vllm/` submodule (here `tmp_path/vllm`), and
    scripts, `python -m` and notebooks start from the root, where `vllm/` is on the path before site-packages.
    setuptools' default editable install (an import hook) comes too late there: the path search has settled on
    `vllm/` as an empty namespace package. The build setup's setup.cfg makes the install path-based, and the
    tree's root on `sys.path` gives `vllm/vllm/__init__.py`, a regular package, from every folder."""
    pin(toy_series, stock_wheel)
    assert compose(toy_series, toy_vllm, "v1.0.0") == 0
    label = open_branch(toy_vllm, toy_series, "v1.0.0").label
    repo = pygit2.Repository(str(toy_vllm))
    tip = repo.revparse_single(BRANCH).peel(pygit2.Commit)
    assert repo[tip.tree["setup.cfg"].id].data.decode() == precompiled.EDITABLE_SECTION.lstrip("\n")
    venv, cache = tmp_path / "venv", tmp_path / "user-cache"
    done = editable_install(toy_vllm, venv, cache)
    assert done.returncode == 0, done.stderr
    purelib = subprocess.run(
        [str(venv / "bin" / "python"), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    (pth,) = Path(purelib).glob("__editable__.vllm-*.pth")  # the path entry, not an import hook
    assert pth.read_text().strip() == str(toy_vllm)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    for cwd in (tmp_path, elsewhere, toy_vllm.parent / "vllm" / "pkg"):
        ran = import_vllm(venv, cwd)
        assert ran.returncode == 0, (cwd, ran.stderr)
        assert ran.stdout.split() == [f"1.0.0+{label}", str(toy_vllm / "vllm" / "__init__.py")], cwd
    assert git(toy_vllm, "status", "--porcelain") == ""

    # the control: the default import hook, asked for on the command line (which overrides setup.cfg), finds the
    # package from elsewhere but not from the project root, where the submodule folder shadows it
    hooked = tmp_path / "venv-hook"
    done = editable_install(toy_vllm, hooked, cache, "--config-settings", "editable_mode=lenient")
    assert done.returncode == 0, done.stderr
    assert import_vllm(hooked, elsewhere).stdout.split()[0] == f"1.0.0+{label}"
    shadowed = import_vllm(hooked, tmp_path)
    assert shadowed.returncode != 0 and "has no attribute '__version__'" in shadowed.stderr


@pytest.mark.parametrize(
    ("before", "after"),
    [
        (None, precompiled.EDITABLE_SECTION.lstrip("\n")),
        (
            "[egg_info]\ntag_build = \ntag_date = 0\n",
            "[egg_info]\ntag_build = \ntag_date = 0\n" + precompiled.EDITABLE_SECTION,
        ),
        ("[metadata]\nname = vllm", "[metadata]\nname = vllm\n" + precompiled.EDITABLE_SECTION),
        ("[editable_wheel]\nmode = strict\n", None),  # the tree's own choice stands; a second section is unreadable
    ],
)
def test_setup_cfg_gets_the_editable_section_once(tmp_path, before, after):
    """An sdist import brings vLLM's setup.cfg (`[egg_info]`); upstream's git tree has none."""
    repo = pygit2.init_repository(str(tmp_path / "r"), bare=True)
    files = {"setup.cfg": before} if before is not None else {"README": "x"}
    builder = repo.TreeBuilder()
    for name, text in files.items():
        builder.insert(name, repo.create_blob(text.encode()), pygit2.GIT_FILEMODE_BLOB)
    from vllm_compose.trees import GitTree

    changes = precompiled._editable_mode(GitTree(repo, repo[builder.write()]))
    assert changes == ({} if after is None else {"setup.cfg": after.encode()})
