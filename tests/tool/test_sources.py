"""Sources: the content-addressed cache, PR content, and releases imported from (fake and real) PyPI sdists.

The network is replaced by `fake_http` (canned answers) or absent; sdists are small look-alike tarballs built
here. The one `sdist` test imports the real vLLM 0.26.0 sdist, downloaded once into the user's real cache.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import subprocess
import sys
import tarfile
import textwrap

import pygit2
import pytest

from vllm_compose import gitstore, index, releases, sources
from vllm_compose.cache import SEEDED_ORIGIN, Cache, seed_cache
from vllm_compose.errors import SeriesError, SourceError
from vllm_compose.series import Entry, Source, tag_of_version, version_of_tag

INDEX = "https://index.example.invalid/simple"
PAGE = INDEX + "/vllm/"
FILES = "https://files.example.invalid/packages/"

PR_DIFF = b"""diff --git a/pkg/model.py b/pkg/model.py
index 1111111..2222222 100644
--- a/pkg/model.py
+++ b/pkg/model.py
@@ -1,2 +1,3 @@
 import os
+import sys
 x = 1
diff --git a/docs/notes.md b/docs/notes.md
--- a/docs/notes.md
+++ b/docs/notes.md
@@ -1 +1 @@
-old
+new
"""


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def pr_entry(**source) -> Entry:
    return Entry(id="pr7", kind="upstream-pr", upstream_status="Submitted", title="t", pr=7, source=Source(**source))


# -- look-alike sdists -------------------------------------------------------------------------------------------

VERSION_PY = b"__version__ = version = '1.2.0'\n__commit_id__ = commit_id = 'gabc1234'\n"


def _member(tar, name, data=b"", kind=tarfile.REGTYPE, mode=0o644, linkname="", mtime=1_600_000_000):
    info = tarfile.TarInfo(name)
    info.type = kind
    info.mode = mode
    info.mtime = mtime
    info.linkname = linkname
    if kind == tarfile.REGTYPE:
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    else:
        tar.addfile(info)


def make_sdist(version="1.2.0", extra=()) -> bytes:
    """A small sdist shaped like vLLM's: top folder, package files, an executable, a symlink inside."""
    top = f"vllm-{version}"
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz", format=tarfile.PAX_FORMAT) as tar:
        _member(tar, top, kind=tarfile.DIRTYPE, mode=0o755)
        _member(tar, f"{top}/vllm", kind=tarfile.DIRTYPE, mode=0o755)
        _member(tar, f"{top}/vllm/__init__.py", b"from vllm._version import __version__\n", mode=0o664)
        _member(tar, f"{top}/vllm/_version.py", VERSION_PY.replace(b"1.2.0", version.encode()))
        _member(tar, f"{top}/vllm/engine/core.py", b"def step():\n    return 1\n", mtime=1_600_000_500)
        _member(tar, f"{top}/tools/build.sh", b"#!/bin/sh\necho build\n", mode=0o775)
        _member(tar, f"{top}/docs/latest", kind=tarfile.SYMTYPE, linkname="../vllm/engine")
        _member(tar, f"{top}/vllm/./engine/util.py", b"U = 1\n")
        for args in extra:
            _member(tar, *args[:2], **args[2] if len(args) > 2 else {})
    return buf.getvalue()


def index_json(files: dict[str, bytes | str]) -> bytes:
    """A PEP 691 answer listing `files` (name -> content, or name -> sha256 for files not served)."""
    doc = {"meta": {"api-version": "1.1"}, "name": "vllm", "files": []}
    for name, content in files.items():
        digest = content if isinstance(content, str) else sha(content)
        doc["files"].append({"filename": name, "url": FILES + name, "hashes": {"sha256": digest}, "yanked": False})
    return json.dumps(doc).encode()


def serve_release(fake_http, sdist: bytes, version="1.2.0", others=("1.1.0", "1.3.0")):
    listing = {f"vllm-{v}.tar.gz": "0" * 64 for v in others}
    listing[f"vllm-{version}.tar.gz"] = sdist
    listing["vllm-1.2.0-cp38-abi3-manylinux_2_28_x86_64.whl"] = "1" * 64
    fake_http.serve(PAGE, index_json(listing), "application/vnd.pypi.simple.v1+json")
    fake_http.serve(FILES + f"vllm-{version}.tar.gz", sdist)


