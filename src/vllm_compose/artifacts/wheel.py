"""The overlay wheel: the stock vLLM wheel with the composed Python files, built without compiling anything.

`build_overlay_wheel` streams the stock wheel member by member into a new one. Unchanged members are copied as raw
compressed bytes (no recompression, so 730 MB of `.so` files cost one read and one write), while their content is
inflated on the side to check CRC and the `RECORD` hash: a corrupt stock wheel is refused, never passed on.
Changed, added and deleted files come from the composed tree; `METADATA`, `RECORD`, the `.dist-info` directory name
and `vllm/_version.py` carry the new version `X.Y.Z+<local label>`. Everything else is byte-identical.

The new wheel is written to a temporary file in the output directory and renamed into place at the end, so a full
disk or an interrupted build leaves no half-written wheel.

`fetch_stock_wheel` finds the stock wheel on the package index and downloads it, verified against the index's sha256,
into the content-addressed cache shared with sources (`sources.list_index_files`, `sources.download`);
`verify_wheel` re-checks every `RECORD` hash of a wheel.
"""

from __future__ import annotations

import base64
import contextlib
import copy
import csv
import hashlib
import io
import os
import re
import struct
import tempfile
import zipfile
import zlib
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, BinaryIO

from packaging.utils import InvalidWheelFilename, parse_wheel_filename
from packaging.version import InvalidVersion, Version

from ..cache import Cache
from ..composed_branch import PACKAGE_DIR
from ..errors import ComposeError, SourceError
from ..index import IndexUnreachable, download, list_index_files, pip_index_url, redact_url
from ..progress import ProgressCallback
from ..trees import FileTree

if TYPE_CHECKING:
    from ..composed_branch import ComposedBranch
    from .clearance import Clearance

#: source-tree paths outside the package whose change needs a source build (compiled code or build metadata)
SOURCE_BUILD_PREFIXES = ("csrc/", "cmake/", "rust/", "requirements/")
SOURCE_BUILD_NAMES = frozenset(
    {"CMakeLists.txt", "setup.py", "pyproject.toml", "setup.cfg", "Cargo.toml", "Cargo.lock", "build_rust.sh"}
)
SOURCE_BUILD_SUFFIXES = (".c", ".cc", ".cpp", ".cxx", ".cu", ".cuh", ".h", ".hpp", ".rs", ".cmake")

#: the stock wheel picked from the index when several platforms are offered
DEFAULT_PLATFORM = "manylinux_2_28_x86_64"
#: the cache folder where the stock wheel appears under its own file name (the bytes live in `<cache>/sha256/`)
WHEEL_FOLDER = "wheels"

#: bytes per read when streaming members
CHUNK_SIZE = 1 << 20

_VERSION_FILE = "vllm/_version.py"
_LOCAL_HEADER = struct.Struct("<4s2B4HL2L2H")
_LOCAL_HEADER_MAGIC = b"PK\x03\x04"
_DATA_DESCRIPTOR_FLAG = 0x08
_SIGNATURE_SUFFIXES = (".jws", ".p7s")


class WheelError(ComposeError):
    """A wheel that cannot be read, verified or written."""


class SourceBuildRequired(ComposeError):
    """The compose changed compiled sources or build metadata, which an overlay wheel cannot carry."""


@dataclass
class OverlayPlan:
    """What the overlay does to the stock wheel's members (all keys are wheel member names)."""

    replace: dict[str, bytes] = field(default_factory=dict)
    add: dict[str, bytes] = field(default_factory=dict)
    delete: set[str] = field(default_factory=set)
    #: changed paths outside the package (tests, docs, examples): not part of any wheel
    ignored: list[str] = field(default_factory=list)


