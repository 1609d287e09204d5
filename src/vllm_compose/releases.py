"""vLLM releases: a tag's commit, from the repository, its remote, or the PyPI sdist imported into git.

`ensure_release(repo, "v0.26.0", cache)` returns the release's commit: the repository's own tag if it has one, else
the tag fetched from its `origin` remote, else the PyPI sdist `vllm-0.26.0.tar.gz` — found on the index pip is
configured to use (`index`), verified against the index's sha256, unpacked safely and in memory into git objects,
committed with its provenance and tagged `v0.26.0`. A second run finds the tag and does nothing.

Library code never prints: long steps report through an optional `progress(event, done, total)` callback.
"""

from __future__ import annotations

import os
import re
import tarfile
import zlib
from dataclasses import dataclass
from pathlib import Path

import pygit2
from packaging.version import Version

from . import gitstore
from .cache import Cache, sha256_file
from .errors import SourceError
from .index import PROJECT, IndexFile, IndexUnreachable, download, find_sdist, pip_index_url, redact_url
from .progress import ProgressCallback, Throttled
from .series import tag_of_version, version_of_tag

IMPORTER_NAME = "vllm-compose importer"
IMPORTER_EMAIL = "importer@vllm-compose.invalid"
#: refuse sdists that unpack to more than this (a decompression bomb is not a release)
MAX_UNPACKED_BYTES = 4 << 30


def ensure_release(
    repo: pygit2.Repository,
    tag: str,
    cache: Cache | None = None,
    progress: ProgressCallback | None = None,
    *,
    offline: bool = False,
    index_url: str | None = None,
    remote: str = "origin",
) -> pygit2.Commit:
    """The commit of release `tag` in `repo`, importing it when needed.

    In order: the repository's tag; the tag fetched from `remote` (failure falls through); the PyPI sdist, verified
    against the index's sha256 and imported as tag `tag` (offline: an sdist seeded into the cache). Raises
    `SourceError` for a tag that is no release, a version the index lacks, or a release that cannot be obtained.
    """
    version = version_of_tag(tag)
    ref = f"refs/tags/{tag}"
    commit = gitstore.peel_commit(repo, ref)
    if commit is not None:
        return commit
    if not offline and gitstore.fetch(repo, remote, f"{ref}:{ref}"):
        commit = gitstore.peel_commit(repo, ref)
        if commit is not None:
            return commit
    sdist = fetch_sdist(version, cache or Cache(), progress, offline=offline, index_url=index_url, tag=tag)
    return import_sdist(
        repo,
        tag,
        sdist.path,
        sdist_name=sdist.filename,
        sdist_sha256=sdist.sha256,
        index_url=sdist.origin,
        progress=progress,
    )


@dataclass(frozen=True)
class CachedSdist:
    """A release sdist in the cache: its verified blob, file name, sha256 and where it was listed."""

    path: Path
    filename: str
    sha256: str
    origin: str


def fetch_sdist(
    version: Version,
    cache: Cache,
    progress: ProgressCallback | None = None,
    *,
    offline: bool = False,
    index_url: str | None = None,
    tag: str | None = None,
) -> CachedSdist:
    """The verified sdist of `version`: from the index (downloaded once, sha256-checked, name remembered), else —
    offline or with the index unreachable — the one the cache's name index knows. Raises `SourceError` when neither
    has it (`tag` names the release in the message; default: the version's tag)."""
    tag = tag or tag_of_version(version)
    filename = f"{PROJECT}-{version}.tar.gz"
    info: IndexFile | None = None
    network_error: SourceError | None = None
    if not offline:
        index_url = index_url or pip_index_url()
        try:
            info = find_sdist(version, index_url)
        except IndexUnreachable as exc:
            network_error = exc
    if info is not None:
        path = download(info.url, info.sha256, cache, progress, what=f"{info.filename} from {redact_url(info.url)}")
        cache.remember_name(info.filename, info.sha256, info.index_url)
        return CachedSdist(path, info.filename, info.sha256, info.index_url)
    known = cache.lookup_name(filename)
    path = cache.get_path(known[0]) if known else None
    if path is None:
        note = cache.corrupt.get(known[0], "") if known else ""
        reason = network_error.message if network_error else "offline"
        raise SourceError(
            (note + "; " if note else "") + f"release {tag} is not in the repository and {filename} is not in "
            f"the cache ({reason})",
            tag=tag,
            hint=f"download {filename} from PyPI by hand and pass --sources DIR holding it, "
            "or retry with the network on",
        )
    sha256, origin = known
    return CachedSdist(path, filename, sha256, origin)


# ---------------------------------------------------------------------------------------------------------------
# Safe sdist import


