"""A DSA model's attention and forward in fp32, from its checkpoint's tensors and its `config.json` alone.

This is the proof's judge of a layer: nothing here reads vLLM's code, its decomposition (absorbed MLA, fused
kernels) or the arguments its kernels were given. Each piece is the model as DeepSeek-V3.2 and GLM-5.x define it:

* MLA: `q = q_b_proj(rms(q_a_proj(x)))` split into nope and rope lanes per head; the latent
  `rms(kv_a_proj_with_mqa(x)[:kv_lora_rank])` expanded by `kv_b_proj` into each head's nope key and value; the
  rope key `kv_a_proj_with_mqa(x)[kv_lora_rank:]`, shared by the heads. RoPE on the rope lanes is interleaved
  (pairs of adjacent lanes). The softmax scale is `(qk_nope + qk_rope) ** -0.5`, times `m * m` with yarn RoPE, where
  `m = 0.1 * mscale_all_dim * ln(factor) + 1`; yarn also corrects the rotary frequencies (`beta_fast`/`beta_slow`
  over `original_max_position_embeddings`) and scales cos/sin by `m(mscale) / m(mscale_all_dim)`.
* The indexer: `q = wq_b(rms(q_a_proj(x)))` per indexer head, `k = LayerNorm(wk(x))` shared by the heads, RoPE
  on the first `qk_rope_head_dim` lanes of both (interleaved when `indexer_rope_interleave` is true, else the two
  halves, "NeoX"), q and k rounded to fp8 e4m3 with one scale per 128-lane vector (the model's indexer is defined on
  fp8 activations), logits `sum_h relu(q_h . k) * w_h` with `w = weights_proj(x) * n_heads ** -0.5 *
  head_dim ** -0.5`, causal, and the `index_topk` largest kept.
* IndexCache: a layer computes its own top-k or reuses the last one computed (`pp.plan.computes_topk`: the
  `index_topk_freq`/`index_skip_topk_offset` rule or the `index_topk_pattern` string).
* The rest of the forward (for the final logits): RMS norms, the dense MLP of the first `first_k_dense_replace`
  layers, the MoE (sigmoid scores, the routing bias for the choice, grouped top-k, normalized weights times
  `routed_scaling_factor`, the shared experts), the final norm and `lm_head`.

Weights are read from the safetensors shards one layer at a time, as fp32 on `device`, so a GLM-5-shaped layer
costs about 2 GB of GPU memory beside the engine. Nothing here prints.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import ComposeError


class CheckpointReferenceError(ComposeError):
    """The checkpoint cannot be read as a DSA model."""


#: the largest finite e4m3 value
E4M3_MAX = 448.0


@dataclass(frozen=True)
class Rope:
    """The rotary setting of a checkpoint, from config.json (`rope_parameters`, or `rope_scaling` and `rope_theta`)."""

    theta: float = 10000.0
    kind: str = "default"  # default | yarn
    factor: float = 1.0
    original_max: int = 4096
    beta_fast: float = 32.0
    beta_slow: float = 1.0
    mscale: float = 1.0
    mscale_all_dim: float = 0.0

    @classmethod
    def from_config(cls, cfg: dict[str, Any]) -> Rope:
        params = dict(cfg.get("rope_parameters") or cfg.get("rope_scaling") or {})
        theta = float(params.get("rope_theta", cfg.get("rope_theta", 10000.0)))
        kind = str(params.get("rope_type", params.get("type", "default")))
        if kind in ("default", ""):
            return cls(theta=theta)
        if kind not in ("yarn", "deepseek_yarn"):
            raise CheckpointReferenceError(
                f"config.json: rope type {kind!r} is not modelled (default and yarn are)",
                hint="the reference covers the DSA checkpoints published so far; extend Rope for this one",
            )
        return cls(
            theta=theta,
            kind="yarn",
            factor=float(params["factor"]),
            original_max=int(params.get("original_max_position_embeddings", 4096)),
            beta_fast=float(params.get("beta_fast", 32)),
            beta_slow=float(params.get("beta_slow", 1)),
            mscale=float(params.get("mscale", 1.0)),
            mscale_all_dim=float(params.get("mscale_all_dim", 0.0)),
        )

    @staticmethod
    def _m(factor: float, mscale: float) -> float:
        return 1.0 if factor <= 1 else 0.1 * mscale * math.log(factor) + 1.0

    @property
    def softmax_factor(self) -> float:
        """What the softmax scale is multiplied by (yarn's `m * m`; 1 without yarn)."""
        if self.kind != "yarn":
            return 1.0
        m = self._m(self.factor, self.mscale_all_dim)
        return m * m

    @property
    def cos_sin_factor(self) -> float:
        if self.kind != "yarn":
            return 1.0
        return self._m(self.factor, self.mscale) / self._m(self.factor, self.mscale_all_dim)

    def inv_freq(self, dim: int, torch, device):
        base = self.theta ** (torch.arange(0, dim, 2, dtype=torch.float64, device=device) / dim)
        extra = 1.0 / base
        if self.kind != "yarn":
            return extra
        inter = 1.0 / (self.factor * base)

        def corr(rotations: float) -> float:
            return (dim * math.log(self.original_max / (rotations * 2 * math.pi))) / (2 * math.log(self.theta))

        low = max(math.floor(corr(self.beta_fast)), 0)
        high = min(math.ceil(corr(self.beta_slow)), dim - 1)
        if low == high:
            high += 0.001
        ramp = ((torch.arange(dim // 2, dtype=torch.float64, device=device) - low) / (high - low)).clamp(0, 1)
        keep_extra = 1.0 - ramp
        return inter * (1 - keep_extra) + extra * keep_extra

    def apply(self, x, pos, interleaved: bool, torch):
        """x [T, ..., d] rotated by positions pos [T]."""
        d = x.shape[-1]
        ang = pos.double()[:, None] * self.inv_freq(d, torch, x.device)[None, :]
        f = self.cos_sin_factor
        shape = (x.shape[0],) + (1,) * (x.dim() - 2) + (d // 2,)
        cos, sin = (ang.cos() * f).float().view(shape), (ang.sin() * f).float().view(shape)
        if interleaved:
            a, b = x[..., 0::2], x[..., 1::2]
            out = torch.empty_like(x)
            out[..., 0::2] = a * cos - b * sin
            out[..., 1::2] = a * sin + b * cos
            return out
        a, b = x[..., : d // 2], x[..., d // 2 :]
        return torch.cat([a * cos - b * sin, a * sin + b * cos], -1)


def _fp8(x, torch):
    """x rounded to e4m3 with one fp32 scale per last-dim vector (amax / 448), returned dequantized in fp32."""
    scale = (x.abs().amax(-1, keepdim=True) / E4M3_MAX).clamp_min(1e-10)
    return (x / scale).to(torch.float8_e4m3fn).float() * scale


class CheckpointReference:
    """The fp32 reference of a DSA checkpoint folder (config.json and safetensors shards)."""

    def __init__(self, model_dir: Path | str, device: str = "cpu", fp8_indexer: bool = True, cache: bool = False):
        import torch

        self._cache: dict[str, dict[str, Any]] | None = {} if cache else None
        self.torch = torch
        self.dir = Path(model_dir)
        self.device = device
        self.fp8_indexer = fp8_indexer
        cfg_file = self.dir / "config.json"
        try:
            self.cfg = json.loads(cfg_file.read_text())
        except (OSError, ValueError) as exc:
            raise CheckpointReferenceError(
                f"cannot read {cfg_file}: {exc}", hint="point at a checkpoint folder"
            ) from exc
        c = self.cfg
        missing = [
            k
            for k in ("hidden_size", "num_attention_heads", "kv_lora_rank", "q_lora_rank", "index_topk")
            if not c.get(k)
        ]
        if missing:
            raise CheckpointReferenceError(
                f"{cfg_file} lacks {', '.join(missing)}: not a DSA (MLA with a lightning indexer) checkpoint",
                hint="the reference models DeepSeek-V3.2 / GLM-5.x checkpoints",
            )
        if c.get("quantization_config"):
            raise CheckpointReferenceError(
                f"{cfg_file} declares quantization_config: quantized weights are not modelled",
                hint="judge a bf16 checkpoint",
            )
        self.rope = Rope.from_config(c)
        self.heads = int(c["num_attention_heads"])
        self.nope, self.rdim, self.vdim = int(c["qk_nope_head_dim"]), int(c["qk_rope_head_dim"]), int(c["v_head_dim"])
        self.kv_rank = int(c["kv_lora_rank"])
        self.eps = float(c.get("rms_norm_eps", 1e-6))
        self.scale = (self.nope + self.rdim) ** -0.5 * self.rope.softmax_factor
        self.index_heads, self.index_dim = int(c["index_n_heads"]), int(c["index_head_dim"])
        self.index_topk = int(c["index_topk"])
        self.index_interleaved = bool(c.get("indexer_rope_interleave", False))
        self.layers = int(c["num_hidden_layers"])
        index_file = self.dir / "model.safetensors.index.json"
        if index_file.is_file():
            self.where = json.loads(index_file.read_text())["weight_map"]
        else:
            files = sorted(self.dir.glob("*.safetensors"))
            if not files:
                raise CheckpointReferenceError(f"{self.dir} holds no safetensors", hint="point at a checkpoint folder")
            from safetensors import safe_open

            self.where = {}
            for f in files:
                with safe_open(str(f), framework="pt") as h:
                    self.where.update({k: f.name for k in h.keys()})  # noqa: SIM118 - safe_open has no iteration
        from ..pp.plan import computes_topk, shape_from_config

        shape = shape_from_config(c, str(cfg_file))
        self.full = [computes_topk(shape, n) for n in range(self.layers)]

    # --- weights ----------------------------------------------------------------------------------------------------
    def tensors(self, prefix: str) -> dict[str, Any]:
        """Every tensor whose name starts with `prefix`, fp32 on the device (kept when built with `cache`)."""
        from safetensors import safe_open

        if self._cache is not None and prefix in self._cache:
            return self._cache[prefix]
        names = [n for n in self.where if n.startswith(prefix)]
        out: dict[str, Any] = {}
        for fname in sorted({self.where[n] for n in names}):
            with safe_open(str(self.dir / fname), framework="pt", device="cpu") as h:
                for n in names:
                    if self.where[n] == fname:
                        out[n[len(prefix) :]] = h.get_tensor(n).to(self.device, self.torch.float32)
        if not out:
            raise CheckpointReferenceError(
                f"no tensor named {prefix}* in {self.dir}", hint="is this the checkpoint of this config?"
            )
        if self._cache is not None:
            self._cache[prefix] = out
        return out

    def attention_weights(self, layer: int) -> dict[str, Any]:
        return self.tensors(f"model.layers.{layer}.self_attn.")

    def shares(self, layer: int) -> bool:
        """Whether `layer` reuses the last top-k computed (IndexCache) instead of computing its own."""
        return not self.full[layer]

    # --- attention --------------------------------------------------------------------------------------------------
    def _rms(self, x, w):
        return x * self.torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * w

    def indexer_topk(self, w: dict, x, pos, rows) -> Any:
        """The top-k positions (-1 padded) each of `rows` selects, from the layer's inputs x [T, hidden] (every
        position of the sequence so far, in order) at positions pos [T]."""
        return self.topk_of(self.indexer_logits(w, x, pos, rows))

    def topk_of(self, logits) -> Any:
        """The top-k columns of indexer `logits` [rows, T] (-inf: not selectable), -1 padded."""
        vals, idx = logits.topk(min(self.index_topk, logits.shape[1]), dim=-1)
        return idx.masked_fill(vals == float("-inf"), -1)

    def indexer_logits(self, w: dict, x, pos, rows) -> Any:
        """The indexer's logits [len(rows), T] of `rows` over every position of x [T, hidden] (future positions
        -inf), as the model defines them: its own RoPE, the fp8 cast when `fp8_indexer`, the weights' scale."""
        torch = self.torch
        r = self.rdim
        qr = self._rms(x[rows] @ w["q_a_proj.weight"].T, w["q_a_layernorm.weight"])
        q = (qr @ w["indexer.wq_b.weight"].T).view(len(rows), self.index_heads, self.index_dim)
        q = torch.cat([self.rope.apply(q[..., :r], pos[rows], self.index_interleaved, torch), q[..., r:]], -1)
        k = torch.nn.functional.layer_norm(
            x @ w["indexer.wk.weight"].T, (self.index_dim,), w["indexer.k_norm.weight"], w["indexer.k_norm.bias"], 1e-6
        )
        k = torch.cat([self.rope.apply(k[:, :r], pos, self.index_interleaved, torch), k[:, r:]], -1)
        if self.fp8_indexer:
            q, k = _fp8(q, torch), _fp8(k, torch)
        weights = (x[rows] @ w["indexer.weights_proj.weight"].T) * self.index_heads**-0.5 * self.index_dim**-0.5
        logits = (torch.einsum("rhd,nd->rhn", q, k).clamp_min(0) * weights[:, :, None]).sum(1)
        future = pos[None, :] > pos[rows][:, None]
        return logits.masked_fill(future, float("-inf"))

    def keys_values(self, w: dict, x, pos) -> tuple[Any, Any]:
        """Every position's per-head key [T, heads, nope + rope] and value [T, heads, v_head_dim]."""
        torch = self.torch
        h, nope, vd = self.heads, self.nope, self.vdim
        kv = x @ w["kv_a_proj_with_mqa.weight"].T
        latent = self._rms(kv[:, : self.kv_rank], w["kv_a_layernorm.weight"])
        k_pe = self.rope.apply(kv[:, self.kv_rank :], pos, True, torch)
        kvb = (latent @ w["kv_b_proj.weight"].T).view(-1, h, nope + vd)
        k = torch.cat([kvb[..., :nope], k_pe[:, None, :].expand(-1, h, -1)], -1)
        return k, kvb[..., nope:]

    def attention(self, w: dict, x, pos, rows, topk, kv: tuple[Any, Any] | None = None) -> Any:
        """The attention output (after `o_proj`) of `rows` of x [T, hidden] over their `topk` positions (-1: none);
        `kv`: `keys_values` of x, when the caller has it."""
        torch = self.torch
        h, nope, r = self.heads, self.nope, self.rdim
        k, v = kv if kv is not None else self.keys_values(w, x, pos)
        qr = self._rms(x[rows] @ w["q_a_proj.weight"].T, w["q_a_layernorm.weight"])
        q = (qr @ w["q_b_proj.weight"].T).view(len(rows), h, nope + r)
        q = torch.cat([q[..., :nope], self.rope.apply(q[..., nope:], pos[rows], True, torch)], -1)
        allowed = torch.zeros(len(rows), x.shape[0], dtype=torch.bool, device=x.device)
        valid = topk >= 0
        allowed[torch.arange(len(rows), device=x.device)[:, None].expand_as(topk)[valid], topk[valid]] = True
        logits = torch.einsum("rhd,thd->rht", q, k) * self.scale
        p = torch.softmax(logits.masked_fill(~allowed[:, None, :], float("-inf")), -1).nan_to_num(0.0)
        out = torch.einsum("rht,thd->rhd", p, v).reshape(len(rows), -1)
        return out @ w["o_proj.weight"].T

    def chunk_rows(self, length: int, budget: int = 1 << 27) -> int:
        """How many rows one attention call takes so that its [rows, heads, length] logits stay near `budget`
        elements (512 MiB in fp32)."""
        return max(1, budget // max(1, self.heads * length))

    # --- the whole model --------------------------------------------------------------------------------------------
    def _mlp(self, layer: int, x, margins: dict | None = None, swap=None) -> Any:
        """The layer's MLP (dense, or MoE with grouped sigmoid routing). `margins`: gets, for an MoE layer, each
        row's routing margin (the k-th chosen expert's score less the best one left out): where it is within the
        engine's bf16 rounding of the router, the engine may route that token to another expert. `swap`: rows of
        `x` (indices) routed that other way, the best expert left out taking the k-th chosen one's place."""
        torch = self.torch
        c = self.cfg
        w = self.tensors(f"model.layers.{layer}.mlp.")

        def ffn(p: str, y):
            g = y @ w[f"{p}gate_proj.weight"].T
            return (torch.nn.functional.silu(g) * (y @ w[f"{p}up_proj.weight"].T)) @ w[f"{p}down_proj.weight"].T

        if "gate.weight" not in w:
            return ffn("", x)
        n_exp, k = int(c["n_routed_experts"]), int(c["num_experts_per_tok"])
        if c.get("scoring_func", "sigmoid") != "sigmoid":
            raise CheckpointReferenceError(f"scoring_func {c.get('scoring_func')!r} is not modelled", hint="sigmoid is")
        scores = torch.sigmoid(x @ w["gate.weight"].T)
        choice_scores = scores + w.get("gate.e_score_correction_bias", torch.zeros(n_exp, device=x.device))
        groups, top_groups = int(c.get("n_group", 1) or 1), int(c.get("topk_group", 1) or 1)
        if groups > 1:
            g = choice_scores.view(-1, groups, n_exp // groups).topk(2, -1).values.sum(-1)
            keep = torch.zeros_like(g).scatter_(1, g.topk(top_groups, -1).indices, 1.0)
            mask = keep[:, :, None].expand(-1, groups, n_exp // groups).reshape(-1, n_exp)
            choice_scores = choice_scores.masked_fill(mask == 0, float("-inf"))
        ranked = choice_scores.topk(min(k + 1, n_exp), -1)
        choice = ranked.indices[:, :k]
        if margins is not None and n_exp > k:
            margins[layer] = ranked.values[:, k - 1] - ranked.values[:, k]
        if swap is not None and len(swap) and n_exp > k:
            choice = choice.clone()
            at = torch.as_tensor(swap, device=x.device, dtype=torch.long)
            choice[at, k - 1] = ranked.indices[at, k]
        weights = scores.gather(-1, choice)
        if c.get("norm_topk_prob", True):
            weights = weights / weights.sum(-1, keepdim=True)
        weights = weights * float(c.get("routed_scaling_factor", 1.0))
        out = ffn("shared_experts.", x) if "shared_experts.gate_proj.weight" in w else torch.zeros_like(x)
        for e in range(n_exp):
            rows, slot = (choice == e).nonzero(as_tuple=True)
            if rows.numel():
                out[rows] += ffn(f"experts.{e}.", x[rows]) * weights[rows, slot, None]
        return out

    def forward(
        self,
        tokens: list[int],
        rows: list[int],
        chunk: int | None = None,
        selections: dict[int, Any] | None = None,
        route_swaps: dict[int, list[int]] | None = None,
    ) -> dict[str, Any]:
        """The next-token logits at `rows` of the sequence `tokens` (fp32 [len(rows), vocab]), each layer's
        attention input (normed) at `rows` ("inputs", by layer) and each MoE layer's routing margin at `rows`
        ("route_margins", by layer; see `_mlp`). `selections`: per layer, the selection [T >= len(tokens), k] to
        attend over instead of the indexer's (an engine's own, judged apart), the rest as the model defines.
        `route_swaps`: per MoE layer, the positions whose token takes the best expert left out in place of the k-th
        chosen (the other side of a near-tie; `_mlp`'s `swap`)."""
        torch = self.torch
        ids = torch.tensor(tokens, device=self.device)
        pos = torch.arange(len(tokens), device=self.device)
        h = self.tensors("model.embed_tokens.")["weight"][ids]
        inputs = {}
        margins: dict[int, Any] = {}
        topk = None
        every = list(range(len(tokens)))
        for layer in range(self.layers):
            p = f"model.layers.{layer}."
            # the attention input at every position; each chunk of rows attends over its own top-k
            norms = self.tensors(p + "input_layernorm.")
            x = self._rms(h, norms["weight"])
            inputs[layer] = x[rows].clone()
            w = self.attention_weights(layer)
            out = torch.empty_like(h)
            kv = self.keys_values(w, x, pos)
            step = chunk or self.chunk_rows(len(tokens))
            given = (selections or {}).get(layer)
            new_topk = [] if given is None and (not self.shares(layer) or topk is None) else None
            for start in range(0, len(tokens), step):
                part = every[start : start + step]
                if given is not None:
                    sel = given[start : start + len(part)].to(self.device)
                elif self.shares(layer) and topk is not None:
                    sel = topk[start : start + step]
                else:
                    sel = self.indexer_topk(w, x, pos, part)
                    new_topk.append(sel)
                out[start : start + len(part)] = self.attention(w, x, pos, part, sel, kv)
            if new_topk is not None:
                width = max(t.shape[1] for t in new_topk)
                topk = torch.cat([torch.nn.functional.pad(t, (0, width - t.shape[1]), value=-1) for t in new_topk], 0)
            del w, kv
            h = h + out
            x = self._rms(h, self.tensors(p + "post_attention_layernorm.")["weight"])
            h = h + self._mlp(layer, x, margins, (route_swaps or {}).get(layer))
        final = self._rms(h[rows], self.tensors("model.norm.")["weight"])
        logits = final @ self.tensors("lm_head.")["weight"].T
        return {"logits": logits, "inputs": inputs, "route_margins": {n: m[rows] for n, m in margins.items()}}


def compare_rows(got, ref, per_row: bool = False) -> dict[str, Any]:
    """Per-row agreement of `got` with `ref` (both [rows, n]): relative L2 error and cosine, worst row first;
    `per_row` adds each row's relative error (`row_errors`)."""
    g, r = got.float(), ref.float()
    rel = (g - r).norm(dim=-1) / r.norm(dim=-1).clamp_min(1e-12)
    cos = (g * r).sum(-1) / (g.norm(dim=-1) * r.norm(dim=-1)).clamp_min(1e-12)
    out = {
        "rows": int(r.shape[0]),
        "max_relative_error": float(rel.max()),
        "mean_relative_error": float(rel.mean()),
        "min_cosine": float(cos.min()),
        "worst_row": int(rel.argmax()),
    }
    if per_row:
        out["row_errors"] = [round(float(e), 4) for e in rel]
    return out


__all__ = ["CheckpointReference", "CheckpointReferenceError", "Rope", "compare_rows"]
