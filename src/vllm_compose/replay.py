"""compose(series, tag) -> ComposeResult: replay a series onto a release as in-memory commits, then write the branch.

The pipeline, in order (`Composer.run` reads like this list):
1. preflight  — validate the series, open the repository, refuse a dirty repository or a compose in progress,
                obtain the release (git tag, remote, or PyPI sdist import) and every entry's content. Nothing is
                written to a ref before this step passed.
2. replay     — for each entry that applies to the tag, in series order: place its hunks on the current tree
                (a real 3-way merge when its pinned commits are in the repository, else the placement engine),
                decide its status (applied / dropped-upstream / partly-upstream / conflict), write its commit
                object (no ref yet) and run the checks on it.
3. audit      — re-derive, from each entry commit and its parent, where every hunk landed, and compare with where
                the engine says it belongs (`audit.audit`).
4. publish    — only when every entry composed and the audit and checks are clean: move the branch ref with a
                compare-and-swap. A failed or interrupted run leaves no half-written branch.

A conflict stops the run at that entry: the state (versioned JSON under `refs/vllm-compose/state`) and the commits
made so far (`refs/vllm-compose/wip`) are kept, and the entry's files are written to a worktree folder with diff3
markers for a person to resolve. `resume()` turns that resolution into a new local skew-fix entry of the series and
composes again; `abort()` drops the state (keeping a worktree the user edited).

Commits are reproducible: author and committer date come from the release commit, so composing the same series onto
the same tag twice gives the same commit ids.
"""

from __future__ import annotations

import dataclasses
import hashlib
import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path

import pygit2
from packaging.version import Version

from . import gitstore
from .atomicfile import write_atomically
from .cache import Cache
from .errors import ComposeError, ConflictError, ExitCode, RepositoryError, SeriesError
from .patchfile import (
    FilePatch,
    Patch,
    decode_text,
    encode_text,
    format_patch,
    parse_patch,
    split_lines,
    unified_diff,
)
from .placement import FilePlacement, Verdict, place_file, place_hunk
from .progress import ProgressCallback
from .releases import ensure_release
from .series import Entry, Series, load_series, version_of_tag
from .sources import fetch_entry_patch, resolve_entry_commits
from .trailers import COMPOSED_BY
from .trees import GitTree

#: keeps the commits of an interrupted compose reachable while a conflict waits for a person
WIP_REF = "refs/vllm-compose/wip"
STATE_REF = gitstore.STATE_REF
MARKER_RE = re.compile(r"^(<<<<<<<|\|\|\|\|\|\|\||=======|>>>>>>>)( |$)", re.M)


@dataclass
class HunkOutcome:
    """What happened to one hunk of an entry."""

    file: str
    hunk: int
    verdict: str
    landing_line: int | None = None
    scope: str | None = None
    evidence: str = ""
    #: a later series entry that carries this (conflicting) hunk in its own form
    resolved_by: str | None = None

    def to_json(self) -> dict:
        d = {"file": self.file, "hunk": self.hunk, "verdict": self.verdict, "landing_line": self.landing_line}
        if self.scope:
            d["scope"] = self.scope
        if self.resolved_by:
            d["resolved_by"] = self.resolved_by
        if self.evidence:
            d["evidence"] = self.evidence
        return d


