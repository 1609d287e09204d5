"""The conflict folder a stopped compose writes (`conflict.conflict_folder`): diff3 markers only at a site the engine
took for a hunk, and every hunk it refused (no site) in a reject file next to its file, never as markers.

Cases are folders under `tests/cases/conflict/<case>/`: `before/` (the entry's files as the tree before it holds
them), `patch.diff` (the entry), `expected.json` (description, the entry's id, and the hunks written as markers and
those refused, each as `path#hunk`) and `expected-folder.txt`: every file of the folder under a `== path ==` line
(`VC_UPDATE_GOLDEN=1` rewrites it; read its diff before committing). Each case is also held to what is true of any
folder:

* the target's side of every marker block, taken throughout, gives exactly what the engine placed: nothing placed
  is lost and nothing of a refused hunk is written;
* every refused hunk is in its file's reject file as the patch wrote it (the reject file parses as a patch), and
  each candidate site it names is the same line in the folder's file as before the entry.

Then the real case: PR #38476 onto vLLM v0.34.0, where a marker block once stood at a site the engine had rejected.
"""

from __future__ import annotations

import ast
import json
import os
import re
from pathlib import Path

import pytest
from release_trees import release_files

from vllm_compose.conflict import (
    MARKER_BASE,
    MARKER_OURS,
    MARKER_SEP,
    MARKER_THEIRS,
    ConflictFolder,
    conflict_folder,
    with_markers,
    write_worktree,
)
from vllm_compose.patchfile import FilePatch, Hunk, parse_patch
from vllm_compose.placement import FilePlacement, Placement, Site, Verdict, place_file

CASES = Path(__file__).resolve().parents[1] / "cases" / "conflict"
UPDATE = os.environ.get("VC_UPDATE_GOLDEN") == "1"
#: a candidate site as a reject file names it: its line in the folder's file, and before the entry
CANDIDATE_RE = re.compile(r"^#   line (\d+) \((\d+)\): score", re.M)

Placed = list[tuple[FilePatch, FilePlacement, str | None]]


def _case(name: str) -> tuple[dict, Placed, ConflictFolder]:
    """The case's expectations, each file's placement, and the folder made from them."""
    folder = CASES / name
    want = json.loads((folder / "expected.json").read_text())
    placed: Placed = []
    for fp in parse_patch((folder / "patch.diff").read_bytes(), "patch.diff").files:
        before = folder / "before" / fp.path
        text = before.read_text() if before.is_file() else None
        placed.append((fp, place_file(fp, text), text))
    return want, placed, conflict_folder(want["entry"], placed)


def _side(text: str, side: str) -> str:
    """`text` with every marker block replaced by one of its sides: "target", "base" or "patch"."""
    out, mode = [], None
    for line in text.split("\n"):
        if line in (MARKER_OURS, MARKER_BASE, MARKER_SEP, MARKER_THEIRS):
            mode = {MARKER_OURS: "target", MARKER_BASE: "base", MARKER_SEP: "patch", MARKER_THEIRS: None}[line]
        elif mode in (None, side):
            out.append(line)
    return "\n".join(out)


def _folder_text(folder: ConflictFolder) -> str:
    files = sorted({**folder.files, **folder.rejects}.items())
    return "".join(f"== {path} ==\n{data.decode()}" for path, data in files)


CASE_NAMES = sorted(p.name for p in CASES.iterdir() if p.is_dir())


@pytest.mark.parametrize("case", CASE_NAMES)
def test_conflict_folder(case: str) -> None:
    want, _, folder = _case(case)
    assert [f"{path}#{n}" for path, n in folder.marked] == want["marked"]
    assert [f"{path}#{n}" for path, n in folder.refused] == want["refused"]
    assert sorted(folder.rejects) == sorted({f"{ref.split('#')[0]}.rej" for ref in want["refused"]})
    golden = CASES / case / "expected-folder.txt"
    if UPDATE:
        golden.write_text(_folder_text(folder))
    assert golden.is_file(), f"{golden} is missing: run with VC_UPDATE_GOLDEN=1 to write it, then review it"
    assert _folder_text(folder) == golden.read_text(), f"the folder differs from {golden}"


@pytest.mark.parametrize("case", CASE_NAMES)
def test_the_target_side_of_every_block_is_what_the_engine_placed(case: str) -> None:
    _, placed, folder = _case(case)
    for fp, fpl, text in placed:
        if text is None:
            assert fp.path not in folder.files  # nothing to edit: the tree has no such file
            continue
        written = folder.files[fp.path].decode()
        assert _side(written, "target") == fpl.new_text
        marked = [n for path, n in folder.marked if path == fp.path]
        assert written.count(f"\n{MARKER_OURS}\n") + written.startswith(MARKER_OURS + "\n") == len(marked)


