"""A release arriving, replayed from our own history: would the tool have told the truth?

For each release after the first, the series is put back as it stood before that release's fixes were written. A
maintainer would have had that series when the release came out, and would have widened the fixes that reached the
release before it. The benchmark composes it onto the release and judges every hunk against the later, reviewed
compose: the current series on that release.

How the series is put back, entry by entry (local fixes; the PR entries stay as they are):
- a fix *written for* the release (the first release its `written_for` covers is this one, or a later one) is
  removed. `git log` names the commit that added its patch, so the table says when each one was written;
- a fix that covered the release before is widened onto this release. Its `written_for` is cut to the releases
  before, so the tool knows it is applied outside them;
- any other fix keeps only the releases before this one;
- `reviews.toml` is left out: a release that has just arrived has no approvals.

Judging one hunk of the arrival against the reviewed compose:
- the reviewed compose applies it as it is: its block (the lines it wrote there, with 2 lines on each side) must
  appear in the arrival's file after the same entry. If the block is there the hunk was *carried correctly*; if the
  tool applied the hunk and the block is missing, the hunk is *wrong*; if the tool refused it, that is a *false
  conflict*;
- the reviewed compose does not apply it (a later fix carries it, the release already has it, or the entry no
  longer applies): a refusal is a *right refusal*; an application is *wrong*, except the release already having it,
  which counts as carried when the tool says so too.
A wrong hunk is *named* when the tool pointed a person at it: the audit flagged it, or it landed relocated or merged
(on a new release no landing is approved, so `wheel`, `editable` and `image-overlay` refuse it, and the fixes
outside their `written_for` stop `rebase`). Otherwise it is a *silent error*. GNU patch names nothing.

Our tool runs as a survey (`ComposeOptions.go_past_stops`): an entry that would stop the compose is committed with
what could be placed, so that every hunk gets a verdict; what `rebase` itself does (its exit code and first stop) is
run separately and shown. GNU `patch --fuzz=2` and `--fuzz=3` apply the same entries' patches, without the hunks
that later fixes carry, one entry at a time onto the release's files. `git apply --3way` is not run: it needs the
PR diffs' base blobs, and the releases here are sdist imports, which do not have them.

Usage (the PR diffs in a folder, as for `rebase --sources`; the releases are imported from PyPI once):

    python benchmarks/release_arrival.py --sources DIR [--repo SCRATCH] [--only v0.30.0] [--json F] [--no-docs]
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
import tempfile
import time
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from packaging.specifiers import SpecifierSet

from vllm_compose import gitstore
from vllm_compose.cache import Cache, seed_cache
from vllm_compose.compose import ComposeOptions, Composer
from vllm_compose.patchfile import decode_text, split_lines
from vllm_compose.placement import Verdict
from vllm_compose.results import AuditVerdict, ComposeStatus, EntryStatus
from vllm_compose.series import load_series, version_of_tag
from vllm_compose.status import write_marked_section
from vllm_compose.trees import GitTree

ROOT = Path(__file__).resolve().parent.parent
RELEASES = ["v0.26.0", "v0.27.0", "v0.27.1", "v0.28.0", "v0.29.0", "v0.30.0", "v0.31.0", "v0.32.0", "v0.33.0"]
#: lines on each side of what a hunk wrote that must come with it
BLOCK_CONTEXT = 2
DOCS = ROOT / "docs" / "benchmarks.md"
MARK = "release-arrival"
CLASSES = ("carried", "false conflict", "right refusal", "wrong, named", "silent error")
APPLIED = (Verdict.EXACT, Verdict.OFFSET, Verdict.RELOCATED, Verdict.MERGED)


# --------------------------------------------------------------------------------------------------------------
# The series as it stood before a release's fixes


def covered(spec: str | None) -> list[str]:
    """The releases (of `RELEASES`) a tags / written_for specifier covers; None covers all."""
    if spec is None:
        return list(RELEASES)
    s = SpecifierSet(spec)
    return [t for t in RELEASES if s.contains(version_of_tag(t), prereleases=True)]


def _range(first: str, last: str) -> str:
    return f">={version_of_tag(first)},<={version_of_tag(last)}"


@dataclass
class Arrival:
    """The series put back for one release: which fixes were removed (and when they were written), widened, cut."""

    tag: str
    #: (entry id, "commit date" of the commit that added its patch, the first release it was written for)
    removed: list[tuple[str, str, str]] = field(default_factory=list)
    widened: list[str] = field(default_factory=list)


def arrival_series(
    series_dir: Path, tag: str, out: Path, keep: frozenset[str] = frozenset(), narrow: frozenset[str] = frozenset()
) -> Arrival:
    """Write into `out` the series as a maintainer would have had it when `tag` arrived (module docstring); the
    removed fixes named in `keep` stay as they are now (the maintainer has written them back), and the fixes named
    in `narrow` are not widened (the maintainer took them back out of this release)."""
    shutil.rmtree(out, ignore_errors=True)
    shutil.copytree(series_dir, out)
    (out / "reviews.toml").unlink(missing_ok=True)
    text = (out / "series.toml").read_text()
    data = tomllib.loads(text)
    prev = RELEASES[RELEASES.index(tag) - 1]
    blocks = re.split(r"(?m)^(?=\[\[entry\]\])", text)
    kept, arrival = [blocks[0]], Arrival(tag)
    for block, entry in zip(blocks[1:], data["entry"], strict=True):
        if "file" not in entry:
            kept.append(block)
            continue
        written = covered(entry.get("written_for", entry.get("tags")))
        before = [t for t in written if RELEASES.index(t) < RELEASES.index(tag)]
        if entry["id"] in keep:
            kept.append(block)
            continue
        if not before:
            arrival.removed.append((entry["id"], _added_by(series_dir / entry["file"]), written[0] if written else "?"))
            continue
        if prev in before and entry["id"] not in narrow:
            tags, arrival.widened = _range(before[0], tag), [*arrival.widened, entry["id"]]
        else:
            tags = _range(before[0], before[-1])
        block = _set_key(block, "tags", tags)
        kept.append(_set_key(block, "written_for", _range(before[0], before[-1])))
    (out / "series.toml").write_text("".join(kept))
    return arrival


def _set_key(block: str, key: str, value: str) -> str:
    line = f'{key} = "{value}"\n'
    if re.search(rf"(?m)^{key} = .*\n", block):
        return re.sub(rf"(?m)^{key} = .*\n", line, block, count=1)
    return re.sub(r"(?m)^(file = .*\n)", lambda m: m.group(1) + line, block, count=1)


def _added_by(patch: Path) -> str:
    """The commit (short id and date) that added `patch` to this repository: when the fix was written."""
    done = subprocess.run(
        ["git", "log", "--diff-filter=A", "--follow", "--format=%h %ad", "--date=short", "--", str(patch)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    lines = done.stdout.strip().splitlines()
    return lines[-1] if lines else "?"


# --------------------------------------------------------------------------------------------------------------
# Composing, and judging each hunk


def compose(series: Path, repo: Path, tag: str, cache: Cache, **options) -> Composer:
    composer = Composer(series, repo, cache, ComposeOptions(offline=True, keep_state=False, publish=False, **options))
    composer.run(tag)  # its result stays on the composer (`composer.result`), with the commits and patches
    return composer


_LINES: dict[tuple[str, str], list[str]] = {}


def _lines(composer: Composer, commit, path: str) -> list[str]:
    """The lines of `path` in `commit` (read once per blob: every hunk of a file is judged against them)."""
    key = (str(commit.tree.id), path)
    if key not in _LINES:
        data = GitTree(composer.repo, commit.tree).read(path)
        _LINES[key] = split_lines(decode_text(data))[0] if data is not None else []
    return _LINES[key]


def _contains(lines: list[str], block: list[str]) -> bool:
    n = len(block)
    return any(lines[i : i + n] == block for i in range(len(lines) - n + 1)) if n else True


@dataclass
class Truth:
    """What the reviewed compose does with one hunk: its block when it applies the hunk as it is, else why not."""

    block: list[str] | None
    why_not: str = ""


def truths(reviewed: Composer) -> dict[tuple[str, str, int], Truth]:
    """(entry, file, hunk) -> what the reviewed compose did with it."""
    commits = {c.outcome.id: c.commit for c in reviewed.committed}
    out: dict[tuple[str, str, int], Truth] = {}
    for e in reviewed.result.entries:
        for h in e.hunks:
            key = (e.id, h.file, h.hunk)
            if e.status is EntryStatus.DROPPED_UPSTREAM:
                out[key] = Truth(None, "already in the release")
            elif h.resolved_by:
                out[key] = Truth(None, f"carried by {h.resolved_by}")
            elif h.verdict is Verdict.ALREADY_APPLIED:
                out[key] = Truth(None, "already in the release")
            elif h.span is not None and e.id in commits:
                lines = _lines(reviewed, commits[e.id], h.file)
                first, last = h.span
                out[key] = Truth(lines[max(0, first - 1 - BLOCK_CONTEXT) : last + BLOCK_CONTEXT])
            else:
                out[key] = Truth(None, f"not applied ({h.verdict})")
    return out


def _why(t: Truth | None) -> str:
    if t is None:
        return "the reviewed compose does not apply this entry"
    return t.why_not or "the reviewed block is not in the result"


def judge(truth: Truth | None, applied: bool, present: bool, already: bool) -> str:
    if truth is None or truth.block is None:
        if already and truth is not None and truth.why_not == "already in the release":
            return "carried"
        return "wrong" if applied else "right refusal"
    if applied and present:
        return "carried"
    return "wrong" if applied else "false conflict"


def judge_ours(arrival: Composer, truth: dict, written_back: frozenset[str]) -> tuple[dict[str, int], list[str]]:
    """Count each hunk of the compose the maintainer loop ended with; the wrong ones, listed. The fixes the
    maintainer wrote back are the person's work, not the tool's, and are not counted."""
    counts = dict.fromkeys(CLASSES, 0)
    wrong = []
    commits = {c.outcome.id: c.commit for c in arrival.committed}
    for e in arrival.result.entries:
        if e.status in (EntryStatus.SKIPPED, EntryStatus.NOT_REACHED) or e.id in written_back:
            continue
        flagged = {(h.file, h.hunk) for h in (e.audit.hunks if e.audit else []) if h.verdict is AuditVerdict.MISPLACED}
        for h in e.hunks:
            if h.resolved_by:
                continue
            t = truth.get((e.id, h.file, h.hunk))
            applied = h.verdict in APPLIED and e.id in commits
            already = h.verdict is Verdict.ALREADY_APPLIED or e.status is EntryStatus.DROPPED_UPSTREAM
            present = False
            if applied and t is not None and t.block is not None and e.id in commits:
                present = _contains(_lines(arrival, commits[e.id], h.file), t.block)
            verdict = judge(t, applied, present, already)
            if verdict == "wrong":
                named = (h.file, h.hunk) in flagged or (h.file, h.hunk) in {(x.file, x.hunk) for x in e.landings}
                verdict = "wrong, named" if named else "silent error"
                why = _why(t)
                wrong.append(f"{e.id}:{h.file}#{h.hunk} {h.verdict} ({why}; {verdict})")
            counts[verdict] += 1
    return counts, wrong


_GNU_HUNK = re.compile(r"^Hunk #(\d+) (succeeded|FAILED|ignored)")
_GNU_FILE = re.compile(r"^(?:patching|checking) file '?(.+?)'?$")


def judge_gnu(arrival: Composer, truth: dict, repo: Path, tag: str, fuzz: int) -> tuple[dict[str, int], list[str]]:
    """GNU patch --fuzz=N: the arrival's entries (as our tool chose them), one patch each onto the release."""
    counts = dict.fromkeys(CLASSES, 0)
    wrong = []
    with tempfile.TemporaryDirectory(prefix="arrival-gnu-") as tmp:
        work = Path(tmp)
        stock = GitTree(arrival.repo, gitstore.resolve_commit(arrival.repo, f"refs/tags/{tag}").tree)
        for e in arrival.result.entries:
            if e.status not in (EntryStatus.APPLIED, EntryStatus.CONFLICT, EntryStatus.PARTLY_UPSTREAM):
                continue
            carried = {(h.file, h.hunk) for h in e.hunks if h.resolved_by}
            patch = arrival.patches[e.id].without(carried)
            for fp in patch.files:
                target = work / fp.path
                if not target.exists() and not fp.is_new:
                    data = stock.read(fp.old_path or fp.path)
                    if data is not None:
                        target.parent.mkdir(parents=True, exist_ok=True)
                        target.write_bytes(data)
            done = subprocess.run(
                ["patch", "-p1", f"--fuzz={fuzz}", "-f", "-N", "--no-backup-if-mismatch", "-r", "-", "-d", str(work)],
                input=patch.to_text(),
                capture_output=True,
                text=True,
                check=False,
            )
            failed: set[tuple[str, int]] = set()
            current = None
            for line in done.stdout.splitlines():
                if m := _GNU_FILE.match(line):
                    current = m.group(1)
                elif (m := _GNU_HUNK.match(line)) and m.group(2) != "succeeded" and current is not None:
                    failed.add((current, int(m.group(1))))
            for fp in patch.files:
                target = work / fp.path
                lines = split_lines(target.read_text(errors="surrogateescape"))[0] if target.exists() else []
                for position, h in enumerate(fp.hunks, 1):
                    t = truth.get((e.id, fp.path, h.index))
                    applied = (fp.path, position) not in failed
                    present = t is not None and t.block is not None and _contains(lines, t.block)
                    verdict = judge(t, applied, present, already=False)
                    if verdict == "wrong":
                        verdict = "silent error"
                        why = _why(t)
                        wrong.append(f"{e.id}:{fp.path}#{h.index} ({why})")
                    counts[verdict] += 1
    return counts, wrong


