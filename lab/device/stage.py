"""Stage a release's validation payload on the device machine, from a lock file, in calls of at most 64 MiB.

A device call carries the repository's working tree plus at most 64 MiB in all, and the machine forgets everything
when it goes back. So the payload (the wheels the image lacks, pinned by `lab/device/payload-TAG.lock`, and the parts of
the stock vLLM wheel the run needs, plus the composed overlay) is built here into one byte stream, cut into parts of
`--part-mib`, one folder per call (`.devstage/p1`, `p2`, ...), each with the manifest. On the machine, `receive N`
checks part N against the manifest and keeps it; `install` joins the parts, checks every item's sha256, installs the
wheels into `/tmp/vc/site` and unpacks the stock and composed trees. Standard library only: the same file runs on
the machine's python3.

Here (no GPU; the wheels as `pip download` saves them), composing the series onto the release first so that the
staged tree is the series as it stands (`vllm-compose rebase` into REPO; the stock tree is the tag's):

    python3 lab/device/stage.py build --lock lab/device/payload-v0.33.0.lock --wheels DIR \\
        --onto v0.33.0 --repo /path/to/scratch/vllm [--sources DIR]

`--onto` composes into an existing repository: a `--repo` folder that does not exist yet needs one
`vllm-compose rebase --onto TAG --repo DIR --init --sources DIR --no-checkout` first.

Or from trees already written (`--stock-tree /tmp/s33/vllm --composed-tree /tmp/c33/vllm`: nothing then checks
that the composed tree is the series' current compose).

There, one call per part, back to back (the machine stays warm 30 s between calls):

    run(carry=[".devstage/p1"]):  python3 lab/device/stage.py receive 1
    ...
    run(carry=[".devstage/pN"]):  python3 lab/device/stage.py receive N && python3 lab/device/stage.py install

A part leaves room for the tree that travels with it: by default it is 64 MiB less the repository's files (tracked
and untracked-not-ignored, as `git ls-files` lists them) less a MiB for the manifest and what changes before the
call (`--part-mib` sets it).

Two releases in one warm machine: `build --have .devstage33` leaves out of this payload's stream every item whose
sha256 already travels in that payload (the torch stack when both releases pin it), marking it `shared` in the
manifest. On the machine, each payload is received into its own `VC_STAGE_DEST` (`receive N --from .devstage34`
reads the part from that folder); `install` takes the shared items from the parts of the payloads received earlier
that `VC_STAGE_SHARED` names (`VC_STAGE_SHARED=/tmp/vc33`, `:`-separated), found by sha256 and checked again, and
refuses before it writes anything when one is not there, naming it.

The lock's lines are `name==version  sha256:DIGEST  wheel-file  [stock]`; `#` starts a comment. The line marked
`stock` is the release's vLLM wheel: its Python files become the stock tree (less what the DSA model never imports,
`EXCLUDE`), and the compiled objects named by `# so: PATH ...` lines are carried xz-compressed (the others stay
behind: a run that reached for one would fail loudly). Every other line is a wheel installed with `--no-deps`.
`build --native` also carries FlashMLA's and DeepGEMM's objects and DeepGEMM's Python (`NATIVE_OBJECTS`): the
native Hopper DSA path (FLASHMLA_SPARSE), run at the GPU's own capability as the oracle's second opinion.
Exit status: 0 done, 1 a check failed (the message says which file and what to do), 2 usage.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import lzma
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
#: where the machine keeps the received parts and the installed payload (kept while it stays warm)
DEST = Path(os.environ.get("VC_STAGE_DEST", "/tmp/vc"))
#: `install`: the DEST folders of payloads received earlier on this machine, where items a payload marks `shared`
#: (left out of its own stream by `build --have`) are looked up by sha256
SHARED = [Path(p) for p in os.environ.get("VC_STAGE_SHARED", "").split(os.pathsep) if p]
#: xz outputs of the large objects, keyed by the wheel's sha256 (xz -9 of ~300 MB takes minutes)
CACHE = Path(os.environ.get("VC_STAGE_CACHE", "/tmp/vc-stage-cache"))
#: wheel members the DSA model never imports: CUDA sources, the Rust front end, DeepGEMM (the run must take the
#: Triton indexer fallback) and the Blackwell FMHA sources
EXCLUDE = re.compile(r"(\.cu|\.cuh)$|^vllm/vllm-rs$|^vllm/third_party/(deep_gemm|fmha_sm100)/")
#: `build --native`: the native Hopper DSA path as well (FLASHMLA_SPARSE with DeepGEMM's indexer logits), for the
#: oracle's second opinion on the GPU's own capability: DeepGEMM's Python and the CUDA headers its JIT compiles
#: from (`deep_gemm/include/**.cuh`: without them its first call fails, "Failed to open: .../sm90_fp8_mqa_logits.cuh")
#: stay in, and these compiled
#: objects of the stock wheel are carried (FlashMLA's ops; DeepGEMM's extension for the device's cp312, or the
#: abi3 one later releases ship)
EXCLUDE_NATIVE = re.compile(
    r"^(?!vllm/third_party/deep_gemm/).*(\.cu|\.cuh)$|^vllm/vllm-rs$|^vllm/third_party/fmha_sm100/"
)
NATIVE_OBJECTS = re.compile(
    r"^vllm/_flashmla(_extension)?_C\.abi3\.so$|^vllm/third_party/deep_gemm/_C(_extension\.abi3|\.cpython-312-[^/]+)\.so$"
)
#: what one device call carries: the working tree that travels and the carried part together
CALL_BYTES = 64 << 20
#: room left in a call beside the part and the tree: the manifest (tens of KB) and files the tree gains before the
#: call (a notebook line, a series entry)
CALL_MARGIN = 1 << 20
#: tarfile's "data" filter where the Python has it (3.11.4+, 3.12); older ones extract plainly: the archives are
#: the ones `build` wrote, and each is sha256-checked against the manifest before it is opened
_SAFE = {"filter": "data"} if hasattr(tarfile, "data_filter") else {}


class StageError(Exception):
    """A check failed: the message names the file and what to do."""


@dataclass(frozen=True)
class LockEntry:
    name: str
    version: str
    sha256: str
    file: str
    stock: bool


def read_lock(path: Path) -> tuple[list[LockEntry], list[str]]:
    """The lock's wheels and its `# so:` objects. Raises StageError naming the line that does not parse."""
    entries, objects = [], []
    for n, raw in enumerate(path.read_text().splitlines(), 1):
        line = raw.strip()
        if line.startswith("# so:"):
            objects += line[len("# so:") :].split()
            continue
        if not line or line.startswith("#"):
            continue
        m = re.fullmatch(r"(\S+)==(\S+)\s+sha256:([0-9a-f]{64})\s+(\S+\.whl)(\s+stock)?", line)
        if not m:
            raise StageError(
                f"{path}:{n}: not 'name==version  sha256:DIGEST  file.whl  [stock]': {raw!r}; fix the line"
            )
        entries.append(LockEntry(m[1], m[2], m[3], m[4], bool(m[5])))
    stock = [e for e in entries if e.stock]
    if len(stock) != 1:
        raise StageError(f"{path}: {len(stock)} lines marked 'stock'; mark exactly the release's vLLM wheel")
    return entries, objects


