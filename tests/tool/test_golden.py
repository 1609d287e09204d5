"""Golden files: what the commands print, compared as a whole with a file checked in beside the case.

A wording change shows up as a diff of a golden file instead of slipping through (as "conflict at not placed" once
did). Cases are folders:

* `tests/cases/compose/<case>/`: `release/` (the files of release v1.0.0), `series/` (series.toml and patches;
  its PR entry pins the toy PR, `toy_compose.PR_PATCH`, which the test passes with --sources), `expected.json`
  (description, the tag, the exit code) and the golden files
  * `expected-rebase.txt`: what `vllm-compose rebase` prints (`render_compose`);
  * `expected-conflict-folder.txt` (cases that stop with a conflict worktree): every file the worktree holds,
    each under a `== path ==` line: CONFLICT.txt, the entry's files with their markers, the reject files;
  * `expected-status.md`: the status table's row of that compose (`render_status`);
  * `expected-review.txt`: what `vllm-compose review` prints, and its exit code (`render_review`);
  * `expected-validate.txt`: what `vllm-compose validate` prints for the case's series;
  * `expected-ci-summary.md`, and `expected-ci-issue.md` where the compose did not succeed (or
    `expected-ci-review-issue.md` where it composed with unapproved landings): the CI's Markdown (`render_ci_summary`,
    `render_ci_issue`, `render_ci_review_issue`) of `rebase --json`'s report, as ci/compose_release.py
    writes it;
  * `expected-series-diff.txt` (cases that compose): `vllm-compose series-diff v1.0.0 v1.1.0` in one repository
    where v1.0.0 is the `clean` case's release and v1.1.0 this case's, each composed (`render_series_diff`);
* `tests/cases/audit/<case>/`: `expected-audit.txt`, what `check-fuzz` prints for the case's stock and patched
  trees (patched by GNU `patch --fuzz=3`, as the audit cases are; `render_audit`), and `expected-apply.txt`, what
  `vllm-compose apply` prints applying the case's patches to its stock tree, and its exit code (`render_apply`);
* `tests/cases/ci/<case>/`: a checked-in JSON input (`semantic-check --json` or `ampere-gate --json`), and
  `expected-ci-issue.md`, the issue the CI writes from it (`render_ci_semantic_issue`, `render_ci_gate_issue`);
* `tests/cases/image-overlay/<case>/`: `expected.json` (the toy fix, extra arguments, the exit code), optionally
  `site-packages/` (files laid over tests/toy_vllm.py's installed toy), and `expected-image-overlay.txt`, what
  `vllm-compose image-overlay` prints (`render_image_overlay`).

Temporary paths in the output are written as `<tmp>`, the tool's own scratch folders as `<scratch>`. To accept a
change on purpose, run with `VC_UPDATE_GOLDEN=1`, then read the diff of the golden files before committing them.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
import toy_vllm
from toy_compose import PR_PATCH

from vllm_compose.ampere.gate import KernelVerdict
from vllm_compose.cache import Cache, seed_cache
from vllm_compose.cli import main
from vllm_compose.compose import ComposeOptions, Composer
from vllm_compose.report import (
    render_ci_gate_issue,
    render_ci_issue,
    render_ci_review_issue,
    render_ci_semantic_issue,
    render_ci_summary,
    render_status,
)
from vllm_compose.semantic import Diagnostic
from vllm_compose.semantic import Finding as SemanticFinding
from vllm_compose.status import ReleaseStatus

CASES = Path(__file__).resolve().parents[1] / "cases"
UPDATE = os.environ.get("VC_UPDATE_GOLDEN") == "1"
GNU_PATCH = shutil.which("patch")


def _check_golden(path: Path, text: str) -> None:
    if UPDATE:
        path.write_text(text)
        return
    assert path.is_file(), f"{path} is missing: run with VC_UPDATE_GOLDEN=1 to write it, then review it"
    assert text == path.read_text(), f"output differs from {path} (VC_UPDATE_GOLDEN=1 rewrites it)"


def _normalize(text: str, tmp: Path) -> str:
    """Temporary paths as `<tmp>`, the interpreter (the import smoke names it) as `<python>`, the tool's own
    scratch folders (`tempfile.mkdtemp(prefix="vllm-compose-...")`, a random name) as `<scratch>`."""
    text = text.replace(str(tmp.resolve()), "<tmp>").replace(str(tmp), "<tmp>")
    text = text.replace(sys.executable, "<python>")
    scratch = "|".join(re.escape(d) for d in {tempfile.gettempdir(), os.path.realpath(tempfile.gettempdir())})
    return re.sub(rf"(?:{scratch})/vllm-compose-[a-z-]*?[A-Za-z0-9_]{{8}}(?=/|\s|$)", "<scratch>", text)


def _release_repo(case: Path, tmp: Path, tag: str) -> Path:
    """A repository whose one commit, tagged `tag`, holds the case's release files (pinned dates: stable ids)."""
    repo = tmp / "vllm"
    shutil.copytree(case / "release", repo)
    for args in (["init", "-q", "-b", "main"], ["add", "-A"], ["commit", "-qm", f"release {tag}"], ["tag", tag]):
        subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True)
    subprocess.run(["git", "checkout", "-q", "--detach"], cwd=repo, check=True, capture_output=True)
    return repo


