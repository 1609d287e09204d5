"""The Series and its Entries: load and validate `series/series.toml`, with each entry's provenance.

A series is an ordered list of `[[entry]]` tables. An entry is either an upstream PR (`pr = N` plus a pinned
`[entry.source]`: git commits and/or a patch URL with its sha256) or a local skew fix (`file = "patches/...patch"`,
a git format-patch file whose message says why it exists). Every entry carries Yocto/DEP-3 style provenance:
`title`, `author`, `upstream_status`, `why`, and the release `tags` it applies to (a PEP 440 specifier).

Validation is strict and happens before anything is written: unknown keys, duplicate ids, a missing or
unparsable patch, a bad specifier — each is a `SeriesError` naming the file, entry id and key, with a hint.

Example::

    [series]
    name = "dsa-mtp-sm80"

    [[entry]]
    id = "pr46994"
    pr = 46994
    pr_url = "https://github.com/vllm-project/vllm/pull/46994"
    title = "MTP under pipeline parallelism"
    author = "Jane Doe <jane@example.com>"
    upstream_status = "Accepted"
    upstream_status_detail = "merged 2026-09-11, ships in 0.30.0"
    tags = "<0.30.0"
    source = { url = "https://github.com/vllm-project/vllm/pull/46994.diff", sha256 = "…", paths = ["vllm/*"] }

    [[entry]]
    id = "fix-mimo-supports-pp"
    file = "patches/0001-mimo-mtp-supports-pp.patch"
    upstream_status = "Inappropriate"
    why = "0.26.0's MiMo MTP draft lacks SupportsPP"
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import InvalidVersion, Version

from .errors import ComposeError, SeriesError
from .patchfile import Patch, parse_patch

SERIES_FILE = "series.toml"

#: Yocto's Upstream-Status values (https://docs.yoctoproject.org/contributor-guide/recipe-style-guide.html)
UPSTREAM_STATUSES = (
    "Pending",
    "Submitted",
    "Accepted",
    "Backport",
    "Denied",
    "Inappropriate",
    "Inactive-Upstream",
)

_ID = re.compile(r"^[a-z0-9][a-z0-9._-]*$")
_SHA1 = re.compile(r"^[0-9a-f]{40}$")
_SHA256 = re.compile(r"^[0-9a-f]{64}$")
_RESOLVES = re.compile(r"^(?P<entry>[^:]+):(?P<path>[^#]+)#(?P<hunk>\d+)$")

_ENTRY_KEYS = {
    "id",
    "title",
    "author",
    "upstream_status",
    "upstream_status_detail",
    "upstream_release",
    "why",
    "tags",
    "pr",
    "pr_url",
    "source",
    "file",
    "resolves",
    "requires",
    "written_for",
}
_SOURCE_KEYS = {"commits", "url", "sha256", "paths", "strip", "revision", "origin"}
#: a PR head commit as people quote it: 7 to 40 lowercase hex digits (`git rev-parse --short` and up)
_REVISION = re.compile(r"^[0-9a-f]{7,40}$")
_SERIES_KEYS = {"name", "description"}


def version_of_tag(tag: str) -> Version:
    """`v0.26.0` -> Version('0.26.0'). Raises `SeriesError` for a tag that is not `v` + a PEP 440 version written
    canonically with at least three release numbers: `v0.26` or `vv0.26.0` are PEP 440 spellings of real releases,
    and accepting them would create tags and branches named after a typo."""
    text = tag[1:] if tag.startswith("v") else None
    try:
        version = Version(text) if text is not None else None
    except InvalidVersion:
        version = None
    if version is None or str(version) != text or len(version.release) < 3:
        hint = "release tags look like v0.26.0 (a 'v' and the PyPI version)"
        if version is not None and str(version) != text:
            hint = f"did you mean v{version}? " + hint
        raise SeriesError(f"tag {tag!r} does not name a release version", tag=tag, hint=hint)
    return version


def tag_of_version(version: str | Version) -> str:
    """Version('0.26.0') -> 'v0.26.0' (the inverse of `version_of_tag`)."""
    return f"v{version}"


@dataclass(frozen=True)
class Source:
    """Where an upstream PR's content comes from, pinned by content."""

    #: the PR's commits in order (40-hex ids); content = diff from the first one's parent to the last one
    commits: tuple[str, ...] = ()
    #: a patch URL and the sha256 of its bytes
    url: str | None = None
    sha256: str | None = None
    #: fnmatch globs on the (stripped) file paths to keep; empty keeps all
    paths: tuple[str, ...] = ()
    #: leading path components to strip from the patch's file names (`patch -p`)
    strip: int = 1
    #: the PR's head commit the content is of (7-40 hex), when known: which revision of a moving PR the series holds
    revision: str | None = None
    #: where the pinned bytes came from, in words (a repository and path, a download), for whoever checks the pin
    origin: str | None = None