@dataclass
class WheelBuild:
    """What `vllm-compose wheel` built: the overlay wheel, the stock wheel under it, the branch it is of and the
    clearance the branch passed."""

    wheel: Path
    stock_wheel: Path
    branch: ComposedBranch
    clearance: Clearance

    def to_json(self) -> dict:
        return {
            "wheel": str(self.wheel),
            "stock_wheel": str(self.stock_wheel),
            "branch": self.branch.to_json(),
            "checks": self.clearance.checks.to_json(),
            "ampere_gate": self.clearance.ampere_gate_json(),
            "review": self.clearance.review.to_json(),
        }


def record_hash(data: bytes) -> str:
    """The `RECORD` form of a sha256: `sha256=` + urlsafe base64 without padding."""
    return _record_digest(hashlib.sha256(data).digest())


def _record_digest(digest: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(digest).rstrip(b"=").decode("ascii")


def needs_source_build(path: str) -> bool:
    """Whether a changed source-tree path is compiled code or build metadata outside the package.

    Files under `vllm/` are package content even when they are C++ or CUDA: the wheel ships them verbatim (headers
    for JIT kernels, sources torch compiles at run time), so the overlay can carry them.
    """
    if path.startswith(PACKAGE_DIR):
        return False
    pure = PurePosixPath(path)
    return (
        path.startswith(SOURCE_BUILD_PREFIXES)
        or pure.name in SOURCE_BUILD_NAMES
        or pure.suffix in SOURCE_BUILD_SUFFIXES
    )


def overlay_version(stock_version: str, local_label: str) -> str:
    """`stock_version` with `local_label` appended as PEP 440 local segments, normalised (e.g. `0.26.0+compose.1`)."""
    label = local_label.strip().lstrip("+")
    sep = "." if "+" in stock_version else "+"
    try:
        version = Version(f"{stock_version}{sep}{label}")
    except InvalidVersion as exc:
        raise WheelError(
            f"{local_label!r} is not a valid PEP 440 local version label",
            hint="use letters, digits and dots only, e.g. 'compose.46994.38476'",
        ) from exc
    if not label:
        raise WheelError("the local version label is empty", hint="pass a label such as 'compose.46994.38476'")
    return str(version)


def plan_overlay(members: Iterable[str], composed: FileTree, changed_paths: Iterable[str]) -> OverlayPlan:
    """Map changed source-tree paths onto wheel members; refuse changes that need a source build."""
    member_set = set(members)
    changed = sorted(set(changed_paths))
    compiled = [p for p in changed if needs_source_build(p)]
    if compiled:
        shown = ", ".join(compiled[:5]) + (f" and {len(compiled) - 5} more" if len(compiled) > 5 else "")
        raise SourceBuildRequired(
            f"the compose changes compiled sources or build metadata ({shown}); an overlay wheel cannot carry them",
            file=compiled[0],
            hint="build vLLM from source (pip install -e vllm/ without VLLM_USE_PRECOMPILED), or drop those "
            "changes from the series",
        )
    plan = OverlayPlan()
    for path in changed:
        if not path.startswith(PACKAGE_DIR):
            plan.ignored.append(path)
            continue
        data = composed.read(path)
        if data is None:
            if path in member_set:
                plan.delete.add(path)
        elif path in member_set:
            plan.replace[path] = data
        else:
            plan.add[path] = data
    return plan


def tree_release(tree: FileTree) -> str | None:
    """The vLLM release a source tree holds, from `PKG-INFO` (an sdist) or `vllm/_version.py`; None if neither says."""
    pkg_info = tree.read("PKG-INFO")
    if pkg_info is not None:
        m = re.search(rb"^Version:[ \t]*(\S+)", pkg_info, flags=re.M)
        if m:
            return m.group(1).decode("ascii", "replace")
    version_py = tree.read(_VERSION_FILE)
    if version_py is not None:
        m = re.search(rb"^__version__\s*=\s*version\s*=\s*['\"]([^'\"]+)", version_py, flags=re.M)
        if m:
            return m.group(1).decode("ascii", "replace")
    return None


def rewrite_version_file(text: str, new_version: str) -> str:
    """Set `__version__`/`version` and `__version_tuple__`/`version_tuple` in a setuptools-scm `_version.py`."""
    parsed = Version(new_version)
    parts: list[int | str] = list(parsed.release)
    if parsed.dev is not None:
        parts.append(f"dev{parsed.dev}")
    if parsed.local:
        parts.append(parsed.local)
    text, n = re.subn(
        r"^(__version__\s*=\s*version\s*=\s*).*$", lambda m: m.group(1) + repr(new_version), text, flags=re.M
    )
    if n != 1:
        raise WheelError(
            "vllm/_version.py has no `__version__ = version = ...` line to rewrite",
            file=_VERSION_FILE,
            hint="the stock wheel's version file has an unexpected layout; report this with the vLLM version",
        )
    text = re.sub(
        r"^(__version_tuple__\s*=\s*version_tuple\s*=\s*).*$",
        lambda m: m.group(1) + repr(tuple(parts)),
        text,
        flags=re.M,
    )
    return text


def rewrite_metadata(text: str, new_version: str) -> str:
    """Set the `Version:` header of a core-metadata file (only the header block, never the description)."""
    head, sep, body = text.partition("\n\n")
    head, n = re.subn(r"^Version:.*$", f"Version: {new_version}", head, count=1, flags=re.M)
    if n != 1:
        raise WheelError("METADATA has no Version header", hint="the stock wheel is malformed; fetch it again")
    return head + sep + body


def build_overlay_wheel(
    stock_wheel: Path,
    composed: FileTree,
    changed_paths: Iterable[str],
    local_label: str,
    out_dir: Path,
) -> Path:
    """Write `vllm-<version>+<local_label>-<stock tags>.whl` into `out_dir` and return its path.

    The members for `changed_paths` (source-tree paths; those under `vllm/` map to wheel members) come from
    `composed`: replaced when changed, added when new, dropped when `composed` no longer has them. Raises
    `SourceBuildRequired` for compiled sources, `WheelError` for a corrupt stock wheel or a failed write (nothing is
    left in `out_dir` then).
    """
    stock_wheel = Path(stock_wheel)
    out_dir = Path(out_dir)
    dist, stock_version, tag_part = split_wheel_name(stock_wheel)
    new_version = overlay_version(stock_version, local_label)
    out_path = out_dir / f"{dist}-{new_version}-{tag_part}.whl"
    old_info = f"{dist}-{stock_version}.dist-info/"
    new_info = f"{dist}-{new_version}.dist-info/"

    tree_version = tree_release(composed)
    if tree_version is not None and tree_version.split("+", 1)[0] != stock_version.split("+", 1)[0]:
        raise WheelError(
            f"the composed tree is vLLM {tree_version} but the stock wheel is {stock_version}",
            file=str(stock_wheel),
            hint="use the stock wheel of the composed release: its compiled kernels must match the Python code",
        )
    with _open_stock(stock_wheel) as zin:
        infos = zin.infolist()
        names = {i.filename for i in infos}
        plan = plan_overlay(names, composed, changed_paths)
        if old_info + "RECORD" not in names or old_info + "METADATA" not in names:
            raise WheelError(
                f"{stock_wheel.name} has no {old_info}RECORD or METADATA",
                file=str(stock_wheel),
                hint="this is not a complete wheel; delete it from the cache and fetch it again",
            )
        record = _parse_record(_read_member(zin, old_info + "RECORD", stock_wheel), stock_wheel)

        tmp_path, out_fh = _open_temp_output(out_dir, out_path.name)
        try:
            with out_fh:
                with zipfile.ZipFile(out_fh, "w") as zout:
                    rows = _write_members(zin, zout, infos, record, plan, stock_wheel, old_info, new_info, new_version)
                    record_name = new_info + "RECORD"
                    rows.append((record_name, "", ""))
                    zout.writestr(_new_info_like(infos, old_info + "RECORD", record_name), _format_record(rows))
                out_fh.flush()
                os.fsync(out_fh.fileno())
            os.replace(tmp_path, out_path)
        except OSError as exc:
            raise WheelError(
                f"writing {out_path.name} failed: {exc.strerror or exc}",
                file=str(out_path),
                hint="free disk space in the output directory (or choose another one) and build again; "
                "no partial wheel was kept",
            ) from exc
        finally:
            with contextlib.suppress(FileNotFoundError):
                tmp_path.unlink()
    return out_path


def _write_members(
    zin: zipfile.ZipFile,
    zout: zipfile.ZipFile,
    infos: list[zipfile.ZipInfo],
    record: dict[str, tuple[str, str]],
    plan: OverlayPlan,
    stock_wheel: Path,
    old_info: str,
    new_info: str,
    new_version: str,
) -> list[tuple[str, str, str]]:
    """Stream every member into `zout` in the stock order, then the added files; return the new RECORD rows."""
    rows: list[tuple[str, str, str]] = []
    for info in infos:
        name = info.filename
        if name.endswith("/"):
            continue
        if name == old_info + "RECORD" or name in plan.delete:
            continue
        if name.startswith(old_info) and name.endswith(_SIGNATURE_SUFFIXES):
            # a signature over the stock RECORD would be a false claim about the overlay
            continue
        out_name = new_info + name[len(old_info) :] if name.startswith(old_info) else name
        if name == old_info + "METADATA":
            text = _read_member(zin, name, stock_wheel).decode("utf-8")
            data = rewrite_metadata(text, new_version).encode("utf-8")
        elif name == _VERSION_FILE:
            base = plan.replace.get(name) or _read_member(zin, name, stock_wheel)
            data = rewrite_version_file(base.decode("utf-8"), new_version).encode("utf-8")
        elif name in plan.replace:
            data = plan.replace[name]
        else:
            expected = record.get(name)
            if expected is None:
                raise WheelError(
                    f"{stock_wheel.name}: member {name} is not listed in RECORD",
                    file=name,
                    hint="the stock wheel is not intact; delete it from the cache and fetch it again",
                )
            digest, size = _copy_member_raw(zin, zout, info, out_name, stock_wheel)
            if digest != expected[0] or (expected[1] and int(expected[1]) != size):
                raise WheelError(
                    f"{stock_wheel.name}: RECORD hash mismatch for {name}",
                    file=name,
                    hint="the stock wheel is corrupt or was modified; delete it from the cache and fetch it again",
                )
            rows.append((out_name, digest, str(size)))
            continue
        zout.writestr(_like(info, out_name), data, compress_type=zipfile.ZIP_DEFLATED)
        rows.append((out_name, record_hash(data), str(len(data))))
    for name in sorted(plan.add):
        data = plan.add[name]
        if name == _VERSION_FILE:
            data = rewrite_version_file(data.decode("utf-8"), new_version).encode("utf-8")
        zout.writestr(_new_member_info(name), data, compress_type=zipfile.ZIP_DEFLATED)
        rows.append((name, record_hash(data), str(len(data))))
    return rows


def _copy_member_raw(
    zin: zipfile.ZipFile, zout: zipfile.ZipFile, info: zipfile.ZipInfo, out_name: str, stock_wheel: Path
) -> tuple[str, int]:
    """Copy one member's compressed bytes unchanged; return (RECORD digest, size) of its inflated content.

    Copying raw avoids recompressing hundreds of MB of shared objects. The content is inflated on the side only to
    check the CRC and to hash it, so a damaged member is caught here rather than at install time.
    """
    if info.compress_type not in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED) or info.flag_bits & 0x1:
        data = _read_member(zin, info.filename, stock_wheel)
        zout.writestr(_like(info, out_name), data, compress_type=zipfile.ZIP_DEFLATED)
        return record_hash(data), len(data)
    fp = zin.fp
    assert fp is not None
    fp.seek(info.header_offset)
    header = fp.read(_LOCAL_HEADER.size)
    if len(header) != _LOCAL_HEADER.size or header[:4] != _LOCAL_HEADER_MAGIC:
        raise _corrupt(stock_wheel, info.filename, "bad local file header")
    fields = _LOCAL_HEADER.unpack(header)
    fp.seek(fields[-2] + fields[-1], os.SEEK_CUR)  # file name and extra field

    out_info = copy.copy(info)
    out_info.filename = out_name
    out_info.orig_filename = out_name
    # sizes and CRC go into the local header, so no data descriptor follows the copied bytes
    out_info.flag_bits &= ~_DATA_DESCRIPTOR_FLAG
    out = zout.fp
    assert out is not None
    out.seek(zout.start_dir)
    out_info.header_offset = out.tell()
    out.write(out_info.FileHeader(zip64=False))

    inflate = zlib.decompressobj(-zlib.MAX_WBITS) if info.compress_type == zipfile.ZIP_DEFLATED else None
    digest = hashlib.sha256()
    crc = 0
    size = 0
    remaining = info.compress_size
    try:
        while remaining > 0:
            chunk = fp.read(min(CHUNK_SIZE, remaining))
            if not chunk:
                raise _corrupt(stock_wheel, info.filename, "truncated member data")
            remaining -= len(chunk)
            out.write(chunk)
            plain = inflate.decompress(chunk) if inflate else chunk
            digest.update(plain)
            crc = zlib.crc32(plain, crc)
            size += len(plain)
        if inflate:
            tail = inflate.flush()
            digest.update(tail)
            crc = zlib.crc32(tail, crc)
            size += len(tail)
    except zlib.error as exc:
        raise _corrupt(stock_wheel, info.filename, f"bad compressed data ({exc})") from exc
    if crc != info.CRC or size != info.file_size:
        raise _corrupt(stock_wheel, info.filename, "CRC or size mismatch")
    zout.filelist.append(out_info)
    zout.NameToInfo[out_name] = out_info
    zout.start_dir = out.tell()
    return _record_digest(digest.digest()), size


