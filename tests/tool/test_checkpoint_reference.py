"""The checkpoint reference (proof/checkpoint_reference.py), the proof's judge of a layer, on a CPU: read from a
written checkpoint's files and config.json alone it must give the same logits as the recall model's own fp32 forward
(proof/model_reference.py, written separately from the design), yarn must change the softmax scale and the rotary
frequencies as DeepSeek-V3.2's config says, and the faults the GPU suites inject must move its outputs."""

from __future__ import annotations

import json
import math

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("safetensors")

from vllm_compose.proof import recall_model as rm  # noqa: E402
from vllm_compose.proof.checkpoint_reference import (  # noqa: E402
    CheckpointReference,
    CheckpointReferenceError,
    Rope,
    compare_rows,
)
from vllm_compose.proof.model_reference import ReferenceModel, _Ctx  # noqa: E402
from vllm_compose.proof.recall_model import Fault  # noqa: E402


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    spec = rm.tiny_spec()
    out = tmp_path_factory.mktemp("tiny")
    rm.write_checkpoint(spec, out)
    from safetensors.torch import load_file

    tensors = {}
    for f in out.glob("*.safetensors"):
        tensors.update({k: v.float() for k, v in load_file(str(f)).items()})
    prompt = rm.make_prompts(spec, [140])[0]
    return spec, out, tensors, list(prompt.tokens)


def test_logits_equal_the_recall_models_own_forward(written):
    spec, out, tensors, tokens = written
    ref = CheckpointReference(out, fp8_indexer=False)
    rows = [0, 37, len(tokens) - 1]
    got = ref.forward(tokens, rows, chunk=64)["logits"]
    want = ReferenceModel(spec.shape, tensors).logits(tokens, _Ctx(Fault.NONE, -1))[rows]
    m = compare_rows(got, want)
    assert m["max_relative_error"] < 1e-4, m
    assert got[-1].argmax() == want[-1].argmax()


def test_each_moe_layers_routing_margin_is_the_gap_at_the_kth_expert(written):
    spec, out, tensors, tokens = written
    ref = CheckpointReference(out, fp8_indexer=False)
    rows = [0, 37, len(tokens) - 1]
    margins = ref.forward(tokens, rows, chunk=64)["route_margins"]
    moe = [n for n in range(spec.shape.num_hidden_layers) if f"model.layers.{n}.mlp.gate.weight" in tensors]
    assert moe and sorted(margins) == moe  # dense layers route nothing
    assert all(m.shape == (len(rows),) and bool((m >= 0).all()) for m in margins.values())
    layer, k = moe[0], int(ref.cfg["num_experts_per_tok"])
    w = ref.tensors(f"model.layers.{layer}.mlp.")
    bias = w.get("gate.e_score_correction_bias", torch.zeros(w["gate.weight"].shape[0]))
    # the k-th chosen expert's choice score less the best left out
    x = torch.randn(3, w["gate.weight"].shape[1], generator=torch.Generator().manual_seed(0))
    ranked = (torch.sigmoid(x @ w["gate.weight"].T) + bias).topk(k + 1, -1).values
    got: dict = {}
    ref._mlp(layer, x, got)
    assert torch.allclose(got[layer], ranked[:, k - 1] - ranked[:, k])
    # a zero input scores every expert alike: without a correction bias that is a tie, margin 0
    if not bool(bias.any()):
        ref._mlp(layer, torch.zeros(1, x.shape[1]), got)
        assert float(got[layer][0]) == 0.0


def test_a_route_swap_gives_the_row_the_best_expert_left_out(written):
    spec, out, tensors, tokens = written
    ref = CheckpointReference(out, fp8_indexer=False)
    layer = next(n for n in range(spec.shape.num_hidden_layers) if f"model.layers.{n}.mlp.gate.weight" in tensors)
    x = torch.randn(
        3, tensors[f"model.layers.{layer}.mlp.gate.weight"].shape[1], generator=torch.Generator().manual_seed(1)
    )
    routed, swapped = ref._mlp(layer, x), ref._mlp(layer, x, swap=[1])
    # only row 1 moves (the others up to the experts' batching order)
    assert torch.allclose(routed[[0, 2]], swapped[[0, 2]], rtol=1e-5, atol=1e-7)
    assert not torch.allclose(routed[1], swapped[1], rtol=1e-2)
    # a forward with a swap at the last position moves that row's logits and leaves the earlier rows alone
    rows = [10, len(tokens) - 1]
    base = ref.forward(tokens, rows, chunk=64)["logits"]
    moved = ref.forward(tokens, rows, chunk=64, route_swaps={layer: [len(tokens) - 1]})["logits"]
    assert torch.allclose(base[0], moved[0], rtol=1e-5, atol=1e-6) and not torch.allclose(base[1], moved[1], rtol=1e-2)


