"""Moving a PR entry to a new revision of its PR, or to a takeover PR, and what that changes release by release.

`bump(request)` answers "the PR moved: what now?" without touching anything of the user's:

1. new content  — the new diff's bytes (`--to FILE` or a URL, sha256-checked when a pin is given) go into the cache;
2. hunk map     — every hunk of the old revision is matched with the new revision's hunks of the same file by
                  what they change (`match_hunks`): same, changed, gone, new. Hunk numbers move (a takeover rebased
                  on newer upstream splits and adds hunks), so the `resolves` items of the skew fixes are rewritten
                  through the map; an item naming a hunk the new revision no longer has cannot be rewritten;
3. candidate    — a copy of the series folder in a scratch folder whose series.toml is the one `--write` would
                  write (`rewrite_series_text`), validated by `load_series`;
4. composes     — every release in range is composed with the old series and with the candidate, in a scratch
                  repository (or `--repo`, where only objects and release tags are written: no branch, no state),
                  each going past stops so every hunk gets a verdict;
5. fix fates    — per release, each skew fix is needed, unneeded (its `resolves` name hunks that land exact or
                  offset without it, or the new revision already makes its change) or broken (it stops the compose,
                  or its `resolves` name hunks the new revision no longer has). A fix unneeded on every release of
                  the range where it applies is retired from the candidate, which is composed once more;
6. verdict      — clean when every release composes with the final candidate (audit and checks clean).

`write_bump(report)` then replaces series.toml by the candidate's (one atomic rename) and removes the patch files of
retired fixes; it refuses a report that is not clean, so nothing unclean is ever written.
"""

from __future__ import annotations

import enum
import hashlib
import re
import shutil
import tempfile
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pygit2

from . import gitstore
from .atomicfile import write_atomically
from .cache import Cache
from .compose import ComposeOptions, Composer
from .errors import ComposeError, RefusedError, SeriesError, SourceError
from .index import download
from .patchfile import FilePatch, Hunk, Patch, decode_text, parse_patch
from .progress import ProgressCallback
from .results import ComposeResult, ComposeStatus, EntryOutcome, EntryStatus, HunkOutcome
from .series import SERIES_FILE, Entry, Resolve, Series, load_series
from .series_diff import SeriesDiff, series_diff
from .series_text import rewrite_series_text
from .sources import fetch_entry_patch, filter_patch_paths
from .trees import GitTree

#: a new hunk that is not the same change as an old one belongs to the old hunk holding most of its names
#: (`_similarity`), when that is at least this share: below it the change is new. The takeover of #38476 splits
#: `if use_deep_gemm: ... else: ...` into `elif use_deep_gemm:` and `else:` hunks; measured on #38476 -> #47629, the
#: hunks that belong together share 0.79 to 1.0, the others of one file at most 0.44
MATCH_RATIO = 0.5

#: the URL the candidate pins when the person gave none (the bytes are in the cache by sha256, so it composes);
#: `write_bump` refuses it: series.toml must say where the bytes can be had again
NO_URL = "file:///no-url-given-pass---url"

#: verdicts with which a hunk needs no skew fix: its pre-image is found verbatim
CLEAN_VERDICTS = frozenset({"exact", "offset"})


class HunkChange(enum.StrEnum):
    """How one hunk of the entry differs between its old and its new revision."""

    SAME = "same"  # the same lines removed and added (the context may differ: another base)
    CHANGED = "changed"  # the matching hunk removes or adds other lines
    GONE = "gone"  # no hunk of the new revision makes this change
    NEW = "new"  # a hunk of the new revision that matches no old hunk


class FixFate(enum.StrEnum):
    """What the new revision does to one skew fix on one release."""

    NEEDED = "needed"
    UNNEEDED = "unneeded"  # the hunks it resolves land exact/offset without it, or the new revision makes its change
    BROKEN = "broken"  # it stops the compose, or its resolves name hunks the new revision no longer has


@dataclass(frozen=True)
class HunkMatch:
    """One row of the hunk map: an old hunk and a new hunk of the same file (either side None: gone / new)."""

    file: str
    old: int | None
    new: int | None
    change: HunkChange
    #: how much of the new hunk the old one holds (`_similarity`; 1 for the same change, 0 for gone / new)
    ratio: float = 0.0

    def to_json(self) -> dict:
        return {"file": self.file, "old": self.old, "new": self.new, "change": str(self.change), "ratio": self.ratio}