def tags(repo) -> list[str]:
    return sorted(r for r in repo.references if r.startswith("refs/tags/"))


# -- the cache ---------------------------------------------------------------------------------------------------


def test_cache_stores_by_content_and_verifies_on_read(cache):
    digest = cache.put_bytes(b"hello\n")
    assert digest == sha(b"hello\n")
    assert cache.blob_path(digest) == cache.root / "sha256" / digest
    assert cache.get(digest) == b"hello\n"
    assert oct(cache.blob_path(digest).stat().st_mode & 0o777) != oct(0o600)
    assert cache.get("f" * 64) is None


def test_corrupt_cache_file_is_removed_and_reported(cache):
    digest = cache.put_bytes(PR_DIFF)
    cache.blob_path(digest).write_bytes(b"bit rot")
    entry = pr_entry(url="https://example.invalid/7.diff", sha256=digest)
    with pytest.raises(SourceError) as exc:
        sources.fetch_entry_patch(entry, cache, offline=True)
    err = exc.value
    assert (
        f"cache file {cache.blob_path(digest)} is corrupt (sha256 {sha(b'bit rot')}, expected {digest})" in err.message
    )
    assert "it was removed; run again to re-download" in err.message
    assert err.entry == "pr7"
    assert not cache.blob_path(digest).exists()


def test_corrupt_cache_file_is_fetched_again_when_online(cache, fake_http):
    digest = cache.put_bytes(PR_DIFF)
    cache.blob_path(digest).write_bytes(b"bit rot")
    fake_http.serve("https://example.invalid/7.diff", PR_DIFF)
    entry = pr_entry(url="https://example.invalid/7.diff", sha256=digest)
    assert sources.fetch_entry_patch(entry, cache) == PR_DIFF
    assert cache.get(digest) == PR_DIFF


def test_a_corrupt_cache_file_that_cannot_be_fetched_again_is_named_with_the_network_error(cache, fake_http):
    """Online, a damaged copy is removed and downloaded again; when that download fails, the error says both: the
    file was corrupt (its sha256 and the pinned one) and removed, and why it could not be fetched."""
    digest = cache.put_bytes(PR_DIFF)
    cache.blob_path(digest).write_bytes(b"bit rot")
    entry = pr_entry(url="https://example.invalid/7.diff", sha256=digest)
    with pytest.raises(SourceError) as exc:
        sources.fetch_entry_patch(entry, cache)  # the fake network has no route to the URL
    message = exc.value.message
    assert message.startswith(
        f"cache file {cache.blob_path(digest)} is corrupt (sha256 {sha(b'bit rot')}, expected {digest}); it was "
        "removed, and cannot download https://example.invalid/7.diff (entry pr7): "
    ), message
    assert "fake network" in message and exc.value.entry == "pr7" and "--sources" in exc.value.hint
    assert not cache.blob_path(digest).exists()


def test_interrupted_download_leaves_nothing_in_the_cache(cache, fake_http):
    body = os.urandom(300_000)
    fake_http.serve("https://example.invalid/big.diff", body, fail_after=150_000)
    with pytest.raises(SourceError) as exc:
        index.download("https://example.invalid/big.diff", sha(body), cache)
    assert "connection reset" in exc.value.message
    assert "--sources" in exc.value.hint
    assert list(cache.blob_dir.iterdir()) == []  # no blob, no leftover temp file


def test_download_with_other_bytes_than_pinned_is_refused(cache, fake_http):
    fake_http.serve("https://example.invalid/7.diff", b"tampered")
    with pytest.raises(SourceError, match="expected " + "a" * 64):
        index.download("https://example.invalid/7.diff", "a" * 64, cache)
    assert list(cache.blob_dir.iterdir()) == []


def test_seed_cache_adds_every_file(tmp_path, cache):
    (tmp_path / "src" / "sub").mkdir(parents=True)
    (tmp_path / "src" / "7.diff").write_bytes(PR_DIFF)
    (tmp_path / "src" / "sub" / "vllm-1.2.0.tar.gz").write_bytes(b"not really")
    added = seed_cache(tmp_path / "src", cache)
    assert added == {"7.diff": sha(PR_DIFF), "sub/vllm-1.2.0.tar.gz": sha(b"not really")}
    assert cache.get(sha(PR_DIFF)) == PR_DIFF
    assert cache.lookup_name("vllm-1.2.0.tar.gz")[0] == sha(b"not really")
    with pytest.raises(SourceError, match="does not exist"):
        seed_cache(tmp_path / "nope", cache)


