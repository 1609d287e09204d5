"""The recall model (proof/recall_model.py) against its design, on a CPU: the fp32 reference forward of the whole
model (proof/model_reference.py) must produce the predicted tokens, and every fault the GPU suites inject must
change them; the engine fault hooks (proof/engine_faults.py) must rewrite what they say on a stand-in model."""

from __future__ import annotations

import dataclasses

import pytest

torch = pytest.importorskip("torch")

from vllm_compose.proof import engine_faults  # noqa: E402
from vllm_compose.proof import recall_model as rm  # noqa: E402
from vllm_compose.proof.model_reference import ReferenceModel, _Ctx  # noqa: E402
from vllm_compose.proof.recall_model import Fault  # noqa: E402
from vllm_compose.proof.recall_run import Suite, _blocks_needed, _judge  # noqa: E402
from vllm_compose.proof.tinyglm import tensor_layout  # noqa: E402

TOKENS = 5


@pytest.fixture(scope="module")
def tiny():
    spec = rm.tiny_spec()
    tensors = rm.make_tensors(spec)
    prompts = rm.make_prompts(spec, [120, 150])
    return spec, tensors, ReferenceModel(spec.shape, tensors), prompts


def test_glm5_spec_has_glm5_layer_sizes_and_indexcache():
    spec = rm.glm5_spec()
    spec.validate()
    s = spec.shape
    assert (s.hidden_size, s.num_attention_heads, s.q_lora_rank, s.kv_lora_rank) == (6144, 64, 2048, 512)
    assert (s.qk_nope_head_dim, s.qk_rope_head_dim, s.v_head_dim) == (192, 64, 256)
    assert (s.index_n_heads, s.index_head_dim, s.index_topk) == (32, 128, 2048)
    # layers 0-2 and 6 compute their top-k; 3-5 and 7 share it; the recall layer is the first shared one
    assert [rm.is_shared_layer(s, layer) for layer in range(8)] == [False] * 3 + [True] * 3 + [False, True]
    assert spec.recall_layer == 3


@pytest.mark.parametrize(
    "change, words",
    [
        (dict(chain=31), "chain 31 outside"),
        (dict(index_layer=3), "must compute its own top-k"),
        (dict(fillers=0), "fillers must be >= 1"),
    ],
)
def test_spec_refusals_name_the_problem(change, words):
    spec = dataclasses.replace(rm.tiny_spec(), **change)
    with pytest.raises(rm.RecallModelError) as err:
        spec.validate()
    assert words in str(err.value)


def test_small_vocabulary_is_refused():
    spec = rm.with_shape(rm.tiny_spec(), vocab_size=100)
    with pytest.raises(rm.RecallModelError, match="vocab_size 100 <"):
        spec.validate()


def test_prompts_plant_one_cycle_far_back_at_disjoint_positions(tiny):
    spec, _t, _ref, _p = tiny
    prompts = rm.make_prompts(spec, [120, 150, 200])
    assert prompts == rm.make_prompts(spec, [120, 150, 200])  # deterministic
    taken = set()
    for r, p in enumerate(prompts):
        assert sorted(p.cycle) == list(range(spec.chain))
        assert p.tokens[-1] == spec.chain_token(p.cycle[0])
        assert all(pos <= len(p.tokens) - spec.shape.index_topk - 1 for pos in p.planted_at)
        assert all(pos % len(prompts) == r for pos in p.planted_at)
        assert not taken & set(p.planted_at)
        taken |= set(p.planted_at)
        planted = {p.tokens[pos] for pos in p.planted_at}
        edges = {spec.planted_token(p.cycle[k], p.cycle[(k + 1) % spec.chain]) for k in range(spec.chain)}
        assert planted == edges
        # no planted token outside the planted positions, no chain token but the last
        for i, tok in enumerate(p.tokens[:-1]):
            if i not in p.planted_at:
                assert spec.filler_token(0) <= tok < spec.filler_token(spec.fillers)


def test_prompt_too_short_is_refused():
    spec = rm.tiny_spec()
    with pytest.raises(rm.RecallModelError, match="prompt 0: length 40"):
        rm.make_prompts(spec, [40])


def test_prediction_walks_the_prompts_cycle(tiny):
    spec, _t, _ref, prompts = tiny
    p = prompts[0]
    want = rm.predict(spec, p, spec.chain + 2)
    assert want[0] == spec.chain_token(p.cycle[1])
    assert want[spec.chain - 1] == spec.chain_token(p.cycle[0])
    assert want[spec.chain] == want[0]


