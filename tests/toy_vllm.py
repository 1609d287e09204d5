"""A toy look-alike of vLLM for the artifact tests (wheel, editable, image, CI): a `vllm/` package written here,
a "PR" patch and a local fix, a series folder naming them, and an installed site-packages layout.

Nothing here is vLLM code: the module is a few lines shaped like a runner with a `propose()` method.
"""

from __future__ import annotations

import base64
import csv
import hashlib
import io
import subprocess
import textwrap
from pathlib import Path

# ruff: noqa: W293 -- blank context lines of the diffs below are a single space, as in any unified diff

VERSION = "0.26.0"
TAG = "v0.26.0"

VERSION_PY = """\
__version__ = version = '0.26.0'
__version_tuple__ = version_tuple = (0, 26, 0)
"""

RUNNER = textwrap.dedent(
    """\
    import os


    class Runner:
        def __init__(self, size):
            self.size = size

        def propose(self, batch):
            return [x * self.size for x in batch]


    def helper(name):
        return "run " + name
    """
)

FILES = {
    "vllm/__init__.py": "from vllm._version import __version__\n",
    "vllm/_version.py": VERSION_PY,
    "vllm/runner.py": RUNNER,
}

PR_PATCH = """\
diff --git a/vllm/runner.py b/vllm/runner.py
--- a/vllm/runner.py
+++ b/vllm/runner.py
@@ -5,8 +5,8 @@ class Runner:
     def __init__(self, size):
         self.size = size
 
-    def propose(self, batch):
-        return [x * self.size for x in batch]
+    def propose(self, batch, intermediate_tensors=None):
+        return [x * self.size for x in batch if intermediate_tensors is None or x]
 
 
 def helper(name):
"""

FIX_BODY = """\
diff --git a/vllm/runner.py b/vllm/runner.py
--- a/vllm/runner.py
+++ b/vllm/runner.py
@@ -11,4 +11,4 @@ class Runner:
 
 
 def helper(name):
-    return "run " + name
+    return "run " + name.strip()
"""

#: a fix that calls a helper nobody defines: compiles, imports, and is caught only by the undefined-names check
BAD_FIX_BODY = FIX_BODY.replace("name.strip()", "normalise(name)")


def format_patch(subject: str, body: str) -> str:
    return (
        "From 0000000000000000000000000000000000000000 Mon Sep 17 00:00:00 2001\n"
        "From: Fixer <fixer@example.invalid>\nDate: Tue, 14 Nov 2023 22:13:20 +0000\n"
        f"Subject: [PATCH] {subject}\n\nWhy it exists.\n---\n" + body
    )


def write_series(folder: Path, sources: Path, fix_body: str = FIX_BODY) -> Path:
    """A series folder (PR 101 pinned by sha256 + one local fix) and a sources folder holding the PR diff."""
    (folder / "patches").mkdir(parents=True, exist_ok=True)
    sources.mkdir(parents=True, exist_ok=True)
    (sources / "pr101.diff").write_text(PR_PATCH)
    sha = hashlib.sha256(PR_PATCH.encode()).hexdigest()
    (folder / "patches" / "0001-helper-strip.patch").write_text(format_patch("Strip names in helper", fix_body))
    (folder / "series.toml").write_text(
        textwrap.dedent(f"""\
        [series]
        name = "toy"

        [[entry]]
        id = "pr101"
        pr = 101
        pr_url = "https://example.invalid/pull/101"
        title = "propose() takes intermediate_tensors"
        upstream_status = "Submitted"
        tags = ">=0.26.0"
        why = "pipeline parallelism"
        [entry.source]
        url = "https://example.invalid/pr101.diff"
        sha256 = "{sha}"

        [[entry]]
        id = "fix-helper"
        file = "patches/0001-helper-strip.patch"
        title = "Strip names in helper"
        upstream_status = "Inappropriate"
        tags = ">=0.26.0,<0.27.0"
        why = "skew"
        """)
    )
    return folder


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout.strip()


def make_release_repo(work: Path) -> Path:
    """A git repository whose tag v0.26.0 holds the toy tree (as an imported release would)."""
    work.mkdir(parents=True)
    git(work, "init", "-q", "-b", "main")
    for rel, text in FILES.items():
        p = work / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    (work / "setup.py").write_text("import os\nos.environ.get('VLLM_VERSION_OVERRIDE')\n")
    git(work, "add", "-A")
    git(work, "commit", "-qm", "release v0.26.0")
    git(work, "tag", TAG)
    git(work, "checkout", "-q", "--detach")
    return work


def record_hash(data: bytes) -> str:
    """A RECORD row's hash of `data` (`sha256=<urlsafe base64, unpadded>`)."""
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def with_record(members: dict[str, bytes], info: str) -> dict[str, bytes]:
    """`members` plus `<info>RECORD` listing each of them with its hash and size (and itself without either)."""
    rows = [(name, record_hash(data), str(len(data))) for name, data in members.items()]
    rows.append((info + "RECORD", "", ""))
    buf = io.StringIO()
    csv.writer(buf, lineterminator="\n").writerows(rows)
    return {**members, info + "RECORD": buf.getvalue().encode()}


def make_site_packages(folder: Path) -> Path:
    """An installed layout: `vllm/` plus `vllm-0.26.0.dist-info/` with METADATA and a correct RECORD."""
    members = {rel: text.encode() for rel, text in FILES.items()}
    members["vllm/_C.abi3.so"] = b"\x7fELF not really"
    info = f"vllm-{VERSION}.dist-info/"
    members[info + "METADATA"] = f"Metadata-Version: 2.4\nName: vllm\nVersion: {VERSION}\n\n# vLLM\n".encode()
    members[info + "INSTALLER"] = b"pip\n"
    members = with_record(members, info)
    for name, data in members.items():
        p = folder / name
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(data)
    return folder


def install_stand_in(site: Path, version: str, compiled: bool = True) -> Path:
    """A vLLM installed into `site` as the import smoke sees one (put `site` on PYTHONPATH): the package, a compiled
    member unless `compiled` is false (bytes that are no loadable library: importing it fails, as a kernel that
    does not load here would), and the dist-info whose version the smoke compares with the release composed."""
    (site / "vllm").mkdir(parents=True)
    (site / "vllm" / "__init__.py").write_text("")
    if compiled:
        (site / "vllm" / "_C.abi3.so").write_bytes(b"\x7fELF stand-in")
    info = site / f"vllm-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: vllm\nVersion: {version}\n")
    return site


def snapshot(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}
