"""Unified diffs parsed into `Patch` -> `FilePatch` -> `Hunk`, numbered as GNU patch numbers them.

Text is handled as `str` decoded with UTF-8 + `surrogateescape`, so any byte sequence (non-UTF-8 files, CRLF line
ends) survives a parse/serialise round trip unchanged: a line's text keeps its `\\r` when the patch had one, and
`encode_text()` turns it back into the original bytes.

Hunk numbering: `Hunk.index` is 1-based within its file's section of the patch, which is what GNU patch prints
("Hunk #3 succeeded at ...") and what every report of this project uses.
"""

from __future__ import annotations

import dataclasses
import email.parser
import email.policy
import re
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from .errors import ComposeError, PatchFormatError

_HUNK_HEADER = re.compile(rb"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@ ?(.*?)\r?$")
_DIFF_GIT = re.compile(rb"^diff --git (\S+) (\S+)\r?$")
_EXT_HEADERS = (
    b"old mode ",
    b"new mode ",
    b"deleted file mode ",
    b"new file mode ",
    b"similarity index ",
    b"dissimilarity index ",
    b"rename from ",
    b"rename to ",
    b"copy from ",
    b"copy to ",
    b"index ",
)
DEV_NULL = "/dev/null"


def decode_text(data: bytes) -> str:
    """Bytes -> str losslessly (UTF-8, undecodable bytes kept as surrogates)."""
    return data.decode("utf-8", "surrogateescape")


def encode_text(text: str) -> bytes:
    """Inverse of `decode_text`."""
    return text.encode("utf-8", "surrogateescape")


def ends_in_crlf(lines: list[str]) -> bool:
    """Whether most of `lines` (text without the `\\n`, as `split_lines` gives) end in `\\r`: CRLF text."""
    return sum(line.endswith("\r") for line in lines) * 2 > len(lines) > 0


def split_lines(text: str) -> tuple[list[str], bool]:
    """Split file text into lines without their `\\n` (a `\\r` stays), and whether the last line ended with one."""
    if text == "":
        return [], True
    lines = text.split("\n")
    if lines[-1] == "":
        lines.pop()
        return lines, True
    return lines, False


def join_lines(lines: list[str], final_newline: bool = True) -> str:
    """Inverse of `split_lines`."""
    if not lines:
        return ""
    return "\n".join(lines) + ("\n" if final_newline else "")


@dataclass
class Hunk:
    """One `@@` hunk. `lines` holds (op, text) with op in ' ', '-', '+' and text without its line end."""

    index: int
    old_start: int
    old_len: int
    new_start: int
    new_len: int
    section: str
    lines: list[tuple[str, str]]
    #: the hunk's last old / new line had "\ No newline at end of file"
    old_no_newline: bool = False
    new_no_newline: bool = False

    @property
    def pre_image(self) -> list[str]:
        """Context and removed lines: what the hunk expects to find."""
        return [t for op, t in self.lines if op != "+"]

    @property
    def post_image(self) -> list[str]:
        """Context and added lines: what the hunk leaves behind."""
        return [t for op, t in self.lines if op != "-"]

    @property
    def added(self) -> list[str]:
        return [t for op, t in self.lines if op == "+"]

    @property
    def removed(self) -> list[str]:
        return [t for op, t in self.lines if op == "-"]

    @property
    def leading_context(self) -> int:
        """Number of context lines before the first change."""
        n = 0
        for op, _ in self.lines:
            if op != " ":
                break
            n += 1
        return n

    @property
    def trailing_context(self) -> int:
        """Number of context lines after the last change."""
        n = 0
        for op, _ in reversed(self.lines):
            if op != " ":
                break
            n += 1
        return n

    def header(self) -> str:
        """The `@@ ... @@` line as it would be written."""
        sec = f" {self.section}" if self.section else ""
        return f"@@ -{_range(self.old_start, self.old_len)} +{_range(self.new_start, self.new_len)} @@{sec}"

    def to_text(self) -> str:
        """The hunk in unified-diff form (header and body), each line ending with `\\n`."""
        out = [self.header()]
        last_old = last_new = None
        for i, (op, _) in enumerate(self.lines):
            if op != "+":
                last_old = i
            if op != "-":
                last_new = i
        for i, (op, text) in enumerate(self.lines):
            out.append(op + text)
            if (self.old_no_newline and i == last_old and op == "-") or (
                self.new_no_newline and i == last_new and op == "+"
            ):
                out.append("\\ No newline at end of file")
            elif op == " " and ((self.old_no_newline and i == last_old) or (self.new_no_newline and i == last_new)):
                out.append("\\ No newline at end of file")
        return "\n".join(out) + "\n"


