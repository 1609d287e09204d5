"""benchmarks/release_arrival.py without the PR diffs: how the series is put back for a release, and how one hunk
is judged against the reviewed compose. The benchmark itself needs the PR diffs (docs/benchmarks.md)."""

from __future__ import annotations

import sys
import tomllib
from pathlib import Path

import pytest

# benchmarks/ is a folder of scripts, not a package: put it first on the path, as `python benchmarks/X.py` does
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

from release_arrival import Truth, arrival_series, covered, judge  # noqa: E402

SERIES = """\
[series]
name = "toy"

[[entry]]
id = "pr1"
pr = 1
title = "the PR"
upstream_status = "Submitted"
[entry.source]
url = "https://example.invalid/pr1.diff"
sha256 = "{sha}"

[[entry]]
id = "fix-old"
file = "patches/a.patch"
upstream_status = "Inappropriate"
why = "written for v0.26.0, widened to v0.27.0 when v0.27.0 was reviewed"
tags = ">=0.26.0,<0.28.0"
written_for = ">=0.26.0,<0.28.0"

[[entry]]
id = "fix-ended"
file = "patches/b.patch"
upstream_status = "Inappropriate"
why = "v0.26.0 only"
tags = "==0.26.0"

[[entry]]
id = "fix-for-0.28"
file = "patches/c.patch"
upstream_status = "Inappropriate"
why = "written for v0.28.0"
tags = ">=0.28.0"
written_for = ">=0.28.0"
"""


@pytest.fixture
def series(tmp_path) -> Path:
    folder = tmp_path / "series"
    (folder / "patches").mkdir(parents=True)
    (folder / "series.toml").write_text(SERIES.format(sha="0" * 64))
    (folder / "reviews.toml").write_text("# approvals of the reviewed releases\n")
    return folder


def _entries(folder: Path) -> dict[str, dict]:
    return {e["id"]: e for e in tomllib.loads((folder / "series.toml").read_text())["entry"]}


def test_covered_releases() -> None:
    assert covered(">=0.27.0,<0.29.0") == ["v0.27.0", "v0.27.1", "v0.28.0"]
    assert covered(None)[0] == "v0.26.0" and covered(None)[-1] == "v0.33.0"


def test_arrival_of_v0_28_0(series, tmp_path) -> None:
    out = tmp_path / "arrival"
    arrival = arrival_series(series, "v0.28.0", out)
    entries = _entries(out)
    assert [r[0] for r in arrival.removed] == ["fix-for-0.28"] and "fix-for-0.28" not in entries
    assert arrival.widened == ["fix-old"]  # it covered v0.27.1, the release before
    assert entries["fix-old"]["tags"] == ">=0.26.0,<=0.28.0"
    assert entries["fix-old"]["written_for"] == ">=0.26.0,<=0.27.1"  # applied outside it: reviewed
    assert entries["fix-ended"]["tags"] == ">=0.26.0,<=0.26.0"  # ended earlier: not widened
    assert entries["pr1"] == _entries(series)["pr1"]
    assert not (out / "reviews.toml").exists()  # a release that has just arrived has no approvals


def test_arrival_of_v0_27_0_cuts_what_the_review_of_v0_27_0_widened(series, tmp_path) -> None:
    arrival_series(series, "v0.27.0", tmp_path / "a")
    entries = _entries(tmp_path / "a")
    assert entries["fix-old"]["written_for"] == ">=0.26.0,<=0.26.0"
    assert entries["fix-old"]["tags"] == ">=0.26.0,<=0.27.0"


def test_written_back_and_narrowed(series, tmp_path) -> None:
    out = tmp_path / "arrival"
    arrival_series(series, "v0.28.0", out, keep=frozenset({"fix-for-0.28"}), narrow=frozenset({"fix-old"}))
    entries = _entries(out)
    assert entries["fix-for-0.28"] == _entries(series)["fix-for-0.28"]  # as the maintainers wrote it
    assert entries["fix-old"]["tags"] == ">=0.26.0,<=0.27.1"  # taken back out of v0.28.0


@pytest.mark.parametrize(
    ("truth", "applied", "present", "already", "want"),
    [
        (Truth(["a", "b"]), True, True, False, "carried"),
        (Truth(["a", "b"]), True, False, False, "wrong"),
        (Truth(["a", "b"]), False, False, False, "false conflict"),
        (Truth(None, "carried by fix-x"), False, False, False, "right refusal"),
        (Truth(None, "carried by fix-x"), True, False, False, "wrong"),
        (Truth(None, "already in the release"), False, False, True, "carried"),
        (None, True, False, False, "wrong"),  # the reviewed compose does not apply the entry
        (None, False, False, False, "right refusal"),
    ],
)
def test_judge(truth, applied: bool, present: bool, already: bool, want: str) -> None:
    assert judge(truth, applied, present, already) == want
