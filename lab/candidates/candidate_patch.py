"""A candidate's whole-file patch (lab/candidates/*.patch): its two images, kernel trees made from them, and the
patch written again from a new post-image.

A candidate patch changes one file in one hunk that spans it, so its pre-image is the file as the compose writes it
and its post-image the candidate, each a whole module (tests/lab/test_candidate_sparse_mla.py reads them the same
way). A GPU run therefore needs no composed tree: `trees` writes the kernel before and the kernel after from the
patch alone, each with an empty `mqa_logits_triton.py` beside it (lab/device/kernel_offsets.py's loader wants both
modules; a sparse-MLA run never calls the indexer's):

    python3 lab/candidates/candidate_patch.py trees series/patches/0044-perf-triton-mla-sparse-one-gather-tile.patch \\
        --before .devkern/v0260 --after .devkern/mla

`rewrite` writes the patch again from a new post-image and commit message (default: the patch's own), as git
format-patch with one hunk over the whole file and the author, date and zero commit id the candidates have, then
checks that its post-image reads back as the file given. The hunk's lines follow the audit's own line alignment
(`vllm_compose.audit.align.Alignment`), not git's diff: a rewrite this large has many equally short diffs, and where
git's pairs a removed line with added lines across a line the alignment keeps, the audit cannot find that change
group in the composed file and refuses the entry. Same two images, so the same patch to `git apply`:

    python3 lab/candidates/candidate_patch.py rewrite PATCH --post NEW.py [--message MSG.txt]

`new` writes a first candidate patch of a file the same way, from the file as the compose writes it; `trees --on T`
writes both trees as copies of T with the patch's file replaced (a backend candidate beside a series entry's kernel):

    python3 lab/candidates/candidate_patch.py new PATCH --path vllm/... --pre COMPOSED.py --post NEW.py --message MSG
    python3 lab/candidates/candidate_patch.py trees PATCH --on .devkern/e45 --before .devkern/b0 --after .devkern/b1
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "src"))  # vllm_compose.patchfile

#: the kernel modules lab/device/kernel_offsets.py's loader reads from a tree
KERNEL_MODULES = ("vllm/v1/attention/ops/mqa_logits_triton.py", "vllm/v1/attention/ops/triton_mla_sparse_kernel.py")
#: what every candidate patch says as its author and date (they are not commits of this repository)
AUTHOR = ("vllm-compose maintainers", "maintainers@vllm-compose.invalid")
DATE = "Wed, 2 Dec 2026 00:00:00 +0000"
#: a pinned git for the rewrite: no user or system configuration
GIT_ENV = {"GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_SYSTEM": os.devnull, "GIT_CONFIG_NOSYSTEM": "1"}


class CandidatePatchError(Exception):
    """A patch that is not one file changed in one hunk spanning it."""


def images(patch: Path) -> tuple[str, str, str]:
    """(path, pre-image, post-image) of the patch's one file: each image the whole file, newline-terminated."""
    from vllm_compose.patchfile import parse_patch

    parsed = parse_patch(patch.read_bytes(), patch.name)
    if len(parsed.files) != 1 or len(parsed.files[0].hunks) != 1:
        raise CandidatePatchError(f"{patch}: want one file in one hunk, found {len(parsed.files)} file(s)")
    (fp,) = parsed.files
    (hunk,) = fp.hunks
    if (hunk.old_start, hunk.new_start) != (1, 1):
        raise CandidatePatchError(f"{patch}: the hunk {hunk.header} does not start at line 1 of both images")
    before, after = ("\n".join(lines) + "\n" for lines in (hunk.pre_image, hunk.post_image))
    return fp.path, before, after


def message_of(patch: Path) -> str:
    """The patch's commit message: its subject (unfolded, without `[PATCH]`), a blank line, its body."""
    from vllm_compose.patchfile import parse_patch

    header = parse_patch(patch.read_bytes(), patch.name).header
    return f"{header.subject}\n\n{header.body.rstrip()}\n"


def write_tree(root: Path, path: str, text: str, on: Path | None = None) -> Path:
    """A tree under `root` holding `path` as `text` and every kernel module it lacks empty; returns `root`. With
    `on`, `root` is first a copy of that tree (a candidate of another file, e.g. the backend's, beside a series
    entry's kernel), its `path` then replaced. Files already under `root` that these do not name are left as they
    are."""
    if on is not None:
        if not on.is_dir():
            raise CandidatePatchError(f"--on {on}: not a folder (a tree written by `trees`, or a composed tree)")
        shutil.copytree(on, root, symlinks=True, dirs_exist_ok=True)
    (root / path).parent.mkdir(parents=True, exist_ok=True)
    (root / path).write_text(text)
    for module in KERNEL_MODULES:
        if not (root / module).exists():
            (root / module).parent.mkdir(parents=True, exist_ok=True)
            (root / module).write_text("")
    return root


def rewrite(patch: Path, post_image: str, message: str) -> str:
    """The patch's text with `post_image` as its new post-image and `message` (subject line, blank line, body) as its
    commit message: git format-patch of the change, one hunk over the whole file."""
    path, before, _ = images(patch)
    return format_patch(path, before, post_image, message)


