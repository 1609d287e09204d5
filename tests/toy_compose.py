"""The toy upstream of the compose tests: a small package released as v1.0.0 ... v1.4.0, a "PR" against v1.0.0
served through the cache (as a pinned URL + sha256 would be), a local skew fix, the series naming both, and the CLI
calls the tests make. The fixtures `toy_upstream` and `toy_series` (conftest.py) build them per test.
"""

from __future__ import annotations

import hashlib
import subprocess
import textwrap
from pathlib import Path

from vllm_compose.cache import Cache
from vllm_compose.cli import main

MOD_V1 = textwrap.dedent(
    """\
    import os


    def greet(name, *, loud=False):
        text = "hello " + name
        if loud:
            text = text.upper()
        return text


    def farewell(name):
        return "bye " + name


    class Engine:
        def __init__(self, size):
            self.size = size
            self.steps = 0

        def step(self, batch):
            self.steps += 1
            return [x * self.size for x in batch]
    """
)

#: the PR: a new keyword parameter threaded into greet(), and a new method on Engine
PR_PATCH = textwrap.dedent(
    """\
    diff --git a/pkg/mod.py b/pkg/mod.py
    --- a/pkg/mod.py
    +++ b/pkg/mod.py
    @@ -1,10 +1,12 @@
     import os


    -def greet(name, *, loud=False):
    +def greet(name, *, loud=False, suffix=""):
         text = "hello " + name
         if loud:
             text = text.upper()
    +    if suffix:
    +        text += suffix
         return text


    @@ -20,3 +22,6 @@ class Engine:
         def step(self, batch):
             self.steps += 1
             return [x * self.size for x in batch]
    +
    +    def reset(self):
    +        self.steps = 0
    """
)

FIX_PATCH = textwrap.dedent(
    """\
    From 0000000000000000000000000000000000000000 Mon Sep 17 00:00:00 2001
    From: Fixer <fixer@example.invalid>
    Date: Tue, 14 Nov 2023 22:13:20 +0000
    Subject: [PATCH] Make farewell honour the new suffix

    The PR adds `suffix` to greet() only; our users call farewell() too.
    ---
    diff --git a/pkg/mod.py b/pkg/mod.py
    --- a/pkg/mod.py
    +++ b/pkg/mod.py
    @@ -11,6 +11,6 @@ def greet(name, *, loud=False, suffix=""):


    -def farewell(name):
    -    return "bye " + name
    +def farewell(name, suffix=""):
    +    return "bye " + name + suffix


    """
)


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout.strip()


def commit_tag(work: Path, tag: str, files: dict[str, str]) -> None:
    for rel, text in files.items():
        p = work / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    git(work, "add", "-A")
    git(work, "commit", "-qm", f"release {tag}")
    git(work, "tag", tag)


def make_upstream(tmp_path: Path) -> Path:
    """A repo with releases: v1.0.0 base; v1.1.0 lines added above (offset); v1.2.0 drift next to a hunk
    (merge); v1.3.0 the PR merged verbatim; v1.4.0 the PR merged in a tweaked form (only the method)."""
    work = tmp_path / "vllm"
    work.mkdir()
    git(work, "init", "-q", "-b", "main")
    commit_tag(work, "v1.0.0", {"pkg/mod.py": MOD_V1, "pkg/__init__.py": ""})
    offset = '"""The toy module."""\n\nDEBUG = False\n' + MOD_V1
    commit_tag(work, "v1.1.0", {"pkg/mod.py": offset})
    drift = MOD_V1.replace('    text = "hello " + name\n', '    text = "hello, " + name  # comma\n')
    commit_tag(work, "v1.2.0", {"pkg/mod.py": drift})
    merged = (
        MOD_V1.replace("def greet(name, *, loud=False):", 'def greet(name, *, loud=False, suffix=""):').replace(
            "        text = text.upper()\n    return text",
            "        text = text.upper()\n    if suffix:\n        text += suffix\n    return text",
        )
        + "\n    def reset(self):\n        self.steps = 0\n"
    )
    commit_tag(work, "v1.3.0", {"pkg/mod.py": merged})
    tweaked = MOD_V1 + "\n    def reset(self):\n        self.steps = 0\n"
    commit_tag(work, "v1.4.0", {"pkg/mod.py": tweaked})
    git(work, "checkout", "-q", "--detach")
    return work


def make_series(tmp_path: Path) -> Path:
    """A series: the PR (pinned by sha256, content seeded into the cache) and a local fix."""
    d = tmp_path / "series"
    (d / "patches").mkdir(parents=True)
    (d / "patches" / "0001-farewell-suffix.patch").write_text(FIX_PATCH)
    sha = hashlib.sha256(PR_PATCH.encode()).hexdigest()
    Cache().put_bytes(PR_PATCH.encode())
    (d / "series.toml").write_text(
        textwrap.dedent(
            f"""\
            [series]
            name = "toy"

            [[entry]]
            id = "pr101"
            pr = 101
            pr_url = "https://example.invalid/pull/101"
            title = "Add a suffix to greet and Engine.reset"
            upstream_status = "Submitted"
            why = "users need it"
            [entry.source]
            url = "https://example.invalid/pr101.diff"
            sha256 = "{sha}"

            [[entry]]
            id = "fix-farewell"
            file = "patches/0001-farewell-suffix.patch"
            title = "Make farewell honour the new suffix"
            upstream_status = "Inappropriate"
            why = "skew between the PR and our users"
            """
        )
    )
    return d


def compose(series_dir, repo, tag, *extra, json_out=None):
    argv = ["rebase", "--onto", tag, "--series", str(series_dir), "--repo", str(repo), "--offline", "-q"]
    if json_out:
        argv += ["--json", str(json_out)]
    return main(argv + list(extra))


def resume(series_dir, repo, json_out=None):
    """`rebase --continue` through the CLI, as a user runs it after resolving a conflict."""
    argv = ["rebase", "--continue", "--series", str(series_dir), "--repo", str(repo), "--offline", "-q"]
    if json_out:
        argv += ["--json", str(json_out)]
    return main(argv)


def branch_log(repo: Path, branch: str) -> list[str]:
    tag = branch.rsplit("-", 1)[-1]
    return git(repo, "log", "--format=%s", f"{tag}..{branch}").splitlines()[::-1]
