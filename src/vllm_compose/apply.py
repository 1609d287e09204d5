"""Apply patches onto a plain directory (e.g. an installed site-packages) — what `patch -p1 --fuzz=3` did, safely.

Every file's hunks are placed by the placement engine (`place_file`); hunks it cannot place are never guessed: they
are written to `<file>.rej` (GNU-style reject file) or, with `markers=True`, into the file as diff3-style conflict
markers at the site the engine took for them when it took one (a hunk it found no site for still goes to `.rej`). Each file is written atomically (temporary file + `os.replace`, mode kept).

Order of work: preflight (every path resolved inside the target, every file readable) → place every patch in memory,
in order, each seeing the earlier patches' result → write (nothing with `dry_run`). A bad input raises before
anything is written.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path, PurePath, PurePosixPath

from .atomicfile import write_atomically
from .conflict import reject_text, with_markers
from .errors import ComposeError, ExitCode
from .patchfile import FilePatch, Patch, decode_text, encode_text, join_lines, split_lines
from .placement import Verdict, place_file
from .verdicts import hunk_json

#: conflict marker labels (diff3 style, as `git merge-file --diff3` writes them)


@dataclass
class AppliedHunk:
    """One hunk's outcome. `landed_at` is the 1-based line of the target file (before this file's hunks) where its
    first change went; for a conflict, the site the engine took for it, else its best candidate site (None when
    there is none); `expected_at` is the line the patch's `@@` header names."""

    patch: str
    file: str
    hunk: int
    verdict: Verdict
    landed_at: int | None
    expected_at: int | None
    reason: str

    def to_json(self) -> dict:
        return hunk_json(self)


@dataclass
class ApplyResult:
    """Every hunk's outcome in patch order, the files written (or that would be), and the reject files."""

    hunks: list[AppliedHunk]
    written: list[str] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)
    rejects: list[str] = field(default_factory=list)
    dry_run: bool = False

    @property
    def ok(self) -> bool:
        """True when every hunk was placed (or already present)."""
        return all(h.verdict is not Verdict.CONFLICT for h in self.hunks)

    @property
    def exit_code(self) -> ExitCode:
        return ExitCode.OK if self.ok else ExitCode.CONFLICT

    @property
    def summary(self) -> dict[str, int]:
        counts = Counter(h.verdict.value for h in self.hunks)
        return {v.value: counts.get(v.value, 0) for v in Verdict}

    def to_json(self) -> dict:
        return {
            "hunks": [h.to_json() for h in self.hunks],
            "summary": {**self.summary, "ok": self.ok},
            "written": self.written,
            "deleted": self.deleted,
            "rejects": self.rejects,
            "dry_run": self.dry_run,
        }


@dataclass
class _FileWork:
    """A file's state in memory while the patches are placed: its text now, and what to write at the end."""

    path: str  # relative to the target
    original: bytes | None  # None: did not exist
    text: str | None  # current text (None: absent)
    mode: int | None = None  # permission bits to give the written file
    orig_mode: int | None = None  # permission bits it had
    rejects: list[str] = field(default_factory=list)  # reject-file sections, in order


def _bad_input(message: str, **kw) -> ComposeError:
    return ComposeError(message, exit_code=ExitCode.BAD_INPUT, **kw)


def _resolve(root: Path, rel: str, patch: str) -> Path:
    """`root/rel`, refusing any path (or symlink) that leads outside `root`."""
    pure = PurePosixPath(rel)
    if pure.is_absolute() or ".." in pure.parts or rel in ("", "."):
        raise _bad_input(
            f"path {rel!r} leaves the target directory",
            entry=patch,
            file=rel,
            hint="the patch's file names must be relative paths inside the target; check the strip level (-p)",
        )
    path = root / pure
    if not path.resolve().is_relative_to(root.resolve()):
        raise _bad_input(
            f"path {rel!r} resolves outside the target directory (through a symlink)",
            entry=patch,
            file=rel,
            hint="remove the symlink or apply to the directory it points into",
        )
    return path


def _mode_bits(git_mode: str | None) -> int | None:
    if not git_mode:
        return None
    try:
        return int(git_mode, 8) & 0o7777
    except ValueError:
        return None


