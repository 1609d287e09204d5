"""`pp.topk_relay`: the per-release property the status table and `ampere-path` print, read from real release
trees (the PyPI sdists) with and without the series' relay entry, from v0.34.0, which relays by itself
(`pp_topk_buffers` / `copy_pp_buffers`), and from trees whose relay is incomplete or doubled."""

from __future__ import annotations

from pathlib import Path

import pytest
from release_trees import release_commit

from vllm_compose.apply import apply_patches
from vllm_compose.patchfile import parse_patch
from vllm_compose.pp.topk_relay import topk_crossing
from vllm_compose.series import load_series
from vllm_compose.trees import GitTree, OverlayTree

pytestmark = [pytest.mark.sdist]

SERIES = Path(__file__).resolve().parents[2] / "series"
#: where GLM-5.x's model class is on CUDA (the registry's answer, pinned here)
MODEL = {
    "v0.26.0": ("vllm/model_executor/models/deepseek_v2.py", "DeepseekV2Model"),
    "v0.33.0": ("vllm/models/deepseek_v32/nvidia/model.py", "DeepseekV32Model"),
    "v0.34.0": ("vllm/models/deepseek_v32/nvidia/model.py", "DeepseekV32Model"),
}
#: where v0.34.0 defines the builder and the copier of its relay
UTILS = "vllm/model_executor/models/utils.py"
UPSTREAM_RELAY = "relayed (topk_indices, by pp_topk_buffers and copy_pp_buffers)"


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
    assert not before.relayed and before.summary() == "**not relayed**" and before.buffer_map is None
    assert after.relayed and after.relay_keys == ("topk_indices",) and after.summary() == "relayed (topk_indices)"
    assert before.drafter_shares and after.drafter_shares  # the V2 runner shares the target's buffer (eagle/utils.py)
    assert after.to_json()["relayed"] is True and after.buffer_map is None and after.twice == ()


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
    from vllm_compose.ampere.gate import AmpereGateReport, render

    stock, path, composed = _trees(tmp_path_factory, "v0.33.0")
    report = AmpereGateReport(
        "compose-38476-v0.33.0", topk_relay=topk_crossing(OverlayTree(stock, {path: composed.encode()}))
    )
    assert "PP top-k relay (IndexCache, not judged by this gate): relayed (topk_indices)" in render(report)
    assert report.to_json()["topk_relay"]["relayed"] is True
    report.topk_relay = topk_crossing(stock)
    assert "PP top-k relay (IndexCache, not judged by this gate): **not relayed**" in render(report)


def _stock(tmp_path_factory, tag):
    repo, commit = release_commit(tmp_path_factory, tag)
    return GitTree(repo, commit.tree, tag)


def test_v0_34_0_relays_by_itself(tmp_path_factory):
    """Stock v0.34.0 relays the top-k through a map of keys to the model's buffers: built by `pp_topk_buffers` of
    models/utils.py from the model's `topk_indices_buffer`, declared to the receive buffers, copied in by
    `copy_pp_buffers` and expanded into what a non-last stage sends."""
    crossing = topk_crossing(_stock(tmp_path_factory, "v0.34.0"))
    assert (crossing.path, crossing.cls) == MODEL["v0.34.0"]
    assert crossing.relayed and crossing.relay_keys == ("topk_indices",) and crossing.twice == ()
    assert crossing.summary() == UPSTREAM_RELAY
    m = crossing.buffer_map
    assert (m.attr, m.builder, m.builder_path, m.keys, m.copier) == (
        "pp_buffers",
        "pp_topk_buffers",
        UTILS,
        ("topk_indices",),
        "copy_pp_buffers",
    )
    assert m.declared and m.sent and m.relays
    assert crossing.drafter_shares
    got = crossing.to_json()
    assert got["relayed"] is True and got["buffer_map"]["builder"] == "pp_topk_buffers"
    assert got["relayed_twice"] == []


