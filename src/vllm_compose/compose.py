"""compose(series, tag) -> ComposeResult: the one place where the stages of a compose run, in order.

`Composer.run` reads like this list:
1. preflight  — validate the tag and the series, open the repository, refuse a dirty repository or a compose in
                progress. Nothing is written before this passed.
2. release    — the release commit: git tag, remote, or PyPI sdist imported as the tag (`releases`).
3. contents   — every applicable entry's content, fetched and parsed (`sources`).
4. replay     — for each entry that applies to the tag, in series order: place its hunks on the current tree
                and write its commit object, no ref yet (`replay`); run the checks on it (`checks`). An entry that
                cannot be placed stops the run here (`conflict`).
5. audit      — re-derive, from each entry commit and its parent, where every hunk landed, and compare with where
                the engine says it belongs (`audit`).
6. checks     — the composed tree against the release: what must be clean is the whole, not each step.
6b. review    — the relocated and merged landings against the approvals in `series/reviews.toml` (`review`):
                unreviewed ones are reported; those of a fix outside its `written_for` refuse the branch.
7. build setup — the branch's last commit, not an entry: `pip install -e` builds over the release's precompiled
                stock wheel (`precompiled`).
8. publish    — only when every entry composed and the audit and checks are clean: move the branch ref with a
                compare-and-swap. A failed or interrupted run leaves no half-written branch.

A conflict stops the run at that entry: the state (`results.RunState`, versioned JSON under `refs/vllm-compose/state`)
and the commits made so far (`refs/vllm-compose/wip`) are kept, and the entry's files are written to a worktree folder
for a person to resolve: diff3 markers where a conflicting hunk's site was found, reject files for the hunks the
engine took no site for (`conflict`). `resume()` turns that resolution into a new local skew-fix entry of the
series and composes again; `abort()` drops the state (keeping a worktree the user edited).

`artifacts.image` composes onto an installed vLLM through this same `Composer`.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

import pygit2

from . import checks, conflict, gitstore
from .audit import audit
from .cache import Cache
from .composed_branch import compose_label
from .errors import RefusedError, RepositoryError, SeriesError
from .patchfile import Patch
from .precompiled import build_commit
from .progress import ProgressCallback
from .releases import ensure_release
from .replay import EntryReplay, carried_hunks, commit_entry, placed_only, replay_entry
from .results import (
    STOPPING,
    CheckStatus,
    ComposeResult,
    ComposeStatus,
    EntryOutcome,
    EntryStatus,
    RunState,
    Severity,
)
from .review import Approval, Landing, Review, fill_audit, fill_reading, load_approvals, require_reviewed, review_of
from .series import Series, check_resolves, load_series, version_of_tag
from .sources import entry_patch
from .trailers import COMPOSED_BY
from .trees import GitTree

#: keeps the commits of an interrupted compose reachable while a conflict waits for a person
WIP_REF = "refs/vllm-compose/wip"
STATE_REF = gitstore.STATE_REF


@dataclass
class ComposeOptions:
    """Knobs of one run (the CLI fills them from its flags)."""

    offline: bool = False
    #: folder for the conflict worktree; default `<repo>/../vllm-compose-conflict-<tag>`
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
    #: create the repository folder when it does not exist (`--init`); an empty folder is initialized anyway
    init: bool = False
    #: end the branch with the commit that makes `pip install -e` take the precompiled stock wheel
    build_setup: bool = True
    #: write the branch ref (off for `vllm-compose review`, which reads a compose without publishing it)
    publish: bool = True
    #: a survey (benchmarks/release_arrival.py): an entry that would stop the run is committed with the hunks that
    #: could be placed and the run goes on, so every hunk of the series gets a verdict; the run then ends as a
    #: conflict and writes no ref
    go_past_stops: bool = False
    #: write the branch although a fix outside its `written_for` landed unreviewed (recorded in the report and as
    #: a `Review-Override:` trailer of the fix's commit)
    allow_unreviewed: bool = False


@dataclass
class _Committed:
    """An entry commit of this run, with what the audit compares: its parent and the hunks it claims to hold."""

    outcome: EntryOutcome
    parent: pygit2.Commit
    commit: pygit2.Commit
    #: the entry's patch without the hunks that did not go in (carried by fixes, already upstream)
    patch: Patch


class Composer:
    """Composes one series onto one tag in one repository; `run` may be called again (`resume` does)."""

    def __init__(
        self,
        series_dir: Path,
        repo_dir: Path,
        cache: Cache | None = None,
        options: ComposeOptions | None = None,
        progress: ProgressCallback | None = None,
    ) -> None:
        # -- configuration: fixed for the composer's life
        self.series_dir = Path(series_dir)
        self.repo_dir = Path(repo_dir)
        self.cache = cache or Cache()
        self.options = options or ComposeOptions()
        self.progress = progress
        # -- run state: reset by `_start`, then filled by the stages of `run` in order
        #: the release tag being composed onto
        self.tag: str = ""
        #: the series as preflight loaded it
        self.series: Series | None = None
        #: the approved landings of `series/reviews.toml`, as preflight loaded them
        self.approvals: list[Approval] = []
        #: the vLLM repository the compose writes objects and refs into
        self.repo: pygit2.Repository | None = None
        #: the release commit (the first entry's parent)
        self.base: pygit2.Commit | None = None
        #: entry id -> parsed content of every entry that applies to the tag
        self.patches: dict[str, Patch] = {}
        #: (entry, path, hunk) -> id of the later fix that carries that hunk (the entries' `resolves`)
        self.carried: dict[tuple[str, str, int], str] = {}
        #: the tip of the entry commits written so far (the release commit before the first)
        self.head: pygit2.Commit | None = None
        #: each entry commit of this run, for the audit
        self.committed: list[_Committed] = []
        #: the entry that stopped the run (conflict, partly upstream); None while the run goes on
        self.stopped: EntryReplay | None = None
        #: with `go_past_stops`: the entries that would have stopped the run
        self.passed: list[EntryReplay] = []
        #: what the run reports; built by `_start`, completed by every stage
        self.result: ComposeResult | None = None

    # -------------------------------------------------------------------------------------------------- run
    def run(self, tag: str) -> ComposeResult:
        """Compose the series onto `tag`; see the module docstring for the stages."""
        self._start(tag)
        self._preflight()
        self._obtain_release()
        self._fetch_contents()
        self._replay_entries()
        if self.stopped is not None:
            return self._stop_for_a_person()
        refusals = self._audit_entries()
        refusals += self._check_composed_tree()
        refusals += self._review_landings()
        if self.passed:
            return self._surveyed(refusals)
        if refusals:
            return self._refuse(refusals)
        if not self.options.publish:
            return self._composed()
        self._build_setup()
        self._publish()
        return self._composed()

    # ------------------------------------------------------------------------------------------- the stages
    def _start(self, tag: str) -> None:
        """Forget any earlier run of this composer."""
        self.tag = tag
        self.series = self.repo = self.base = self.head = self.stopped = self.result = None
        self.patches, self.carried, self.committed, self.approvals, self.passed = {}, {}, [], [], []

    def _preflight(self) -> None:
        """Refuse a misspelt tag, a bad series, a release no PR entry applies to, a compose in progress and a dirty
        repository — before any download, tag, branch or folder is made."""
        tag = self.tag
        version_of_tag(tag)
        series = self.series = load_series(self.series_dir)
        self.approvals = load_approvals(self.series_dir)
        prs = [e for e in series.entries if e.kind == "upstream-pr"]
        if prs and not any(e.applies_to(tag) for e in prs):
            ranges = ", ".join(f"{e.id} {e.tags or 'any'}" for e in prs)
            raise SeriesError(
                f"no upstream PR entry of the series applies to {tag} ({ranges}): a compose carrying none of them is "
                "not a compose",
                tag=tag,
                hint="choose a release the series covers (docs/status.md), or widen an entry's `tags`",
            )
        repo = self.repo = gitstore.open_or_init_repo(self.repo_dir, create=self.options.init)
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
                hint="commit or stash them first: a dirty tree usually means unfinished work, and after writing its "
                "branch the compose checks it out, which it does only in a clean worktree; --allow-dirty composes "
                "anyway and leaves the worktree and its changes as they are (the branch is not checked out)",
            )
        self.result = ComposeResult(branch=series.branch_name(tag), tag=tag, status=ComposeStatus.COMPOSED)

    def _obtain_release(self) -> None:
        self.base = self.head = ensure_release(
            self.repo, self.tag, self.cache, self.progress, offline=self.options.offline
        )
        self.result.base = str(self.base.id)

    def _fetch_contents(self) -> None:
        """Every applicable entry's content, parsed, before anything is written."""
        entries = self.series.entries_for(self.tag)
        self.patches = {e.id: self._entry_patch(e) for e in entries}
        # now that the PR entries' content is known: a fix must carry hunks that exist
        check_resolves(entries, self.patches, self.series.file)
        self.carried = carried_hunks(entries)

    def _entry_patch(self, entry) -> Patch:
        return entry_patch(entry, self.cache, offline=self.options.offline, progress=self.progress, repo=self.repo)

    def _replay_entries(self) -> None:
        """One commit per entry on the one before, its checks after it; an entry that stops the run stops it."""
        when = self.base.committer.time
        for entry in self.series.entries:
            if not entry.applies_to(self.tag):
                reason = f"tags {entry.tags!r} exclude {self.tag}"
                self.result.entries.append(EntryOutcome(entry.id, entry.title, EntryStatus.SKIPPED, reason=reason))
                continue
            if self.stopped is not None:
                self.result.entries.append(EntryOutcome(entry.id, entry.title, EntryStatus.NOT_REACHED))
                continue
            without = self._dropped_with(entry)
            if without is not None:
                self.result.entries.append(EntryOutcome(entry.id, entry.title, EntryStatus.SKIPPED, reason=without))
                continue
            step = replay_entry(self.repo, self.head, entry, self.patches[entry.id], self.carried, self.tag)
            self.result.entries.append(step.outcome)
            if step.outcome.status in STOPPING:
                if not self.options.go_past_stops:
                    self.stopped = step
                    continue
                self.passed.append(step)  # a survey: commit what could be placed and go on
            if step.outcome.status is EntryStatus.DROPPED_UPSTREAM:
                continue
            step.outcome.review_override = self._override_of(step)
            commit = commit_entry(self.repo, self.head, step, when, self.tag)
            step.outcome.commit = str(commit.id)
            if self.options.run_checks:
                step.outcome.checks = self._entry_checks(self.head, commit, step)
            self.committed.append(_Committed(step.outcome, self.head, commit, placed_only(step.patch, step.outcome)))
            self.head = commit
        self.result.head = str(self.head.id)

    def _not_applied(self) -> dict[str, str]:
        """Entry id -> why this compose did not apply it (tags, upstream, dropped with another), so far."""
        return {
            o.id: (o.reason or o.status.value)
            for o in self.result.entries
            if o.status in (EntryStatus.SKIPPED, EntryStatus.DROPPED_UPSTREAM)
        }

    def _dropped_with(self, entry) -> str | None:
        """Why `entry` goes out with an entry this compose does not apply, or None. A fix whose `resolves` name only
        hunks of entries that are not applied (upstream, or outside their tags) re-targets content that is not there:
        applied anyway it would land somewhere else (a fix written for a PR's hunks, on the release that ships the
        PR). An entry whose `requires` names an
        entry that is not applied goes too. Raises `SeriesError` where dropping would lose hunks a fix carries for an
        entry that is applied."""
        gone = self._not_applied()
        targets = {r.entry for r in entry.resolves}
        if targets and targets <= set(gone):
            why = "; ".join(f"{t}: {gone[t]}" for t in sorted(targets))
            return f"dropped with {', '.join(sorted(targets))}, whose hunks its resolves name ({why})"
        missing = [r for r in entry.requires if r in gone]
        if not missing:
            return None
        carried = sorted(targets - set(gone))
        if carried:
            raise SeriesError(
                f"entry {entry.id!r} requires {', '.join(missing)}, which this compose does not apply "
                f"({'; '.join(gone[m] for m in missing)}), but it carries hunks of {', '.join(carried)}, which it "
                "does apply: dropping it would lose them",
                entry=entry.id,
                tag=self.tag,
                hint="split the fix, or narrow its tags to the releases where both apply",
            )
        return (
            f"requires {', '.join(missing)}, which this compose does not apply ({'; '.join(gone[m] for m in missing)})"
        )

    def _entry_checks(self, parent: pygit2.Commit, commit: pygit2.Commit, step: EntryReplay) -> checks.CheckReport:
        changed = [p for p, data in step.changes.items() if data is not None]
        return checks.run_checks(
            GitTree(self.repo, parent.tree),
            GitTree(self.repo, commit.tree),
            changed,
            entry_id=step.entry.id,
            import_smoke=self.options.import_smoke,
            release=str(version_of_tag(self.tag)),
        )

    def _audit_entries(self) -> list[str]:
        """Audit each entry commit against its parent; returns a refusal per entry whose audit is not clean."""
        refusals: list[str] = []
        if not self.options.run_audit:
            return refusals
        for c in self.committed:
            if not c.patch.files:
                continue
            report = audit(GitTree(self.repo, c.parent.tree), GitTree(self.repo, c.commit.tree), [c.patch])
            c.outcome.audit = report
            if not report.ok:
                bad = [f"{h.file} hunk {h.hunk}: {h.verdict}" for h in report.bad_hunks]
                refusals.append(f"audit of entry {c.outcome.id!r} failed: " + "; ".join(bad))
        return refusals

    def _check_composed_tree(self) -> list[str]:
        """The checks of the composed tree against the release; returns the refusal when they fail (none when the
        failures are accepted: they are recorded in the result then).

        An entry may leave a name undefined that a later fix supplies (a hunk it carries): what must be clean is the
        composed tree against the release. Each finding names the entry whose own check saw it first.
        """
        result = self.result
        if not self.options.run_checks:  # recorded, so the report never reads as if the checks had passed
            skipped = checks.CheckResult("checks", CheckStatus.SKIPPED, reason="--no-checks given")
            result.final_checks = checks.CheckReport(None, [skipped])
            return []
        if not self.committed:
            return []
        changed = gitstore.changed_paths(self.repo, self.base.tree, self.head.tree, deleted=False)
        report = checks.run_checks(
            GitTree(self.repo, self.base.tree),
            GitTree(self.repo, self.head.tree),
            changed,
            import_smoke=self.options.import_smoke,
            release=str(version_of_tag(self.tag)),
        )
        first_seen: dict[tuple, str] = {}
        for e in result.entries:
            for f in e.checks.findings if e.checks else []:
                first_seen.setdefault((f.check, f.file, f.name, f.message), e.id)
        for f in report.findings:
            f.entry = first_seen.get((f.check, f.file, f.name, f.message))
        result.final_checks = report
        failures = [
            f"{f.file}:{f.line}: {f.message} (entry {f.entry or '?'})"
            for c in report.results
            if c.status is CheckStatus.FAIL
            for f in c.findings
            if f.severity == Severity.ERROR
        ]
        if not failures:
            return []
        if self.options.accept_check_failures:
            result.accepted_failures = failures
            return []
        return ["checks failed: " + "; ".join(failures)]

    def landings(self) -> list[Landing]:
        """The relocated and merged landings of the entry commits written so far, in series order."""
        return [x for c in self.committed for x in c.outcome.landings]

    def _override_of(self, step: EntryReplay) -> str | None:
        """What `--allow-unreviewed` lets through in this entry (its commit records it), or None."""
        review = review_of(self.tag, step.outcome.landings, self.approvals, [step.entry])
        if not self.options.allow_unreviewed or not review.stops:
            return None
        return "allowed unreviewed on " + ", ".join(f"{x.landing.file}#{x.landing.hunk}" for x in review.stops)

    def _review_landings(self) -> list[str]:
        """Match the entries' relocated and merged landings with the series' approvals, with the audit's word on
        each; returns the refusal when a fix applied outside its `written_for` landed unreviewed."""
        review = self.result.review = review_of(self.tag, self.landings(), self.approvals, self.series.entries)
        fill_audit(
            review,
            {
                (c.outcome.id, h.file, h.hunk): h
                for c in self.committed
                if c.outcome.audit
                for h in c.outcome.audit.hunks
            },
        )
        try:
            require_reviewed(review, "rebase", self.options.allow_unreviewed, only_stops=True)
        except RefusedError as exc:
            return [f"{exc.message} (read them with `vllm-compose review --onto {self.tag}`)"]
        return []

    def _surveyed(self, refusals: list[str]) -> ComposeResult:
        """A survey went past entries that would have stopped the run: report them; no ref is written."""
        result = self.result
        result.status = ComposeStatus.CONFLICT
        stops = "; ".join(f"{s.entry.id}: {s.outcome.reason}" for s in self.passed)
        result.message = f"went past {len(self.passed)} stops ({stops})" + "".join(f" | {r}" for r in refusals)
        return result

    def _refuse(self, refusals: list[str]) -> ComposeResult:
        result = self.result
        result.status = ComposeStatus.REFUSED
        result.message = " | ".join(refusals) + f" — branch {result.branch} was not written"
        return result

    def _build_setup(self) -> None:
        """End the branch with the commit that makes `pip install -e` build over the release's precompiled stock
        wheel (`precompiled`): after the audited and checked entries, and not one of them."""
        if not self.options.build_setup:
            return
        label = compose_label(self.repo, self.base, self.head, self.result.branch, self.tag)
        setup = build_commit(self.repo, self.series_dir, self.head, self.tag, label, self.base.committer.time)
        self.result.build_setup = setup
        if setup.commit is not None:
            self.head = self.repo[pygit2.Oid(hex=setup.commit)]
            self.result.head = setup.commit

    def _publish(self) -> None:
        """Move the branch to the last entry commit, by compare-and-swap; refuse to replace someone's own work."""
        repo, branch, head = self.repo, self.result.branch, self.head
        ref = f"refs/heads/{branch}"
        old = gitstore.ref_target(repo, ref)
        if old != head.id:
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
        gitstore.delete_ref(repo, WIP_REF)  # a no-op when no earlier run stopped

    def _composed(self) -> ComposeResult:
        result = self.result
        applied = sum(e.status is EntryStatus.APPLIED for e in result.entries)
        result.message = f"composed {applied} entries onto {self.tag}"
        # a branch of this release under another PR set (the series named its PRs otherwise then, e.g. before a PR
        # shipped in the release) is not updated: say so, so nobody builds it by habit
        suffix = f"-{self.tag}"
        result.other_branches = sorted(
            name
            for name in self.repo.branches.local
            if name.startswith("compose-") and name.endswith(suffix) and name != result.branch
        )
        return result

    def _stop_for_a_person(self) -> ComposeResult:
        """Keep what a person needs to go on: the wip ref, the run state, and the conflict worktree."""
        result, step, tag = self.result, self.stopped, self.tag
        result.status = ComposeStatus.CONFLICT
        if not self.options.keep_state:
            result.message = f"stopped at entry {step.entry.id!r}: {step.outcome.reason}"
            return result
        # absolute: `--continue` may run from another directory
        asked = (self.options.worktree or self.repo_dir.parent / f"vllm-compose-conflict-{tag}").resolve()
        worktree = asked
        written: dict[str, str] = {}
        folder = step.folder
        if step.outcome.status is EntryStatus.CONFLICT and (folder.files or folder.rejects):
            worktree = conflict.unused_folder(asked)  # a folder left by an earlier run may hold a person's edits
            written = conflict.write_worktree(worktree, folder, step.entry.id, step.outcome.reason)
            result.worktree = str(worktree)
            result.rejects = sorted(folder.rejects)
        repo = self.repo
        gitstore.update_ref_atomically(
            repo,
            WIP_REF,
            self.head.id,
            gitstore.ref_target(repo, WIP_REF),
            message="vllm-compose: keep commits of a stopped compose",
        )
        state = RunState(
            tag=tag,
            branch=result.branch,
            series=str(self.series_dir.resolve()),
            entry=step.entry.id,
            head=str(self.head.id),
            worktree=str(worktree) if written else None,
            written=written,
            conflicts=[(path, n) for path, n, _ in step.open_conflicts],
        )
        gitstore.write_state_ref(repo, STATE_REF, state.to_json())
        result.message = f"stopped at entry {step.entry.id!r}: {step.outcome.reason}" + (
            f"\n{folder.summary(worktree)}" if result.worktree else ""
        )
        if result.worktree and worktree != asked:
            result.message += f"\n{asked} was left as it is: it holds files of an earlier run"
        return result