# -- PR content --------------------------------------------------------------------------------------------------


def test_offline_missing_source_names_entry_sha256_and_remedy(cache):
    entry = pr_entry(url="https://example.invalid/7.diff", sha256="b" * 64)
    with pytest.raises(SourceError) as exc:
        sources.fetch_entry_patch(entry, cache, offline=True)
    err = exc.value
    assert err.entry == "pr7"
    assert "b" * 64 in err.message
    assert "--sources DIR" in err.hint and "https://example.invalid/7.diff" in err.hint


def test_unreachable_network_is_a_source_error_with_hint(cache, fake_http):
    entry = pr_entry(url="https://example.invalid/7.diff", sha256="b" * 64)
    with pytest.raises(SourceError) as exc:
        sources.fetch_entry_patch(entry, cache)
    assert exc.value.entry == "pr7" and "cannot download" in exc.value.message
    assert "retry" in exc.value.hint and "--sources" in exc.value.hint


def test_url_source_from_seeded_cache_offline_with_path_filter(tmp_path, cache):
    (tmp_path / "s").mkdir()
    (tmp_path / "s" / "7.diff").write_bytes(PR_DIFF)
    seed_cache(tmp_path / "s", cache)
    entry = pr_entry(url="https://example.invalid/7.diff", sha256=sha(PR_DIFF), paths=("pkg/*",))
    data = sources.fetch_entry_patch(entry, cache, offline=True)
    assert b"pkg/model.py" in data and b"docs/notes.md" not in data
    entry = pr_entry(url="https://example.invalid/7.diff", sha256=sha(PR_DIFF), paths=("nothing/*",))
    with pytest.raises(SourceError, match="keeps no file"):
        sources.fetch_entry_patch(entry, cache, offline=True)


def test_a_seeded_file_that_is_not_the_pinned_one_is_named_with_both_sha256(tmp_path, cache, fake_http):
    # the person passed 7.diff with --sources, but an older copy: say so, not "cannot download ... pass --sources"
    (tmp_path / "s").mkdir()
    (tmp_path / "s" / "7.diff").write_bytes(PR_DIFF + b"stale\n")
    seed_cache(tmp_path / "s", cache)
    entry = pr_entry(url="https://example.invalid/7.diff", sha256=sha(PR_DIFF))
    want = f"7.diff in --sources has sha256 {sha(PR_DIFF + b'stale' + bytes([10]))}, the series pins {sha(PR_DIFF)}"
    with pytest.raises(SourceError) as offline:
        sources.fetch_entry_patch(entry, cache, offline=True)
    assert want in offline.value.message and offline.value.entry == entry.id
    fake_http.refuse("https://example.invalid/7.diff")
    with pytest.raises(SourceError) as online:
        sources.fetch_entry_patch(entry, cache)
    assert want in online.value.message and "pinned file" in online.value.hint


def test_downloaded_source_progress_reports_completion(cache, fake_http):
    fake_http.serve("https://example.invalid/7.diff", PR_DIFF)
    events = []
    entry = pr_entry(url="https://example.invalid/7.diff", sha256=sha(PR_DIFF))
    assert sources.fetch_entry_patch(entry, cache, progress=lambda *e: events.append(e)) == PR_DIFF
    assert events[-1] == ("download 7.diff", len(PR_DIFF), len(PR_DIFF))


def test_filter_patch_paths_on_plain_diffs_keeps_the_header():
    plain = b"Subject: x\n\n--- a/pkg/a.py\n+++ b/pkg/a.py\n@@ -1 +1 @@\n-a\n+b\n--- a/t/b.py\n+++ b/t/b.py\n@@ -1 +1 @@\n-a\n+b\n"
    out = sources.filter_patch_paths(plain, ["pkg/*"])
    assert out.startswith(b"Subject: x\n") and b"t/b.py" not in out and b"pkg/a.py" in out


def _git(cwd, *args, env):
    return subprocess.run(["git", *args], cwd=cwd, env=env, check=True, capture_output=True, text=True).stdout.strip()


