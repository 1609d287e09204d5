"""The tiny GLM-DSA checkpoint generator: config, key layout, shapes, determinism, bf16 encoding, pipeline split.

numpy only (no torch): the checkpoint is what vLLM 0.26.0's deepseek_v2 / deepseek_mtp loaders read on the device.
"""

from __future__ import annotations

import json
import struct

import pytest

np = pytest.importorskip("numpy", reason="the tiny checkpoint generator needs numpy (see .ci/run)")

from tinyglm_specs import CYCLE, SMALL  # noqa: E402

from vllm_compose.proof.tinyglm import (  # noqa: E402
    DRAFT_PATHS,
    SPECIAL_TOKENS,
    TinyGlmError,
    TinyGlmSpec,
    TokenCycle,
    config_dict,
    from_bf16_bits,
    generate,
    make_tensors,
    pp_layer_partition,
    prompts,
    read_safetensors,
    stage_layers,
    tensor_layout,
    to_bf16_bits,
)


def test_config_names_the_glm_dsa_architecture_and_keeps_topk_below_max_len():
    cfg = config_dict(TinyGlmSpec())
    assert cfg["architectures"] == ["GlmMoeDsaForCausalLM"]
    assert cfg["model_type"] == "glm_moe_dsa"
    assert cfg["kv_lora_rank"] + cfg["qk_rope_head_dim"] == 576
    assert (cfg["index_head_dim"], cfg["qk_rope_head_dim"]) == (128, 64)  # the fused indexer-q kernel's shape
    assert cfg["index_topk"] < 1024 and cfg["num_nextn_predict_layers"] == 1
    assert cfg["num_hidden_layers"] >= 4  # one decoder layer per stage at PP4


def test_spec_refuses_max_model_len_not_above_index_topk():
    with pytest.raises(TinyGlmError, match="index_topk"):
        TinyGlmSpec(index_topk=256).validate(max_model_len=256)
    TinyGlmSpec(index_topk=256).validate(max_model_len=257)


def test_spec_refuses_widths_the_sparse_kernels_cannot_take():
    with pytest.raises(TinyGlmError, match="576"):
        TinyGlmSpec(kv_lora_rank=256).validate()
    with pytest.raises(TinyGlmError, match="128"):
        TinyGlmSpec(index_head_dim=64).validate()


def test_layout_dense_first_layer_moe_after_indexer_everywhere():
    layout = tensor_layout(SMALL)
    assert "model.layers.0.mlp.gate_proj.weight" in layout
    assert not any(k.startswith("model.layers.0.mlp.experts.") for k in layout)
    for layer in range(1, SMALL.num_hidden_layers):
        experts = {k.split(".")[5] for k in layout if k.startswith(f"model.layers.{layer}.mlp.experts.")}
        assert experts == {str(e) for e in range(SMALL.n_routed_experts)}
        assert layout[f"model.layers.{layer}.mlp.gate.e_score_correction_bias"] == ((4,), "F32")
        assert f"model.layers.{layer}.mlp.shared_experts.down_proj.weight" in layout
    for layer in range(SMALL.num_hidden_layers + 1):
        for part in ("wq_b.weight", "wk.weight", "k_norm.weight", "k_norm.bias", "weights_proj.weight"):
            assert f"model.layers.{layer}.self_attn.indexer.{part}" in layout


def test_layout_mtp_nextn_layer_follows_the_decoder_layers():
    layout = tensor_layout(SMALL)
    mtp = f"model.layers.{SMALL.num_hidden_layers}"
    h = SMALL.hidden_size
    assert layout[f"{mtp}.eh_proj.weight"] == ((h, 2 * h), "BF16")
    for name in ("enorm.weight", "hnorm.weight", "shared_head.norm.weight"):
        assert layout[f"{mtp}.{name}"] == ((h,), "BF16")
    assert layout[f"{mtp}.shared_head.head.weight"] == ((SMALL.vocab_size, h), "BF16")
    assert layout[f"{mtp}.embed_tokens.weight"] == ((SMALL.vocab_size, h), "BF16")
    assert f"{mtp}.mlp.experts.0.up_proj.weight" in layout  # the nextn block is an MoE decoder layer
    assert not any(k.startswith(f"model.layers.{SMALL.num_hidden_layers + 1}.") for k in layout)
    assert {"lm_head.weight", "model.embed_tokens.weight", "model.norm.weight"} <= set(layout)


