"""The review of a compose: the landings a person must look at, and the approvals recorded for them in the series.

A hunk the engine placed where its context did not match verbatim (verdict `relocated` or `merged`) is a
*landing*: the text alone does not prove it, the engine's judgement does, and the audit agreed. Each landing gets
a digest over what it changed and where: the entry, the file, the hunk's own lines, the target lines it replaced
with `DIGEST_CONTEXT` lines around them, and the lines it wrote. The digest holds content only, never line numbers,
so composing the same inputs again gives the same digests, and any drift at the site gives a new one.

Every entry commit names its landings in `Review-Landing:` trailers (`trailers.REVIEW_LANDING`), so a branch says
what must be reviewed without being composed again: `wheel` and `editable` read them back. `vllm-compose review`
composes the series without publishing it (also where the compose refuses) and shows each landing: the hunk, the
lines around it in the entry commit, and the audit's word on it.

Approvals live in `series/reviews.toml`, one `[[approval]]` per landing and release:

    [[approval]]
    onto = "v0.30.0"
    hunk = "pr38476:vllm/platforms/cuda.py#1"
    landing = "3f2a9c0d1e2b4a5f"
    by = "A. Maintainer"
    why = "the list the release builds for SM8x; priority as on v0.29.0"

An approval covers exactly one landing digest on one release: a later compose that lands the hunk differently is
unreviewed again. The policy (`unreviewed`, `stops`):
- `rebase` warns about unreviewed landings, and stops (exit 2, nothing written) where a local fix applies outside
  the releases it was written for (its `written_for`, default its `tags`) and one of its hunks did not land exact or
  offset: a widened range is a guess until a person has looked;
- `wheel`, `editable` and `image-overlay` refuse any unreviewed landing.
`--allow-unreviewed` overrides either, and the override is recorded: in the report and its JSON, for `rebase` also
as a `Review-Override:` trailer of the fix's commit (the image's `--json` report is kept in the image as
/opt/vllm-compose/overlay.json).
"""

from __future__ import annotations

import hashlib
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from .atomicfile import write_atomically
from .errors import ComposeError, RefusedError, SeriesError
from .patchfile import Hunk, Patch, decode_text, split_lines
from .placement import FilePlacement, Verdict
from .series import Entry, parse_hunk_id, version_of_tag
from .trailers import ENTRY, REVIEW_LANDING
from .trees import FileTree

#: engine verdicts whose landing a person reviews: the context did not match verbatim
REVIEW_VERDICTS = frozenset({Verdict.RELOCATED, Verdict.MERGED})
#: the approvals file of a series folder
REVIEWS_FILE = "reviews.toml"
#: target lines on each side of a landing that its digest covers
DIGEST_CONTEXT = 3
#: hex digits of a landing digest (64 bits: a collision between two landings of one hunk is not a concern)
DIGEST_LEN = 16

_DIGEST = re.compile(rf"^[0-9a-f]{{{DIGEST_LEN}}}$")
_APPROVAL_KEYS = ("onto", "hunk", "landing", "by", "why")


@dataclass(frozen=True)
class Landing:
    """One relocated or merged hunk of an entry commit."""

    entry: str
    file: str
    hunk: int
    verdict: str
    #: 1-based first and last line of what the hunk wrote in the entry commit's file (last = first - 1: it only
    #: removed lines, which stood before line `first`)
    first: int
    last: int
    digest: str

    @property
    def id(self) -> str:
        """`<entry>:<path>#<hunk>`, the form of `resolves`."""
        return f"{self.entry}:{self.file}#{self.hunk}"

    def trailer(self) -> str:
        return f"Review-Landing: {self.file}#{self.hunk} {self.verdict} {self.first}-{self.last} {self.digest}"

    def to_json(self) -> dict:
        return {
            "id": self.id,
            "entry": self.entry,
            "file": self.file,
            "hunk": self.hunk,
            "verdict": self.verdict,
            "lines": [self.first, self.last],
            "digest": self.digest,
        }


def landings_of_file(entry: str, path: str, placed: FilePlacement, target: list[str]) -> list[Landing]:
    """The landings among one file's placements; `target` is the file's lines before the entry (no line ends)."""
    out = []
    for pl in placed.placements:
        if pl.verdict not in REVIEW_VERDICTS or pl.replacement is None or pl.hunk.index not in placed.spans:
            continue
        first, last = placed.spans[pl.hunk.index]
        digest = landing_digest(entry, path, pl.hunk, target, pl.start, pl.end, pl.replacement)
        out.append(Landing(entry, path, pl.hunk.index, str(pl.verdict), first, last, digest))
    return out


