"""A stand-in for a vLLM engine running a written DSA checkpoint, for CPU tests of the layer probe, the model faults
and the proof's layer-reference flow.

It runs the way an engine does (prefill, then one token a step; each attention module keeps its own K/V history;
IndexCache's shared layers read the top-k of the last layer that computed one in the same step, through one
`topk_indices_buffer`), under vLLM's module names (`model.layers.N.self_attn` called with `positions=` and
`hidden_states=`, a `logits_processor`) and with the attributes of vLLM's DeepseekV32 attention that
`engine_faults.install_model_fault` changes, read at every call as vLLM reads them: `impl.softmax_scale`, the fused
Q/KV A projection `fused_qkv_a_proj` ([q_lora_rank + kv_lora_rank + rope] rows), `kv_a_layernorm.weight`,
`indexer.softmax_scale` (scaling the indexer's head weights) and `_index_rope_interleave` (v0.33.0 on). With
`shared_rope` it is the older layout instead: no `_index_rope_interleave`, and every indexer reads one RoPE module's
`is_neox_style` (vLLM's `get_rope` caches its modules, so the layers share one). Its arithmetic is
`CheckpointReference`'s, so unfaulted it is exactly the reference.
"""

from __future__ import annotations

import copy

import torch

from vllm_compose.proof.checkpoint_reference import CheckpointReference


class _Impl:
    def __init__(self, scale: float):
        self.softmax_scale = scale


class _Indexer(torch.nn.Module):
    def __init__(self, head_dim: int):
        super().__init__()
        self.softmax_scale = head_dim**-0.5


class _Norm(torch.nn.Module):
    def __init__(self, weight: torch.Tensor):
        super().__init__()
        self.weight = torch.nn.Parameter(weight.clone(), requires_grad=False)


class Attention(torch.nn.Module):
    def __init__(self, engine: Engine, layer: int):
        super().__init__()
        ref = engine.ref
        self.engine, self.layer = engine, layer
        self.base = ref.attention_weights(layer)
        self.q_lora = self.base["q_a_proj.weight"].shape[0]
        self.impl = _Impl(ref.scale)
        self.qk_rope_head_dim = ref.rdim
        fused = torch.cat([self.base["q_a_proj.weight"], self.base["kv_a_proj_with_mqa.weight"]])
        self.fused_qkv_a_proj = torch.nn.Linear(fused.shape[1], fused.shape[0], bias=False)
        self.fused_qkv_a_proj.weight = torch.nn.Parameter(fused.clone(), requires_grad=False)
        self.kv_a_layernorm = _Norm(self.base["kv_a_layernorm.weight"])
        has_indexer = "indexer.wk.weight" in self.base
        self.indexer = _Indexer(ref.index_dim) if has_indexer else None
        self._index_scale0 = ref.index_dim**-0.5
        if engine.shared_rope is not None:
            self.indexer_rope_emb = engine.shared_rope
        else:
            self._index_rope_interleave = ref.index_interleaved
            self.indexer_rope_emb = torch.nn.Module()
            self.indexer_rope_emb.is_neox_style = not ref.index_interleaved
        if engine.buffer is not None:
            self.topk_indices_buffer = engine.buffer
        self.xs: list = []
        self.ps: list = []

    def _view(self) -> tuple[CheckpointReference, dict]:
        """The reference as this module's attributes now set it, and the layer's weights as the engine holds them."""
        view = copy.copy(self.engine.ref)
        view.scale = self.impl.softmax_scale
        view.index_interleaved = (
            not self.indexer_rope_emb.is_neox_style
            if self.engine.shared_rope is not None
            else self._index_rope_interleave
        )
        w = dict(self.base)
        fused = self.fused_qkv_a_proj.weight
        w["q_a_proj.weight"], w["kv_a_proj_with_mqa.weight"] = fused[: self.q_lora], fused[self.q_lora :]
        w["kv_a_layernorm.weight"] = self.kv_a_layernorm.weight
        if self.indexer is not None:
            w["indexer.weights_proj.weight"] = w["indexer.weights_proj.weight"] * (
                self.indexer.softmax_scale / self._index_scale0
            )
        return view, w

    def forward(self, positions, hidden_states):
        e = self.engine
        view, w = self._view()
        self.xs.append(hidden_states)
        self.ps.append(positions)
        x, pos = torch.cat(self.xs), torch.cat(self.ps)
        rows = list(range(x.shape[0] - hidden_states.shape[0], x.shape[0]))
        if self.indexer is not None or e.topk is None:
            e.topk = view.indexer_topk(w, x, pos, rows)
            if e.topk_edit:
                e.topk = e.topk_edit(self.layer, e.topk)
        if e.buffer is not None:
            e.buffer[: len(rows)] = -1
            e.buffer[: len(rows), : e.topk.shape[1]] = e.topk
        return view.attention(w, x, pos, rows, e.topk)