def _sources(tmp: Path) -> Path:
    """The --sources folder of the compose cases: the toy PR's diff, which their series.toml pins by sha256."""
    folder = tmp / "sources"
    folder.mkdir(exist_ok=True)
    (folder / "pr101.diff").write_text(PR_PATCH)
    return folder


def _compose_cases() -> list[str]:
    return sorted(p.name for p in (CASES / "compose").iterdir() if p.is_dir())


@pytest.mark.parametrize("case", _compose_cases())
def test_rebase_output(case: str, tmp_path: Path, capsys) -> None:
    folder = CASES / "compose" / case
    want = json.loads((folder / "expected.json").read_text())
    repo = _release_repo(folder, tmp_path, want["onto"])
    series = tmp_path / "series"
    shutil.copytree(folder / "series", series)
    argv = ["rebase", "--onto", want["onto"], "--series", str(series), "--repo", str(repo), "--offline", "-q"]
    argv += ["--sources", str(_sources(tmp_path)), "--worktree", str(tmp_path / "conflict")]
    capsys.readouterr()
    code = main(argv)
    out = capsys.readouterr().out
    assert code == want["exit"], out
    _check_golden(folder / "expected-rebase.txt", _normalize(out, tmp_path))
    worktree = tmp_path / "conflict"
    if worktree.is_dir():
        _check_golden(folder / "expected-conflict-folder.txt", _folder_text(worktree))
    else:
        assert not (folder / "expected-conflict-folder.txt").exists(), "the compose wrote no conflict worktree"


def _folder_text(folder: Path) -> str:
    """Every file below `folder`, in path order, each under a `== path ==` line."""
    files = sorted(p for p in folder.rglob("*") if p.is_file())
    return "".join(f"== {p.relative_to(folder).as_posix()} ==\n{p.read_text()}" for p in files)


@pytest.mark.parametrize("case", _compose_cases())
def test_status_row(case: str, tmp_path: Path) -> None:
    folder = CASES / "compose" / case
    want = json.loads((folder / "expected.json").read_text())
    repo = _release_repo(folder, tmp_path, want["onto"])
    cache = Cache()
    seed_cache(_sources(tmp_path), cache)
    options = ComposeOptions(offline=True, keep_state=False)
    result = Composer(folder / "series", repo, cache, options).run(want["onto"])
    table = render_status([ReleaseStatus(result, gate="not run in this test", stock_gate="not run in this test")])
    _check_golden(folder / "expected-status.md", table)


@pytest.mark.skipif(GNU_PATCH is None, reason="GNU patch (/usr/bin/patch) is not installed")
@pytest.mark.parametrize("case", sorted(p.name for p in (CASES / "audit").iterdir() if p.is_dir()))
def test_check_fuzz_output(case: str, tmp_path: Path, capsys) -> None:
    folder = CASES / "audit" / case
    patched = tmp_path / "patched"
    shutil.copytree(folder / "stock", patched)
    single = folder / "patch.diff"
    patches = [single] if single.exists() else sorted((folder / "patches").glob("*.diff"))
    for p in patches:
        subprocess.run(
            [GNU_PATCH, "-s", "-p1", "--fuzz=3", "-N", "-r", "-", "--no-backup-if-mismatch", "-i", str(p)],
            cwd=patched,
            capture_output=True,
            check=False,
        )
    capsys.readouterr()
    code = main(["check-fuzz", "--stock", str(folder / "stock"), "--patched", str(patched), *map(str, patches)])
    out = capsys.readouterr().out
    want = json.loads((folder / "expected.json").read_text())
    assert code == (0 if want["ok"] else 1), out
    _check_golden(folder / "expected-audit.txt", _normalize(out, tmp_path))


# ---------------------------------------------------------------------------------------------------------------
# series-diff: two releases in one repository, a compose branch of each


