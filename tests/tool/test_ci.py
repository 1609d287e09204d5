"""The CI scripts under ci/ run locally on fake PyPI data and a toy compose; the workflow files only call them."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import toy_vllm as toy


def run_compose_release(series: Path, repo: Path, out: Path, tmp_path: Path, *extra: str) -> int:
    """`ci/compose_release.py` on the toy release, offline from the test's sources folder."""
    argv = [toy.TAG, "--series", str(series), "--repo", str(repo), "--out", str(out)]
    return compose_release.main([*argv, "--sources", str(tmp_path / "sources"), "--offline", *extra])


def _tool(name: str) -> str | None:
    """A console tool on PATH, or installed next to this interpreter (a venv run without activating it)."""
    sibling = Path(sys.executable).parent / name
    return shutil.which(name) or (str(sibling) if sibling.is_file() else None)


yaml = pytest.importorskip("yaml", reason="PyYAML not installed (add it to the test extra)")

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "ci"))

import compose_release  # noqa: E402
import find_new_releases  # noqa: E402
import open_issue  # noqa: E402

FAKE_PYPI = {
    "releases": {
        "0.25.0": [{"yanked": False}],
        "0.26.0": [{"yanked": False}],
        "0.26.1": [{"yanked": False}],
        "0.27.0rc1": [{"yanked": False}],
        "0.27.0": [{"yanked": False}],
        "0.27.1": [{"yanked": True}],
        "0.28.0": [],
        "not-a-version": [{"yanked": False}],
    }
}


def test_new_releases_after_newest_composed() -> None:
    assert find_new_releases.new_releases(FAKE_PYPI, ["v0.25.0", "v0.26.0"]) == ["v0.26.1", "v0.27.0"]
    assert find_new_releases.new_releases(FAKE_PYPI, ["v0.27.0"]) == []


def test_find_new_releases_asks_the_configured_index_through_the_network_layer(
    fake_http, monkeypatch, tmp_path, capsys
):
    monkeypatch.setenv("PIP_INDEX_URL", "https://mirror.invalid/simple")
    files = [
        {"filename": "vllm-0.26.0.tar.gz", "url": "f/vllm-0.26.0.tar.gz", "hashes": {}},
        {"filename": "vllm-0.27.0.tar.gz", "url": "f/vllm-0.27.0.tar.gz", "hashes": {}},
        {"filename": "vllm-0.27.1.tar.gz", "url": "f/vllm-0.27.1.tar.gz", "hashes": {}, "yanked": True},
        {"filename": "vllm-0.28.0rc1.tar.gz", "url": "f/vllm-0.28.0rc1.tar.gz", "hashes": {}},
    ]
    page = "https://mirror.invalid/simple/vllm/"
    fake_http.serve(page, json.dumps({"files": files}).encode(), "application/vnd.pypi.simple.v1+json")
    composed = tmp_path / "composed.json"
    composed.write_text('{"composed": ["v0.26.0"]}')
    assert find_new_releases.main(["--composed", str(composed)]) == 0
    assert capsys.readouterr().out.split() == ["v0.27.0"]
    assert fake_http.requests == [page]
    # the index unreachable: a clear error and the bad-input exit code, no traceback
    fake_http.routes.clear()
    assert find_new_releases.main(["--composed", str(composed)]) == 3
    assert "cannot read the package index" in capsys.readouterr().err


def test_find_new_releases_writes_github_output(tmp_path, monkeypatch, capsys) -> None:
    pypi = tmp_path / "vllm.json"
    pypi.write_text(json.dumps(FAKE_PYPI))
    composed = tmp_path / "composed.json"
    composed.write_text('{"composed": ["v0.26.0"]}')
    out = tmp_path / "github_output"
    monkeypatch.setenv("GITHUB_OUTPUT", str(out))
    assert find_new_releases.main(["--pypi-json", str(pypi), "--composed", str(composed)]) == 0
    assert capsys.readouterr().out.split() == ["v0.26.1", "v0.27.0"]
    assert out.read_text() == 'tags=["v0.26.1", "v0.27.0"]\n'