def landing_digest(
    entry: str, path: str, hunk: Hunk, target: list[str], start: int, end: int, replacement: list[str]
) -> str:
    """sha256 (first `DIGEST_LEN` hex digits) over the hunk, the target lines `[start, end)` it replaced with
    `DIGEST_CONTEXT` lines around them, and the lines it wrote. Content only: line numbers do not count."""
    lo, hi = max(0, start - DIGEST_CONTEXT), min(len(target), end + DIGEST_CONTEXT)
    parts = [
        f"{entry}\0{path}\0{hunk.index}",
        *(op + text for op, text in hunk.lines),
        "\0before",
        *target[lo:start],
        "\0replaced",
        *target[start:end],
        "\0after",
        *target[end:hi],
        "\0wrote",
        *replacement,
    ]
    data = "\n".join(parts).encode("utf-8", "surrogateescape")
    return hashlib.sha256(data).hexdigest()[:DIGEST_LEN]


def landings_of_commit(message: str) -> list[Landing]:
    """The landings an entry commit's message names (its `Review-Landing:` trailers)."""
    m = ENTRY.search(message)
    if m is None:
        return []
    entry = m.group(1)
    return [
        Landing(entry, t["file"], int(t["hunk"]), t["verdict"], int(t["first"]), int(t["last"]), t["digest"])
        for t in REVIEW_LANDING.finditer(message)
    ]


# --------------------------------------------------------------------------------------------------------------
# Approvals


@dataclass(frozen=True)
class Approval:
    """A person's word that one landing on one release is right."""

    onto: str
    hunk: str
    landing: str
    by: str
    why: str


def load_approvals(series_dir: Path) -> list[Approval]:
    """The series' recorded approvals; none when `reviews.toml` is absent. `SeriesError` names a malformed one."""
    path = Path(series_dir) / REVIEWS_FILE
    if not path.is_file():
        return []
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise SeriesError(f"cannot read {path}: {exc}", file=str(path), hint="fix the TOML") from None
    unknown = sorted(set(data) - {"approval"})
    if unknown:
        raise SeriesError(
            f"{path}: unknown table {unknown[0]!r}",
            file=str(path),
            key=unknown[0],
            hint="the file holds [[approval]] tables only",
        )
    raw_list = data.get("approval", [])
    if not isinstance(raw_list, list):
        raise SeriesError(f"{path}: approval must be an array of tables", file=str(path), hint="write [[approval]]")
    seen: dict[tuple[str, str, str], int] = {}
    out = []
    for i, raw in enumerate(raw_list, 1):
        approval = _approval(path, i, raw)
        key = (approval.onto, approval.hunk, approval.landing)
        if key in seen:
            raise SeriesError(
                f"{path}: approval #{i} repeats approval #{seen[key]} ({approval.hunk} on {approval.onto})",
                file=str(path),
                key="approval",
                hint="keep one of them",
            )
        seen[key] = i
        out.append(approval)
    return out


def _approval(path: Path, i: int, raw: object) -> Approval:
    where = f"{path}: approval #{i}"
    if not isinstance(raw, dict):
        raise SeriesError(f"{where} is not a table", file=str(path), hint="write [[approval]] tables")
    unknown = sorted(set(raw) - set(_APPROVAL_KEYS))
    if unknown:
        raise SeriesError(
            f"{where} has unknown key {unknown[0]!r}",
            file=str(path),
            key=unknown[0],
            hint=f"known keys: {', '.join(_APPROVAL_KEYS)}",
        )
    missing = [k for k in _APPROVAL_KEYS if not isinstance(raw.get(k), str) or not raw[k].strip()]
    if missing:
        raise SeriesError(
            f"{where} lacks {', '.join(missing)} (each a non-empty string)",
            file=str(path),
            key=missing[0],
            hint="record approvals with `vllm-compose review --onto TAG --approve ID --by NAME --why TEXT`",
        )
    try:
        version_of_tag(raw["onto"])
    except SeriesError as exc:
        raise SeriesError(f"{where}: {exc.message}", file=str(path), key="onto", hint=exc.hint) from None
    if parse_hunk_id(raw["hunk"]) is None:
        raise SeriesError(
            f"{where}: hunk {raw['hunk']!r} is not '<entry-id>:<path>#<hunk>'",
            file=str(path),
            key="hunk",
            hint="e.g. pr38476:vllm/platforms/cuda.py#1, as `vllm-compose review` lists it",
        )
    if not _DIGEST.match(raw["landing"]):
        raise SeriesError(
            f"{where}: landing {raw['landing']!r} is not a {DIGEST_LEN}-hex-digit landing digest",
            file=str(path),
            key="landing",
            hint="copy it from `vllm-compose review --onto TAG`",
        )
    return Approval(raw["onto"], raw["hunk"], raw["landing"], raw["by"].strip(), raw["why"].strip())