# --------------------------------------------------------------------------------------------------------------
# The run and the table


def maintainer_loop(series_dir: Path, repo: Path, tag: str, cache: Cache, truth: dict, work: Path) -> dict:
    """`rebase` the arrival as a maintainer would, and compose again after each stop:
    - a conflict: write back the removed fixes whose `resolves` name the hunks that stopped it; or, when the reviewed
      compose does not apply the stopping entry, take its widening back; or, when a written-back fix stops, take
      back the widened fixes in its files that the reviewed compose does not apply;
    - a refusal by the audit or the checks: write back the removed fixes that touch a file it names;
    - a review stop: take back the widened fixes whose landing the reviewed compose does not confirm (each such hunk
      was wrong but named), else approve the landings.
    Returns the stops, the hunks they named judged, and the last compose judged hunk by hunk."""
    written_back: set[str] = set()
    narrowed: set[str] = set()
    allow = False
    stops, counts = [], dict.fromkeys(CLASSES, 0)
    arrival = arrival_series(series_dir, tag, work)
    removed = {i for i, _, _ in arrival.removed}
    entries = {e.id: e for e in load_series(series_dir).entries}
    reviewed_entries = {key[0] for key in truth}

    def files_of(eid: str) -> set[str]:
        patch = composer.patches.get(eid) or entries[eid].patch
        return {fp.path for fp in patch.files} if patch is not None else set()

    def widened_in(files: set[str]) -> set[str]:
        return {w for w in arrival.widened if w not in narrowed | reviewed_entries and files & files_of(w)}

    for _ in range(30):
        arrival_series(series_dir, tag, work, frozenset(written_back), frozenset(narrowed))
        composer = compose(work, repo, tag, cache, allow_unreviewed=allow)
        result = composer.result
        first = result.message.splitlines()[0][:240] if result.message else ""
        if result.status is ComposeStatus.COMPOSED:
            break
        stop = {"kind": str(result.status), "message": first}
        back, narrow = set(), set()
        if composer.stopped is not None:  # a conflict (or partly upstream) at one entry
            step = composer.stopped
            eid = step.entry.id
            named = {(eid, path, n) for path, n, _ in step.open_conflicts} or {
                (eid, h.file, h.hunk)  # partly upstream: the hunks the release does not have
                for h in step.outcome.hunks
                if not h.resolved_by and h.verdict is not Verdict.ALREADY_APPLIED
            }
            for key in named:
                t = truth.get(key)
                counts["false conflict" if t is not None and t.block is not None else "right refusal"] += 1
            back = {
                i
                for i in removed - written_back
                if entries[i].applies_to(tag) and any((r.entry, r.path, r.hunk) in named for r in entries[i].resolves)
            }
            if not back and eid not in reviewed_entries:
                narrow = {eid}
            elif not back and eid in written_back:
                narrow = widened_in(files_of(eid))
        else:  # refused: the audit, the checks, or a fix outside its written_for
            commits = {c.outcome.id: c.commit for c in composer.committed}
            review_stops = result.review.stops if result.review is not None else []
            wrong = [x for x in review_stops if not _confirmed(composer, commits, truth, x.landing)]
            counts["wrong, named"] += len(wrong)
            narrow = {x.landing.entry for x in wrong} - reviewed_entries
            files = _refused_files(result, review=False)
            back = {i for i in removed - written_back if entries[i].applies_to(tag) and files & files_of(i)}
            if not (back or narrow) and review_stops and not allow:
                allow = True  # every landing stopped for review is right: the person approves them
                stop["approved"] = len(review_stops)
        stop.update({"written back": sorted(back), "narrowed": sorted(narrow)})
        stops.append(stop)
        if not (back or narrow or stop.get("approved")):
            break
        written_back |= back
        narrowed |= narrow
    ours, wrong = judge_ours(composer, truth, frozenset(written_back))
    for c in ("false conflict", "right refusal", "wrong, named"):  # what the stops named on the way
        ours[c] += counts[c]
    return {
        "exit": int(result.exit_code),
        "stops": stops,
        "written back": sorted(written_back),
        "narrowed": sorted(narrowed),
        "counts": ours,
        "wrong": wrong,
        "ended": first,
        "arrival": arrival,
    }


