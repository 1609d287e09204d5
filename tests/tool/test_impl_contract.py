"""ampere/impl_contract: the methods the DSA path calls on its impl, and what an impl class defines or inherits.

On made-up modules, and on vLLM 0.33.0's own code from its sdist: there the deepseek_v32 attention calls
`record_logical_topk_ready` unconditionally, the XPU sparse impl (TRITON_MLA_SPARSE's base) lacks it, and
FlashMLA's sparse impl inherits it. That gap is what the composed v0.33.0's first forward hit on the H200.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from release_trees import composed_tree, release_tree

from vllm_compose.ampere.dsa_path import _find_class
from vllm_compose.ampere.impl_contract import Verdict, class_members, impl_calls, impl_contracts
from vllm_compose.ampere.release_source import release_source
from vllm_compose.trees import DirTree

LAYER = """
class Layer:
    def forward(self, x, md):
        self.impl.always(x)
        if md is not None:
            self.impl.when_md(md)
        else:
            self.impl.in_else(md)
        ok = self.ready and self.impl.after_and()
        y = self.impl.in_ifexp() if x else 0
        self.other.not_an_impl()
        return self.impl.forward_mqa(x)
"""

BASES = """
from typing import Generic, TypeVar
from vllm.base import Base
from external.lib import Outside

T = TypeVar("T")


class Impl(Base, Generic[T]):
    flag = True

    def own(self):
        pass


class Odd(Outside):
    pass
"""

BASE = """
class Root:
    def from_root(self):
        pass


class Base(Root):
    def forward_mqa(self):
        pass
"""


def _tree(tmp_path: Path, files: dict[str, str]) -> DirTree:
    for rel, text in files.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    return DirTree(tmp_path)


def test_each_impl_call_is_found_with_the_condition_that_decides_it(tmp_path):
    tree = _tree(tmp_path, {"vllm/layer.py": LAYER})
    calls = {c.name: c for c in impl_calls(tree, ["vllm/layer.py", "vllm/absent.py"])}
    assert set(calls) == {"always", "when_md", "in_else", "after_and", "in_ifexp", "forward_mqa"}
    assert calls["always"].condition is None and calls["forward_mqa"].condition is None
    assert calls["always"].site == "vllm/layer.py:4"
    assert calls["when_md"].condition == "md is not None"
    assert calls["in_else"].condition == "md is not None"
    assert calls["after_and"].condition == "self.ready"
    assert calls["in_ifexp"].condition == "x"


def test_members_follow_the_bases_through_imports_and_name_what_cannot_be_resolved(tmp_path):
    tree = _tree(tmp_path, {"vllm/impl.py": BASES, "vllm/base.py": BASE})
    src = release_source(tree)
    path, cls, _ = _find_class(src, "vllm.impl", "Impl")
    members, unresolved = class_members(tree, path, cls)
    assert members["own"] == "vllm/impl.py:Impl" and members["flag"] == "vllm/impl.py:Impl"
    assert members["forward_mqa"] == "vllm/base.py:Base" and members["from_root"] == "vllm/base.py:Root"
    assert unresolved == []  # Generic adds nothing an impl is asked for
    path, odd, _ = _find_class(src, "vllm.impl", "Odd")
    members, unresolved = class_members(tree, path, odd)
    assert members == {} and unresolved == ["Outside (base of Odd, vllm/impl.py)"]


@pytest.mark.sdist
def test_v0_33_0_calls_a_method_the_xpu_sparse_impl_lacks_and_flashmla_sparse_inherits(tmp_path_factory):
    tree = DirTree(release_tree(tmp_path_factory, "v0.33.0"))
    calls = [c for c in impl_calls(tree, ["vllm/models/deepseek_v32/attention.py"])]
    record = [c for c in calls if c.name == "record_logical_topk_ready"]
    assert record and record[0].condition is None  # on every forward
    src = release_source(tree)
    xpu_path, xpu, _ = _find_class(src, "vllm.v1.attention.backends.mla.xpu_mla_sparse", "XPUMLASparseImpl")
    xpu_members, _ = class_members(tree, xpu_path, xpu)
    assert "record_logical_topk_ready" not in xpu_members
    assert "forward_mqa" in xpu_members  # the rest of the contract it does answer
    flash = next(
        n.name
        for n in ast.walk(ast.parse(tree.read("vllm/v1/attention/backends/mla/flashmla_sparse.py")))
        if isinstance(n, ast.ClassDef) and n.name.endswith("Impl")
    )
    fpath, fcls, _ = _find_class(src, "vllm.v1.attention.backends.mla.flashmla_sparse", flash)
    members, _ = class_members(tree, fpath, fcls)
    assert members["record_logical_topk_ready"].endswith(":SparseMLACommonImpl")


@pytest.mark.parametrize("tag", ["v0.26.0", "v0.29.0", "v0.30.0", "v0.33.0"])
def test_every_composed_impl_answers_what_the_path_calls_unconditionally(tag):
    tree = composed_tree(tag, "vllm/v1/attention/backends/mla/triton_mla_sparse.py")
    (contract,) = impl_contracts(DirTree(tree))
    assert contract.backend == "TRITON_MLA_SPARSE" and contract.impl.endswith(":TritonMLASparseImpl")
    assert contract.missing == [] and contract.unresolved_bases == []
    answered = {a.name for a in contract.answers if a.verdict is Verdict.OK}
    assert "forward_mqa" in answered
    if tag >= "v0.30.0":  # 0031
        assert "record_logical_topk_ready" in answered