@pytest.mark.slow  # the fp32 reference recomputes the whole sequence per token (seconds each)
def test_reference_gives_the_predicted_tokens_with_the_designed_margin(tiny):
    spec, _t, ref, prompts = tiny
    for p in prompts:
        assert ref.generate(list(p.tokens), TOKENS, recall_layer=spec.recall_layer) == rm.predict(spec, p, TOKENS)
        top = ref.logits(list(p.tokens), _Ctx(Fault.NONE, -1))[-1].topk(2)
        # the successor scores 2 * head_logit, the fallback head_logit: the margin is the design's, within 10%
        assert top.indices[1] == spec.fallback_token
        assert abs((top.values[0] - top.values[1]) - spec.head_logit) < 0.1 * spec.head_logit


@pytest.mark.slow  # the fp32 reference recomputes the whole sequence per token (seconds each)
def test_the_same_last_token_has_different_successors_in_different_prompts(tiny):
    spec, _t, ref, _p = tiny
    a, b = rm.make_prompts(spec, [120, 150], seed=7)
    # make both prompts end on the same chain token: their successors differ unless the cycles agree there
    b_tokens = list(b.tokens[:-1]) + [a.tokens[-1]]
    got_a = ref.generate(list(a.tokens), 1, recall_layer=spec.recall_layer)
    got_b = ref.generate(b_tokens, 1, recall_layer=spec.recall_layer)
    assert got_a == [spec.chain_token(a.successor(a.cycle[0]))]
    assert got_b == [spec.chain_token(b.successor(a.cycle[0]))]
    assert a.successor(a.cycle[0]) != b.successor(a.cycle[0])


@pytest.mark.slow  # the fp32 reference recomputes the whole sequence per token (seconds each)
@pytest.mark.parametrize("fault", [f for f in Fault if f is not Fault.NONE])
def test_every_fault_changes_the_tokens(tiny, fault):
    spec, _t, ref, prompts = tiny
    other = ref.topk_rows(list(prompts[1].tokens), spec.recall_layer)
    got = ref.generate(list(prompts[0].tokens), TOKENS, fault=fault, recall_layer=spec.recall_layer, other_topk=other)
    want = rm.predict(spec, prompts[0], TOKENS)
    assert got != want
    # what the fault leaves is the fallback: the planted token was not read
    assert spec.fallback_token in got


@pytest.mark.slow  # the fp32 reference recomputes the whole sequence per token (seconds each)
def test_a_fault_in_another_layer_changes_nothing(tiny):
    spec, _t, ref, prompts = tiny
    got = ref.generate(list(prompts[0].tokens), TOKENS, fault=Fault.ZERO_OUTPUT, recall_layer=spec.recall_layer + 1)
    assert got == rm.predict(spec, prompts[0], TOKENS)


@pytest.mark.slow  # the fp32 reference recomputes the whole sequence per token (seconds each)
def test_mtp_layer_drafts_the_successor_of_the_token_just_sampled(tiny):
    spec, _t, ref, prompts = tiny
    p = prompts[0]
    seq = list(p.tokens) + rm.predict(spec, p, 2)
    drafts = ref.mtp_draft(seq)
    # at the last position the MTP layer sees the last sampled token; its draft is that token's successor
    assert int(drafts[-1].argmax()) == rm.predict(spec, p, 3)[2]


def test_shared_layers_carry_no_indexer_weights(tiny):
    spec, tensors, _ref, _p = tiny
    layout = tensor_layout(spec.shape)
    for layer in range(spec.shape.num_hidden_layers):
        names = [n for n in layout if n.startswith(f"model.layers.{layer}.self_attn.indexer.")]
        present = [n for n in names if n in tensors]
        assert present == ([] if rm.is_shared_layer(spec.shape, layer) else names)


def test_spec_json_round_trips():
    spec = rm.glm5_spec()
    assert rm.spec_from_json(rm.spec_to_json(spec)) == spec


def test_judge_reports_the_first_difference_and_fallbacks(tiny):
    spec, _t, _ref, prompts = tiny
    want = rm.predict(spec, prompts[0], 4)
    bad = want[:2] + [spec.fallback_token, want[3]]
    out = _judge(spec, prompts[:1], [bad], 4)[0]
    assert (out["as_predicted"], out["first_difference"], out["differing"], out["fallback_tokens"]) == (False, 2, 1, 1)
    assert _judge(spec, prompts[:1], [want], 4)[0]["as_predicted"]


