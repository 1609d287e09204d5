"""The network: the package's one door to it (`_http_get`), downloads into the cache, and package-index pages.

Every request goes through `_http_get` (tests replace it); every downloaded file through `download`, which streams it
into the content-addressed cache and checks it against its pinned sha256; every package-index page through
`list_index_files` (PEP 691 JSON, PEP 503 HTML as a fallback), which lists sdists and wheels alike: release sdists
(`releases`) and the stock wheel (`artifacts.wheel`) are both found this way, on the index pip is configured to use
(`pip_index_url`). Errors are `SourceError`s that say what could not be reached and how to go on without it.
"""

from __future__ import annotations

import html.parser
import http.client
import json
import os
import posixpath
import re
import subprocess
import sys
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename
from packaging.version import InvalidVersion, Version

from .cache import SEEDED_ORIGIN, Cache
from .errors import SourceError
from .progress import ProgressCallback, Throttled
from .series import tag_of_version

DEFAULT_INDEX_URL = "https://pypi.org/simple"
PROJECT = "vllm"
#: seconds to wait for a server before giving up (per socket operation, not for the whole download)
NETWORK_TIMEOUT = 30

_NETWORK_ERRORS = (urllib.error.URLError, http.client.HTTPException, ConnectionError, TimeoutError, OSError)


def _http_get(url: str, headers: dict[str, str] | None = None, timeout: float = NETWORK_TIMEOUT):
    """Open `url` for reading; the one place the package touches the network (tests replace it)."""
    request = urllib.request.Request(url, headers={"User-Agent": "vllm-compose", **(headers or {})})
    return urllib.request.urlopen(request, timeout=timeout)


def redact_url(url: str) -> str:
    """The URL without user:password, for messages and provenance."""
    parts = urllib.parse.urlsplit(url)
    if parts.username or parts.password:
        host = parts.hostname or ""
        if parts.port:
            host += f":{parts.port}"
        parts = parts._replace(netloc=host)
    return urllib.parse.urlunsplit(parts)


def _describe_network_error(exc: BaseException) -> str:
    if isinstance(exc, urllib.error.HTTPError):
        return f"HTTP {exc.code} {exc.reason}"
    if isinstance(exc, urllib.error.URLError):
        return str(exc.reason)
    return f"{type(exc).__name__}: {exc}"


def seeded_mismatch(cache: Cache, filename: str, sha256: str) -> SourceError | None:
    """The error to give when a file named `filename` was passed with --sources but is not the pinned `sha256`."""
    seeded = cache.lookup_name(filename) if filename else None
    if seeded is None or seeded[1] != SEEDED_ORIGIN or seeded[0] == sha256:
        return None
    return SourceError(
        f"{filename} in --sources has sha256 {seeded[0]}, the series pins {sha256}",
        file=filename,
        hint="put the pinned file in the --sources folder (or fix the pin in series.toml if the file is right)",
    )


def download(
    url: str,
    sha256: str,
    cache: Cache,
    progress: ProgressCallback | None = None,
    what: str | None = None,
    remedy: str | None = None,
) -> Path:
    """The cached, verified blob for `sha256`, downloading it from `url` when absent.

    Raises `SourceError` when the server cannot be reached, the transfer breaks off or is truncated, or the
    bytes are not the pinned ones; nothing partial is kept. `remedy` says how to get the file without this
    download (default: by hand, into a folder passed with --sources DIR).
    """
    path = cache.get_path(sha256)
    if path is not None:
        return path
    what = what or redact_url(url)
    remedy = remedy or f"download it by hand (sha256 {sha256}) into a folder and pass --sources DIR"
    filename = posixpath.basename(urllib.parse.urlsplit(url).path)
    event = f"download {filename or what}"
    done = 0

    def failed(exc: BaseException) -> SourceError:
        mismatch = seeded_mismatch(cache, filename, sha256)
        if mismatch is not None:
            return mismatch  # the person passed the file: "cannot download ... pass --sources" would mislead
        after = f"failed after {done} bytes: " if done else ""
        # a copy in the cache that failed its check was removed just before this download: say so, or the user sees
        # only a network error and never learns the file they had was damaged
        corrupt = cache.corrupt.get(sha256)
        return SourceError(
            (f"{corrupt.removesuffix('; run again to re-download')}, and " if corrupt else "")
            + f"cannot download {what}: {after}{_describe_network_error(exc)}",
            hint=f"retry when the network is back, or {remedy}; nothing was kept",
        )

    try:
        response = _http_get(url)
    except _NETWORK_ERRORS as exc:
        raise failed(exc) from None
    with response:

        def read(n: int) -> bytes:
            nonlocal done
            try:
                chunk = response.read(n)
            except _NETWORK_ERRORS as exc:
                raise failed(exc) from None
            done += len(chunk)
            return chunk

        total = response.headers.get("Content-Length") if response.headers else None
        size = int(total) if total and total.isdigit() else None
        _, path = cache.put_stream(read, sha256, Throttled(progress, event, size), what=what, expected_size=size)
    return path