def verify_wheel(path: Path) -> int:
    """Check that every member of a wheel matches its `RECORD` hash and size; return the number of members checked.

    Raises `WheelError` naming the first bad member, a member missing from `RECORD`, or a `RECORD` row without a
    member.
    """
    path = Path(path)
    dist, version, _ = split_wheel_name(path)
    info_dir = f"{dist}-{version}.dist-info/"
    with _open_stock(path) as zin:
        record = _parse_record(_read_member(zin, info_dir + "RECORD", path), path)
        members = [i for i in zin.infolist() if not i.filename.endswith("/")]
        names = {i.filename for i in members}
        for row_name in record:
            if row_name not in names:
                raise _corrupt(path, row_name, "listed in RECORD but missing from the archive")
        checked = 0
        for info in members:
            name = info.filename
            if name == info_dir + "RECORD" or (name.startswith(info_dir) and name.endswith(_SIGNATURE_SUFFIXES)):
                continue
            if name not in record:
                raise _corrupt(path, name, "not listed in RECORD")
            digest = hashlib.sha256()
            size = 0
            try:
                with zin.open(info) as fh:
                    while chunk := fh.read(CHUNK_SIZE):
                        digest.update(chunk)
                        size += len(chunk)
            except (zipfile.BadZipFile, zlib.error, EOFError) as exc:
                raise _corrupt(path, name, str(exc)) from exc
            want_hash, want_size = record[name]
            if _record_digest(digest.digest()) != want_hash or (want_size and int(want_size) != size):
                raise WheelError(
                    f"{path.name}: RECORD hash mismatch for {name}",
                    file=name,
                    hint="the wheel is corrupt or was modified after it was built",
                )
            checked += 1
    return checked