def test_blocks_needed_counts_every_request_and_mtp():
    s = Suite(label="x", model_dir="m", lengths=[64 * 10, 64 * 20], max_tokens=8, block_size=64, mtp=1)
    assert _blocks_needed(s) == 2 * ((11 + 21) + 64) * 2


# --- the engine hooks on a stand-in of vLLM's module tree --------------------------------------------------------


class _Attn(torch.nn.Module):
    def __init__(self, buf):
        super().__init__()
        self.topk_indices_buffer = buf
        self.seen = []

    def forward(self, positions, hidden_states):
        self.seen.append(self.topk_indices_buffer[: hidden_states.shape[0]].clone())
        return hidden_states + 1


class _Layer(torch.nn.Module):
    def __init__(self, buf):
        super().__init__()
        self.self_attn = _Attn(buf)


class _Inner(torch.nn.Module):
    def __init__(self, buf):
        super().__init__()
        self.layers = torch.nn.ModuleList([_Layer(buf) for _ in range(5)])


class _Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.buf = torch.arange(24, dtype=torch.int32).view(6, 4)
        self.model = _Inner(self.buf)


def _run(model, fault, rows=3, steps=2):
    engine_faults.install(model, fault, 3)
    attn = model.model.layers[3].self_attn
    outs = []
    for step in range(steps):
        model.buf[:rows] = torch.arange(rows * 4, dtype=torch.int32).view(rows, 4) + 100 * step
        outs.append(attn(torch.zeros(rows), torch.zeros(rows, 8)))
    return attn.seen, outs, engine_faults.clear()


@pytest.mark.parametrize(
    "fault, expect",
    [
        ("shift", lambda base, prev: base + 1),
        ("unfilled", lambda base, prev: torch.zeros_like(base)),
        ("other-request", lambda base, prev: torch.roll(base, 1, 0)),
        ("previous-step", lambda base, prev: prev),
    ],
)
def test_engine_hook_rewrites_the_rows_the_layer_reads(fault, expect):
    model = _Model()
    seen, _outs, counters = _run(model, fault)
    base1 = torch.arange(12, dtype=torch.int32).view(3, 4) + 100
    base0 = base1 - 100
    assert torch.equal(seen[1], expect(base1, base0))
    assert counters["hooks"][0]["calls"] == 2
    # cleared: the next forward reads the rows as written
    attn = model.model.layers[3].self_attn
    attn(torch.zeros(3), torch.zeros(3, 8))
    assert torch.equal(attn.seen[-1], model.buf[:3])


def test_engine_hook_zeroes_the_output_and_clears():
    model = _Model()
    _seen, outs, _c = _run(model, "zero-output")
    assert all(torch.count_nonzero(o) == 0 for o in outs)
    out = model.model.layers[3].self_attn(torch.zeros(2), torch.zeros(2, 8))
    assert torch.equal(out, torch.ones(2, 8))


def test_engine_hook_refuses_a_model_without_the_layer_or_the_buffer():
    model = _Model()
    with pytest.raises(engine_faults.EngineFaultError, match="layers.9.self_attn"):
        engine_faults.install(model, "shift", 9)
    for layer in model.model.layers:
        layer.self_attn.topk_indices_buffer = None
    model.buf = None
    with pytest.raises(engine_faults.EngineFaultError, match="topk_indices_buffer"):
        engine_faults.install(model, "shift", 3)


def test_topk_probe_accepts_the_designed_selection_and_rejects_a_shifted_one(tiny):
    from vllm_compose.proof.recall_run import topk_probe

    spec, _t, ref, prompts = tiny
    p = prompts[0]
    want = rm.predict(spec, p, TOKENS)
    rows = ref.topk_rows(list(p.tokens) + want[:-1], spec.recall_layer)
    forwards = [[rows[len(p.tokens) + k].tolist()] for k in range(TOKENS - 1)]
    probe = topk_probe(spec, p, want, forwards)
    assert probe["ok"] and probe["steps"] == TOKENS - 1 and probe["designed_key_held"] == TOKENS - 1
    shifted = [[[i + 1 if i >= 0 else i for i in f[0]]] for f in forwards]
    bad = topk_probe(spec, p, want, shifted)
    assert not bad["ok"] and bad["designed_key_held"] < TOKENS - 1
    # a prefill-sized forward is not a step; no step at all is not a pass
    assert not topk_probe(spec, p, want, [[[0], [1]]])["ok"]