@dataclass(frozen=True)
class Resolve:
    """A hunk of an earlier entry that a local fix carries in its own form (`"<entry>:<path>#<hunk>"`)."""

    entry: str
    path: str
    hunk: int

    def __str__(self) -> str:
        return f"{self.entry}:{self.path}#{self.hunk}"


def parse_hunk_id(text: str) -> Resolve | None:
    """`"<entry>:<path>#<hunk>"` (hunks numbered from 1 within the file) -> `Resolve`; None when malformed."""
    m = _RESOLVES.match(text)
    if not m or int(m.group("hunk")) < 1:
        return None
    return Resolve(m.group("entry"), m.group("path"), int(m.group("hunk")))


@dataclass
class Entry:
    """One step of the series, in order: an upstream PR or a local skew fix."""

    id: str
    kind: str  # "upstream-pr" or "local"
    upstream_status: str
    title: str = ""
    author: str = ""
    upstream_status_detail: str = ""
    #: upstream PR entries: the first release that ships the PR (in whatever form upstream merged it); from that
    #: release on, compose drops the entry, with the evidence it finds, instead of re-applying it
    upstream_release: str | None = None
    why: str = ""
    #: PEP 440 specifier on the release version, e.g. "<0.30.0"; None applies everywhere
    tags: str | None = None
    pr: int | None = None
    pr_url: str | None = None
    source: Source | None = None
    #: local entries: the patch file (absolute) and its parsed form
    file: Path | None = None
    patch: Patch | None = field(default=None, repr=False, compare=False)
    resolves: tuple[Resolve, ...] = ()
    #: ids of earlier entries this one only makes sense with: where one of them is not applied, neither is this
    requires: tuple[str, ...] = ()
    #: local entries: PEP 440 specifier of the releases the fix was written and reviewed for; None: its `tags`.
    #: Widening `tags` past it is allowed, but there a hunk that does not land exact or offset stops the compose
    #: for review (`review`)
    written_for: str | None = None

    @property
    def specifier(self) -> SpecifierSet | None:
        return SpecifierSet(self.tags) if self.tags else None

    def applies_to(self, tag: str) -> bool:
        """Whether this entry is meant for release `tag` (e.g. `v0.26.0`); pre-releases count as their version."""
        spec = self.specifier
        if spec is None:
            return True
        return spec.contains(version_of_tag(tag), prereleases=True)

    def shipped_by(self, tag: str) -> bool:
        """Whether the series declares that release `tag` already ships this entry's PR (`upstream_release`): the
        compose drops the entry there (or stops, where the release lacks its hunks); it never applies it."""
        return bool(self.upstream_release) and version_of_tag(tag) >= Version(self.upstream_release)

    def written_for_tag(self, tag: str) -> bool:
        """Whether this fix was written for release `tag`: its `written_for`, or, without one, its `tags`."""
        if self.written_for is None:
            return self.applies_to(tag)
        return SpecifierSet(self.written_for).contains(version_of_tag(tag), prereleases=True)


@dataclass
class Series:
    """An ordered, validated series of entries loaded from `<path>/series.toml`."""

    path: Path
    entries: list[Entry]
    meta: dict = field(default_factory=dict)

    @property
    def file(self) -> Path:
        return self.path / SERIES_FILE

    @property
    def name(self) -> str:
        return self.meta.get("name") or self.path.name

    def entry(self, entry_id: str) -> Entry:
        """The entry with id `entry_id` (KeyError when absent)."""
        for e in self.entries:
            if e.id == entry_id:
                return e
        raise KeyError(entry_id)

    def pr_numbers(self, tag: str) -> list[int]:
        """The PR numbers a compose onto `tag` applies, in series order: the upstream PR entries whose `tags`
        include it and that the release does not ship already (`Entry.shipped_by`)."""
        return [
            e.pr
            for e in self.entries
            if e.kind == "upstream-pr" and e.pr is not None and e.applies_to(tag) and not e.shipped_by(tag)
        ]

    def branch_name(self, tag: str) -> str:
        """`compose-<PR numbers the compose onto tag applies, in order, joined by '-'>-<tag>`.

        The name says what the branch carries, as the version label (`compose.<PRs>.g<digest>`) does: from the
        release that ships a PR, the PR is dropped and the name leaves it out (`compose-38476-v0.30.0`). It is
        known from the series alone, before any compose, so the CLI can name the branch it will check out.
        """
        prs = "-".join(str(n) for n in self.pr_numbers(tag))
        return f"compose-{prs}-{tag}" if prs else f"compose-{tag}"

    def entries_for(self, tag: str) -> list[Entry]:
        """The entries whose `tags` include `tag`, in series order."""
        return [e for e in self.entries if e.applies_to(tag)]