# ---------------------------------------------------------------------------------------------------------------
# Package indexes


def pip_index_url() -> str:
    """The index pip is configured to use: $PIP_INDEX_URL, else `pip config`'s index-url, else PyPI."""
    env = os.environ.get("PIP_INDEX_URL")
    if env:
        return env.split()[0]
    for key in ("global.index-url", "install.index-url"):
        try:
            result = subprocess.run(
                [sys.executable, "-m", "pip", "config", "get", key],
                capture_output=True,
                text=True,
                timeout=30,
                stdin=subprocess.DEVNULL,
                check=False,
            )
        except (subprocess.TimeoutExpired, OSError):
            continue
        if result.returncode == 0 and result.stdout.strip():
            return result.stdout.strip().splitlines()[-1].strip()
    return DEFAULT_INDEX_URL


class IndexUnreachable(SourceError):
    """The index page could not be read (network down, no page for the project); a cached file may still do."""


@dataclass(frozen=True)
class IndexFile:
    """One release file of a project, an sdist or a wheel, as a package index lists it."""

    filename: str
    #: absolute URL of the file
    url: str
    #: lower-case hex digest the index publishes; "" when it publishes none
    sha256: str
    version: Version
    #: the index it is listed on, without credentials: provenance for imports and the cache's name index
    index_url: str
    size: int | None = None

    @property
    def is_wheel(self) -> bool:
        return self.filename.endswith(".whl")


#: PEP 691 JSON first; PEP 503 HTML from indexes that serve nothing else (plain mirrors, `python -m http.server`)
_INDEX_ACCEPT = "application/vnd.pypi.simple.v1+json, application/vnd.pypi.simple.v1+html;q=0.2, text/html;q=0.1"


class _LinkParser(html.parser.HTMLParser):
    """The anchors of a PEP 503 (HTML) simple-index page: (text, href, yanked)."""

    def __init__(self) -> None:
        super().__init__()
        self.links: list[tuple[str, str, bool]] = []
        self._attrs: dict[str, str | None] | None = None
        self._text: list[str] = []

    def handle_starttag(self, tag, attrs):
        if tag == "a":
            self._attrs = dict(attrs)
            self._text = []

    def handle_data(self, data):
        if self._attrs is not None:
            self._text.append(data)

    def handle_endtag(self, tag):
        if tag == "a" and self._attrs is not None:
            href = self._attrs.get("href")
            if href:
                self.links.append(("".join(self._text).strip(), href, "data-yanked" in self._attrs))
            self._attrs = None


def _file_version(filename: str, project: str = PROJECT) -> Version | None:
    """The version of `project`'s sdist or wheel `filename`; None for any other file."""
    if filename.endswith(".whl"):
        try:
            name, version, _build, _tags = parse_wheel_filename(filename)
        except InvalidWheelFilename:
            return None
        return version if name == canonicalize_name(project) else None
    m = re.fullmatch(rf"{re.escape(project)}-(.+)\.tar\.gz", filename)
    if not m:
        return None
    try:
        return Version(m.group(1))
    except InvalidVersion:
        return None