def test_planted_positions_know_their_keys(tiny):
    spec, _t, _ref, prompts = tiny
    p = prompts[0]
    for key in range(spec.chain):
        pos = p.planted_at_of(key)
        assert p.tokens[pos] == spec.planted_token(key, p.successor(key))


def test_engine_probe_records_decode_rows_only_and_changes_nothing():
    model = _Model()
    engine_faults.install_probe(model, 3, max_rows=2)
    attn = model.model.layers[3].self_attn
    attn(torch.zeros(3), torch.zeros(3, 8))  # a prefill-sized forward: not recorded
    attn(torch.zeros(1), torch.zeros(1, 8))
    rows = engine_faults.clear()["hooks"][0]["rows"]
    assert rows == [model.buf[:1].tolist()]
    assert torch.equal(attn.seen[-1], model.buf[:1])


def test_draft_judgement_reads_the_counters():
    from vllm_compose.proof.recall_run import judge_drafts

    shared = judge_drafts(
        {"vllm:spec_decode_num_drafts": 64, "vllm:spec_decode_num_accepted_tokens_per_pos": [64, 0]}, 2
    )
    assert shared["first_all_accepted"] and shared["later_steps"].startswith("every later draft rejected")
    own = judge_drafts({"vllm:spec_decode_num_drafts": 44, "vllm:spec_decode_num_accepted_tokens_per_pos": [44, 44]}, 2)
    assert own["first_all_accepted"] and own["later_steps"].startswith("every later draft accepted")
    missed = judge_drafts({"vllm:spec_decode_num_drafts": 64, "vllm:spec_decode_num_accepted_tokens_per_pos": [60]}, 1)
    assert not missed["first_all_accepted"]
    assert not judge_drafts({}, 1)["first_all_accepted"]  # no counters: not a pass


def test_w4_packing_puts_input_k_at_bits_4k_offset_by_8_and_round_trips():
    w = torch.zeros(2, 128)
    w[0, :8] = torch.tensor([-7.0, -1, 0, 1, 2, 3, 4, 7]) * 0.5  # group max 3.5 -> scale 0.5
    w[1, 9] = -3.5
    q = rm.quantize_w4(w)
    assert q["weight_packed"].dtype == torch.int32 and q["weight_packed"].shape == (2, 16)
    assert q["weight_scale"].tolist() == [[0.5], [0.5]] and q["weight_shape"].tolist() == [2, 128]
    word = int(q["weight_packed"][0, 0]) & 0xFFFFFFFF
    assert [(word >> (4 * k)) & 0xF for k in range(8)] == [1, 7, 8, 9, 10, 11, 12, 15]
    assert (int(q["weight_packed"][1, 1]) >> 4) & 0xF == 1  # input 9: word 1, bits 4..7, -7 + 8
    assert torch.equal(rm.dequantize_w4(q), w)
    x = torch.randn(64, 256)
    err = (rm.dequantize_w4(rm.quantize_w4(x)) - x).abs().max() / x.abs().max()
    assert err < 1 / 14 + 1e-3  # half a step of 7 levels (scale rounded to bf16)


def test_a_w4a16_checkpoint_quantizes_the_routed_experts_only(tmp_path):
    pytest.importorskip("safetensors")
    from safetensors.torch import load_file

    spec = dataclasses.replace(rm.tiny_spec(), moe_quant="w4a16")
    spec = rm.with_shape(spec, moe_intermediate_size=128)
    rm.write_checkpoint(spec, tmp_path)
    cfg = __import__("json").loads((tmp_path / "config.json").read_text())["quantization_config"]
    assert cfg["config_groups"]["group_0"]["weights"]["num_bits"] == 4 and "re:.*self_attn.*" in cfg["ignore"]
    tensors = {}
    for f in tmp_path.glob("*.safetensors"):
        tensors.update(load_file(str(f)))
    e = "model.layers.1.mlp.experts.0.down_proj"
    assert f"{e}.weight" not in tensors and tensors[f"{e}.weight_packed"].dtype == torch.int32
    assert tensors["model.layers.1.mlp.shared_experts.down_proj.weight"].dtype == torch.bfloat16
    assert tensors["model.layers.3.self_attn.o_proj.weight"].dtype == torch.bfloat16
    assert rm.spec_from_json(__import__("json").loads((tmp_path / "recall_spec.json").read_text())) == spec