def _range(start: int, length: int) -> str:
    return str(start) if length == 1 else f"{start},{length}"


@dataclass
class FilePatch:
    """All hunks of one file in a patch, with the git extended headers that matter."""

    old_path: str | None  # None for a created file (/dev/null)
    new_path: str | None  # None for a deleted file
    hunks: list[Hunk] = field(default_factory=list)
    old_mode: str | None = None
    new_mode: str | None = None
    is_rename: bool = False
    is_copy: bool = False
    is_binary: bool = False
    #: abbreviated blob ids from a git `index a..b` line, when present
    old_blob: str | None = None
    new_blob: str | None = None

    @property
    def path(self) -> str:
        """The path the file has after the patch (the old path for a deletion)."""
        return self.new_path or self.old_path or "?"

    @property
    def is_new(self) -> bool:
        return self.old_path is None

    @property
    def is_delete(self) -> bool:
        return self.new_path is None

    def to_text(self) -> str:
        """This file's section as a git-style diff."""
        a = self.old_path or self.new_path
        b = self.new_path or self.old_path
        out = [f"diff --git a/{a} b/{b}"]
        if self.is_new:
            out.append(f"new file mode {self.new_mode or '100644'}")
        elif self.is_delete:
            out.append(f"deleted file mode {self.old_mode or '100644'}")
        elif self.old_mode and self.new_mode and self.old_mode != self.new_mode:
            out += [f"old mode {self.old_mode}", f"new mode {self.new_mode}"]
        if self.is_rename:
            out += [f"rename from {self.old_path}", f"rename to {self.new_path}"]
        text = "\n".join(out) + "\n"
        if self.hunks:
            text += f"--- {'a/' + self.old_path if self.old_path else DEV_NULL}\n"
            text += f"+++ {'b/' + self.new_path if self.new_path else DEV_NULL}\n"
            text += "".join(h.to_text() for h in self.hunks)
        return text


@dataclass
class PatchHeader:
    """What a git format-patch (or plain) header says about the change."""

    subject: str = ""
    author: str = ""
    date: str = ""
    body: str = ""
    #: the text before the first diff, verbatim
    raw: str = ""


@dataclass
class Patch:
    """A parsed patch: its header and one `FilePatch` per file section, in order."""

    name: str
    header: PatchHeader
    files: list[FilePatch]

    @property
    def hunk_count(self) -> int:
        return sum(len(f.hunks) for f in self.files)

    def to_text(self) -> str:
        return "".join(f.to_text() for f in self.files)

    def without(self, skip: set[tuple[str, int]]) -> Patch:
        """This patch without the hunks named by (path, hunk index) in `skip`; a file left with none goes."""
        files = []
        for fp in self.files:
            kept = [h for h in fp.hunks if (fp.path, h.index) not in skip]
            if kept:
                files.append(dataclasses.replace(fp, hunks=kept))
        return Patch(self.name, self.header, files)


