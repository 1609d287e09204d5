"""The patch tools the drift benchmark measures, each run on one case in a scratch directory.

Every tool gets the same single-file diff and the target release's copy of that one file, and either produces a
result text or refuses. GNU patch and `git apply` run as subprocesses with a blank git configuration; the engine is
called in-process.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

#: git with no user or system configuration, so results do not depend on the machine
_GIT_ENV = {
    **os.environ,
    "GIT_CONFIG_GLOBAL": os.devnull,
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_AUTHOR_NAME": "bench",
    "GIT_AUTHOR_EMAIL": "bench@invalid",
    "GIT_COMMITTER_NAME": "bench",
    "GIT_COMMITTER_EMAIL": "bench@invalid",
    "LC_ALL": "C",
}


@dataclass
class ToolResult:
    """What one tool did with one case: the resulting file text, or None when it refused; and why."""

    text: str | None
    detail: str = ""
    #: engine only: the verdict of each hunk
    verdicts: list[str] | None = None

    @property
    def applied(self) -> bool:
        return self.text is not None


class Workbench:
    """Scratch space for one benchmark run: a plain directory for GNU patch and two git repositories for
    `git apply`, reused across cases (each case rewrites the one file it needs). Pre-image blobs are only ever
    stored in the second repository, so `git apply --3way` in the first really has nothing but the target."""

    def __init__(self) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="vllm-compose-drift-"))
        self.plain = self.root / "plain"
        self.plain.mkdir()
        self.repos = {False: self.root / "repo", True: self.root / "repo-with-base"}
        for repo in self.repos.values():
            repo.mkdir()
            self._git(repo, "init", "-q")

    def close(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self) -> Workbench:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    @staticmethod
    def _git(repo: Path, *args: str, stdin: bytes | None = None) -> subprocess.CompletedProcess:
        return subprocess.run(["git", *args], cwd=repo, env=_GIT_ENV, input=stdin, capture_output=True, check=False)

    @staticmethod
    def _write(root: Path, path: str, text: str) -> Path:
        dest = root / path
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_bytes(text.encode("utf-8", "surrogateescape"))
        return dest

    def gnu_patch(self, path: str, target: str, diff: str, fuzz: int) -> ToolResult:
        """`patch -p1 --fuzz=N --batch --forward` on a copy of the target file."""
        dest = self._write(self.plain, path, target)
        proc = subprocess.run(
            ["patch", "-p1", f"--fuzz={fuzz}", "--batch", "--forward", "--no-backup-if-mismatch", "-r", "-"],
            cwd=self.plain,
            input=diff.encode("utf-8", "surrogateescape"),
            capture_output=True,
            check=False,
        )
        out = (proc.stdout + proc.stderr).decode("utf-8", "replace").strip()
        if proc.returncode != 0:
            return ToolResult(None, out)
        return ToolResult(dest.read_bytes().decode("utf-8", "surrogateescape"), out)

    def git_apply(self, path: str, target: str, diff: str, three_way: bool, base: str | None = None) -> ToolResult:
        """`git apply` (or `git apply --3way`) with the target file in the index; `base`, when given, is stored as a
        blob first so that --3way finds the pre-image the diff's `index` line names (as in a clone with history)."""
        repo = self.repos[base is not None]
        self._git(repo, "read-tree", "--empty")
        self._write(repo, path, target)
        self._git(repo, "add", "--", path)
        if base is not None:
            self._git(repo, "hash-object", "-w", "--stdin", stdin=base.encode("utf-8", "surrogateescape"))
        args = ["apply", "-p1", "--whitespace=nowarn"] + (["--3way"] if three_way else [])
        proc = self._git(repo, *args, stdin=diff.encode("utf-8", "surrogateescape"))
        out = (proc.stdout + proc.stderr).decode("utf-8", "replace").strip()
        if proc.returncode != 0:
            return ToolResult(None, out)
        return ToolResult((repo / path).read_bytes().decode("utf-8", "surrogateescape"), out)


def engine_runner() -> Callable[[str, str, str], ToolResult] | None:
    """The placement engine as a tool, or None while `vllm_compose.placement.place_file` is not implemented."""
    from vllm_compose.patchfile import parse_patch
    from vllm_compose.placement import place_file

    def run(path: str, target: str, diff: str) -> ToolResult:
        fp = parse_patch(diff, name=path).files[0]
        placed = place_file(fp, target, path)
        verdicts = [str(p.verdict) for p in placed.placements]
        evidence = "; ".join(f"hunk {p.hunk.index}: {p.verdict}: {p.evidence}" for p in placed.placements)
        if placed.parse_error:
            evidence += f"; parse error: {placed.parse_error}"
        if placed.new_text is None or not any(p.ok for p in placed.placements):
            return ToolResult(None, evidence, verdicts)
        return ToolResult(placed.new_text, evidence, verdicts)

    probe = "diff --git a/x.py b/x.py\n--- a/x.py\n+++ b/x.py\n@@ -1 +1,2 @@\n a = 1\n+b = 2\n"
    try:
        run("x.py", "a = 1\n", probe)
    except NotImplementedError:
        return None
    except Exception:  # noqa: BLE001 - an engine that crashes is measured (each crash recorded), not skipped
        pass
    return run