def test_an_unknown_quantization_is_refused():
    with pytest.raises(rm.RecallModelError, match="moe_quant must be"):
        dataclasses.replace(rm.tiny_spec(), moe_quant="int3").validate()


@pytest.mark.slow  # builds a second tiny model and runs the fp32 reference's MTP layer
def test_designed_wrong_drafts_miss_exactly_where_the_spec_says():
    spec = rm.with_draft_acceptance(rm.tiny_spec(), 0.5)
    assert len(spec.mtp_wrong) == spec.chain // 2
    ref = ReferenceModel(spec.shape, rm.make_tensors(spec))
    p = rm.make_prompts(spec, [120])[0]
    want = rm.predict(spec, p, spec.chain + 1)
    seq = list(p.tokens) + want[:-1]
    drafts = ref.mtp_draft(seq).argmax(-1).tolist()
    # the MTP layer at position n sees seq[n + 1] and drafts the token after it: for each generated token, the draft
    # of the next one is right exactly when the design says so
    base = len(p.tokens) - 1
    right = [drafts[base + k] == want[k + 1] for k in range(spec.chain - 1)]
    assert right == [rm.draft_right(spec, want[k + 1]) for k in range(spec.chain - 1)]
    assert 0 < sum(right) < len(right)


def test_draft_acceptance_outside_0_1_is_refused():
    with pytest.raises(rm.RecallModelError, match="outside"):
        rm.with_draft_acceptance(rm.tiny_spec(), 1.5)


@pytest.mark.slow  # the fp32 reference on the checkpoint's bf16 values
def test_the_checkpoint_dtypes_keep_the_prediction(tiny):
    spec, _t, _ref, prompts = tiny
    stored = rm.make_tensors(spec, checkpoint_dtypes=True)
    assert stored["model.layers.3.self_attn.o_proj.weight"].dtype == torch.bfloat16
    assert stored["model.layers.1.mlp.gate.e_score_correction_bias"].dtype == torch.float32
    ref = ReferenceModel(spec.shape, stored)  # what vLLM loads, computed in fp32
    p = prompts[0]
    assert ref.generate(list(p.tokens), TOKENS, recall_layer=spec.recall_layer) == rm.predict(spec, p, TOKENS)


def test_output_probe_accepts_the_designed_output_and_rejects_a_zeroed_or_wrong_one(tiny):
    from vllm_compose.proof.recall_run import output_probe

    spec, _t, ref, prompts = tiny
    p = prompts[0]
    want = rm.predict(spec, p, TOKENS)
    _rows, out = ref.recall_layer_io(list(p.tokens) + want[:-1], spec.recall_layer)
    lo, hi = spec.dims.out(0), spec.dims.out(spec.chain)

    def forwards(o):
        return [
            {"columns": [o[len(p.tokens) + k, lo:hi].tolist()], "norm": [float(o[len(p.tokens) + k].norm())]}
            for k in range(TOKENS - 1)
        ]

    probe = output_probe(spec, want, forwards(out))
    assert probe["ok"] and probe["steps"] == TOKENS - 1
    assert probe["max_relative_error"] < 0.05 and probe["min_share_of_norm"] > 0.95
    assert not output_probe(spec, want, forwards(torch.zeros_like(out)))["ok"]
    shifted = out.clone()
    shifted[:, lo:hi] = torch.roll(out[:, lo:hi], 1, dims=1)  # the value of another chain token
    assert not output_probe(spec, want, forwards(shifted))["ok"]
    assert not output_probe(spec, want, [])["ok"]


def test_engine_probe_records_the_output_lanes_of_decode_steps():
    model = _Model()
    engine_faults.install_probe(model, 3, max_rows=2, columns=(1, 3))
    attn = model.model.layers[3].self_attn
    attn(torch.zeros(3), torch.zeros(3, 8))  # prefill-sized: left out
    attn(torch.zeros(1), torch.full((1, 8), 2.0))  # the stand-in adds 1: output 3.0 everywhere
    [hook] = engine_faults.clear()["hooks"]
    assert hook["outputs"] == [{"columns": [[3.0, 3.0]], "norm": [pytest.approx(3.0 * 8**0.5)]}]