def fetch_stock_wheel(
    version: str,
    cache: Cache | None = None,
    index_url: str | None = None,
    platform: str = DEFAULT_PLATFORM,
    progress: ProgressCallback | None = None,
    *,
    offline: bool = False,
) -> Path:
    """The stock `vllm-<version>` abi3 wheel for `platform`, from the cache or downloaded from the index.

    The wheel goes through the same content-addressed cache as every download (`<cache>/sha256/<hex>`, verified
    on every read) and its file name into the cache's name index, so a later run finds it without asking the
    index, offline too (a wheel added with `--sources DIR` counts). The index (default: the one pip uses; PEP 691
    JSON, PEP 503 HTML as a fallback) must publish a sha256 for the file. The returned path is
    `<cache>/wheels/<wheel file name>`, the blob under its own name: pip and `build_overlay_wheel` read the wheel's
    tags from it.
    """
    cache = cache if cache is not None else Cache()
    cached = _cached_wheel(cache, version, platform)
    if cached is not None:
        return cached
    if offline:
        raise SourceError(
            f"no vllm {version} abi3 wheel for {platform} is in the cache {cache.root} (offline)",
            hint="retry without --offline, or pass the wheel with --stock-wheel FILE",
        )
    index_url = index_url or pip_index_url()
    try:
        wheels = {f.filename: f for f in list_index_files(index_url) if f.is_wheel}
    except IndexUnreachable as exc:
        raise SourceError(
            exc.message, hint=f"{exc.hint}; or download the wheel by hand and pass --stock-wheel FILE"
        ) from None
    chosen = _choose_wheel(list(wheels), version, platform)
    if chosen is None:
        raise SourceError(
            f"no vllm {version} abi3 wheel for {platform} on the index {redact_url(index_url)}",
            hint="check the version and the index URL (the stock wheel comes from PyPI or a mirror of it)",
        )
    info = wheels[chosen]
    if not re.fullmatch(r"[0-9a-f]{64}", info.sha256):
        raise SourceError(
            f"the index publishes no sha256 for {info.filename}; refusing an unverifiable download",
            hint="use an index that publishes hashes (PyPI does), or pass the wheel with --stock-wheel FILE",
        )
    download(
        info.url,
        info.sha256,
        cache,
        progress,
        what=f"{info.filename} from {redact_url(info.url)}",
        remedy=f"download it by hand (sha256 {info.sha256}) and pass --stock-wheel FILE",
    )
    cache.remember_name(info.filename, info.sha256, info.index_url)
    return cache.named_path(info.sha256, info.filename, WHEEL_FOLDER)