# ---------------------------------------------------------------------------------------------------------------
# Loading


class _Checker:
    """Builds `SeriesError`s that all name the same series file."""

    def __init__(self, file: Path) -> None:
        self.file = file

    def error(self, message: str, entry: str | None = None, key: str | None = None, hint: str | None = None):
        return SeriesError(message, file=str(self.file), entry=entry, key=key, hint=hint)


def load_series(directory: str | Path) -> Series:
    """Load and validate `<directory>/series.toml` (and every local patch it names).

    Raises `SeriesError` for the first problem found, naming the file, entry id and key.
    """
    directory = Path(directory)
    file = directory / SERIES_FILE
    chk = _Checker(file)
    try:
        raw = file.read_bytes()
    except FileNotFoundError:
        raise chk.error(
            "series file not found",
            hint=f"create {file} with [[entry]] tables, or pass --series DIR naming a folder that has one",
        ) from None
    except OSError as exc:
        raise chk.error(f"cannot read the series file: {exc}") from None
    try:
        doc = tomllib.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise chk.error(f"not UTF-8 text ({exc})", hint="save the file as UTF-8") from None
    except tomllib.TOMLDecodeError as exc:
        raise chk.error(f"not valid TOML: {exc}", hint="fix the syntax at the line named") from None

    for key in doc:
        if key not in ("series", "entry"):
            raise chk.error(
                f"unknown top-level key {key!r}",
                key=key,
                hint="the file holds an optional [series] table and [[entry]] tables",
            )
    meta = doc.get("series", {})
    if not isinstance(meta, dict):
        raise chk.error("[series] must be a table", key="series")
    for key, value in meta.items():
        if key not in _SERIES_KEYS:
            raise chk.error(f"unknown key {key!r} in [series]", key=key, hint=f"known keys: {sorted(_SERIES_KEYS)}")
        if not isinstance(value, str):
            raise chk.error(f"[series] {key} must be a string", key=key)

    tables = doc.get("entry", [])
    if not isinstance(tables, list) or not all(isinstance(t, dict) for t in tables):
        raise chk.error("entries must be [[entry]] tables", key="entry", hint="write each entry as [[entry]]")
    if not tables:
        raise chk.error("the series has no entries", key="entry", hint="add at least one [[entry]] table")

    entries: list[Entry] = []
    seen: dict[str, int] = {}
    for index, table in enumerate(tables, 1):
        entry = _load_entry(chk, directory, table, index, [e.id for e in entries])
        if entry.id in seen:
            raise chk.error(
                f"duplicate entry id (entry #{seen[entry.id]} has it too)",
                entry=entry.id,
                key="id",
                hint="give every entry its own id",
            )
        seen[entry.id] = index
        entries.append(entry)
    _check_resolves(chk, entries)
    return Series(path=directory, entries=entries, meta=dict(meta))


def _str(chk: _Checker, table: dict, key: str, eid: str, required: bool = False, hint: str | None = None) -> str:
    value = table.get(key)
    if value is None:
        if required:
            raise chk.error(f"missing required key {key!r}", entry=eid, key=key, hint=hint)
        return ""
    if not isinstance(value, str):
        raise chk.error(f"{key} must be a string, not {type(value).__name__}", entry=eid, key=key, hint=hint)
    if required and not value.strip():
        raise chk.error(f"{key} must not be empty", entry=eid, key=key, hint=hint)
    return value


