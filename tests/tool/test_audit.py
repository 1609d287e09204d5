"""The auditor on trees patched by real GNU patch: look-alike case folders and (when present) the real vLLM data."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pygit2
import pytest

from vllm_compose.audit import AuditVerdict, audit
from vllm_compose.patchfile import Patch, parse_patch
from vllm_compose.report import render_audit as render_text
from vllm_compose.trees import DirTree, GitTree

CASES = Path(__file__).resolve().parents[1] / "cases" / "audit"
GNU_PATCH = shutil.which("patch")
HAZARDS = ("kwarg-after-call", "param-as-body", "block-in-unrelated-function", "wrong-branch")


def gnu_patch(tree: Path, patch_file: Path) -> None:
    """Apply like the old Docker recipe did: `patch -p1 --fuzz=3`, skipping already-applied hunks, no rejects."""
    subprocess.run(
        [GNU_PATCH, "-s", "-p1", "--fuzz=3", "-N", "-r", "-", "--no-backup-if-mismatch", "-i", str(patch_file)],
        cwd=tree,
        capture_output=True,
        check=False,
    )


def case_patch_files(case: Path) -> list[Path]:
    single = case / "patch.diff"
    return [single] if single.exists() else sorted((case / "patches").glob("*.diff"))


def patched_copy(case: Path, tmp_path: Path) -> tuple[Path, list[Patch]]:
    tree = tmp_path / "patched"
    shutil.copytree(case / "stock", tree)
    files = case_patch_files(case)
    for f in files:
        gnu_patch(tree, f)
    return tree, [parse_patch(f.read_bytes(), f.name) for f in files]


needs_gnu_patch = pytest.mark.skipif(GNU_PATCH is None, reason="GNU patch (/usr/bin/patch) is not installed")


@needs_gnu_patch
@pytest.mark.parametrize("case", sorted(p.name for p in CASES.iterdir() if p.is_dir()))
def test_case(case: str, tmp_path: Path) -> None:
    folder = CASES / case
    expected = json.loads((folder / "expected.json").read_text())
    patched, patches = patched_copy(folder, tmp_path)

    report = audit(DirTree(folder / "stock"), DirTree(patched), patches)

    got = report.to_json()
    assert len(got["hunks"]) == len(expected["hunks"])
    for want, have in zip(expected["hunks"], got["hunks"], strict=True):
        assert {k: have[k] for k in want} == want, have["reason"]
    assert report.ok is expected["ok"]
    assert got["summary"]["ok"] is expected["ok"]


@needs_gnu_patch
@pytest.mark.parametrize("case", HAZARDS)
def test_hazard_reports_both_sites(case: str, tmp_path: Path) -> None:
    folder = CASES / case
    patched, patches = patched_copy(folder, tmp_path)
    report = audit(DirTree(folder / "stock"), DirTree(patched), patches)
    [h] = report.hunks
    assert h.verdict is AuditVerdict.MISPLACED
    assert h.landed_at is not None and h.expected_at is not None and h.landed_at != h.expected_at
    text = render_text(report)
    assert "MISPLACED" in text
    assert f"expected: line {h.expected_at}" in text and f"landed: line {h.landed_at}" in text
    # the side-by-side view numbers the stock lines around both sites
    stock_lines = (folder / "stock" / h.file).read_text().splitlines()
    assert f"{h.expected_at:>5}    {stock_lines[h.expected_at - 1]}"[:40] in text
    assert f"{h.landed_at:>5}    {stock_lines[h.landed_at - 1]}"[:40] in text


def test_json_schema(tmp_path: Path) -> None:
    folder = CASES / "clean"
    patched = tmp_path / "p"
    shutil.copytree(folder / "stock", patched)
    patch = parse_patch((folder / "patch.diff").read_bytes(), str(folder / "patch.diff"))
    # apply with the stock files' own text edited as the patch says (no GNU patch needed)
    text = (patched / "pkg/config.py").read_text()
    text = text.replace('    "block_size": 16,\n', '    "block_size": 16,\n    "enforce_eager": False,\n')
    text = text.replace(
        "    for line in text.splitlines():\n",
        "    for line in text.splitlines():\n        if not line.strip():\n            continue\n",
    )
    (patched / "pkg/config.py").write_text(text)

    data = audit(DirTree(folder / "stock"), DirTree(patched), [patch]).to_json()

    assert set(data) == {"hunks", "summary"}
    for h in data["hunks"]:
        assert set(h) == {"patch", "file", "hunk", "verdict", "landed_at", "expected_at", "reason"}
        assert h["patch"] == "patch.diff"  # the file name, not the path
    assert [h["verdict"] for h in data["hunks"]] == ["exact", "exact"]
    assert data["summary"]["exact"] == 2 and data["summary"]["ok"] is True
    assert set(data["summary"]) == {v.value for v in AuditVerdict} | {"ok"}
    json.dumps(data)


def _commit_tree(repo: pygit2.Repository, root: Path, message: str, parents: list) -> pygit2.Oid:
    def build(directory: Path) -> pygit2.Oid:
        tb = repo.TreeBuilder()
        for p in sorted(directory.iterdir()):
            if p.is_dir():
                tb.insert(p.name, build(p), pygit2.GIT_FILEMODE_TREE)
            else:
                tb.insert(p.name, repo.create_blob(p.read_bytes()), pygit2.GIT_FILEMODE_BLOB)
        return tb.write()

    sig = pygit2.Signature("t", "t@example.com", 0, 0)
    return repo.create_commit("HEAD", sig, sig, message, build(root), parents)


@needs_gnu_patch
def test_git_revisions(tmp_path: Path) -> None:
    folder = CASES / "wrong-branch"
    patched, patches = patched_copy(folder, tmp_path)
    repo = pygit2.init_repository(str(tmp_path / "repo"), bare=True)
    stock_id = _commit_tree(repo, folder / "stock", "stock", [])
    repo.create_reference("refs/tags/stock", stock_id)
    _commit_tree(repo, patched, "patched", [stock_id])

    report = audit(GitTree.from_revision(repo, "stock"), GitTree.from_revision(repo, "HEAD"), patches)

    assert [(h.verdict, h.landed_at, h.expected_at) for h in report.hunks] == [(AuditVerdict.MISPLACED, 12, 22)]


# ---------------------------------------------------------------------------------------------------------------
# Real data: the two pinned PR diffs applied by GNU patch --fuzz=3 onto vLLM 0.26.0


@pytest.fixture(scope="module")
def real_application(tmp_path_factory, release_v0260, real_pr_diffs):
    """The two pinned PR diffs applied by GNU patch --fuzz=3 onto vLLM 0.26.0 (its sdist, through the cache), audited."""
    if GNU_PATCH is None:
        pytest.skip("GNU patch is not installed")
    V0260, (PR46994, PR38476) = release_v0260, real_pr_diffs
    patches = [parse_patch(p.read_bytes(), p.name) for p in (PR46994, PR38476)]
    root = tmp_path_factory.mktemp("v0260-patched")
    # only the files the patches touch: a full copy of the sdist tree is 100+ MB
    for patch in patches:
        for fp in patch.files:
            src = V0260 / (fp.old_path or fp.new_path)
            if src.is_file():
                dst = root / (fp.old_path or fp.new_path)
                dst.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(src, dst)
    for p in (PR46994, PR38476):
        gnu_patch(root, p)
    return audit(DirTree(V0260), DirTree(root), patches)


def _find(report, patch: str, file_suffix: str, hunk: int):
    [h] = [h for h in report.hunks if h.patch == patch and h.file.endswith(file_suffix) and h.hunk == hunk]
    return h


@pytest.mark.slow
@pytest.mark.sdist
def test_real_known_misplacements(real_application) -> None:
    report = real_application
    assert not report.ok
    spec = "v1/worker/gpu/spec_decode/autoregressive/speculator.py"
    for patch, path, hunk in [
        ("pr46994-vllm-only.diff", spec, 4),
        ("pr46994-vllm-only.diff", spec, 9),
        ("pr38476-vllm-only.diff", "model_executor/layers/sparse_attn_indexer.py", 3),
        ("pr38476-vllm-only.diff", "platforms/cuda.py", 1),
    ]:
        h = _find(report, patch, path, hunk)
        assert h.verdict is AuditVerdict.MISPLACED, (path, hunk, h.reason)
        assert h.landed_at is not None


@pytest.mark.slow
@pytest.mark.sdist
def test_real_failed_hunks(real_application) -> None:
    for hunk in (4, 5, 6):
        h = _find(real_application, "pr38476-vllm-only.diff", "model_executor/layers/sparse_attn_indexer.py", hunk)
        assert h.verdict is AuditVerdict.FAILED, h.reason
        assert h.landed_at is None


@pytest.mark.slow
@pytest.mark.sdist
def test_real_every_hunk_has_a_verdict(real_application, real_pr_diffs) -> None:
    patches = [parse_patch(p.read_bytes(), p.name) for p in real_pr_diffs]
    assert len(real_application.hunks) == sum(p.hunk_count for p in patches)
    assert real_application.summary["misplaced"] >= 4


@needs_gnu_patch
def test_landing_nothing_confirms_is_misplaced_with_no_site_to_offer(tmp_path: Path) -> None:
    """fuzz-at-end: the loop hunk 2 edits is gone, fuzz 3 appended its lines at the end of `parse`; nothing the hunk
    shows (the `for line` block, `key, _, value = ...`) is next to them, and no other site has its anchors."""
    folder = CASES / "fuzz-at-end"
    patched, patches = patched_copy(folder, tmp_path)
    report = audit(DirTree(folder / "stock"), DirTree(patched), patches)
    [h] = report.bad_hunks
    assert h.verdict is AuditVerdict.MISPLACED and h.hunk == 2
    assert h.expected_at is None and h.landed_at == 20
    assert "nothing the hunk shows around the change is next to the landing" in h.reason
    text = render_text(report)
    assert "expected: (nowhere)" in text and "landed: line 20" in text
    assert set(h.to_json()) == {"patch", "file", "hunk", "verdict", "landed_at", "expected_at", "reason"}


@needs_gnu_patch
def test_misplaced_hunk_names_both_sites_by_what_is_there(tmp_path: Path) -> None:
    """wrong-branch: the landing and the site the anchors prefer are described by their def chain and container."""
    folder = CASES / "wrong-branch"
    patched, patches = patched_copy(folder, tmp_path)
    report = audit(DirTree(folder / "stock"), DirTree(patched), patches)
    [h] = report.hunks
    assert h.landed_scope is not None and h.expected_scope is not None
    assert h.landed_scope.describe() == h.expected_scope.describe() == "in backend_priorities, the list returned"
    assert "another site fits what the hunk shows better" in h.reason
    assert "expected: line 22 in backend_priorities, the list returned" in render_text(report)


def test_line_alignment_is_valid_and_keeps_every_line_of_an_insertion_only_edit() -> None:
    """The anchored alignment (unique lines first, difflib between them) is a valid alignment and, on a file made
    of repeating lines with scattered insertions, keeps every old line (as difflib would, at far lower cost)."""
    from vllm_compose.audit.align import matching_blocks

    old = []
    for i in range(400):
        old += [f"def f_{i}(x):", "    for v in x:", "        total += v", "    return total", "", ""]
    new = list(old)
    for at in range(len(old) - 3, 0, -97):
        new.insert(at, "    total += 1")
    blocks = matching_blocks(old, new)
    last_i = last_j = 0
    for i, j, n in blocks:
        assert i >= last_i and j >= last_j
        assert old[i : i + n] == new[j : j + n]
        last_i, last_j = i + n, j + n
    assert sum(n for _, _, n in blocks) == len(old)


# ---------------------------------------------------------------------------------------------------------------
# Misplacements a placement engine makes: the audit judges them by syntax anchors, not by re-running placement

_SPLIT_STOCK = """\
def priorities(major):
    if major == 10:
        return ["CUTLASS", "TRITON"]
    else:
        sparse_tail = [
            "FLASH_SPARSE",
            "FLASHMLA_SPARSE",
        ]
        extra = "SM90_SPARSE"
        sparse_tail.append(extra)
        return [
            "FLASH",
            "TRITON",
            *sparse_tail,
        ]