def _cached_wheel(cache: Cache, version: str, platform: str) -> Path | None:
    """The wheel `_choose_wheel` picks among those the cache's name index knows, verified; None when none is."""
    names = [n for n in cache.known_names() if n.endswith(".whl")]
    while (chosen := _choose_wheel(names, version, platform)) is not None:
        known = cache.lookup_name(chosen)
        # a blob that no longer matches its digest was removed by get_path: fetch it again
        if known is not None and cache.get_path(known[0]) is not None:
            return cache.named_path(known[0], chosen, WHEEL_FOLDER)
        names.remove(chosen)
    return None


def _wheel_matches(filename: str, version: str, platform: str | None, arch: str | None = None) -> bool:
    """Whether `filename` is a vllm `version` abi3 wheel for `platform` (or any manylinux platform of `arch`)."""
    try:
        name, wversion, _build, tags = parse_wheel_filename(filename)
    except InvalidWheelFilename:
        return False
    if name != "vllm" or wversion != Version(version):
        return False
    if platform is not None:
        return any(t.abi == "abi3" and t.platform == platform for t in tags)
    return any(t.abi == "abi3" and t.platform.startswith("manylinux") and t.platform.endswith(arch or "") for t in tags)


def _choose_wheel(filenames: list[str], version: str, platform: str) -> str | None:
    """The abi3 wheel for `platform`, or failing that an abi3 manylinux wheel of the same architecture."""
    arch = "x86_64" if platform.endswith("x86_64") else platform.rsplit("_", 1)[-1]
    for exact in (True, False):
        candidates = sorted(
            f for f in filenames if _wheel_matches(f, version, platform if exact else None, None if exact else arch)
        )
        if candidates:
            return candidates[0]
    return None