@pytest.mark.parametrize("case", CASE_NAMES)
def test_every_refused_hunk_is_in_its_reject_file_as_the_patch_wrote_it(case: str) -> None:
    _, placed, folder = _case(case)
    for fp, fpl, text in placed:
        refused = [p.hunk for p in fpl.placements if p.refused]
        if not refused:
            assert fp.path + ".rej" not in folder.rejects
            continue
        reject = folder.rejects[fp.path + ".rej"].decode()
        again = [h for f in parse_patch(reject, fp.path + ".rej").files for h in f.hunks]
        assert [(h.header(), h.lines) for h in again] == [(h.header(), h.lines) for h in refused]
        before = (text or "").split("\n")
        here = folder.files[fp.path].decode().split("\n") if fp.path in folder.files else []
        for line_here, line_before in CANDIDATE_RE.findall(reject):
            assert here[int(line_here) - 1] == before[int(line_before) - 1]


def test_a_marker_block_never_takes_the_lines_a_placed_hunk_wrote() -> None:
    # a conflict's site (lines 2-4) overlaps the line a placed hunk replaced (line 3): the placed hunk stays, and
    # the block follows it with an empty target side
    placed_hunk = Hunk(1, 2, 3, 2, 3, "", [(" ", "b"), ("-", "c"), ("+", "C"), (" ", "d")])
    conflict_hunk = Hunk(2, 2, 3, 2, 4, "", [(" ", "b"), (" ", "c"), ("+", "x"), (" ", "d")])
    placements = [
        Placement(placed_hunk, Verdict.MERGED, start=2, end=3, replacement=["C"]),
        Placement(conflict_hunk, Verdict.CONFLICT, site=Site(1, 4)),
    ]
    out = with_markers(["a", "b", "c", "d", "e"], placements)
    block = [MARKER_OURS, MARKER_BASE, "b", "c", "d", MARKER_SEP, "b", "c", "x", "d", MARKER_THEIRS]
    assert out == ["a", "b", "C", *block, "d", "e"]
    assert _side("\n".join(out), "target") == "a\nb\nC\nd\ne"


def test_the_conflict_note_names_each_reject_file_and_continue_reads_no_reject(tmp_path: Path) -> None:
    _, _, folder = _case("site-and-no-site")
    written = write_worktree(tmp_path, folder, "pr1", "1 hunk(s) cannot be placed")
    assert sorted(written) == ["pkg/calc.py"]  # what --continue reads back: not the reject file
    assert (tmp_path / "pkg/calc.py.rej").read_bytes() == folder.rejects["pkg/calc.py.rej"]
    note = (tmp_path / "CONFLICT.txt").read_text()
    assert "  pkg/calc.py.rej: hunk 2\n" in note and "1 of these hunks have no conflict markers" in note


# ---------------------------------------------------------------------------------------------------------------
# The real case: PR #38476 onto vLLM v0.34.0

INDEXER = "vllm/model_executor/layers/sparse_attn_indexer.py"
CUDA = "vllm/platforms/cuda.py"


@pytest.mark.sdist
def test_pr38476_onto_v0_34_0_marks_only_the_site_the_engine_found(tmp_path_factory, real_pr_diffs) -> None:
    """Five hunks stop the entry: hunk 3 of the indexer has a site (its added lines' indentation is unclear there)
    and gets markers at it; the other four have none and are listed in reject files. No block stands at a
    rejected site (hunk 6's best one is the top of `__init__`, far above where the PR's change belongs)."""
    _, pr38476 = real_pr_diffs
    patch = parse_patch(pr38476.read_bytes(), pr38476.name)
    files = {fp.path: fp for fp in patch.files if fp.path in (INDEXER, CUDA)}
    texts = release_files(tmp_path_factory, "v0.34.0", [INDEXER, CUDA])
    placed: Placed = [(files[p], place_file(files[p], texts[p]), texts[p]) for p in (INDEXER, CUDA)]
    folder = conflict_folder("pr38476", placed)

    assert folder.marked == [(INDEXER, 3)]
    assert folder.refused == [(INDEXER, 4), (INDEXER, 5), (INDEXER, 6), (CUDA, 1)]
    for path, n in folder.refused:
        hunk = files[path].hunks[n - 1]
        assert f"# hunk {n} of {path} (entry pr38476) was not placed.\n" in folder.rejects[path + ".rej"].decode()
        assert hunk.to_text() in folder.rejects[path + ".rej"].decode()
    assert MARKER_OURS not in folder.files[CUDA].decode()

    hunk3 = next(p for p in placed[0][1].placements if p.hunk.index == 3)
    assert hunk3.evidence.startswith("site at line 756:") and hunk3.site.start == 755
    indexer = folder.files[INDEXER].decode()
    lines = indexer.split("\n")
    starts = [k for k, line in enumerate(lines) if line == MARKER_OURS]
    assert len(starts) == 1  # one block, hunk 3's
    block = lines[starts[0] + 1 : lines.index(MARKER_BASE)]
    assert block == texts[INDEXER].split("\n")[hunk3.site.start : hunk3.site.end]  # the target's side: the site
    # either side of the block, taken as written, leaves a file that parses
    for side in ("target", "patch"):
        ast.parse(_side(indexer, side))
    assert _side(indexer, "target") == placed[0][1].new_text
