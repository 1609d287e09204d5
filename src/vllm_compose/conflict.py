"""Conflicts a person resolves: diff3 markers, the conflict worktree, and the fix entry recorded from a resolution.

When an entry cannot be placed the compose stops (`compose.Composer`), and this module writes what a person starts
from: each of the entry's files with the placed hunks applied and the conflicting ones as diff3 markers at their
best candidate site (`with_markers`, also what `apply --markers` writes into a plain directory), in a worktree
folder that never overwrites one an earlier run left (`unused_folder`). `--continue` reads the edited files back
and `record_resolution` turns the difference into a new local skew-fix patch and its `[[entry]]` in series.toml,
right after the stopped entry; `edited_files` tells `--abort` whether the folder holds a person's work.
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

from .atomicfile import write_atomically
from .errors import ConflictError, RepositoryError
from .patchfile import FilePatch, decode_text, encode_text, format_patch, unified_diff
from .placement import FilePlacement, Placement
from .results import RunState
from .series import Series, version_of_tag
from .trees import FileTree

MARKER_OURS = "<<<<<<< target"
MARKER_BASE = "||||||| patch base"
MARKER_SEP = "======="
MARKER_THEIRS = ">>>>>>> patch"
#: any diff3 marker line (git's and ours): a resolved file has none left
MARKER_RE = re.compile(r"^(<<<<<<<|\|\|\|\|\|\|\||=======|>>>>>>>)( |$)", re.M)
#: the author and date of a recorded fix patch: fixed, so the same resolution gives the same patch file
FIX_AUTHOR = "vllm-compose maintainers <maintainers@vllm-compose.invalid>"
FIX_DATE = "Thu, 01 Jan 1970 00:00:00 +0000"


# ---------------------------------------------------------------------------------------------------------------
# Markers


def with_markers(lines: list[str], placements: list[Placement]) -> list[str]:
    """The file with placed hunks applied and each conflict written as diff3 markers at its best candidate site."""
    edits: list[tuple[int, int, list[str]]] = []
    for p in placements:
        if p.ok and p.replacement is not None and p.start is not None:
            edits.append((p.start, p.end if p.end is not None else p.start, p.replacement))
        elif not p.ok:
            pre = p.hunk.pre_image
            if p.candidates:
                start = max(0, p.candidates[0][0] - 1 - p.hunk.leading_context)
            else:
                start = max(0, min(len(lines), p.hunk.old_start - 1))
            end = min(len(lines), start + len(pre)) if p.candidates else start
            edits.append(
                (
                    start,
                    end,
                    [MARKER_OURS, *lines[start:end], MARKER_BASE, *pre, MARKER_SEP, *p.hunk.post_image, MARKER_THEIRS],
                )
            )
    out: list[str] = []
    at = 0
    for start, end, repl in sorted(edits, key=lambda e: (e[0], e[1])):
        if start < at:
            # overlaps an edit already made: keep the target lines of the overlap untouched, put the block after it
            if repl and repl[0] == MARKER_OURS:
                base_at = repl.index(MARKER_BASE)
                repl = [MARKER_OURS, *repl[base_at:]]
                start = end = at
            else:
                continue
        out += lines[at:start]
        out += repl
        at = max(at, end)
    out += lines[at:]
    return out


def files_with_markers(file_placements: list[tuple[FilePatch, FilePlacement, str | None]]) -> dict[str, bytes]:
    """Each file of a stopped entry as a person resolving it starts from: placed hunks applied, conflicting ones as
    diff3 markers at their best candidate site."""
    files: dict[str, bytes] = {}
    for fp, fpl, text in file_placements:
        if fpl.conflicts:
            files[fp.path] = encode_text("\n".join(with_markers((text or "").split("\n"), fpl.placements)))
        elif fpl.new_text is not None:
            files[fp.path] = encode_text(fpl.new_text)
    return files


# ---------------------------------------------------------------------------------------------------------------
# The conflict worktree


def unused_folder(folder: Path) -> Path:
    """`folder` when it does not exist or is empty, else the first `folder.N` (N = 2, 3, ...) that is: a conflict
    worktree is never written over one that may hold a person's edits."""
    candidate, n = folder, 1
    while candidate.exists() and (not candidate.is_dir() or any(candidate.iterdir())):
        n += 1
        candidate = folder.with_name(f"{folder.name}.{n}")
    return candidate


def write_worktree(worktree: Path, files: dict[str, bytes], entry_id: str, reason: str) -> dict[str, str]:
    """Write a stopped entry's files into `worktree`, with a CONFLICT.txt saying what to do; returns path -> sha256
    of what was written."""
    written: dict[str, str] = {}
    worktree.mkdir(parents=True, exist_ok=True)
    for path, data in sorted(files.items()):
        dest = worktree / path
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_bytes(data)
        written[path] = _sha(data)
    (worktree / "CONFLICT.txt").write_text(
        f"vllm-compose stopped at entry {entry_id!r}.\n{reason}\n\n"
        "Edit the files below this folder until no conflict markers remain, then run the compose again with "
        "--continue: the difference between what could be applied and your files becomes a new local skew-fix "
        "patch in the series. --abort drops the run (files you edited here are kept).\n"
    )
    return written


