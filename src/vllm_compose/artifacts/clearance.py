"""The clearance every artifact of a compose passes before it is built: review, checks, Ampere gate, each recorded.

`wheel`, `editable` and `image-overlay` build from a compose branch (`composed_branch`). Before any of them writes
a file, the branch is cleared in three steps, in this order, each recorded on the `Clearance`:

1. review      — every relocated or merged landing approved for the release (`review.require_reviewed`); with
                 `--allow-unreviewed` the build goes on and the override is recorded on the review.
2. checks      — the checks of the composed tree against the release (compile, new undefined names, import smoke
                 where the runtime is importable), re-run rather than trusted: the compose writes the branch only
                 when its audit and checks are clean, but a branch is a ref anyone can move. They are cheap (seconds)
                 and depend only on the two trees; the audit needs every entry's patch and is the compose's job, so a
                 branch that `open_branch` accepts (only compose commits) stands for a clean audit.
3. Ampere gate — the DSA-path Triton kernels, as the release launches them on an sm_80/86 GPU, compile for both
                 (`ampere.gate`); `--no-ampere-gate` skips it, recorded.

A failed step raises `RefusedError` (exit 2) and nothing is built. The image takes its review from the compose it
has just run (`ComposeResult.review`), and runs its checks on the installed files after writing them (its own
verification restores the stock files on a failure), so it calls the steps one by one; the wheel and the editable
install call `steps` (or `clear`) on the branch.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from ..ampere.gate import AmpereGateReport, require_gate
from ..checks import CheckReport, failure_hint, run_checks
from ..composed_branch import ComposedBranch
from ..errors import RefusedError
from ..results import Severity
from ..review import Review, landings_of_commit, load_approvals, require_reviewed, review_of
from ..series import load_series
from ..trees import FileTree, export_tree

#: what the report and the JSON say when the Ampere gate was not run
AMPERE_GATE_SKIPPED = "--no-ampere-gate"


@dataclass
class Clearance:
    """The three steps of one artifact's clearance: what the command asked for, then what each step recorded."""

    #: the command being cleared (`wheel`, `editable`, `image-overlay`): named in a review refusal and override
    action: str
    #: build although landings are unreviewed (recorded on the review as its override)
    allow_unreviewed: bool = False
    #: run the import smoke among the checks (`--no-import-smoke` turns it off, recorded in the check report)
    import_smoke: bool = True
    #: run the Ampere gate (`--no-ampere-gate` turns it off, recorded as `ampere_gate_skipped`)
    run_ampere_gate: bool = True
    #: step 1: the review the artifact was cleared with (its override set when `allow_unreviewed` was used)
    review: Review | None = None
    #: step 2: the check report (warnings and a skipped import smoke do not refuse; the report shows them)
    checks: CheckReport | None = None
    #: step 3: the Ampere gate's passing report; None when it was skipped, refused or not reached
    ampere_gate: AmpereGateReport | None = None
    #: why the gate did not run (`--no-ampere-gate`)
    ampere_gate_skipped: str | None = None
    #: what failed when the gate refused the artifact
    ampere_gate_error: str | None = None

    def steps(self, branch: ComposedBranch, series_dir: Path) -> Iterator[str]:
        """Clear `branch` step by step, yielding each step's name once its result is recorded (a command can show
        the checks before the slower gate runs); raises `RefusedError` at the first step that refuses."""
        self.require_review(branch_review(branch, series_dir))
        yield "review"
        self.require_checks(branch)
        yield "checks"
        self.require_ampere_gate(branch)
        yield "ampere gate"

    def clear(self, branch: ComposedBranch, series_dir: Path) -> Clearance:
        """All of `steps`; returns this clearance, every step recorded."""
        for _step in self.steps(branch, series_dir):
            pass
        return self

    def require_review(self, review: Review) -> Review:
        """Step 1: refuse while a landing of `review` is unreviewed, unless `allow_unreviewed` (then recorded)."""
        self.review = review
        require_reviewed(review, self.action, self.allow_unreviewed)
        return review

    def run_checks(
        self, release: FileTree, composed: FileTree, changed: list[str], version: str, python: str | None = None
    ) -> CheckReport:
        """Step 2 on any two trees (the image's installed files): run and record the checks; refusing is the
        caller's (the image refuses together with its audit of site-packages)."""
        self.checks = run_checks(
            release, composed, changed, import_smoke=self.import_smoke, python=python, release=version
        )
        return self.checks

    def require_checks(self, branch: ComposedBranch, python: str | None = None) -> CheckReport:
        """Step 2 on the branch: the checks of its composed tree against the release; `RefusedError` when one
        fails."""
        report = self.run_checks(branch.release_tree(), branch.composed_tree(), branch.changed, branch.version, python)
        if not report.ok:
            errors = [str(f) for f in report.findings if f.severity == Severity.ERROR]
            shown = "; ".join(errors[:5]) + (f" and {len(errors) - 5} more" if len(errors) > 5 else "")
            raise RefusedError(
                f"the checks of {branch.branch} against {branch.tag} fail: {shown}",
                tag=branch.tag,
                hint=failure_hint(report, "fix the series (a skew-fix entry) and compose again; no artifact was built"),
            )
        return report

    def require_ampere_gate(self, branch: ComposedBranch) -> AmpereGateReport | None:
        """Step 3: the Ampere gate of the branch's composed tree, exported to a temporary folder; None when skipped.
        Raises `RefusedError` (recorded as `ampere_gate_error`) when a kernel fails, `GateEnvironmentError` (exit 3)
        when the gate's environment cannot be made."""
        if not self.run_ampere_gate:
            self.ampere_gate_skipped = AMPERE_GATE_SKIPPED
            return None
        with tempfile.TemporaryDirectory(prefix="vllm-compose-gate-") as tmp:
            try:
                self.ampere_gate = require_gate(
                    export_tree(branch.composed_tree(), Path(tmp)), branch.branch, tag=branch.tag
                )
            except RefusedError as exc:
                self.ampere_gate_error = exc.message
                raise
        return self.ampere_gate

    @property
    def gate_state(self) -> str | None:
        """`pass`, `FAIL`, `skipped (why)`, or None when the gate was not reached."""
        if self.ampere_gate_skipped is not None:
            return f"skipped ({self.ampere_gate_skipped})"
        if self.ampere_gate_error is not None:
            return "FAIL"
        return "pass" if self.ampere_gate is not None else None

    def ampere_gate_json(self) -> dict | None:
        """The gate as the artifacts' JSON reports record it: skipped, refused, its report, or None (not reached)."""
        if self.ampere_gate_skipped is not None:
            return {"skipped": self.ampere_gate_skipped}
        if self.ampere_gate_error is not None:
            return {"ok": False, "error": self.ampere_gate_error}
        return self.ampere_gate.to_json() if self.ampere_gate is not None else None


def branch_review(branch: ComposedBranch, series_dir: Path) -> Review:
    """The branch's relocated and merged landings (its entry commits' `Review-Landing:` trailers) with the
    approvals `series_dir` records for its release: what `wheel` and `editable` require to be approved."""
    landings = [x for c in branch.commits for x in landings_of_commit(c.message)]
    return review_of(branch.tag, landings, load_approvals(series_dir), load_series(series_dir).entries)
