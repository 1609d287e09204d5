"""lab/device/stage.py end to end on made-up wheels: build the parts here, receive and install them as the device does.

The device side runs in a subprocess with VC_STAGE_DEST pointing into the test's folder (it is /tmp/vc there).
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
STAGE = REPO / "lab" / "device" / "stage.py"


def _load_stage():
    spec = importlib.util.spec_from_file_location("vc_device_stage", STAGE)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def _wheel(folder: Path, name: str, version: str, files: dict[str, bytes]) -> Path:
    """A minimal valid wheel (pip installs it with --no-deps)."""
    dist = f"{name.replace('-', '_')}-{version}"
    path = folder / f"{dist}-py3-none-any.whl"
    meta = {
        f"{dist}.dist-info/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n".encode(),
        f"{dist}.dist-info/WHEEL": b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    entries = {**files, **meta}
    record = "".join(f"{n},,\n" for n in entries) + f"{dist}.dist-info/RECORD,,\n"
    with zipfile.ZipFile(path, "w") as z:
        for n, data in entries.items():
            z.writestr(n, data)
        z.writestr(f"{dist}.dist-info/RECORD", record)
    return path


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture
def inputs(tmp_path):
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    big = os.urandom(3 << 20)  # incompressible: the stream spans several 1 MiB parts
    dep = _wheel(wheels, "tinydep", "1.0", {"tinydep/__init__.py": b"VALUE = 7\n", "tinydep/blob.bin": big})
    stock = _wheel(
        wheels,
        "vllm",
        "0.99.0",
        {
            "vllm/__init__.py": b"",
            "vllm/layer.py": b"WHO = 'stock'\n",
            "vllm/_C_stable_libtorch.abi3.so": b"\x7fELF not really" * 100,
            "vllm/kernels/k.cu": b"// left out\n",
            "vllm/third_party/deep_gemm/x.py": b"# left out\n",
            "vllm/third_party/deep_gemm/_C.cpython-312-x86_64-linux-gnu.so": b"\x7fELF deep gemm",
            "vllm/third_party/deep_gemm/_C.cpython-311-x86_64-linux-gnu.so": b"\x7fELF other python",
            "vllm/_flashmla_C.abi3.so": b"\x7fELF flashmla",
        },
    )
    stock_tree, composed_tree = tmp_path / "s" / "vllm", tmp_path / "c" / "vllm"
    for tree, who in ((stock_tree, "stock"), (composed_tree, "composed")):
        tree.mkdir(parents=True)
        (tree / "__init__.py").write_text("")
        (tree / "layer.py").write_text(f"WHO = {who!r}\n")
    (composed_tree / "new_backend.py").write_text("NEW = True\n")
    lock = tmp_path / "payload.lock"
    lock.write_text(
        "# a test payload\n"
        "# so: vllm/_C_stable_libtorch.abi3.so\n"
        f"tinydep==1.0  sha256:{_sha(dep)}  {dep.name}\n"
        f"vllm==0.99.0  sha256:{_sha(stock)}  {stock.name}  stock\n"
    )
    return {"lock": lock, "wheels": wheels, "stock": stock_tree, "composed": composed_tree, "tmp": tmp_path}


def test_parts_built_here_install_there_with_every_item_checked(inputs, monkeypatch):
    stage = _load_stage()
    monkeypatch.setattr(stage, "CACHE", inputs["tmp"] / "xzcache")
    out = inputs["tmp"] / "repo" / ".devstage"
    manifest = stage.build(
        inputs["lock"], inputs["wheels"], inputs["stock"], inputs["composed"], out, part_bytes=1 << 20
    )
    assert manifest["parts"] >= 3 and manifest["overlay"] == ["layer.py", "new_backend.py"]
    assert all((out / f"p{i}" / "part").stat().st_size <= 1 << 20 for i in range(1, manifest["parts"] + 1))
    # the device side reads the parts from the repository's .devstage (REPO/.devstage there): receive via a copy
    device_repo = inputs["tmp"] / "repo"
    (device_repo / "lab" / "device").mkdir(parents=True)
    (device_repo / "lab" / "device" / "stage.py").write_bytes(STAGE.read_bytes())
    run = lambda *a: subprocess.run(  # noqa: E731
        [sys.executable, str(device_repo / "lab" / "device" / "stage.py"), *a],
        env={**os.environ, "VC_STAGE_DEST": str(inputs["tmp"] / "vc")},
        capture_output=True,
        text=True,
    )
    nothing = run("install", "--no-models")
    assert nothing.returncode == 1 and "no part received" in nothing.stderr
    assert run("receive", "1").returncode == 0
    early = run("install", "--no-models")
    assert early.returncode == 1 and "not received" in early.stderr and "[2, 3" in early.stderr
    for i in range(1, manifest["parts"] + 1):
        got = run("receive", str(i))
        assert got.returncode == 0, got.stderr
    done = run("install", "--no-models")
    assert done.returncode == 0, done.stderr
    vc = inputs["tmp"] / "vc"
    assert (vc / "site" / "tinydep" / "__init__.py").read_text() == "VALUE = 7\n"
    assert (vc / "stock" / "vllm" / "layer.py").read_text() == "WHO = 'stock'\n"
    assert (vc / "composed" / "vllm" / "layer.py").read_text() == "WHO = 'composed'\n"  # the overlay, in vllm/
    assert (vc / "composed" / "vllm" / "new_backend.py").is_file()
    assert not (vc / "stock" / "vllm" / "new_backend.py").exists()
    for tree in ("stock", "composed"):
        assert (vc / tree / "vllm" / "_C_stable_libtorch.abi3.so").read_bytes() == b"\x7fELF not really" * 100
        assert not (vc / tree / "vllm" / "kernels" / "k.cu").exists()
        assert not (vc / tree / "vllm" / "third_party").exists()


def _install(inputs, out):
    device_repo = out.parent
    (device_repo / "lab" / "device").mkdir(parents=True, exist_ok=True)
    (device_repo / "lab" / "device" / "stage.py").write_bytes(STAGE.read_bytes())
    env = {**os.environ, "VC_STAGE_DEST": str(inputs["tmp"] / "vc")}
    manifest = json.loads((out / "p1" / "manifest.json").read_text())
    script = str(device_repo / "lab" / "device" / "stage.py")
    for i in range(1, manifest["parts"] + 1):
        got = subprocess.run([sys.executable, script, "receive", str(i)], env=env, capture_output=True, text=True)
        assert got.returncode == 0, got.stderr
    return subprocess.run([sys.executable, script, "install", "--no-models"], env=env, capture_output=True, text=True)


def test_native_carries_flashmla_and_deep_gemm_for_the_devices_python_only(inputs, monkeypatch):
    stage = _load_stage()
    monkeypatch.setattr(stage, "CACHE", inputs["tmp"] / "xzcache")
    out = inputs["tmp"] / "repo" / ".devstage"
    manifest = stage.build(
        inputs["lock"], inputs["wheels"], inputs["stock"], inputs["composed"], out, part_bytes=1 << 20, native=True
    )
    assert manifest["native"] is True
    done = _install(inputs, out)
    assert done.returncode == 0, done.stderr
    assert "FlashMLA and DeepGEMM included" in done.stdout
    vc = inputs["tmp"] / "vc"
    for tree in ("stock", "composed"):
        vllm = vc / tree / "vllm"
        assert (vllm / "_flashmla_C.abi3.so").read_bytes() == b"\x7fELF flashmla"
        assert (vllm / "third_party" / "deep_gemm" / "_C.cpython-312-x86_64-linux-gnu.so").read_bytes() == (
            b"\x7fELF deep gemm"
        )
        assert (vllm / "third_party" / "deep_gemm" / "x.py").read_text() == "# left out\n"
        assert not (vllm / "third_party" / "deep_gemm" / "_C.cpython-311-x86_64-linux-gnu.so").exists()
        assert not (vllm / "kernels" / "k.cu").exists()


def test_native_keeps_deep_gemms_jit_headers_and_drops_other_cuda_sources():
    stage = _load_stage()
    keep = "vllm/third_party/deep_gemm/include/deep_gemm/impls/sm90_fp8_mqa_logits.cuh"
    assert not stage.EXCLUDE_NATIVE.search(keep)
    assert stage.EXCLUDE.search(keep)  # the sm_80 payload carries no DeepGEMM at all
    for dropped in ("vllm/csrc/attention/x.cu", "vllm/x.cuh", "vllm/third_party/fmha_sm100/a.py", "vllm/vllm-rs"):
        assert stage.EXCLUDE_NATIVE.search(dropped), dropped


def test_native_refuses_a_wheel_without_the_native_objects(tmp_path):
    stage = _load_stage()
    wheel = _wheel(tmp_path, "vllm", "0.99.0", {"vllm/__init__.py": b"", "vllm/_flashmla_C.abi3.so": b"x"})
    with pytest.raises(stage.StageError, match=r"no DeepGEMM object .*build without --native"):
        stage.native_objects(wheel)


def test_a_part_damaged_in_transit_is_refused_and_a_wrong_wheel_is_named(inputs, monkeypatch):
    stage = _load_stage()
    monkeypatch.setattr(stage, "CACHE", inputs["tmp"] / "xzcache")
    out = inputs["tmp"] / ".devstage"
    stage.build(inputs["lock"], inputs["wheels"], inputs["stock"], inputs["composed"], out, part_bytes=1 << 20)
    part = out / "p2" / "part"
    data = bytearray(part.read_bytes())
    data[10] ^= 0xFF
    part.write_bytes(bytes(data))
    monkeypatch.setattr(stage, "DEST", inputs["tmp"] / "vc")
    with pytest.raises(stage.StageError, match="part 2 has sha256"):
        stage.receive(2, source=out)
    assert not (inputs["tmp"] / "vc" / "parts" / "p2").exists()
    (inputs["wheels"] / next(p.name for p in inputs["wheels"].glob("tinydep*"))).write_bytes(b"other")
    with pytest.raises(stage.StageError, match=r"tinydep.*has sha256 .* pins"):
        stage.build(inputs["lock"], inputs["wheels"], inputs["stock"], inputs["composed"], out, part_bytes=1 << 20)
    assert json.loads((out / "p1" / "manifest.json").read_text())["parts"] >= 3  # the earlier build is untouched


def test_a_lock_line_that_does_not_parse_is_named(tmp_path):
    stage = _load_stage()
    lock = tmp_path / "x.lock"
    lock.write_text("vllm 0.1 nohash\n")
    with pytest.raises(stage.StageError, match=r"x.lock:1: not 'name==version"):
        stage.read_lock(lock)


@pytest.mark.parametrize("lock", sorted((REPO / "lab" / "device").glob("payload-*.lock")), ids=lambda p: p.name)
def test_the_repositorys_locks_parse_and_pin_their_release_wheel(lock):
    stage = _load_stage()
    entries, objects = stage.read_lock(lock)
    release = lock.name.removeprefix("payload-v").removesuffix(".lock")
    (stock,) = [e for e in entries if e.stock]
    assert (stock.name, stock.version) == ("vllm", release)
    assert "vllm/_C_stable_libtorch.abi3.so" in objects
    names = [e.name for e in entries]
    assert len(names) == len(set(names))  # one version of each: two stop the whole install


def test_onto_composes_the_series_first_and_stages_that_branch(tmp_path, toy_upstream, toy_series):
    """`build --onto`: the trees come from composing the series now (the branch, its head and entries go into the
    manifest), so a stale compose branch cannot be staged by mistake."""
    stage = _load_stage()
    stock, composed, what = stage.compose_trees(
        "v1.0.0", toy_upstream, None, tmp_path / "trees", series=toy_series, package="pkg", offline=True
    )
    assert what["tag"] == "v1.0.0" and what["entries"] == ["pr101", "fix-farewell"]
    assert what["branch"].endswith("v1.0.0")
    head = subprocess.run(["git", "-C", str(toy_upstream), "rev-parse", what["branch"]], capture_output=True, text=True)
    assert what["head"] == head.stdout.strip()
    assert "suffix" in (composed / "mod.py").read_text() and "suffix" not in (stock / "mod.py").read_text()


def test_onto_a_tag_the_repository_lacks_is_a_stage_error(tmp_path, toy_upstream, toy_series):
    stage = _load_stage()
    with pytest.raises(stage.StageError, match=r"composing the series onto v9.9.9 in .* failed \(exit 3\)"):
        stage.compose_trees(
            "v9.9.9", toy_upstream, None, tmp_path / "t", series=toy_series, package="pkg", offline=True
        )


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--onto", "v1.0.0", "--repo", "r", "--stock-tree", "s"], "leave out --stock-tree and --composed-tree"),
        (["--onto", "v1.0.0"], "--onto needs --repo"),
        (["--stock-tree", "s"], "give --onto TAG --repo DIR, or both --stock-tree and --composed-tree"),
    ],
)
def test_build_options_that_do_not_go_together_are_usage_errors(tmp_path, capsys, args, message):
    stage = _load_stage()
    with pytest.raises(SystemExit) as exit_:
        stage.main(["build", "--lock", "l", "--wheels", "w", *args])
    assert exit_.value.code == 2 and message in capsys.readouterr().err


# -- two releases in one warm machine: the second payload carries only what the first does not --------------------


@pytest.fixture
def two_payloads(inputs, monkeypatch):
    """Payload A (the `inputs` lock) and payload B, built with `have=A`: B's lock pins the same tinydep wheel (so it
    is shared), a dependency of its own and another stock wheel."""
    stage = _load_stage()
    monkeypatch.setattr(stage, "CACHE", inputs["tmp"] / "xzcache")
    wheels, repo = inputs["wheels"], inputs["tmp"] / "repo"
    own = _wheel(wheels, "owndep", "2.0", {"owndep/__init__.py": b"VALUE = 8\n"})
    stock = _wheel(wheels, "vllm", "0.99.1", {"vllm/__init__.py": b"", "vllm/layer.py": b"WHO = 'stock 0.99.1'\n"})
    dep = next(wheels.glob("tinydep-*.whl"))
    lock_b = inputs["tmp"] / "payload-b.lock"
    lock_b.write_text(
        f"owndep==2.0  sha256:{_sha(own)}  {own.name}\n"
        f"tinydep==1.0  sha256:{_sha(dep)}  {dep.name}\n"
        f"vllm==0.99.1  sha256:{_sha(stock)}  {stock.name}  stock\n"
    )
    composed_b = inputs["tmp"] / "cb" / "vllm"
    composed_b.mkdir(parents=True)
    (composed_b / "__init__.py").write_text("")
    (composed_b / "layer.py").write_text("WHO = 'composed 0.99.1'\n")
    a = stage.build(inputs["lock"], wheels, inputs["stock"], inputs["composed"], repo / ".devstageA", 1 << 20)
    b = stage.build(
        lock_b, wheels, inputs["stock"], composed_b, repo / ".devstageB", 1 << 20,
        have=stage.read_payload(repo / ".devstageA"),
    )  # fmt: skip
    (repo / "lab" / "device").mkdir(parents=True)
    (repo / "lab" / "device" / "stage.py").write_bytes(STAGE.read_bytes())
    return {"a": a, "b": b, "repo": repo, "dep": dep, "tmp": inputs["tmp"]}


def _device(repo: Path, dest: Path, *args: str, shared: str | None = None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "VC_STAGE_SHARED"}
    env["VC_STAGE_DEST"] = str(dest)
    if shared is not None:
        env["VC_STAGE_SHARED"] = shared
    script = str(repo / "lab" / "device" / "stage.py")
    return subprocess.run([sys.executable, script, *args], env=env, capture_output=True, text=True)


def _receive_all(repo: Path, dest: Path, folder: str, parts: int) -> None:
    for i in range(1, parts + 1):
        got = _device(repo, dest, "receive", str(i), "--from", folder)
        assert got.returncode == 0, got.stderr
        assert f"part {i} of {parts} ok" in got.stdout


def test_a_shared_item_is_not_in_the_second_stream(two_payloads):
    a, b, repo, dep = two_payloads["a"], two_payloads["b"], two_payloads["repo"], two_payloads["dep"]
    shared = [i for i in b["items"] if i.get("shared")]
    assert [i["name"] for i in shared] == [f"whl/{dep.name}"] and shared[0]["sha256"] == _sha(dep)
    assert b["shared_bytes"] == dep.stat().st_size and b["shared_with"]["lock"] == "payload.lock"
    assert b["shared_with"]["part_sha256"] == a["part_sha256"]
    stream = b"".join((repo / ".devstageB" / f"p{i}" / "part").read_bytes() for i in range(1, b["parts"] + 1))
    assert len(stream) == b["total_bytes"] == sum(i["size"] for i in b["items"] if not i.get("shared"))
    assert dep.read_bytes()[-4096:] not in stream  # the wheel's bytes travel in A only
    assert b["parts"] < a["parts"]
    # items of B's own (its stock wheel's trees, its own dependency) travel, though A's stream is there too
    assert {i["name"] for i in b["items"] if not i.get("shared")} >= {"vllm_py.tar.xz", "overlay.tar.xz"}


def test_install_reads_the_shared_item_from_the_other_payload(two_payloads):
    repo, tmp = two_payloads["repo"], two_payloads["tmp"]
    _receive_all(repo, tmp / "vcA", ".devstageA", two_payloads["a"]["parts"])
    _receive_all(repo, tmp / "vcB", ".devstageB", two_payloads["b"]["parts"])
    done = _device(repo, tmp / "vcB", "install", "--no-models", shared=f"{tmp / 'nothing'}:{tmp / 'vcA'}")
    assert done.returncode == 0, done.stderr
    assert "1 shared items read from" in done.stdout and str(tmp / "vcA" / "parts") in done.stdout
    site = tmp / "vcB" / "site"
    assert (site / "tinydep" / "__init__.py").read_text() == "VALUE = 7\n"
    assert (site / "owndep" / "__init__.py").read_text() == "VALUE = 8\n"
    assert (tmp / "vcB" / "stock" / "vllm" / "layer.py").read_text() == "WHO = 'stock 0.99.1'\n"
    assert (tmp / "vcB" / "composed" / "vllm" / "layer.py").read_text() == "WHO = 'composed 0.99.1'\n"
    assert not (tmp / "vcA" / "site").exists()  # A's parts were read, nothing of A's was installed or changed


def test_a_shared_item_not_on_the_machine_is_refused_by_name(two_payloads):
    repo, tmp, dep = two_payloads["repo"], two_payloads["tmp"], two_payloads["dep"]
    _receive_all(repo, tmp / "vcB", ".devstageB", two_payloads["b"]["parts"])
    unset = _device(repo, tmp / "vcB", "install", "--no-models")
    assert unset.returncode == 1
    assert f"whl/{dep.name}" in unset.stderr and "travel in payload.lock" in unset.stderr
    assert "VC_STAGE_SHARED is unset" in unset.stderr
    assert not (tmp / "vcB" / "site").exists() and not (tmp / "vcB" / "items").exists()  # refused before writing
    # A received only in part: the parts that hold the wheel are named
    _device(repo, tmp / "vcA", "receive", "1", "--from", ".devstageA")
    partial = _device(repo, tmp / "vcB", "install", "--no-models", shared=str(tmp / "vcA"))
    assert partial.returncode == 1 and f"whl/{dep.name}" in partial.stderr
    assert re.search(r"lacks its parts \[[0-9, ]+\] of payload.lock", partial.stderr)


def test_a_shared_item_whose_bytes_changed_is_refused(two_payloads):
    repo, tmp, dep = two_payloads["repo"], two_payloads["tmp"], two_payloads["dep"]
    _receive_all(repo, tmp / "vcA", ".devstageA", two_payloads["a"]["parts"])
    _receive_all(repo, tmp / "vcB", ".devstageB", two_payloads["b"]["parts"])
    stage = _load_stage()
    ((item, offset),) = [(i, o) for i, o in stage.streamed(two_payloads["a"]) if i["name"] == f"whl/{dep.name}"]
    part_bytes = two_payloads["a"]["part_bytes"]
    victim = tmp / "vcA" / "parts" / f"p{offset // part_bytes + 1}"
    data = bytearray(victim.read_bytes())
    data[offset % part_bytes] ^= 0xFF
    victim.write_bytes(bytes(data))
    bad = _device(repo, tmp / "vcB", "install", "--no-models", shared=str(tmp / "vcA"))
    assert bad.returncode == 1
    assert re.search(rf"whl/{re.escape(dep.name)}: sha256 [0-9a-f]{{64}} read from .*vcA/parts, manifest", bad.stderr)


def test_a_part_leaves_room_for_the_repositorys_files(tmp_path, monkeypatch):
    stage = _load_stage()
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    (tmp_path / "tracked.bin").write_bytes(b"x" * (5 << 20))
    (tmp_path / "untracked.txt").write_bytes(b"y" * 1000)
    (tmp_path / ".gitignore").write_text("/.devstage*/\n")
    (tmp_path / ".devstage33").mkdir()
    (tmp_path / ".devstage33" / "part").write_bytes(b"z" * (3 << 20))  # ignored: travels only when carried
    subprocess.run(["git", "-C", str(tmp_path), "add", "tracked.bin", ".gitignore"], check=True)
    assert stage.tree_bytes(tmp_path) == (5 << 20) + 1000 + len("/.devstage*/\n")
    part, tree = stage.default_part_bytes(tmp_path), stage.tree_bytes(tmp_path)
    assert part % (64 << 10) == 0 and (64 << 20) - (64 << 10) < part + tree + stage.CALL_MARGIN <= 64 << 20
    monkeypatch.setattr(stage, "CALL_BYTES", 12 << 20)
    with pytest.raises(stage.StageError, match="too little is left for a part"):
        stage.default_part_bytes(tmp_path)