def strip_path(path: str, strip: int, name: str, line_no: int) -> str | None:
    """Apply a `-p N` strip level to a diff path; /dev/null becomes None."""
    path = path.strip()
    if "\t" in path:  # GNU diff appends a timestamp after a tab
        path = path.split("\t", 1)[0]
    if path == DEV_NULL:
        return None
    if path.startswith('"') and path.endswith('"'):
        path = path[1:-1].encode("latin-1", "backslashreplace").decode("unicode_escape")
    parts = PurePosixPath(path).parts
    if len(parts) <= strip:
        raise PatchFormatError(
            f"line {line_no}: path {path!r} has fewer than {strip + 1} components for strip level -p{strip}",
            file=name,
            hint="pass the strip level that matches the patch (-p0 for paths without a leading a/ b/)",
        )
    rel = PurePosixPath(*parts[strip:])
    if rel.is_absolute() or ".." in rel.parts:
        raise PatchFormatError(
            f"line {line_no}: path {path!r} leaves the tree", file=name, hint="fix the patch's file names"
        )
    return str(rel)


def parse_patch(data: bytes | str, name: str = "<patch>", strip: int = 1) -> Patch:
    """Parse a unified diff (plain, git diff, or git format-patch) into a `Patch`.

    Raises `PatchFormatError` naming the patch, file and line for anything malformed, binary, or empty.
    """
    if isinstance(data, str):
        data = encode_text(data)
    raw_lines = data.split(b"\n")
    if raw_lines and raw_lines[-1] == b"":
        raw_lines.pop()
    n = len(raw_lines)
    i = 0
    files: list[FilePatch] = []
    header_end: int | None = None
    current: FilePatch | None = None

    def err(msg: str, line: int, **kw) -> PatchFormatError:
        return PatchFormatError(f"line {line + 1}: {msg}", file=name, **kw)

    while i < n:
        line = raw_lines[i]
        m = _DIFF_GIT.match(line)
        if m:
            if header_end is None:
                header_end = i
            current = FilePatch(
                old_path=strip_path(decode_text(m.group(1)), strip, name, i + 1),
                new_path=strip_path(decode_text(m.group(2)), strip, name, i + 1),
            )
            files.append(current)
            i += 1
            while i < n and raw_lines[i].startswith(_EXT_HEADERS):
                _apply_ext_header(current, decode_text(raw_lines[i].rstrip(b"\r")), strip, name, i + 1)
                i += 1
            if i < n and (raw_lines[i].startswith(b"Binary files ") or raw_lines[i].startswith(b"GIT binary patch")):
                raise err(
                    f"binary change to {current.path!r} cannot be placed as text",
                    i,
                    hint="binary changes are not supported; ship the file through the series as a text patch",
                )
            continue
        if line.startswith(b"--- ") and i + 1 < n and raw_lines[i + 1].startswith(b"+++ "):
            if header_end is None:
                header_end = i
            old = strip_path(decode_text(line[4:].rstrip(b"\r")), strip, name, i + 1)
            new = strip_path(decode_text(raw_lines[i + 1][4:].rstrip(b"\r")), strip, name, i + 2)
            if (
                current is None
                or current.hunks
                or (current.old_path != old and current.new_path != new and not current.is_rename)
            ):
                current = FilePatch(old_path=old, new_path=new)
                files.append(current)
            else:
                current.old_path, current.new_path = old, new
            i += 2
            continue
        if line.startswith(b"@@ "):
            if current is None:
                raise err("hunk before any file header (--- / +++)", i, hint="the patch is truncated or malformed")
            hunk, i = _parse_hunk(raw_lines, i, len(current.hunks) + 1, current.path, name)
            current.hunks.append(hunk)
            if i < n and _continues_hunk(raw_lines[i]):
                # GNU patch stops at the header's counts and drops the rest as garbage: the change would be
                # applied in part, silently
                raise err(
                    f"hunk {hunk.index} of {current.path!r} (@@ -{hunk.old_start},{hunk.old_len} "
                    f"+{hunk.new_start},{hunk.new_len} @@): its body continues past the header's counts",
                    i,
                    hunk=hunk.index,
                    hint="the patch was edited by hand; fix the @@ counts (or regenerate it with git format-patch)",
                )
            continue
        if line.startswith(b"Binary files ") and header_end is not None:
            raise err("binary change cannot be placed as text", i, hint="binary changes are not supported")
        i += 1

    if not files:
        raise PatchFormatError(
            "no file changes found (no 'diff --git' or '---/+++' headers)",
            file=name,
            hint="is this a unified diff? context diffs and ed scripts are not supported",
        )
    for f in files:
        if not f.hunks and not (f.is_rename or f.is_new or f.is_delete or f.old_mode != f.new_mode):
            raise PatchFormatError(f"file section {f.path!r} has no hunks", file=name, hint="the patch is truncated")
    header_text = decode_text(b"\n".join(raw_lines[: header_end or 0]))
    return Patch(name=name, header=_parse_header(header_text), files=files)


