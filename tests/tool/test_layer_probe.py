"""The layer probe (proof/layer_probe.py) and the model-level faults (engine_faults.install_model_fault), on a CPU.

No vLLM here: `standin_engine.Engine` runs a written tiny checkpoint as an engine does, under vLLM's module names and
with the attributes of vLLM's DeepseekV32 attention that the faults change. Its arithmetic is `CheckpointReference`'s
own, so unfaulted it must pass the probe, and each fault the GPU suites inject (through `install_model_fault`, as on
the GPU) must fail it, except the indexer weights' scale, which every logit of a row shares, so the top-k and the
layer do not move."""

from __future__ import annotations

import contextlib
from dataclasses import replace

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("safetensors")

from standin_engine import Engine  # noqa: E402

from vllm_compose.proof import engine_faults as ef  # noqa: E402
from vllm_compose.proof import layer_probe as lp  # noqa: E402
from vllm_compose.proof import recall_model as rm  # noqa: E402
from vllm_compose.proof.checkpoint_reference import CheckpointReference  # noqa: E402

PROMPT = 140
DECODE = 6


@pytest.fixture(scope="module")
def designed(tmp_path_factory):
    out = tmp_path_factory.mktemp("tiny")
    rm.write_checkpoint(rm.tiny_spec(), out)
    return out, list(rm.make_prompts(rm.tiny_spec(), [PROMPT])[0].tokens)


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    # random weights: not peaked, so a fault that changes a layer shows in the logits too
    spec = replace(rm.tiny_spec(), random_weights=True)
    out = tmp_path_factory.mktemp("tiny-random")
    rm.write_checkpoint(spec, out)
    prompt = list(rm.make_prompts(rm.tiny_spec(), [PROMPT])[0].tokens)
    return out, prompt


def _probe(
    checkpoint, fault: str | None = None, topk_edit=None, buffer=True, baseline=None, shared_rope=False, route_swap=None
) -> dict:
    out, prompt = checkpoint
    engine = Engine(
        CheckpointReference(out, fp8_indexer=False), topk_edit, buffer, shared_rope=shared_rope, route_swap=route_swap
    )
    lp.install(engine)
    try:
        if fault:
            ef.install_model_fault(engine, fault, layer=2)
        lp.arm(True)
        generated = engine.generate(prompt, DECODE)
        return lp.judge(CheckpointReference(out, fp8_indexer=False), prompt, generated, baseline=baseline)
    finally:
        ef.clear()
        lp.clear()


def test_a_faithful_engine_passes_every_layer_and_its_logits(checkpoint):
    r = _probe(checkpoint)
    assert r["layers_passed"] and r["worst_layer_error"] < 1e-4, r
    assert {m["topk_source"] for m in r["layers"].values()} == {"engine"} and r["logits"]["selection"] == "engine"
    # full layers held to the reference indexer, shared ones to the last computed rows
    assert all(m["topk_passed"] for m in r["layers"].values())
    assert all(m["topk_min_tie_recall"] == 1.0 for m in r["layers"].values() if not m["shared_topk"])
    assert all(m["topk_same_as_last"] for m in r["layers"].values() if m["shared_topk"])
    assert set(r["layers"]) == {str(n) for n in range(5)}
    # prefill rows spread over the prompt (its last included) and every decode step after the prompt's end
    assert r["rows"][:4] == lp.check_rows(PROMPT, PROMPT + DECODE)[:4] and PROMPT - 1 in r["rows"]
    assert r["rows"][-1] == PROMPT + DECODE - 1
    assert [r["layers"][str(n)]["shared_topk"] for n in range(5)] == [
        rm.is_shared_layer(rm.tiny_spec().shape, n) for n in range(5)
    ]
    assert r["logits"]["passed"] and r["logits"]["argmax_agree"] == r["logits"]["rows"] == DECODE, r["logits"]
    assert r["logits"]["positions"] == list(range(PROMPT - 1, PROMPT + DECODE - 1))
    assert len(r["logits"]["row_errors"]) == DECODE and max(r["logits"]["row_errors"]) < 1e-4
    # each row's narrowest expert choice, by MoE layer
    assert len(r["logits"]["row_route_margins"]) == DECODE
    assert all(layer >= 1 and margin >= 0 for layer, margin in r["logits"]["row_route_margins"])
    # the first layer ran on the request's own tokens at every position
    assert r["inputs"]["rows"] == PROMPT + DECODE and r["inputs"]["rows_off"] == 0, r["inputs"]


