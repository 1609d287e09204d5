"""Shared fixtures: every test runs hermetic.

* git: a blank global and system configuration (for the `git` command and for libgit2), a fixed author and
  committer, pinned dates and `SOURCE_DATE_EPOCH`, so commit ids are the same on every machine;
* cache: `VLLM_COMPOSE_CACHE` points at a fresh folder per test;
* network: opening a socket (other than a Unix socket) fails, as if the machine were offline, unless the test is
  marked `network` or `sdist` (the real PyPI sdist, downloaded once into the user's real cache);
* `fake_http`: a stand-in for `index._http_get` (every request of the package goes through it) serving canned
  answers, for index and download tests.

Only fixtures (and the pytest hooks) live here; the helpers tests import are in plain modules: `release_trees`
(the pinned git environment, the real cache, real vLLM releases) and `toy_compose`.
"""

from __future__ import annotations

import http.client
import io
import os
import socket
import sys
import urllib.error
from pathlib import Path

import pygit2
import pytest
import toy_compose
from pygit2.enums import ConfigLevel
from release_trees import GIT_ENV, REAL_CACHE_ROOT, release_tree, stock_wheel

from vllm_compose import index
from vllm_compose.cache import CACHE_ENV, Cache


def pytest_configure(config):
    config.addinivalue_line("markers", "network: the test may open network connections")


class NetworkBlocked(OSError):
    """Raised by the socket guard: hermetic tests must not reach the network."""


@pytest.fixture(scope="session", autouse=True)
def _blank_libgit2_config(tmp_path_factory):
    """libgit2 reads the user's ~/.gitconfig from search paths fixed per process; point them at an empty folder."""
    empty = tmp_path_factory.mktemp("empty-git-config")
    levels = (ConfigLevel.GLOBAL, ConfigLevel.XDG, ConfigLevel.SYSTEM, ConfigLevel.PROGRAMDATA)
    saved = {level: pygit2.settings.search_path[level] for level in levels}
    for level in levels:
        pygit2.settings.search_path[level] = str(empty)
    yield
    for level, value in saved.items():
        pygit2.settings.search_path[level] = value