def test_the_fp8_indexer_keeps_the_designed_selection(written):
    # the recall design is axis-aligned, so e4m3 holds its indexer values: the fp8 reference gives the same logits
    spec, out, tensors, tokens = written
    fp8 = CheckpointReference(out, fp8_indexer=True).forward(tokens, [len(tokens) - 1])["logits"]
    fp32 = CheckpointReference(out, fp8_indexer=False).forward(tokens, [len(tokens) - 1])["logits"]
    assert fp8.argmax() == fp32.argmax()


def test_a_shared_layer_reuses_the_last_computed_topk(written):
    spec, out, _tensors, _tokens = written
    ref = CheckpointReference(out)
    assert [ref.shares(n) for n in range(ref.layers)] == [
        rm.is_shared_layer(spec.shape, n) for n in range(spec.shape.num_hidden_layers)
    ]
    assert any(ref.shares(n) for n in range(ref.layers)) and not ref.shares(0)


def test_attention_moves_with_each_scale_and_rope_fault(written):
    spec, out, _tensors, tokens = written
    ref = CheckpointReference(out, fp8_indexer=False)
    layer = 0  # a full layer with random (undesigned) indexer weights
    w = ref.attention_weights(layer)
    torch.manual_seed(0)
    x = torch.randn(len(tokens), spec.shape.hidden_size)
    pos = torch.arange(len(tokens))
    rows = [len(tokens) - 3, len(tokens) - 1]
    topk = ref.indexer_topk(w, x, pos, rows)
    clean = ref.attention(w, x, pos, rows, topk)
    # the softmax scale: the same module with its scale multiplied
    base = ref.scale
    for factor in (0.53, 1.25):
        ref.scale = base * factor
        moved = compare_rows(ref.attention(w, x, pos, rows, topk), clean)["max_relative_error"]
        assert moved > 0.01, (factor, moved)
    ref.scale = base
    # the indexer's RoPE on the other half: another selection
    ref.index_interleaved = not ref.index_interleaved
    other = ref.indexer_topk(w, x, pos, rows)
    ref.index_interleaved = not ref.index_interleaved
    assert not torch.equal(other, topk)
    # the indexer weights halved: the ranking is scale-free
    half = dict(w, **{"indexer.weights_proj.weight": w["indexer.weights_proj.weight"] * 0.5})
    assert torch.equal(ref.indexer_topk(half, x, pos, rows), topk)


def test_yarn_follows_deepseek_v32s_config():
    cfg = {
        "rope_scaling": {
            "type": "yarn",
            "factor": 40,
            "original_max_position_embeddings": 4096,
            "beta_fast": 32,
            "beta_slow": 1,
            "mscale": 1.0,
            "mscale_all_dim": 1.0,
        },
        "rope_theta": 10000,
    }
    rope = Rope.from_config(cfg)
    m = 0.1 * math.log(40) + 1
    assert rope.softmax_factor == pytest.approx(m * m)  # 1.874: the softmax scale x0.53 drops exactly this
    assert rope.cos_sin_factor == pytest.approx(1.0)
    inv = rope.inv_freq(64, torch, "cpu")
    plain = Rope(theta=10000).inv_freq(64, torch, "cpu")
    # the fastest-rotating lanes keep their frequency, the slowest are divided by the factor
    assert inv[0] == pytest.approx(plain[0]) and inv[-1] == pytest.approx(plain[-1] / 40)
    assert Rope.from_config({"rope_parameters": {"rope_type": "default", "rope_theta": 5e5}}).theta == 5e5


def test_rope_styles_differ_only_in_which_lanes_pair():
    rope = Rope()
    x = torch.randn(3, 8)
    pos = torch.tensor([0, 1, 7])
    inter, neox = rope.apply(x, pos, True, torch), rope.apply(x, pos, False, torch)
    assert torch.allclose(inter[0], x[0]) and torch.allclose(neox[0], x[0])  # position 0 rotates nothing
    perm = torch.tensor([0, 4, 1, 5, 2, 6, 3, 7])  # neox pairs (i, i + 4) laid out as adjacent pairs
    assert torch.allclose(rope.apply(x[:, perm], pos, True, torch), neox[:, perm], atol=1e-6)
    assert not torch.allclose(inter, neox)


def test_unmodelled_checkpoints_are_refused_with_the_reason(tmp_path, written):
    _spec, out, _t, _tokens = written
    cfg = json.loads((out / "config.json").read_text())
    bad = tmp_path / "q"
    bad.mkdir()
    (bad / "config.json").write_text(json.dumps({**cfg, "quantization_config": {"quant_method": "x"}}))
    with pytest.raises(CheckpointReferenceError, match="quantization_config"):
        CheckpointReference(bad)
    (bad / "config.json").write_text(json.dumps({k: v for k, v in cfg.items() if k != "index_topk"}))
    with pytest.raises(CheckpointReferenceError, match="lacks index_topk"):
        CheckpointReference(bad)
    (bad / "config.json").write_text(json.dumps({**cfg, "rope_parameters": {"rope_type": "longrope"}}))
    with pytest.raises(CheckpointReferenceError, match="'longrope' is not modelled"):
        CheckpointReference(bad)