@pytest.fixture
def pr_repo(tmp_path, git_env):
    """An upstream-like repo: base commit, then a two-commit PR branch, published as refs/pull/7/head."""
    up = tmp_path / "upstream"
    up.mkdir()
    _git(up, "init", "-q", "-b", "main", env=git_env)
    (up / "pkg").mkdir()
    (up / "pkg" / "model.py").write_text("import os\nx = 1\n")
    _git(up, "add", ".", env=git_env)
    _git(up, "commit", "-qm", "base", env=git_env)
    _git(up, "tag", "v1.0.0", env=git_env)
    base = _git(up, "rev-parse", "HEAD", env=git_env)
    _git(up, "checkout", "-qb", "pr", env=git_env)
    (up / "pkg" / "model.py").write_text("import os\nimport sys\nx = 1\n")
    _git(up, "commit", "-qam", "pr 1/2", env=git_env)
    c1 = _git(up, "rev-parse", "HEAD", env=git_env)
    (up / "docs").mkdir()
    (up / "docs" / "notes.md").write_text("new\n")
    _git(up, "add", ".", env=git_env)
    _git(up, "commit", "-qm", "pr 2/2", env=git_env)
    c2 = _git(up, "rev-parse", "HEAD", env=git_env)
    _git(up, "update-ref", "refs/pull/7/head", c2, env=git_env)
    _git(up, "checkout", "-q", "main", env=git_env)
    return up, base, c1, c2


def test_commit_source_diff_from_the_repository(pr_repo):
    up, base, c1, c2 = pr_repo
    repo = pygit2.Repository(str(up))
    entry = pr_entry(commits=(c1, c2))
    assert sources.resolve_entry_commits(entry, repo) == (pygit2.Oid(hex=base), pygit2.Oid(hex=c2))
    data = sources.fetch_entry_patch(entry, cache=Cache(), repo=repo, offline=True)
    assert b"+import sys" in data and b"+++ b/docs/notes.md" in data
    filtered = sources.fetch_entry_patch(pr_entry(commits=(c1, c2), paths=("docs/*",)), Cache(), repo=repo)
    assert b"pkg/model.py" not in filtered and b"docs/notes.md" in filtered


def test_commit_source_must_be_a_chain(pr_repo):
    up, base, c1, c2 = pr_repo
    with pytest.raises(SourceError, match="must be a chain"):
        sources.resolve_entry_commits(pr_entry(commits=(c2, c1)), pygit2.Repository(str(up)))


def test_commit_source_fetched_from_origin_pull_ref(pr_repo, tmp_path, git_env):
    up, base, c1, c2 = pr_repo
    target = tmp_path / "target"
    _git(
        tmp_path,
        "clone",
        "-q",
        "--no-local",
        "--single-branch",
        "-b",
        "main",
        str(up),
        str(target),
        env=git_env,
    )
    repo = pygit2.Repository(str(target))
    entry = pr_entry(commits=(c1, c2))
    assert sources.resolve_entry_commits(entry, repo) is None
    with pytest.raises(SourceError) as exc:
        sources.fetch_entry_patch(entry, Cache(), offline=True, repo=repo)
    assert "not in the repository" in exc.value.message and "pull/7/head" in exc.value.hint
    data = sources.fetch_entry_patch(entry, Cache(), repo=repo)
    assert b"+import sys" in data


# -- releases ----------------------------------------------------------------------------------------------------


def test_release_tags_parse(tmp_path, fake_http):
    assert str(version_of_tag("v0.26.0")) == "0.26.0"
    assert tag_of_version("0.26.0") == "v0.26.0"
    repo = gitstore.open_or_init_repo(tmp_path / "r")
    for tag in ("main", "0.26.0", "vnext"):
        # the one tag parser (series.version_of_tag): the same refusal as the compose's preflight
        with pytest.raises(SeriesError, match="does not name a release") as exc:
            releases.ensure_release(repo, tag, index_url=INDEX)
        assert exc.value.tag == tag
    assert fake_http.requests == []


def test_existing_tag_is_used_without_network(pr_repo, fake_http):
    up, base, *_ = pr_repo
    commit = releases.ensure_release(pygit2.Repository(str(up)), "v1.0.0", index_url=INDEX)
    assert str(commit.id) == base and fake_http.requests == []