class _Layer(torch.nn.Module):
    def __init__(self, engine: Engine, layer: int):
        super().__init__()
        self.self_attn = Attention(engine, layer)


class _Identity(torch.nn.Module):
    def forward(self, x):
        return x


class Engine(torch.nn.Module):
    """`topk_edit(layer, topk)`: change a layer's own selection (a fault); `buffer`: keep vLLM's top-k buffer on the
    attention modules (False: a release that keeps none there); `shared_rope`: the layout before v0.33.0 (one RoPE
    module for every indexer, no `_index_rope_interleave`); `route_swap`: (layer, position) whose token takes the best
    expert left out in place of the k-th chosen there (a bf16 router on the other side of a near-tie)."""

    def __init__(
        self,
        ref: CheckpointReference,
        topk_edit=None,
        buffer: bool = True,
        max_tokens: int = 4096,
        shared_rope: bool = False,
        route_swap: tuple[int, int] | None = None,
    ):
        super().__init__()
        self.ref, self.topk_edit, self.topk, self.route_swap = ref, topk_edit, None, route_swap
        self.shared_rope = None
        if shared_rope:
            self.shared_rope = torch.nn.Module()
            self.shared_rope.is_neox_style = not ref.index_interleaved
        self.buffer = torch.full((max_tokens, ref.index_topk), -1, dtype=torch.int32) if buffer else None
        self.model = torch.nn.Module()
        self.model.layers = torch.nn.ModuleList(_Layer(self, n) for n in range(ref.layers))
        self.logits_processor = _Identity()

    def step(self, tokens: list[int], start: int):
        ref = self.ref
        self.topk = None
        pos = torch.arange(start, start + len(tokens))
        h = ref.tensors("model.embed_tokens.")["weight"][torch.tensor(tokens)]
        for n, layer in enumerate(self.model.layers):
            p = f"model.layers.{n}."
            x = ref._rms(h, ref.tensors(p + "input_layernorm.")["weight"])
            h = h + layer.self_attn(positions=pos, hidden_states=x)
            swap = None
            if self.route_swap is not None and self.route_swap[0] == n:
                swap = [i for i, q in enumerate(pos.tolist()) if q == self.route_swap[1]]
            h = h + ref._mlp(n, ref._rms(h, ref.tensors(p + "post_attention_layernorm.")["weight"]), swap=swap)
        final = ref._rms(h[-1:], ref.tensors("model.norm.")["weight"])
        return self.logits_processor(final @ ref.tensors("lm_head.")["weight"].T)

    def generate(self, prompt: list[int], n: int) -> list[int]:
        """Greedy tokens of one new request (the K/V histories start empty)."""
        for layer in self.model.layers:
            layer.self_attn.xs, layer.self_attn.ps = [], []
        out: list[int] = []
        with torch.no_grad():
            logits = self.step(prompt, 0)
            for _ in range(n):
                out.append(int(logits.argmax()))
                logits = self.step(out[-1:], len(prompt) + len(out) - 1)
        return out