class _CountingReader:
    """A file wrapper counting the compressed bytes read, so import progress has a known total."""

    def __init__(self, f, meter: Throttled) -> None:
        self.f = f
        self.meter = meter
        self.done = 0

    def read(self, n: int = -1) -> bytes:
        data = self.f.read(n)
        self.done += len(data)
        self.meter(self.done)
        return data


def _refuse(tag: str, sdist: str, member: str, why: str) -> SourceError:
    return SourceError(
        f"{sdist}: member {member!r} {why}; the sdist was not imported",
        tag=tag,
        file=member,
        hint="a release sdist never contains this: check where the file came from "
        "(if it came from --sources, remove it from the cache and use the one on PyPI)",
    )


def _resolve_link(links: dict[str, str], path: str, depth: int = 0) -> list[str] | None:
    """Resolve symlink `path` through the tree's other symlinks; None when it leaves the tree or loops."""
    if depth > 40:
        return None
    target = links[path]
    if target.startswith("/"):
        return None
    parts = path.split("/")[:-1]
    for comp in target.split("/"):
        if comp in ("", "."):
            continue
        if comp == "..":
            if not parts:
                return None
            parts.pop()
            continue
        parts.append(comp)
        joined = "/".join(parts)
        if joined in links:
            resolved = _resolve_link(links, joined, depth + 1)
            if resolved is None:
                return None
            parts = resolved
    return parts


class _CheckedTarInfo(tarfile.TarInfo):
    """A tar header that ends the archive only where the archive says it ends.

    `tarfile` stops reading, without an error, at the first header it cannot parse (a bad checksum, a short or
    missing block) once one member was read: a sdist with a corrupt second header would be imported as a one-file
    release. Only the end-of-archive marker (a zero block) may end it here; anything else is corruption or
    truncation, raised as `ReadError` with the byte offset of the header.
    """

    @classmethod
    def fromtarfile(cls, tarfile_obj):
        try:
            return super().fromtarfile(tarfile_obj)
        except tarfile.EOFHeaderError:
            raise  # a zero block: the archive's proper end
        except tarfile.EmptyHeaderError:
            raise tarfile.ReadError(
                f"the archive ends at byte {tarfile_obj.offset} without its end-of-archive blocks (truncated)"
            ) from None
        except (tarfile.InvalidHeaderError, tarfile.TruncatedHeaderError) as exc:
            raise tarfile.ReadError(f"corrupt tar header at byte {tarfile_obj.offset} ({exc})") from None


#: a `vllm/_version.py` read whole for its commit id is a few hundred bytes; a larger one is only streamed
_VERSION_PY_MAX = 1 << 20
_COMMIT_ID = re.compile(r"""^__commit_id__\s*=\s*(?:\w+\s*=\s*)?(?:['"]([^'"]*)['"]|None)""", re.M)