def test_tag_is_fetched_from_origin_before_pypi(pr_repo, tmp_path, git_env, fake_http):
    up, base, *_ = pr_repo
    target = tmp_path / "target"
    target.mkdir()
    _git(target, "init", "-q", env=git_env)
    _git(target, "remote", "add", "origin", str(up), env=git_env)
    repo = pygit2.Repository(str(target))
    commit = releases.ensure_release(repo, "v1.0.0", index_url=INDEX)
    assert str(commit.id) == base and fake_http.requests == []


def test_release_imported_from_index_with_provenance(tmp_path, cache, fake_http):
    sdist = make_sdist()
    serve_release(fake_http, sdist)
    repo = gitstore.open_or_init_repo(tmp_path / "vllm")
    events = []
    commit = releases.ensure_release(repo, "v1.2.0", cache, lambda *e: events.append(e), index_url=INDEX)
    assert tags(repo) == ["refs/tags/v1.2.0"]
    assert repo.references["refs/tags/v1.2.0"].peel(pygit2.Commit).id == commit.id
    prov = releases.release_provenance(commit)
    assert prov == {
        "Sdist": "vllm-1.2.0.tar.gz",
        "Sdist-SHA256": sha(sdist),
        "Index": INDEX,
        "Upstream-Commit-Id": "gabc1234",
    }
    assert commit.author.name == "vllm-compose importer"
    assert commit.author.time == 1_600_000_500  # newest member: reproducible commit ids
    tree = commit.tree
    assert repo[tree["vllm/engine/core.py"].id].data == b"def step():\n    return 1\n"
    assert tree["vllm/__init__.py"].filemode == gitstore.BLOB_MODE  # 0664 -> 100644
    assert tree["tools/build.sh"].filemode == gitstore.EXEC_MODE
    assert tree["docs/latest"].filemode == gitstore.LINK_MODE
    assert repo[tree["docs/latest"].id].data == b"../vllm/engine"
    assert "vllm/engine/util.py" in tree  # "./" components dropped
    assert "vllm-1.2.0" not in tree
    assert {e[0] for e in events} == {"download vllm-1.2.0.tar.gz", "import vllm-1.2.0.tar.gz"}
    assert events[-1][1] == events[-1][2]

    fake_http.requests.clear()
    again = releases.ensure_release(repo, "v1.2.0", cache, index_url=INDEX)
    assert again.id == commit.id and fake_http.requests == []  # a second run downloads and imports nothing


def test_same_sdist_gives_the_same_commit_in_two_repositories(tmp_path, cache, fake_http):
    serve_release(fake_http, make_sdist())
    a = releases.ensure_release(gitstore.open_or_init_repo(tmp_path / "a"), "v1.2.0", cache, index_url=INDEX)
    b = releases.ensure_release(gitstore.open_or_init_repo(tmp_path / "b"), "v1.2.0", cache, index_url=INDEX)
    assert a.id == b.id


def test_html_index_is_understood(tmp_path, cache, fake_http):
    sdist = make_sdist()
    page = f'<html><body><a href="../../packages/vllm-1.2.0.tar.gz#sha256={sha(sdist)}">vllm-1.2.0.tar.gz</a></body></html>'
    fake_http.serve(PAGE, page.encode(), "text/html")
    fake_http.serve("https://index.example.invalid/packages/vllm-1.2.0.tar.gz", sdist)
    commit = releases.ensure_release(gitstore.open_or_init_repo(tmp_path / "r"), "v1.2.0", cache, index_url=INDEX)
    assert releases.release_provenance(commit)["Sdist-SHA256"] == sha(sdist)


@pytest.mark.parametrize("html", [False, True])
def test_index_lists_sdists_and_wheels_from_json_or_html(fake_http, html):
    wheel = "vllm-1.2.0-cp38-abi3-manylinux_2_28_x86_64.whl"
    rows = [
        ("vllm-1.2.0.tar.gz", "a" * 64, ""),
        (wheel, "B" * 64, ""),
        ("vllm-1.1.0.tar.gz", "c" * 64, "yanked"),
        ("other-1.0.0-py3-none-any.whl", "d" * 64, ""),
        ("vllm-notaversion.tar.gz", "e" * 64, ""),
    ]
    if html:
        links = "".join(
            f'<a href="../../packages/{n}#sha256={h}"{" data-yanked" if y else ""}>{n}</a>' for n, h, y in rows
        )
        fake_http.serve(PAGE, f"<html><body>{links}</body></html>".encode(), "text/html")
    else:
        doc = {
            "files": [{"filename": n, "url": FILES + n, "hashes": {"sha256": h}, "yanked": bool(y)} for n, h, y in rows]
        }
        fake_http.serve(PAGE, json.dumps(doc).encode(), "application/vnd.pypi.simple.v1+json")
    files = index.list_index_files(INDEX)
    assert [(f.filename, f.sha256, str(f.version), f.is_wheel) for f in files] == [
        ("vllm-1.2.0.tar.gz", "a" * 64, "1.2.0", False),
        (wheel, "b" * 64, "1.2.0", True),
    ]
    base = "https://index.example.invalid/packages/" if html else FILES
    assert files[1].url == base + wheel and files[1].index_url == INDEX