@contextlib.contextmanager
def _recording(checkpoint):
    """A faithful stand-in engine with the probe installed and armed; the probe is cleared afterwards."""
    out, _prompt = checkpoint
    engine = Engine(CheckpointReference(out, fp8_indexer=False))
    lp.install(engine)
    try:
        lp.arm(True)
        yield engine
    finally:
        lp.clear()


def test_a_row_run_on_another_token_is_named_by_position(checkpoint):
    out, prompt = checkpoint
    with _recording(checkpoint) as engine:
        generated = engine.generate(prompt, DECODE)
        # the judge is told another token at the prompt's position 5 than the engine ran
        told = list(prompt)
        told[5] = next(
            t
            for t in range(1, 50)
            if engine.ref.tensors("model.embed_tokens.")["weight"][t].norm() > 0 and t != prompt[5]
        )
        r = lp.judge(CheckpointReference(out, fp8_indexer=False), told, generated, logits=False)
    assert r["inputs"]["positions_off"] == [5] and r["inputs"]["rows_off"] == 1, r["inputs"]


def test_without_the_top_k_buffer_the_references_own_selection_is_used(designed, checkpoint):
    # the designed model's selections are peaked: the reference's and the engine's agree but for a near-tie or two
    # among the filler keys, which moves a layer's row by about 1.4% (within LAYER_TOLERANCE)
    r = _probe(designed, buffer=False)
    assert r["layers_passed"] and r["logits"]["passed"], r
    assert {m["topk_source"] for m in r["layers"].values()} == {"reference"}
    assert all("topk_passed" not in m for m in r["layers"].values())
    # the random model's layer 0 has exact ties there (ReLU zeros over repeated prompt tokens): the reference's
    # selection then differs from the engine's, which is why the engine's is recorded where the release keeps it
    assert not _probe(checkpoint, buffer=False)["layers"]["0"]["passed"]


@pytest.mark.parametrize("fault", ["softmax-x0.53", "softmax-x1.25"])
def test_a_softmax_scale_fault_fails_every_layer_and_the_logits(checkpoint, fault):
    r = _probe(checkpoint, fault)
    assert not r["logits"]["passed"], r["logits"]
    # each layer's input is the engine's own: the fault is found in every layer itself
    assert all(not m["passed"] and m["topk_passed"] for m in r["layers"].values()), r["layers"]


def test_the_indexer_rope_on_the_other_lane_pairing_fails_the_top_k(checkpoint):
    r = _probe(checkpoint, "indexer-rope-half")
    full = [n for n, m in r["layers"].items() if not m["shared_topk"]]
    assert all(not r["layers"][n]["topk_passed"] for n in full), r["layers"]
    # seen where it is: the attention over the engine's own selection is right
    assert r["layers"]["0"]["max_relative_error"] < 1e-4
    # the logits over the engine's selections agree; over the reference indexer's own they move
    assert r["logits"]["passed"] and not r["logits"]["own_topk"]["passed"], r["logits"]


def test_the_indexer_rope_fault_flips_a_rope_module_the_layers_share_once(checkpoint):
    """Before v0.33.0 every indexer reads the RoPE module vLLM's get_rope cache hands out, one for all layers: the
    fault must flip it once, not once per layer (an even number of indexers would undo it, as on the GPU)."""
    out, _prompt = checkpoint
    engine = Engine(CheckpointReference(out, fp8_indexer=False), shared_rope=True)
    full = [n for n in range(5) if not rm.is_shared_layer(rm.tiny_spec().shape, n)]
    assert len(full) >= 2
    before = engine.shared_rope.is_neox_style
    try:
        info = ef.install_model_fault(engine, "indexer-rope-half", layer=2)
        assert engine.shared_rope.is_neox_style is not before
        assert len([c for c in info["changed"] if c.startswith("indexer_rope_emb")]) == 1, info
    finally:
        ef.clear()
    assert engine.shared_rope.is_neox_style is before
    r = _probe(checkpoint, "indexer-rope-half", shared_rope=True)
    assert all(not r["layers"][str(n)]["topk_passed"] for n in full), r["layers"]
    assert _probe(checkpoint, shared_rope=True)["layers_passed"]