def split_wheel_name(path: Path) -> tuple[str, str, str]:
    """(distribution, version, tag part) of a wheel file name, keeping the tag part verbatim."""
    try:
        parse_wheel_filename(path.name)
    except InvalidWheelFilename as exc:
        raise WheelError(
            f"{path.name} is not a wheel file name",
            file=str(path),
            hint="pass the stock wheel as downloaded, e.g. vllm-0.26.0-cp38-abi3-manylinux_2_28_x86_64.whl",
        ) from exc
    dist, version, tag_part = path.name[: -len(".whl")].split("-", 2)
    return dist, version, tag_part


@contextlib.contextmanager
def _open_stock(path: Path):
    try:
        zin = zipfile.ZipFile(path)
    except FileNotFoundError as exc:
        raise WheelError(f"{path} does not exist", file=str(path), hint="fetch the stock wheel first") from exc
    except (zipfile.BadZipFile, OSError) as exc:
        raise WheelError(
            f"{path.name} is not a readable wheel ({exc})",
            file=str(path),
            hint="the file is corrupt or truncated; delete it from the cache and fetch it again",
        ) from exc
    with zin:
        yield zin


def _read_member(zin: zipfile.ZipFile, name: str, wheel: Path) -> bytes:
    try:
        return zin.read(name)
    except KeyError as exc:
        raise _corrupt(wheel, name, "member missing") from exc
    except (zipfile.BadZipFile, zlib.error, EOFError, OSError) as exc:
        raise _corrupt(wheel, name, str(exc)) from exc