def test_index_without_the_project_is_index_unreachable(fake_http):
    fake_http.refuse(PAGE, 404)
    with pytest.raises(index.IndexUnreachable, match="answered 404") as exc:
        index.list_index_files(INDEX)
    assert "<index>/vllm/" in exc.value.hint


def test_version_not_on_the_index_lists_nearby_versions(tmp_path, cache, fake_http):
    serve_release(fake_http, make_sdist(), others=("1.0.0", "1.1.0", "1.3.0", "1.4.0", "2.0.0", "2.1.0"))
    repo = gitstore.open_or_init_repo(tmp_path / "r")
    with pytest.raises(SourceError) as exc:
        releases.ensure_release(repo, "v1.2.5", cache, index_url=INDEX)
    assert "nearby releases: 1.0.0, 1.1.0, 1.2.0, 1.3.0, 1.4.0, 2.0.0)" in exc.value.message
    assert exc.value.tag == "v1.2.5" and "--onto v1.3.0" in exc.value.hint
    assert tags(repo) == []


def test_a_version_past_the_newest_release_suggests_the_newest(tmp_path, cache, fake_http):
    serve_release(fake_http, make_sdist(), others=("1.0.0", "1.1.0", "1.3.0", "1.4.0", "2.0.0", "2.1.0"))
    repo = gitstore.open_or_init_repo(tmp_path / "r")
    with pytest.raises(SourceError) as exc:
        releases.ensure_release(repo, "v9.9.0", cache, index_url=INDEX)
    assert "nearby releases: 1.4.0, 2.0.0, 2.1.0)" in exc.value.message
    assert exc.value.hint == "pick a released version (e.g. --onto v2.1.0)"


def test_index_sha256_mismatch_is_refused(tmp_path, cache, fake_http):
    sdist = make_sdist()
    serve_release(fake_http, sdist)
    fake_http.serve(FILES + "vllm-1.2.0.tar.gz", sdist + b"\0")
    repo = gitstore.open_or_init_repo(tmp_path / "r")
    with pytest.raises(SourceError, match="expected " + sha(sdist)):
        releases.ensure_release(repo, "v1.2.0", cache, index_url=INDEX)
    assert tags(repo) == [] and list(cache.blob_dir.iterdir()) == []


def test_network_down_without_cache_says_how_to_proceed(tmp_path, cache, fake_http):
    repo = gitstore.open_or_init_repo(tmp_path / "r")
    with pytest.raises(SourceError) as exc:
        releases.ensure_release(repo, "v1.2.0", cache, index_url=INDEX)
    assert "cannot read the package index" in exc.value.message
    assert "--sources" in exc.value.hint and "retry" in exc.value.hint
    assert tags(repo) == []


def test_real_network_is_blocked_in_hermetic_tests(tmp_path, cache):
    # the conftest guard makes the real urllib path fail the way an offline machine does
    with pytest.raises(SourceError, match="cannot read the package index"):
        releases.ensure_release(gitstore.open_or_init_repo(tmp_path / "r"), "v1.2.0", cache, index_url=INDEX)


def test_offline_import_from_seeded_sdist(tmp_path, cache, fake_http):
    (tmp_path / "dl").mkdir()
    (tmp_path / "dl" / "vllm-1.2.0.tar.gz").write_bytes(make_sdist())
    seed_cache(tmp_path / "dl", cache)
    repo = gitstore.open_or_init_repo(tmp_path / "r")
    commit = releases.ensure_release(repo, "v1.2.0", cache, offline=True)
    assert fake_http.requests == []
    assert releases.release_provenance(commit)["Index"] == SEEDED_ORIGIN
    with pytest.raises(SourceError, match="not in the cache") as exc:
        releases.ensure_release(repo, "v1.3.0", cache, offline=True)
    assert "--sources" in exc.value.hint


