"""The layer probe (proof/layer_probe.py) and the model-level faults (engine_faults.install_model_fault), on a CPU.

No vLLM here: a stand-in engine with vLLM's module names (`model.layers.N.self_attn` called with `positions=` and
`hidden_states=`, a `logits_processor`) runs a written tiny checkpoint the way an engine does, prefill then one token
a step, each attention module keeping its own K/V history, IndexCache's shared layers reading the top-k of the last
layer that computed one in the same step. Its arithmetic is `CheckpointReference`'s own, so a faithful stand-in must
pass the probe, and each fault the GPU suites inject (applied to the stand-in's copy of the reference) must fail it,
except the indexer weights' scale, which every logit of a row shares, so the top-k and the layer do not move.
`install_model_fault` is checked against a module tree carrying the attributes vLLM's DeepseekV32 attention holds."""

from __future__ import annotations

from dataclasses import replace

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("safetensors")

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


class _Attention(torch.nn.Module):
    def __init__(self, engine: _Engine, layer: int):
        super().__init__()
        self.engine, self.layer = engine, layer
        self.xs: list = []
        self.ps: list = []

    def forward(self, positions, hidden_states):
        e, ref = self.engine, self.engine.ref
        self.xs.append(hidden_states)
        self.ps.append(positions)
        x, pos = torch.cat(self.xs), torch.cat(self.ps)
        rows = list(range(x.shape[0] - hidden_states.shape[0], x.shape[0]))
        w = e.weights(self.layer)
        if not ref.shares(self.layer) or e.topk is None:
            e.topk = ref.indexer_topk(w, x, pos, rows)
            if e.topk_edit:
                e.topk = e.topk_edit(self.layer, e.topk)
        if e.buffer is not None:  # vLLM's one top-k buffer, on every attention module (v0.34.0)
            e.buffer[: len(rows)] = -1
            e.buffer[: len(rows), : e.topk.shape[1]] = e.topk
        return ref.attention(w, x, pos, rows, e.topk)


class _Layer(torch.nn.Module):
    def __init__(self, engine: _Engine, layer: int):
        super().__init__()
        self.self_attn = _Attention(engine, layer)


class _Identity(torch.nn.Module):
    def forward(self, x):
        return x


class _Engine(torch.nn.Module):
    """`ref` computes; `edit(layer, weights)` may change a layer's weights (a fault) before it does."""

    def __init__(self, ref: CheckpointReference, edit=None, topk_edit=None, buffer: bool = True):
        super().__init__()
        self.ref, self.edit, self.topk_edit, self.topk = ref, edit, topk_edit, None
        self.buffer = torch.full((PROMPT + DECODE, ref.index_topk), -1, dtype=torch.int32) if buffer else None
        self.model = torch.nn.Module()
        self.model.layers = torch.nn.ModuleList(_Layer(self, n) for n in range(ref.layers))
        self.logits_processor = _Identity()
        if self.buffer is not None:
            for layer in self.model.layers:
                layer.self_attn.topk_indices_buffer = self.buffer

    def weights(self, layer: int) -> dict:
        w = dict(self.ref.attention_weights(layer))
        return self.edit(layer, w) if self.edit else w

    def step(self, tokens: list[int], start: int):
        ref = self.ref
        self.topk = None
        pos = torch.arange(start, start + len(tokens))
        h = ref.tensors("model.embed_tokens.")["weight"][torch.tensor(tokens)]
        for n, layer in enumerate(self.model.layers):
            p = f"model.layers.{n}."
            x = ref._rms(h, ref.tensors(p + "input_layernorm.")["weight"])
            h = h + layer.self_attn(positions=pos, hidden_states=x)
            h = h + ref._mlp(n, ref._rms(h, ref.tensors(p + "post_attention_layernorm.")["weight"]))
        final = ref._rms(h[-1:], ref.tensors("model.norm.")["weight"])
        return self.logits_processor(final @ ref.tensors("lm_head.")["weight"].T)

    def generate(self, prompt: list[int], n: int) -> list[int]:
        out: list[int] = []
        logits = self.step(prompt, 0)
        for _ in range(n):
            out.append(int(logits.argmax()))
            logits = self.step(out[-1:], len(prompt) + len(out) - 1)
        return out


def _probe(checkpoint, engine_ref=None, edit=None, topk_edit=None, buffer=True) -> dict:
    out, prompt = checkpoint
    engine = _Engine(engine_ref or CheckpointReference(out, fp8_indexer=False), edit, topk_edit, buffer)
    lp.install(engine)
    try:
        lp.arm(True)
        with torch.no_grad():
            generated = engine.generate(prompt, DECODE)
        return lp.judge(CheckpointReference(out, fp8_indexer=False), prompt, generated)
    finally:
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
    assert r["rows"][: 4] == lp.check_rows(PROMPT, PROMPT + DECODE)[:4] and PROMPT - 1 in r["rows"]
    assert r["rows"][-1] == PROMPT + DECODE - 1
    # the shared layers were judged on the top-k of the last layer that computed one
    assert [r["layers"][str(n)]["shared_topk"] for n in range(5)] == [
        rm.is_shared_layer(rm.tiny_spec().shape, n) for n in range(5)
    ]
    assert r["logits"]["passed"] and r["logits"]["argmax_agree"] == r["logits"]["rows"] == DECODE, r["logits"]


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