@dataclass
class Revision:
    """One revision of the entry's content: its pin and where the bytes came from."""

    pr: int | None
    url: str | None
    sha256: str
    revision: str | None
    origin: str | None
    paths: tuple[str, ...]
    #: the parsed content (after the path filter)
    patch: Patch = field(repr=False)

    def to_json(self) -> dict:
        return {
            "pr": self.pr,
            "url": self.url,
            "sha256": self.sha256,
            "revision": self.revision,
            "origin": self.origin,
            "paths": list(self.paths),
            "hunks": self.patch.hunk_count,
        }


@dataclass
class BumpRequest:
    """What the person asks: move `entry` to the content at `to`, and compose `tags` with it."""

    series_dir: Path
    entry: str
    #: a file path or an http(s) URL
    to: str
    tags: list[str]
    #: the sha256 the new content must have (required for a URL; checked for a file when given)
    sha256: str | None = None
    #: the URL series.toml pins (default: `to` when it is a URL)
    url: str | None = None
    revision: str | None = None
    origin: str | None = None
    #: a takeover PR's number (default: the entry's)
    pr: int | None = None
    pr_url: str | None = None
    #: path globs to keep of the new diff (default: the entry's own)
    paths: tuple[str, ...] | None = None
    #: the repository to compose in (objects and release tags only); None: a scratch repository
    repo_dir: Path | None = None
    offline: bool = False
    import_smoke: bool = True


@dataclass
class FixVerdict:
    """One skew fix on one release under the new revision, and why."""

    id: str
    fate: FixFate
    reason: str

    def to_json(self) -> dict:
        return {"id": self.id, "fate": str(self.fate), "reason": self.reason}


@dataclass
class HunkRow:
    """One hunk of the entry on one release: how it landed with the old revision and with the new one."""

    match: HunkMatch
    old: HunkOutcome | None
    new: HunkOutcome | None

    def to_json(self) -> dict:
        return {**self.match.to_json(), "old_landing": _landing(self.old), "new_landing": _landing(self.new)}


@dataclass
class ReleaseBump:
    """One release composed with the old revision and with the new one."""

    tag: str
    old: ComposeResult
    #: the candidate with the rewritten `resolves` and every fix still in (what decides the fixes' fates)
    first: ComposeResult
    #: the candidate after retiring unneeded fixes (None when none was retired: then `first` is final)
    final: ComposeResult | None
    hunks: list[HunkRow]
    fixes: list[FixVerdict]
    #: the entries of the old and the final compose, commit by commit (None unless both composed)
    entries: SeriesDiff | None = None

    @property
    def result(self) -> ComposeResult:
        """The compose the new series gives this release."""
        return self.final or self.first

    @property
    def clean(self) -> bool:
        return self.result.status is ComposeStatus.COMPOSED

    def to_json(self) -> dict:
        return {
            "tag": self.tag,
            "clean": self.clean,
            "old": _compose_summary(self.old),
            "new": _compose_summary(self.result),
            "hunks": [h.to_json() for h in self.hunks],
            "fixes": [f.to_json() for f in self.fixes],
            "entries": [{"id": e.id, "status": str(e.status), "interdiff": e.interdiff} for e in self.entries.entries]
            if self.entries
            else None,
        }