def _load_entry(chk: _Checker, directory: Path, table: dict, index: int, earlier: list[str]) -> Entry:
    raw_id = table.get("id")
    label = raw_id if isinstance(raw_id, str) and raw_id else f"#{index}"
    if raw_id is None:
        raise chk.error(f"entry #{index} has no id", entry=label, key="id", hint='add id = "..." to every entry')
    if not isinstance(raw_id, str) or not _ID.match(raw_id):
        raise chk.error(
            f"invalid id {raw_id!r}",
            entry=f"#{index}",
            key="id",
            hint="ids are lowercase letters, digits, '.', '_' and '-', starting with a letter or digit",
        )
    eid = raw_id
    for key in table:
        if key not in _ENTRY_KEYS:
            raise chk.error(
                f"unknown key {key!r}",
                entry=eid,
                key=key,
                hint=f"known keys: {', '.join(sorted(_ENTRY_KEYS))}",
            )

    has_pr, has_file = "pr" in table, "file" in table
    if has_pr == has_file:
        raise chk.error(
            "an entry has either `pr` (upstream PR) or `file` (local patch)" + (", not both" if has_pr else ""),
            entry=eid,
            key="pr" if has_pr else "file",
            hint='an upstream PR: pr = N plus [entry.source]; a local fix: file = "patches/NNNN-name.patch"',
        )

    status = _str(chk, table, "upstream_status", eid, required=True, hint=f"one of: {', '.join(UPSTREAM_STATUSES)}")
    if status not in UPSTREAM_STATUSES:
        raise chk.error(
            f"upstream_status {status!r} is not a known status",
            entry=eid,
            key="upstream_status",
            hint=f"one of: {', '.join(UPSTREAM_STATUSES)} (details go in upstream_status_detail)",
        )
    tags = _specifier(chk, table, "tags", eid)
    written_for = _specifier(chk, table, "written_for", eid)
    if written_for is not None and has_pr:
        raise chk.error(
            "written_for is only allowed on local entries",
            entry=eid,
            key="written_for",
            hint="an upstream PR is written for upstream's main; its `tags` say where the series applies it",
        )

    entry = Entry(
        id=eid,
        kind="upstream-pr" if has_pr else "local",
        upstream_status=status,
        title=_str(chk, table, "title", eid),
        author=_str(chk, table, "author", eid),
        upstream_status_detail=_str(chk, table, "upstream_status_detail", eid),
        why=_str(chk, table, "why", eid),
        tags=tags or None,
        written_for=written_for or None,
    )
    if has_pr:
        _load_pr(chk, table, entry)
    else:
        _load_local(chk, directory, table, entry, earlier)
    return entry


def _specifier(chk: _Checker, table: dict, key: str, eid: str) -> str | None:
    """The PEP 440 specifier under `key` (`tags`, `written_for`), checked; None when absent."""
    value = table.get(key)
    if value is None:
        return None
    if not isinstance(value, str):
        raise chk.error(f"{key} must be a string", entry=eid, key=key, hint=f'e.g. {key} = "<0.30.0"')
    try:
        SpecifierSet(value)
    except InvalidSpecifier as exc:
        raise chk.error(
            f"{key} {value!r} is not a PEP 440 version specifier ({exc})",
            entry=eid,
            key=key,
            hint='write e.g. "<0.30.0" or ">=0.26.0,<0.30.0" (versions, without the tag\'s "v")',
        ) from None
    return value


