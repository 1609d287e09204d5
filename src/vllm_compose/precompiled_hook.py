"""vllm-compose: `pip install -e .` on this compose branch takes vLLM's compiled kernels from the stock wheel of the
same release instead of compiling CUDA/C++ and Rust, checks that wheel's sha256, and labels the version.

This file is `.vllm-compose/precompiled.py` of a compose branch; vLLM's `setup.py` calls `configure()` before it
reads any `VLLM_*` variable (the branch's commit "Build over the precompiled stock wheel of vLLM X" adds that call).
`precompiled.json` next to it names the release, the version label and, per machine architecture, the stock wheel
(file name, size, sha256, URL). `configure()` sets, each only when the environment does not set it already:

    VLLM_USE_PRECOMPILED=1                       skip the CMake/CUDA and Rust builds
    VLLM_PRECOMPILED_WHEEL_LOCATION=<the wheel>  take the compiled members from the verified stock wheel
    VLLM_VERSION_OVERRIDE=<X+compose...>         the version pip and `vllm.__version__` report
    VLLM_SKIP_PRECOMPILED_VERSION_SUFFIX=1       no '+precompiled' suffix

What it downloads: the wheel (about 300 MB) from the URL in precompiled.json (files.pythonhosted.org, PyPI), once,
into vllm-compose's cache (`$VLLM_COMPOSE_CACHE`, else `$XDG_CACHE_HOME/vllm-compose`, else
`~/.cache/vllm-compose`) as `sha256/<hex>`; a later build reads it from there after checking its sha256 again.
Nothing is kept when the size or sha256 differ. `VLLM_COMPOSE_STOCK_WHEEL=FILE` uses a copy on disk instead (checked
the same way). `VLLM_USE_PRECOMPILED=0` steps aside: vLLM builds its kernels from source as it normally would.

Only the Python standard library is used: this runs inside pip's isolated build environment, where neither
vllm-compose nor its dependencies are installed.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import socket
import sys
import tempfile
import urllib.request
from pathlib import Path

CACHE_ENV = "VLLM_COMPOSE_CACHE"
WHEEL_ENV = "VLLM_COMPOSE_STOCK_WHEEL"
#: the precompiled path's switch; "0"/"false"/"no"/"off" hands the build back to vLLM unchanged
SWITCH = "VLLM_USE_PRECOMPILED"
_CHUNK = 1 << 20


class PrecompiledSetupError(RuntimeError):
    """The stock wheel cannot be had or does not verify; the message says what and how to go on."""


def cache_root(environ: dict | None = None) -> Path:
    """vllm-compose's cache folder, as the tool itself finds it (platformdirs' user cache dir on Linux)."""
    environ = os.environ if environ is None else environ
    if environ.get(CACHE_ENV):
        return Path(environ[CACHE_ENV])
    xdg = environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "vllm-compose"


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(_CHUNK), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _incoming_prefix() -> str:
    # the cache's naming of a temporary file (vllm_compose.cache.incoming_prefix): a later run that finds one whose
    # process is gone removes it, so a build killed during the download leaves no partial wheel behind for good
    return f".incoming-{os.getpid()}@{socket.gethostname()}~"


def _download(url: str, size: int, sha256: str, dest: Path, log) -> None:
    """`url` into `dest` through a temporary file next to it: whole and verified, or not there at all."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=dest.parent, prefix=_incoming_prefix())
    digest, done = hashlib.sha256(), 0
    try:
        log(f"downloading {url} ({size / 1e6:.0f} MB) into {dest.parent}")
        with os.fdopen(fd, "wb") as out, urllib.request.urlopen(url, timeout=60) as response:
            while chunk := response.read(_CHUNK):
                digest.update(chunk)
                out.write(chunk)
                done += len(chunk)
        if done != size or digest.hexdigest() != sha256:
            raise PrecompiledSetupError(
                f"vllm-compose: {url} gave {done} bytes with sha256 {digest.hexdigest()}; precompiled.json pins "
                f"{size} bytes with sha256 {sha256}. Nothing was kept. Retry, or download the wheel by hand, check "
                f"it (sha256sum) and set {WHEEL_ENV}=FILE, or build the kernels from source with {SWITCH}=0"
            )
        os.chmod(tmp, 0o644)
        os.replace(tmp, dest)
    except OSError as exc:
        raise PrecompiledSetupError(
            f"vllm-compose: cannot download the stock wheel {url} into {dest.parent}: {exc}. Retry when the network "
            f"is back, or set {WHEEL_ENV}=FILE to a downloaded copy (sha256 {sha256}), or build from source "
            f"with {SWITCH}=0"
        ) from exc
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def _remember_name(root: Path, filename: str, sha256: str, url: str) -> None:
    """Record the wheel in the cache's name index, as vllm-compose does, so `vllm-compose wheel` finds it too."""
    names = root / "names"
    names.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=names, prefix=_incoming_prefix())
    with os.fdopen(fd, "w") as fh:
        json.dump({"sha256": sha256, "origin": url}, fh)
    os.chmod(tmp, 0o644)  # mkstemp's 0600 would hide the entry from the others sharing the cache, as for the blob
    os.replace(tmp, names / filename)