def record_approvals(series_dir: Path, tag: str, landings: list[Landing], by: str, why: str) -> list[Approval]:
    """Append an approval of each landing on `tag` to `reviews.toml` (one atomic write; the file's own text and
    comments are kept); returns the approvals written. Landings already approved are left as they are."""
    version_of_tag(tag)
    by, why = by.strip(), why.strip()
    if not by or not why:
        raise SeriesError(
            "an approval needs who (--by) and why (--why)",
            tag=tag,
            hint='e.g. --by "A. Maintainer" --why "read against the release: the list SM8x builds"',
        )
    path = Path(series_dir) / REVIEWS_FILE
    have = {(a.onto, a.hunk, a.landing) for a in load_approvals(series_dir)}
    new = [Approval(tag, x.id, x.digest, by, why) for x in landings if (tag, x.id, x.digest) not in have]
    if not new:
        return []
    text = path.read_text(encoding="utf-8") if path.is_file() else _HEADER
    if text and not text.endswith("\n"):
        text += "\n"
    blocks = []
    for a in new:
        fields = "\n".join(f"{k} = {_toml_string(getattr(a, k))}" for k in _APPROVAL_KEYS)
        blocks.append(f"\n[[approval]]\n{fields}\n")
    write_atomically(path, text + "".join(blocks))
    return new


_HEADER = (
    "# Approved landings: hunks that did not land exact or offset, approved for one release, by whom and why.\n"
    "# Written by `vllm-compose review --approve`; docs/review.md says what an approval covers.\n"
)


def approve(review: Review, series_dir: Path, ids: list[str] | None, by: str, why: str) -> list[Approval]:
    """Record approvals of the landings `ids` names (every unreviewed one when `ids` is None) in `reviews.toml` and
    show them on `review`; returns the approvals written. `ComposeError` for an id no landing of `review` has."""
    chosen = [x.landing for x in review.unreviewed]
    if ids:
        known = {x.landing.id: x.landing for x in review.items}
        unknown = [i for i in ids if i not in known]
        if unknown:
            raise ComposeError(
                f"{', '.join(unknown)}: no relocated or merged landing of the compose onto {review.tag} has this id",
                tag=review.tag,
                hint=f"the ids are listed by `vllm-compose review --onto {review.tag}`",
            )
        chosen = [known[i] for i in ids]
    written = record_approvals(series_dir, review.tag, chosen, by, why)
    recorded = {(a.hunk, a.landing): a for a in written}
    for x in review.items:
        x.approval = x.approval or recorded.get((x.landing.id, x.landing.digest))
    return written


def _toml_string(value: str) -> str:
    """A TOML basic string."""
    escaped = value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n").replace("\t", "\\t")
    return f'"{escaped}"'


# --------------------------------------------------------------------------------------------------------------
# The review of one compose


@dataclass
class ReviewItem:
    """A landing, the approval that covers it on this release (if any), and what the audit says of it."""

    landing: Landing
    approval: Approval | None = None
    #: the fix's `written_for` when it applies outside it on this release (the widened-range stop); else None
    outside: str | None = None
    #: the audit's verdict and expected stock line for the hunk, when the audit ran
    audit_verdict: str | None = None
    audit_expected_at: int | None = None
    audit_reason: str = ""
    #: for `vllm-compose review`: the hunk's lines (op + text) and the entry commit's file around the landing
    #: as (line number, text, whether the hunk wrote it)
    hunk_lines: list[str] = field(default_factory=list)
    context: list[tuple[int, str, bool]] = field(default_factory=list)

    @property
    def reviewed(self) -> bool:
        return self.approval is not None

    def to_json(self) -> dict:
        d = self.landing.to_json()
        d["approved"] = {"by": self.approval.by, "why": self.approval.why} if self.approval is not None else None
        if self.outside is not None:
            d["outside_written_for"] = self.outside
        if self.audit_verdict is not None:
            d["audit"] = {
                "verdict": self.audit_verdict,
                "expected_at": self.audit_expected_at,
                "reason": self.audit_reason,
            }
        return d