def _load_pr(chk: _Checker, table: dict, entry: Entry) -> None:
    eid = entry.id
    pr = table["pr"]
    if not isinstance(pr, int) or isinstance(pr, bool) or pr <= 0:
        raise chk.error(f"pr must be a positive integer, not {pr!r}", entry=eid, key="pr", hint="e.g. pr = 46994")
    entry.pr = pr
    entry.pr_url = _str(chk, table, "pr_url", eid) or None
    released = _str(chk, table, "upstream_release", eid)
    if released:
        try:
            Version(released)
        except InvalidVersion:
            raise chk.error(
                f"upstream_release {released!r} is not a release version",
                entry=eid,
                key="upstream_release",
                hint='e.g. upstream_release = "0.30.0"',
            ) from None
        if entry.upstream_status not in ("Accepted", "Backport"):
            raise chk.error(
                f"upstream_release needs upstream_status Accepted or Backport, not {entry.upstream_status!r}",
                entry=eid,
                key="upstream_release",
                hint="a PR ships in a release only once upstream accepted it",
            )
        entry.upstream_release = released
    if not entry.title:
        raise chk.error("missing required key 'title'", entry=eid, key="title", hint="the PR's title, for reports")
    for key in ("resolves",):
        if key in table:
            raise chk.error(f"{key} is only allowed on local entries", entry=eid, key=key)
    src = table.get("source")
    if not isinstance(src, dict):
        raise chk.error(
            "an upstream PR entry needs a [entry.source] table" if src is None else "source must be a table",
            entry=eid,
            key="source",
            hint='pin the content: commits = ["<40-hex>", ...] and/or url = "..." with sha256 = "<64-hex>"',
        )
    for key in src:
        if key not in _SOURCE_KEYS:
            raise chk.error(
                f"unknown key {key!r} in source",
                entry=eid,
                key=f"source.{key}",
                hint=f"known keys: {sorted(_SOURCE_KEYS)}",
            )
    commits = src.get("commits", [])
    if not isinstance(commits, list) or not all(isinstance(c, str) and _SHA1.match(c) for c in commits):
        raise chk.error(
            "source.commits must be a list of full 40-hex commit ids",
            entry=eid,
            key="source.commits",
            hint="use full ids (git rev-parse <commit>), lowercase",
        )
    url, sha256 = src.get("url"), src.get("sha256")
    if url is not None and (not isinstance(url, str) or not url.strip()):
        raise chk.error("source.url must be a non-empty string", entry=eid, key="source.url")
    if (url is None) != (sha256 is None):
        raise chk.error(
            "source.url and source.sha256 go together",
            entry=eid,
            key="source.sha256" if url else "source.url",
            hint="pin a URL's content with its sha256 (sha256sum FILE)",
        )
    if sha256 is not None and (not isinstance(sha256, str) or not _SHA256.match(sha256)):
        raise chk.error(
            f"source.sha256 {sha256!r} is not 64 lowercase hex digits",
            entry=eid,
            key="source.sha256",
            hint="the output of sha256sum FILE",
        )
    if not commits and url is None:
        raise chk.error(
            "source pins no content",
            entry=eid,
            key="source",
            hint='give commits = ["<40-hex>", ...] and/or url = "..." with sha256 = "<64-hex>"',
        )
    paths = src.get("paths", [])
    if not isinstance(paths, list) or not all(isinstance(p, str) and p for p in paths):
        raise chk.error(
            "source.paths must be a list of glob strings",
            entry=eid,
            key="source.paths",
            hint='e.g. ["vllm/*"]',
        )
    strip = src.get("strip", 1)
    if not isinstance(strip, int) or isinstance(strip, bool) or strip < 0:
        raise chk.error("source.strip must be a non-negative integer", entry=eid, key="source.strip")
    revision = src.get("revision")
    if revision is not None and (not isinstance(revision, str) or not _REVISION.match(revision)):
        raise chk.error(
            f"source.revision {revision!r} is not a commit id (7 to 40 lowercase hex digits)",
            entry=eid,
            key="source.revision",
            hint='the PR\'s head commit the diff is of, e.g. revision = "064801dd2bc6ac2e265dc3fa1f5d803d71bde25d"',
        )
    if revision is not None and commits and not commits[-1].startswith(revision):
        raise chk.error(
            f"source.revision {revision} is not the last of source.commits ({commits[-1]})",
            entry=eid,
            key="source.revision",
            hint="the revision is the PR's head: the last commit listed; drop one of the two or make them agree",
        )
    origin = src.get("origin")
    if origin is not None and (not isinstance(origin, str) or not origin.strip()):
        raise chk.error(
            "source.origin must be a non-empty string",
            entry=eid,
            key="source.origin",
            hint="say where the bytes came from, e.g. a repository, commit and path",
        )
    entry.source = Source(
        commits=tuple(commits),
        url=url,
        sha256=sha256,
        paths=tuple(paths),
        strip=strip,
        revision=revision,
        origin=origin,
    )