def test_layout_shapes_follow_the_mla_and_indexer_dimensions():
    s, layout = SMALL, tensor_layout(SMALL)
    a = "model.layers.1.self_attn"
    assert layout[f"{a}.q_b_proj.weight"][0] == (
        s.num_attention_heads * (s.qk_nope_head_dim + s.qk_rope_head_dim),
        s.q_lora_rank,
    )
    assert layout[f"{a}.kv_a_proj_with_mqa.weight"][0] == (576, s.hidden_size)
    assert layout[f"{a}.kv_b_proj.weight"][0] == (s.num_attention_heads * (s.qk_nope_head_dim + s.v_head_dim), 512)
    assert layout[f"{a}.o_proj.weight"][0] == (s.hidden_size, s.num_attention_heads * s.v_head_dim)
    assert layout[f"{a}.indexer.wq_b.weight"][0] == (s.index_n_heads * 128, s.q_lora_rank)
    assert layout[f"{a}.indexer.weights_proj.weight"][0] == (s.index_n_heads, s.hidden_size)


def test_generate_writes_a_readable_checkpoint(tmp_path):
    out = generate(SMALL, tmp_path / "m", max_model_len=64)
    header, arrays = read_safetensors(out / "model.safetensors")
    layout = tensor_layout(SMALL)
    assert set(header) == set(layout)
    for name, (shape, dtype) in layout.items():
        assert header[name]["dtype"] == dtype and tuple(header[name]["shape"]) == shape
        assert arrays[name].shape == shape
    raw = (out / "model.safetensors").read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    assert n % 8 == 0  # data starts 8-byte aligned
    assert json.loads((out / "config.json").read_text())["num_hidden_layers"] == SMALL.num_hidden_layers
    norm = arrays["model.layers.0.input_layernorm.weight"]
    assert np.all(norm == 1.0)
    mtp = f"model.layers.{SMALL.num_hidden_layers}"
    assert np.array_equal(arrays[f"{mtp}.shared_head.head.weight"], arrays["lm_head.weight"])


def test_generate_is_byte_identical_for_a_seed_and_differs_across_seeds(tmp_path):
    a = generate(SMALL, tmp_path / "a") / "model.safetensors"
    b = generate(SMALL, tmp_path / "b") / "model.safetensors"
    c = generate(TinyGlmSpec(**{**SMALL.__dict__, "seed": 1}), tmp_path / "c") / "model.safetensors"
    assert a.read_bytes() == b.read_bytes()
    assert a.read_bytes() != c.read_bytes()


def test_a_tensor_does_not_depend_on_the_layers_before_it():
    four = make_tensors(SMALL)
    six = make_tensors(TinyGlmSpec(**{**SMALL.__dict__, "num_hidden_layers": 6}))
    name = "model.layers.2.self_attn.q_a_proj.weight"
    assert np.array_equal(four[name], six[name])


def test_fixed_routing_sends_every_token_to_the_same_experts():
    t = make_tensors(TinyGlmSpec(**{**SMALL.__dict__, "fixed_routing": True}))
    assert not np.any(t["model.layers.1.mlp.gate.weight"])
    bias = t["model.layers.1.mlp.gate.e_score_correction_bias"]
    assert len(set(bias.tolist())) == len(bias) and list(bias) == sorted(bias, reverse=True)


def test_bf16_rounds_to_nearest_even_and_round_trips():
    x = np.array([1.0, -2.5, 1.0 + 2**-8, 1.0 + 3 * 2**-8, 1.0 + 2**-9, np.inf, 0.0], dtype=np.float32)
    back = from_bf16_bits(to_bf16_bits(x))
    assert back.tolist() == [1.0, -2.5, 1.0, 1.0 + 2**-6, 1.0, np.inf, 0.0]  # ties go to even mantissas
    assert np.isnan(from_bf16_bits(to_bf16_bits(np.array([np.nan], dtype=np.float32))))[0]


