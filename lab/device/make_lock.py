"""Write `lab/device/payload-vX.Y.Z.lock` for a release: the wheels a validation run needs that the device image lacks.

How it decides (the way `payload-v0.33.0.lock` was made by hand in session 6, written down):
1. A venv (Python 3.12, as on the device) gets the release's stock wheel with all of its requirements, less those
   named by `--drop` (a pin PyPI does not serve: vLLM 0.34.0 pins flashinfer-python==0.7.3, which PyPI does not
   list; drop only a distribution the probe hides anyway, `OPTIONAL_AT_IMPORT`, so that the probe sees the same).
2. On this machine, which has no GPU, the DSA path's modules are imported there: the engine, the V2 model runner,
   the model and its MTP draft (`deepseek_v2` before v0.29.0, `deepseek_v32` after), the indexer and the
   sparse-MLA backends. vLLM's platform is bound to a fake sm_80 CUDA platform, and libcuda is a stub whose every
   entry point fails. `OPTIONAL_AT_IMPORT` is hidden (importlib's PathFinder returns None for it, as if absent):
   the imports must still succeed, else this stops and names the failure.
3. The lock lists the distributions that import loaded and the image lacks (`--image-packages`; default: the
   package list of the device tool's KINDS.md). It adds the release's torch stack when it is not the image's (torch,
   its Triton and NCCL pins, the release's torchvision) and `RUNTIME`, which the H200 runs found imported only at
   run time. Versions are the venv's, and every sha256 must equal PyPI's.

    python3 lab/device/make_lock.py --release 0.29.0 --work /tmp/l29 [--out lab/device/payload-v0.29.0.lock]
        [--drop flashinfer-python]

Needs PyPI, gcc and nm (the stub), about 8 GB under --work and a few minutes. Exit 0 written, 1 a step failed (the
message says which), 2 usage.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import urllib.request
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "src"))  # the tool's package, not installed where this runs

from dsa_modules import dsa_modules  # noqa: E402  lab/device/, the script's folder

from vllm_compose.ampere.facts import GPUS  # noqa: E402

PYTHON = "/root/.pyenv/versions/3.12.1/bin/python3"
KINDS = Path("/work/.library/device/KINDS.md")
#: the device image's torch stack (KINDS.md: torch 2.11.0, triton 3.6.0, NCCL 2.28.9)
IMAGE_TORCH = "2.11.0"
#: optional at import on the DSA path (hidden in step 2); large, or only for other GPUs
OPTIONAL_AT_IMPORT = (
    "flashinfer", "cudnn", "humming", "fastsafetensors", "cuda.tile", "tilelang", "quack", "tokenspeed_mla",
    "instanttensor", "dill", "cutlass",
)  # fmt: skip
#: imported only at run time, found by the H200 runs of session 6 (v0.33.0): the loader's online-quantization probe
#: imports compressed_tensors (which needs loguru); fused_q imports its CuTeDSL module (`import cutlass`) on any CUDA
#: GPU. (distribution, extra-free names of what it needs carried alongside)
#: (quack-kernels and its torch-c-dlpack-ext: vLLM 0.34.0's first forward on the H200 stopped on "No module named
#: 'quack'", though the import probe passes with it hidden)
#: (jmespath, model-hosting-container-standards, supervisor and watchfiles: `vllm serve`'s API server imports them at
#: start-up, which the probe does not reach; on v0.26.0 the first served run on a GPU stopped on each)
RUNTIME = ("compressed-tensors", "jmespath", "loguru", "model-hosting-container-standards", "nvidia-cutlass-dsl",
           "nvidia-cutlass-dsl-libs-base", "nvidia-cutlass-dsl-libs-core", "nvidia-cutlass-dsl-libs-cu13",
           "quack-kernels", "supervisor", "torch-c-dlpack-ext", "watchfiles")  # fmt: skip
#: never carried: cuda-tile shares the `cuda` namespace with the image's cuda-bindings (hidden as `cuda.tile` above,
#: yet the namespace maps to it); the CUTLASS DSL's cu12 libs, which the cu13 ones replace (vLLM's [cu13] extra)
EXCLUDED = frozenset({"cuda-tile", "nvidia-cutlass-dsl-libs-cu12"})
#: the stock wheel's compiled objects a run needs (lab/device/stage.py `# so:`)
OBJECTS = (
    "vllm/_C_stable_libtorch.abi3.so vllm/_moe_C_stable_libtorch.abi3.so vllm/cumem_allocator.abi3.so",
    "vllm/vllm_flash_attn/_vllm_fa3_C.abi3.so",
)
PLATFORMS = [f"manylinux_2_{n}_x86_64" for n in (39, 38, 37, 36, 35, 34, 33, 32, 31, 30, 29, 28, 27, 26, 25, 24,
                                                  23, 22, 21, 20, 19, 18, 17, 12, 5)]  # fmt: skip
PLATFORMS += ["manylinux2014_x86_64", "manylinux2010_x86_64", "manylinux1_x86_64"]

#: what vLLM's platform answers in the import probe: the first Ampere GPU of the tool's facts (an A100's capability
#: and device name), so that import-time probes take sm_8x paths
PROBE_PLATFORM = f"CAPABILITY, DEVICE_NAME = {GPUS[0].capability!r}, {GPUS[0].name!r}\n"
PROBE = r"""
import importlib, importlib.machinery, importlib.metadata as md, json, sys, traceback
BLOCK = sys.argv[1].split(",")
_find = importlib.machinery.PathFinder.find_spec.__func__
def find_spec(cls, name, path=None, target=None):
    if any(name == b or name.startswith(b + ".") for b in BLOCK):
        return None
    return _find(cls, name, path, target)