@dataclass
class BumpReport:
    """Everything `pr-bump` found; `write_bump` writes its candidate when it is clean."""

    entry: str
    old: Revision
    new: Revision
    matches: list[HunkMatch]
    #: fix id -> (old resolves, new resolves) for each fix whose items the map rewrote
    rewritten: dict[str, tuple[list[str], list[str]]]
    #: fix id -> the items naming hunks the new revision no longer has
    unmapped: dict[str, list[str]]
    releases: list[ReleaseBump]
    #: fix id -> why it is retired (unneeded on every release of the range where it applies)
    retired: dict[str, str]
    #: what a person must do: fixes unneeded on some releases only, fixes a retirement cannot drop
    by_hand: list[str]
    #: the series.toml `--write` writes
    candidate_text: str = field(repr=False, default="")
    #: the series folder the report is of
    series_dir: Path | None = None

    @property
    def clean(self) -> bool:
        return bool(self.releases) and all(r.clean for r in self.releases)

    @property
    def stopped(self) -> list[str]:
        return [r.tag for r in self.releases if not r.clean]

    def to_json(self) -> dict:
        return {
            "entry": self.entry,
            "clean": self.clean,
            "old": self.old.to_json(),
            "new": self.new.to_json(),
            "hunk_map": [m.to_json() for m in self.matches],
            "resolves_rewritten": {k: {"old": o, "new": n} for k, (o, n) in self.rewritten.items()},
            "resolves_unmapped": self.unmapped,
            "retired": self.retired,
            "by_hand": self.by_hand,
            "releases": [r.to_json() for r in self.releases],
        }


# ---------------------------------------------------------------------------------------------------------------
# The run


def bump(request: BumpRequest, cache: Cache, progress: ProgressCallback | None = None) -> BumpReport:
    """Compose every release of `request.tags` with the old and the new revision of the entry; see the module
    docstring for the steps. Raises `SeriesError` / `SourceError` for bad input before anything is composed."""
    series = load_series(request.series_dir)
    entry = _pr_entry(series, request.entry)
    for tag in request.tags:
        if not entry.applies_to(tag):
            raise SeriesError(
                f"entry {entry.id!r} does not apply to {tag} (tags {entry.tags!r})",
                entry=entry.id,
                tag=tag,
                hint="compose the releases the entry covers (docs/status.md lists them)",
            )
    old = _old_revision(entry, cache, request.offline)
    new = _new_revision(request, entry, cache)
    if new.sha256 == old.sha256:
        raise SeriesError(
            f"entry {entry.id!r} already pins these bytes (sha256 {new.sha256})",
            entry=entry.id,
            key="source.sha256",
            hint="give the new revision's diff with --to",
        )
    matches = match_hunks(old.patch, new.patch)
    rewritten, unmapped, resolves = remap_resolves(series, entry.id, matches)
    source = _source_fields(entry, new)
    first_text = rewrite_series_text(
        series.file.read_text(encoding="utf-8"), entry.id, source, new.pr, _pr_url(request, entry), resolves, ()
    )
    with tempfile.TemporaryDirectory(prefix="vllm-compose-pr-bump-") as tmp:
        scratch = Path(tmp)
        repo_dir = request.repo_dir or scratch / "repo"
        candidate = _candidate(series, scratch / "first", first_text)
        composes = _Composes(cache, repo_dir, request, progress)
        olds = {tag: composes.run(series.path, tag) for tag in request.tags}
        firsts = {tag: composes.run(candidate, tag) for tag in request.tags}
        fates = {
            tag: fix_fates(load_series(candidate), entry.id, firsts[tag], composes.reader(firsts[tag]), unmapped)
            for tag in request.tags
        }
        retired, by_hand = _retirements(load_series(candidate), fates)
        finals: dict[str, ComposeResult | None] = dict.fromkeys(request.tags)
        text = first_text
        if retired:
            text = rewrite_series_text(first_text, entry.id, None, None, None, {}, tuple(retired))
            final = _candidate(series, scratch / "final", text)
            finals = {tag: composes.run(final, tag) for tag in request.tags}
        releases = []
        for tag in request.tags:
            result = finals[tag] or firsts[tag]
            releases.append(
                ReleaseBump(
                    tag,
                    olds[tag],
                    firsts[tag],
                    finals[tag],
                    _hunk_rows(matches, olds[tag], result, entry.id),
                    fates[tag],
                    composes.entries_diff(olds[tag], result),
                )
            )
    return BumpReport(
        entry.id,
        old,
        new,
        matches,
        rewritten,
        unmapped,
        releases,
        retired,
        by_hand,
        candidate_text=text,
        series_dir=series.path,
    )


