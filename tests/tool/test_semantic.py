"""`semantic-check`: ty on a compose branch against its release, each new finding named after its entry.

The case is a release's arrival, v0.30.0: a fix written for v0.28/v0.29 that calls a PPHandler method the
release renamed (`broadcast_draft`, now `broadcast_drafts`) and passes a keyword argument the callee does not take.
The compose passed its checks (undefined names only); these are AttributeError / TypeError at run time. Here the two
mistakes are two entry commits on a branch over the real v0.30.0 (from its PyPI sdist), with a third entry that
changes nothing ty reports, and the build-setup commit on top.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pygit2
import pytest
from release_trees import release_commit

from vllm_compose.cli import main
from vllm_compose.errors import SeriesError
from vllm_compose.semantic import Diagnostic, load_baseline, parse_concise, surplus

REPO = Path(__file__).resolve().parents[2]
PP_UTILS = "vllm/v1/worker/gpu/pp_utils.py"
FREED = "    def on_req_idx_freed(self, req_idx: int) -> None:\n        self.req_idx_gen_np[req_idx] += 1\n"
EDITS = [  # (entry, the line added to on_req_idx_freed)
    ("fix-renamed-method", "        self.broadcast_draft(req_idx)\n"),
    ("fix-harmless", "        _unused_here = req_idx + 1\n"),
    ("fix-unknown-keyword", "        self.on_req_idx_freed(req_idx, draft_tokens=None)\n"),
]


def _commit(repo: pygit2.Repository, parent: pygit2.Commit, path: str, data: bytes, message: str) -> pygit2.Commit:
    index = pygit2.Index()
    index.read_tree(parent.tree)
    index.add(pygit2.IndexEntry(path, repo.create_blob(data), pygit2.GIT_FILEMODE_BLOB))
    sig = pygit2.Signature("t", "t@example.invalid", 1_700_000_000, 0)
    oid = repo.create_commit(None, sig, sig, message, index.write_tree(repo), [parent.id])
    return repo[oid].peel(pygit2.Commit)


@pytest.fixture(scope="module")
def arrival(tmp_path_factory):
    """A repository sharing the v0.30.0 import's objects, with branch compose-38476-v0.30.0 holding EDITS."""
    src, release = release_commit(tmp_path_factory, "v0.30.0")
    root = tmp_path_factory.mktemp("arrival") / "vllm"
    subprocess.run(["git", "clone", "-q", "--shared", "--bare", src.path, str(root)], check=True)
    repo = pygit2.Repository(str(root))
    stock = repo[release.tree[PP_UTILS].id].peel(pygit2.Blob).data.decode()
    assert FREED in stock
    commit, added = release, ""
    for entry, line in EDITS:  # each entry adds its line after the earlier entries' ones
        added += line
        message = f"{entry}\n\nSeries-Entry: {entry}\nOnto: v0.30.0\nComposed-By: vllm-compose\n"
        commit = _commit(repo, commit, PP_UTILS, stock.replace(FREED, FREED + added, 1).encode(), message)
    build = (
        "Build over the precompiled stock wheel\n\nBuild-Setup: precompiled-stock-wheel\nComposed-By: vllm-compose\n"
    )
    commit = _commit(repo, commit, "vllm/_compose_marker.py", b"X = 1\n", build)
    repo.references.create("refs/heads/compose-38476-v0.30.0", commit.id, force=True)
    return root


@pytest.fixture(scope="module")
def ty_cache(tmp_path_factory):
    """A cache folder the module's semantic checks share: the trees of `arrival` are checked by ty once, the later
    checks read their diagnostics from it (the baseline differs, not the trees)."""
    return tmp_path_factory.mktemp("ty-cache")


def _series(tmp_path: Path, baseline: str | None) -> Path:
    series = tmp_path / "series"
    shutil.copytree(REPO / "series", series)
    target = series / "semantic-baseline.toml"
    target.unlink(missing_ok=True)
    if baseline is not None:
        target.write_text(baseline)
    return series