def import_sdist(
    repo: pygit2.Repository,
    tag: str,
    sdist_path: str | os.PathLike,
    *,
    sdist_name: str | None = None,
    sdist_sha256: str | None = None,
    index_url: str = "",
    progress: ProgressCallback | None = None,
) -> pygit2.Commit:
    """Import an sdist's files as one commit tagged `tag`, straight from the tarball into git objects.

    Nothing touches the filesystem: each member streams into a blob (memory stays flat, whatever a member's size).
    A corrupt or truncated archive is refused (`_CheckedTarInfo`), not imported as far as it reads. Refused (`SourceError`, no tag created):
    absolute paths, `..` components, members outside the top `<name>-<version>/` folder, `.git` entries, hard
    links, device files and FIFOs, symlinks leaving the tree, and more than `MAX_UNPACKED_BYTES` of content.
    The commit and annotated tag carry the provenance (file name, sha256, index, upstream `__commit_id__`); their
    time is the sdist's newest member time, so every importer of the same sdist gets the same commit id.
    """
    sdist_path = Path(sdist_path)
    sdist = sdist_name or sdist_path.name
    top = sdist[: -len(".tar.gz")] if sdist.endswith(".tar.gz") else None
    sdist_sha256 = sdist_sha256 or sha256_file(sdist_path)
    entries: dict[str, tuple[pygit2.Oid, int]] = {}
    links: dict[str, str] = {}
    commit_id: str | None = None
    newest = 0
    unpacked = 0
    size = sdist_path.stat().st_size
    meter = Throttled(progress, f"import {sdist}", size)
    try:
        with open(sdist_path, "rb") as raw:
            with tarfile.open(fileobj=_CountingReader(raw, meter), mode="r|*", tarinfo=_CheckedTarInfo) as tar:
                for member in tar:
                    rel = _member_path(tag, sdist, member.name, top)
                    if rel is None:
                        continue
                    newest = max(newest, int(member.mtime or 0))
                    if member.isdir():
                        continue
                    if member.islnk():
                        raise _refuse(tag, sdist, member.name, f"is a hard link (to {member.linkname!r})")
                    if member.issym():
                        links[rel] = member.linkname
                        entries[rel] = (
                            gitstore.write_blob(repo, member.linkname.encode("utf-8", "surrogateescape")),
                            gitstore.LINK_MODE,
                        )
                        continue
                    if not member.isreg():
                        raise _refuse(tag, sdist, member.name, "is a device file, FIFO or other special file")
                    unpacked += member.size
                    if unpacked > MAX_UNPACKED_BYTES:
                        raise _refuse(tag, sdist, member.name, f"takes the content past {MAX_UNPACKED_BYTES} bytes")
                    f = tar.extractfile(member)
                    if rel == "vllm/_version.py" and member.size <= _VERSION_PY_MAX:  # read: it names the commit
                        data = f.read()
                        m = _COMMIT_ID.search(data.decode("utf-8", "replace"))
                        commit_id = m.group(1) if m and m.group(1) is not None else None
                        oid = gitstore.write_blob(repo, data)
                    else:  # streamed: memory stays flat whatever the member's size
                        oid = gitstore.write_blob_stream(repo, f)
                    mode = gitstore.EXEC_MODE if member.mode & 0o111 else gitstore.BLOB_MODE
                    entries[rel] = (oid, mode)
                    links.pop(rel, None)
    except SourceError:
        raise
    except (tarfile.TarError, EOFError, OSError, zlib.error) as exc:
        raise SourceError(
            f"{sdist} is not a readable tar.gz ({exc}); it was not imported",
            tag=tag,
            file=str(sdist_path),
            hint="delete the file and run again to download it afresh",
        ) from None
    meter(size, final=True)
    for path in links:
        if _resolve_link(links, path) is None:
            raise _refuse(tag, sdist, path, f"is a symlink to {links[path]!r}, which leaves the tree")
    if not entries:
        raise SourceError(
            f"{sdist} holds no files under {top}/",
            tag=tag,
            file=str(sdist_path),
            hint="is this the release's sdist?",
        )
    try:
        tree = gitstore.tree_from_entries(repo, entries)
    except Exception as exc:  # a file and a folder of the same name
        raise _refuse(tag, sdist, getattr(exc, "file", None) or "?", str(getattr(exc, "message", exc))) from None

    version = tag[1:]
    message = (
        f"Import vLLM {version} from its sdist\n\n"
        f"vllm-compose imported release {version} from its source distribution: the repository had no tag\n"
        f"{tag} and no reachable remote had one. The tree is the sdist's content with its top folder\n"
        f"{top}/ removed.\n\n"
        f"Sdist: {sdist}\n"
        f"Sdist-SHA256: {sdist_sha256}\n"
        f"Index: {index_url or '(not consulted)'}\n"
        f"Upstream-Commit-Id: {commit_id or '(not recorded in vllm/_version.py)'}\n"
    )
    sig = gitstore.signature(IMPORTER_NAME, IMPORTER_EMAIL, when=newest)
    commit_oid = gitstore.commit_tree(repo, tree, [], message, sig)
    return gitstore.create_tag(repo, tag, commit_oid, sig, message)  # another process's import of it wins


def _member_path(tag: str, sdist: str, name: str, top: str | None) -> str | None:
    """The tree path of tar member `name` (top folder stripped), or None for the top folder itself."""
    if name.startswith("/") or re.match(r"^[A-Za-z]:[\\/]", name):
        raise _refuse(tag, sdist, name, "has an absolute path")
    parts = [p for p in name.split("/") if p not in ("", ".")]
    if ".." in parts:
        raise _refuse(tag, sdist, name, "has a '..' path component")
    if not parts:
        return None
    if top is not None and parts[0] != top:
        raise _refuse(tag, sdist, name, f"lies outside the top folder {top}/")
    rel = parts[1:]
    if not rel:
        return None
    if any(p.lower() == ".git" for p in rel):
        raise _refuse(tag, sdist, name, "is a .git entry")
    return "/".join(rel)


def release_provenance(commit: pygit2.Commit) -> dict[str, str]:
    """The provenance trailers of an imported release commit (`Sdist`, `Sdist-SHA256`, `Index`, ...)."""
    out = {}
    for line in commit.message.splitlines():
        m = re.match(r"^(Sdist|Sdist-SHA256|Index|Upstream-Commit-Id): (.*)$", line)
        if m:
            out[m.group(1)] = m.group(2)
    return out
