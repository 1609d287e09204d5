"""Tests for artifacts/wheel.py on a small synthetic look-alike of the stock vLLM wheel built here.

The real 300 MB wheel is only used by the `sdist`-marked measurement test, which skips when it is not cached.
"""

from __future__ import annotations

import csv
import errno
import hashlib
import io
import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from release_trees import find_stock_wheel
from toy_vllm import record_hash
from toy_wheel import OLD_INFO, SOURCE_FILES, STOCK_NAME, VERSION_PY, make_stock_wheel

from vllm_compose.artifacts import wheel as wheel_mod
from vllm_compose.artifacts.editable import editable_install
from vllm_compose.artifacts.wheel import (
    SourceBuildRequired,
    WheelError,
    build_overlay_wheel,
    fetch_stock_wheel,
    needs_source_build,
    overlay_version,
    rewrite_version_file,
    verify_wheel,
)
from vllm_compose.cache import Cache, seed_cache
from vllm_compose.errors import ComposeError, SourceError
from vllm_compose.trees import DirTree, OverlayTree

LABEL = "compose.46994.38476"
NEW_VERSION = "0.26.0+compose.46994.38476"
NEW_NAME = f"vllm-{NEW_VERSION}-cp38-abi3-manylinux_2_28_x86_64.whl"
NEW_INFO = f"vllm-{NEW_VERSION}.dist-info/"


def source_tree(folder: Path) -> DirTree:
    for rel, text in SOURCE_FILES.items():
        p = folder / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    return DirTree(folder)


COMPOSED_CHANGES = {
    "vllm/platforms/cuda.py": b"PRIORITY = ['FLASH_MLA', 'TRITON_MLA_SPARSE']\n",
    "vllm/attention/triton_mla_sparse.py": b"class TritonMLASparseBackend:\n    pass\n",
    "vllm/models/mimo_mtp.py": None,
    "tests/test_sparse.py": b"def test_x():\n    pass\n",
}


@pytest.fixture
def built(tmp_path: Path) -> tuple[Path, Path]:
    stock = make_stock_wheel(tmp_path / "stock")
    composed = OverlayTree(source_tree(tmp_path / "src"), COMPOSED_CHANGES)
    out = build_overlay_wheel(stock, composed, list(COMPOSED_CHANGES), LABEL, tmp_path / "out")
    return stock, out


def _contents(path: Path) -> dict[str, bytes]:
    with zipfile.ZipFile(path) as zf:
        return {i.filename: zf.read(i) for i in zf.infolist()}


def test_overlay_wheel_name_and_contents(built) -> None:
    stock, out = built
    assert out.name == NEW_NAME
    assert sorted(p.name for p in out.parent.iterdir()) == [NEW_NAME]
    new = _contents(out)
    assert _contents(stock)["vllm/platforms/cuda.py"] != new["vllm/platforms/cuda.py"]
    assert new["vllm/platforms/cuda.py"] == COMPOSED_CHANGES["vllm/platforms/cuda.py"]
    assert new["vllm/attention/triton_mla_sparse.py"] == COMPOSED_CHANGES["vllm/attention/triton_mla_sparse.py"]
    assert "vllm/models/mimo_mtp.py" not in new
    assert "tests/test_sparse.py" not in new
    assert not any(n.startswith(OLD_INFO) for n in new)
    meta = new[NEW_INFO + "METADATA"].decode()
    assert f"\nVersion: {NEW_VERSION}\n" in meta
    assert "Version: 0.26.0 is mentioned in the description too" in meta
    version_py = new["vllm/_version.py"].decode()
    assert f"__version__ = version = '{NEW_VERSION}'" in version_py
    assert "__version_tuple__ = version_tuple = (0, 26, 0, 'compose.46994.38476')" in version_py
    assert "__commit_id__ = commit_id = 'g0123456'" in version_py