def _apply_ext_header(fp: FilePatch, line: str, strip: int, name: str, line_no: int) -> None:
    if line.startswith("new file mode "):
        fp.old_path = None
        fp.new_mode = line.split()[-1]
    elif line.startswith("deleted file mode "):
        fp.new_path = None
        fp.old_mode = line.split()[-1]
    elif line.startswith("old mode "):
        fp.old_mode = line.split()[-1]
    elif line.startswith("new mode "):
        fp.new_mode = line.split()[-1]
    elif line.startswith("rename from "):
        fp.is_rename = True
        fp.old_path = strip_path("x/" + line[len("rename from ") :], 1, name, line_no)
    elif line.startswith("rename to "):
        fp.is_rename = True
        fp.new_path = strip_path("x/" + line[len("rename to ") :], 1, name, line_no)
    elif line.startswith("copy from ") or line.startswith("copy to "):
        fp.is_copy = True
    elif line.startswith("index "):
        ids = line.split()[1]
        if ".." in ids:
            fp.old_blob, fp.new_blob = ids.split("..", 1)


def _parse_hunk(raw: list[bytes], i: int, index: int, path: str, name: str) -> tuple[Hunk, int]:
    m = _HUNK_HEADER.match(raw[i])
    if not m:
        raise PatchFormatError(
            f"line {i + 1}: malformed hunk header {decode_text(raw[i])!r}",
            file=name,
            hunk=index,
            hint="expected '@@ -START[,LEN] +START[,LEN] @@'",
        )
    old_start, new_start = int(m.group(1)), int(m.group(3))
    old_len = int(m.group(2)) if m.group(2) is not None else 1
    new_len = int(m.group(4)) if m.group(4) is not None else 1
    hunk = Hunk(index, old_start, old_len, new_start, new_len, decode_text(m.group(5)), [])
    header_line = i
    i += 1
    old_seen = new_seen = 0
    while old_seen < old_len or new_seen < new_len:
        if i >= len(raw):
            raise PatchFormatError(
                f"line {header_line + 1}: hunk ends early (expected {old_len} old / {new_len} new lines, "
                f"found {old_seen} / {new_seen})",
                file=name,
                hunk=index,
                hint=f"the patch is truncated in its section for {path!r}",
            )
        line = raw[i]
        op = line[:1]
        text = decode_text(line[1:])
        if op == b" " or line == b"" or line == b"\r":
            if line in (b"", b"\r"):
                text = decode_text(line)  # a blank context line whose leading space was stripped
            hunk.lines.append((" ", text))
            old_seen += 1
            new_seen += 1
        elif op == b"-":
            hunk.lines.append(("-", text))
            old_seen += 1
        elif op == b"+":
            hunk.lines.append(("+", text))
            new_seen += 1
        elif op == b"\\":
            _mark_no_newline(hunk)
        else:
            raise PatchFormatError(
                f"line {i + 1}: unexpected line inside hunk: {decode_text(line)[:60]!r}",
                file=name,
                hunk=index,
                hint=f"the hunk's line counts ({old_len} old, {new_len} new) do not match its body in {path!r}",
            )
        if old_seen > old_len or new_seen > new_len:
            raise PatchFormatError(
                f"line {i + 1}: hunk body longer than its header says ({old_len} old, {new_len} new)",
                file=name,
                hunk=index,
                hint="the patch was edited by hand; fix the @@ counts",
            )
        i += 1
    if i < len(raw) and raw[i].startswith(b"\\"):
        _mark_no_newline(hunk)
        i += 1
    return hunk, i


