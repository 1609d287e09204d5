"""The tiny GLM-DSA checkpoint generator: config, key layout, shapes, determinism, bf16 encoding, pipeline split.

numpy only (no torch): the checkpoint is what vLLM 0.26.0's deepseek_v2 / deepseek_mtp loaders read on the device.
"""

from __future__ import annotations

import json
import struct

import pytest

np = pytest.importorskip("numpy", reason="the tiny checkpoint generator needs numpy (see .ci/run)")

from vllm_compose.validation.tinyglm import (  # noqa: E402
    TinyGlmError,
    TinyGlmSpec,
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

#: small enough to write in milliseconds, keeping the widths the kernels fix (576-wide latent, 128-wide indexer head)
SMALL = TinyGlmSpec(
    vocab_size=64,
    hidden_size=64,
    intermediate_size=96,
    moe_intermediate_size=32,
    num_attention_heads=2,
    n_routed_experts=4,
    num_experts_per_tok=2,
    q_lora_rank=32,
    index_n_heads=4,
    index_topk=16,
    num_hidden_layers=4,
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