def test_everything_else_is_byte_identical(built) -> None:
    stock, out = built
    old, new = _contents(stock), _contents(out)
    rewritten = {"vllm/platforms/cuda.py", "vllm/_version.py", "vllm/models/mimo_mtp.py"}
    for name, data in old.items():
        if name in rewritten or name.startswith(OLD_INFO):
            continue
        assert new[name] == data, name
    for leaf in ("WHEEL", "entry_points.txt"):
        assert new[NEW_INFO + leaf] == old[OLD_INFO + leaf]
    with zipfile.ZipFile(stock) as a, zipfile.ZipFile(out) as b:
        so_a, so_b = a.getinfo("vllm/_C.abi3.so"), b.getinfo("vllm/_C.abi3.so")
        assert (so_a.CRC, so_a.compress_size, so_a.external_attr, so_a.date_time) == (
            so_b.CRC,
            so_b.compress_size,
            so_b.external_attr,
            so_b.date_time,
        )
        assert b.testzip() is None


def test_record_is_complete_and_correct(built) -> None:
    _, out = built
    new = _contents(out)
    rows = list(csv.reader(io.StringIO(new[NEW_INFO + "RECORD"].decode())))
    assert {r[0] for r in rows} == set(new)
    for name, digest, size in rows:
        if name == NEW_INFO + "RECORD":
            assert (digest, size) == ("", "")
        else:
            assert digest == record_hash(new[name]) and int(size) == len(new[name]), name
    assert verify_wheel(out) == len(new) - 1


def test_pip_installs_the_overlay(built, tmp_path: Path) -> None:
    _, out = built
    target = tmp_path / "site"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--no-deps",
            "--no-index",
            "--no-compile",
            "--target",
            str(target),
            str(out),
        ],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stderr
    new = _contents(out)
    for name, data in new.items():
        if name.startswith("vllm/"):
            assert (target / name).read_bytes() == data, name
    assert (target / NEW_INFO / "METADATA").is_file()
    assert not (target / "vllm/models/mimo_mtp.py").exists()
    probe = subprocess.run(
        [sys.executable, "-c", "import vllm; print(vllm.__version__)"],
        cwd=target,
        capture_output=True,
        text=True,
    )
    assert probe.stdout.strip() == NEW_VERSION, probe.stderr


def test_changed_version_file_still_gets_the_label(tmp_path: Path) -> None:
    stock = make_stock_wheel(tmp_path / "stock")
    composed = OverlayTree(
        source_tree(tmp_path / "src"), {"vllm/_version.py": VERSION_PY.replace("g0123456", "gabc").encode()}
    )
    out = build_overlay_wheel(stock, composed, ["vllm/_version.py"], LABEL, tmp_path / "out")
    text = _contents(out)["vllm/_version.py"].decode()
    assert f"'{NEW_VERSION}'" in text and "'gabc'" in text


@pytest.mark.parametrize(
    "path",
    [
        "csrc/attention/mla.cu",
        "CMakeLists.txt",
        "cmake/utils.cmake",
        "setup.py",
        "requirements/cuda.txt",
        "kernels/x.h",
    ],
)
def test_refuses_compiled_sources(tmp_path: Path, path: str) -> None:
    stock = make_stock_wheel(tmp_path / "stock")
    composed = OverlayTree(source_tree(tmp_path / "src"), {path: b"changed\n"})
    with pytest.raises(SourceBuildRequired, match="source build|compiled sources") as info:
        build_overlay_wheel(stock, composed, [path, "vllm/platforms/cuda.py"], LABEL, tmp_path / "out")
    assert info.value.file == path and "pip install -e" in info.value.hint
    assert not (tmp_path / "out").exists() or list((tmp_path / "out").iterdir()) == []


def test_package_cpp_is_data_not_compiled() -> None:
    assert not needs_source_build("vllm/ops/kernel_src/indexer.cpp")
    assert needs_source_build("csrc/ops.h")
    assert not needs_source_build("docs/index.md")