def test_pip_index_url_follows_pip_environment(monkeypatch):
    monkeypatch.setenv("PIP_INDEX_URL", "https://mirror.example.invalid/simple/")
    assert index.pip_index_url() == "https://mirror.example.invalid/simple/"


MALICIOUS = {
    "parent-traversal": (("vllm-1.2.0/../../etc/cron.d/x", b"boom"), "'..' path component"),
    "absolute-path": (("/etc/passwd", b"root::0:0"), "absolute path"),
    "outside-top-folder": (("other/x.py", b"x"), "outside the top folder"),
    "git-dir": (("vllm-1.2.0/.git/hooks/post-checkout", b"#!/bin/sh"), ".git entry"),
    "symlink-absolute": (
        ("vllm-1.2.0/vllm/passwd", b"", {"kind": tarfile.SYMTYPE, "linkname": "/etc/passwd"}),
        "leaves the tree",
    ),
    "symlink-escaping": (
        ("vllm-1.2.0/vllm/up", b"", {"kind": tarfile.SYMTYPE, "linkname": "../../.."}),
        "leaves the tree",
    ),
    "hardlink": (
        ("vllm-1.2.0/vllm/hard", b"", {"kind": tarfile.LNKTYPE, "linkname": "vllm-1.2.0/vllm/__init__.py"}),
        "hard link",
    ),
    "char-device": (("vllm-1.2.0/vllm/null", b"", {"kind": tarfile.CHRTYPE}), "device file"),
    "fifo": (("vllm-1.2.0/vllm/pipe", b"", {"kind": tarfile.FIFOTYPE}), "device file, FIFO"),
    "file-and-folder": (("vllm-1.2.0/vllm/engine/core.py/x.py", b"x"), "which is a file"),
}


@pytest.mark.parametrize("case", sorted(MALICIOUS))
def test_malicious_sdist_is_refused_without_leaving_a_tag(case, tmp_path, cache, fake_http):
    member, why = MALICIOUS[case]
    sdist = make_sdist(extra=[member])
    serve_release(fake_http, sdist)
    repo = gitstore.open_or_init_repo(tmp_path / "r")
    with pytest.raises(SourceError) as exc:
        releases.ensure_release(repo, "v1.2.0", cache, index_url=INDEX)
    assert why in exc.value.message
    assert "was not imported" in exc.value.message and exc.value.tag == "v1.2.0"
    assert list(repo.references) == []


def test_symlink_chain_escaping_through_another_link_is_refused(tmp_path, cache, fake_http):
    # each link alone looks harmless; `b` goes up through `a`, which already points at the top folder
    extra = [
        ("vllm-1.2.0/sub/a", b"", {"kind": tarfile.SYMTYPE, "linkname": ".."}),
        ("vllm-1.2.0/b", b"", {"kind": tarfile.SYMTYPE, "linkname": "sub/a/.."}),
    ]
    serve_release(fake_http, make_sdist(extra=extra))
    repo = gitstore.open_or_init_repo(tmp_path / "r")
    with pytest.raises(SourceError, match="leaves the tree"):
        releases.ensure_release(repo, "v1.2.0", cache, index_url=INDEX)
    assert list(repo.references) == []


def test_truncated_sdist_is_refused(tmp_path, cache, fake_http):
    sdist = make_sdist()[:-200]
    serve_release(fake_http, sdist)
    repo = gitstore.open_or_init_repo(tmp_path / "r")
    with pytest.raises(SourceError, match="not a readable tar.gz"):
        releases.ensure_release(repo, "v1.2.0", cache, index_url=INDEX)
    assert list(repo.references) == []


# -- the real release --------------------------------------------------------------------------------------------