def write_bump(report: BumpReport) -> list[Path]:
    """Write the candidate series.toml (one atomic rename) and remove the retired fixes' patch files; returns the
    files written or removed. Refuses (`RefusedError`, nothing written) unless every release composed clean."""
    if report.new.url is None:
        raise SeriesError(
            "not written: the new revision has no URL for series.toml to pin; series.toml is unchanged",
            entry=report.entry,
            key="source.url",
            hint="pass --url URL (where the same bytes can be downloaded) with --to FILE",
        )
    if not report.clean:
        raise RefusedError(
            f"not written: {', '.join(report.stopped)} do not compose cleanly with the new revision of "
            f"{report.entry!r}; series.toml is unchanged",
            entry=report.entry,
            hint="resolve what the report names (a fix to re-target, a hunk to place), then run pr-bump again",
        )
    assert report.series_dir is not None
    series = load_series(report.series_dir)  # the patch files of the retired fixes, as the series names them
    gone = [series.entry(i).file for i in report.retired if series.entry(i).file is not None]
    target = report.series_dir / SERIES_FILE
    try:
        write_atomically(target, report.candidate_text)
    except OSError as exc:
        raise SeriesError(
            f"cannot write {target}: {exc.strerror or exc}",
            file=str(target),
            hint="check permissions and free space; the file is unchanged",
        ) from None
    for path in gone:
        path.unlink(missing_ok=True)
    return [target, *gone]


class _Composes:
    """The composes of one bump: one scratch or given repository, no branch or state written."""

    def __init__(self, cache: Cache, repo_dir: Path, request: BumpRequest, progress) -> None:
        self.cache = cache
        self.repo_dir = repo_dir
        self.options = ComposeOptions(
            offline=request.offline,
            keep_state=False,
            init=request.repo_dir is None,
            publish=False,
            import_smoke=request.import_smoke,
            # every hunk gets a verdict, also after an entry that stops the compose
            go_past_stops=True,
        )
        self.progress = progress

    def run(self, series_dir: Path, tag: str) -> ComposeResult:
        return Composer(series_dir, self.repo_dir, self.cache, self.options, self.progress).run(tag)

    def reader(self, result: ComposeResult) -> Callable[[str], str | None]:
        """A file of the compose's last tree, as text (None: absent)."""
        repo = gitstore.open_or_init_repo(self.repo_dir, create=False)
        tree = GitTree(repo, repo[result.head].peel(pygit2.Tree)) if result.head else None

        def read(path: str) -> str | None:
            data = tree.read(path) if tree is not None else None
            return decode_text(data) if data is not None else None

        return read

    def entries_diff(self, old: ComposeResult, new: ComposeResult) -> SeriesDiff | None:
        """The two composes entry by entry (`series_diff` on their commits), when both composed."""
        composed = old.status is ComposeStatus.COMPOSED and new.status is ComposeStatus.COMPOSED
        if not composed or not old.head or not new.head:
            return None
        repo = gitstore.open_or_init_repo(self.repo_dir, create=False)
        return series_diff(repo, (old.head, old.tag), (new.head, new.tag))


# ---------------------------------------------------------------------------------------------------------------
# The two revisions


def _pr_entry(series: Series, entry_id: str) -> Entry:
    try:
        entry = series.entry(entry_id)
    except KeyError:
        prs = [e.id for e in series.entries if e.kind == "upstream-pr"]
        raise SeriesError(
            f"the series has no entry {entry_id!r}",
            entry=entry_id,
            file=str(series.file),
            hint=f"its PR entries: {', '.join(prs) or 'none'}",
        ) from None
    if entry.kind != "upstream-pr":
        raise SeriesError(
            f"entry {entry_id!r} is a local fix, not an upstream PR entry",
            entry=entry_id,
            file=str(series.file),
            hint="pr-bump moves an entry with `pr = N` and [entry.source]; a fix is edited as a patch file",
        )
    return entry


def _old_revision(entry: Entry, cache: Cache, offline: bool) -> Revision:
    src = entry.source
    assert src is not None
    data = fetch_entry_patch(entry, cache, offline=offline)
    return Revision(
        entry.pr,
        src.url,
        src.sha256 or "",
        src.revision,
        src.origin,
        src.paths,
        parse_patch(data, name=entry.id, strip=src.strip),
    )