# ---------------------------------------------------------------------------------------------------- resume
def review(
    series_dir: Path,
    repo_dir: Path,
    tag: str,
    cache: Cache | None = None,
    options: ComposeOptions | None = None,
    progress: ProgressCallback | None = None,
) -> Review:
    """Compose the series onto `tag` without publishing (`options.publish` off) and return its review, each item
    with the hunk and the lines around its landing in the entry commit (`vllm-compose review`). The entry commits
    are written as objects, no ref moves; a compose the review stage would refuse is reviewed all the same."""
    options = options or ComposeOptions(keep_state=False, run_checks=False, publish=False, allow_unreviewed=True)
    composer = Composer(series_dir, repo_dir, cache, options, progress)
    result = composer.run(tag)
    found = result.review
    if found is None:  # the compose stopped before its review stage (a conflict): the entries before the stop
        found = review_of(tag, composer.landings(), composer.approvals, composer.series.entries)
        found.stopped = result.message
    trees = {c.outcome.id: GitTree(composer.repo, c.commit.tree) for c in composer.committed}
    fill_reading(found, trees, composer.patches)
    return found


def resume(series_dir: Path, repo_dir: Path, composer: Composer, message: str | None = None) -> ComposeResult:
    """Record the person's resolution in the worktree as a new local skew-fix entry, then compose again."""
    repo = gitstore.open_or_init_repo(repo_dir, create=False)
    doc = gitstore.read_state_ref(repo)
    if doc is None:
        raise RepositoryError("no compose is waiting for a resolution", hint="run a compose first")
    state = RunState.from_json(doc)
    tag, entry_id = state.tag, state.entry
    worktree = Path(state.worktree) if state.worktree else None
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
    head = repo[pygit2.Oid(hex=state.head)]
    options = composer.options
    patch = entry_patch(entry, composer.cache, offline=options.offline, progress=composer.progress, repo=repo)
    step = replay_entry(repo, head, entry, patch, carried_hunks(series.entries_for(tag)), tag)
    conflict.record_resolution(Path(series_dir), series, state, step.changes, GitTree(repo, head.tree), message)
    gitstore.delete_ref(repo, STATE_REF)
    result = composer.run(tag)
    if result.status is ComposeStatus.COMPOSED and worktree.is_dir():
        shutil.rmtree(worktree)
    return result