def test_against_a_clean_runs_picks_a_fault_that_moves_the_top_k_shows_and_a_clean_run_does_not(checkpoint):
    _probe(checkpoint)
    clean = lp.judged_topk()
    full = [n for n in range(5) if not rm.is_shared_layer(rm.tiny_spec().shape, n)]
    assert sorted(clean) == full
    again = _probe(checkpoint, baseline=clean)
    assert all(again["layers"][str(n)]["topk_overlap_with_clean"] == 1.0 for n in full), again["layers"]
    moved = _probe(checkpoint, "indexer-rope-half", baseline=clean)
    assert all(moved["layers"][str(n)]["topk_overlap_with_clean"] < 1.0 for n in full), moved["layers"]
    # shared layers read the last computed rows: no overlap of their own
    assert all("topk_overlap_with_clean" not in m for m in moved["layers"].values() if m["shared_topk"])


def test_one_layers_kcache_x2_fails_that_layer(checkpoint):
    r = _probe(checkpoint, "kcache-x2")
    assert r["layers"]["0"]["passed"] and r["layers"]["1"]["passed"]
    assert not r["layers"]["2"]["passed"] and not r["layers_passed"], r["layers"]


def test_the_indexer_weights_scale_passes(checkpoint):
    r = _probe(checkpoint, "indexer-weights-x0.5")
    assert r["layers_passed"] and r["logits"]["passed"], r


def _narrowest_route(checkpoint) -> tuple[int, int, float]:
    """The first decode-judged row's narrowest MoE expert choice in a faithful run: (layer, position, margin)."""
    r = _probe(checkpoint)["logits"]
    (layer, margin), position = r["row_route_margins"][0], r["positions"][0]
    return layer, position, margin


def test_a_row_routed_the_other_way_at_a_near_tie_is_judged_on_that_routing(checkpoint, monkeypatch):
    # the engine takes the other expert at the row's narrowest choice, as a bf16 router may at a near-tie
    layer, position, margin = _narrowest_route(checkpoint)
    monkeypatch.setattr(lp, "ROUTE_TIE_MARGIN", margin * 1.01)
    r = _probe(checkpoint, route_swap=(layer, position))["logits"]
    assert r["passed"] and max(r["row_errors"]) < 1e-4, r
    assert r["route_swaps"] == [
        {
            "position": position,
            "layer": layer,
            "margin": round(margin, 6),
            "error_routed": r["route_swaps"][0]["error_routed"],
            "error_swapped": 0.0,
            "kept": True,
        }
    ]
    assert r["route_swaps"][0]["error_routed"] > lp.LOGITS_TOLERANCE  # the swap is what made the row agree
    # the same routing where the choice was no near-tie: a wrong route, which fails the row
    monkeypatch.setattr(lp, "ROUTE_TIE_MARGIN", margin * 0.99)
    r = _probe(checkpoint, route_swap=(layer, position))["logits"]
    assert not r["passed"] and r["route_swaps"] == [] and r["row_errors"][0] > lp.LOGITS_TOLERANCE, r


def test_a_fault_is_not_explained_away_by_swapping_routes(checkpoint, monkeypatch):
    # every expert choice counted a near-tie: the swaps are tried, none brings a faulted row back, and the tries
    # stop at ROUTE_SWAP_FORWARDS
    monkeypatch.setattr(lp, "ROUTE_TIE_MARGIN", 1.0)
    monkeypatch.setattr(lp, "ROUTE_SWAP_FORWARDS", DECODE)
    r = _probe(checkpoint, "softmax-x1.25")["logits"]
    assert not r["passed"], r
    assert 0 < len(r["route_swaps"]) <= lp.ROUTE_SWAP_FORWARDS
    assert not any(t["kept"] for t in r["route_swaps"]), r["route_swaps"]
    # more rows off than the tries allowed: none is tried (a fault moves every row; a tie moves one)
    monkeypatch.setattr(lp, "ROUTE_SWAP_FORWARDS", 2)
    r = _probe(checkpoint, "softmax-x1.25")["logits"]
    assert not r["passed"] and [set(t) for t in r["route_swaps"]] == [{"skipped"}], r["route_swaps"]