def new_content(request: BumpRequest, cache: Cache) -> tuple[bytes, str]:
    """The new revision's bytes and sha256: a file read as it is, or a URL through the cache (downloaded when absent
    and online, checked against `request.sha256`). A file whose sha256 is not `request.sha256` is refused with both
    hashes; nothing is stored then."""
    if _is_url(request.to):
        if not request.sha256:
            raise SourceError(
                f"--to {request.to} is a URL: its sha256 must be pinned before it is downloaded",
                entry=request.entry,
                hint="pass --sha256 HEX (sha256sum of the file as published), or download it and pass --to FILE",
            )
        path = cache.get_path(request.sha256)
        if path is None:
            if request.offline:
                raise SourceError(
                    f"{request.to} (sha256 {request.sha256}) is not in the cache and --offline forbids a download",
                    entry=request.entry,
                    hint="put the file into a folder and pass --sources DIR, or --to FILE",
                )
            path = download(request.to, request.sha256, cache, what=f"{request.to} (new revision of {request.entry})")
        return path.read_bytes(), request.sha256
    path = Path(request.to)
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise SourceError(
            f"cannot read the new revision's diff {request.to}: {exc.strerror or exc}",
            entry=request.entry,
            file=request.to,
            hint="check the path (--to FILE or an http(s) URL with --sha256)",
        ) from None
    sha256 = hashlib.sha256(data).hexdigest()
    if request.sha256 and sha256 != request.sha256:
        raise SourceError(
            f"sha256 mismatch for {request.to}: expected {request.sha256}, got {sha256}; nothing was changed",
            entry=request.entry,
            file=request.to,
            hint="the file is not the pinned revision: fetch it again from where the pin says, or fix --sha256",
        )
    cache.put_bytes(data)
    return data, sha256


def _new_revision(request: BumpRequest, entry: Entry, cache: Cache) -> Revision:
    src = entry.source
    assert src is not None
    data, sha256 = new_content(request, cache)
    paths = tuple(request.paths) if request.paths is not None else src.paths
    if paths:
        data = filter_patch_paths(data, paths, src.strip)
    try:
        patch = parse_patch(data, name=entry.id, strip=src.strip)
    except ComposeError as exc:  # a PatchFormatError names the line; say which input it was
        raise SourceError(
            f"the new revision's diff does not parse: {exc.message}",
            entry=entry.id,
            file=request.to,
            hint="pass the PR's .diff (unified diff, as GitHub serves it)",
        ) from None
    if not patch.files:
        raise SourceError(
            f"the new revision's diff keeps no file{' after the path filter ' + str(list(paths)) if paths else ''}",
            entry=entry.id,
            file=request.to,
            hint="check --paths (fnmatch globs on the stripped paths, e.g. 'vllm/*')",
        )
    url = request.url or (request.to if _is_url(request.to) else None)
    return Revision(request.pr or entry.pr, url, sha256, request.revision, request.origin, paths, patch)


def _is_url(text: str) -> bool:
    return urllib.parse.urlsplit(text).scheme in ("http", "https")


def _pr_url(request: BumpRequest, entry: Entry) -> str | None:
    if request.pr_url:
        return request.pr_url
    if request.pr and request.pr != entry.pr and entry.pr_url and str(entry.pr) in entry.pr_url:
        return entry.pr_url.replace(str(entry.pr), str(request.pr))
    return None


def _source_fields(entry: Entry, new: Revision) -> dict:
    """The [entry.source] table of the new revision, keys in the order series.toml writes them."""
    fields: dict = {}
    if new.revision:
        fields["revision"] = new.revision
    if new.origin:
        fields["origin"] = new.origin
    fields["url"] = new.url or NO_URL
    fields["sha256"] = new.sha256
    if new.paths:
        fields["paths"] = list(new.paths)
    fields["strip"] = entry.source.strip if entry.source else 1
    return fields


# ---------------------------------------------------------------------------------------------------------------
# Hunks of the two revisions


def _changed_lines(hunk: Hunk) -> list[str]:
    """What the hunk changes, whitespace-insensitive: `-line` / `+line`."""
    return [f"{op}{text.strip()}" for op, text in hunk.lines if op in "-+" and text.strip()]


