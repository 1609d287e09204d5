"""vLLM release sdists through vllm-compose's cache, read in place.

The benchmark needs a handful of `.py` files from each release, so nothing is unpacked: files are read straight out
of the `.tar.gz` with `tarfile`. The sdist itself comes from `vllm_compose.sources.fetch_sdist` — the same index
reader, verified download and cache as `rebase` (an sdist a compose already imported is not downloaded again).
Benchmark results go to `cache_dir()`.
"""

from __future__ import annotations

import tarfile
from dataclasses import dataclass
from pathlib import Path

from packaging.version import Version

from vllm_compose.cache import Cache, default_cache_root
from vllm_compose.releases import fetch_sdist as _fetch


def cache_dir() -> Path:
    """Where benchmark outputs live by default (never inside the repository)."""
    return default_cache_root() / "bench"


def fetch_sdist(version: str) -> Path:
    """Path of the verified sdist of vLLM `version` in the cache, downloading it once."""
    return _fetch(Version(version), Cache()).path


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
