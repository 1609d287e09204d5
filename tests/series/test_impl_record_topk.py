"""Series entry 0031 against the releases' own code: the deepseek_v32 attention asks its sparse-MLA impl
`record_logical_topk_ready()` from v0.30.0, and TRITON_MLA_SPARSE's impl, an `XPUMLASparseImpl`, inherits no such
method in any release.

Without 0031, composed v0.33.0 on an H200 (sm_80 paths forced) fails on the first forward with
`AttributeError: 'TritonMLASparseImpl' object has no attribute 'record_logical_topk_ready'`. These tests show, from
each release's sdist, where the call exists (so 0031's range is right) and that the base class lacks the method (so
the fix is needed), and that 0031's hunk defines it on `TritonMLASparseImpl`.
"""

from __future__ import annotations

import ast
import tomllib
from pathlib import Path

import pytest
from release_trees import release_tree

from vllm_compose.patchfile import parse_patch

REPO = Path(__file__).resolve().parents[2]
ATTENTION = "vllm/models/deepseek_v32/attention.py"
CALL = "self.impl.record_logical_topk_ready()"
PATCH = REPO / "series" / "patches" / "0031-triton-mla-sparse-record-logical-topk-ready.patch"
#: the classes TritonMLASparseImpl inherits from in the composes (PR #38476: `TritonMLASparseImpl(XPUMLASparseImpl)`)
XPU_ANCESTRY = {"XPUMLASparseImpl", "MLAAttentionImpl", "AttentionImplBase", "SharedTopkIndicesBuffer"}


def _classes_defining(tree: Path, method: str) -> set[str]:
    found = set()
    for path in (tree / "vllm").rglob("*.py"):
        try:
            module = ast.parse(path.read_text(errors="replace"))
        except SyntaxError:
            continue
        for node in ast.walk(module):
            if isinstance(node, ast.ClassDef) and any(
                isinstance(f, ast.FunctionDef) and f.name == method for f in node.body
            ):
                found.add(node.name)
    return found


@pytest.mark.sdist
@pytest.mark.parametrize(("tag", "calls"), [("v0.29.0", False), ("v0.30.0", True), ("v0.33.0", True)])
def test_the_attention_asks_an_impl_method_the_xpu_ancestry_lacks(tmp_path_factory, tag, calls):
    tree = release_tree(tmp_path_factory, tag)
    assert (CALL in (tree / ATTENTION).read_text()) is calls
    defining = _classes_defining(tree, "record_logical_topk_ready")
    if calls:
        assert defining, "the release calls the method but no class defines it"
    assert not defining & XPU_ANCESTRY  # inherited by TritonMLASparseImpl from nowhere: 0031 is needed


def test_0031_covers_exactly_the_releases_that_call_it_and_defines_the_method_on_the_triton_impl():
    series = tomllib.loads((REPO / "series" / "series.toml").read_text())
    entry = next(e for e in series["entry"] if e.get("file", "").endswith(PATCH.name))
    assert entry["tags"] == ">=0.30.0"  # v0.29.0 does not call it (the sdist test above), v0.30.0 does
    patch = parse_patch(PATCH.read_bytes(), name=PATCH.name)
    assert [f.new_path for f in patch.files] == ["vllm/v1/attention/backends/mla/triton_mla_sparse.py"]
    (hunk,) = patch.files[0].hunks
    assert "class TritonMLASparseImpl" in hunk.section
    added = "".join(text + "\n" for op, text in hunk.lines if op == "+")
    method = ast.parse("class T:\n" + added).body[0].body[0]
    assert isinstance(method, ast.FunctionDef) and method.name == "record_logical_topk_ready"
    assert [a.arg for a in method.args.args] == ["self"]