@pytest.mark.sdist
@pytest.mark.slow
def test_the_renamed_method_and_the_unknown_keyword_are_new_findings_named_after_their_entries(
    arrival, ty_cache, tmp_path, capsys, monkeypatch
):
    monkeypatch.setenv("VLLM_COMPOSE_CACHE", str(ty_cache))
    series = _series(tmp_path, None)
    out = tmp_path / "semantic.json"
    rc = main(["semantic-check", "--onto", "v0.30.0", "--repo", str(arrival), "--series", str(series),
               "--json", str(out)])  # fmt: skip
    text = capsys.readouterr().out
    assert rc == 2, text
    import json

    findings = json.loads(out.read_text())["compose-38476-v0.30.0"]["findings"]
    by_entry = {(f["entry"], f["rule"]) for f in findings if f["file"] == PP_UTILS}
    assert ("fix-renamed-method", "missing-attribute") in by_entry, text
    assert ("fix-unknown-keyword", "unknown-argument") in by_entry, text
    assert not any(f["entry"] == "fix-harmless" for f in findings), text
    assert any("broadcast_draft" in f["message"] for f in findings)
    assert any("draft_tokens" in f["message"] for f in findings)
    assert all(f["accepted"] is None for f in findings)
    assert "NEW: vllm/v1/worker/gpu/pp_utils.py:" in text


@pytest.mark.sdist
@pytest.mark.slow
def test_a_baseline_entry_accepts_its_finding_with_its_reason_and_only_on_its_releases(
    arrival, ty_cache, tmp_path, capsys, monkeypatch
):
    monkeypatch.setenv("VLLM_COMPOSE_CACHE", str(ty_cache))
    baseline = """
[[accept]]
file = "vllm/v1/worker/gpu/pp_utils.py"
rule = "missing-attribute"
message = "*broadcast_draft*"
tags = ">=0.30.0"
reason = "the test accepts it"

[[accept]]
file = "vllm/v1/worker/gpu/pp_utils.py"
rule = "unknown-argument"
message = "*draft_tokens*"
tags = "<0.30.0"
reason = "another release only"
"""
    series = _series(tmp_path, baseline)
    rc = main(["semantic-check", "--onto", "v0.30.0", "--repo", str(arrival), "--series", str(series)])
    text = capsys.readouterr().out
    assert rc == 2  # the keyword finding is accepted only below v0.30.0: still new here
    assert "accepted (the test accepts it)" in text and "broadcast_draft" in text
    new = [ln for ln in text.splitlines() if ln.strip().startswith("NEW:")]
    assert new and all("fix-unknown-keyword" in ln or "fix-renamed-method" not in ln for ln in new)


def test_surplus_is_a_multiset_difference_that_ignores_lines():
    a = Diagnostic("f.py", 3, "error", "r", "m")
    moved = Diagnostic("f.py", 9, "error", "r", "m")
    other = Diagnostic("f.py", 4, "error", "r", "other")
    assert surplus([a], [moved]) == []
    assert surplus([a], [moved, a, other]) == [a, other]  # one of the two "m" is new; which line is the later one


def test_concise_output_is_parsed_and_the_summary_ignored():
    text = (
        "vllm/x.py:12:5: error[unresolved-attribute] Object of type `A` has no attribute `b`\n"
        "vllm/y.py:1:1: warning[unused-ignore-comment] Unused blanket `type: ignore` directive\n"
        "Found 2 diagnostics\n"
    )
    got = parse_concise(text)
    assert got == [
        Diagnostic("vllm/x.py", 12, "error", "unresolved-attribute", "Object of type `A` has no attribute `b`"),
        Diagnostic("vllm/y.py", 1, "warning", "unused-ignore-comment", "Unused blanket `type: ignore` directive"),
    ]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('[[accept]]\nfile = "a"\nrule = "r"\nmessage = "m"\ntags = ">=0.30.0"\n', "lacks reason"),
        ('[[accept]]\nfile = "a"\nrule = "r"\nmessage = "m"\ntags = "0.30"\nreason = "x"\n', "not a version range"),
        ("[[accept]\n", "cannot read"),
    ],
)
def test_a_malformed_baseline_is_refused_naming_the_entry(tmp_path, text, message):
    (tmp_path / "semantic-baseline.toml").write_text(text)
    with pytest.raises(SeriesError, match=message):
        load_baseline(tmp_path)


def test_the_series_baseline_loads_and_every_entry_has_a_reason():
    accepted = load_baseline(REPO / "series")
    assert accepted, "series/semantic-baseline.toml records the nine composes' accepted findings"
    assert all(len(a.reason) > 20 for a in accepted)