def edited_files(worktree: Path, written: dict[str, str]) -> list[str]:
    """The files of `written` (path -> sha256 at writing) that are missing from `worktree` or changed since."""
    return [
        rel
        for rel, digest in written.items()
        if not (worktree / rel).is_file() or _sha((worktree / rel).read_bytes()) != digest
    ]


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


# ---------------------------------------------------------------------------------------------------------------
# Recording a resolution as a fix entry


def record_resolution(
    series_dir: Path,
    series: Series,
    state: RunState,
    placed: dict[str, bytes | None],
    before: FileTree,
    message: str | None = None,
) -> str:
    """Turn the person's files in the conflict worktree into a new local skew-fix patch and its `[[entry]]` (right
    after the stopped entry, restricted to the tag, declaring the hunks it `resolves`); returns the fix's id.

    `placed` is what the engine could apply of the stopped entry (path -> bytes); `before` is the tree before the
    entry. Raises `RepositoryError` when a file is missing and `ConflictError` when markers remain or the files
    hold nothing beyond what was placed; nothing is written then.
    """
    worktree = Path(state.worktree)
    diffs = []
    for rel in sorted(state.written):
        edited = worktree / rel
        if not edited.is_file():
            raise RepositoryError(f"{edited} is missing", file=rel, hint="restore it, or --abort")
        text = decode_text(edited.read_bytes())
        marker = MARKER_RE.search(text)
        if marker:
            line = text[: marker.start()].count("\n") + 1
            raise ConflictError(
                f"conflict markers remain at line {line}",
                file=rel,
                entry=state.entry,
                hint=f"edit {edited} until no <<<<<<< / ======= / >>>>>>> lines remain, then --continue",
            )
        start = placed.get(rel, before.read(rel))
        diffs.append(unified_diff(rel, decode_text(start) if start is not None else None, text))
    diff = "".join(diffs)
    if not diff:
        raise ConflictError(
            "the worktree holds exactly what the engine placed: no resolution to record",
            entry=state.entry,
            tag=state.tag,
            hint="edit the files to carry the conflicting hunks, or --abort",
        )
    fix_id = _new_fix_id(series, state.entry, state.tag)
    fname = f"{_next_patch_number(series_dir):04d}-{fix_id}.patch"
    subject = (
        message.splitlines()[0] if message else f"Resolve {state.entry} on {state.tag}: carry its conflicting hunks"
    )
    body = (message.split("\n", 1)[1] if message and "\n" in message else "") or (
        f"Entry {state.entry} does not place cleanly on {state.tag}: "
        + ", ".join(f"{f} hunk {h}" for f, h in state.conflicts)
        + " conflicted. This fix was recorded from a person's resolution (vllm-compose --continue) and carries "
        "those hunks in the form that fits this release."
    )
    resolves = [f"{state.entry}:{f}#{h}" for f, h in state.conflicts]
    _write_fix_entry(
        series_dir, state.entry, fix_id, fname, format_patch(subject, body, FIX_AUTHOR, FIX_DATE, diff), subject,
        state.tag, resolves,
    )  # fmt: skip
    return fix_id


def _new_fix_id(series: Series, entry_id: str, tag: str) -> str:
    base = f"fix-{entry_id}-{tag}".lower().replace("_", "-")
    ids = {e.id for e in series.entries}
    candidate, n = base, 2
    while candidate in ids:
        candidate, n = f"{base}-{n}", n + 1
    return candidate


def _next_patch_number(series_dir: Path) -> int:
    numbers = [
        int(m.group(1)) for p in (series_dir / "patches").glob("*.patch") if (m := re.match(r"(\d{4})-", p.name))
    ]
    return max(numbers, default=0) + 1


def _write_fix_entry(
    series_dir: Path,
    after_entry: str,
    fix_id: str,
    fname: str,
    patch_text: str,
    title: str,
    tag: str,
    resolves: list[str],
) -> None:
    """Add the patch file and an `[[entry]]` right after `after_entry`'s block in series.toml (atomically)."""
    (series_dir / "patches").mkdir(exist_ok=True)
    write_atomically(series_dir / "patches" / fname, patch_text.encode())
    toml_path = series_dir / "series.toml"
    text = toml_path.read_text()
    block = (
        "\n[[entry]]\n"
        f'id = "{fix_id}"\n'
        f'file = "patches/{fname}"\n'
        f"title = {_toml_str(title)}\n"
        'upstream_status = "Inappropriate"\n'
        f'upstream_status_detail = "skew fix for composing onto {tag}"\n'
        f'tags = "=={version_of_tag(tag)}"\n'
        f"why = {_toml_str('Recorded from a resolution of conflicts of ' + after_entry + ' on ' + tag)}\n"
        "resolves = [" + ", ".join(_toml_str(r) for r in resolves) + "]\n"
    )
    starts = [m.start() for m in re.finditer(r"(?m)^\[\[entry\]\]", text)]
    pos = len(text)
    for i, s in enumerate(starts):
        if re.search(
            rf'(?m)^id\s*=\s*"{re.escape(after_entry)}"', text[s : starts[i + 1] if i + 1 < len(starts) else len(text)]
        ):
            pos = starts[i + 1] if i + 1 < len(starts) else len(text)
            break
    new_text = text[:pos].rstrip("\n") + "\n" + block + ("\n" + text[pos:] if pos < len(text) else "")
    write_atomically(toml_path, new_text.encode())


def _toml_str(s: str) -> str:
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"').replace("\n", " ") + '"'