def _confirmed(composer: Composer, commits: dict, truth: dict, landing) -> bool:
    """Whether the reviewed compose has this landing: its block is in the entry commit's file."""
    t = truth.get((landing.entry, landing.file, landing.hunk))
    if t is None or t.block is None or landing.entry not in commits:
        return False
    return _contains(_lines(composer, commits[landing.entry], landing.file), t.block)


def _refused_files(result, review: bool = True) -> set[str]:
    """The files a refusal names: bad audit hunks, failed checks, and (with `review`) fixes stopped for review."""
    files = set()
    for e in result.entries:
        files |= {h.file for h in (e.audit.bad_hunks if e.audit else [])}
    if result.final_checks is not None:
        files |= {f.file for f in result.final_checks.findings if f.severity == "error" and f.file}
    if review and result.review is not None:
        files |= {x.landing.file for x in result.review.stops}
    return files


def run(series_dir: Path, repo: Path, cache: Cache, tags: list[str]) -> list[dict]:
    rows = []
    for tag in tags:
        t0 = time.perf_counter()
        reviewed = compose(series_dir, repo, tag, cache, run_checks=False, allow_unreviewed=True)
        truth = truths(reviewed)
        with tempfile.TemporaryDirectory(prefix=f"arrival-{tag}-") as tmp:
            loop = maintainer_loop(series_dir, repo, tag, cache, truth, Path(tmp) / "series")
            arrival = loop.pop("arrival")
            survey_series = Path(tmp) / "survey"
            arrival_series(series_dir, tag, survey_series)
            survey = compose(survey_series, repo, tag, cache, run_checks=False, go_past_stops=True)
            gnu = {f: judge_gnu(survey, truth, repo, tag, f) for f in (2, 3)}
        rows.append(
            {
                "tag": tag,
                "removed": arrival.removed,
                "widened": arrival.widened,
                "vllm-compose": loop,
                **{f"patch --fuzz={f}": {"counts": c, "wrong": w} for f, (c, w) in gnu.items()},
                "seconds": round(time.perf_counter() - t0, 1),
            }
        )
        print(
            f"{tag}: {len(loop['stops'])} stops, ended exit {loop['exit']}; ours {loop['counts']}; "
            f"{time.perf_counter() - t0:.0f} s",
            flush=True,
        )
    return rows