def _add_release(repo: Path, release: Path, tag: str) -> None:
    """Commit `release`'s files as the next release, tagged `tag`, on top of what `repo` holds; leave HEAD detached."""
    for args in (["checkout", "-q", "main"], ["rm", "-rq", "."]):
        subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True)
    shutil.copytree(release, repo, dirs_exist_ok=True)
    edit = repo / "pkg" / "__init__.py"  # the small edit every next release has, so no two releases are one tree
    edit.write_text(edit.read_text() + f"# release {tag}\n")
    for args in (["add", "-A"], ["commit", "-qm", f"release {tag}"], ["tag", tag], ["checkout", "-q", "--detach"]):
        subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True)


def _rebase(repo: Path, series: Path, tag: str, tmp: Path, *extra: str) -> int:
    argv = ["rebase", "--onto", tag, "--series", str(series), "--repo", str(repo), "--offline", "-q", *extra]
    return main([*argv, "--sources", str(_sources(tmp)), "--worktree", str(tmp / f"conflict-{tag}")])


def _composed_cases() -> list[str]:
    """The compose cases whose compose writes a branch (exit 0)."""
    exits = {c: json.loads((CASES / "compose" / c / "expected.json").read_text())["exit"] for c in _compose_cases()}
    return [c for c, code in exits.items() if code == 0]


@pytest.mark.parametrize("case", _composed_cases())
def test_series_diff_output(case: str, tmp_path: Path, capsys) -> None:
    """`series-diff v1.0.0 v1.1.0`: v1.0.0 is the `clean` case's release, v1.1.0 this case's (plus a comment line),
    both composed with this case's series."""
    folder = CASES / "compose" / case
    repo = _release_repo(CASES / "compose" / "clean", tmp_path, "v1.0.0")
    _add_release(repo, folder / "release", "v1.1.0")
    series = tmp_path / "series"
    shutil.copytree(folder / "series", series)
    for tag in ("v1.0.0", "v1.1.0"):
        assert _rebase(repo, series, tag, tmp_path, "--no-checkout") == 0, capsys.readouterr().out
    capsys.readouterr()
    code = main(["series-diff", "v1.0.0", "v1.1.0", "--series", str(series), "--repo", str(repo)])
    out = capsys.readouterr().out
    assert code == 0, out
    _check_golden(folder / "expected-series-diff.txt", _normalize(out, tmp_path))


@pytest.mark.parametrize("case", _compose_cases())
def test_review_output(case: str, tmp_path: Path, capsys) -> None:
    """`review --onto TAG`: the landings of the compose that need a person's reading; the golden file holds the
    output and the exit code."""
    folder = CASES / "compose" / case
    want = json.loads((folder / "expected.json").read_text())
    repo = _release_repo(folder, tmp_path, want["onto"])
    series = tmp_path / "series"
    shutil.copytree(folder / "series", series)
    argv = ["review", "--onto", want["onto"], "--series", str(series), "--repo", str(repo), "--offline", "-q"]
    capsys.readouterr()
    code = main([*argv, "--sources", str(_sources(tmp_path))])
    out = capsys.readouterr().out
    _check_golden(folder / "expected-review.txt", _normalize(out, tmp_path) + f"exit {code}\n")


# ---------------------------------------------------------------------------------------------------------------
# validate, and the CI's Markdown of each compose case's JSON report


@pytest.mark.parametrize("case", _compose_cases())
def test_validate_output(case: str, tmp_path: Path, capsys) -> None:
    series = tmp_path / "series"
    shutil.copytree(CASES / "compose" / case / "series", series)
    cache = tmp_path / "cache"
    seed_cache(_sources(tmp_path), Cache(cache))
    capsys.readouterr()
    code = main(["validate", "--series", str(series), "--cache", str(cache)])
    out = capsys.readouterr().out
    assert code == 0, out
    _check_golden(CASES / "compose" / case / "expected-validate.txt", _normalize(out, tmp_path))


@pytest.mark.parametrize("case", _compose_cases())
def test_ci_markdown(case: str, tmp_path: Path, capsys) -> None:
    """What ci/compose_release.py writes from `rebase --json`: the job summary, and the issue body when the
    compose did not succeed."""
    folder = CASES / "compose" / case
    want = json.loads((folder / "expected.json").read_text())
    repo = _release_repo(folder, tmp_path, want["onto"])
    series = tmp_path / "series"
    shutil.copytree(folder / "series", series)
    report_path = tmp_path / "report.json"
    assert _rebase(repo, series, want["onto"], tmp_path, "--json", str(report_path)) == want["exit"]
    report = json.loads(report_path.read_text())
    _check_golden(folder / "expected-ci-summary.md", _normalize(render_ci_summary(report), tmp_path))
    issue = folder / "expected-ci-issue.md"
    review_issue = folder / "expected-ci-review-issue.md"
    unreviewed = [x for x in (report.get("review") or {}).get("landings", []) if not x.get("approved")]
    if want["exit"] != 0:
        _check_golden(issue, _normalize(render_ci_issue(report), tmp_path))
    elif unreviewed:  # composed, but the wheel waits for a person to read these
        _check_golden(review_issue, _normalize(render_ci_review_issue(want["onto"], report["review"]), tmp_path))
    else:
        assert not issue.exists(), f"{issue}: the CI writes no issue for a compose that succeeded"
        assert not review_issue.exists(), f"{review_issue}: every landing of this compose is approved"