def test_the_safetensors_package_reads_the_file_when_installed(tmp_path):
    st = pytest.importorskip("safetensors", reason="cross-check only; the generator writes the format itself")
    path = generate(SMALL, tmp_path / "m") / "model.safetensors"
    with st.safe_open(str(path), framework="numpy") as f:
        assert set(f.keys()) == set(tensor_layout(SMALL))
        assert f.get_slice("model.norm.weight").get_shape() == [SMALL.hidden_size]


@pytest.mark.parametrize(
    ("layers", "pp", "parts"),
    [
        (4, 1, [4]),
        (4, 2, [2, 2]),
        (4, 4, [1, 1, 1, 1]),
        (5, 4, [1, 1, 2, 1]),
        (6, 4, [1, 2, 2, 1]),
        (9, 4, [2, 2, 3, 2]),
    ],
)
def test_pp_layer_partition_matches_vllms_even_split(layers, pp, parts):
    assert pp_layer_partition(layers, pp) == parts
    assert sum(parts) == layers


def test_pp4_gives_every_stage_a_decoder_layer_and_the_last_stage_the_last_layer():
    stages = stage_layers(TinyGlmSpec().num_hidden_layers, 4)
    assert [list(r) for r in stages] == [[0], [1], [2], [3]]
    # the middle ranks (1 and 2) both receive and send; the MTP layer (index 4) belongs to no stage's decoder range
    assert all(4 not in r for r in stages)


def test_pp_split_refuses_more_stages_than_layers():
    with pytest.raises(TinyGlmError, match="num_hidden_layers >= 8"):
        pp_layer_partition(4, 8)


def test_prompts_are_fixed_token_ids_clear_of_special_tokens():
    a, b = prompts(SMALL), prompts(SMALL)
    assert a == b and len(a) == 4
    assert all(3 <= t < SMALL.vocab_size for p in a for t in p)
    assert [len(p) for p in a] == [17, 64, 150, 40]


# --- the cycle model: greedy decoding and MTP drafts designed in advance -------------------------------------------


def _bf16(x):
    return from_bf16_bits(to_bf16_bits(x))


def _rmsnorm(x):
    return x / np.sqrt((x**2).mean(-1, keepdims=True) + 1e-5)


def test_cycle_visits_every_ordinary_token_once_and_specials_lead_into_it():
    cyc = TokenCycle.of(CYCLE)
    t, seen = cyc.next[0], []
    for _ in range(CYCLE.vocab_size - SPECIAL_TOKENS):
        seen.append(t)
        t = cyc.next[t]
    assert sorted(seen) == list(range(SPECIAL_TOKENS, CYCLE.vocab_size))
    assert t == seen[0]  # back where it started: one cycle, no shorter loop
    assert {cyc.next[s] for s in range(SPECIAL_TOKENS)} == {seen[0]}
    assert set(cyc.draft_path) <= set(DRAFT_PATHS) and len(set(cyc.draft_path[SPECIAL_TOKENS:])) == 3


def test_cycle_head_scores_head_logit_for_the_next_token_and_zero_elsewhere():
    t = make_tensors(CYCLE)
    cyc = TokenCycle.of(CYCLE)
    emb, head = _bf16(t["model.embed_tokens.weight"]), _bf16(t["lm_head.weight"])
    logits = _rmsnorm(emb) @ head.T
    assert list(logits.argmax(1)) == list(cyc.next)
    top = np.sort(logits, axis=1)
    assert np.allclose(top[:, -1], CYCLE.head_logit, atol=0.05)
    assert np.abs(top[:, :-1]).max() < 0.05