@dataclass
class EntryOutcome:
    """What happened to one series entry on this tag."""

    id: str
    title: str
    status: str  # applied | dropped-upstream | partly-upstream | conflict | skipped | not-reached
    reason: str = ""
    commit: str | None = None
    method: str = ""  # "placement" | "3-way merge"
    hunks: list[HunkOutcome] = field(default_factory=list)
    checks: dict | None = None
    audit: dict | None = None

    def verdict_counts(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for h in self.hunks:
            counts[h.verdict] = counts.get(h.verdict, 0) + 1
        return counts

    def to_json(self) -> dict:
        d = {
            "id": self.id,
            "title": self.title,
            "status": self.status,
            "reason": self.reason,
            "commit": self.commit,
            "method": self.method,
            "hunks": [h.to_json() for h in self.hunks],
        }
        if self.checks is not None:
            d["checks"] = self.checks
        if self.audit is not None:
            d["audit"] = self.audit
        return d


@dataclass
class ComposeResult:
    """The outcome of a compose run; `exit_code` follows the documented contract."""

    branch: str
    tag: str
    status: str  # composed | conflict | refused
    base: str | None = None
    head: str | None = None
    entries: list[EntryOutcome] = field(default_factory=list)
    message: str = ""
    worktree: str | None = None
    accepted_failures: list[str] = field(default_factory=list)
    #: the checks of the whole composed tree against the release (what decides a refusal)
    final_checks: dict | None = None

    @property
    def exit_code(self) -> ExitCode:
        return {"composed": ExitCode.OK, "conflict": ExitCode.CONFLICT, "refused": ExitCode.REFUSED}[self.status]

    def to_json(self) -> dict:
        return {
            "branch": self.branch,
            "tag": self.tag,
            "status": self.status,
            "message": self.message,
            "base": self.base,
            "head": self.head,
            "worktree": self.worktree,
            "accepted_failures": self.accepted_failures,
            "final_checks": self.final_checks,
            "entries": [e.to_json() for e in self.entries],
        }


@dataclass
class ComposeOptions:
    """Knobs of one run (the CLI fills them from its flags)."""

    offline: bool = False
    #: folder for the conflict worktree; default `<repo>/../vllm-compose-conflict-<tag>` is set by the CLI
    worktree: Path | None = None
    #: accept failing checks (recorded in the report) instead of refusing the branch
    accept_check_failures: bool = False
    #: go on although the repository has uncommitted changes
    allow_dirty: bool = False
    #: replace a branch whose tip is not a compose of this tool
    force: bool = False
    run_checks: bool = True
    run_audit: bool = True
    #: on a conflict, keep resumable state and write the worktree (off for survey runs such as the status table)
    keep_state: bool = True
    import_smoke: bool = True


@dataclass
class _Step:
    """One entry's content and placement on the current tree (internal)."""

    entry: Entry
    patch: Patch
    changes: dict[str, bytes | None]
    modes: dict[str, int]
    outcome: EntryOutcome
    #: (path, hunk index, evidence) of the hunks that conflicted and no later entry carries
    open_conflicts: list[tuple[str, int, str]]
    #: per file, what a person resolving the conflict starts from: what could be applied, and diff3 markers where
    #: it could not (filled only when the entry stopped on a conflict)
    worktree_files: dict[str, bytes] = field(default_factory=dict)


class Composer:
    """Composes one series onto one tag in one repository."""

    def __init__(
        self,
        series_dir: Path,
        repo_dir: Path,
        cache: Cache | None = None,
        options: ComposeOptions | None = None,
        progress: ProgressCallback | None = None,
    ) -> None:
        self.series_dir = Path(series_dir)
        self.repo_dir = Path(repo_dir)
        self.cache = cache or Cache()
        self.options = options or ComposeOptions()
        self.progress = progress

    # ------------------------------------------------------------------------------------------------ run
    def run(self, tag: str) -> ComposeResult:
        """Compose the series onto `tag`; see the module docstring for the steps."""
        series, repo = self._preflight(tag)
        self.repo = repo
        self._tag = tag
        base = ensure_release(repo, tag, self.cache, self.progress, offline=self.options.offline)
        patches = self._fetch_all(series, tag, repo)
        result = ComposeResult(branch=series.branch_name(tag), tag=tag, status="composed", base=str(base.id))
        when = base.committer.time

        head = base
        stop: _Step | None = None
        entries_for_tag = series.entries_for(tag)
        carried = _carried_hunks(entries_for_tag)
        audited: list[tuple[EntryOutcome, pygit2.Commit, pygit2.Commit, Patch]] = []
        for entry in series.entries:
            if not entry.applies_to(tag):
                result.entries.append(
                    EntryOutcome(entry.id, entry.title, "skipped", reason=f"tags {entry.tags!r} exclude {tag}")
                )
                continue
            if stop is not None:
                result.entries.append(EntryOutcome(entry.id, entry.title, "not-reached"))
                continue
            step = self._place_entry(repo, head, entry, patches[entry.id], carried)
            result.entries.append(step.outcome)
            if step.outcome.status in ("conflict", "partly-upstream"):
                stop = step
                continue
            if step.outcome.status == "dropped-upstream":
                continue
            commit = self._commit_entry(repo, head, step, when, tag)
            step.outcome.commit = str(commit.id)
            if self.options.run_checks:
                step.outcome.checks = self._checks(head, commit, step)
            audited.append((step.outcome, head, commit, _placed_only(step.patch, step.outcome)))
            head = commit

        result.head = str(head.id)
        if stop is not None:
            return self._stop_on_conflict(repo, series, tag, result, head, stop)

        refusals = []
        if self.options.run_audit:
            refusals += self._audit(audited)
        check_failures = []
        if self.options.run_checks and audited:
            # An entry may leave a name undefined that a later fix supplies (a hunk it carries): what must be clean
            # is the composed tree against the release. Each finding names the entry whose own check saw it first.
            result.final_checks = self._final_checks(base, head, result.entries)
            check_failures = [
                f"{f['file']}:{f['line']}: {f['message']} (entry {f.get('entry') or '?'})"
                for c in result.final_checks.get("checks", [])
                if c.get("status") == "fail"
                for f in c.get("findings", [])
                if f.get("severity") == "error"
            ]
        if not self.options.run_checks:  # recorded, so the report never reads as if the checks had passed
            result.final_checks = {
                "checks": [{"name": "checks", "status": "skipped", "reason": "--no-checks given", "findings": []}]
            }
        if check_failures:
            if self.options.accept_check_failures:
                result.accepted_failures = check_failures
            else:
                refusals.append("checks failed: " + "; ".join(check_failures))
        if refusals:
            result.status = "refused"
            result.message = " | ".join(refusals) + f" — branch {result.branch} was not written"
            return result

        self._publish(repo, result.branch, head)
        gitstore.delete_ref(repo, WIP_REF)  # a no-op when no earlier run stopped
        result.message = f"composed {sum(e.status == 'applied' for e in result.entries)} entries onto {tag}"
        return result

    # ------------------------------------------------------------------------------------------ preflight
    def _preflight(self, tag: str) -> tuple[Series, pygit2.Repository]:
        version_of_tag(tag)  # a misspelt tag is refused before any download, tag, branch or folder is made
        series = load_series(self.series_dir)
        prs = [e for e in series.entries if e.kind == "upstream-pr"]
        if prs and not any(e.applies_to(tag) for e in prs):
            ranges = ", ".join(f"{e.id} {e.tags or 'any'}" for e in prs)
            raise SeriesError(
                f"no upstream PR entry of the series applies to {tag} ({ranges}): a compose carrying none of them is "
                "not a compose",
                tag=tag,
                hint="choose a release the series covers (docs/status.md), or widen an entry's `tags`",
            )
        repo = gitstore.open_or_init_repo(self.repo_dir)
        state = gitstore.read_state_ref(repo)
        if state is not None:
            raise RepositoryError(
                f"a compose onto {state.get('tag')} stopped on a conflict in entry {state.get('entry')!r} "
                f"and is waiting for a resolution",
                tag=state.get("tag"),
                hint="resolve it and run with --continue, or drop it with --abort",
            )
        if not self.options.allow_dirty and not repo.is_bare and gitstore.is_dirty(repo):
            raise RepositoryError(
                f"the repository {self.repo_dir} has uncommitted changes",
                hint="commit or stash them first (the compose never touches the worktree, but a dirty tree "
                "usually means unfinished work); pass --allow-dirty to go on anyway",
            )
        return series, repo

    def _fetch_all(self, series: Series, tag: str, repo: pygit2.Repository) -> dict[str, Patch]:
        """Every applicable entry's content, parsed, before anything is written."""
        patches = {}
        for entry in series.entries_for(tag):
            if entry.patch is not None:
                patches[entry.id] = entry.patch
                continue
            data = fetch_entry_patch(entry, self.cache, offline=self.options.offline, progress=self.progress, repo=repo)
            strip = entry.source.strip if entry.source else 1
            try:
                patches[entry.id] = parse_patch(data, name=entry.id, strip=strip)
            except ComposeError as exc:
                exc.entry = entry.id
                raise
        return patches

    # --------------------------------------------------------------------------------------------- replay
    def _place_entry(
        self,
        repo: pygit2.Repository,
        head: pygit2.Commit,
        entry: Entry,
        patch: Patch,
        carried: dict[tuple[str, str, int], str],
    ) -> _Step:
        """Place every hunk of `entry` on `head`'s tree and classify the entry."""
        span = resolve_entry_commits(entry, repo) if entry.kind == "upstream-pr" else None
        if span is not None:
            return self._merge_entry(repo, head, entry, patch, span, carried)
        tree = GitTree(repo, head.tree)
        outcome = EntryOutcome(entry.id, entry.title, "applied", method="placement")
        changes: dict[str, bytes | None] = {}
        modes: dict[str, int] = {}
        open_conflicts: list[tuple[str, int, str]] = []
        file_placements: list[tuple[FilePatch, FilePlacement, str | None]] = []
        for fp in patch.files:
            source_path = fp.old_path or fp.new_path
            current = changes[source_path] if source_path in changes else tree.read(source_path)
            text = decode_text(current) if current is not None else None
            # Hunks a later fix carries are not applied here, whatever the engine would do with them: the series
            # says the fix holds their form for this release. They are still placed, for the report's evidence.
            carrier = {h.index: carried.get((entry.id, fp.path, h.index)) for h in fp.hunks}
            own = dataclasses.replace(fp, hunks=[h for h in fp.hunks if not carrier[h.index]])
            fpl = place_file(own, text, fp.path)
            file_placements.append((fp, fpl, text))
            by_index = {pl.hunk.index: pl for pl in fpl.placements}
            target_lines = split_lines(text)[0] if text is not None else []
            for h in fp.hunks:
                pl = by_index.get(h.index) or place_hunk(h, target_lines, fp.path)
                scope = pl.scope.describe() if pl.scope else None
                ho = HunkOutcome(
                    fp.path, h.index, str(pl.verdict), pl.landing_line, scope, pl.evidence, resolved_by=carrier[h.index]
                )
                if pl.verdict is Verdict.CONFLICT and not ho.resolved_by:
                    open_conflicts.append((fp.path, h.index, pl.evidence))
                outcome.hunks.append(ho)
            if not own.hunks and not (fp.is_new or fp.is_delete or fp.is_rename):
                continue
            if fpl.new_text is not None or fp.is_delete:
                new = encode_text(fpl.new_text) if fpl.new_text is not None else None
                if fp.is_rename and fp.old_path and fp.old_path != fp.new_path:
                    changes[fp.old_path] = None
                changes[fp.path] = new
                if fp.new_mode in ("100755", "100644"):
                    modes[fp.path] = int(fp.new_mode, 8)
        own_hunks = [h for h in outcome.hunks if not h.resolved_by]
        verdicts = [h.verdict for h in own_hunks]
        upstream = [h for h in own_hunks if h.verdict == str(Verdict.ALREADY_APPLIED)]
        shipped = self._shipped_upstream(entry)
        if shipped and upstream:
            # Upstream merged the PR, usually in an evolved form: the pinned diff no longer describes the release's
            # code, so re-applying its remaining hunks would duplicate or fight upstream's version.
            outcome.status = "dropped-upstream"
            outcome.reason = (
                f"merged upstream: the series says PR #{entry.pr} ships from {entry.upstream_release} "
                f"(upstream_release); evidence in {self._tag}: {len(upstream)} of {len(verdicts)} hunks are "
                f"present verbatim ({', '.join(f'{h.file.rsplit(chr(47), 1)[-1]}#{h.hunk}' for h in upstream[:6])}"
                f"{', ...' if len(upstream) > 6 else ''}); the others differ (upstream's evolved form)"
            )
            changes = {}
        elif shipped:
            outcome.status = "conflict"
            outcome.reason = (
                f"the series says PR #{entry.pr} ships from {entry.upstream_release}, but none of its "
                f"{len(verdicts)} hunks is present in {self._tag}: check upstream_release"
            )
        elif verdicts and len(upstream) == len(verdicts):
            outcome.status = "dropped-upstream"
            outcome.reason = (
                f"all {len(verdicts)} hunks are already in the release (post-images present, pre-images absent)"
            )
            changes = {}
        elif upstream:
            outcome.status = "partly-upstream"
            outcome.reason = (
                f"{len(upstream)} of {len(verdicts)} hunks are already in the release, the others are not: "
                "upstream probably merged an evolved form. Decide per hunk: narrow the entry (source.paths, "
                "tags) or add a skew fix that resolves the rest"
            )
        elif open_conflicts:
            outcome.status = "conflict"
            outcome.reason = f"{len(open_conflicts)} hunk(s) cannot be placed: " + "; ".join(
                f"{path} hunk {n}: {evidence.splitlines()[0] if evidence else 'conflict'}"
                for path, n, evidence in open_conflicts[:5]
            )
        else:
            carried_n = sum(1 for h in outcome.hunks if h.resolved_by)
            if carried_n:
                outcome.reason = f"{carried_n} hunk(s) carried by later skew fixes (see resolved_by)"
        step = _Step(entry, patch, changes, modes, outcome, open_conflicts)
        if outcome.status == "conflict":
            step.worktree_files = _placed_with_markers(file_placements)
        return step

    def _shipped_upstream(self, entry: Entry) -> bool:
        """Whether the series declares that this release already ships the entry's PR."""
        return bool(entry.upstream_release) and version_of_tag(self._tag) >= Version(entry.upstream_release)

    def _merge_entry(
        self,
        repo: pygit2.Repository,
        head: pygit2.Commit,
        entry: Entry,
        patch: Patch,
        span: tuple[pygit2.Oid, pygit2.Oid],
        carried: dict[tuple[str, str, int], str],
    ) -> _Step:
        """A real 3-way merge: the PR's base tree, ours = the compose so far, theirs = the PR head.

        A file some of whose hunks a later fix carries keeps our version here (the fix brings the whole file's
        change in its own form); git's merge decides the rest, file by file. Verdicts are per file: every hunk of a
        file gets the file's outcome.
        """
        base_id, pr_head = span
        outcome = EntryOutcome(entry.id, entry.title, "applied", method="3-way merge")
        index = repo.merge_trees(repo[base_id].peel(pygit2.Tree), head.tree, repo[pr_head].peel(pygit2.Tree))
        conflicted = {}
        for ancestor, ours, theirs in index.conflicts or []:
            conflicted[(ours or theirs or ancestor).path] = (ancestor, ours, theirs)
        before = GitTree(repo, head.tree)
        changes: dict[str, bytes | None] = {}
        open_conflicts: list[tuple[str, int, str]] = []
        worktree_files: dict[str, bytes] = {}
        for fp in patch.files:
            path = fp.path
            carrier = next(
                (carried[(entry.id, path, h.index)] for h in fp.hunks if (entry.id, path, h.index) in carried), None
            )
            old = before.read(path)
            if carrier:
                verdict, new = ("conflict" if path in conflicted else "merged"), old
            elif path in conflicted:
                verdict = "conflict"
                result = repo.merge_file_from_index(*conflicted[path])
                new = encode_text(result.contents)
                open_conflicts += [(path, h.index, "3-way merge conflict") for h in fp.hunks]
            else:
                entry_in_index = index[path] if path in index else None
                new = repo[entry_in_index.id].data if entry_in_index is not None else None
                verdict = "merged" if new != old else "already-applied"
            if not carrier and path not in conflicted and new != old:
                changes[path] = new
            if new is not None:
                worktree_files[path] = new
            evidence = "3-way merge conflict" if verdict == "conflict" else f"3-way merge: {verdict}"
            for h in fp.hunks:
                outcome.hunks.append(HunkOutcome(path, h.index, verdict, evidence=evidence, resolved_by=carrier))
        if open_conflicts:
            outcome.status = "conflict"
            outcome.reason = "3-way merge conflicts in " + ", ".join(sorted({p for p, _, _ in open_conflicts}))
            return _Step(entry, patch, changes, {}, outcome, open_conflicts, worktree_files)
        if not changes and not any(h.resolved_by for h in outcome.hunks):
            outcome.status = "dropped-upstream"
            outcome.reason = "the 3-way merge changes nothing: the PR's changes are already in the release"
        return _Step(entry, patch, changes, {}, outcome, [])

    def _commit_entry(
        self, repo: pygit2.Repository, parent: pygit2.Commit, step: _Step, when: int, tag: str
    ) -> pygit2.Commit:
        tree_id = gitstore.tree_with_changes(repo, parent.tree, step.changes, step.modes)
        entry = step.entry
        author = _entry_author(entry, when)
        committer = gitstore.signature("vllm-compose", "vllm-compose@invalid", when)
        message = _commit_message(entry, step.outcome, step.patch, tag)
        oid = gitstore.commit_tree(repo, tree_id, [parent.id], message, author, committer)
        return repo[oid]

    # ------------------------------------------------------------------------------------ checks / audit
    def _checks(self, parent: pygit2.Commit, commit: pygit2.Commit, step: _Step) -> dict | None:
        from . import checks

        changed = [p for p, data in step.changes.items() if data is not None]
        report = checks.run_checks(
            GitTree(self.repo, parent.tree),
            GitTree(self.repo, commit.tree),
            changed,
            entry_id=step.entry.id,
            import_smoke=self.options.import_smoke,
        )
        return report.to_json()

    def _final_checks(self, base: pygit2.Commit, head: pygit2.Commit, entries: list[EntryOutcome]) -> dict:
        from . import checks

        changed = gitstore.changed_paths(self.repo, base.tree, head.tree, deleted=False)
        report = checks.run_checks(
            GitTree(self.repo, base.tree),
            GitTree(self.repo, head.tree),
            changed,
            import_smoke=self.options.import_smoke,
        )
        data = report.to_json()
        first_seen: dict[tuple, str] = {}
        for e in entries:
            for c in (e.checks or {}).get("checks", []):
                for f in c.get("findings", []):
                    first_seen.setdefault((f.get("check"), f.get("file"), f.get("name"), f.get("message")), e.id)
        for c in data.get("checks", []):
            for f in c.get("findings", []):
                f["entry"] = first_seen.get((f.get("check"), f.get("file"), f.get("name"), f.get("message")))
        return data

    def _audit(self, audited) -> list[str]:
        from .audit import audit

        refusals = []
        for outcome, parent, commit, patch in audited:
            if not patch.files:
                continue
            report = audit(GitTree(self.repo, parent.tree), GitTree(self.repo, commit.tree), [patch])
            outcome.audit = report.to_json()
            if not report.ok:
                bad = [f"{h.file} hunk {h.hunk}: {h.verdict}" for h in report.bad_hunks]
                refusals.append(f"audit of entry {outcome.id!r} failed: " + "; ".join(bad))
        return refusals

    # -------------------------------------------------------------------------------------------- publish
    def _publish(self, repo: pygit2.Repository, branch: str, head: pygit2.Commit) -> None:
        ref = f"refs/heads/{branch}"
        old = gitstore.ref_target(repo, ref)
        if old == head.id:
            return
        if old is not None and not self.options.force:
            tip = repo[old]
            if COMPOSED_BY not in tip.message:
                raise RepositoryError(
                    f"branch {branch} exists and its tip {str(old)[:12]} was not written by vllm-compose",
                    hint=f"it may hold your own work: rename it (git branch -m {branch} my-work) or pass --force",
                )
        if not repo.head_is_unborn and not repo.head_is_detached and repo.head.name == ref:
            raise RepositoryError(
                f"branch {branch} is checked out in {self.repo_dir}; moving it would leave the worktree stale",
                hint=f"git -C {self.repo_dir} checkout --detach, then run again",
            )
        gitstore.update_ref_atomically(repo, ref, head.id, old, message=f"vllm-compose: compose {branch}")

    # ------------------------------------------------------------------------------------------- conflict
    def _stop_on_conflict(
        self,
        repo: pygit2.Repository,
        series: Series,
        tag: str,
        result: ComposeResult,
        head: pygit2.Commit,
        step: _Step,
    ) -> ComposeResult:
        result.status = "conflict"
        if not self.options.keep_state:
            result.message = f"stopped at entry {step.entry.id!r}: {step.outcome.reason}"
            return result
        # absolute: `--continue` may run from another directory
        asked = (self.options.worktree or self.repo_dir.parent / f"vllm-compose-conflict-{tag}").resolve()
        worktree = asked
        written = {}
        if step.outcome.status == "conflict" and step.worktree_files:
            worktree = _unused_folder(asked)  # a folder left by an earlier run may hold a person's edits
            written = _write_conflict_worktree(worktree, step)
            result.worktree = str(worktree)
        gitstore.update_ref_atomically(
            repo,
            WIP_REF,
            head.id,
            gitstore.ref_target(repo, WIP_REF),
            message="vllm-compose: keep commits of a stopped compose",
        )
        state = {
            "tag": tag,
            "branch": result.branch,
            "series": str(self.series_dir.resolve()),
            "entry": step.entry.id,
            "head": str(head.id),
            "worktree": str(worktree) if written else None,
            "written": written,
            "conflicts": [{"file": path, "hunk": n} for path, n, _ in step.open_conflicts],
        }
        gitstore.write_state_ref(repo, STATE_REF, state)
        result.message = f"stopped at entry {step.entry.id!r}: {step.outcome.reason}" + (
            f"\nthe entry's files are in {worktree} with conflict markers" if written else ""
        )
        if written and worktree != asked:
            result.message += f"\n{asked} was left as it is: it holds files of an earlier run"
        return result


# ---------------------------------------------------------------------------------------------------- resume
def resume(series_dir: Path, repo_dir: Path, composer: Composer, message: str | None = None) -> ComposeResult:
    """Record the person's resolution in the worktree as a new local skew-fix entry, then compose again."""
    repo = gitstore.open_or_init_repo(repo_dir)
    state = gitstore.read_state_ref(repo)
    if state is None:
        raise RepositoryError("no compose is waiting for a resolution", hint="run a compose first")
    tag, entry_id = state["tag"], state["entry"]
    worktree = Path(state["worktree"]) if state.get("worktree") else None
    if worktree is None or not worktree.is_dir():
        raise RepositoryError(
            f"the conflict of entry {entry_id!r} on {tag} has no worktree to read a resolution from",
            entry=entry_id,
            tag=tag,
            hint="edit the series by hand (narrow the entry or add a fix), then --abort and compose again",
        )
    series = load_series(series_dir)
    try:
        entry = series.entry(entry_id)
    except KeyError:
        raise SeriesError(
            f"the compose onto {tag} stopped at entry {entry_id!r}, which {series.file} no longer has",
            entry=entry_id,
            tag=tag,
            file=str(series.file),
            hint=f"give the entry its id {entry_id!r} back and --continue, or --abort and compose again",
        ) from None
    head = repo[pygit2.Oid(hex=state["head"])]
    composer.repo = repo
    composer._tag = tag
    patch = composer._fetch_all(series, tag, repo)[entry_id]
    carried = _carried_hunks(series.entries_for(tag))
    step = composer._place_entry(repo, head, entry, patch, carried)
    base_tree = GitTree(repo, head.tree)
    diffs = []
    for rel in sorted(state["written"]):
        edited = worktree / rel
        if not edited.is_file():
            raise RepositoryError(f"{edited} is missing", file=rel, hint="restore it, or --abort")
        data = edited.read_bytes()
        text = decode_text(data)
        if MARKER_RE.search(text):
            line = text[: MARKER_RE.search(text).start()].count("\n") + 1
            raise ConflictError(
                f"conflict markers remain at line {line}",
                file=rel,
                entry=entry_id,
                hint=f"edit {edited} until no <<<<<<< / ======= / >>>>>>> lines remain, then --continue",
            )
        placed = step.changes.get(rel, base_tree.read(rel))
        before = decode_text(placed) if placed is not None else None
        diffs.append(unified_diff(rel, before, text))
    diff = "".join(diffs)
    conflicts = [(c["file"], c["hunk"]) for c in state["conflicts"]]
    fix_id = _new_fix_id(series, entry_id, tag)
    number = _next_patch_number(series_dir)
    fname = f"{number:04d}-{fix_id}.patch"
    subject = message.splitlines()[0] if message else f"Resolve {entry_id} on {tag}: carry its conflicting hunks"
    body = (message.split("\n", 1)[1] if message and "\n" in message else "") or (
        f"Entry {entry_id} does not place cleanly on {tag}: "
        + ", ".join(f"{f} hunk {h}" for f, h in conflicts)
        + " conflicted. This fix was recorded from a person's resolution (vllm-compose --continue) and carries "
        "those hunks in the form that fits this release."
    )
    text = (
        format_patch(
            subject,
            body,
            "vllm-compose maintainers <maintainers@vllm-compose.invalid>",
            "Thu, 01 Jan 1970 00:00:00 +0000",
            diff,
        )
        if diff
        else None
    )
    resolves = [f"{entry_id}:{f}#{h}" for f, h in conflicts]
    _write_fix_entry(series_dir, entry_id, fix_id, fname, text, subject, tag, resolves)
    gitstore.delete_ref(repo, STATE_REF)
    result = composer.run(tag)
    if result.status == "composed" and worktree.is_dir():
        shutil.rmtree(worktree)
    return result


def abort(repo_dir: Path) -> str:
    """Drop the state of a stopped compose. A worktree the user edited is kept (and said so)."""
    repo = gitstore.open_or_init_repo(repo_dir)
    state = gitstore.read_state_ref(repo)
    if state is None:
        raise RepositoryError("no compose is in progress", hint="nothing to abort")
    note = ""
    worktree = Path(state["worktree"]) if state.get("worktree") else None
    if worktree and worktree.is_dir():
        edited = [
            rel
            for rel, digest in state.get("written", {}).items()
            if not (worktree / rel).is_file() or _sha((worktree / rel).read_bytes()) != digest
        ]
        if edited:
            note = f"kept {worktree}: you edited {', '.join(edited)}"
        else:
            shutil.rmtree(worktree)
            note = f"removed {worktree}"
    gitstore.delete_ref(repo, STATE_REF)
    if gitstore.ref_target(repo, WIP_REF):
        gitstore.delete_ref(repo, WIP_REF)
    return f"aborted the compose onto {state['tag']}" + (f"; {note}" if note else "")


# --------------------------------------------------------------------------------------------------- helpers
def _carried_hunks(entries: list[Entry]) -> dict[tuple[str, str, int], str]:
    """(entry, path, hunk) -> id of the later fix that carries it, from the `resolves` of the entries."""
    return {(r.entry, r.path, r.hunk): e.id for e in entries for r in e.resolves}


def _placed_only(patch: Patch, outcome: EntryOutcome) -> Patch:
    """The entry's patch without the hunks that did not go in (carried by fixes, or already upstream): the audit
    checks what this commit claims to contain."""
    skip = {(h.file, h.hunk) for h in outcome.hunks if h.resolved_by or h.verdict in ("conflict", "already-applied")}
    files = []
    for fp in patch.files:
        kept = [h for h in fp.hunks if (fp.path, h.index) not in skip]
        if kept:
            files.append(dataclasses.replace(fp, hunks=kept))
    return Patch(patch.name, patch.header, files)


def _entry_author(entry: Entry, when: int) -> pygit2.Signature:
    m = re.match(r"^\s*(.*?)\s*<([^>]*)>\s*$", entry.author or "")
    if m:
        return gitstore.signature(m.group(1) or m.group(2), m.group(2), when)
    if entry.author:
        return gitstore.signature(entry.author, "unknown@invalid", when)
    return gitstore.signature("vllm-compose", "vllm-compose@invalid", when)


def _commit_message(entry: Entry, outcome: EntryOutcome, patch: Patch, tag: str) -> str:
    title = entry.title or (patch.header.subject if patch.header else "") or entry.id
    lines = [title, ""]
    if entry.why:
        lines += [entry.why.strip(), ""]
    elif patch.header and patch.header.body:
        lines += [patch.header.body.strip(), ""]
    if outcome.reason:
        lines += [outcome.reason, ""]
    lines.append(f"Series-Entry: {entry.id}")
    if entry.pr:
        lines.append(f"Upstream-PR: {entry.pr_url or entry.pr}")
    lines.append(
        f"Upstream-Status: {entry.upstream_status}"
        + (f" ({entry.upstream_status_detail})" if entry.upstream_status_detail else "")
    )
    if entry.source and entry.source.sha256:
        lines.append(f"Source-Sha256: {entry.source.sha256}")
    if entry.source and entry.source.commits:
        lines.append("Source-Commits: " + " ".join(entry.source.commits))
    lines.append(f"Onto: {tag}")
    lines.append(COMPOSED_BY)
    return "\n".join(lines) + "\n"


def _placed_with_markers(file_placements: list[tuple[FilePatch, FilePlacement, str | None]]) -> dict[str, bytes]:
    """Each file of a stopped entry as a person resolving it starts from: placed hunks applied, conflicting ones as
    diff3 markers at their best candidate site."""
    from .apply import _with_markers

    files: dict[str, bytes] = {}
    for fp, fpl, text in file_placements:
        if fpl.conflicts:
            files[fp.path] = encode_text("\n".join(_with_markers((text or "").split("\n"), fpl.placements)))
        elif fpl.new_text is not None:
            files[fp.path] = encode_text(fpl.new_text)
    return files


def _unused_folder(folder: Path) -> Path:
    """`folder` when it does not exist or is empty, else the first `folder.N` (N = 2, 3, ...) that is: a conflict
    worktree is never written over one that may hold a person's edits."""
    candidate, n = folder, 1
    while candidate.exists() and (not candidate.is_dir() or any(candidate.iterdir())):
        n += 1
        candidate = folder.with_name(f"{folder.name}.{n}")
    return candidate


def _write_conflict_worktree(worktree: Path, step: _Step) -> dict[str, str]:
    """Write the stopped entry's files into `worktree`; returns path -> sha256 of what was written."""
    written: dict[str, str] = {}
    worktree.mkdir(parents=True, exist_ok=True)
    for path, data in sorted(step.worktree_files.items()):
        dest = worktree / path
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_bytes(data)
        written[path] = _sha(data)
    (worktree / "CONFLICT.txt").write_text(
        f"vllm-compose stopped at entry {step.entry.id!r}.\n{step.outcome.reason}\n\n"
        "Edit the files below this folder until no conflict markers remain, then run the compose again with "
        "--continue: the difference between what could be applied and your files becomes a new local skew-fix "
        "patch in the series. --abort drops the run (files you edited here are kept).\n"
    )
    return written


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


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
    patch_text: str | None,
    title: str,
    tag: str,
    resolves: list[str],
) -> None:
    """Add the patch file and an `[[entry]]` right after `after_entry`'s block in series.toml (atomically)."""
    if patch_text is None:
        raise ConflictError(
            "the worktree holds exactly what the engine placed: no resolution to record",
            entry=after_entry,
            tag=tag,
            hint="edit the files to carry the conflicting hunks, or --abort",
        )
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


def compose(series_dir: Path, repo_dir: Path, tag: str, **kw) -> ComposeResult:
    """Convenience wrapper: `Composer(series_dir, repo_dir, **kw).run(tag)`."""
    return Composer(series_dir, repo_dir, **kw).run(tag)


__all__ = [
    "Composer",
    "ComposeOptions",
    "ComposeResult",
    "EntryOutcome",
    "HunkOutcome",
    "abort",
    "compose",
    "resume",
]