"""

_SPLIT_PATCH = """\
--- a/pkg/cuda.py
+++ b/pkg/cuda.py
@@ -10,6 +10,7 @@ def priorities(major):
             "TRITON",
             "FLASH_SPARSE",
             "FLASHMLA_SPARSE",
+            "TRITON_SPARSE",
         ]
     else:
         return ["FLASH"]
"""


class _OneFile:
    """A tree holding pkg/cuda.py only."""

    def __init__(self, text: str) -> None:
        self.data = text.encode()

    def read(self, path: str) -> bytes | None:
        return self.data if path == "pkg/cuda.py" else None


def _one_file(text: str) -> _OneFile:
    return _OneFile(text)


def test_element_merged_into_a_split_off_list_is_misplaced() -> None:
    """The v0.30.0 arrival's pattern: the release split the list the hunk extends into `sparse_tail`, spliced back
    with `*sparse_tail`. An engine that merges the element after FLASHMLA_SPARSE in `sparse_tail` (the text fits
    well) changes the order on another branch; the hunk shows TRITON in the same list, and `sparse_tail` lacks it."""
    patched = _SPLIT_STOCK.replace(
        '            "FLASHMLA_SPARSE",\n', '            "FLASHMLA_SPARSE",\n            "TRITON_SPARSE",\n'
    )
    report = audit(_one_file(_SPLIT_STOCK), _one_file(patched), [parse_patch(_SPLIT_PATCH.encode(), "fix.diff")])
    [h] = report.hunks
    assert h.verdict is AuditVerdict.MISPLACED, h.reason
    assert '`"TRITON"` in the same brackets' in h.reason and "the list `sparse_tail`" in h.reason
    assert not report.ok


def test_element_appended_to_the_list_it_shows_passes() -> None:
    """The same hunk where the list still holds TRITON, FLASH_SPARSE, FLASHMLA_SPARSE: no alarm."""
    stock = _SPLIT_STOCK.replace(
        '            "FLASH",\n            "TRITON",\n            *sparse_tail,\n',
        '            "TRITON",\n            "FLASH_SPARSE",\n            "FLASHMLA_SPARSE",\n',
    )
    patched = stock.replace(
        '            "FLASHMLA_SPARSE",\n        ]\n',
        '            "FLASHMLA_SPARSE",\n            "TRITON_SPARSE",\n        ]\n',
    )
    report = audit(_one_file(stock), _one_file(patched), [parse_patch(_SPLIT_PATCH.encode(), "fix.diff")])
    [h] = report.hunks
    assert h.verdict in (AuditVerdict.EXACT, AuditVerdict.OFFSET, AuditVerdict.FUZZY), h.reason
    assert report.ok


def test_merged_import_name_is_found_and_confirmed() -> None:
    """The target added a name to the import the hunk extends; the merge (both names) is the hunk's word-level
    edit made to the drifted line: landed and fuzzy, not `failed`."""
    diff = """\
