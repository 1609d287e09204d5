"""The series model: every case folder under `cases/series/` is loaded and checked against its `expected.json`.

A case's `expected.json` holds a one-line `description` of what the case shows and either `[error]` (the
`SeriesError`'s key, entry and a message fragment) or `[ok]` (the entries, kinds, branch name, and which entries apply
to a few tags).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from vllm_compose.errors import ExitCode, SeriesError
from vllm_compose.series import Resolve, Source, load_series, version_of_tag

CASES = Path(__file__).resolve().parents[1] / "cases" / "series"
CASE_NAMES = sorted(p.name for p in CASES.iterdir() if p.is_dir())


def _expected(case: Path) -> dict:
    """The case's expected.json: a one-line `description` and exactly one of `error` and `ok`."""
    path = case / "expected.json"
    assert path.is_file(), f"{case}: a series case folder needs an expected.json"
    expect = json.loads(path.read_text())
    description = expect.get("description")
    assert isinstance(description, str) and description.strip(), f'{path}: needs a non-empty "description"'
    assert "\n" not in description, f"{path}: the description is one line"
    outcome = sorted(set(expect) & {"error", "ok"})
    assert len(outcome) == 1, f'{path}: needs exactly one of "error" and "ok", has {outcome}'
    unknown = sorted(set(expect) - {"description", "error", "ok"})
    assert not unknown, f"{path}: unknown keys {unknown}"
    return expect


# read leniently here, so that a broken case fails its own test rather than the collection of this module
ERROR_CASES = [
    n
    for n in CASE_NAMES
    if (CASES / n / "expected.json").is_file() and "error" in json.loads((CASES / n / "expected.json").read_text())
]


@pytest.mark.parametrize("name", CASE_NAMES)
def test_series_case(name):
    case = CASES / name
    expect = _expected(case)
    if "error" in expect:
        want = expect["error"]
        with pytest.raises(SeriesError) as exc:
            load_series(case)
        err = exc.value
        assert want["message"] in err.message, str(err)
        assert err.file == str(case / "series.toml")
        assert (err.key or "") == want["key"], str(err)
        assert err.entry == want.get("entry"), str(err)
        assert err.hint, f"no hint: {err}"
        assert err.exit_code == ExitCode.BAD_INPUT
        return
    want = expect["ok"]
    series = load_series(case)
    assert [e.id for e in series.entries] == want["entries"]
    assert [e.kind for e in series.entries] == want["kinds"]
    assert series.branch_name("v1.2.0") == want["branch"]
    for key, ids in want.items():
        if key.startswith("applies_"):
            tag = "v" + key[len("applies_v") :].replace("_", ".")
            assert [e.id for e in series.entries_for(tag)] == ids, tag


def test_bad_input_cases_are_counted():
    # each kind of bad series input has its own test; keep this list from shrinking
    assert len(ERROR_CASES) >= 25


def test_valid_series_carries_provenance():
    series = load_series(CASES / "valid")
    assert series.name == "demo" and series.meta["description"] == "two PRs and a fix"
    pr = series.entry("pr101")
    assert pr.pr == 101 and pr.pr_url == "https://example.invalid/pull/101"
    assert pr.upstream_status == "Accepted" and pr.upstream_status_detail == "merged for 1.3.0"
    assert pr.source == Source(
        commits=("a" * 40,),
        url="https://example.invalid/101.diff",
        sha256="0" * 64,
        paths=("pkg/*",),
        strip=1,
    )
    fix = series.entry("fix-sys")
    assert fix.file == CASES / "valid" / "patches" / "0001-fix.patch"
    assert fix.patch is not None and fix.patch.hunk_count == 1
    # title and author default to the format-patch header
    assert fix.title == "pkg: import sys for the stage check"
    assert fix.author.startswith("Dev One")
    assert fix.resolves == (Resolve("pr101", "pkg/model.py", 2),)
    assert str(fix.resolves[0]) == "pr101:pkg/model.py#2"


def test_applies_to_handles_prereleases_and_rejects_non_release_tags():
    pr = load_series(CASES / "valid").entry("pr101")  # tags = "<1.3.0"
    assert pr.applies_to("v1.2.9")
    # PEP 440: "<1.3.0" excludes 1.3.0's own pre-releases, which already carry what 1.3.0 merged
    assert pr.applies_to("v1.3.0rc1") is False
    assert pr.applies_to("v1.2.0rc1")
    assert not pr.applies_to("v1.3.0")
    for tag in ("main", "v", "vnext", "1.2.0"):
        with pytest.raises(SeriesError, match="release"):
            version_of_tag(tag)


def test_a_tag_must_spell_a_release_exactly():
    # PEP 440 accepts each of these as a real release's spelling; as tags they would create branches named after a
    # typo, so they are refused before any work (README: exit 3)
    for tag, hint in (("v0.26.0 ", "v0.26.0?"), ("vv0.26.0", "v0.26.0?"), ("v0.26", "look like"), ("v0.26.00", "?")):
        with pytest.raises(SeriesError) as exc:
            version_of_tag(tag)
        assert exc.value.exit_code == 3 and hint in exc.value.hint, (tag, exc.value.hint)
    assert str(version_of_tag("v0.26.0")) == "0.26.0" and str(version_of_tag("v0.30.0rc1")) == "0.30.0rc1"


def test_branch_name_without_pr_entries(series_dir):
    (series_dir / "patches" / "0001-fix.patch").write_bytes((CASES / "valid/patches/0001-fix.patch").read_bytes())
    (series_dir / "series.toml").write_text(
        '[[entry]]\nid = "fix"\nfile = "patches/0001-fix.patch"\nupstream_status = "Pending"\nwhy = "w"\n'
    )
    assert load_series(series_dir).branch_name("v0.26.0") == "compose-v0.26.0"


def test_the_branch_is_named_after_the_prs_the_compose_applies():
    """The project's own series: PR #46994 ships from v0.30.0 (`upstream_release`), where the compose drops it, so
    the branch leaves it out as the version label does; the README's v0.26.0 branch keeps both."""
    series = load_series(Path(__file__).parents[2] / "series")
    assert series.branch_name("v0.26.0") == "compose-46994-38476-v0.26.0"
    assert series.branch_name("v0.29.0") == "compose-46994-38476-v0.29.0"
    assert series.branch_name("v0.30.0") == "compose-38476-v0.30.0"
    assert series.branch_name("v0.33.0") == "compose-38476-v0.33.0"
    assert series.pr_numbers("v0.33.0") == [38476]


def test_missing_series_file(tmp_path):
    with pytest.raises(SeriesError, match="series file not found") as exc:
        load_series(tmp_path)
    assert "--series" in exc.value.hint