def match_hunks(old: Patch, new: Patch) -> list[HunkMatch]:
    """The hunk map of two revisions of one PR, file by file (new revision's file order, then the files only the
    old one has): each new hunk with the old hunk whose changed lines it shares most (`MATCH_RATIO`), each old hunk
    no new hunk matched as gone. An old hunk may match several new ones (a hunk split in two)."""
    old_files = {f.path: f for f in old.files}
    new_files = {f.path: f for f in new.files}
    rows: list[HunkMatch] = []
    for path in [*new_files, *(p for p in old_files if p not in new_files)]:
        o, n = old_files.get(path), new_files.get(path)
        rows += _match_file(path, o, n)
    return rows


def _match_file(path: str, old: FilePatch | None, new: FilePatch | None) -> list[HunkMatch]:
    olds = list(old.hunks) if old else []
    news = list(new.hunks) if new else []
    rows: list[HunkMatch] = []
    # 1. the same change (the same lines removed and added) pairs one to one, in order
    for h in list(news):
        same = next((o for o in olds if _changed_lines(o) == _changed_lines(h)), None)
        if same is not None:
            rows.append(HunkMatch(path, same.index, h.index, HunkChange.SAME, 1.0))
            olds.remove(same)
            news.remove(h)
    # 2. what is left: each new hunk with the old hunk that holds most of its names; an old hunk may take several
    taken: set[int] = set()
    for h in news:
        scored = [(_similarity(o, h), o.index) for o in olds]
        best = max(scored, default=(0.0, None))
        if best[1] is None or best[0] < MATCH_RATIO:
            rows.append(HunkMatch(path, None, h.index, HunkChange.NEW))
            continue
        taken.add(best[1])
        rows.append(HunkMatch(path, best[1], h.index, HunkChange.CHANGED, round(best[0], 2)))
    rows += [HunkMatch(path, o.index, None, HunkChange.GONE) for o in olds if o.index not in taken]
    return sorted(rows, key=lambda m: (m.new is None, m.new or 0, m.old or 0))


_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _similarity(old: Hunk, new: Hunk) -> float:
    """How much of `new` is found in `old`: the names (identifiers and words) of its changed code lines, and at half
    weight those of its context, that occur anywhere in `old`. Names, not lines: a takeover rewraps and rewords
    lines but keeps the calls and variables (#47629's `else:` Triton prefill branch holds every name of #38476's
    `if use_deep_gemm: ... else: ...` prefill hunk); the context tells apart hunks whose changed lines are alike
    (`elif use_deep_gemm:` in the prefill and in the decode branch)."""
    theirs = {n for _, text in old.lines for n in _NAME.findall(text)}
    changed = {n for line in _code_lines(new) for n in _NAME.findall(line)}
    context = {n for op, text in new.lines if op == " " for n in _NAME.findall(text)} - changed
    total = len(changed) + 0.5 * len(context)
    if not total:
        return 0.0
    return (len(changed & theirs) + 0.5 * len(context & theirs)) / total


def _code_lines(hunk: Hunk) -> list[str]:
    """The hunk's changed lines without comment-only ones."""
    return [line for line in _changed_lines(hunk) if line[1:] and not line[1:].startswith(("#", "//"))]


def remap_resolves(
    series: Series, entry_id: str, matches: list[HunkMatch]
) -> tuple[dict[str, tuple[list[str], list[str]]], dict[str, list[str]], dict[str, list[str]]]:
    """Rewrite the `resolves` items that name `entry_id`'s hunks through the hunk map.

    Returns (fix -> (old items, new items) where the map changed them; fix -> items naming a gone hunk; fix -> the
    complete new list, for every fix with an item naming the entry). An item naming a gone hunk leaves the list
    (no hunk of the new revision is its to carry) and is reported: the fix is broken (`fix_fates`)."""
    rewritten: dict[str, tuple[list[str], list[str]]] = {}
    unmapped: dict[str, list[str]] = {}
    lists: dict[str, list[str]] = {}
    for fix in series.entries:
        if not any(r.entry == entry_id for r in fix.resolves):
            continue
        new_items: list[str] = []
        for r in fix.resolves:
            if r.entry != entry_id:
                new_items.append(str(r))
                continue
            targets = [m.new for m in matches if m.file == r.path and m.old == r.hunk and m.new is not None]
            if not targets:
                unmapped.setdefault(fix.id, []).append(str(r))
                continue
            new_items += [str(Resolve(r.entry, r.path, n)) for n in targets]
        new_items = list(dict.fromkeys(new_items))
        lists[fix.id] = new_items
        old_items = [str(r) for r in fix.resolves]
        if new_items != old_items:
            rewritten[fix.id] = (old_items, new_items)
    return rewritten, unmapped, lists