def test_truncated_wheel_refused(tmp_path: Path) -> None:
    stock = make_stock_wheel(tmp_path / "stock")
    data = stock.read_bytes()
    stock.write_bytes(data[: len(data) // 2])
    with pytest.raises(WheelError, match=STOCK_NAME) as info:
        build_overlay_wheel(stock, source_tree(tmp_path / "src"), [], LABEL, tmp_path / "out")
    assert "fetch it again" in info.value.hint
    assert not (tmp_path / "out").exists() or list((tmp_path / "out").iterdir()) == []


def test_damaged_member_refused(tmp_path: Path) -> None:
    stock = make_stock_wheel(tmp_path / "stock")
    with zipfile.ZipFile(stock) as zf:
        info = zf.getinfo("vllm/_C.abi3.so")
        offset = info.header_offset + 30 + len(info.filename) + len(info.extra) + 5000
    raw = bytearray(stock.read_bytes())
    raw[offset] ^= 0xFF
    stock.write_bytes(bytes(raw))
    with pytest.raises(WheelError, match="vllm/_C.abi3.so") as info:
        build_overlay_wheel(stock, source_tree(tmp_path / "src"), [], LABEL, tmp_path / "out")
    assert info.value.file == "vllm/_C.abi3.so"
    assert list((tmp_path / "out").iterdir()) == []


def test_record_mismatch_refused(tmp_path: Path) -> None:
    stock = make_stock_wheel(tmp_path / "stock", tamper={"vllm/__init__.py": b"import os\n"})
    with pytest.raises(WheelError, match="RECORD hash mismatch for vllm/__init__.py"):
        build_overlay_wheel(stock, source_tree(tmp_path / "src"), [], LABEL, tmp_path / "out")
    assert list((tmp_path / "out").iterdir()) == []
    with pytest.raises(WheelError, match="RECORD hash mismatch for vllm/__init__.py"):
        verify_wheel(stock)


def test_disk_full_leaves_no_wheel(tmp_path: Path, monkeypatch) -> None:
    stock = make_stock_wheel(tmp_path / "stock")
    real_open = wheel_mod._open_temp_output

    class FillsUp(io.FileIO):
        written = 0

        def write(self, data):
            FillsUp.written += len(data)
            if FillsUp.written > 1_000_000:
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
            return super().write(data)

    def open_full(out_dir, name):
        path, fh = real_open(out_dir, name)
        fh.close()
        return path, FillsUp(path, "w+b")

    monkeypatch.setattr(wheel_mod, "_open_temp_output", open_full)
    with pytest.raises(WheelError, match="No space left on device") as info:
        build_overlay_wheel(stock, source_tree(tmp_path / "src"), [], LABEL, tmp_path / "out")
    assert "no partial wheel was kept" in info.value.hint
    assert list((tmp_path / "out").iterdir()) == []


@pytest.mark.skipif(os.geteuid() == 0, reason="root ignores directory permissions")
def test_read_only_output_dir(tmp_path: Path) -> None:
    stock = make_stock_wheel(tmp_path / "stock")
    out = tmp_path / "out"
    out.mkdir()
    out.chmod(0o555)
    try:
        with pytest.raises(WheelError, match="cannot write into"):
            build_overlay_wheel(stock, source_tree(tmp_path / "src"), [], LABEL, out)
    finally:
        out.chmod(0o755)
    assert list(out.iterdir()) == []


def test_failed_rename_leaves_no_wheel(tmp_path: Path, monkeypatch) -> None:
    stock = make_stock_wheel(tmp_path / "stock")

    def no_rename(src, dst):
        raise OSError(errno.EROFS, os.strerror(errno.EROFS))

    monkeypatch.setattr(wheel_mod.os, "replace", no_rename)
    with pytest.raises(WheelError, match="Read-only file system"):
        build_overlay_wheel(stock, source_tree(tmp_path / "src"), [], LABEL, tmp_path / "out")
    assert list((tmp_path / "out").iterdir()) == []


def test_refuses_a_tree_of_another_release(tmp_path: Path) -> None:
    stock = make_stock_wheel(tmp_path / "stock")
    composed = OverlayTree(
        source_tree(tmp_path / "src"), {"PKG-INFO": b"Metadata-Version: 2.4\nName: vllm\nVersion: 0.27.0\n"}
    )
    with pytest.raises(WheelError, match="tree is vLLM 0.27.0 but the stock wheel is 0.26.0"):
        build_overlay_wheel(stock, composed, [], LABEL, tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_version_label_validation() -> None:
    assert overlay_version("0.26.0", "compose.46994.38476") == NEW_VERSION
    assert overlay_version("0.26.0", "+Compose-1") == "0.26.0+compose.1"
    assert overlay_version("0.26.0+cu129", "compose.1") == "0.26.0+cu129.compose.1"
    for bad in ("", "compose 1", "compose/1"):
        with pytest.raises(WheelError, match="label"):
            overlay_version("0.26.0", bad)


def test_rewrite_version_file_requires_version_line() -> None:
    with pytest.raises(WheelError, match="_version.py"):
        rewrite_version_file("VERSION = '1'\n", NEW_VERSION)


# --- fetching the stock wheel from an index --------------------------------------------------------------------

INDEX = "https://pypi.example.invalid/simple/"
WHEEL_URL = "https://pypi.example.invalid/files/x86.whl"


def serve_index(fake_http, stock: Path, sha: str | None = None, html: bool = False) -> None:
    """An index page listing the stock wheel (plus an aarch64 wheel and the sdist) and the wheel's bytes."""
    body = stock.read_bytes()
    digest = sha or hashlib.sha256(body).hexdigest()
    files = [
        {
            "filename": "vllm-0.26.0-cp38-abi3-manylinux_2_28_aarch64.whl",
            "url": "../../files/aarch64.whl",
            "hashes": {"sha256": "1" * 64},
        },
        {"filename": STOCK_NAME, "url": "../../files/x86.whl", "hashes": {"sha256": digest}},
        {"filename": "vllm-0.26.0.tar.gz", "url": "../../files/sdist.tar.gz", "hashes": {"sha256": "2" * 64}},
    ]
    if html:
        links = "".join(f'<a href="{f["url"]}#sha256={f["hashes"]["sha256"]}">{f["filename"]}</a><br/>' for f in files)
        fake_http.serve(INDEX + "vllm/", f"<html><body>{links}</body></html>".encode(), "text/html")
    else:
        page = json.dumps({"meta": {"api-version": "1.1"}, "name": "vllm", "files": files}).encode()
        fake_http.serve(INDEX + "vllm/", page, "application/vnd.pypi.simple.v1+json")
    fake_http.serve(WHEEL_URL, body, "application/zip")


@pytest.mark.parametrize("html", [False, True])
def test_fetch_stock_wheel_and_cache(tmp_path: Path, cache: Cache, fake_http, html: bool) -> None:
    stock = make_stock_wheel(tmp_path / "stock")
    serve_index(fake_http, stock, html=html)
    events = []
    got = fetch_stock_wheel("0.26.0", cache, index_url=INDEX, progress=lambda *e: events.append(e))
    assert got == cache.root / "wheels" / STOCK_NAME and got.read_bytes() == stock.read_bytes()
    digest = hashlib.sha256(stock.read_bytes()).hexdigest()
    assert os.path.samefile(got, cache.blob_path(digest))  # the content-addressed blob, under its own name
    assert cache.lookup_name(STOCK_NAME) == (digest, INDEX)
    assert fake_http.requests == [INDEX + "vllm/", WHEEL_URL]
    assert events[-1] == (f"download {Path(WHEEL_URL).name}", stock.stat().st_size, stock.stat().st_size)
    # second call: served from the cache (found by name, re-verified by content), no network, offline too
    fake_http.routes.clear()
    assert fetch_stock_wheel("0.26.0", cache, index_url=INDEX) == got
    assert fetch_stock_wheel("0.26.0", cache, offline=True) == got
    assert fake_http.requests == [INDEX + "vllm/", WHEEL_URL]


def test_fetch_offline_uses_a_seeded_wheel_or_says_how_to_proceed(tmp_path: Path, cache: Cache, fake_http) -> None:
    with pytest.raises(SourceError, match="offline") as info:
        fetch_stock_wheel("0.26.0", cache, offline=True)
    assert "--stock-wheel" in info.value.hint
    stock = make_stock_wheel(tmp_path / "stock")
    seed_cache(stock.parent, cache)
    got = fetch_stock_wheel("0.26.0", cache, offline=True)
    assert got.name == STOCK_NAME and got.read_bytes() == stock.read_bytes()
    assert fake_http.requests == []


def test_fetch_refuses_hash_mismatch(tmp_path: Path, cache: Cache, fake_http) -> None:
    stock = make_stock_wheel(tmp_path / "stock")
    serve_index(fake_http, stock, sha="f" * 64)
    with pytest.raises(SourceError, match="sha256 mismatch"):
        fetch_stock_wheel("0.26.0", cache, index_url=INDEX)
    assert list(cache.blob_dir.iterdir()) == []
    assert not (cache.root / "wheels").exists() and cache.known_names() == []


def test_fetch_redownloads_a_damaged_cache_entry(tmp_path: Path, cache: Cache, fake_http) -> None:
    stock = make_stock_wheel(tmp_path / "stock")
    serve_index(fake_http, stock)
    got = fetch_stock_wheel("0.26.0", cache, index_url=INDEX)
    got.write_bytes(b"bit rot")
    assert fetch_stock_wheel("0.26.0", cache, index_url=INDEX).read_bytes() == stock.read_bytes()
    assert len(fake_http.requests) == 4


def test_fetch_unknown_version_or_project(tmp_path: Path, cache: Cache, fake_http) -> None:
    stock = make_stock_wheel(tmp_path / "stock")
    serve_index(fake_http, stock)
    with pytest.raises(SourceError, match="no vllm 0.27.0 abi3 wheel"):
        fetch_stock_wheel("0.27.0", cache, index_url=INDEX)
    fake_http.routes.clear()
    fake_http.refuse(INDEX + "vllm/", 404)
    with pytest.raises(SourceError, match="answered 404") as info:
        fetch_stock_wheel("0.26.0", cache, index_url=INDEX)
    assert "--stock-wheel" in info.value.hint


def test_fetch_refuses_a_wheel_without_a_digest(tmp_path: Path, cache: Cache, fake_http) -> None:
    page = f'<a href="../../files/x86.whl">{STOCK_NAME}</a>'.encode()
    fake_http.serve(INDEX + "vllm/", page, "text/html")
    with pytest.raises(SourceError, match="no sha256"):
        fetch_stock_wheel("0.26.0", cache, index_url=INDEX)
    assert fake_http.requests == [INDEX + "vllm/"]


# --- the real stock wheel (measurement; skipped unless $VLLM_COMPOSE_STOCK_WHEEL or the cache has it) -----------


@pytest.mark.sdist
@pytest.mark.slow
def test_real_wheel_overlay(tmp_path: Path, release_v0260: Path, stock_wheel_v0260: Path) -> None:
    base = DirTree(release_v0260)
    changed = ["vllm/platforms/cuda.py", "vllm/model_executor/models/registry.py"]
    composed = OverlayTree(base, {p: base.read(p) + b"\n# composed\n" for p in changed})
    out = build_overlay_wheel(stock_wheel_v0260, composed, changed, LABEL, tmp_path)
    assert out.name == NEW_NAME
    with zipfile.ZipFile(out) as zf:
        assert zf.read("vllm/platforms/cuda.py").endswith(b"# composed\n")
        assert f"'{NEW_VERSION}'".encode() in zf.read("vllm/_version.py")


# --- the precompiled editable install -----------------------------------------------------------------------------

SETUP_PY_LOOKALIKE = """\
import os
from setuptools import setup

def version():
    if env_version := os.getenv("VLLM_VERSION_OVERRIDE"):
        return env_version
    wheel = os.getenv("VLLM_PRECOMPILED_WHEEL_LOCATION")
    return "0.26.0"

setup(version=version())
"""
ENVS_PY_LOOKALIKE = """\
environment_variables = {
    "VLLM_USE_PRECOMPILED": lambda: os.environ.get("VLLM_USE_PRECOMPILED"),
    "VLLM_SKIP_PRECOMPILED_VERSION_SUFFIX": lambda: os.environ.get("VLLM_SKIP_PRECOMPILED_VERSION_SUFFIX"),
}
"""


def _editable_tree(folder: Path, version: str = "0.26.0", setup_py: str = SETUP_PY_LOOKALIKE) -> Path:
    (folder / "vllm").mkdir(parents=True)
    (folder / "setup.py").write_text(setup_py)
    (folder / "vllm" / "envs.py").write_text(ENVS_PY_LOOKALIKE)
    (folder / "PKG-INFO").write_text(f"Metadata-Version: 2.4\nName: vllm\nVersion: {version}\n")
    return folder


def test_editable_install_env_and_argv(tmp_path: Path) -> None:
    tree = _editable_tree(tmp_path / "vllm-src")
    stock = make_stock_wheel(tmp_path / "stock")
    plan = editable_install(tree, stock, LABEL, python="/usr/bin/python3")
    assert plan.env == {
        "VLLM_USE_PRECOMPILED": "1",
        "VLLM_PRECOMPILED_WHEEL_LOCATION": str(stock.resolve()),
        "VLLM_VERSION_OVERRIDE": NEW_VERSION,
        "VLLM_SKIP_PRECOMPILED_VERSION_SUFFIX": "1",
    }
    assert plan.argv == ["/usr/bin/python3", "-m", "pip", "install", "--editable", str(tree.resolve())]
    assert plan.version == NEW_VERSION and plan.version_labelled
    assert sorted(plan.honoured) == sorted(plan.env)
    assert plan.shell().startswith("VLLM_USE_PRECOMPILED=1 ") and plan.shell().endswith(f"--editable {tree.resolve()}")
    no_iso = editable_install(tree, stock, LABEL, build_isolation=False)
    assert no_iso.argv[-1] == "--no-build-isolation" and no_iso.argv[0] == sys.executable


def test_editable_install_notices_missing_override(tmp_path: Path) -> None:
    tree = _editable_tree(tmp_path / "vllm-src", setup_py="from setuptools import setup\nsetup()\n")
    plan = editable_install(tree, make_stock_wheel(tmp_path / "stock"), LABEL)
    assert not plan.version_labelled
    assert "VLLM_VERSION_OVERRIDE" not in plan.honoured and "VLLM_USE_PRECOMPILED" in plan.honoured


def test_editable_install_refuses_bad_input(tmp_path: Path) -> None:
    stock = make_stock_wheel(tmp_path / "stock")
    with pytest.raises(ComposeError, match="but the stock wheel is 0.26.0"):
        editable_install(_editable_tree(tmp_path / "other", version="0.27.0"), stock, LABEL)
    with pytest.raises(ComposeError, match="no setup.py"):
        editable_install(tmp_path / "stock", stock, LABEL)
    with pytest.raises(ComposeError, match="does not exist"):
        editable_install(_editable_tree(tmp_path / "t"), tmp_path / STOCK_NAME, LABEL)


@pytest.mark.sdist
def test_editable_install_on_real_sdist_is_labelled(tmp_path: Path, release_v0260: Path) -> None:
    stock = find_stock_wheel() or make_stock_wheel(tmp_path / "stock")  # the real wheel when there is one
    plan = editable_install(release_v0260, stock, LABEL)
    assert plan.version_labelled, plan.honoured
    assert "VLLM_USE_PRECOMPILED" in plan.honoured and "VLLM_PRECOMPILED_WHEEL_LOCATION" in plan.honoured