def test_the_checked_in_record_names_composed_releases_oldest_first_on_one_line() -> None:
    """ci/composed.json reads as find_new_releases reads it, oldest first without repeats, on one line: adding the
    next release once its compose is published is a one-line change."""
    text = (ROOT / "ci" / "composed.json").read_text()
    composed = find_new_releases.read_composed(ROOT / "ci" / "composed.json")
    assert all(re.fullmatch(r"v\d+\.\d+\.\d+", t) for t in composed)
    versions = [find_new_releases.version_of_tag(t) for t in composed]
    assert versions == sorted(set(versions)), composed
    assert text.count("\n") == 1 and text.endswith("\n")


def test_open_issue_dry_run(tmp_path, capsys) -> None:
    body = tmp_path / "body.md"
    body.write_text("conflicts")
    assert open_issue.main(["--repo", "o/r", "--title", "T", "--body-file", str(body), "--dry-run"]) == 0
    req = json.loads(capsys.readouterr().out)
    assert req["method"] == "POST" and req["url"] == "https://api.github.com/repos/o/r/issues"
    assert req["json"]["title"] == "T" and req["json"]["body"] == "conflicts"
    assert (
        open_issue.main(["--repo", "o/r", "--title", "T", "--body-file", str(body), "--dry-run", "--existing", "7"])
        == 0
    )
    req = json.loads(capsys.readouterr().out)
    assert req["method"] == "PATCH" and req["url"].endswith("/issues/7")


def _toy(tmp_path, fix_body=toy.FIX_BODY):
    series = toy.write_series(tmp_path / "series", tmp_path / "sources", fix_body=fix_body)
    repo = toy.make_release_repo(tmp_path / "vllm")
    return series, repo


def test_compose_release_success_builds_wheel_and_summary(tmp_path, monkeypatch) -> None:
    from toy_wheel import make_stock_wheel

    series, repo = _toy(tmp_path)
    summary = tmp_path / "step_summary.md"
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    out = tmp_path / "out"
    stock = str(make_stock_wheel(tmp_path / "stock"))
    rc = run_compose_release(series, repo, out, tmp_path, "--stock-wheel", stock, "--no-ampere-gate")  # a toy tree
    assert rc == 0
    assert json.loads((out / "report-v0.26.0.json").read_text())["status"] == "composed"
    assert "| pr101 | applied |" in summary.read_text()
    assert list(out.glob("vllm-0.26.0+compose.101.g*.whl"))
    assert not (out / "issue-v0.26.0.md").exists()


def test_compose_release_unreviewed_landing_writes_issue_body_and_builds_no_wheel(tmp_path) -> None:
    from toy_wheel import make_stock_wheel

    # the fix's context line drifted in the release: it lands merged, and a new release has no approvals
    drifted = toy.FIX_BODY.replace(" def helper(name):\n", " def helper(name):  # joins\n")
    series, repo = _toy(tmp_path, fix_body=drifted)
    out = tmp_path / "out"
    stock = str(make_stock_wheel(tmp_path / "stock"))
    rc = run_compose_release(series, repo, out, tmp_path, "--stock-wheel", stock, "--no-ampere-gate")
    assert rc == 2
    assert not list(out.glob("*.whl"))
    issue = (out / "issue-v0.26.0.md").read_text()
    assert "1 hunk(s) landed relocated or merged without an approval for this release" in issue
    assert "| `fix-helper:vllm/runner.py#1` | merged | 13-13 |" in issue
    assert "vllm-compose review --onto v0.26.0" in issue


def test_compose_release_gate_refusal_writes_issue_body_naming_the_kernels(tmp_path, monkeypatch) -> None:
    from toy_wheel import gate_report, make_stock_wheel

    from vllm_compose.ampere import gate

    monkeypatch.setattr(gate, "gate_in_environment", lambda tree, label="", **kw: gate_report(False))
    series, repo = _toy(tmp_path)
    out = tmp_path / "out"
    rc = run_compose_release(series, repo, out, tmp_path, "--stock-wheel", str(make_stock_wheel(tmp_path / "stock")))
    assert rc == 2
    assert not list(out.glob("*.whl"))
    body = (out / "issue-v0.26.0.md").read_text()
    assert "fails the Ampere gate: 1 kernel x target do not compile" in body
    assert "| `vllm.k._fused_q_kernel` | sm_80 | 2/2 | fp8e4nv not supported |" in body
    assert "vllm-compose ampere-gate --onto v0.26.0" in body


