"""Conflicts a person resolves: diff3 markers, reject files, the conflict worktree, and the fix entry recorded from a
resolution.

When an entry cannot be placed the compose stops (`compose.Composer`), and this module writes what a person starts
from (`conflict_folder`): each of the entry's files with the placed hunks applied and, for a conflict at a site the
engine took as the hunk's place but cannot merge into, diff3 markers there (`with_markers`, also what `apply
--markers` writes into a plain directory). A hunk the engine refused (no site, none in the right scope, too little
agreement, ambiguous) gets no markers anywhere: markers at a site the engine rejected would read as its answer, and
accepting their side as written could break the file. It is listed instead, as the entry wrote it with why and its
candidate sites, in `<file>.rej` next to the file. The folder never overwrites one an earlier run left
(`unused_folder`). `--continue` reads the edited files back and `record_resolution` turns the difference into a new
local skew-fix patch and its `[[entry]]` in series.toml, right after the stopped entry; `edited_files` tells
`--abort` whether the folder holds a person's work.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from pathlib import Path

from .atomicfile import write_atomically
from .errors import ConflictError, RepositoryError
from .patchfile import FilePatch, Hunk, decode_text, encode_text, format_patch, unified_diff
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
# Markers and reject files


@dataclass
class ConflictFolder:
    """What a person resolving a stopped entry starts from (paths relative to the folder)."""

    #: path -> bytes of each of the entry's files: placed hunks applied, a conflict at a site the engine took as
    #: diff3 markers there; what `--continue` reads back
    files: dict[str, bytes] = field(default_factory=dict)
    #: `<path>.rej` -> bytes, one per file with refused hunks (the engine took no site for them): each hunk as the
    #: entry wrote it, why, and its candidate sites; for a person to read, never read back
    rejects: dict[str, bytes] = field(default_factory=dict)
    #: (path, hunk number) of each conflict written as markers at its site, in patch order
    marked: list[tuple[str, int]] = field(default_factory=list)
    #: (path, hunk number) of each refused hunk, in patch order
    refused: list[tuple[str, int]] = field(default_factory=list)

    def summary(self, worktree: Path) -> str:
        """Where the folder is and what it holds, in a sentence for the report (`worktree`: where it was written)."""
        if not self.refused:
            return f"the entry's files are in {worktree} with conflict markers"
        rejects = ", ".join(str(worktree / path) for path in sorted(self.rejects))
        refused = f"{len(self.refused)} hunk(s) the engine took no site for have no markers: read them in {rejects}"
        if self.marked:
            return f"the entry's files are in {worktree} with conflict markers at the sites found; {refused}"
        return f"the entry's files are in {worktree}, as far as they could be applied; {refused}"


def with_markers(lines: list[str], placements: list[Placement]) -> list[str]:
    """The file with placed hunks applied and each conflict at a site the engine took written as diff3 markers
    there. A refused conflict (no site) gets no markers: any spot would be a guess the engine itself rejected."""
    return _marked(lines, placements)[0]


def _marked(lines: list[str], placements: list[Placement]) -> tuple[list[str], list[int]]:
    """`with_markers`, and where each target line went: `at[k]` is the 0-based line of the result holding target
    line k (for a line a placed hunk replaced, the first line the hunk wrote); `at[len(lines)]` is the end.

    A marker block never takes lines a placed hunk replaced: where its site overlaps a placed hunk (or an earlier
    block), the target lines there stay as they are and the block, with an empty target side, follows them.
    """
    placed = [
        (p.start, p.end if p.end is not None else p.start, p.replacement)
        for p in placements
        if p.ok and p.replacement is not None and p.start is not None
    ]
    # (start, end, 0 for a placed hunk / 1 for a marker block, lines): at one spot a placed hunk goes first
    edits: list[tuple[int, int, int, list[str]]] = [(s, e, 0, r) for s, e, r in placed]
    for p in placements:
        if p.ok or p.site is None:
            continue
        site = p.site
        start, end = min(len(lines), site.start), min(len(lines), site.end)
        clash = [pe for ps, pe, _ in placed if (ps < end and start < pe) or (ps == pe and start < ps < end)]
        if clash:
            start = end = max(clash)
        # the hunk's sides without its context lines the target does not have at the site: each side of the block
        # then stands for the same lines, and taking one as written leaves no stray line behind
        pre, post = p.hunk.pre_image, p.hunk.post_image
        base, theirs = pre[site.head : len(pre) - site.tail], post[site.head : len(post) - site.tail]
        block = [MARKER_OURS, *lines[start:end], MARKER_BASE, *base, MARKER_SEP, *theirs, MARKER_THEIRS]
        edits.append((start, end, 1, block))
    out: list[str] = []
    at = [0] * (len(lines) + 1)
    pos = 0

    def keep(upto: int) -> None:
        for k in range(pos, upto):
            at[k] = len(out) + k - pos
        out.extend(lines[pos:upto])

    for start, end, is_block, repl in sorted(edits, key=lambda e: e[:3]):
        if start < pos:  # only a block meets an earlier one: placed hunks never overlap, nor blocks them (above)
            start = end = pos
            repl = [MARKER_OURS, *repl[repl.index(MARKER_BASE) :]]
        keep(start)
        for k in range(start, end):
            at[k] = len(out) + (1 + k - start if is_block else 0)  # a block's target side holds the line itself
        out += repl
        pos = max(pos, end)
    keep(len(lines))
    at[len(lines)] = len(out)
    return out, at


def reject_text(fp: FilePatch, hunks: list[Hunk]) -> str:
    """A GNU-style reject section: file header and the rejected hunks, verbatim."""
    old = f"a/{fp.old_path}" if fp.old_path else "/dev/null"
    new = f"b/{fp.new_path}" if fp.new_path else "/dev/null"
    return f"--- {old}\n+++ {new}\n" + "".join(h.to_text() for h in hunks)


def _annotated_reject(fp: FilePatch, refused: list[Placement], at: list[int], entry_id: str, exists: bool) -> str:
    """The reject file of one file of a stopped entry: per refused hunk, why the engine took no site for it and its
    candidate sites (as comment lines, which patch tools skip), then the hunk as the entry wrote it. Each hunk has
    a file header of its own, so the file stays a patch (`git apply`, `patch -p1` read it). `exists`: whether the
    file is in the tree before the entry (and so in the folder)."""
    name = fp.path.rsplit("/", 1)[-1]
    sections = []
    for p in refused:
        h = p.hunk
        notes = [
            f"hunk {h.index} of {fp.path} (entry {entry_id}) was not placed.",
            f"The engine took no site for it: {name} here has no conflict markers for it."
            if exists
            else f"The engine took no site for it: the tree before this entry has no {name}.",
            f"To carry it, edit {name}, then --continue."
            if exists
            else "--continue reads only the files here: carry it in a fix entry of your own.",
            "Why (lines counted in the file before this entry):",
            *(f"  {line}" for line in (p.evidence or "conflict").splitlines()),
        ]
        if p.candidates:
            notes.append(f"Candidate sites, best first (line in {name} here; line before this entry; score):")
            for c in p.candidates:
                here = at[min(max(c.line - 1, 0), len(at) - 1)] + 1
                notes.append(f"  line {here} ({c.line}): score {c.score:.2f}: {c.note or 'acceptable alone'}")
        else:
            notes.append("Candidate sites: none")
        sections.append("".join(f"# {x}\n" for x in notes) + reject_text(fp, [h]))
    return "".join(sections)


def conflict_folder(
    entry_id: str, file_placements: list[tuple[FilePatch, FilePlacement, str | None]]
) -> ConflictFolder:
    """Each file of a stopped entry as a person resolving it starts from (see `ConflictFolder`), from its
    placement: (file patch, placement, the file's text before the entry or None)."""
    folder = ConflictFolder()
    for fp, fpl, text in file_placements:
        refused = [p for p in fpl.placements if p.refused]
        if fpl.conflicts:
            lines = (text or "").split("\n")
            marked, at = _marked(lines, fpl.placements)
            if text is not None:  # a file the tree lacks has no hunk with a site: nothing to write but its reject
                folder.files[fp.path] = encode_text("\n".join(marked))
            folder.marked += [(fp.path, p.hunk.index) for p in fpl.conflicts if not p.refused]
            if refused:
                reject = _annotated_reject(fp, refused, at, entry_id, text is not None)
                folder.rejects[fp.path + ".rej"] = encode_text(reject)
                folder.refused += [(fp.path, p.hunk.index) for p in refused]
        elif fpl.new_text is not None:
            folder.files[fp.path] = encode_text(fpl.new_text)
    return folder


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


def write_worktree(worktree: Path, folder: ConflictFolder, entry_id: str, reason: str) -> dict[str, str]:
    """Write a stopped entry's files and reject files into `worktree`, with a CONFLICT.txt saying what to do;
    returns path -> sha256 of the entry's files written (what `--continue` reads back: not the reject files)."""
    written: dict[str, str] = {}
    worktree.mkdir(parents=True, exist_ok=True)
    for path, data in sorted({**folder.files, **folder.rejects}.items()):
        dest = worktree / path
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_bytes(data)
        if path in folder.files:
            written[path] = _sha(data)
    (worktree / "CONFLICT.txt").write_text(conflict_note(folder, entry_id, reason))
    return written


def conflict_note(folder: ConflictFolder, entry_id: str, reason: str) -> str:
    """The CONFLICT.txt of a conflict worktree: why the entry stopped, and what to do."""
    text = f"vllm-compose stopped at entry {entry_id!r}.\n{reason}\n\n"
    if folder.refused:
        text += (
            f"{len(folder.refused)} of these hunks have no conflict markers: the engine took no site for them, and "
            "markers at a site it rejected would be a guess. Each is in a reject file next to its file, as the "
            "entry wrote it, with why and its candidate sites:\n"
            + "".join(f"  {path}.rej: hunk {n}\n" for path, n in folder.refused)
            + "\n"
        )
    return text + (
        "Edit the files below this folder until no conflict markers remain and they carry what the entry means to "
        "change, then run the compose again with --continue: the difference between what could be applied and "
        "your files becomes a new local skew-fix patch in the series"
        + (" (the .rej files are not read)" if folder.refused else "")
        + ". --abort drops the run (files you edited here are kept).\n"
    )


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