importlib.machinery.PathFinder.find_spec = classmethod(find_spec)
import vllm.platforms as P
from vllm.platforms import cuda as C
from vllm.platforms.interface import DeviceCapability
class Fake(C.NonNvmlCudaPlatform):
    @classmethod
    def get_device_capability(cls, device_id=0):
        return DeviceCapability(*CAPABILITY)
    @classmethod
    def get_device_name(cls, device_id=0):
        return DEVICE_NAME
P._current_platform = Fake()
failures = {}
for m in sys.argv[2:]:
    try:
        importlib.import_module(m)
    except Exception as e:
        failures[m] = f"{type(e).__name__}: {e}"
        traceback.print_exc()
dist = md.packages_distributions()
used = sorted({d for t in {n.split(".")[0] for n in sys.modules} for d in dist.get(t, [])})
print("PROBE " + json.dumps({"failures": failures, "distributions": used}))
"""


class LockError(Exception):
    """A step failed: the message says which and what to do."""


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _run(cmd: list[str], **kw) -> subprocess.CompletedProcess:
    proc = subprocess.run(cmd, capture_output=True, text=True, **kw)
    if proc.returncode:
        raise LockError(f"{' '.join(cmd[:4])} ... failed (rc {proc.returncode}): {proc.stderr.strip()[-800:]}")
    return proc


def download(specs: list[str], dest: Path) -> None:
    plats = [a for p in PLATFORMS for a in ("--platform", p)]
    _run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:", "--python-version",
          "3.12", "--implementation", "cp", *plats, "-d", str(dest), *specs])  # fmt: skip


def image_packages(path: Path) -> set[str]:
    text = path.read_text()
    try:
        listed = text.split("Packages: ", 1)[1].split("\n", 1)[0].rstrip(".")
    except IndexError:
        raise LockError(f"{path} has no 'Packages: ...' line; pass --image-packages FILE (one name per line)") from None
    return {canonical(n.strip()) for n in listed.split(",")}


def wheel_metadata(wheel: Path) -> tuple[str, str, list[str]]:
    with zipfile.ZipFile(wheel) as z:
        text = z.read(next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))).decode()
    name = re.search(r"^Name: (.+)$", text, re.M)[1].strip()
    version = re.search(r"^Version: (.+)$", text, re.M)[1].strip()
    return canonical(name), version, re.findall(r"^Requires-Dist: (.+)$", text, re.M)


def pin(requires: list[str], name: str) -> str | None:
    for r in requires:
        m = re.match(rf"{re.escape(name)}\s*(?:\[[^\]]*\])?\s*==\s*([^\s;,]+)", r, re.I)
        if m:
            return m[1]
    return None


def pin_of(requires: list[str], name: str) -> str:
    """`name` as the requirement writes it (`flashinfer-python==0.7.3`), markers left out."""
    for r in requires:
        m = re.match(r"([A-Za-z0-9._-]+)\s*([^;]*)", r)
        if m and canonical(m[1]) == name:
            return f"{name}{m[2].strip()}"
    return name


def requirement_names(requires: list[str]) -> set[str]:
    """The names of `requires` whose markers hold on the device (cp312, Linux, x86_64; extras skipped)."""
    from packaging.requirements import Requirement

    env = {"python_version": "3.12", "python_full_version": "3.12.3", "sys_platform": "linux", "os_name": "posix",
           "platform_system": "Linux", "platform_machine": "x86_64", "implementation_name": "cpython",
           "platform_python_implementation": "CPython", "extra": ""}  # fmt: skip
    names = set()
    for text in requires:
        req = Requirement(text)
        if req.marker is None or req.marker.evaluate(env):
            names.add(canonical(req.name))
    return names


def pypi_sha256(name: str, filename: str) -> str | None:
    req = urllib.request.Request(
        f"https://pypi.org/simple/{name}/", headers={"Accept": "application/vnd.pypi.simple.v1+json"}
    )
    with urllib.request.urlopen(req, timeout=60) as resp:
        files = json.load(resp)["files"]
    return next((f["hashes"].get("sha256") for f in files if f["filename"] == filename), None)


def libcuda_stub(site: Path, out: Path) -> Path:
    """A libcuda.so.1 whose every entry point the compiled objects name returns CUDA_ERROR_NO_DEVICE."""
    symbols = set()
    for so in [*site.glob("vllm/*.so"), *site.glob("torch/lib/*.so")]:
        nm = subprocess.run(["nm", "-D", "--undefined-only", str(so)], capture_output=True, text=True)
        symbols |= {ln.split()[-1].split("@")[0] for ln in nm.stdout.splitlines() if re.search(r"\bcu[A-Z]\w*", ln)}
    out.mkdir(parents=True, exist_ok=True)
    src = out / "libcuda.c"
    src.write_text("".join(f"int {s}(void){{return 100;}}\n" for s in sorted(symbols) if re.fullmatch(r"cu\w+", s)))
    _run(["gcc", "-shared", "-fPIC", "-o", str(out / "libcuda.so.1"), str(src)])
    return out


def venv_requirements(requires: list[str], drop: frozenset[str]) -> list[str]:
    """The stock wheel's requirements the venv gets when `drop` names some: extras left out, as a plain install
    leaves them. Raises LockError for a `drop` name that is not a requirement (a typo would drop nothing)."""
    plain = [(canonical(re.match(r"[A-Za-z0-9._-]+", r)[0]), r) for r in requires if not re.search(r"\bextra\s*==", r)]
    unknown = sorted(drop - {n for n, _r in plain})
    if unknown:
        raise LockError(f"--drop {', '.join(unknown)}: not a requirement of the stock wheel; check the name")
    return [r for n, r in plain if n not in drop]


def make_lock(release: str, work: Path, image: set[str], python: str, drop: frozenset[str] = frozenset()) -> str:
    work.mkdir(parents=True, exist_ok=True)
    wheels = work / "wheels"
    download([f"vllm=={release}"], wheels)
    stock = next(wheels.glob(f"vllm-{release}-*.whl"))
    _name, _v, vllm_requires = wheel_metadata(stock)
    env = work / "env"
    # the marker holds what the venv was made with: a venv whose install was cut off, or made with other --drop
    # names, is made again
    marker = "drop: " + " ".join(sorted(drop)) + "\n"
    made = (env / ".complete").read_text() if (env / ".complete").exists() else None
    if made is None or made != marker and not (made == "" and not drop):  # "": a venv made before --drop existed
        shutil.rmtree(env, ignore_errors=True)
        _run([python, "-m", "venv", str(env)])
        pip = str(env / "bin" / "pip")
        if drop:
            _run([pip, "install", "-q", "--no-deps", str(stock)])
            _run([pip, "install", "-q", *venv_requirements(vllm_requires, drop)])
        else:
            _run([pip, "install", "-q", str(stock)])
        (env / ".complete").write_text(marker)
    site = next((env / "lib").glob("python3.*/site-packages"))
    stub = libcuda_stub(site, work / "stub")
    modules = dsa_modules(site / "vllm")
    probe = subprocess.run(
        [str(env / "bin" / "python"), "-c", PROBE_PLATFORM + PROBE, ",".join(OPTIONAL_AT_IMPORT), *modules],
        capture_output=True, text=True, env={**os.environ, "LD_LIBRARY_PATH": str(stub)},
    )  # fmt: skip
    line = next((ln for ln in probe.stdout.splitlines() if ln.startswith("PROBE ")), None)
    if line is None:
        raise LockError(f"the import probe printed no result (rc {probe.returncode}): {probe.stderr[-1500:]}")
    result = json.loads(line[len("PROBE ") :])
    if result["failures"]:
        raise LockError(
            "with the optional packages hidden these imports fail: "
            + "; ".join(f"{m}: {e}" for m, e in result["failures"].items())
            + " (one of OPTIONAL_AT_IMPORT is needed on this release: take it out of the list)"
        )
    listed = json.loads(_run([str(env / "bin" / "pip"), "list", "--format=json"]).stdout)
    installed = {canonical(d["name"]): d["version"] for d in listed}
    # imported distributions pip did not install are vendored inside another (setuptools' jaraco, more-itertools)
    wanted = {canonical(d) for d in result["distributions"]} & set(installed) - image - {"vllm"} - EXCLUDED
    wanted |= {n for n in map(canonical, RUNTIME) if n in installed or n == "nvidia-cutlass-dsl-libs-cu13"}
    torch = pin(vllm_requires, "torch")
    if torch and torch != IMAGE_TORCH:
        wanted |= {"torch", "torchvision"}
        torch_wheel_dir = work / "torch"
        download([f"torch=={torch}"], torch_wheel_dir)
        _n, _v, torch_requires = wheel_metadata(next(torch_wheel_dir.glob("torch-*.whl")))
        for dep in ("nvidia-nccl-cu13",):
            if pin(torch_requires, dep):
                installed[dep] = pin(torch_requires, dep)
                wanted.add(dep)
        triton = next((r for r in torch_requires if r.startswith("triton")), None)
        if triton:
            wanted.add("triton")
    cutlass = installed.get("nvidia-cutlass-dsl")
    if cutlass:
        installed["nvidia-cutlass-dsl-libs-cu13"] = cutlass
    missing = sorted(n for n in wanted if n not in installed)
    if missing:
        raise LockError(f"not installed in the venv, so no version to pin: {missing}")
    download([f"{n}=={installed[n]}" for n in sorted(wanted)], wheels)
    # what the carried wheels require in turn (openai needs jiter, email-validator dnspython, ...)
    for _ in range(5):
        more = set()
        for wheel in wheels.glob("*.whl"):
            name, _v, requires = wheel_metadata(wheel)
            if name in wanted:
                more |= requirement_names(requires) - wanted - image - {"vllm"}
        more = {n for n in more if n in installed} - EXCLUDED
        if not more:
            break
        wanted |= more
        download([f"{n}=={installed[n]}" for n in sorted(more)], wheels)
    rows = []
    for wheel in sorted(wheels.glob("*.whl")):
        name, version, _r = wheel_metadata(wheel)
        if name not in wanted and wheel != stock:
            continue
        sha = hashlib.sha256(wheel.read_bytes()).hexdigest()
        if pypi_sha256(name, wheel.name) != sha:
            raise LockError(f"{wheel.name}: sha256 {sha} is not PyPI's; download it again")
        rows.append(f"{name}=={version}  sha256:{sha}  {wheel.name}" + ("  stock" if wheel == stock else ""))
    header = [
        f"# payload-v{release}.lock: what lab/device/stage.py carries for a validation run of vLLM {release}, "
        "written by",
        f"# lab/device/make_lock.py (its docstring says how each line was chosen) with torch pin {torch or 'none'}.",
        "# Hidden at the import probe, not carried: " + ", ".join(OPTIONAL_AT_IMPORT) + ".",
        *(
            [
                "# Left out of the probe's venv (--drop): "
                + ", ".join(pin_of(vllm_requires, n) for n in sorted(drop))
                + "."
            ]
            if drop
            else []
        ),
        "# Added for run-time imports: " + ", ".join(RUNTIME) + ".",
        "# Each sha256 equals PyPI's (https://pypi.org/simple/NAME/, JSON form).",
        *(f"# so: {o}" for o in OBJECTS),
        "#",
        "# name==version  sha256:DIGEST  wheel file  [stock]",
    ]
    return "\n".join(header + sorted(rows)) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--release", required=True, help="X.Y.Z")
    ap.add_argument("--work", type=Path, required=True, help="a folder for the venv and the wheels (~8 GB)")
    ap.add_argument("--out", type=Path, help="default: lab/device/payload-vX.Y.Z.lock")
    ap.add_argument("--image-packages", type=Path, default=KINDS)
    ap.add_argument("--python", default=PYTHON, help="a Python 3.12 (the device's)")
    ap.add_argument(
        "--drop",
        action="append",
        default=[],
        metavar="NAME",
        help="leave this requirement of the stock wheel out of the venv (a pin PyPI does not serve; only one the "
        "probe hides, OPTIONAL_AT_IMPORT)",
    )
    args = ap.parse_args(argv)
    if not re.fullmatch(r"\d+\.\d+\.\d+", args.release):
        ap.error(f"--release {args.release!r}: give X.Y.Z, e.g. 0.29.0")
    out = args.out or REPO / "lab" / "device" / f"payload-v{args.release}.lock"
    try:
        text = make_lock(
            args.release,
            args.work,
            image_packages(args.image_packages),
            args.python,
            frozenset(canonical(n) for n in args.drop),
        )
    except (LockError, OSError) as exc:
        print(f"make_lock: {exc}", file=sys.stderr)
        return 1
    tmp = out.with_suffix(".lock.tmp")
    tmp.write_text(text)
    tmp.replace(out)
    print(f"{out}: {sum(1 for ln in text.splitlines() if ln and not ln.startswith('#'))} wheels")
    return 0


if __name__ == "__main__":
    sys.exit(main())