def _corrupt(wheel: Path, member: str, what: str) -> WheelError:
    return WheelError(
        f"{wheel.name}: {member}: {what}",
        file=member,
        hint=f"the wheel {wheel} is corrupt or truncated; delete it and fetch it again",
    )


def _parse_record(data: bytes, wheel: Path) -> dict[str, tuple[str, str]]:
    rows: dict[str, tuple[str, str]] = {}
    try:
        for row in csv.reader(io.StringIO(data.decode("utf-8"))):
            if not row:
                continue
            name, digest, size = (row + ["", "", ""])[:3]
            rows[name] = (digest, size)
    except (UnicodeDecodeError, csv.Error) as exc:
        raise _corrupt(wheel, "RECORD", f"unreadable RECORD ({exc})") from exc
    return {k: v for k, v in rows.items() if v[0]}


def _format_record(rows: list[tuple[str, str, str]]) -> bytes:
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerows(rows)
    return buf.getvalue().encode("utf-8")


def _like(info: zipfile.ZipInfo, name: str) -> zipfile.ZipInfo:
    """A fresh ZipInfo for `name` with the stock member's date and permissions."""
    new = zipfile.ZipInfo(name, date_time=info.date_time)
    new.external_attr = info.external_attr
    new.create_system = info.create_system
    new.compress_type = zipfile.ZIP_DEFLATED
    return new


def _new_info_like(infos: list[zipfile.ZipInfo], stock_name: str, name: str) -> zipfile.ZipInfo:
    for info in infos:
        if info.filename == stock_name:
            return _like(info, name)
    return _new_member_info(name)


def _new_member_info(name: str) -> zipfile.ZipInfo:
    # a fixed date keeps the overlay reproducible from the same inputs
    info = zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0))
    info.external_attr = (0o100644 & 0xFFFF) << 16
    info.create_system = 3
    info.compress_type = zipfile.ZIP_DEFLATED
    return info


def _open_temp_output(out_dir: Path, final_name: str) -> tuple[Path, BinaryIO]:
    """A temporary file in `out_dir` (same filesystem as the final name, so the closing rename is atomic)."""
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        fd, name = tempfile.mkstemp(prefix=f".{final_name}.", suffix=".part", dir=out_dir)
    except OSError as exc:
        raise WheelError(
            f"cannot write into {out_dir}: {exc.strerror or exc}",
            file=str(out_dir),
            hint="choose a writable output directory with free space",
        ) from exc
    os.chmod(name, 0o644)
    return Path(name), os.fdopen(fd, "w+b")