--- a/pkg/cuda.py
+++ b/pkg/cuda.py
@@ -1,3 +1,3 @@
 import os
-from typing import TYPE_CHECKING
+from typing import TYPE_CHECKING, Any
 import sys
"""
    stock = "import os\nfrom typing import TYPE_CHECKING, cast\nimport sys\n"
    patched = "import os\nfrom typing import TYPE_CHECKING, Any, cast\nimport sys\n"
    report = audit(_one_file(stock), _one_file(patched), [parse_patch(diff.encode(), "d.diff")])
    [h] = report.hunks
    assert h.verdict is AuditVerdict.FUZZY and h.landed_at == 2, h.reason


# ---------------------------------------------------------------------------------------------------------------
# The element a hunk inserts after, removed by the release outright (the engine's must-reject drift cases)


@needs_gnu_patch
def test_insertion_after_an_element_the_release_removed_is_misplaced_with_no_site(tmp_path: Path) -> None:
    """kwarg-after-kwarg-the-release-removed: the release dropped `w_gidx_param_name=` and every mention of it;
    fuzz 3, as the engine does, puts the new argument after `w_zp_param_name=`. The anchors alone would confirm
    that (two siblings before, the call's end); the missing anchor is named and no other site is offered."""
    folder = CASES / "kwarg-after-kwarg-the-release-removed"
    patched, patches = patched_copy(folder, tmp_path)
    report = audit(DirTree(folder / "stock"), DirTree(patched), patches)
    [h] = report.hunks
    assert h.verdict is AuditVerdict.MISPLACED and h.expected_at is None and h.landed_at == 17
    assert "after `w_gidx_param_name=`, which the file no longer has" in h.reason
    assert "nothing in it names `w_gidx_param_name`" in h.reason
    assert "expected: (nowhere)" in render_text(report)


@needs_gnu_patch
def test_insertion_after_an_argument_the_release_never_passed_here_passes(tmp_path: Path) -> None:
    """kwarg-after-argument-the-release-never-had, the shape of pr46994 speculator.py #4 on v0.26.0: the hunk shows
    `batch.upper_bound` as the call's last argument, the release's call lacks it but the release uses
    `batch.upper_bound` elsewhere in the file; the keyword argument merged at the call's end is right."""
    folder = CASES / "kwarg-after-argument-the-release-never-had"
    patched, patches = patched_copy(folder, tmp_path)
    report = audit(DirTree(folder / "stock"), DirTree(patched), patches)
    [h] = report.hunks
    assert h.verdict is AuditVerdict.FUZZY, h.reason
    assert report.ok


_ALL_STOCK = """\
from .ops import build_indices, fused_norm, quantize, save_states

__all__ = [
    "build_indices",
    "fused_norm",
    "quantize",
    "save_states",
]
"""

_ALL_PATCH = """\
--- a/pkg/cuda.py
+++ b/pkg/cuda.py
@@ -4,6 +4,7 @@ __all__ = [
     "build_indices",
     "fused_norm",
     "fused_rope",
+    "fused_mtp",
     "quantize",
     "save_states",
 ]
"""


def test_element_inserted_after_one_the_release_removed_from_the_file_is_misplaced() -> None:
    """The drift benchmark's 0.28.0#139 in small: `fused_rope` is gone from `__all__` and from the import, and the
    new name went between `fused_norm` and `quantize`. Siblings on both sides fit; the anchor is nowhere."""
    patched = _ALL_STOCK.replace('    "quantize",\n', '    "fused_mtp",\n    "quantize",\n')
    report = audit(_one_file(_ALL_STOCK), _one_file(patched), [parse_patch(_ALL_PATCH.encode(), "fix.diff")])
    [h] = report.hunks
    assert h.verdict is AuditVerdict.MISPLACED and h.expected_at is None, h.reason
    assert '`"fused_rope"`' in h.reason and "nothing in it names `fused_rope`" in h.reason


def test_element_after_one_the_file_still_names_passes() -> None:
    """The same landing where the release still imports `fused_rope` (only `__all__` lost it): no alarm."""
    stock = _ALL_STOCK.replace("fused_norm, quantize", "fused_norm, fused_rope, quantize")
    patched = stock.replace('    "quantize",\n', '    "fused_mtp",\n    "quantize",\n')
    report = audit(_one_file(stock), _one_file(patched), [parse_patch(_ALL_PATCH.encode(), "fix.diff")])
    [h] = report.hunks
    assert h.verdict is AuditVerdict.FUZZY, h.reason


def test_element_after_one_that_other_patches_add_and_remove_passes() -> None:
    """A name another patch of the audited sequence adds or removes is not gone: an earlier patch adds
    `fused_rope`, the hunk inserts after it, a later fix takes `fused_rope` out again. Neither stock nor the result
    names it; the patches do."""
    earlier = """\
--- a/pkg/cuda.py
+++ b/pkg/cuda.py
@@ -4,5 +4,6 @@ __all__ = [
     "build_indices",
     "fused_norm",
+    "fused_rope",
     "quantize",
     "save_states",
 ]
"""
    later = """\
--- a/pkg/cuda.py
+++ b/pkg/cuda.py
@@ -5,4 +5,3 @@ __all__ = [
     "fused_norm",
-    "fused_rope",
     "fused_mtp",
     "quantize",
"""
    patched = _ALL_STOCK.replace('    "quantize",\n', '    "fused_mtp",\n    "quantize",\n')
    patches = [parse_patch(d.encode(), n) for d, n in ((earlier, "0.diff"), (_ALL_PATCH, "1.diff"), (later, "2.diff"))]
    report = audit(_one_file(_ALL_STOCK), _one_file(patched), patches)
    [h] = [h for h in report.hunks if h.patch == "1.diff"]
    assert h.verdict is not AuditVerdict.MISPLACED, h.reason


def test_import_after_an_import_the_release_dropped_passes() -> None:
    """pr46994 speculator.py #1 on v0.28.0: the hunk adds `from vllm.sequence import ...` after `from
    vllm.multimodal import ...`, which the release dropped; an import statement stands alone among the imports,
    and where it goes among them means nothing."""
    diff = """\
--- a/pkg/cuda.py
+++ b/pkg/cuda.py
@@ -2,4 +2,5 @@
 from vllm.logger import init_logger
 from vllm.multimodal import MULTIMODAL_REGISTRY
+from vllm.sequence import IntermediateTensors
 from vllm.triton_utils import tl, triton
 from vllm.v1.worker.gpu.attn_utils import build_slot_mappings_by_layer
"""
    stock = (
        "import torch\nfrom vllm.logger import init_logger\nfrom vllm.triton_utils import tl, triton\n"
        "from vllm.v1.worker.gpu.attn_utils import build_slot_mappings_by_layer\n"
    )
    patched = stock.replace("from vllm.triton", "from vllm.sequence import IntermediateTensors\nfrom vllm.triton")
    report = audit(_one_file(stock), _one_file(patched), [parse_patch(diff.encode(), "d.diff")])
    [h] = report.hunks
    assert h.verdict is AuditVerdict.FUZZY, h.reason


_SIG_PATCH = """\
--- a/pkg/cuda.py
+++ b/pkg/cuda.py
@@ -1,6 +1,6 @@
 class Backend:
     def compile(
-        self, kind: str, spec: str
+        self, kind: str, spec: str, budget: int | None = None
     ) -> object:
         if kind == "json":
             return spec
"""

_SIG_ONE_LINE_PATCH = """\
--- a/pkg/cuda.py
+++ b/pkg/cuda.py
@@ -3,3 +3,3 @@
-def make_mapper(dtype: str) -> dict:
+def make_mapper(dtype: str, budget: int | None = None) -> dict:
     if dtype == "fp4":
         return {}
"""


def test_parameter_added_where_the_release_wrapped_the_signature_one_per_line_is_found_and_confirmed() -> None:
    """The release wrapped `compile`'s parameters one per line and added one; the engine put the hunk's new parameter
    on its own line after `spec`. The audit finds it there (not `failed`) and the anchors confirm it."""
    stock = (
        "class Backend:\n    def compile(\n        self,\n        kind: str,\n        spec: str,\n"
        "        stop: set[int] | None = None,\n    ) -> object:\n"
        '        if kind == "json":\n            return spec\n'
    )
    patched = stock.replace("        spec: str,\n", "        spec: str,\n        budget: int | None = None,\n")
    report = audit(_one_file(stock), _one_file(patched), [parse_patch(_SIG_PATCH.encode(), "fix.diff")])
    [h] = report.hunks
    assert h.verdict is AuditVerdict.FUZZY, h.reason
    # the same line put into another def's signature instead is not confirmed
    other = "\n    def other(\n        self,\n    ) -> None:\n        pass\n"
    wrong = stock + other.replace("        self,\n", "        self,\n        budget: int | None = None,\n")
    report = audit(_one_file(stock + other), _one_file(wrong), [parse_patch(_SIG_PATCH.encode(), "fix.diff")])
    assert not report.ok


def test_one_line_def_rewritten_inside_the_signature_the_release_wrapped_is_confirmed() -> None:
    """The hunk rewrites a one-line def; the release wrapped that signature, so the merged edit sits inside it."""
    stock = (
        "\n\ndef make_mapper(\n    dtype: str, fuse: bool = False\n) -> dict:\n"
        '    if dtype == "fp4":\n        return {}\n'
    )
    patched = stock.replace(
        "    dtype: str, fuse: bool = False\n", "    dtype: str, budget: int | None = None, fuse: bool = False\n"
    )
    report = audit(_one_file(stock), _one_file(patched), [parse_patch(_SIG_ONE_LINE_PATCH.encode(), "fix.diff")])
    [h] = report.hunks
    assert h.verdict is AuditVerdict.FUZZY, h.reason
    assert "rewrites the signature of `make_mapper`" in h.reason


def test_rewrite_of_a_line_the_release_nested_deeper_is_confirmed_where_that_line_is() -> None:
    """The release wrapped the line the hunk rewrites in an `if`; the rewrite landed on it there. The replaced line
    occurs once in stock, re-indented: that is where the hunk belongs, whatever block now holds it."""
    diff = """\
--- a/pkg/cuda.py
+++ b/pkg/cuda.py
@@ -1,4 +1,4 @@
     def get_output(self) -> dict:
-        pooled = list(self.pooled_cpu.unbind(dim=0))
+        pooled = list(self.pooled_cpu.unbind(dim=0, copy=False))
         self.copy_event.synchronize()
         return {"pooled": pooled}
"""
    stock = (
        "class PoolingOutput:\n    def get_output(self) -> dict:\n        if isinstance(self.pooled, list):\n"
        "            pooled = list(self.pooled_cpu.unbind(dim=0))\n        else:\n            pooled = self.pooled_cpu\n"
        '        self.copy_event.synchronize()\n        return {"pooled": pooled}\n'
    )
    patched = stock.replace("unbind(dim=0))", "unbind(dim=0, copy=False))")
    report = audit(_one_file(stock), _one_file(patched), [parse_patch(diff.encode(), "fix.diff")])
    [h] = report.hunks
    assert h.verdict is AuditVerdict.FUZZY, h.reason
    assert "re-indented by the release, and only there" in h.reason
    # a second copy of the line elsewhere makes the text alone not enough
    twin = stock + "\n\ndef other(self):\n    pooled = list(self.pooled_cpu.unbind(dim=0))\n"
    report = audit(_one_file(twin), _one_file(patched + twin[len(stock) :]), [parse_patch(diff.encode(), "fix.diff")])
    assert "re-indented by the release, and only there" not in report.hunks[0].reason