# ---------------------------------------------------------------------------------------------------------------
# The fixes under the new revision


def fix_fates(
    series: Series,
    entry_id: str,
    result: ComposeResult,
    read: Callable[[str], str | None],
    unmapped: dict[str, list[str]],
) -> list[FixVerdict]:
    """Each local fix the compose `result` (the candidate with every fix in) applied or stopped at: needed,
    unneeded or broken, with the evidence. `read(path)` gives a file of the compose's last tree (what the new
    revision and the fixes that could be placed made of it)."""
    outcomes = {o.id: o for o in result.entries}
    pr = outcomes.get(entry_id)
    carried = {(h.file, h.hunk): h for h in (pr.hunks if pr else [])}
    verdicts = []
    for fix in series.entries:
        o = outcomes.get(fix.id)
        if fix.kind != "local" or o is None or o.status in (EntryStatus.SKIPPED, EntryStatus.NOT_REACHED):
            continue
        verdicts.append(_fate(fix, o, entry_id, carried, read, unmapped.get(fix.id, [])))
    return verdicts


def _fate(
    fix: Entry,
    o: EntryOutcome,
    entry_id: str,
    carried: dict[tuple[str, int], HunkOutcome],
    read: Callable[[str], str | None],
    unmapped: list[str],
) -> FixVerdict:
    if unmapped:
        return FixVerdict(
            fix.id, FixFate.BROKEN, f"resolves {', '.join(unmapped)}, a hunk the new revision no longer has"
        )
    if o.status is EntryStatus.DROPPED_UPSTREAM:
        return FixVerdict(fix.id, FixFate.UNNEEDED, "all its hunks are in the tree once the new revision is applied")
    if o.status in (EntryStatus.CONFLICT, EntryStatus.PARTLY_UPSTREAM):
        return _stopped_fate(fix, o, read)
    mine = [r for r in fix.resolves if r.entry == entry_id]
    if mine:
        alone = [(r, carried.get((r.path, r.hunk))) for r in mine]
        landed = [f"{r.path}#{r.hunk} {h.verdict if h else 'not placed'}" for r, h in alone]
        if all(h is not None and str(h.verdict) in CLEAN_VERDICTS for _, h in alone):
            return FixVerdict(fix.id, FixFate.UNNEEDED, "without it the hunks it resolves land " + ", ".join(landed))
        return FixVerdict(fix.id, FixFate.NEEDED, "without it: " + ", ".join(landed))
    return FixVerdict(fix.id, FixFate.NEEDED, "applied")


def _stopped_fate(fix: Entry, o: EntryOutcome, read: Callable[[str], str | None]) -> FixVerdict:
    """A fix that stopped the compose: unneeded when the tree already holds what each of its hunks that did not go
    in would write (comments aside: a takeover words them its own way), else broken, naming the hunks a person can
    drop because the new revision makes their change itself."""
    hunks = {(fp.path, h.index): h for fp in (fix.patch.files if fix.patch else []) for h in fp.hunks}
    missing = [h for h in o.hunks if str(h.verdict) in ("conflict", "already-applied") and not h.resolved_by]
    made = [h for h in missing if str(h.verdict) == "already-applied" or _holds(read(h.file), hunks[(h.file, h.hunk)])]
    names = ", ".join(f"{h.file} hunk {h.hunk}" for h in made if str(h.verdict) == "conflict")
    if missing and len(made) == len(missing) == len(hunks):
        return FixVerdict(fix.id, FixFate.UNNEEDED, f"the new revision makes the same change ({names or 'all'})")
    if names:
        return FixVerdict(
            fix.id,
            FixFate.BROKEN,
            f"{names}: the new revision makes this change itself (comments aside); drop it from the fix, whose other "
            f"hunks {'place' if len(made) == len(missing) else 'still stop: ' + o.reason}",
        )
    return FixVerdict(fix.id, FixFate.BROKEN, f"{o.status}: {o.reason}")