def _load_local(chk: _Checker, directory: Path, table: dict, entry: Entry, earlier: list[str]) -> None:
    eid = entry.id
    for key in ("source", "pr_url", "upstream_release"):
        if key in table:
            raise chk.error(f"{key} is only allowed on upstream PR entries", entry=eid, key=key)
    rel = table["file"]
    if not isinstance(rel, str) or not rel:
        raise chk.error("file must be a path string", entry=eid, key="file", hint='e.g. file = "patches/0001-x.patch"')
    rel_path = Path(rel)
    if rel_path.is_absolute() or ".." in rel_path.parts:
        raise chk.error(
            f"file {rel!r} must stay inside the series folder",
            entry=eid,
            key="file",
            hint="give the path relative to the series folder, e.g. patches/0001-x.patch",
        )
    path = directory / rel_path
    if not path.is_file():
        raise chk.error(
            f"patch file {rel!r} does not exist ({path})",
            entry=eid,
            key="file",
            hint="check the file name, or create the patch with `git format-patch`",
        )
    try:
        patch = parse_patch(path.read_bytes(), name=rel)
    except ComposeError as exc:
        raise chk.error(
            f"patch file {rel!r} does not parse: {exc.message}",
            entry=eid,
            key="file",
            hint=exc.hint or "regenerate it with `git format-patch`",
        ) from None
    message = (patch.header.subject + patch.header.body).strip()
    if not message:
        raise chk.error(
            f"patch file {rel!r} has no message saying why it exists",
            entry=eid,
            key="file",
            hint="write it with `git format-patch` from a commit whose message explains the fix",
        )
    entry.file = path
    entry.patch = patch
    entry.title = entry.title or patch.header.subject
    entry.author = entry.author or patch.header.author
    if not entry.why.strip():
        raise chk.error(
            "a local entry must say why it exists",
            entry=eid,
            key="why",
            hint='add why = "..." (what upstream skew or bug this fixes)',
        )
    resolves = table.get("resolves", [])
    if not isinstance(resolves, list) or not all(isinstance(r, str) for r in resolves):
        raise chk.error(
            "resolves must be a list of strings",
            entry=eid,
            key="resolves",
            hint='e.g. ["pr38476:vllm/x.py#3"]',
        )
    parsed = []
    for item in resolves:
        m = _RESOLVES.match(item)
        if not m or int(m.group("hunk")) < 1:
            raise chk.error(
                f"resolves item {item!r} is not '<entry-id>:<path>#<hunk>'",
                entry=eid,
                key="resolves",
                hint="e.g. pr38476:vllm/platforms/cuda.py#1 (hunks numbered from 1 within the file, as GNU patch does)",
            )
        if m.group("entry") not in earlier:
            raise chk.error(
                f"resolves item {item!r} names {m.group('entry')!r}, which is not an earlier entry",
                entry=eid,
                key="resolves",
                hint="a fix can only carry hunks of entries listed before it",
            )
        parsed.append(Resolve(m.group("entry"), m.group("path"), int(m.group("hunk"))))
    entry.resolves = tuple(parsed)
    requires = table.get("requires", [])
    if not isinstance(requires, list) or not all(isinstance(r, str) for r in requires):
        raise chk.error("requires must be a list of entry ids", entry=eid, key="requires", hint='e.g. ["pr46994"]')
    for name in requires:
        if name not in earlier:
            raise chk.error(
                f"requires names {name!r}, which is not an earlier entry",
                entry=eid,
                key="requires",
                hint="an entry can only require entries listed before it (ids as in series.toml)",
            )
    entry.requires = tuple(requires)


def _check_resolves(chk: _Checker, entries: list[Entry]) -> None:
    """A `resolves` item that names a local entry's hunk must name one that exists (PR content: `check_resolves`,
    once the compose has it)."""
    local = {e.id: e.patch for e in entries if e.patch is not None}
    check_resolves(entries, local, chk.file)


def check_resolves(entries: list[Entry], patches: dict[str, Patch], file: Path | None = None) -> None:
    """Raise `SeriesError` for a `resolves` item naming a file or hunk that its entry's patch does not have.

    `patches` maps entry ids to their parsed content (a local entry's patch, a PR entry's diff once fetched); items
    naming an entry absent from it are not checked here. A fix carrying a hunk that does not exist would carry
    nothing, and the hunk it meant would go in with the entry unchanged or not at all.
    """
    for entry in entries:
        for r in entry.resolves:
            patch = patches.get(r.entry)
            if patch is None:
                continue
            counts = {f.path: len(f.hunks) for f in patch.files}
            if r.path not in counts or not 1 <= r.hunk <= counts[r.path]:
                what = "file" if r.path not in counts else "hunk"
                raise SeriesError(
                    f"resolves item '{r}' names a {what} that the patch of {r.entry!r} does not have",
                    file=str(file) if file else None,
                    entry=entry.id,
                    key="resolves",
                    hint=f"{r.entry}'s patch has hunks: "
                    + (", ".join(f"{p}#1..{n}" for p, n in counts.items()) or "none"),
                )
