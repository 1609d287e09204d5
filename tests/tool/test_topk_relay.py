"""`validation.topk_relay`: the per-release property the status table and `ampere-path` print, read from real release
trees (the PyPI sdists) with and without the series' relay entry, and from a tree whose relay is incomplete."""

from __future__ import annotations

from pathlib import Path

import pytest
from release_trees import release_commit

from vllm_compose.apply import apply_patches
from vllm_compose.patchfile import parse_patch
from vllm_compose.series import load_series
from vllm_compose.trees import GitTree, OverlayTree
from vllm_compose.validation.topk_relay import topk_crossing

pytestmark = [pytest.mark.sdist]

SERIES = Path(__file__).resolve().parents[2] / "series"
#: where GLM-5.x's model class is on CUDA (the registry's answer, pinned here)
MODEL = {
    "v0.26.0": ("vllm/model_executor/models/deepseek_v2.py", "DeepseekV2Model"),
    "v0.33.0": ("vllm/models/deepseek_v32/nvidia/model.py", "DeepseekV32Model"),
}


def _trees(tmp_path_factory, tag):
    """The release's tree, and the same with the series' relay entry applied to its model file."""
    repo, commit = release_commit(tmp_path_factory, tag)
    stock = GitTree(repo, commit.tree, tag)
    path = MODEL[tag][0]
    (entry,) = [e for e in load_series(SERIES).entries_for(tag) if "indexcache-pp-topk-relay" in e.id]
    target = tmp_path_factory.mktemp("relay-tree")
    (target / path).parent.mkdir(parents=True)
    (target / path).write_bytes(stock.read(path))
    assert apply_patches(target, [parse_patch(entry.file.read_bytes(), name=entry.file.name)]).ok
    return stock, path, (target / path).read_text()


@pytest.mark.parametrize("tag", ["v0.26.0", "v0.33.0"])
def test_stock_is_not_relayed_and_the_entry_relays(tmp_path_factory, tag):
    stock, path, composed = _trees(tmp_path_factory, tag)
    before = topk_crossing(stock)
    after = topk_crossing(OverlayTree(stock, {path: composed.encode()}))
    assert (before.path, before.cls) == (path, MODEL[tag][1])
    assert not before.relayed and before.summary() == "**not relayed**"
    assert after.relayed and after.relay_keys == ("topk_indices",) and after.summary() == "relayed (topk_indices)"
    assert before.drafter_shares and after.drafter_shares  # the V2 runner shares the target's buffer (eagle/utils.py)
    assert after.to_json()["relayed"] is True


def test_a_relay_the_receiver_never_declares_is_not_a_relay(tmp_path_factory):
    """Sent and read, but the runner's receive buffers never hold the key: the rows never arrive."""
    stock, path, composed = _trees(tmp_path_factory, "v0.33.0")
    undeclared = composed.replace('tensors["topk_indices"] = torch.full(', "_unused = torch.full(")
    assert undeclared != composed
    crossing = topk_crossing(OverlayTree(stock, {path: undeclared.encode()}))
    assert not crossing.relayed
    assert crossing.summary() == "**not relayed** (only sent topk_indices; received topk_indices)"


def test_a_tree_without_the_registry_says_why(tmp_path):
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "mod.py").write_text("x = 1\n")
    from vllm_compose.trees import DirTree

    crossing = topk_crossing(DirTree(tmp_path))
    assert crossing.path is None and not crossing.relayed
    assert crossing.summary().startswith("no DSA top-k buffer (")


def test_the_gate_report_says_whether_the_relay_is_in(tmp_path_factory):
    from vllm_compose.validation.ampere_gate import AmpereGateReport, render

    stock, path, composed = _trees(tmp_path_factory, "v0.33.0")
    report = AmpereGateReport(
        "compose-38476-v0.33.0", topk_relay=topk_crossing(OverlayTree(stock, {path: composed.encode()}))
    )
    assert "PP top-k relay (IndexCache, not judged by this gate): relayed (topk_indices)" in render(report)
    assert report.to_json()["topk_relay"]["relayed"] is True
    report.topk_relay = topk_crossing(stock)
    assert "PP top-k relay (IndexCache, not judged by this gate): **not relayed**" in render(report)
