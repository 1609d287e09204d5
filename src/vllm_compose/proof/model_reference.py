"""The whole GLM-DSA model in fp32 torch on a CPU: a reference forward of a checkpoint's tensors, written from the
model's definition (DeepSeek-V3.2 / GLM-5.x as vLLM's deepseek_v2 / deepseek_v32 model code computes it).

Per decoder layer: RMS norm; MLA with q/kv LoRA, interleaved rope on the rope lanes, the indexer (LayerNorm'd key,
`sum_h relu(q_h . k) * w_h` scores, causal top-k) on full layers and the shared top-k on IndexCache layers; then a
dense MLP (the first `first_k_dense_replace` layers) or the MoE (sigmoid scores plus the routing bias, top-k experts,
normalized weights times `routed_scaling_factor`, plus the shared experts). No quantization: the engine's fp8
indexer and bf16 weights differ from this by their roundings, which the recall model's margins are built to exceed.

It is slow and small-shape only: every step recomputes the whole sequence. Its use is to hold a constructed model
(`recall_model`) against its design on a CPU, faults included (`Fault`), so that the GPU runs test the engine and
not the construction.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from .recall_model import Fault
from .tinyglm import TinyGlmSpec


@dataclass
class _Ctx:
    fault: Fault
    recall_layer: int
    other_topk: torch.Tensor | None = None
    prev_topk: torch.Tensor | None = None
    captured: dict[int, torch.Tensor] | None = None
    #: with `captured`: the recall layer's attention output (after o_proj) by layer
    outputs: dict[int, torch.Tensor] = field(default_factory=dict)


def _rms(x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def _rope(x: torch.Tensor, pos: torch.Tensor, theta: float) -> torch.Tensor:
    """Interleaved (GPT-J style) rotary embedding over the last dim of x [T, ..., d]."""
    d = x.shape[-1]
    inv = theta ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
    ang = (pos.double()[:, None] * inv[None, :]).float()
    shape = (x.shape[0],) + (1,) * (x.dim() - 2) + (d // 2,)
    cos, sin = ang.cos().view(shape), ang.sin().view(shape)
    a, b = x[..., 0::2], x[..., 1::2]
    out = torch.empty_like(x)
    out[..., 0::2] = a * cos - b * sin
    out[..., 1::2] = a * sin + b * cos
    return out


class ReferenceModel:
    """fp32 forward of a GLM-DSA checkpoint given as {name: tensor} (float32) and its `TinyGlmSpec`."""

    def __init__(self, shape: TinyGlmSpec, tensors: dict[str, Any]):
        self.s = shape
        self.t = {k: v.float() for k, v in tensors.items()}
        cfg = shape.extra
        self.freq = cfg.get("index_topk_freq", 1)
        self.offset = cfg.get("index_skip_topk_offset", 2)
        self.pattern = cfg.get("index_topk_pattern")
        self.theta = 10000.0
        self.eps = 1e-5

    def shared(self, layer: int) -> bool:
        if self.pattern is not None:
            return 0 <= layer < len(self.pattern) and self.pattern[layer] == "S"
        return max(layer - self.offset + 1, 0) % self.freq != 0

    # --- pieces -----------------------------------------------------------------------------------------------------
    def _lin(self, name: str, x: torch.Tensor) -> torch.Tensor:
        return x @ self.t[name].T

    def _indexer(self, p: str, x: torch.Tensor, qr: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        s = self.s
        ix = f"{p}.self_attn.indexer"
        q = self._lin(f"{ix}.wq_b.weight", qr).view(-1, s.index_n_heads, s.index_head_dim)
        r = s.qk_rope_head_dim
        q = torch.cat([_rope(q[..., :r], pos, self.theta), q[..., r:]], -1)
        k = torch.nn.functional.layer_norm(
            self._lin(f"{ix}.wk.weight", x),
            (s.index_head_dim,),
            self.t[f"{ix}.k_norm.weight"],
            self.t[f"{ix}.k_norm.bias"],
            1e-6,
        )
        k = torch.cat([_rope(k[:, :r], pos, self.theta), k[:, r:]], -1)
        w = self._lin(f"{ix}.weights_proj.weight", x) * s.index_head_dim**-0.5 * s.index_n_heads**-0.5
        scores = torch.einsum("thd,nd->thn", q, k).clamp_min(0)
        logits = (scores * w[:, :, None]).sum(1)
        t = torch.arange(x.shape[0])
        logits = logits.masked_fill(t[None, :] > t[:, None], float("-inf"))
        k_top = min(s.index_topk, x.shape[0])
        vals, idx = logits.topk(k_top, dim=-1)
        return idx.masked_fill(vals == float("-inf"), -1)

    def _attention(self, p: str, x: torch.Tensor, pos: torch.Tensor, layer: int, ctx: _Ctx, topk: dict) -> torch.Tensor:
        s = self.s
        a = f"{p}.self_attn"
        h, nope, r, vd = s.num_attention_heads, s.qk_nope_head_dim, s.qk_rope_head_dim, s.v_head_dim
        qr = _rms(self._lin(f"{a}.q_a_proj.weight", x), self.t[f"{a}.q_a_layernorm.weight"], 1e-6)
        q = self._lin(f"{a}.q_b_proj.weight", qr).view(-1, h, nope + r)
        q = torch.cat([q[..., :nope], _rope(q[..., nope:], pos, self.theta)], -1)
        kv = self._lin(f"{a}.kv_a_proj_with_mqa.weight", x)
        latent = _rms(kv[:, : s.kv_lora_rank], self.t[f"{a}.kv_a_layernorm.weight"], 1e-6)
        k_pe = _rope(kv[:, s.kv_lora_rank :], pos, self.theta)
        kvb = self._lin(f"{a}.kv_b_proj.weight", latent).view(-1, h, nope + vd)
        k = torch.cat([kvb[..., :nope], k_pe[:, None, :].expand(-1, h, -1)], -1)
        v = kvb[..., nope:]
        if f"{a}.indexer.wq_b.weight" in self.t and (not self.shared(layer) or layer >= s.num_hidden_layers):
            topk["idx"] = self._indexer(p, x, qr, pos)
        idx = topk["idx"].clone()
        if layer == ctx.recall_layer:
            idx = _apply_fault(ctx, idx)
            if ctx.captured is not None:
                ctx.captured[layer] = idx.clone()
        T = x.shape[0]
        scale = (nope + r) ** -0.5
        logits = torch.einsum("thd,nhd->thn", q, k) * scale
        allowed = torch.zeros(T, T, dtype=torch.bool)
        valid = (idx >= 0) & (idx < T)
        rows = torch.arange(T)[:, None].expand_as(idx)
        allowed[rows[valid], idx[valid]] = True
        logits = logits.masked_fill(~allowed[:, None, :], float("-inf"))
        probs = torch.softmax(logits, -1).nan_to_num(0.0)
        out = torch.einsum("thn,nhd->thd", probs, v).reshape(T, h * vd)
        out = self._lin(f"{a}.o_proj.weight", out)
        if layer == ctx.recall_layer and ctx.fault is Fault.ZERO_OUTPUT:
            out = torch.zeros_like(out)
        if layer == ctx.recall_layer and ctx.captured is not None:
            ctx.outputs[layer] = out.clone()
        return out

    def _mlp(self, p: str, x: torch.Tensor, layer: int) -> torch.Tensor:
        s = self.s
        m = f"{p}.mlp"

        def ffn(prefix: str, y: torch.Tensor) -> torch.Tensor:
            g = self._lin(f"{prefix}.gate_proj.weight", y)
            u = self._lin(f"{prefix}.up_proj.weight", y)
            return self._lin(f"{prefix}.down_proj.weight", torch.nn.functional.silu(g) * u)

        if layer < s.first_k_dense_replace:
            return ffn(m, x)
        scores = torch.sigmoid(self._lin(f"{m}.gate.weight", x))
        choice = (scores + self.t[f"{m}.gate.e_score_correction_bias"]).topk(s.num_experts_per_tok, -1).indices
        w = scores.gather(-1, choice)
        w = w / w.sum(-1, keepdim=True) * 2.5
        out = ffn(f"{m}.shared_experts", x)
        for e in range(s.n_routed_experts):
            rows, slot = (choice == e).nonzero(as_tuple=True)
            if rows.numel():
                out[rows] += ffn(f"{m}.experts.{e}", x[rows]) * w[rows, slot, None]
        return out

    def _layer(self, p: str, h: torch.Tensor, pos: torch.Tensor, layer: int, ctx: _Ctx, topk: dict) -> torch.Tensor:
        x = _rms(h, self.t[f"{p}.input_layernorm.weight"], self.eps)
        h = h + self._attention(p, x, pos, layer, ctx, topk)
        x = _rms(h, self.t[f"{p}.post_attention_layernorm.weight"], self.eps)
        return h + self._mlp(p, x, layer)

    # --- the model --------------------------------------------------------------------------------------------------
    def logits(self, tokens: list[int], ctx: _Ctx) -> torch.Tensor:
        """Next-token logits at every position of `tokens`."""
        ids = torch.tensor(tokens)
        pos = torch.arange(len(tokens))
        h = self.t["model.embed_tokens.weight"][ids]
        topk: dict = {}
        for layer in range(self.s.num_hidden_layers):
            h = self._layer(f"model.layers.{layer}", h, pos, layer, ctx, topk)
        return _rms(h, self.t["model.norm.weight"], self.eps) @ self.t["lm_head.weight"].T

    def mtp_draft(self, tokens: list[int]) -> torch.Tensor:
        """The MTP layer's draft logits at each position n for the token after tokens[n + 1]: its input at n is the
        embedding of tokens[n + 1] and the main model's last hidden state at n."""
        s = self.s
        ids = torch.tensor(tokens)
        pos = torch.arange(len(tokens))
        h = self.t["model.embed_tokens.weight"][ids]
        topk: dict = {}
        ctx = _Ctx(Fault.NONE, -1)
        for layer in range(s.num_hidden_layers):
            h = self._layer(f"model.layers.{layer}", h, pos, layer, ctx, topk)
        hidden = _rms(h, self.t["model.norm.weight"], self.eps)[:-1]
        p = f"model.layers.{s.num_hidden_layers}"
        emb = self.t[f"{p}.embed_tokens.weight"][ids[1:]]
        x = torch.cat(
            [_rms(emb, self.t[f"{p}.enorm.weight"], self.eps), _rms(hidden, self.t[f"{p}.hnorm.weight"], self.eps)], -1
        )
        m = self._lin(f"{p}.eh_proj.weight", x)
        m = self._layer(p, m, pos[:-1], s.num_hidden_layers, ctx, {})
        return _rms(m, self.t[f"{p}.shared_head.norm.weight"], self.eps) @ self.t[f"{p}.shared_head.head.weight"].T

    def generate(
        self,
        prompt: list[int],
        max_tokens: int,
        fault: Fault = Fault.NONE,
        recall_layer: int = -1,
        other_topk: torch.Tensor | None = None,
    ) -> list[int]:
        """Greedy tokens after `prompt`, with `fault` applied in `recall_layer`."""
        seq = list(prompt)
        ctx = _Ctx(fault, recall_layer, other_topk=other_topk, captured={})
        for _ in range(max_tokens):
            logits = self.logits(seq, ctx)
            ctx.prev_topk = ctx.captured.get(recall_layer)
            seq.append(int(logits[-1].argmax()))
        return seq[len(prompt) :]

    def topk_rows(self, tokens: list[int], recall_layer: int) -> torch.Tensor:
        """The top-k rows the recall layer reads for `tokens` (no fault)."""
        return self.recall_layer_io(tokens, recall_layer)[0]

    def recall_layer_io(self, tokens: list[int], recall_layer: int) -> tuple[torch.Tensor, torch.Tensor]:
        """The top-k rows the recall layer reads and its attention output (after o_proj), for `tokens` (no fault)."""
        ctx = _Ctx(Fault.NONE, recall_layer, captured={})
        self.logits(tokens, ctx)
        return ctx.captured[recall_layer], ctx.outputs[recall_layer]


def _apply_fault(ctx: _Ctx, idx: torch.Tensor) -> torch.Tensor:
    T = idx.shape[0]
    if ctx.fault is Fault.SHIFT:
        return torch.where(idx >= 0, (idx + 1).clamp_max(T - 1), idx)
    if ctx.fault is Fault.UNFILLED:
        return torch.zeros_like(idx)
    if ctx.fault is Fault.OTHER_REQUEST:
        other = ctx.other_topk
        if other is None:
            raise ValueError("Fault.OTHER_REQUEST needs another request's top-k rows")
        # the other request's last row (its current token's selection), truncated to this sequence
        row = other[-1][: idx.shape[1]]
        out = idx.clone()
        out[-1] = torch.where(row < T, row, -1)
        return out
    if ctx.fault is Fault.PREVIOUS_STEP and ctx.prev_topk is not None:
        out = idx.clone()
        out[-1] = ctx.prev_topk[-1]
        return out
    return idx


__all__ = ["Fault", "ReferenceModel"]