@pytest.mark.sdist
@pytest.mark.slow
def test_real_vllm_0_26_0_sdist_import(tmp_path, real_cache):
    """Import vLLM 0.26.0 from PyPI through the user's cache (downloaded once, reused by later runs)."""
    name = "vllm-0.26.0.tar.gz"
    known = real_cache.lookup_name(name)
    if not (known and real_cache.has(known[0])):
        try:
            info = index.find_sdist(version_of_tag("v0.26.0"), index.pip_index_url())
        except SourceError as exc:
            pytest.skip(f"{name} is not cached in {real_cache.root} and PyPI is unreachable ({exc.message})")
    repo = gitstore.open_or_init_repo(tmp_path / "vllm")
    commit = releases.ensure_release(repo, "v0.26.0", real_cache)
    prov = releases.release_provenance(commit)
    assert prov["Sdist"] == name
    assert prov["Sdist-SHA256"] == "23e9fa19d7e20ce7dcc1c074d41503e2116d23f19e688f5d5ea91b741f958502"
    assert prov["Upstream-Commit-Id"] == "gf2654939e"
    assert repo.references["refs/tags/v0.26.0"].peel(pygit2.Commit).id == commit.id
    version_py = repo[commit.tree["vllm/_version.py"].id].data
    assert b"__version__ = version = '0.26.0'" in version_py
    assert "vllm/model_executor/layers/sparse_attn_indexer.py" in commit.tree
    assert "vllm/v1/worker/gpu/spec_decode/autoregressive/speculator.py" in commit.tree
    if not known:
        assert real_cache.lookup_name(name)[0] == info.sha256


def _header_offsets(tar_bytes: bytes) -> list[int]:
    """The byte offsets of the member headers of an uncompressed tar."""
    offsets = []
    with tarfile.open(fileobj=io.BytesIO(tar_bytes), mode="r:") as tar:
        for member in tar:
            offsets.append(member.offset)
    return offsets


def _regzip(tar_bytes: bytes) -> bytes:
    import gzip

    return gzip.compress(tar_bytes, mtime=0)


def test_a_corrupt_second_header_is_refused_not_imported_as_a_one_file_release(tmp_path, cache, fake_http):
    import gzip

    raw = bytearray(gzip.decompress(make_sdist()))
    second = _header_offsets(bytes(raw))[1]
    raw[second + 148 : second + 156] = b"0000000\0"  # a wrong checksum in the second header
    serve_release(fake_http, _regzip(bytes(raw)))
    repo = gitstore.open_or_init_repo(tmp_path / "r")
    with pytest.raises(SourceError) as exc:
        releases.ensure_release(repo, "v1.2.0", cache, index_url=INDEX)
    assert f"corrupt tar header at byte {second}" in exc.value.message and "was not imported" in exc.value.message
    assert list(repo.references) == []


def test_an_archive_cut_between_members_is_refused(tmp_path, cache, fake_http):
    """Cut at a header boundary and gzipped whole again: every block reads, but the archive's end is missing."""
    import gzip

    raw = gzip.decompress(make_sdist())
    cut = _header_offsets(raw)[3]
    serve_release(fake_http, _regzip(raw[:cut]))
    repo = gitstore.open_or_init_repo(tmp_path / "r")
    with pytest.raises(SourceError, match="without its end-of-archive blocks"):
        releases.ensure_release(repo, "v1.2.0", cache, index_url=INDEX)
    assert list(repo.references) == []


def test_a_large_member_streams_into_its_blob_with_flat_memory(tmp_path):
    """A 512 MiB member (zeros: the sdist is small) is imported with a peak RSS growth far below its size."""
    size = 512 << 20
    sdist = tmp_path / "vllm-1.2.0.tar.gz"
    with tarfile.open(sdist, mode="w:gz", compresslevel=1) as tar:
        info = tarfile.TarInfo("vllm-1.2.0/vllm/big.bin")
        info.size = size
        with open("/dev/zero", "rb") as zeros:
            tar.addfile(info, zeros)
        _member(tar, "vllm-1.2.0/vllm/__init__.py", b"")
    probe = textwrap.dedent(
        f"""\
        import resource, pygit2
        from vllm_compose import releases
        repo = pygit2.init_repository({str(tmp_path / "r")!r}, bare=True)
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        commit = releases.import_sdist(repo, "v1.2.0", {str(sdist)!r})
        after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        blob = repo[commit.tree["vllm/big.bin"].id]
        print(after - before, blob.size)
        """
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    growth_kib, blob_size = map(int, done.stdout.split())
    assert blob_size == size
    assert growth_kib < 64 * 1024, f"peak RSS grew by {growth_kib} KiB for a {size >> 20} MiB member"
