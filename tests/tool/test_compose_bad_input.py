"""Bad input to the compose: each case gets a clear error (what, which object, how to proceed), a non-zero exit,
and leaves no branch, no state ref and no changed series file behind.

Each case is a function that spoils the toy setup of test_compose.py; the table below is the count of cases.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import pygit2
import pytest
from toy_compose import FIX_PATCH, compose, git

BRANCH = "compose-101-v1.0.0"


def add_local_entry(series: Path, name: str, data: bytes) -> None:
    (series / "patches" / name).write_bytes(data)
    with open(series / "series.toml", "a") as fh:
        fh.write(
            f'\n[[entry]]\nid = "extra"\nfile = "patches/{name}"\ntitle = "Extra"\n'
            'upstream_status = "Inappropriate"\nwhy = "test"\n'
        )


def malformed_patch(series, repo):
    bad = FIX_PATCH.replace("@@ -11,6 +11,6 @@", "@@ -11,9 +11,6 @@")
    add_local_entry(series, "0002-bad.patch", bad.encode())
    return 3, "0002-bad.patch"


def binary_patch(series, repo):
    data = (
        "From 0000000000000000000000000000000000000000 Mon Sep 17 00:00:00 2001\nFrom: A <a@example.invalid>\n"
        "Subject: [PATCH] Add a logo\n\nWhy: branding.\n---\ndiff --git a/logo.png b/logo.png\nnew file mode 100644\n"
        "index 0000000..1111111\nBinary files /dev/null and b/logo.png differ\n"
    )
    add_local_entry(series, "0002-binary.patch", data.encode())
    return 3, "binary"


def duplicate_ids(series, repo):
    text = (series / "series.toml").read_text()
    (series / "series.toml").write_text(text.replace('id = "fix-farewell"', 'id = "pr101"'))
    return 3, "pr101"


def unknown_key(series, repo):
    text = (series / "series.toml").read_text()
    (series / "series.toml").write_text(text.replace('why = "users need it"', 'why = "users need it"\nfixes = 1'))
    return 3, "fixes"


def missing_patch_file(series, repo):
    (series / "patches" / "0001-farewell-suffix.patch").unlink()
    return 3, "0001-farewell-suffix.patch"


def tag_nowhere(series, repo):
    return 3, "v7.7.7", "v7.7.7"


def not_a_release_tag(series, repo):
    return 3, "release", "main"


def dirty_repo(series, repo):
    (repo / "pkg" / "mod.py").write_text("local edit\n")
    return 3, "uncommitted"


def repo_is_a_plain_folder(series, repo):
    plain = repo.parent / "plain"
    plain.mkdir()
    (plain / "notes.txt").write_text("mine\n")
    return 3, "not a git repository", "v1.0.0", plain


def corrupted_cache_file(series, repo):
    from vllm_compose.cache import Cache

    cache = Cache()
    sha = next(p.name for p in (cache.root / "sha256").rglob("*") if p.is_file() and len(p.name) == 64)
    path = next(p for p in (cache.root / "sha256").rglob(sha))
    path.write_bytes(b"corrupted")
    return 3, "corrupt"


def resolves_a_pr_hunk_that_does_not_exist(series, repo):
    text = (series / "series.toml").read_text()
    fix = 'why = "skew between the PR and our users"'
    (series / "series.toml").write_text(text.replace(fix, fix + '\nresolves = ["pr101:pkg/mod.py#7"]'))
    return 3, "resolves item 'pr101:pkg/mod.py#7' names a hunk that the patch of 'pr101' does not have"


def resolves_a_pr_file_that_does_not_exist(series, repo):
    text = (series / "series.toml").read_text()
    fix = 'why = "skew between the PR and our users"'
    (series / "series.toml").write_text(text.replace(fix, fix + '\nresolves = ["pr101:pkg/other.py#1"]'))
    return 3, "names a file that the patch of 'pr101' does not have"


CASES = {
    f.__name__: f
    for f in (
        malformed_patch,
        binary_patch,
        duplicate_ids,
        unknown_key,
        missing_patch_file,
        tag_nowhere,
        not_a_release_tag,
        dirty_repo,
        repo_is_a_plain_folder,
        corrupted_cache_file,
        resolves_a_pr_hunk_that_does_not_exist,
        resolves_a_pr_file_that_does_not_exist,
    )
}


def test_bad_input_cases_are_counted():
    assert len(CASES) == 12


@pytest.mark.parametrize("case", sorted(CASES))
def test_bad_input(case, toy_series, toy_upstream, capsys):
    spec = CASES[case](toy_series, toy_upstream)
    toml_before = (toy_series / "series.toml").read_bytes()
    code, needle = spec[0], spec[1]
    tag = spec[2] if len(spec) > 2 else "v1.0.0"
    repo_dir = spec[3] if len(spec) > 3 else toy_upstream
    assert compose(toy_series, repo_dir, tag) == code
    err = capsys.readouterr().err
    assert err.startswith("error: ") and needle.lower() in err.lower(), err
    assert "hint:" in err, err
    assert "Traceback" not in err
    if (repo_dir / ".git").exists():
        repo = pygit2.Repository(str(repo_dir))
        refs = [r for r in repo.references if r.startswith(("refs/heads/compose-", "refs/vllm-compose/"))]
        assert refs == [], refs
    assert (toy_series / "series.toml").read_bytes() == toml_before


def test_crlf_and_non_utf8_files_compose(toy_series, toy_upstream, tmp_path):
    """A CRLF file and a file with non-UTF-8 bytes are patched byte-exactly (line ends and bytes kept)."""
    crlf = b"first\r\nsecond\r\nthird\r\n"
    latin = "caf\xe9 = 1\nvalue = 2\nend = 3\n".encode("latin-1")
    git(toy_upstream, "checkout", "-q", "v1.0.0")
    (toy_upstream / "pkg" / "win.txt").write_bytes(crlf)
    (toy_upstream / "pkg" / "latin.py").write_bytes(latin)
    git(toy_upstream, "add", "-A")
    git(toy_upstream, "commit", "-qm", "release v1.5.0")
    git(toy_upstream, "tag", "v1.5.0")
    patch = textwrap.dedent(
        """\
        From 0000000000000000000000000000000000000000 Mon Sep 17 00:00:00 2001
        From: A <a@example.invalid>
        Subject: [PATCH] Touch odd files

        Exercise CRLF and latin-1 bytes.
        ---
        diff --git a/pkg/win.txt b/pkg/win.txt
        --- a/pkg/win.txt
        +++ b/pkg/win.txt
        @@ -1,3 +1,3 @@
         first\r
        -second\r
        +SECOND\r
         third\r
        diff --git a/pkg/latin.py b/pkg/latin.py
        --- a/pkg/latin.py
        +++ b/pkg/latin.py
        @@ -1,3 +1,3 @@
         caf\xe9 = 1
        -value = 2
        +value = 20
         end = 3
        """
    ).encode("latin-1")
    add_local_entry(toy_series, "0002-odd.patch", patch)
    assert compose(toy_series, toy_upstream, "v1.5.0") == 0
    repo = pygit2.Repository(str(toy_upstream))
    tree = repo.revparse_single("compose-101-v1.5.0").peel(pygit2.Commit).tree
    assert repo[tree["pkg/win.txt"].id].data == b"first\r\nSECOND\r\nthird\r\n"
    assert repo[tree["pkg/latin.py"].id].data == "caf\xe9 = 1\nvalue = 20\nend = 3\n".encode("latin-1")


@pytest.mark.parametrize("tag", ["v2.0.0 ", "vv2.0.0", "v2.0"])
def test_a_misspelt_tag_is_refused_before_anything_is_made(toy_series, tmp_path, capsys, tag):
    repo = tmp_path / "no-such-repo"
    assert compose(toy_series, repo, tag) == 3
    assert "does not name a release version" in capsys.readouterr().err
    assert not repo.exists()  # no folder, tag or branch named after the typo


def test_a_release_no_pr_entry_applies_to_is_refused(toy_series, toy_upstream, capsys):
    text = (toy_series / "series.toml").read_text()
    entry = text.index('id = "pr101"')
    cut = text.index("[[entry]]", entry) if "[[entry]]" in text[entry:] else len(text)
    (toy_series / "series.toml").write_text(
        text[:cut].replace('id = "pr101"', 'id = "pr101"\ntags = ">=9.0.0"', 1) + text[cut:]
    )
    assert compose(toy_series, toy_upstream, "v2.0.0") == 3
    err = capsys.readouterr().err
    assert "no upstream PR entry of the series applies to v2.0.0 (pr101 >=9.0.0)" in err and "hint:" in err
    assert "compose-101-v2.0.0" not in git(toy_upstream, "branch", "--list")


def test_a_missing_pr_hunk_in_resolves_lists_the_hunks_that_exist(toy_series, toy_upstream, capsys):
    resolves_a_pr_hunk_that_does_not_exist(toy_series, toy_upstream)
    assert compose(toy_series, toy_upstream, "v1.0.0") == 3
    assert "hint: pr101's patch has hunks: pkg/mod.py#1..2" in capsys.readouterr().err


def test_validate_checks_resolves_against_a_cached_pr_diff(toy_series, toy_upstream, capsys):
    from vllm_compose.cli import main

    assert main(["validate", "--series", str(toy_series)]) == 0  # nothing names pr101 yet
    resolves_a_pr_hunk_that_does_not_exist(toy_series, toy_upstream)
    assert main(["validate", "--series", str(toy_series)]) == 3  # the fixture put pr101's diff into the cache
    err = capsys.readouterr().err
    assert "'pr101:pkg/mod.py#7' names a hunk" in err and "pkg/mod.py#1..2" in err


def test_validate_says_which_resolves_it_could_not_check(toy_series, toy_upstream, capsys, tmp_path):
    from vllm_compose.cli import main

    text = (toy_series / "series.toml").read_text()
    fix = 'why = "skew between the PR and our users"'
    (toy_series / "series.toml").write_text(text.replace(fix, fix + '\nresolves = ["pr101:pkg/mod.py#2"]'))
    assert main(["validate", "--series", str(toy_series), "--cache", str(tmp_path / "empty-cache")]) == 0
    assert "resolves naming pr101 not checked: the diff is not in the cache" in capsys.readouterr().out
    assert main(["validate", "--series", str(toy_series)]) == 0
    assert "resolves checked against the cached diffs of pr101" in capsys.readouterr().out


def test_a_crlf_patch_onto_lf_files_says_the_line_endings_differ(toy_series, toy_upstream, capsys):
    """A patch saved with CRLF line ends (an editor, a mail client) onto a release whose files end lines in LF."""
    text = (toy_series / "patches" / "0001-farewell-suffix.patch").read_text()
    (toy_series / "patches" / "0001-farewell-suffix.patch").write_bytes(text.replace("\n", "\r\n").encode())
    assert compose(toy_series, toy_upstream, "v1.0.0") == 3
    err = capsys.readouterr().err
    assert "entry 'fix-farewell', file 'pkg/mod.py', hunk 1: line endings differ: the patch's lines end in CRLF" in err
    assert "hint: convert 0001-farewell-suffix.patch to LF line ends" in err
    assert "compose-101-v1.0.0" not in git(toy_upstream, "branch", "--list")


def test_a_repo_path_with_a_typo_is_refused_unless_init(toy_series, toy_upstream, capsys):
    typo = toy_upstream.parent / "vlm"
    assert compose(toy_series, typo, "v1.0.0") == 3
    err = capsys.readouterr().err
    assert f"the repository folder '{typo}' does not exist" in err and "rebase --init" in err
    assert not typo.exists()  # nothing created under the misspelt name
    # --init creates it (the release is then looked up there: offline and empty, it is not found)
    assert compose(toy_series, typo, "v1.0.0", "--init") == 3
    assert (typo / ".git").is_dir()
    assert "v1.0.0" in capsys.readouterr().err
