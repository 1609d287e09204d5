"""vLLM release sdists from the configured package index, cached outside the repository, read in place.

The benchmark needs a handful of `.py` files from each release, so nothing is unpacked: files are read straight out
of the `.tar.gz` with `tarfile`. Downloads go to `${VLLM_COMPOSE_CACHE:-~/.cache/vllm-compose}/bench/` and are
verified against the sha256 the index publishes (PEP 691 JSON); a cached file is re-verified before every use.
"""

from __future__ import annotations

import hashlib
import json
import os
import tarfile
import urllib.request
from dataclasses import dataclass
from pathlib import Path

#: the simple-repository endpoint (PEP 691); override with VLLM_COMPOSE_INDEX for a mirror
DEFAULT_INDEX = "https://pypi.org/simple/"
_JSON_ACCEPT = "application/vnd.pypi.simple.v1+json"
#: sdists that already sit on this machine (saves a 38 MB download); checked by hash like any cached file
_KNOWN_LOCAL = {"0.26.0": Path("/tmp/dl/vllm-0.26.0.tar.gz")}


class SdistError(RuntimeError):
    """A release could not be found, downloaded or verified."""


def cache_dir() -> Path:
    """Where benchmark downloads live (never inside the repository)."""
    root = os.environ.get("VLLM_COMPOSE_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "vllm-compose")
    return Path(root) / "bench"


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _index_entry(version: str, index: str) -> tuple[str, str]:
    """(url, sha256) of `vllm-<version>.tar.gz` from the index's PEP 691 JSON page."""
    req = urllib.request.Request(index.rstrip("/") + "/vllm/", headers={"Accept": _JSON_ACCEPT})
    with urllib.request.urlopen(req, timeout=60) as resp:
        page = json.load(resp)
    name = f"vllm-{version}.tar.gz"
    for f in page.get("files", []):
        if f.get("filename") == name:
            sha = f.get("hashes", {}).get("sha256")
            if not sha:
                raise SdistError(f"{name}: the index publishes no sha256; refusing an unverifiable download")
            return f["url"], sha
    raise SdistError(f"{name} not found at {index}; is {version} a released vLLM version?")


def fetch_sdist(version: str, index: str | None = None) -> Path:
    """Path of the verified sdist of vLLM `version`, downloading it once into the cache."""
    index = index or os.environ.get("VLLM_COMPOSE_INDEX") or DEFAULT_INDEX
    dest = cache_dir() / f"vllm-{version}.tar.gz"
    sha_file = dest.with_suffix(dest.suffix + ".sha256")
    if dest.exists() and sha_file.exists() and _sha256(dest) == sha_file.read_text().strip():
        return dest
    local = _KNOWN_LOCAL.get(version)
    url, sha = _index_entry(version, index)
    dest.parent.mkdir(parents=True, exist_ok=True)
    if local is not None and local.exists() and _sha256(local) == sha:
        # a link would break when /tmp is cleaned; a copy is cheap next to a download
        dest.write_bytes(local.read_bytes())
    else:
        part = dest.with_suffix(dest.suffix + ".part")
        with urllib.request.urlopen(url, timeout=600) as resp, open(part, "wb") as out:
            while block := resp.read(1 << 20):
                out.write(block)
        got = _sha256(part)
        if got != sha:
            part.unlink()
            raise SdistError(f"vllm-{version}.tar.gz: sha256 {got} does not match the index's {sha}")
        part.replace(dest)
    sha_file.write_text(sha + "\n")
    return dest


@dataclass
class SdistSource:
    """The `vllm/**/*.py` files of one release sdist, keyed by repository-relative path (e.g. `vllm/config.py`)."""

    version: str
    files: dict[str, str]

    @classmethod
    def load(cls, version: str, tarball: Path, prefix: str = "vllm/") -> SdistSource:
        files: dict[str, str] = {}
        with tarfile.open(tarball, "r:gz") as tar:
            for member in tar:
                if not member.isfile() or not member.name.endswith(".py"):
                    continue
                # members are "vllm-X.Y.Z/vllm/..."; drop the top folder
                rel = member.name.split("/", 1)[1] if "/" in member.name else member.name
                if not rel.startswith(prefix):
                    continue
                data = tar.extractfile(member)
                if data is not None:
                    files[rel] = data.read().decode("utf-8", "surrogateescape")
        return cls(version, files)