def test_a_baseline_pattern_takes_brackets_literally_and_star_as_any_text():
    from vllm_compose.semantic import Accepted

    message = "Return type does not match returned value: expected `dict[str, Tensor] | None`, found `dict[str, X]`"
    d = Diagnostic("vllm/v1/worker/gpu/pp_utils.py", 124, "error", "invalid-explicit-return", message)
    exact = Accepted("vllm/v1/worker/gpu/pp_utils.py", d.rule, message, ">=0.26.0,<0.30.0", "r")
    star = Accepted("vllm/*.py", d.rule, "Return type does not match*found `dict[str, X]`", ">=0.26.0", "r")
    assert exact.matches("0.26.0", d) and star.matches("0.33.0", d)
    assert not exact.matches("0.30.0", d)  # outside its releases
    assert not Accepted("vllm/*.py", d.rule, "Return type*[str, Y]*", ">=0.26.0", "r").matches("0.26.0", d)
    assert not Accepted("vllm/v1/*", "other-rule", "*", ">=0.26.0", "r").matches("0.26.0", d)


# --- the diagnostics cache (`_FindingsStore`): ty once per tree, ty version and environment ---------------------------


def _one_commit_repo(tmp_path: Path):
    repo = pygit2.init_repository(str(tmp_path / "r"), bare=True)
    index = pygit2.Index()
    index.add(pygit2.IndexEntry("vllm/x.py", repo.create_blob(b"X = 1\n"), pygit2.GIT_FILEMODE_BLOB))
    sig = pygit2.Signature("t", "t@example.invalid", 1_700_000_000, 0)
    oid = repo.create_commit(None, sig, sig, "c", index.write_tree(repo), [])
    return repo, repo[oid].peel(pygit2.Commit)


def test_ty_runs_once_per_tree_and_version_and_a_damaged_file_is_checked_again(tmp_path, monkeypatch):
    from vllm_compose import semantic

    ran = []
    found = [Diagnostic("vllm/x.py", 1, "error", "unresolved-attribute", "no `b`")]
    monkeypatch.setattr(semantic, "run_ty", lambda tree, env=None: ran.append(tree) or list(found))
    repo, commit = _one_commit_repo(tmp_path)
    root = tmp_path / "cache"
    store = semantic._FindingsStore(root, "ty 0.0.1", Path("/env"))

    first = semantic._TreeRunner(repo, None, store)
    assert first.diagnostics(commit) == found and (first.runs, first.cached) == (1, 0)
    again = semantic._TreeRunner(repo, None, semantic._FindingsStore(root, "ty 0.0.1", Path("/env")))
    assert again.diagnostics(commit) == found and (again.runs, again.cached) == (0, 1)
    assert len(ran) == 1
    # another ty, or another environment, checks again
    for other in (("ty 0.0.2", Path("/env")), ("ty 0.0.1", Path("/other-env"))):
        runner = semantic._TreeRunner(repo, None, semantic._FindingsStore(root, *other))
        assert runner.diagnostics(commit) == found and runner.runs == 1
    assert len(ran) == 3
    # a damaged file is treated as missing, checked again and written whole
    path = store.dir / f"{commit.tree_id}.json"
    path.write_text('{"diagnostics": [{"file": "vllm/x.py"')
    mended = semantic._TreeRunner(repo, None, store)
    assert mended.diagnostics(commit) == found and mended.runs == 1
    assert store.get(str(commit.tree_id)) == found
    assert not [p for p in store.dir.iterdir() if p.name.startswith(".incoming-")]


def test_a_cache_folder_that_cannot_be_written_does_not_fail_the_check(tmp_path, monkeypatch):
    from vllm_compose import semantic

    monkeypatch.setattr(semantic, "run_ty", lambda tree, env=None: [])
    repo, commit = _one_commit_repo(tmp_path)
    blocker = tmp_path / "cache"
    blocker.write_text("a file where the cache folder would be")
    runner = semantic._TreeRunner(repo, None, semantic._FindingsStore(blocker, "ty", Path("/env")))
    assert runner.diagnostics(commit) == [] and runner.runs == 1
    assert blocker.read_text() == "a file where the cache folder would be"