def apply_patches(target_dir: Path, patches: list[Patch], dry_run: bool = False, markers: bool = False) -> ApplyResult:
    """Apply `patches` in order onto the directory `target_dir`; see the module docstring.

    Raises `ComposeError` (exit code BAD_INPUT) when the target is not a directory or a path escapes it; nothing is
    written then. Conflicts are not errors: they are reported in the result (`exit_code` CONFLICT).
    """
    root = Path(target_dir)
    if not root.is_dir():
        raise _bad_input(f"{root} is not a directory", hint="pass the directory to patch (e.g. site-packages)")

    # preflight: every path inside the target, every existing file readable
    files: dict[str, _FileWork] = {}
    for patch in patches:
        for fp in patch.files:
            for rel in {p for p in (fp.old_path, fp.new_path) if p}:
                path = _resolve(root, rel, patch.name)
                if rel in files:
                    continue
                if path.exists() and not path.is_file():
                    raise _bad_input(
                        f"{rel!r} is not a regular file",
                        entry=patch.name,
                        file=rel,
                        hint="the patch must name files, not directories",
                    )
                try:
                    data = path.read_bytes() if path.is_file() else None
                except OSError as exc:
                    raise _bad_input(
                        f"cannot read {rel!r}: {exc.strerror}",
                        entry=patch.name,
                        file=rel,
                        hint="check the file's permissions",
                    ) from exc
                mode = path.stat().st_mode & 0o7777 if data is not None else None
                files[rel] = _FileWork(rel, data, decode_text(data) if data is not None else None, mode, mode)

    hunks: list[AppliedHunk] = []
    for patch in patches:
        label = PurePath(patch.name).name or patch.name
        for fp in patch.files:
            hunks += _apply_file(label, fp, files, markers)

    result = ApplyResult(hunks, dry_run=dry_run)
    for work in files.values():
        new = encode_text(work.text) if work.text is not None else None
        changed = new != work.original or (new is not None and work.mode != work.orig_mode)
        if changed:
            (result.written if new is not None else result.deleted).append(work.path)
        if work.rejects:
            result.rejects.append(work.path + ".rej")
        if dry_run:
            continue
        target = _resolve(root, work.path, "")
        if new is None:
            if work.original is not None:
                target.unlink()
        elif changed:
            write_atomically(target, new, work.mode)
        if work.rejects:
            write_atomically(Path(str(target) + ".rej"), encode_text("".join(work.rejects)))
    return result


def _apply_file(label: str, fp: FilePatch, files: dict[str, _FileWork], markers: bool) -> list[AppliedHunk]:
    """Place one file section onto the in-memory state; record its hunks' outcomes."""
    src = files[fp.old_path or fp.new_path]  # type: ignore[index]
    dst_path = fp.new_path or fp.old_path
    dst = files[dst_path]  # type: ignore[index]
    out: list[AppliedHunk] = []

    if fp.is_new and src.text is not None and not fp.hunks:
        return out
    if not fp.hunks:
        # a pure rename, deletion or mode change
        if fp.is_delete:
            src.text = None
        elif fp.is_rename:
            dst.text, dst.mode, src.text = src.text, src.mode, None
        if fp.new_mode and dst.text is not None:
            dst.mode = _mode_bits(fp.new_mode)
        return out

    result = place_file(fp, src.text, fp.path)
    placements = result.placements
    for h, p in zip(fp.hunks, placements, strict=True):
        reason = p.evidence or str(p.verdict)
        if p.verdict is Verdict.CONFLICT and result.parse_error and result.parse_error not in reason:
            reason += f" (file no longer parses: {result.parse_error})"
        if p.ok:
            landed = p.landing_line
        elif p.site is not None:
            landed = p.site.start + 1
        else:
            landed = p.candidates[0].line if p.candidates else None
        out.append(AppliedHunk(label, fp.path, h.index, p.verdict, landed, h.old_start or None, reason))

    conflicts = [p for p in placements if not p.ok]
    if markers and any(not p.refused for p in conflicts):
        lines, final_nl = split_lines(src.text or "")
        new_text: str | None = join_lines(with_markers(lines, placements), final_nl)
    else:
        new_text = result.new_text
        if new_text is None and not fp.is_delete:
            new_text = src.text  # nothing could be applied: leave the file as it is
        if fp.is_delete and conflicts:
            new_text = src.text  # never delete a file whose deletion did not fully apply
    rejected = [p.hunk for p in conflicts if not markers or p.refused]
    if rejected:
        dst.rejects.append(reject_text(fp, rejected))

    if fp.is_rename and src is not dst:
        dst.mode = src.mode
        src.text = None
    dst.text = new_text
    if fp.is_new:
        dst.mode = _mode_bits(fp.new_mode) or 0o644
    elif fp.new_mode and fp.old_mode != fp.new_mode:
        dst.mode = _mode_bits(fp.new_mode)
    return out