#: (file, v0.34.0 text, replacement, summary): each edit takes one part of the relay away
BROKEN_UPSTREAM_RELAYS = {
    "no-copy-in": (
        MODEL["v0.34.0"][0],
        "copy_pp_buffers(intermediate_tensors, self.pp_buffers)",
        "pass",
        "**not relayed** (only sent topk_indices; declared topk_indices)",
    ),
    "copier-copies-nothing": (
        UTILS,
        "buffer[: tensor.shape[0]].copy_(tensor)",
        "pass",
        "**not relayed** (only sent topk_indices; declared topk_indices)",
    ),
    "undeclared": (
        MODEL["v0.34.0"][0],
        "config.hidden_size, self.pp_buffers",
        "config.hidden_size",
        "**not relayed** (only sent topk_indices; received topk_indices)",
    ),
    "not-sent": (
        MODEL["v0.34.0"][0],
        "**{k: v[:full_num_tokens] for k, v in self.pp_buffers.items()},",
        "",
        "**not relayed** (only received topk_indices; declared topk_indices)",
    ),
    "builder-maps-nothing": (
        UTILS,
        'return {"topk_indices": topk_indices_buffer}',
        "return {}",
        "**not relayed**",
    ),
}


@pytest.mark.parametrize("case", sorted(BROKEN_UPSTREAM_RELAYS))
def test_upstreams_relay_with_a_part_missing_is_not_a_relay(tmp_path_factory, case):
    path, text, replacement, summary = BROKEN_UPSTREAM_RELAYS[case]
    stock = _stock(tmp_path_factory, "v0.34.0")
    source = stock.read(path).decode()
    assert source.count(text) == 1, (case, text)
    crossing = topk_crossing(OverlayTree(stock, {path: source.replace(text, replacement).encode()}))
    assert not crossing.relayed
    assert crossing.summary() == summary


def test_the_series_entry_on_top_of_upstreams_relay_relays_twice(tmp_path_factory):
    """The v0.30.0 entry resolved by hand on v0.34.0 (its helpers and receive-buffer wrapper place; its receive and
    send lines are put where v0.34.0's own are): the same rows are relayed by both forms, which the summary flags."""
    stock = _stock(tmp_path_factory, "v0.34.0")
    path = MODEL["v0.34.0"][0]
    entry = next(e for e in load_series(SERIES).entries if e.id == "fix-deepseek-v32-indexcache-pp-topk-relay")
    patch = parse_patch(entry.file.read_bytes(), name=entry.file.name)
    target = tmp_path_factory.mktemp("double-relay")
    (target / path).parent.mkdir(parents=True)
    (target / path).write_bytes(stock.read(path))
    assert not apply_patches(target, [patch], dry_run=True).ok  # the receive and send hunks conflict on v0.34.0
    (file_patch,) = patch.files
    file_patch.hunks[:] = file_patch.hunks[:2]
    assert apply_patches(target, [patch]).ok
    text = (target / path).read_text()
    own_receive = "copy_pp_buffers(intermediate_tensors, self.pp_buffers)\n"
    own_send = "**{k: v[:full_num_tokens] for k, v in self.pp_buffers.items()},\n"
    assert text.count(own_receive) == 1 and text.count(own_send) == 1
    text = text.replace(
        own_receive,
        own_receive
        + '            relayed = intermediate_tensors["topk_indices"]\n'
        + "            self._topk_buffer[: relayed.shape[0]].copy_(relayed)\n",
    )
    text = text.replace(
        own_send, own_send + '                    "topk_indices": self._topk_buffer[:full_num_tokens].clone(),\n'
    )
    crossing = topk_crossing(OverlayTree(stock, {path: text.encode()}))
    assert crossing.relayed and crossing.twice == ("topk_indices",)
    assert crossing.summary() == (
        "**relayed twice** (topk_indices: by the model's own keys and by pp_topk_buffers and copy_pp_buffers)"
    )
    assert crossing.to_json()["relayed_twice"] == ["topk_indices"]