def sha256_of(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _check_wheels(entries: list[LockEntry], wheels: Path, lock: Path) -> None:
    for e in entries:
        path = wheels / e.file
        if not path.is_file():
            raise StageError(
                f"{e.file} ({e.name}=={e.version}, {lock.name}) is not in {wheels}; fetch it with "
                f"python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp "
                f"--platform manylinux_2_28_x86_64 ... -d {wheels} {e.name}=={e.version} (the lock's header says "
                "which platforms)"
            )
        got = sha256_of(path)
        if got != e.sha256:
            raise StageError(f"{path} has sha256 {got}, {lock.name} pins {e.sha256}; download it again")


def _python_tree(wheel: Path, out: Path, exclude: re.Pattern = EXCLUDE) -> None:
    """The wheel's Python files (no compiled objects, less `exclude`) as a tar.xz, bytes reproducible."""
    with zipfile.ZipFile(wheel) as z, lzma.open(out, "wb", preset=6) as xz:
        with tarfile.open(fileobj=xz, mode="w", format=tarfile.PAX_FORMAT) as tar:
            for info in sorted(z.infolist(), key=lambda i: i.filename):
                name = info.filename
                if info.is_dir() or name.endswith(".so") or exclude.search(name):
                    continue
                data = z.read(info)
                ti = tarfile.TarInfo(name)
                ti.size, ti.mode, ti.mtime = len(data), 0o644, 0
                tar.addfile(ti, io.BytesIO(data))


def _object_xz(wheel: Path, sha: str, member: str) -> Path:
    cached = CACHE / sha[:16] / (Path(member).name + ".xz")
    if cached.is_file() and cached.stat().st_size:
        return cached
    cached.parent.mkdir(parents=True, exist_ok=True)
    tmp = cached.with_suffix(".xz.tmp")
    with zipfile.ZipFile(wheel) as z:
        try:
            src = z.open(member)
        except KeyError:
            raise StageError(f"{wheel.name} has no {member} (a '# so:' line of the lock); fix the lock") from None
        with src, open(tmp, "wb") as f:
            subprocess.run(["xz", "-9", "-T2", "-c"], stdout=f, check=True, input=src.read())
    tmp.replace(cached)
    return cached


def _overlay(stock: Path, composed: Path, out: Path) -> list[str]:
    """The composed tree's Python files that differ from (or are missing in) the stock tree, as a tar.xz."""
    changed = sorted(
        str(p.relative_to(composed))
        for p in composed.rglob("*.py")
        if "__pycache__" not in p.parts
        and (
            not (stock / p.relative_to(composed)).is_file()
            or (stock / p.relative_to(composed)).read_bytes() != p.read_bytes()
        )
    )
    with lzma.open(out, "wb", preset=6) as xz, tarfile.open(fileobj=xz, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for rel in changed:
            data = (composed / rel).read_bytes()
            ti = tarfile.TarInfo(rel)
            ti.size, ti.mode, ti.mtime = len(data), 0o644, 0
            tar.addfile(ti, io.BytesIO(data))
    return changed


def native_objects(wheel: Path) -> list[str]:
    """The stock wheel's members `NATIVE_OBJECTS` names. Raises StageError when FlashMLA's or DeepGEMM's is missing
    (a wheel built without them cannot give the native path's second opinion)."""
    with zipfile.ZipFile(wheel) as z:
        found = sorted(n for n in z.namelist() if NATIVE_OBJECTS.search(n))
    for what, prefix in (("FlashMLA", "vllm/_flashmla_C"), ("DeepGEMM", "vllm/third_party/deep_gemm/")):
        if not any(n.startswith(prefix) for n in found):
            raise StageError(f"{wheel.name} has no {what} object ({prefix}...): build without --native")
    return found


def tree_bytes(repo: Path = REPO) -> int:
    """The bytes of the repository's files that travel with every device call (tracked and untracked-not-ignored,
    as `git ls-files` lists them; a file listed but gone counts nothing)."""
    listed = subprocess.run(
        ["git", "-C", str(repo), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        capture_output=True,
        check=True,
    ).stdout
    total = 0
    for name in {n for n in listed.decode(errors="surrogateescape").split("\0") if n}:
        try:
            total += (repo / name).lstat().st_size
        except OSError:
            pass
    return total


def default_part_bytes(repo: Path = REPO) -> int:
    """A part that fits one call beside the repository's tree (`CALL_BYTES` less the tree less `CALL_MARGIN`),
    rounded down to 64 KiB. Raises StageError when the tree leaves less than 8 MiB."""
    tree = tree_bytes(repo)
    part = (CALL_BYTES - tree - CALL_MARGIN) & ~0xFFFF
    if part < 8 << 20:
        raise StageError(
            f"the repository's files take {tree} bytes of a call's {CALL_BYTES}: too little is left for "
            "a part; give --part-mib, or move large files out of the tree"
        )
    return part


def read_payload(path: Path) -> dict:
    """The manifest of a payload built earlier: its folder (`.devstage33`, read from p1) or a manifest.json."""
    for candidate in (path, path / "manifest.json", path / "p1" / "manifest.json"):
        if candidate.is_file():
            try:
                manifest = json.loads(candidate.read_text())
            except ValueError as exc:
                raise StageError(f"{candidate} is not a manifest ({exc}); build that payload again") from None
            if not isinstance(manifest, dict) or not {"items", "part_sha256", "lock"} <= set(manifest):
                raise StageError(f"{candidate} is not a stage.py manifest; pass the payload's folder (.devstageNN)")
            return manifest
    raise StageError(f"no manifest under {path}; build that payload first (stage.py build --out {path})")


def streamed(manifest: dict) -> list[tuple[dict, int]]:
    """The items in the payload's own byte stream, each with its offset there (shared items are not in it)."""
    out, offset = [], 0
    for item in manifest["items"]:
        if not item.get("shared"):
            out.append((item, offset))
            offset += item["size"]
    return out


def build(
    lock: Path,
    wheels: Path,
    stock_tree: Path,
    composed_tree: Path,
    out: Path,
    part_bytes: int,
    native: bool = False,
    composed: dict | None = None,
    have: dict | None = None,
) -> dict:
    """Build the parts under `out` (p1, p2, ...; replaced whole) of at most `part_bytes` each. Returns the manifest.
    `native`: carry the native Hopper DSA path too (`EXCLUDE_NATIVE`, `NATIVE_OBJECTS`); `composed`: what
    `compose_trees` composed, kept in the manifest (branch, head commit, entries); `have`: the manifest of a payload
    the machine receives first (`read_payload`): items whose sha256 and size its stream holds are marked `shared`
    and left out of this stream."""
    entries, objects = read_lock(lock)
    for tree, what in ((stock_tree, "--stock-tree"), (composed_tree, "--composed-tree")):
        if not (tree / "__init__.py").is_file():
            raise StageError(f"{what} {tree} is not a vllm/ package folder (no __init__.py); pass the tree's vllm/")
    _check_wheels(entries, wheels, lock)
    stock = next(e for e in entries if e.stock)
    # sha256 -> size of what the other payload's stream holds (its own shared items are not on the machine by it)
    there = {item["sha256"]: item["size"] for item, _offset in streamed(have)} if have else {}
    work = Path(tempfile.mkdtemp(prefix="vc-stage-"))
    try:
        items: list[tuple[str, Path]] = []
        for e in entries:
            if not e.stock:
                items.append((f"whl/{e.file}", wheels / e.file))
        _python_tree(wheels / stock.file, work / "vllm_py.tar.xz", EXCLUDE_NATIVE if native else EXCLUDE)
        items.append(("vllm_py.tar.xz", work / "vllm_py.tar.xz"))
        if native:
            objects = objects + [m for m in native_objects(wheels / stock.file) if m not in objects]
        for member in objects:
            items.append((f"so/{member}.xz", _object_xz(wheels / stock.file, stock.sha256, member)))
        overlay = _overlay(stock_tree, composed_tree, work / "overlay.tar.xz")
        items.append(("overlay.tar.xz", work / "overlay.tar.xz"))
        listed = []
        for name, path in items:
            item = {"name": name, "size": path.stat().st_size, "sha256": sha256_of(path)}
            if there.get(item["sha256"]) == item["size"]:
                item["shared"] = True
            listed.append(item)
        sent = [path for (_n, path), item in zip(items, listed, strict=True) if not item.get("shared")]
        total = sum(p.stat().st_size for p in sent)
        parts = max(1, -(-total // part_bytes))
        manifest = {
            "lock": lock.name,
            "release": stock.version,
            "part_bytes": part_bytes,
            "parts": parts,
            "total_bytes": total,
            "items": listed,
            "overlay": overlay,
            "native": native,
            "composed": composed,
            # the payload the shared items travel in (the machine finds them by sha256 in VC_STAGE_SHARED)
            "shared_with": (
                {"lock": have["lock"], "release": have.get("release"), "part_sha256": have["part_sha256"]}
                if have and any(i.get("shared") for i in listed)
                else None
            ),
            "shared_bytes": sum(i["size"] for i in listed if i.get("shared")),
            "part_sha256": [],
        }
        staging = out.with_name(out.name + ".new")
        shutil.rmtree(staging, ignore_errors=True)
        for i in range(1, parts + 1):
            (staging / f"p{i}").mkdir(parents=True)
        # one stream, cut into parts
        index, left, f = 1, part_bytes, open(staging / "p1" / "part", "wb")
        try:
            for path in sent:
                with open(path, "rb") as src:
                    while block := src.read(min(left, 1 << 20)):
                        f.write(block)
                        left -= len(block)
                        if left == 0 and index < parts:
                            f.close()
                            index, left = index + 1, part_bytes
                            f = open(staging / f"p{index}" / "part", "wb")
        finally:
            f.close()
        manifest["part_sha256"] = [sha256_of(staging / f"p{i}" / "part") for i in range(1, parts + 1)]
        text = json.dumps(manifest, indent=1)
        for i in range(1, parts + 1):
            (staging / f"p{i}" / "manifest.json").write_text(text)
        if out.exists():
            shutil.rmtree(out)
        staging.replace(out)
        return manifest
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _manifest(folder: Path) -> dict:
    try:
        return json.loads((folder / "manifest.json").read_text())
    except (OSError, ValueError) as exc:
        raise StageError(f"{folder}/manifest.json is missing or unreadable ({exc}); carry the part folder") from None


def receive(n: int, source: Path = REPO / ".devstage") -> str:
    """Check part `n` (carried as SOURCE/pN, by default .devstage/pN) against its manifest and keep it under
    DEST/parts."""
    folder = source / f"p{n}"
    manifest = _manifest(folder)
    if not 1 <= n <= manifest["parts"]:
        raise StageError(f"part {n} of a payload of {manifest['parts']} parts")
    got = sha256_of(folder / "part")
    if got != manifest["part_sha256"][n - 1]:
        raise StageError(
            f"part {n} has sha256 {got}, the manifest says {manifest['part_sha256'][n - 1]}; carry it again"
        )
    parts = DEST / "parts"
    parts.mkdir(parents=True, exist_ok=True)
    kept = parts / "manifest.json"
    if kept.is_file() and json.loads(kept.read_text())["part_sha256"] != manifest["part_sha256"]:
        for old in parts.iterdir():  # parts of another payload
            old.unlink()
    shutil.copyfile(folder / "manifest.json", kept)
    tmp = parts / f"p{n}.tmp"
    shutil.copyfile(folder / "part", tmp)
    tmp.replace(parts / f"p{n}")
    have = sorted(int(p.name[1:]) for p in parts.glob("p*") if p.name[1:].isdigit())
    return f"part {n} of {manifest['parts']} ok ({manifest['lock']}); have {len(have)}: {have}"


def _stream_blocks(parts: Path, part_bytes: int, offset: int, size: int):
    """`size` bytes from `offset` of the byte stream cut into parts/p1, p2, ..., in blocks of at most 1 MiB."""
    while size:
        index, within = divmod(offset, part_bytes)
        path = parts / f"p{index + 1}"
        with open(path, "rb") as f:
            f.seek(within)
            while size and within < part_bytes:
                block = f.read(min(size, 1 << 20, part_bytes - within))
                if not block:
                    raise StageError(f"{path} ends at {within} bytes, before the manifest's items do; stage again")
                yield block
                size -= len(block)
                within += len(block)
                offset += len(block)


def _shared_sources(manifest: dict, folders: list[Path]) -> dict[str, tuple[Path, dict, int]]:
    """For each item `manifest` marks shared: (the parts folder, that payload's manifest, the item's offset in its
    stream), from the first of `folders` (DEST folders of payloads received earlier) whose parts hold it. Raises
    StageError naming every shared item not found, or whose parts are missing there."""
    wanted = {i["sha256"]: i for i in manifest["items"] if i.get("shared")}
    found: dict[str, tuple[Path, dict, int]] = {}
    gaps: dict[str, str] = {}
    for folder in folders:
        parts = folder / "parts"
        try:
            other = json.loads((parts / "manifest.json").read_text())
        except (OSError, ValueError):
            continue
        for item, offset in streamed(other):
            sha = item["sha256"]
            if sha not in wanted or sha in found or item["size"] != wanted[sha]["size"]:
                continue
            first, last = offset // other["part_bytes"] + 1, (offset + item["size"] - 1) // other["part_bytes"] + 1
            absent = [i for i in range(first, last + 1) if not (parts / f"p{i}").is_file()]
            if absent:
                gaps[sha] = f"{parts} lacks its parts {absent} of {other['lock']}"
                continue
            found[sha] = (parts, other, offset)
    lost = [i for sha, i in wanted.items() if sha not in found]
    if lost:
        with_ = manifest.get("shared_with") or {}
        raise StageError(
            f"{len(lost)} shared item(s) of {manifest['lock']} are not on this machine: "
            + "; ".join(
                f"{i['name']} (sha256 {i['sha256'][:16]}..., {gaps.get(i['sha256'], 'in none')})" for i in lost[:6]
            )
            + (f"; and {len(lost) - 6} more" if len(lost) > 6 else "")
            + f". They travel in {with_.get('lock', 'the payload built with --have')}: receive all its parts into "
            "their own VC_STAGE_DEST first and name that folder in VC_STAGE_SHARED (looked in: "
            + (", ".join(str(f) for f in folders) or "nothing, VC_STAGE_SHARED is unset")
            + ")"
        )
    return found


def _write_item(blocks, path: Path, item: dict, source: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    h = hashlib.sha256()
    with open(path, "wb") as f:
        for block in blocks:
            f.write(block)
            h.update(block)
    if h.hexdigest() != item["sha256"]:
        raise StageError(
            f"{item['name']}: sha256 {h.hexdigest()} read from {source}, manifest {item['sha256']}; stage again"
        )


def install(models: bool = True, shared: list[Path] | None = None) -> str:
    """Join the received parts, check each item, install: wheels -> DEST/site, stock -> DEST/stock, stock plus
    the overlay -> DEST/composed (the objects into both); then the tiny models (`write_models`). Items the manifest
    marks shared are read from the parts of an earlier payload under one of `shared` (default `SHARED`)."""
    parts = DEST / "parts"
    if not (parts / "manifest.json").is_file():
        raise StageError(f"no part received under {parts}; run 'receive N' with each part carried, then install")
    manifest = _manifest(parts)
    missing = [i for i in range(1, manifest["parts"] + 1) if not (parts / f"p{i}").is_file()]
    if missing:
        raise StageError(f"parts {missing} of {manifest['parts']} not received; run 'receive N' with each carried")
    sources = _shared_sources(manifest, SHARED if shared is None else shared)
    items = DEST / "items"
    shutil.rmtree(items, ignore_errors=True)
    offset = 0
    for item in manifest["items"]:
        if item.get("shared"):
            where, other, at = sources[item["sha256"]]
            blocks = _stream_blocks(where, other["part_bytes"], at, item["size"])
        else:
            where, blocks = parts, _stream_blocks(parts, manifest["part_bytes"], offset, item["size"])
            offset += item["size"]
        _write_item(blocks, items / item["name"], item, where)
    wheels = sorted(str(p) for p in (items / "whl").glob("*.whl"))
    shutil.rmtree(DEST / "site", ignore_errors=True)
    if wheels:
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "install",
                "-q",
                "--no-index",
                "--no-deps",
                "--no-compile",
                "--no-cache-dir",
                "--target",
                str(DEST / "site"),
                *wheels,
            ],
            check=True,
        )
    for tree in ("stock", "composed"):
        shutil.rmtree(DEST / tree, ignore_errors=True)
        (DEST / tree).mkdir(parents=True)
        with tarfile.open(items / "vllm_py.tar.xz") as tar:
            tar.extractall(DEST / tree, **_SAFE)
        for obj in (items / "so").rglob("*.xz"):
            member = obj.relative_to(items / "so").with_suffix("")
            (DEST / tree / member).parent.mkdir(parents=True, exist_ok=True)
            with lzma.open(obj) as xz, open(DEST / tree / member, "wb") as f:
                shutil.copyfileobj(xz, f)
    with tarfile.open(items / "overlay.tar.xz") as tar:  # paths relative to the composed vllm/ folder
        tar.extractall(DEST / "composed" / "vllm", **_SAFE)
    shutil.rmtree(items)
    if models:
        write_models(DEST)
    return (
        f"installed {manifest['lock']}: {len(wheels)} wheels -> {DEST}/site; stock and composed vLLM "
        f"{manifest['release']} ({len(manifest['overlay'])} overlay files"
        f"{', FlashMLA and DeepGEMM included' if manifest.get('native') else ''}) -> {DEST}/stock, {DEST}/composed"
        + (
            f"; composed tree: {manifest['composed']['branch']} at {manifest['composed']['head'][:12]}"
            if manifest.get("composed")
            else ""
        )
        + (
            f"; {len(sources)} shared items read from {sorted({str(w) for w, _m, _o in sources.values()})}"
            if sources
            else ""
        )
    )


def write_models(dest: Path, layers: int = int(os.environ.get("VC_LAYERS", "4"))) -> None:
    """The four tiny checkpoints of the validation runs (lab/device/run_all.sh's VC_MODEL names them)."""
    # the device machine runs `install` from a copy of the working tree, where vllm_compose is not installed
    sys.path.insert(0, str(REPO / "src"))
    from vllm_compose.proof.tinyglm import TinyGlmSpec, generate

    generate(TinyGlmSpec(num_hidden_layers=layers), dest / "tiny", max_model_len=1024)
    generate(TinyGlmSpec(num_hidden_layers=layers, fixed_routing=True), dest / "tiny_fixed", max_model_len=1024)
    # cycle model (TokenCycle): greedy tokens and MTP acceptance known in advance
    generate(
        TinyGlmSpec(num_hidden_layers=layers, weights="cycle", vocab_size=512), dest / "tiny_cycle", max_model_len=1024
    )
    # the same cycle with every draft wrong by design
    generate(
        TinyGlmSpec(
            num_hidden_layers=layers, weights="cycle", vocab_size=512, draft_via_embedding=0.0, draft_via_hidden=0.0
        ),
        dest / "tiny_cycle_wrong",
        max_model_len=1024,
    )


def _vllm_compose() -> list[str]:
    """The command that runs vllm-compose: this Python's package, else the command on PATH, else the repository's
    .venv (the one the README's set-up writes)."""
    import importlib.util

    if importlib.util.find_spec("vllm_compose") is not None:
        return [sys.executable, "-c", "import sys; from vllm_compose.cli import main; sys.exit(main(sys.argv[1:]))"]
    for candidate in (shutil.which("vllm-compose"), REPO / ".venv" / "bin" / "vllm-compose"):
        if candidate and Path(candidate).is_file():
            return [str(candidate)]
    raise StageError(
        "--onto needs vllm-compose: install this repository (pip install -e .) or run stage.py with its .venv's python"
    )


def compose_trees(
    tag: str,
    repo: Path,
    sources: Path | None,
    into: Path,
    series: Path = REPO / "series",
    package: str = "vllm",
    offline: bool = False,
) -> tuple[Path, Path, dict]:
    """Compose `series` onto `tag` in `repo` (`vllm-compose rebase --no-checkout`: the branch is rewritten only
    when the series changed) and write the tag's and the branch's `package/` folder under `into`; returns (stock
    folder, composed folder, what was composed). Needs vllm_compose importable (this repository's package)."""
    into.mkdir(parents=True, exist_ok=True)
    report = into / "rebase.json"
    cmd = [
        *_vllm_compose(),
        "rebase",
        "--onto",
        tag,
        "--repo",
        str(repo),
        "--series",
        str(series),
        "--no-checkout",
        "-q",
        "--json",
        str(report),
        *(["--sources", str(sources)] if sources else []),
        *(["--offline"] if offline else []),
    ]
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0 or not report.is_file():
        tail = " | ".join((done.stderr or done.stdout).strip().splitlines()[-3:])
        raise StageError(f"composing the series onto {tag} in {repo} failed (exit {done.returncode}): {tail}")
    rebase = json.loads(report.read_text())
    trees = {}
    for name, rev in (("stock", rebase["base"]), ("composed", rebase["head"])):
        archive = into / f"{name}.tar"
        with open(archive, "wb") as f:
            got = subprocess.run(["git", "-C", str(repo), "archive", rev, package], stdout=f, stderr=subprocess.PIPE)
        if got.returncode != 0:
            raise StageError(f"git archive {rev} of {repo} failed: {got.stderr.decode().strip()}")
        with tarfile.open(archive) as tar:
            tar.extractall(into / name, **_SAFE)
        trees[name] = into / name / package
    what = {
        "tag": tag,
        "branch": rebase["branch"],
        "head": rebase["head"],
        # the entries on the branch (the series' others are skipped for this release)
        "entries": [e["id"] for e in rebase["entries"] if e["status"] == "applied"],
    }
    return trees["stock"], trees["composed"], what


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("build", help="build .devstage/p1..pN here")
    b.add_argument("--lock", type=Path, required=True)
    b.add_argument("--wheels", type=Path, required=True, help="folder of the lock's wheel files")
    b.add_argument("--onto", metavar="TAG", help="compose the series onto TAG in --repo and stage that")
    b.add_argument("--repo", type=Path, help="with --onto: the vLLM git repository to compose in")
    b.add_argument("--sources", type=Path, help="with --onto: the pinned PR diffs (vllm-compose rebase --sources)")
    b.add_argument("--stock-tree", type=Path, help="without --onto: the release's vllm/ (sdist tag)")
    b.add_argument("--composed-tree", type=Path, help="without --onto: the compose branch's vllm/")
    b.add_argument("--out", type=Path, default=REPO / ".devstage")
    b.add_argument(
        "--part-mib",
        type=float,
        help="the size of a part (default: what a call leaves beside the repository's files, default_part_bytes)",
    )
    b.add_argument(
        "--have",
        type=Path,
        metavar="PAYLOAD",
        help="a payload built earlier (its folder, e.g. .devstage33) that the machine receives first: items it "
        "carries are left out of this one (shared; install reads them there, VC_STAGE_SHARED)",
    )
    b.add_argument(
        "--native",
        action="store_true",
        help="carry FlashMLA and DeepGEMM too (the native Hopper path: the oracle's second opinion)",
    )
    r = sub.add_parser("receive", help="on the machine: check and keep the carried part N")
    r.add_argument("n", type=int)
    r.add_argument(
        "--from",
        dest="source",
        type=Path,
        default=Path(".devstage"),
        metavar="DIR",
        help="the carried payload folder, relative to the repository (default .devstage)",
    )
    i = sub.add_parser("install", help="on the machine: join, check and install the received parts")
    i.add_argument("--no-models", action="store_true")
    args = ap.parse_args(argv)
    try:
        if args.cmd == "build":
            if args.onto and (args.stock_tree or args.composed_tree):
                ap.error("--onto composes the trees itself: leave out --stock-tree and --composed-tree")
            if args.onto and not args.repo:
                ap.error("--onto needs --repo (the vLLM git repository to compose in)")
            if not args.onto and not (args.stock_tree and args.composed_tree):
                ap.error("give --onto TAG --repo DIR, or both --stock-tree and --composed-tree")
            part_bytes = int(args.part_mib * (1 << 20)) if args.part_mib else default_part_bytes()
            have = read_payload(args.have) if args.have else None
            with tempfile.TemporaryDirectory(prefix="vc-trees-") as tmp:
                stock_tree, composed_tree, composed = args.stock_tree, args.composed_tree, None
                if args.onto:
                    stock_tree, composed_tree, composed = compose_trees(args.onto, args.repo, args.sources, Path(tmp))
                m = build(
                    args.lock,
                    args.wheels,
                    stock_tree,
                    composed_tree,
                    args.out,
                    part_bytes,
                    args.native,
                    composed,
                    have,
                )
            shared = [i for i in m["items"] if i.get("shared")]
            print(
                f"{m['parts']} parts of <= {part_bytes} bytes, {m['total_bytes']} bytes, {len(m['items'])} items, "
                f"{len(m['overlay'])} overlay files{' (native path included)' if m['native'] else ''} "
                f"-> {args.out}/p1..p{m['parts']}"
                + (
                    f"; {composed['branch']} at {composed['head'][:12]}, {len(composed['entries'])} entries"
                    if composed
                    else ""
                )
                + (
                    f"; {len(shared)} items ({m['shared_bytes']} bytes) shared with {m['shared_with']['lock']}, "
                    "not in these parts"
                    if shared
                    else ""
                )
            )
            room = CALL_BYTES - part_bytes - (args.out / "p1" / "manifest.json").stat().st_size
            print(
                f"a call carries one part and the repository's files: they must stay under {room} bytes "
                f"(now {tree_bytes()})"
            )
        elif args.cmd == "receive":
            print(receive(args.n, REPO / args.source))
        else:
            print(install(models=not args.no_models))
    except StageError as exc:
        print(f"stage: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