@pytest.fixture(autouse=True)
def _hermetic_env(monkeypatch, tmp_path_factory):
    for key, value in GIT_ENV.items():
        monkeypatch.setenv(key, value)
    for key in ("GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE", "GIT_OBJECT_DIRECTORY", "PIP_INDEX_URL"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv(CACHE_ENV, str(tmp_path_factory.mktemp("cache")))


@pytest.fixture(autouse=True)
def _no_network(request, monkeypatch):
    if request.node.get_closest_marker("network") or request.node.get_closest_marker("sdist"):
        return
    real_connect = socket.socket.connect

    def guarded_connect(self, address):
        if self.family == getattr(socket, "AF_UNIX", None):
            return real_connect(self, address)
        raise NetworkBlocked(f"network access blocked in tests (connect to {address!r})")

    def guarded_getaddrinfo(host, *args, **kwargs):
        raise NetworkBlocked(f"network access blocked in tests (resolve {host!r})")

    monkeypatch.setattr(socket.socket, "connect", guarded_connect)
    monkeypatch.setattr(socket, "getaddrinfo", guarded_getaddrinfo)


@pytest.fixture
def git_env() -> dict[str, str]:
    """The environment for `subprocess.run(["git", ...], env=git_env)` in tests."""
    return dict(os.environ)


@pytest.fixture
def cache(tmp_path) -> Cache:
    """An empty content-addressed cache in the test's tmp folder."""
    return Cache(tmp_path / "cache")


@pytest.fixture
def real_cache() -> Cache:
    """The user's real cache (for `sdist` tests: a download made once is reused by later runs)."""
    return Cache(REAL_CACHE_ROOT)


@pytest.fixture(scope="session")
def real_pr_diffs(tmp_path_factory) -> tuple[Path, Path]:
    """The two pinned upstream PR diffs (#46994, #38476) as files named as their URLs name them
    (`pr46994-vllm-only.diff`, ...), from the user's (or CI's) cache by the sha256 series.toml pins. Skips, saying
    how to seed the cache, when one is not there."""
    from vllm_compose.series import load_series

    cache = Cache(REAL_CACHE_ROOT)
    folder = tmp_path_factory.mktemp("pr-diffs")
    out = []
    for entry_id in ("pr46994", "pr38476"):
        src = load_series(Path(__file__).resolve().parent.parent / "series").entry(entry_id).source
        blob = cache.get_path(src.sha256)
        if blob is None:
            pytest.skip(
                f"the pinned diff of {entry_id} (sha256 {src.sha256}) is not in the cache: seed it once with "
                "scripts/rebase_series.py --onto v0.26.0 --sources DIR"
            )
        dest = folder / src.url.rsplit("/", 1)[-1]
        dest.write_bytes(blob.read_bytes())
        out.append(dest)
    return out[0], out[1]


@pytest.fixture(scope="session")
def release_v0260(tmp_path_factory) -> Path:
    """vLLM 0.26.0 as its PyPI sdist unpacks (setup.py, vllm/, ...), imported once per test session."""
    return release_tree(tmp_path_factory, "v0.26.0")


@pytest.fixture(scope="session")
def stock_wheel_v0260() -> Path:
    """The real stock vLLM 0.26.0 wheel (`$VLLM_COMPOSE_STOCK_WHEEL`, else the real cache's copy); skips, saying
    what to set, when there is none (see `release_trees.stock_wheel`)."""
    return stock_wheel()


class _FakeResponse(io.BytesIO):
    def __init__(self, url: str, body: bytes, headers: dict[str, str], fail_after: int | None) -> None:
        super().__init__(body)
        self.url = url
        self.headers = headers
        self.fail_after = fail_after

    def read(self, n: int = -1) -> bytes:
        if self.fail_after is not None and self.tell() >= self.fail_after:
            raise ConnectionResetError("connection reset by peer (simulated)")
        if self.fail_after is not None and n != -1:
            n = min(n, self.fail_after - self.tell()) or n
        return super().read(n)

    def geturl(self) -> str:
        return self.url


class FakeHTTP:
    """Canned answers for `index._http_get`, the package's one door to the network.

    `serve(url, body, content_type, fail_after=N, length=L)` answers `url` with `body` (resetting the connection
    once N bytes were read; announcing L bytes as Content-Length); `refuse(url, status)` answers with an HTTP
    error. Other URLs raise `urllib.error.URLError`, as an unreachable host does. `requests` lists what was asked.
    """

    def __init__(self) -> None:
        self.routes: dict[str, tuple[bytes, dict[str, str], int | None] | int] = {}
        self.requests: list[str] = []

    def serve(
        self,
        url: str,
        body: bytes,
        content_type: str = "application/octet-stream",
        fail_after: int | None = None,
        length: int | None = None,
    ) -> None:
        headers = {"Content-Type": content_type, "Content-Length": str(len(body) if length is None else length)}
        self.routes[url] = (body, headers, fail_after)

    def refuse(self, url: str, status: int = 404) -> None:
        self.routes[url] = status

    def __call__(self, url, headers=None, timeout=None):
        self.requests.append(url)
        route = self.routes.get(url)
        if route is None:
            raise urllib.error.URLError(NetworkBlocked(f"no route to {url} (fake network)"))
        if isinstance(route, int):
            raise urllib.error.HTTPError(url, route, http.client.responses.get(route, "Error"), {}, None)
        body, hdrs, fail_after = route
        return _FakeResponse(url, body, hdrs, fail_after)


@pytest.fixture
def fake_http(monkeypatch) -> FakeHTTP:
    """Replace the network with canned answers (see `FakeHTTP`)."""
    fake = FakeHTTP()
    monkeypatch.setattr(index, "_http_get", fake)
    return fake


@pytest.fixture
def series_dir(tmp_path) -> Path:
    """An empty folder for a test series (with its `patches/` subfolder)."""
    d = tmp_path / "series"
    (d / "patches").mkdir(parents=True)
    return d


@pytest.fixture
def toy_upstream(tmp_path) -> Path:
    """The toy upstream repository of the compose tests (`toy_compose.make_upstream`)."""
    return toy_compose.make_upstream(tmp_path)


@pytest.fixture
def toy_series(tmp_path) -> Path:
    """The toy series of the compose tests, its PR content in the test's cache (`toy_compose.make_series`)."""
    return toy_compose.make_series(tmp_path)


@pytest.fixture
def no_lasting_stand_in(monkeypatch):
    """`install_vllm_shim` puts a stand-in `vllm` package (no module spec) in sys.modules, which would stay there and
    break later tests that look vLLM up (`importlib.util.find_spec`)."""
    before = {name for name in sys.modules if name == "vllm" or name.startswith("vllm.")}
    root = Path(__file__).resolve().parent.parent
    monkeypatch.syspath_prepend(str(root / "lab" / "candidates"))
    monkeypatch.syspath_prepend(str(root / "lab" / "device"))
    yield
    for name in [n for n in sys.modules if (n == "vllm" or n.startswith("vllm.")) and n not in before]:
        del sys.modules[name]