#: a fix that passes the PR's propose() a keyword it does not take: compiles, defines every name, composes clean;
#: only the semantic check (ty) sees it, as with PR #46994's `intermediate_tensors=` on v0.27.0-v0.29.0
SEMANTIC_BAD_FIX = toy.FIX_BODY.replace("name.strip()", "str(Runner(1).propose([name], draft=None))")


def test_compose_release_semantic_finding_writes_issue_body_and_builds_no_wheel(tmp_path) -> None:
    from toy_wheel import make_stock_wheel

    series, repo = _toy(tmp_path, fix_body=SEMANTIC_BAD_FIX)
    out = tmp_path / "out"
    stock = str(make_stock_wheel(tmp_path / "stock"))
    rc = run_compose_release(series, repo, out, tmp_path, "--stock-wheel", stock, "--no-ampere-gate")
    assert rc == 2
    assert json.loads((out / "report-v0.26.0.json").read_text())["status"] == "composed"  # the compose said OK
    assert not list(out.glob("*.whl"))
    body = (out / "issue-v0.26.0.md").read_text()
    assert "the semantic check (ty) found 1 finding(s)" in body
    assert re.search(r"\| `fix-helper` \| `vllm/runner.py:\d+` \| unknown-argument \| .*`draft`", body), body
    findings = json.loads((out / "semantic-v0.26.0.json").read_text())
    assert [f["entry"] for r in findings.values() for f in r["findings"]] == ["fix-helper"]
    # the same compose without the check builds the wheel: the check is what stopped it
    shutil.rmtree(out)
    assert run_compose_release(series, repo, out, tmp_path, "--stock-wheel", stock, "--no-ampere-gate",
                               "--no-semantic-check") == 0  # fmt: skip
    assert list(out.glob("*.whl"))


def test_compose_release_conflict_writes_issue_body(tmp_path) -> None:
    series, repo = _toy(tmp_path)
    text = (repo / "vllm" / "runner.py").read_text()
    (repo / "vllm" / "runner.py").write_text(
        text.replace(
            "def propose(self, batch):\n        return [x * self.size for x in batch]",
            "def propose(self, items, *, k=1):\n        return list(items)[:k]",
        )
    )
    toy.git(repo, "commit", "-qam", "drift")
    toy.git(repo, "tag", "-f", toy.TAG)
    out = tmp_path / "out"
    rc = run_compose_release(series, repo, out, tmp_path)
    assert rc == 1
    body = (out / "issue-v0.26.0.md").read_text()
    assert "conflict" in body and "`pr101`: `vllm/runner.py` hunk 1" in body
    assert not list(out.glob("*.whl"))


WORKFLOWS = sorted((ROOT / ".github" / "workflows").glob("*.yml"))


@pytest.mark.parametrize("path", WORKFLOWS, ids=lambda p: p.name)
def test_workflows_only_call_ci_scripts(path: Path) -> None:
    data = yaml.safe_load(path.read_text())
    runs = [s["run"] for job in data["jobs"].values() for s in job["steps"] if "run" in s]
    assert runs
    for run in runs:
        assert re.match(r"(bash \.ci/run|python ci/[a-z_]+\.py|python -m pip install )", run), run
        for script in re.findall(r"ci/[a-z_]+\.py", run):
            assert (ROOT / script).is_file(), script