def abort(repo_dir: Path) -> str:
    """Drop the state of a stopped compose. A worktree the user edited is kept (and said so)."""
    repo = gitstore.open_or_init_repo(repo_dir, create=False)
    doc = gitstore.read_state_ref(repo)
    if doc is None:
        raise RepositoryError("no compose is in progress", hint="nothing to abort")
    state = RunState.from_json(doc)
    note = ""
    worktree = Path(state.worktree) if state.worktree else None
    if worktree and worktree.is_dir():
        edited = conflict.edited_files(worktree, state.written)
        if edited:
            note = f"kept {worktree}: you edited {', '.join(edited)}"
        else:
            shutil.rmtree(worktree)
            note = f"removed {worktree}"
    gitstore.delete_ref(repo, STATE_REF)
    if gitstore.ref_target(repo, WIP_REF):
        gitstore.delete_ref(repo, WIP_REF)
    return f"aborted the compose onto {state.tag}" + (f"; {note}" if note else "")


def compose(series_dir: Path, repo_dir: Path, tag: str, **kw) -> ComposeResult:
    """Convenience wrapper: `Composer(series_dir, repo_dir, **kw).run(tag)`."""
    return Composer(series_dir, repo_dir, **kw).run(tag)


__all__ = ["Composer", "ComposeOptions", "ComposeResult", "abort", "compose", "resume"]