def test_cycle_margin_survives_layer_output_larger_than_the_embedding():
    """The designed margin is what keeps greedy tokens equal across batch shapes: random residual contributions of
    1.5x the embedding's RMS (the layers' output, context-dependent on the GPU) never change the top token."""
    spec = TinyGlmSpec(**{**CYCLE.__dict__, "vocab_size": 256, "hidden_size": 256})
    t = make_tensors(spec)
    cyc = TokenCycle.of(spec)
    emb, head = _bf16(t["model.embed_tokens.weight"]), _bf16(t["lm_head.weight"])
    rng = np.random.default_rng(7)
    for _ in range(4):
        resid = emb + rng.standard_normal(emb.shape) * 1.5 * spec.embed_rms
        logits = _rmsnorm(resid) @ head.T
        assert list(logits.argmax(1)) == list(cyc.next)
        top = np.sort(logits, axis=1)
        assert (top[:, -1] - top[:, -2]).min() > 0.1 * spec.head_logit


def _draft(t, spec, cyc, tensors, use_embedding=True, use_hidden=True, noise=0.0, rng=None):
    """The MTP layer's draft for last token `t`, through eh_proj and the shared head (the block's output as noise)."""
    emb, head = _bf16(tensors["model.embed_tokens.weight"]), _bf16(tensors["lm_head.weight"])
    eh = _bf16(tensors[f"model.layers.{spec.num_hidden_layers}.eh_proj.weight"])
    prev = next(u for u in range(SPECIAL_TOKENS, spec.vocab_size) if cyc.next[u] == t)
    x = eh @ np.concatenate(
        [_rmsnorm(emb[t]) * use_embedding, _rmsnorm(emb[prev]) * use_hidden]
    )  # target hidden of `prev` ~ its embedding
    if noise:
        x = x + rng.standard_normal(x.shape) * noise
    return int((_rmsnorm(x) @ head.T).argmax()) if np.any(x) else None


def test_cycle_mtp_drafts_follow_the_designed_paths():
    t = make_tensors(CYCLE)
    cyc = TokenCycle.of(CYCLE)
    rng = np.random.default_rng(3)
    for tok in range(SPECIAL_TOKENS, CYCLE.vocab_size):
        path = cyc.draft_path[tok]
        assert _draft(tok, CYCLE, cyc, t, noise=CYCLE.mtp_gain, rng=rng) == cyc.draft_next(tok)
        right = cyc.next[tok]
        assert (cyc.draft_next(tok) == right) == (path != "wrong")
        # each path carries the draft alone: without the other half of eh_proj it is unchanged; without its own
        # half the draft is not the right one
        if path == "embedding":
            assert _draft(tok, CYCLE, cyc, t, use_hidden=False) == right
            assert _draft(tok, CYCLE, cyc, t, use_embedding=False) != right
        elif path == "hidden":
            assert _draft(tok, CYCLE, cyc, t, use_embedding=False) == right
            assert _draft(tok, CYCLE, cyc, t, use_hidden=False) != right


def test_cycle_spec_refuses_a_vocabulary_wider_than_the_hidden_size():
    with pytest.raises(TinyGlmError, match="vocab_size <= hidden_size"):
        TinyGlmSpec(**{**CYCLE.__dict__, "vocab_size": 128}).validate()
    with pytest.raises(TinyGlmError, match="weights must be"):
        TinyGlmSpec(**{**CYCLE.__dict__, "weights": "trained"}).validate()
    with pytest.raises(TinyGlmError, match="sum to at most 1"):
        TinyGlmSpec(**{**CYCLE.__dict__, "draft_via_hidden": 0.7}).validate()


def test_cycle_model_keeps_the_random_weights_of_everything_else():
    rand = make_tensors(TinyGlmSpec(**{**CYCLE.__dict__, "weights": "random"}))
    cyc = make_tensors(CYCLE)
    changed = {n for n in rand if not np.array_equal(rand[n], cyc[n])}
    nextn = f"model.layers.{CYCLE.num_hidden_layers}"
    assert changed == {
        "model.embed_tokens.weight",
        "lm_head.weight",
        f"{nextn}.eh_proj.weight",
        f"{nextn}.embed_tokens.weight",
        f"{nextn}.shared_head.head.weight",
    }