def _json_rows(body: bytes, page: str) -> list[tuple[str, str, str | None, int | None]]:
    try:
        return [
            (f["filename"], f["url"], (f.get("hashes") or {}).get("sha256"), f.get("size"))
            for f in json.loads(body).get("files", [])
            if not f.get("yanked")
        ]
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise SourceError(
            f"the package index {redact_url(page)} sent an unreadable answer ({exc})",
            hint="check the index URL pip is configured with (pip config get global.index-url)",
        ) from None


def _html_rows(body: bytes) -> list[tuple[str, str, str | None, int | None]]:
    parser = _LinkParser()
    parser.feed(body.decode("utf-8", "replace"))
    rows = []
    for text, href, yanked in parser.links:
        if yanked:
            continue
        url, _, fragment = href.partition("#")
        sha = fragment[len("sha256=") :] if fragment.startswith("sha256=") else None
        rows.append((text or posixpath.basename(urllib.parse.urlsplit(url).path), url, sha, None))
    return rows


def list_index_files(index_url: str, project: str = PROJECT) -> list[IndexFile]:
    """The sdists and wheels the index lists for `project`, yanked files left out.

    Reads the PEP 691 JSON page, or the PEP 503 HTML page (digest in the link's `#sha256=` fragment) from an index
    that has no JSON. Files that are no sdist or wheel of `project` are skipped. Raises `IndexUnreachable` when the
    page cannot be read, `SourceError` when it cannot be understood.
    """
    page = index_url.rstrip("/") + f"/{project}/"
    try:
        with _http_get(page, {"Accept": _INDEX_ACCEPT}) as response:
            body = response.read()
            ctype = (response.headers.get("Content-Type") or "") if response.headers else ""
            final_url = response.geturl() if hasattr(response, "geturl") else page
    except urllib.error.HTTPError as exc:
        raise IndexUnreachable(
            f"the package index answered {exc.code} {exc.reason} for {redact_url(page)}",
            hint=f"check the index URL (PIP_INDEX_URL, pip config get global.index-url): the project page must "
            f"exist at <index>/{project}/",
        ) from None
    except _NETWORK_ERRORS as exc:
        raise IndexUnreachable(
            f"cannot read the package index {redact_url(page)}: {_describe_network_error(exc)}",
            hint="retry when the network is back",
        ) from None
    is_json = "json" in ctype or body.lstrip().startswith(b"{")
    out = []
    for filename, url, sha, size in _json_rows(body, page) if is_json else _html_rows(body):
        version = _file_version(filename, project)
        if version is not None:
            out.append(
                IndexFile(
                    filename,
                    urllib.parse.urljoin(final_url, url),
                    (sha or "").lower(),
                    version,
                    redact_url(index_url),
                    size,
                )
            )
    return out


def find_sdist(version: Version, index_url: str, project: str = PROJECT) -> IndexFile:
    """The index's sdist for `version`; a version it does not list is a `SourceError` naming nearby versions."""
    sdists = [f for f in list_index_files(index_url, project) if not f.is_wheel]
    for info in sdists:
        if info.version == version:
            if not re.fullmatch(r"[0-9a-f]{64}", info.sha256):
                raise SourceError(
                    f"the index lists {info.filename} without a sha256, so it cannot be verified",
                    tag=tag_of_version(version),
                    hint="use an index that publishes hashes (PyPI does), or pass the file with --sources DIR",
                )
            return info
    available = sorted({i.version for i in sdists if not i.version.is_prerelease})
    below = [str(v) for v in available if v < version][-3:]
    above = [str(v) for v in available if v > version][:3]
    nearby = ", ".join(below + above) or "none"
    # the next release after the one asked for, or, past the newest, the newest (not the oldest of those listed)
    suggestion = above[0] if above else below[-1] if below else "0.26.0"
    raise SourceError(
        f"vLLM {version} has no sdist on {redact_url(index_url)} (nearby releases: {nearby})",
        tag=tag_of_version(version),
        hint=f"pick a released version (e.g. --onto v{suggestion})",
    )