def stock_wheel(pin: dict, log, environ: dict | None = None) -> Path:
    """The verified stock wheel `pin` names: `$VLLM_COMPOSE_STOCK_WHEEL`, else the cache, else downloaded."""
    environ = os.environ if environ is None else environ
    given = environ.get(WHEEL_ENV)
    if given:
        path = Path(given)
        if not path.is_file() or _sha256(path) != pin["sha256"]:
            raise PrecompiledSetupError(
                f"vllm-compose: {WHEEL_ENV}={given} is not {pin['filename']} (missing, or its sha256 is not "
                f"{pin['sha256']}); unset it to download the wheel"
            )
        return path
    root = cache_root(environ)
    blob = root / "sha256" / pin["sha256"]
    if blob.is_file() and _sha256(blob) == pin["sha256"]:
        log(f"using {pin['filename']} from the cache {root}")
    else:
        blob.unlink(missing_ok=True)
        _download(pin["url"], pin["size"], pin["sha256"], blob, log)
        _remember_name(root, pin["filename"], pin["sha256"], pin["url"])
    return blob


def configure(source_dir: str | os.PathLike, environ: dict | None = None, log=None) -> dict[str, str]:
    """Set the precompiled-build variables in `environ` (default `os.environ`); returns those it set."""
    environ = os.environ if environ is None else environ
    log = log or (lambda text: print(f"vllm-compose: {text}", file=sys.stderr))
    if environ.get(SWITCH, "").strip().lower() in ("0", "false", "no", "off"):
        log(f"{SWITCH}={environ[SWITCH]}: vLLM builds its kernels from source")
        return {}
    spec = json.loads((Path(source_dir) / ".vllm-compose" / "precompiled.json").read_text())
    arch = platform.machine()
    pin = spec["wheels"].get(arch)
    if pin is None:
        raise PrecompiledSetupError(
            f"vllm-compose: vLLM {spec['release']} has no pinned stock wheel for {arch} (only "
            f"{', '.join(sorted(spec['wheels']))}); build the kernels from source with {SWITCH}=0"
        )
    wanted = {
        SWITCH: "1",
        "VLLM_VERSION_OVERRIDE": spec["version"],
        "VLLM_SKIP_PRECOMPILED_VERSION_SUFFIX": "1",
    }
    if not environ.get("VLLM_PRECOMPILED_WHEEL_LOCATION"):
        wanted["VLLM_PRECOMPILED_WHEEL_LOCATION"] = str(stock_wheel(pin, log, environ))
    chosen = {k: v for k, v in wanted.items() if not environ.get(k)}
    environ.update(chosen)
    log(f"building vllm {environ['VLLM_VERSION_OVERRIDE']} over {environ['VLLM_PRECOMPILED_WHEEL_LOCATION']}")
    return chosen
