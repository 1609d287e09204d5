"""The review (`review.py`): landing digests, the approvals file, `vllm-compose review`, the widened-range stop of
`rebase`, and the refusal of unreviewed landings by `wheel`, `editable` and `image-overlay`."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
import toy_vllm as toy
from toy_wheel import make_stock_wheel

from vllm_compose.cli import main
from vllm_compose.errors import ExitCode, RefusedError, SeriesError
from vllm_compose.patchfile import parse_patch
from vllm_compose.placement import place_file
from vllm_compose.review import (
    REVIEWS_FILE,
    Approval,
    Landing,
    landings_of_commit,
    landings_of_file,
    load_approvals,
    record_approvals,
    require_reviewed,
    review_of,
)
from vllm_compose.series import load_series

#: toy_vllm's fix with a context line the release does not have: it lands merged, not exact
DRIFTED_FIX = toy.FIX_BODY.replace(" def helper(name):\n", " def helper(name):  # joins\n")


def _landings(target: str, body: str = DRIFTED_FIX) -> list[Landing]:
    fp = parse_patch(body.encode(), name="fix").files[0]
    placed = place_file(fp, target, fp.path)
    return landings_of_file("fix-helper", fp.path, placed, target.splitlines())


# --------------------------------------------------------------------------------------------------------------
# Landings and their digests


def test_a_drifted_context_is_a_landing_and_an_exact_one_is_not() -> None:
    got = _landings(toy.RUNNER)
    assert [(x.id, x.verdict) for x in got] == [("fix-helper:vllm/runner.py#1", "merged")]
    assert (got[0].first, got[0].last) == (13, 13)
    assert _landings(toy.RUNNER, toy.FIX_BODY) == []


def test_digest_is_content_not_line_numbers() -> None:
    here = _landings(toy.RUNNER)[0]
    moved = _landings("# a comment\n# another\n" + toy.RUNNER)[0]
    assert moved.first == here.first + 2
    assert moved.digest == here.digest
    # a change right beside the landing is a different landing
    beside = _landings(toy.RUNNER.replace('    return "run " + name\n', '    return "run " + name\n# tail\n'))[0]
    assert beside.digest != here.digest


def test_trailers_round_trip() -> None:
    x = _landings(toy.RUNNER)[0]
    message = f"title\n\nSeries-Entry: fix-helper\n{x.trailer()}\nComposed-By: vllm-compose\n"
    assert landings_of_commit(message) == [x]
    assert landings_of_commit("no entry trailer\n" + x.trailer()) == []


# --------------------------------------------------------------------------------------------------------------
# The approvals file


def _write(folder: Path, text: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / REVIEWS_FILE).write_text(text)
    return folder


GOOD = """
[[approval]]
onto = "v0.26.0"
hunk = "fix-helper:vllm/runner.py#1"
landing = "0123456789abcdef"
by = "A. Maintainer"
why = "read against the release"
"""


@pytest.mark.parametrize(
    ("text", "says"),
    [
        (GOOD.replace('by = "A. Maintainer"\n', ""), "lacks by"),
        (GOOD.replace("0123456789abcdef", "0123"), "not a 16-hex-digit landing digest"),
        (GOOD.replace("fix-helper:vllm/runner.py#1", "fix-helper:vllm/runner.py"), "is not '<entry-id>:<path>#<hunk>'"),
        (GOOD.replace('"v0.26.0"', '"0.26"'), "does not name a release version"),
        (GOOD + GOOD, "repeats approval #1"),
        (GOOD.replace("why =", "color = 1\nwhy ="), "unknown key 'color'"),
        ("[approvals]\n", "unknown table 'approvals'"),
        ("[[approval]\n", "cannot read"),
    ],
)
def test_a_bad_approvals_file_is_refused_with_where_and_how(tmp_path, text: str, says: str) -> None:
    folder = _write(tmp_path / "series", text)
    with pytest.raises(SeriesError) as err:
        load_approvals(folder)
    assert says in err.value.message
    assert REVIEWS_FILE in err.value.message and err.value.hint


def test_record_approvals_appends_keeps_comments_and_skips_duplicates(tmp_path) -> None:
    folder = _write(tmp_path / "series", "# our approvals\n" + GOOD)
    x = _landings(toy.RUNNER)[0]
    written = record_approvals(folder, "v0.26.0", [x], "B. Reader", 'checked "twice"')
    assert written == [Approval("v0.26.0", x.id, x.digest, "B. Reader", 'checked "twice"')]
    text = (folder / REVIEWS_FILE).read_text()
    assert text.startswith("# our approvals\n") and text.count("[[approval]]") == 2
    assert load_approvals(folder)[1] == written[0]
    assert record_approvals(folder, "v0.26.0", [x], "B. Reader", "again") == []
    assert (folder / REVIEWS_FILE).read_text() == text
    with pytest.raises(SeriesError, match="who .* and why"):
        record_approvals(folder, "v0.27.0", [x], " ", "why")


def test_review_matches_release_hunk_and_digest(tmp_path) -> None:
    x = _landings(toy.RUNNER)[0]
    entries = load_series(toy.write_series(tmp_path / "series", tmp_path / "sources")).entries
    approved = [Approval("v0.26.0", x.id, x.digest, "A", "ok")]
    assert review_of("v0.26.0", [x], approved, entries).unreviewed == []
    assert len(review_of("v0.27.0", [x], approved, entries).unreviewed) == 1  # another release
    other = [Approval("v0.26.0", x.id, "f" * 16, "A", "ok")]
    assert len(review_of("v0.26.0", [x], other, entries).unreviewed) == 1  # another landing of the same hunk


def test_require_reviewed_refuses_or_records_the_override(tmp_path) -> None:
    x = _landings(toy.RUNNER)[0]
    entries = load_series(toy.write_series(tmp_path / "series", tmp_path / "sources")).entries
    review = review_of("v0.26.0", [x], [], entries)
    with pytest.raises(RefusedError) as err:
        require_reviewed(review, "wheel", allow=False)
    assert err.value.exit_code == ExitCode.REFUSED
    assert "fix-helper:vllm/runner.py#1 merged at line 13" in err.value.message
    assert "vllm-compose review --onto v0.26.0" in err.value.hint
    require_reviewed(review, "rebase", allow=False, only_stops=True)  # written for v0.26.0: no stop
    assert review.override is None
    require_reviewed(review, "wheel", allow=True)
    assert review.override.startswith("--allow-unreviewed: wheel went on with 1 unreviewed landings")


# --------------------------------------------------------------------------------------------------------------
# The commands on a toy compose


def _series(tmp_path: Path, written_for: str | None = None) -> Path:
    series = toy.write_series(tmp_path / "series", tmp_path / "sources", fix_body=DRIFTED_FIX)
    if written_for is not None:
        toml = series / "series.toml"
        toml.write_text(toml.read_text().replace('why = "skew"', f'why = "skew"\nwritten_for = "{written_for}"'))
    return series


def _rebase(series: Path, repo: Path, tmp_path: Path, *extra: str) -> int:
    argv = ["rebase", "--onto", toy.TAG, "--series", str(series), "--repo", str(repo), "--no-checkout"]
    return main([*argv, "--sources", str(tmp_path / "sources"), "--offline", "-q", *extra])


def _review(series: Path, repo: Path, tmp_path: Path, *extra: str) -> int:
    argv = ["review", "--onto", toy.TAG, "--series", str(series), "--repo", str(repo), "-q"]
    return main([*argv, "--sources", str(tmp_path / "sources"), "--offline", *extra])


def _branch_message(repo: Path, rev: str) -> str:
    return subprocess.run(["git", "log", "-1", "--format=%B", rev], cwd=repo, capture_output=True, text=True).stdout


def test_rebase_warns_and_review_lists_then_approval_is_reproducible(tmp_path, capsys) -> None:
    series, repo = _series(tmp_path), toy.make_release_repo(tmp_path / "vllm")
    assert _rebase(series, repo, tmp_path) == 0
    out = capsys.readouterr().out
    assert "review: 1 relocated or merged landings, 0 approved for v0.26.0, 1 unreviewed" in out
    assert "Review-Landing: vllm/runner.py#1 merged 13-13 " in _branch_message(repo, "compose-101-v0.26.0")

    assert _review(series, repo, tmp_path) == 0
    out = capsys.readouterr().out
    assert "fix-helper:vllm/runner.py#1  merged, line 13" in out and "UNREVIEWED" in out
    assert "audit: fuzzy" in out  # the audit's word on it
    assert '+    return "run " + name.strip()' in out  # the hunk
    assert '>     13      return "run " + name.strip()' in out  # the landing in context, its line marked

    assert _review(series, repo, tmp_path, "--approve", "fix-helper:vllm/runner.py#9", "--by", "A", "--why", "w") == 3
    assert "no relocated or merged landing" in capsys.readouterr().err
    assert _review(series, repo, tmp_path, "--approve-all") == 4  # who and why are required: a usage error
    capsys.readouterr()
    assert _review(series, repo, tmp_path, "--approve-all", "--by", "A. Reader", "--why", "the helper it means") == 0
    assert "recorded 1 approvals" in capsys.readouterr().out

    assert _rebase(series, repo, tmp_path) == 0  # the same inputs: the same digest, now approved
    assert "1 approved for v0.26.0, 0 unreviewed" in capsys.readouterr().out


def test_fix_outside_written_for_stops_rebase_unless_approved_or_allowed(tmp_path, capsys) -> None:
    series, repo = _series(tmp_path, written_for="<0.26.0"), toy.make_release_repo(tmp_path / "vllm")
    assert _rebase(series, repo, tmp_path) == 2
    out = capsys.readouterr().out
    assert "1 fixes applied outside the releases they were written for on v0.26.0" in out
    assert "fix-helper:vllm/runner.py#1 merged at line 13 (written for <0.26.0)" in out
    assert subprocess.run(["git", "rev-parse", "--verify", "-q", "compose-101-v0.26.0"], cwd=repo).returncode != 0

    assert _rebase(series, repo, tmp_path, "--allow-unreviewed") == 0
    out = capsys.readouterr().out
    assert "REVIEW OVERRIDE (--allow-unreviewed: rebase went on with 1 unreviewed landings" in out
    message = _branch_message(repo, "compose-101-v0.26.0")
    assert "Review-Override: allowed unreviewed on vllm/runner.py#1" in message

    assert _review(series, repo, tmp_path, "--approve-all", "--by", "A. Reader", "--why", "read it") == 0
    capsys.readouterr()
    assert _rebase(series, repo, tmp_path) == 0
    assert "Review-Override" not in _branch_message(repo, "compose-101-v0.26.0")


def test_an_exact_or_offset_fix_outside_written_for_does_not_stop(tmp_path) -> None:
    # toy_vllm's fix says @@ -11 but its lines start at 10: it lands offset; with @@ -10 exact
    exact = toy.FIX_BODY.replace("@@ -11,4 +11,4 @@", "@@ -10,4 +10,4 @@")
    for name, body in (("exact", exact), ("offset", toy.FIX_BODY)):
        folder = tmp_path / name
        series = toy.write_series(folder / "series", folder / "sources", fix_body=body)
        toml = series / "series.toml"
        toml.write_text(toml.read_text().replace('why = "skew"', 'why = "skew"\nwritten_for = "<0.26.0"'))
        argv = [
            "rebase",
            "--onto",
            toy.TAG,
            "--series",
            str(series),
            "--repo",
            str(toy.make_release_repo(folder / "r")),
        ]
        assert main([*argv, "--sources", str(folder / "sources"), "--offline", "-q", "--no-checkout"]) == 0, name


def test_written_for_is_a_specifier_on_local_entries_only(tmp_path) -> None:
    series = _series(tmp_path, written_for="not a spec")
    with pytest.raises(SeriesError, match="written_for 'not a spec' is not a PEP 440 version specifier"):
        load_series(series)
    toml = series / "series.toml"
    toml.write_text(
        toml.read_text()
        .replace('written_for = "not a spec"\n', "")
        .replace('tags = ">=0.26.0"\n', 'tags = ">=0.26.0"\nwritten_for = "<1"\n', 1)
    )
    with pytest.raises(SeriesError, match="written_for is only allowed on local entries"):
        load_series(series)


def test_wheel_and_editable_refuse_unreviewed_landings(tmp_path, capsys) -> None:
    series, repo = _series(tmp_path), toy.make_release_repo(tmp_path / "vllm")
    assert _rebase(series, repo, tmp_path) == 0
    stock = make_stock_wheel(tmp_path / "stock")
    common = ["--onto", toy.TAG, "--repo", str(repo), "--series", str(series), "--no-ampere-gate"]
    wheel = ["wheel", *common, "--stock-wheel", str(stock), "--out", str(tmp_path / "dist")]
    editable = ["editable", *common, "--stock-wheel", str(stock)]
    capsys.readouterr()
    for argv in (wheel, editable):
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert "1 unreviewed landings on v0.26.0: fix-helper:vllm/runner.py#1 merged at line 13" in err
    assert not (tmp_path / "dist").exists()

    assert main([*wheel, "--allow-unreviewed", "--json", str(tmp_path / "w.json")]) == 0
    assert "REVIEW OVERRIDE (--allow-unreviewed: wheel went on" in capsys.readouterr().out
    assert '"override": "--allow-unreviewed: wheel went on' in (tmp_path / "w.json").read_text()

    assert _review(series, repo, tmp_path, "--approve-all", "--by", "A. Reader", "--why", "read it") == 0
    capsys.readouterr()
    subprocess.run(["git", "checkout", "-q", "compose-101-v0.26.0"], cwd=repo, check=True)
    assert main(editable) == 0
    assert "review: 1 relocated or merged landings, 1 approved for v0.26.0, 0 unreviewed" in capsys.readouterr().out


def test_image_overlay_refuses_unreviewed_landings_and_records_the_override(tmp_path, capsys) -> None:
    series = _series(tmp_path)
    site = toy.make_site_packages(tmp_path / "site-packages")
    before = toy.snapshot(site)
    argv = ["image-overlay", "--site-packages", str(site), "--series", str(series), "--no-ampere-gate"]
    argv += ["--sources", str(tmp_path / "sources"), "--offline", "--no-import-smoke"]
    assert main(argv) == 2
    assert "image-overlay: 1 unreviewed landings on v0.26.0" in capsys.readouterr().out
    assert toy.snapshot(site) == before

    report = tmp_path / "overlay.json"
    assert main([*argv, "--allow-unreviewed", "--json", str(report)]) == 0
    review = json.loads(report.read_text())["compose"]["review"]
    assert review["override"].startswith("--allow-unreviewed: image-overlay went on with 1 unreviewed landings")
    assert [x["id"] for x in review["landings"]] == ["fix-helper:vllm/runner.py#1"]