def _continues_hunk(line: bytes) -> bool:
    """Whether `line`, right after a hunk's last counted line, is one more body line (context, added, removed)
    rather than what may follow a hunk: the next file or hunk header, a blank line, git's `-- ` signature."""
    bare = line.rstrip(b"\r")
    if bare in (b"", b"--", b"-- ") or bare.startswith((b"--- ", b"+++ ")):
        return False
    return line[:1] in (b" ", b"+", b"-")


def _mark_no_newline(hunk: Hunk) -> None:
    if not hunk.lines:
        return
    op = hunk.lines[-1][0]
    if op in (" ", "-"):
        hunk.old_no_newline = True
    if op in (" ", "+"):
        hunk.new_no_newline = True


def _parse_header(text: str) -> PatchHeader:
    """Read subject/author/date/body from a format-patch header (or keep plain text as the body)."""
    lines = text.split("\n")
    if lines and lines[0].startswith("From ") and len(lines[0].split()) >= 2:
        lines = lines[1:]
    if any(ln.startswith(("From:", "Subject:")) for ln in lines[:8]):
        msg = email.parser.Parser(policy=email.policy.default).parsestr("\n".join(lines))
        subject = re.sub(r"^\[PATCH[^\]]*\]\s*", "", str(msg.get("Subject", "")).replace("\n", " ")).strip()
        body = msg.get_payload() if not msg.is_multipart() else ""
        # The message ends at git's `---` separator (before the diffstat).
        body = re.split(r"(?:^|\n)---[ \t]*(?:\n|$)", body, maxsplit=1)[0]
        return PatchHeader(
            subject=subject,
            author=str(msg.get("From", "")),
            date=str(msg.get("Date", "")),
            body=body.strip(),
            raw=text,
        )
    return PatchHeader(body=text.strip(), raw=text)


def unified_diff(path: str, old_text: str | None, new_text: str | None, context: int = 3) -> str:
    """A git-style unified diff of one file (`old_text`/`new_text` None for creation/deletion); "" when equal."""
    import difflib

    if old_text == new_text:
        return ""
    old_lines, old_nl = split_lines(old_text or "")
    new_lines, new_nl = split_lines(new_text or "")
    head = [f"diff --git a/{path} b/{path}"]
    if old_text is None:
        head.append("new file mode 100644")
    elif new_text is None:
        head.append("deleted file mode 100644")
    head.append(f"--- {DEV_NULL if old_text is None else 'a/' + path}")
    head.append(f"+++ {DEV_NULL if new_text is None else 'b/' + path}")
    # Mark the missing final newline on the last line so difflib sees the change and we can annotate it.
    marker = "\x00nonl"
    a = old_lines[:-1] + [old_lines[-1] + marker] if old_lines and not old_nl else old_lines
    b = new_lines[:-1] + [new_lines[-1] + marker] if new_lines and not new_nl else new_lines
    out = head
    for line in list(difflib.unified_diff(a, b, lineterm="", n=context))[2:]:
        if line.endswith(marker):
            out.append(line[: -len(marker)])
            out.append("\\ No newline at end of file")
        else:
            out.append(line)
    return "\n".join(out) + "\n"


def format_patch(subject: str, body: str, author: str, date: str, diff: str) -> str:
    """A git format-patch style email: header, message, `---`, the diff."""
    return (
        "From 0000000000000000000000000000000000000000 Mon Sep 17 00:00:00 2001\n"
        f"From: {author}\nDate: {date}\nSubject: [PATCH] {subject}\n\n{body.strip()}\n---\n{diff}"
        "-- \nvllm-compose\n"
    )


def read_patch_files(paths: list[Path], strip: int = 1) -> list[Patch]:
    """The patch files `paths` (`apply --patch`, `check-fuzz`), parsed in order; `ComposeError` for one that cannot
    be read."""
    patches = []
    for path in paths:
        try:
            data = Path(path).read_bytes()
        except OSError as exc:
            raise ComposeError(f"cannot read {path}: {exc.strerror}", file=str(path), hint="check the path") from None
        patches.append(parse_patch(data, name=Path(path).name, strip=strip))
    return patches