@pytest.mark.skipif(_tool("check-jsonschema") is None, reason="check-jsonschema not installed")
def test_workflows_match_the_schema() -> None:
    proc = subprocess.run(
        [
            _tool("check-jsonschema"),
            "--schemafile",
            str(ROOT / "ci" / "workflow-schema.json"),
            *map(str, WORKFLOWS),
        ],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_the_ci_entry_point_runs_the_readme_full_test_command() -> None:
    """`.ci/run` ends with the test command the README gives for the full run, and the README's fast lane names a
    test folder that exists."""
    readme = (ROOT / "README.md").read_text()
    full = re.search(r"^    python3 -m venv \.venv && \.venv/bin/pip install -e '\.\[test\]' && (.+)$", readme, re.M)
    assert full, "the README's full test command is gone"
    steps = [line for line in (ROOT / ".ci" / "run").read_text().splitlines() if line and not line.startswith("#")]
    assert steps[-1] == full.group(1) == ".venv/bin/python -m pytest -q"
    fast = re.search(r"^    \.venv/bin/python -m pytest -q (tests/\w+)", readme, re.M)
    assert fast and (ROOT / fast.group(1)).is_dir()


def test_ci_issue_lists_only_the_hunks_that_stopped_the_run() -> None:
    """A dropped entry's conflicts (upstream's evolved form of it) are not in the issue: nothing to resolve there."""
    from vllm_compose.report import render_ci_issue

    def hunk(path: str, n: int, verdict: str) -> dict:
        return {"file": path, "hunk": n, "verdict": verdict, "evidence": "why"}

    report = {
        "tag": "v9.0.0",
        "status": "conflict",
        "message": "stopped at entry 'pr2'",
        "entries": [
            {"id": "pr1", "status": "dropped-upstream", "hunks": [hunk("a.py", 1, "conflict")]},
            {"id": "pr2", "status": "conflict", "hunks": [hunk("b.py", 1, "exact"), hunk("b.py", 2, "conflict")]},
            {"id": "fix", "status": "not-reached", "hunks": []},
        ],
    }
    body = render_ci_issue(report)
    assert [line for line in body.splitlines() if line.startswith("- `")] == ["- `pr2`: `b.py` hunk 2 — why"]
    assert "`vllm-compose rebase --onto v9.0.0` stops at `pr2`" in body
    assert "`vllm-compose rebase --continue` records the resolution as a skew-fix entry for v9.0.0" in body
    assert "add v9.0.0 there once its compose is published" in body


def test_ci_scripts_refuse_bad_input_with_a_clear_error(tmp_path, monkeypatch, capsys) -> None:
    """A bad record, project JSON, tag, output folder or issue body, no token, an unreachable API: exit code 3, what
    and where on stderr, no traceback, nothing printed or written."""
    out = tmp_path / "github_output"
    monkeypatch.setenv("GITHUB_OUTPUT", str(out))
    cases = {
        "": "cannot read the record of composed releases",
        "{": "the record of composed releases is not JSON",
        '["v0.26.0"]': "has no list of tags under 'composed'",
        '{"composed": []}': "lists no release",
        '{"composed": ["v0.26"]}': "tag 'v0.26' does not name a release version",
    }
    for text, message in cases.items():
        record = tmp_path / "composed.json"
        record.unlink(missing_ok=True)
        if text:
            record.write_text(text)
        pypi = tmp_path / "vllm.json"
        pypi.write_text(json.dumps(FAKE_PYPI))
        assert find_new_releases.main(["--composed", str(record), "--pypi-json", str(pypi)]) == 3, text
        captured = capsys.readouterr()
        assert message in captured.err and f"file {str(record)!r}" in captured.err and not captured.out, text
    record.write_text('{"composed": ["v0.26.0"]}')
    pypi.write_text('{"releases": []}')
    assert find_new_releases.main(["--composed", str(record), "--pypi-json", str(pypi)]) == 3
    assert "the project JSON has no 'releases' table" in capsys.readouterr().err
    assert not out.exists()

    assert compose_release.main(["v0.34", "--out", str(tmp_path / "out")]) == 3
    assert "tag 'v0.34' does not name a release version" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()
    (tmp_path / "a-file").write_text("")
    assert compose_release.main(["v0.34.0", "--out", str(tmp_path / "a-file")]) == 3
    assert "cannot use the output folder" in capsys.readouterr().err

    argv = ["--repo", "o/r", "--title", "T", "--body-file", str(tmp_path / "missing.md"), "--dry-run"]
    assert open_issue.main(argv) == 3
    assert "cannot read the issue body" in capsys.readouterr().err
    (tmp_path / "body.md").write_text("conflicts")
    argv = ["--repo", "o/r", "--title", "T", "--body-file", str(tmp_path / "body.md")]
    monkeypatch.delenv("GITHUB_TOKEN", raising=False)
    assert open_issue.main(argv) == 3
    assert "$GITHUB_TOKEN is not set" in capsys.readouterr().err
    monkeypatch.setenv("GITHUB_TOKEN", "t")
    assert open_issue.main(argv) == 3  # the socket guard: as if api.github.com were unreachable
    captured = capsys.readouterr()
    assert "cannot reach the GitHub API for GET https://api.github.com/repos/o/r/issues" in captured.err
    assert not captured.out


def test_compose_release_removes_what_an_earlier_run_left_for_the_tag(tmp_path, capsys) -> None:
    """A compose that stops on bad input writes no report: a report, issue or wheel an earlier run left in --out
    must not be taken for this run's (the workflow would publish them)."""
    out = tmp_path / "out"
    out.mkdir()
    stale = [out / "report-v0.26.0.json", out / "issue-v0.26.0.md", out / "vllm-0.26.0+compose.101.gabc.whl"]
    for path in stale:
        path.write_text("{}")
    other = out / "report-v0.27.0.json"
    other.write_text("{}")
    missing = tmp_path / "no-such-series"
    assert compose_release.main(["v0.26.0", "--series", str(missing), "--repo", str(tmp_path), "--out", str(out)]) == 3
    assert not any(p.exists() for p in stale) and other.exists()
    assert "error" in capsys.readouterr().err


# ---------------------------------------------------------------------------------------------------------------
# the workflow's path on a real release, the day it appeared: tests/cases/ci-release/<tag>/
#
# One folder per such day: `index.json` (the package index's page for vllm as read that day, PEP 691 JSON, trimmed;
# its `_recorded` says where and when), `composed.json` (ci/composed.json that day) and `expected.json` (the releases
# find_new_releases prints, the compose's exit code, the entry it stops at and the hunks the issue must name).

CI_RELEASE_CASES = sorted(p.name for p in (ROOT / "tests" / "cases" / "ci-release").iterdir() if p.is_dir())
WORKFLOW = ROOT / ".github" / "workflows" / "compose-releases.yml"


def _workflow_argv(script: str, tag: str) -> list[str]:
    """The arguments compose-releases.yml passes `ci/<script>` in the matrix job for `tag`."""
    import shlex

    data = yaml.safe_load(WORKFLOW.read_text())
    runs = [s["run"] for job in data["jobs"].values() for s in job["steps"] if f"ci/{script}" in s.get("run", "")]
    assert len(runs) == 1, runs
    argv = shlex.split(runs[0].replace("${{ matrix.tag }}", tag))
    assert argv[:2] == ["python", f"ci/{script}"], argv
    return argv[2:]


def _series_of_the_day(series: Path, dest: Path, composed: list[str]) -> list[str]:
    """Copy `series` to `dest` as it stood when `composed` were the composed releases: less the entries none of them
    selects (the fixes written since for newer releases). Returns the ids left out."""
    from vllm_compose.series import load_series
    from vllm_compose.series_text import rewrite_series_text

    shutil.copytree(series, dest)
    loaded = load_series(dest)
    selected = {e.id for tag in composed for e in loaded.entries_for(tag)}
    later = tuple(e.id for e in loaded.entries if e.id not in selected)
    toml = dest / "series.toml"
    toml.write_text(rewrite_series_text(toml.read_text(), "", None, None, None, {}, retire=later))
    load_series(dest)  # still a valid series
    return list(later)


def _real_sdist(tag: str, recorded_sha256: str) -> Path:
    """Release `tag`'s sdist from the real cache, downloaded once from PyPI when it is not there (skips the calling
    test when it cannot be); checked against the sha256 the recorded index lists."""
    from release_trees import REAL_CACHE_ROOT

    from vllm_compose.cache import Cache
    from vllm_compose.errors import SourceError
    from vllm_compose.releases import fetch_sdist
    from vllm_compose.series import version_of_tag

    cache = Cache(REAL_CACHE_ROOT)
    try:
        sdist = fetch_sdist(version_of_tag(tag), cache, offline=True)
    except SourceError:
        try:
            sdist = fetch_sdist(version_of_tag(tag), cache)
        except SourceError as exc:
            pytest.skip(f"the {tag} sdist is not in the cache {cache.root} and PyPI is unreachable ({exc.message})")
    assert sdist.sha256 == recorded_sha256, f"{sdist.filename}: the recorded index lists another file"
    return sdist.path


@pytest.mark.sdist
@pytest.mark.parametrize("case", CI_RELEASE_CASES)
def test_workflow_on_the_day_a_release_appeared(case: str, real_pr_diffs, tmp_path, monkeypatch, capsys, request):
    """compose-releases.yml's path, run on the real release against the index page and the record of that day and
    the series as it stood then: find_new_releases puts the release in the matrix, compose_release stops where the
    case says and writes the issue body, and open_issue (dry run) opens the issue that names the hunks to resolve
    and says how. The arguments are the workflow's own; everything runs offline but the one-time sdist download."""
    folder = ROOT / "tests" / "cases" / "ci-release" / case
    want = json.loads((folder / "expected.json").read_text())
    page = (folder / "index.json").read_bytes()
    (tag,) = want["new"]
    recorded = {f["filename"]: f["hashes"]["sha256"] for f in json.loads(page)["files"]}
    sources = tmp_path / "sources"
    sources.mkdir()
    sdist_name = f"vllm-{tag.removeprefix('v')}.tar.gz"
    (sources / sdist_name).symlink_to(_real_sdist(tag, recorded[sdist_name]))
    for diff in real_pr_diffs:
        (sources / diff.name).symlink_to(diff)
    # from here on the package index is the recorded page (the package's one door to the network is faked)
    fake_http = request.getfixturevalue("fake_http")
    monkeypatch.setenv("PIP_INDEX_URL", "https://pypi.org/simple")
    fake_http.serve("https://pypi.org/simple/vllm/", page, "application/vnd.pypi.simple.v1+json")
    monkeypatch.setenv("GITHUB_REPOSITORY", "owner/vllm-compose")
    monkeypatch.setenv("GITHUB_OUTPUT", str(tmp_path / "github_output"))
    monkeypatch.chdir(tmp_path)  # the checkout: series/, the empty vllm/ submodule folder, ci-out/

    # job `find`: the matrix
    assert find_new_releases.main(["--composed", str(folder / "composed.json")]) == 0
    assert capsys.readouterr().out.split() == want["new"]
    assert (tmp_path / "github_output").read_text() == f"tags={json.dumps(want['new'])}\n"

    # job `compose`, step `compose`: the series of that day onto the release
    composed = json.loads((folder / "composed.json").read_text())["composed"]
    left_out = _series_of_the_day(ROOT / "series", tmp_path / "series", composed)
    (tmp_path / "vllm").mkdir()
    rc = compose_release.main([*_workflow_argv("compose_release.py", tag), "--sources", str(sources)])
    capsys.readouterr()
    report = json.loads((tmp_path / "ci-out" / f"report-{tag}.json").read_text())
    assert rc == want["exit"], f"{report['message']} (series without {left_out})"
    stopped = [e for e in report["entries"] if e["status"] == "conflict"]
    assert [e["id"] for e in stopped] == [want["stopped_at"]]
    open_hunks = [(e["id"], h) for e in stopped for h in e["hunks"] if not h.get("resolved_by")]
    to_resolve = [f"{eid}:{h['file']}#{h['hunk']}" for eid, h in open_hunks if h["verdict"] == "conflict"]
    assert to_resolve == want["conflicts"]

    # step 4 runs (the compose failed and wrote the issue body): open_issue, as a dry run
    body_file = tmp_path / "ci-out" / f"issue-{tag}.md"
    assert body_file.is_file()
    assert open_issue.main([*_workflow_argv("open_issue.py", tag), "--dry-run"]) == 0
    req = json.loads(capsys.readouterr().out)
    assert req["method"] == "POST" and req["url"] == "https://api.github.com/repos/owner/vllm-compose/issues"
    assert req["json"]["title"] == f"Compose onto {tag} needs a person"
    body = req["json"]["body"]
    assert body == body_file.read_text()
    named = [re.match(r"- `(.+?)`: `(.+?)` hunk (\d+)", line) for line in body.splitlines() if line.startswith("- `")]
    assert [f"{m[1]}:{m[2]}#{m[3]}" for m in named if m] == want["conflicts"] and len(named) == len(want["conflicts"])
    assert f"`vllm-compose rebase --onto {tag}` stops at `{want['stopped_at']}`" in body
    assert "`vllm-compose rebase --continue` records the resolution as a skew-fix entry" in body
    assert f"add {tag} there once its compose is published" in body