def render(rows: list[dict]) -> str:
    tools = ["vllm-compose", "patch --fuzz=2", "patch --fuzz=3"]
    out = [
        f"Measured {time.strftime('%Y-%m-%d')} by `benchmarks/release_arrival.py` (the series of this commit, put back "
        "per release as the module docstring says). Per tool: hunks carried correctly / false conflicts / right "
        "refusals / wrong but named for a person / **silent errors**.",
        "",
        "| release | its fixes, removed (when written) | widened | stops until composed | review-stop landings approved | "
        + " | ".join(f"`{t}`" for t in tools)
        + " |",
        "|---|---|---|---|---|" + "---|" * len(tools),
    ]
    for r in rows:
        own = [f"{i} ({when.split()[-1]})" for i, when, first in r["removed"] if first == r["tag"]]
        later = sum(1 for *_, first in r["removed"] if first != r["tag"])
        removed = (", ".join(own) or "none") + (f"; and {later} written for later releases" if later else "")
        cells = [" / ".join(str(r[t]["counts"][c]) for c in CLASSES) for t in tools]
        loop = r["vllm-compose"]
        stops = f"{len(loop['stops'])}" + ("" if loop["exit"] == 0 else f" (then exit {loop['exit']})")
        approved = sum(x.get("approved", 0) for x in loop["stops"])
        out.append(
            f"| {r['tag']} | {removed} | {len(r['widened'])} | {stops} | {approved} | " + " | ".join(cells) + " |"
        )
    total = {t: {c: sum(r[t]["counts"][c] for r in rows) for c in CLASSES} for t in tools}
    out += ["", "Totals: " + "; ".join(f"`{t}` " + " / ".join(str(total[t][c]) for c in CLASSES) for t in tools) + "."]
    silent = [(r["tag"], w) for r in rows for w in r["vllm-compose"]["wrong"] if w.endswith("silent error)")]
    out.append("")
    if silent:
        out.append("Our silent errors: " + "; ".join(f"{tag}: `{w}`" for tag, w in silent) + ".")
    else:
        out.append(
            "Our tool made no silent error: every wrong hunk was refused, flagged by the audit, or named for review."
        )
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sources", type=Path, required=True, help="folder with the PR diffs")
    ap.add_argument("--repo", type=Path, help="scratch vLLM repository with (or for) the release tags")
    ap.add_argument("--only", action="append", metavar="TAG", help="only this release (repeatable)")
    ap.add_argument("--json", type=Path, metavar="FILE")
    ap.add_argument("--no-docs", action="store_true", help="do not rewrite docs/benchmarks.md's section")
    args = ap.parse_args(argv)
    if shutil.which("patch") is None:
        print("GNU patch is not installed", file=sys.stderr)
        return 3
    cache = Cache()
    seed_cache(args.sources, cache)
    repo = args.repo or Path(tempfile.mkdtemp(prefix="arrival-repo-"))
    if not (repo / "HEAD").exists() and not (repo / ".git").exists():
        gitstore.init_bare_repo(repo)
    rows = run(ROOT / "series", repo, cache, args.only or RELEASES[1:])
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2) + "\n")
    table = render(rows)
    print(table, end="")
    if not args.no_docs and not args.only:
        write_marked_section(
            DOCS,
            table,
            f"<!-- BEGIN {MARK}: generated by {Path(__file__).name}, do not edit -->",
            f"<!-- END {MARK} -->",
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