def format_patch(path: str, before: str, post_image: str, message: str) -> str:
    """A candidate patch of `path`, `before` -> `post_image`, with `message` as its commit message: git format-patch
    of the change, one hunk over the whole file (the hunk the audit's alignment gives)."""
    env = {**os.environ, **GIT_ENV, "GIT_AUTHOR_NAME": AUTHOR[0], "GIT_AUTHOR_EMAIL": AUTHOR[1],
           "GIT_COMMITTER_NAME": AUTHOR[0], "GIT_COMMITTER_EMAIL": AUTHOR[1], "GIT_AUTHOR_DATE": DATE,
           "GIT_COMMITTER_DATE": DATE}  # fmt: skip

    def git(*args: str, cwd: Path) -> str:
        return subprocess.run(["git", *args], cwd=cwd, env=env, check=True, capture_output=True, text=True).stdout

    with tempfile.TemporaryDirectory() as scratch:
        work = Path(scratch)
        git("init", "-q", cwd=work)
        (work / path).parent.mkdir(parents=True)
        (work / path).write_text(before)
        git("add", path, cwd=work)
        git("commit", "-q", "-m", "pre-image", cwd=work)
        (work / path).write_text(post_image)
        (work / "MSG").write_text(message)
        git("commit", "-q", "-a", "-F", str(work / "MSG"), cwd=work)
        context = max(before.count("\n"), post_image.count("\n")) + 1  # one hunk over the whole file
        text = git("format-patch", "-1", "--stdout", "--no-signature", f"-U{context}", "HEAD", cwd=work)
        # git's hunk replaced by the alignment's (the same images), the diffstat recounted from it
        head, diff = text.split("\ndiff --git ", 1)
        diff_head = "diff --git " + diff.split("\n@@ ", 1)[0] + "\n"
        diff = diff_head + aligned_hunk(before, post_image)
        (work / "D.patch").write_text(diff)
        stat = git("apply", "--stat", "D.patch", cwd=work)
        message_part, _ = head.split("\n---\n", 1)
        text = f"{message_part}\n---\n{stat}\n{diff}"
    first, rest = text.split("\n", 1)
    return "From 0000000000000000000000000000000000000000 " + first.split(" ", 2)[2] + "\n" + rest


def aligned_hunk(before: str, after: str) -> str:
    """One unified-diff hunk over the whole file, `before` -> `after`, whose change groups are the audit alignment's
    gaps: in each, the old lines the alignment drops, then the new lines it adds."""
    from vllm_compose.audit.align import Alignment

    old, new = before.splitlines(), after.splitlines()
    al = Alignment(old, new)
    lines = [f"@@ -1,{len(old)} +1,{len(new)} @@"]
    i = j = 0
    while i < len(old) or j < len(new):
        if j < len(new) and al.origin[j] is not None and al.origin[j] == i:
            lines.append(" " + new[j])
            i, j = i + 1, j + 1
        elif i < len(old) and not al.kept[i]:
            lines.append("-" + old[i])
            i += 1
        elif j < len(new) and al.origin[j] is None:
            lines.append("+" + new[j])
            j += 1
        else:  # the alignment crosses itself: not a diff
            raise CandidatePatchError(f"the alignment is not monotonic at old line {i + 1}, new line {j + 1}")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="command", required=True)
    trees = sub.add_parser("trees", help="the kernel before and the kernel after, as trees")
    trees.add_argument("patch", type=Path)
    trees.add_argument("--before", type=Path, required=True)
    trees.add_argument("--after", type=Path, required=True)
    trees.add_argument("--on", type=Path, help="a tree both are copies of, the patch's file then replaced")
    fresh = sub.add_parser("new", help="a new candidate patch of one file: its pre-image, post-image and message")
    fresh.add_argument("patch", type=Path)
    fresh.add_argument("--path", required=True, help="the file's path in the tree, e.g. vllm/v1/attention/...")
    fresh.add_argument("--pre", type=Path, required=True, help="the file as the compose writes it")
    fresh.add_argument("--post", type=Path, required=True)
    fresh.add_argument("--message", type=Path, required=True)
    again = sub.add_parser("rewrite", help="the patch written again from a new post-image and message")
    again.add_argument("patch", type=Path)
    again.add_argument("--post", type=Path, required=True)
    again.add_argument("--message", type=Path, help="the new commit message (default: the patch's own)")
    args = ap.parse_args(argv)
    try:
        if args.command == "trees":
            path, before, after = images(args.patch)
            for root, text in ((args.before, before), (args.after, after)):
                write_tree(root, path, text, on=args.on)
                print(f"{root / path}: {text.count(chr(10))} lines")
            return 0
        post = args.post.read_text()
        if args.command == "new":
            if args.patch.exists():
                raise CandidatePatchError(f"{args.patch} exists: `rewrite` changes a patch, `new` writes none over one")
            text = format_patch(args.path, args.pre.read_text(), post, args.message.read_text())
        else:
            message = args.message.read_text() if args.message else message_of(args.patch)
            text = rewrite(args.patch, post, message)
        tmp = args.patch.with_name(args.patch.name + ".tmp")
        tmp.write_text(text)
        _, _, got = images(tmp)
        if got != post:
            tmp.unlink()
            raise CandidatePatchError(f"{args.patch}: the written post-image does not read back as {args.post}")
        os.replace(tmp, args.patch)
        print(f"{args.patch}: {'written' if args.command == 'new' else 'rewritten'}, post-image {args.post}")
        return 0
    except (CandidatePatchError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