def _ci_cases() -> list[str]:
    return sorted(p.name for p in (CASES / "ci").iterdir() if p.is_dir())


@pytest.mark.parametrize("case", _ci_cases())
def test_ci_issue_after_compose(case: str) -> None:
    """The issue bodies the CI writes after a successful compose: the semantic check's (from `semantic-check
    --json`, {branch: report}) and the Ampere gate's (from `ampere-gate --json`). Each case folder holds the JSON
    input, checked in, and `expected.json` names the renderer and the tag."""
    folder = CASES / "ci" / case
    want = json.loads((folder / "expected.json").read_text())
    data = json.loads((folder / want["input"]).read_text())
    if want["renderer"] == "semantic":
        diag = Diagnostic("f.py", 1, "error", "rule", "message")
        keys = set(SemanticFinding(diag).to_json())
        shaped = all(set(f) == keys for r in data.values() for f in r["findings"])
        assert shaped, "the input is not shaped as semantic-check's"
        text = render_ci_semantic_issue(want["tag"], data)
    else:
        keys = set(KernelVerdict("m", "q", 80, 1, 0, None).to_dict())
        assert all(set(k) == keys for k in data["kernels"]), "the input is not shaped as ampere-gate's"
        text = render_ci_gate_issue(want["tag"], data)
    _check_golden(folder / "expected-ci-issue.md", text)


# ---------------------------------------------------------------------------------------------------------------
# apply: each audit case's patches onto a copy of its stock tree


@pytest.mark.parametrize("case", sorted(p.name for p in (CASES / "audit").iterdir() if p.is_dir()))
def test_apply_output(case: str, tmp_path: Path, capsys) -> None:
    """`apply --to DIR --patch FILE [--patch FILE ...]` with the case's patches in order; the golden file holds
    the output and the exit code."""
    folder = CASES / "audit" / case
    target = tmp_path / "tree"
    shutil.copytree(folder / "stock", target)
    single = folder / "patch.diff"
    patches = [single] if single.exists() else sorted((folder / "patches").glob("*.diff"))
    capsys.readouterr()
    code = main(["apply", "--to", str(target), *[arg for p in patches for arg in ("--patch", str(p))]])
    out = capsys.readouterr().out
    _check_golden(folder / "expected-apply.txt", _normalize(out, tmp_path) + f"exit {code}\n")


# ---------------------------------------------------------------------------------------------------------------
# image-overlay: the toy installed vLLM of tests/toy_vllm.py


def _image_cases() -> list[str]:
    return sorted(p.name for p in (CASES / "image-overlay").iterdir() if p.is_dir())


@pytest.mark.parametrize("case", _image_cases())
def test_image_overlay_output(case: str, tmp_path: Path, capsys) -> None:
    """`image-overlay` onto toy_vllm's site-packages (without the Ampere gate and the import smoke, whose output
    depends on the machine). `expected.json`: the fix (`FIX_BODY` or `BAD_FIX_BODY` of toy_vllm), extra
    arguments, the exit code; a `site-packages/` folder in the case is copied over the toy's before the run."""
    folder = CASES / "image-overlay" / case
    want = json.loads((folder / "expected.json").read_text())
    series = toy_vllm.write_series(tmp_path / "series", tmp_path / "sources", fix_body=getattr(toy_vllm, want["fix"]))
    site = toy_vllm.make_site_packages(tmp_path / "site-packages")
    if (folder / "site-packages").is_dir():
        shutil.copytree(folder / "site-packages", site, dirs_exist_ok=True)
    argv = ["image-overlay", "--site-packages", str(site), "--series", str(series), "--offline"]
    argv += ["--sources", str(tmp_path / "sources"), "--no-ampere-gate", "--no-import-smoke", *want["args"]]
    capsys.readouterr()
    code = main(argv)
    out = capsys.readouterr().out
    assert code == want["exit"], out
    _check_golden(folder / "expected-image-overlay.txt", _normalize(out, tmp_path))