def _code(lines: list[str]) -> list[str]:
    """Lines without blank and comment-only ones, whitespace stripped: code as it reads whatever its comments."""
    return [x.strip() for x in lines if x.strip() and not x.strip().startswith(("#", "//"))]


def _holds(text: str | None, hunk: Hunk) -> bool:
    """Whether `text` holds the hunk's post-image code (and it adds some) as a run of its own code lines."""
    want = _code(hunk.post_image)
    if text is None or not _code([line for op, line in hunk.lines if op == "+"]):
        return False
    have = _code(text.splitlines())
    return any(have[i : i + len(want)] == want for i in range(len(have) - len(want) + 1))


def _retirements(series: Series, fates: dict[str, list[FixVerdict]]) -> tuple[dict[str, str], list[str]]:
    """The fixes to retire (unneeded on every release where the range applies them) and what is left to a person."""
    per_fix: dict[str, dict[str, FixVerdict]] = {}
    for tag, verdicts in fates.items():
        for v in verdicts:
            per_fix.setdefault(v.id, {})[tag] = v
    retired: dict[str, str] = {}
    by_hand: list[str] = []
    named = {x for e in series.entries for x in [*e.requires, *(r.entry for r in e.resolves)]}
    for fix_id, by_tag in per_fix.items():
        unneeded = [t for t, v in by_tag.items() if v.fate is FixFate.UNNEEDED]
        if not unneeded:
            continue
        if len(unneeded) < len(by_tag):
            rest = [t for t in by_tag if t not in unneeded]
            by_hand.append(
                f"{fix_id}: unneeded on {', '.join(unneeded)} but not on {', '.join(rest)}; narrow its tags by hand "
                "if the releases it leaves still compose"
            )
            continue
        if fix_id in named:
            by_hand.append(f"{fix_id}: unneeded on {', '.join(unneeded)}, but other entries name it; retire it by hand")
            continue
        reasons = sorted({v.reason for v in by_tag.values()})
        retired[fix_id] = f"unneeded on {', '.join(unneeded)}: " + "; ".join(reasons)
    return retired, by_hand


def _candidate(series: Series, folder: Path, text: str) -> Path:
    """A copy of the series folder with `text` as its series.toml, validated."""
    shutil.copytree(series.path, folder, ignore=shutil.ignore_patterns(".*"))
    (folder / SERIES_FILE).write_text(text, encoding="utf-8")
    try:
        load_series(folder)
    except SeriesError as exc:
        raise SeriesError(
            f"the series with the new revision does not load: {exc.message}",
            entry=exc.entry,
            key=exc.key,
            hint=exc.hint,
        ) from None
    return folder


# ---------------------------------------------------------------------------------------------------------------
# Rows of the report


def _hunk_rows(matches: list[HunkMatch], old: ComposeResult, new: ComposeResult, entry_id: str) -> list[HunkRow]:
    def hunks(result: ComposeResult) -> dict[tuple[str, int], HunkOutcome]:
        for o in result.entries:
            if o.id == entry_id:
                return {(h.file, h.hunk): h for h in o.hunks}
        return {}

    before, after = hunks(old), hunks(new)
    return [
        HunkRow(
            m,
            before.get((m.file, m.old)) if m.old is not None else None,
            after.get((m.file, m.new)) if m.new is not None else None,
        )
        for m in matches
    ]


def _landing(h: HunkOutcome | None) -> str | None:
    if h is None:
        return None
    return f"{h.verdict}" + (f"→{h.resolved_by}" if h.resolved_by else "")


def _compose_summary(result: ComposeResult) -> dict:
    return {
        "status": str(result.status),
        "message": result.message,
        "entries": {o.id: str(o.status) for o in result.entries if o.status is not EntryStatus.SKIPPED},
    }


__all__ = [
    "BumpReport",
    "BumpRequest",
    "FixFate",
    "FixVerdict",
    "HunkChange",
    "HunkMatch",
    "ReleaseBump",
    "bump",
    "match_hunks",
    "new_content",
    "remap_resolves",
    "write_bump",
]