@dataclass
class Review:
    """Every landing of a compose on `tag`, with its approval."""

    tag: str
    items: list[ReviewItem] = field(default_factory=list)
    #: set when unreviewed landings were let through with `--allow-unreviewed`: what was allowed, and where
    override: str | None = None
    #: set when the compose reviewed stopped before its end (a conflict): at which entry, and why
    stopped: str | None = None

    @property
    def unreviewed(self) -> list[ReviewItem]:
        return [x for x in self.items if not x.reviewed]

    @property
    def stops(self) -> list[ReviewItem]:
        """Unreviewed landings of fixes applied outside the releases they were written for."""
        return [x for x in self.unreviewed if x.outside is not None]

    def summary(self) -> str:
        n, bad = len(self.items), len(self.unreviewed)
        if not n:
            return "no relocated or merged landings"
        text = f"{n} relocated or merged landings, {n - bad} approved for {self.tag}, {bad} unreviewed"
        if self.stops:
            text += f" ({len(self.stops)} of fixes outside their written_for)"
        return text

    def to_json(self) -> dict:
        return {
            "tag": self.tag,
            "summary": self.summary(),
            "landings": [x.to_json() for x in self.items],
            "override": self.override,
            "stopped": self.stopped,
        }


def review_of(tag: str, landings: list[Landing], approvals: list[Approval], entries: list[Entry]) -> Review:
    """Match each landing of a compose onto `tag` with its approval; mark fixes applied outside `written_for`."""
    by_key = {(a.onto, a.hunk, a.landing): a for a in approvals}
    by_id = {e.id: e for e in entries}
    items = []
    for x in landings:
        entry = by_id.get(x.entry)
        outside = None
        if entry is not None and entry.kind == "local" and not entry.written_for_tag(tag):
            outside = entry.written_for or entry.tags or "any"
        items.append(ReviewItem(x, by_key.get((tag, x.id, x.digest)), outside))
    return Review(tag, items)


def fill_audit(review: Review, audits: dict[tuple[str, str, int], object]) -> None:
    """Attach the audit's finding (`audit.AuditHunk`, keyed by entry, file, hunk) to each item it covers."""
    for item in review.items:
        found = audits.get((item.landing.entry, item.landing.file, item.landing.hunk))
        if found is not None:
            item.audit_verdict = str(found.verdict)
            item.audit_expected_at = found.expected_at
            item.audit_reason = found.reason


def fill_reading(review: Review, trees: dict[str, FileTree], patches: dict[str, Patch]) -> None:
    """Attach what a person reads to each item: the hunk's lines (from `patches`, by entry id) and the lines around
    the landing in the entry commit's tree (`trees`, by entry id)."""
    for item in review.items:
        land = item.landing
        patch = patches.get(land.entry)
        for fp in patch.files if patch is not None else []:
            for h in fp.hunks:
                if fp.path == land.file and h.index == land.hunk:
                    item.hunk_lines = [op + text for op, text in h.lines]
        tree = trees.get(land.entry)
        data = tree.read(land.file) if tree is not None else None
        if data is not None:
            item.context = context_of(land, split_lines(decode_text(data))[0])


def context_of(landing: Landing, lines: list[str], radius: int = DIGEST_CONTEXT) -> list[tuple[int, str, bool]]:
    """The lines of the entry commit's file around `landing`, numbered, with the ones the hunk wrote marked."""
    lo = max(1, landing.first - radius)
    hi = min(len(lines), max(landing.last, landing.first - 1) + radius)
    return [(n, lines[n - 1], landing.first <= n <= landing.last) for n in range(lo, hi + 1)]


def require_reviewed(review: Review, action: str, allow: bool, only_stops: bool = False) -> None:
    """Refuse (`RefusedError`, exit 2) `action` while landings are unreviewed (only the widened-range ones with
    `only_stops`); with `allow`, record the override on `review` instead."""
    todo = review.stops if only_stops else review.unreviewed
    if not todo:
        return
    listed = "; ".join(_describe(x) for x in todo[:6]) + (f"; and {len(todo) - 6} more" if len(todo) > 6 else "")
    if allow:
        review.override = f"--allow-unreviewed: {action} went on with {len(todo)} unreviewed landings ({listed})"
        return
    what = "fixes applied outside the releases they were written for" if only_stops else "unreviewed landings"
    raise RefusedError(
        f"{action}: {len(todo)} {what} on {review.tag}: {listed}",
        tag=review.tag,
        hint=f"read each with `vllm-compose review --onto {review.tag}`, then record it with --approve ID --by NAME "
        "--why TEXT (or widen the fix's written_for, or write a new fix); --allow-unreviewed goes on and records it",
    )


def _describe(x: ReviewItem) -> str:
    text = f"{x.landing.id} {x.landing.verdict} at line {x.landing.first}"
    if x.outside is not None:
        text += f" (written for {x.outside})"
    return text