def test_a_top_k_off_at_the_boundary_fails_its_layer_alone(checkpoint):
    def last_swapped(layer, topk):
        if layer != 1:
            return topk
        out = topk.clone()
        row = out[-1]
        valid = row[row >= 0]
        unused = [p for p in range(int(valid.max()) + 1) if p not in set(valid.tolist())]
        # the last picks replaced by keys the indexer ranked lower, enough to take the row below TOPK_MIN_RECALL
        n = int(len(valid) * (1 - lp.TOPK_MIN_RECALL)) + 1
        assert len(unused) >= n, "the prompt is too short for the swap"
        row[len(valid) - n : len(valid)] = torch.tensor(unused[:n], dtype=row.dtype)
        return out

    r = _probe(checkpoint, topk_edit=last_swapped)
    assert r["layers"]["0"]["passed"] and not r["layers"]["1"]["passed"], r["layers"]
    assert not r["layers"]["1"]["topk_passed"] and r["layers"]["1"]["topk_min_tie_recall"] < lp.TOPK_MIN_RECALL


def test_judge_without_records_and_install_without_layers_are_refused():
    lp.clear()
    with pytest.raises(lp.LayerProbeError, match="nothing was recorded"):
        lp.judge(None, [1, 2], [3])
    with pytest.raises(lp.LayerProbeError, match="layers.N.self_attn"):
        lp.install(torch.nn.Linear(2, 2))


def test_positions_recorded_twice_are_refused(checkpoint):
    out, prompt = checkpoint
    with _recording(checkpoint) as engine:
        with torch.no_grad():
            engine.step(prompt[:20], 0)
            engine.step(prompt[:20], 0)  # a second request (or a re-run prefix) at the same positions
        with pytest.raises(lp.LayerProbeError, match="not 0..39 once each"):
            lp.judge(CheckpointReference(out, fp8_indexer=False), prompt[:20], [])


# --- install_model_fault on vLLM's attribute names ------------------------------------------------------------------


class _Impl:
    def __init__(self):
        self.softmax_scale = 0.1
        self.scale = 0.1


class _V32Attention(torch.nn.Module):
    """The attributes of vLLM's DeepseekV32 attention the faults change (v0.33.0 on: the fused Q/KV A projection,
    the indexer's RoPE style as `_index_rope_interleave` and the rope module's `is_neox_style`)."""

    def __init__(self, indexer: bool):
        super().__init__()
        self.impl = _Impl()
        self.qk_rope_head_dim = 4
        self.kv_a_layernorm = torch.nn.LayerNorm(6)
        self.fused_qkv_a_proj = torch.nn.Linear(3, 8 + 6 + 4, bias=False)
        self.indexer = torch.nn.Module() if indexer else None
        if indexer:
            self.indexer.softmax_scale = 0.25
        self._index_rope_interleave = False
        self.indexer_rope_emb = torch.nn.Module()
        self.indexer_rope_emb.is_neox_style = True


def _fault_model():
    m = torch.nn.Module()
    m.model = torch.nn.Module()
    m.model.layers = torch.nn.ModuleList(torch.nn.Module() for _ in range(3))
    for n, layer in enumerate(m.model.layers):
        layer.self_attn = _V32Attention(indexer=n != 1)
    return m


def _state(m) -> list:
    out = []
    for layer in m.model.layers:
        a = layer.self_attn
        out.append(
            (
                a.impl.softmax_scale,
                a.impl.scale,
                a.indexer.softmax_scale if a.indexer is not None else None,
                a._index_rope_interleave,
                a.indexer_rope_emb.is_neox_style,
                a.kv_a_layernorm.weight.clone(),
                a.fused_qkv_a_proj.weight.clone(),
            )
        )
    return out


def _same(a, b) -> bool:
    return all(
        (torch.equal(x, y) if isinstance(x, torch.Tensor) else x == y)
        for ra, rb in zip(a, b, strict=True)
        for x, y in zip(ra, rb, strict=True)
    )