def _scaled_softmax(checkpoint, factor):
    ref = CheckpointReference(checkpoint[0], fp8_indexer=False)
    ref.scale *= factor
    return ref


@pytest.mark.parametrize("factor", [0.53, 1.25])
def test_a_softmax_scale_fault_fails_every_layer_and_the_logits(checkpoint, factor):
    r = _probe(checkpoint, engine_ref=_scaled_softmax(checkpoint, factor))
    assert not r["layers_passed"] and not r["logits"]["passed"], r
    assert not r["layers"]["0"]["passed"]  # layer 0's input is the engine's own: the fault is in the layer itself


@pytest.mark.parametrize("buffer", [True, False], ids=["engine-topk", "reference-topk"])
def test_the_indexer_rope_on_the_other_lane_pairing_fails(checkpoint, buffer):
    ref = CheckpointReference(checkpoint[0], fp8_indexer=False)
    ref.index_interleaved = not ref.index_interleaved
    r = _probe(checkpoint, engine_ref=ref, buffer=buffer)
    assert not r["layers"]["0"]["passed"], r["layers"]
    if buffer:  # seen where it is: the top-k, the attention over the engine's own selection being right
        assert not r["layers"]["0"]["topk_passed"] and r["layers"]["0"]["max_relative_error"] < 1e-4
        # the logits over the engine's selections agree; over the reference indexer's own they move
        assert r["logits"]["passed"] and not r["logits"]["own_topk"]["passed"], r["logits"]


def test_a_top_k_off_at_the_boundary_fails_its_layer_alone(checkpoint):
    def last_swapped(layer, topk):
        if layer != 1:
            return topk
        out = topk.clone()
        row = out[-1]
        valid = row[row >= 0]
        unused = [p for p in range(int(valid.max()) + 1) if p not in set(valid.tolist())]
        row[len(valid) - 1] = unused[0]  # the k-th pick replaced by a key the indexer ranked lower
        return out

    r = _probe(checkpoint, topk_edit=last_swapped)
    assert r["layers"]["0"]["passed"] and not r["layers"]["1"]["passed"], r["layers"]
    assert not r["layers"]["1"]["topk_passed"] and r["layers"]["1"]["topk_min_tie_recall"] < 0.99


def test_one_layers_kcache_x2_fails_that_layer(checkpoint):
    def kcache_x2(layer, w):
        if layer == 2:
            w["kv_a_layernorm.weight"] = w["kv_a_layernorm.weight"] * 2
            pe = w["kv_a_proj_with_mqa.weight"].clone()
            pe[-64:] *= 2
            w["kv_a_proj_with_mqa.weight"] = pe
        return w

    r = _probe(checkpoint, edit=kcache_x2)
    assert r["layers"]["0"]["passed"] and r["layers"]["1"]["passed"]
    assert not r["layers"]["2"]["passed"] and not r["layers_passed"], r["layers"]


def test_the_indexer_weights_scale_passes(checkpoint):
    def weights_half(_layer, w):
        if "indexer.weights_proj.weight" in w:  # shared layers hold no indexer
            w["indexer.weights_proj.weight"] = w["indexer.weights_proj.weight"] * 0.5
        return w

    r = _probe(checkpoint, edit=weights_half)
    assert r["layers_passed"] and r["logits"]["passed"], r


def test_judge_without_records_and_install_without_layers_are_refused():
    lp.clear()
    with pytest.raises(lp.LayerProbeError, match="nothing was recorded"):
        lp.judge(None, [1, 2], [3])
    with pytest.raises(lp.LayerProbeError, match="layers.N.self_attn"):
        lp.install(torch.nn.Linear(2, 2))


def test_positions_recorded_twice_are_refused(checkpoint):
    out, prompt = checkpoint
    engine = _Engine(CheckpointReference(out, fp8_indexer=False))
    lp.install(engine)
    try:
        lp.arm(True)
        with torch.no_grad():
            engine.step(prompt[:20], 0)
            engine.step(prompt[:20], 0)  # a second request (or a re-run prefix) at the same positions
        with pytest.raises(lp.LayerProbeError, match="not 0..39 once each"):
            lp.judge(CheckpointReference(out, fp8_indexer=False), prompt[:20], [])
    finally:
        lp.clear()


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
        (torch.equal(x, y) if isinstance(x, torch.Tensor) else x == y) for ra, rb in zip(a, b) for x, y in zip(ra, rb)
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