@pytest.mark.parametrize("fault", sorted(ef.MODEL_FAULTS))
def test_each_model_fault_changes_its_attribute_and_clear_undoes_it(fault):
    m = _fault_model()
    before = _state(m)
    info = ef.install_model_fault(m, fault, layer=2)
    after = _state(m)
    assert info["changed"] and not _same(before, after)
    if fault.startswith("softmax-x"):
        factor = float(fault.removeprefix("softmax-x"))
        assert all(abs(a[0] - 0.1 * factor) < 1e-12 and abs(a[1] - 0.1 * factor) < 1e-12 for a in after)
    elif fault == "indexer-rope-half":
        assert [a[3] for a in after] == [True, False, True] and [a[4] for a in after] == [False, True, False]
    elif fault == "indexer-weights-x0.5":
        assert [a[2] for a in after] == [0.125, None, 0.125]
    else:  # kcache-x2, layer 2 only: the latent norm and the last rope rows of the fused A projection
        assert _same(before[:2], after[:2])
        assert torch.equal(after[2][5], before[2][5] * 2)
        assert torch.equal(after[2][6][-4:], before[2][6][-4:] * 2) and torch.equal(after[2][6][:-4], before[2][6][:-4])
    ef.clear()
    assert _same(before, _state(m))


def test_a_model_fault_refuses_what_it_cannot_find():
    with pytest.raises(ef.EngineFaultError, match="unknown model fault 'softmax-x9'"):
        ef.install_model_fault(_fault_model(), "softmax-x9", layer=0)
    with pytest.raises(ef.EngineFaultError, match="no attention impl"):
        ef.install_model_fault(torch.nn.Linear(2, 2), "softmax-x0.53", layer=0)
    m = _fault_model()
    for layer in m.model.layers:
        del layer.self_attn._index_rope_interleave
        layer.self_attn.indexer_rope_emb = None
    with pytest.raises(ef.EngineFaultError, match="RoPE style was not found"):
        ef.install_model_fault(m, "indexer-rope-half", layer=0)
    ef.clear()


# --- the proof's layer-reference flow (recall_run._layer_reference) on the stand-in ----------------------------------


class _LLM:
    """What `_layer_reference` uses of `vllm.LLM`: `apply_model` runs a function on the (one worker's) model."""

    def __init__(self, engine: Engine):
        self.engine = engine

    def apply_model(self, fn):
        return [fn(self.engine)]


def _flow(checkpoint, monkeypatch, random_weights: bool, break_fault: str | None = None) -> dict:
    from vllm_compose.proof import recall_run

    out, _prompt = checkpoint
    spec = replace(rm.tiny_spec(), random_weights=random_weights)
    engine = Engine(CheckpointReference(out, fp8_indexer=True))
    monkeypatch.setattr(
        recall_run, "generate", lambda llm, prompts, n: [llm.engine.generate(list(p.tokens), n) for p in prompts]
    )
    if break_fault:  # a fault whose installation does nothing: the proof must say it was not caught
        real = ef.install_model_fault
        monkeypatch.setattr(
            ef,
            "install_model_fault",
            lambda m, fault, layer: {"fault": fault} if fault == break_fault else real(m, fault, layer),
        )
    suite = recall_run.Suite(
        label="t",
        model_dir=str(out),
        lengths=[PROMPT],
        layer_reference=True,
        model_faults=sorted(ef.MODEL_FAULTS),
        probe_length=PROMPT,
        probe_tokens=DECODE,
    )
    result: dict = {"checks": []}
    recall_run._layer_reference(_LLM(engine), suite, spec, result)
    return result


def test_the_proofs_layer_reference_passes_a_faithful_engine_and_catches_each_fault(checkpoint, monkeypatch):
    result = _flow(checkpoint, monkeypatch, random_weights=True)
    failed = [c for c, ok in result["checks"] if not ok]
    assert not failed, failed
    names = " ".join(c for c, _ in result["checks"])
    for fault in ef.MODEL_FAULTS:
        assert f"model fault {fault}:" in names
    # the random model: each must-flag fault also moves the final logits (RoPE: over the reference's own top-k)
    assert sum("final logits move off" in c for c, _ in result["checks"]) == 4
    assert set(result["layer_reference"]["faults"]) == set(ef.MODEL_FAULTS)


def test_the_proofs_layer_reference_fails_a_fault_it_did_not_see(checkpoint, monkeypatch):
    result = _flow(checkpoint, monkeypatch, random_weights=True, break_fault="kcache-x2")
    failed = [c for c, ok in result["checks"] if not ok]
    assert failed and all("kcache-x2" in c for c in failed), failed
