"""The recall model: a GLM-DSA checkpoint whose next token can only be predicted by reading one planted token.

The cycle model (`tinyglm`, weights "cycle") predicts the next token from the last one alone, so its tokens come out
right whatever the sparse attention does. This model's tokens come out right only if the DSA path attends to the
right token: the indexer must rank it first, the top-k must keep it, a shared (IndexCache) layer must read the
top-k its full layer wrote, and the sparse MLA must read that token's latent.

The task is pointer chasing. The vocabulary has `chain` tokens a_0..a_{n-1}, planted tokens c(i, j) (i != j: key
a_i, value a_j), filler tokens and one fallback token. A prompt is fillers with the n planted tokens
c(a_p0, a_p1), c(a_p1, a_p2), ..., c(a_p(n-1), a_p0) of one random cycle p scattered far back, and it ends with a_p0.
Greedy decoding then walks the cycle: after a_pk comes a_p(k+1). The cycle differs per prompt, so the same last
token has different successors in different requests: only the planted token tells which.

How the weights do it (every map is axis-aligned, so bf16 and the indexer's fp8 hold the designed values exactly):
- residual dims (`Dims`): KQ_i (chain token a_i's query id), KK_i (a planted token's key id), VAL_j (its value),
  OUT_j (written by the recall), BIAS (chain tokens), FILL (fillers), PL (planted tokens);
- the *index layer* (a full layer, `index_layer`): its indexer scores a planted token c(i, .) from a query a_i with
  head 0 (weight +2) and every planted token with head 1 (weight -1), so the match scores +1, other planted tokens
  -1 and everything else 0. The match ranks first and no other planted token enters the top-k while the context
  holds `index_topk` other tokens;
- the *recall layer* (`recall_layer`, the next layer, which shares the index layer's top-k under the IndexCache
  pattern): its MLA query for a_i matches the latent key of c(i, .) with an attention logit of about 25 over 0 for
  every other token, and the latent's value part VAL_j is written to OUT_j by `o_proj`;
- the LM head reads OUT_j for a_j and BIAS for the fallback token: with the recall the successor scores twice the
  fallback (a margin of `head_logit`); without it (the planted token not read) the fallback wins by `head_logit`;
- the MTP layer does the same recall for its own input token (its own full indexer), so its draft is the successor
  of the token just sampled; with `index_share_for_mtp_iteration` its second draft step reuses the first step's
  top-k, which holds the wrong planted token, and drafts the fallback (rejected).
Every other weight is random (attention, indexers, MoE), with output projections scaled by `background_gain` so
that the layers run real data through every kernel but add little to the residual stream.

`predict` gives the tokens from the prompts' cycles alone; `model_reference` computes the whole model in
fp32 on a CPU and is what the tests hold the design against.
"""

from __future__ import annotations

import enum
import json
import math
import re
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from ..errors import ComposeError
from .expected import SpecCounters, count_verified_drafts
from .tinyglm import SPECIAL_TOKENS, TinyGlmSpec, config_dict, tensor_layout


class RecallModelError(ComposeError):
    """A recall model could not be specified, built or predicted."""


#: GLM-5.x's per-layer sizes (the checkpoint's config.json): the attention, the indexer and the MoE expert shapes
GLM5_LAYER = {
    "hidden_size": 6144,
    "num_attention_heads": 64,
    "q_lora_rank": 2048,
    "kv_lora_rank": 512,
    "qk_nope_head_dim": 192,
    "qk_rope_head_dim": 64,
    "v_head_dim": 256,
    "index_n_heads": 32,
    "index_head_dim": 128,
    "index_topk": 2048,
    "moe_intermediate_size": 2048,
    "intermediate_size": 12288,
}

#: GLM-5.x's IndexCache settings: layers 0-2 and then every 4th compute their own top-k, the others share it
GLM5_INDEXCACHE = {"index_topk_freq": 4, "index_skip_topk_offset": 3, "index_share_for_mtp_iteration": True}


class Fault(enum.Enum):
    """A fault a proof injects into the recall layer (the first layer that shares the index layer's top-k)."""

    NONE = "none"
    #: every top-k index one position later
    SHIFT = "shift"
    #: another request's top-k rows
    OTHER_REQUEST = "other-request"
    #: each decode step reads the previous step's top-k row
    PREVIOUS_STEP = "previous-step"
    #: the shared buffer was never written by the full layer (zeros: every index reads position 0)
    UNFILLED = "unfilled"
    #: the attention's output is zero
    ZERO_OUTPUT = "zero-output"


@dataclass(frozen=True)
class Dims:
    """Where each designed signal lives in the residual stream (one axis each)."""

    chain: int

    def kq(self, i: int) -> int:
        return i

    def kk(self, i: int) -> int:
        return self.chain + i

    def val(self, j: int) -> int:
        return 2 * self.chain + j

    def out(self, j: int) -> int:
        return 3 * self.chain + j

    @property
    def bias(self) -> int:
        return 4 * self.chain

    @property
    def fill(self) -> int:
        return 4 * self.chain + 1

    @property
    def pl(self) -> int:
        return 4 * self.chain + 2

    @property
    def used(self) -> int:
        return 4 * self.chain + 3


@dataclass(frozen=True)
class RecallSpec:
    """The model: shapes (a `TinyGlmSpec`, whose `extra` carries the IndexCache settings) and the recall design."""

    shape: TinyGlmSpec
    #: how many chain tokens (the cycle length); at most 30, the indexer's 64 nope lanes hold n + 2 key pairs
    chain: int = 24
    #: how many filler token ids the prompts draw from
    fillers: int = 64
    #: the full layer whose indexer finds the planted token; the recall layer is the next one and must share its top-k
    index_layer: int = 2
    #: RMS of an embedding's designed entries (the residual stream's scale)
    embed_scale: float = 1.0
    #: the fallback token's logit when the recall works; the successor's is twice this
    head_logit: float = 8.0
    #: output projections of every undesigned part, relative to 1/sqrt(fan_in): keeps their sum in the residual
    #: small against the designed entries (the RMS norms divide by the whole stream's RMS)
    background_gain: float = 1e-3
    #: the MLA query gain of the recall (attention logit of the match is about 26 * this at GLM-5's head size)
    query_gain: float = 1.0
    #: "" (bf16 experts) or "w4a16": the routed experts as compressed-tensors pack-quantized int4, group 128,
    #: symmetric (the form GLM-5.x int4 checkpoints take; vLLM runs it through Marlin on sm_80)
    moe_quant: str = ""
    #: no design at all: every weight random (embeddings N(0, 1), the LM heads N(0, 1/hidden)), so the logits are not
    #: peaked and the tokens are not predicted; the proof judges such a model against the checkpoint reference
    random_weights: bool = False
    #: chain indices whose MTP draft is wrong by design: when the successor is a_j with j here, the MTP layer drafts
    #: a_(j+1) instead, so over a cycle the first draft is accepted at 1 - len(mtp_wrong) / chain
    mtp_wrong: tuple[int, ...] = ()

    @property
    def recall_layer(self) -> int:
        return self.index_layer + 1

    @property
    def dims(self) -> Dims:
        return Dims(self.chain)

    # --- token ids -------------------------------------------------------------------------------------------------
    def chain_token(self, i: int) -> int:
        return SPECIAL_TOKENS + i

    @property
    def fallback_token(self) -> int:
        return SPECIAL_TOKENS + self.chain

    def filler_token(self, f: int) -> int:
        return SPECIAL_TOKENS + self.chain + 1 + f

    def planted_token(self, key: int, value: int) -> int:
        if key == value:
            raise RecallModelError(f"a planted token needs key != value, got a_{key} -> a_{value}")
        base = SPECIAL_TOKENS + self.chain + 1 + self.fillers
        return base + key * (self.chain - 1) + (value if value < key else value - 1)

    @property
    def tokens_used(self) -> int:
        return SPECIAL_TOKENS + self.chain + 1 + self.fillers + self.chain * (self.chain - 1)

    def validate(self) -> None:
        s, problems = self.shape, []
        if not 2 <= self.chain <= 30:
            problems.append(f"chain {self.chain} outside [2, 30] (the indexer's nope lanes hold chain + 2 key pairs)")
        if self.fillers < 1:
            problems.append("fillers must be >= 1")
        if s.vocab_size < self.tokens_used:
            problems.append(f"vocab_size {s.vocab_size} < the {self.tokens_used} token ids the design uses")
        if s.hidden_size < self.dims.used:
            problems.append(f"hidden_size {s.hidden_size} < the {self.dims.used} residual dims the design uses")
        if s.q_lora_rank <= self.chain:
            problems.append("q_lora_rank must exceed chain")
        if s.kv_lora_rank < 2 * self.chain + 1:
            problems.append("kv_lora_rank must hold 2 * chain + 1 latent lanes")
        if s.qk_nope_head_dim < self.chain or s.v_head_dim < self.chain:
            problems.append("qk_nope_head_dim and v_head_dim must be >= chain")
        if s.index_head_dim != 128 or s.qk_rope_head_dim != 64:
            problems.append("the indexer layout assumed is 128 lanes with the first 64 roped (GLM-5.x, V3.2)")
        if s.index_n_heads < 2:
            problems.append("index_n_heads must be >= 2")
        if any(not 0 <= j < self.chain for j in self.mtp_wrong) or len(set(self.mtp_wrong)) != len(self.mtp_wrong):
            problems.append(f"mtp_wrong must hold distinct chain indices in [0, {self.chain})")
        if self.moe_quant not in ("", "w4a16"):
            problems.append(f"moe_quant must be '' or 'w4a16', not {self.moe_quant!r}")
        elif self.moe_quant and (s.hidden_size % QUANT_GROUP or s.moe_intermediate_size % QUANT_GROUP):
            problems.append(f"w4a16 experts need hidden and moe_intermediate sizes divisible by {QUANT_GROUP}")
        if not 0 <= self.index_layer < s.num_hidden_layers - 1:
            problems.append(f"index_layer {self.index_layer} must leave a recall layer after it")
        elif is_shared_layer(s, self.index_layer):
            problems.append(
                f"layer {self.index_layer} must compute its own top-k (the IndexCache settings in shape.extra "
                "decide); the recall layer after it shares it or, computing its own, gets the same indexer design"
            )
        if problems:
            raise RecallModelError(
                "recall model refused: " + "; ".join(problems), hint="change RecallSpec / its TinyGlmSpec"
            )


def is_shared_layer(shape: TinyGlmSpec, layer: int) -> bool:
    """Whether decoder `layer` reuses an earlier layer's top-k, by vLLM's rule as `pp.plan.computes_topk` states it
    (the same in every release 0.26-0.33)."""
    from ..pp.plan import computes_topk, shape_from_config

    return not computes_topk(shape_from_config(config_dict(shape), "recall model"), layer)


def glm5_spec(
    num_hidden_layers: int = 8,
    n_routed_experts: int = 8,
    num_experts_per_tok: int = 4,
    max_position_embeddings: int = 262144,
    seed: int = 0,
    vocab_size: int = 1024,
) -> RecallSpec:
    """The recall model at GLM-5.x's per-layer shape with its IndexCache settings (fewer layers, routed experts and
    vocabulary than the real model: those are not per-layer sizes)."""
    shape = TinyGlmSpec(
        seed=seed,
        vocab_size=vocab_size,
        num_hidden_layers=num_hidden_layers,
        n_routed_experts=n_routed_experts,
        num_experts_per_tok=num_experts_per_tok,
        n_shared_experts=1,
        first_k_dense_replace=1,
        num_nextn_predict_layers=1,
        max_position_embeddings=max_position_embeddings,
        extra=dict(GLM5_INDEXCACHE),
        **GLM5_LAYER,
    )
    return RecallSpec(shape=shape)


def tiny_spec(seed: int = 0) -> RecallSpec:
    """A small recall model for CPU tests: same design, IndexCache pattern and head layout, small sizes."""
    shape = TinyGlmSpec(
        seed=seed,
        vocab_size=512,
        hidden_size=256,
        intermediate_size=256,
        moe_intermediate_size=64,
        num_hidden_layers=5,
        num_attention_heads=4,
        n_routed_experts=4,
        num_experts_per_tok=2,
        q_lora_rank=64,
        qk_nope_head_dim=32,
        v_head_dim=32,
        index_n_heads=4,
        index_topk=32,
        max_position_embeddings=4096,
        extra=dict(GLM5_INDEXCACHE),
    )
    return RecallSpec(shape=shape, chain=12, fillers=16)


#: DeepSeek-V3.2's per-layer sizes (its config.json): 128 heads, 64 indexer heads, no IndexCache
DSV32_LAYER = {
    "hidden_size": 7168,
    "num_attention_heads": 128,
    "q_lora_rank": 1536,
    "kv_lora_rank": 512,
    "qk_nope_head_dim": 128,
    "qk_rope_head_dim": 64,
    "v_head_dim": 128,
    "index_n_heads": 64,
    "index_head_dim": 128,
    "index_topk": 2048,
    "moe_intermediate_size": 2048,
    "intermediate_size": 18432,
}

#: DeepSeek-V3.2's RoPE: yarn, factor 40 over 4,096 positions (so the MLA softmax scale carries mscale**2 = 1.874)
DSV32_ROPE = {
    "factor": 40,
    "original_max_position_embeddings": 4096,
    "beta_fast": 32,
    "beta_slow": 1,
    "mscale": 1.0,
    "mscale_all_dim": 1.0,
}


def dsv32_spec(num_hidden_layers: int = 4, seed: int = 0) -> RecallSpec:
    """The recall model at DeepSeek-V3.2's per-layer shape and config form: `deepseek_v32` model type, every layer
    computing its own top-k (no IndexCache fields), yarn RoPE, the indexer's RoPE on the two halves."""
    rope = {"rope_type": "yarn", "rope_theta": 10000.0, **DSV32_ROPE}
    shape = TinyGlmSpec(
        seed=seed,
        vocab_size=1024,
        num_hidden_layers=num_hidden_layers,
        n_routed_experts=8,
        num_experts_per_tok=4,
        n_shared_experts=1,
        first_k_dense_replace=1,
        num_nextn_predict_layers=1,
        max_position_embeddings=163840,
        extra={
            "architectures": ["DeepseekV32ForCausalLM"],
            "model_type": "deepseek_v32",
            "rope_parameters": rope,
            "rope_scaling": {"type": "yarn", **DSV32_ROPE},
            "rope_theta": 10000.0,
            "indexer_rope_interleave": False,
        },
        **DSV32_LAYER,
    )
    return RecallSpec(shape=shape)


#: an `index_topk_pattern` whose layer 4 computes its own top-k where GLM-5's freq/offset rule would share it
GLM5_PATTERN = "FFFSFSSS"


def glm5_pattern_spec(seed: int = 0) -> RecallSpec:
    """The GLM-5-shaped recall model with its IndexCache given as an `index_topk_pattern` string."""
    spec = glm5_spec(seed=seed)
    return with_shape(spec, extra={**spec.shape.extra, "index_topk_pattern": GLM5_PATTERN})


def random_spec(seed: int = 1) -> RecallSpec:
    """A GLM-5-shaped checkpoint with random weights (`random_weights`): not peaked, judged by the reference."""
    return replace(glm5_spec(seed=seed), random_weights=True)


#: the checkpoints the proof writes, by name
SHAPES = {
    "glm5": glm5_spec,
    "tiny": tiny_spec,
    "dsv32": dsv32_spec,
    "glm5-pattern": glm5_pattern_spec,
    "random": random_spec,
}


# --- prompts and predictions ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RecallPrompt:
    """One prompt: its token ids, the cycle it plants (chain indices) and where each planted token sits."""

    tokens: tuple[int, ...]
    cycle: tuple[int, ...]
    planted_at: tuple[int, ...]
    #: the (key, value) chain indices of the token at each planted position
    edges: tuple[tuple[int, int], ...] = ()

    def planted_at_of(self, key: int) -> int:
        """The position of the planted token whose key is chain token a_key."""
        try:
            return self.planted_at[self.edges.index((key, self.successor(key)))]
        except ValueError:
            raise RecallModelError(f"no planted token keyed by a_{key}") from None

    def successor(self, chain_index: int) -> int:
        k = self.cycle.index(chain_index)
        return self.cycle[(k + 1) % len(self.cycle)]


def make_prompts(spec: RecallSpec, lengths: list[int], seed: int = 0, far: int | None = None) -> list[RecallPrompt]:
    """Prompts of the given lengths, each planting its own cycle of all chain tokens.

    Planted tokens sit at least `far` tokens (default `index_topk`) before the prompt's end, so no window of recent
    tokens holds them, and request r uses only positions congruent to r modulo the number of prompts, so two
    requests never plant at the same position (reading another request's top-k reads fillers)."""
    import numpy as np

    spec.validate()
    far = spec.shape.index_topk if far is None else far
    count = len(lengths)
    out = []
    for r, length in enumerate(lengths):
        rng = np.random.Generator(np.random.PCG64([seed, r, 0x726563616C6C]))
        # enough other tokens that the top-k can fill up without another planted token
        need = spec.chain + far + 2
        if length < need:
            raise RecallModelError(
                f"prompt {r}: length {length} < {need} (chain {spec.chain} + far {far} + 2)",
                hint="use longer prompts or a smaller index_topk",
            )
        slots = np.arange(r + count, length - far - 1, count)
        if len(slots) < spec.chain:
            raise RecallModelError(f"prompt {r}: length {length} leaves fewer than {spec.chain} planting slots")
        at = sorted(int(x) for x in rng.choice(slots, size=spec.chain, replace=False))
        cycle = tuple(int(x) for x in rng.permutation(spec.chain))
        toks = [spec.filler_token(int(f)) for f in rng.integers(0, spec.fillers, size=length)]
        order = rng.permutation(spec.chain)  # which cycle edge goes where: not in cycle order
        edges = []
        for pos, k in zip(at, order, strict=True):
            edges.append((cycle[k], cycle[(k + 1) % spec.chain]))
            toks[pos] = spec.planted_token(*edges[-1])
        toks[-1] = spec.chain_token(cycle[0])
        out.append(RecallPrompt(tuple(toks), cycle, tuple(at), tuple(edges)))
    return out


def with_draft_acceptance(spec: RecallSpec, fraction: float) -> RecallSpec:
    """`spec` whose MTP first drafts are right for `fraction` of the chain (rounded to whole chain tokens)."""
    if not 0.0 <= fraction <= 1.0:
        raise RecallModelError(f"draft acceptance {fraction} outside [0, 1]")
    wrong = round(spec.chain * (1.0 - fraction))
    return replace(spec, mtp_wrong=tuple(range(wrong)))


def draft_right(spec: RecallSpec, token: int) -> bool:
    """Whether the MTP layer's first draft is right when the token to be drafted is `token` (a chain token)."""
    return token - spec.chain_token(0) not in spec.mtp_wrong


def predict(spec: RecallSpec, prompt: RecallPrompt, max_tokens: int) -> list[int]:
    """The tokens greedy decoding must produce: the prompt's cycle, from its last token on."""
    out, cur = [], prompt.cycle[0]
    for _ in range(max_tokens):
        cur = prompt.successor(cur)
        out.append(spec.chain_token(cur))
    return out


def predict_drafts(spec: RecallSpec, prompt: RecallPrompt, max_tokens: int, k: int) -> SpecCounters:
    """The spec-decode counters of one greedy request of `max_tokens` tokens verified `k`
    MTP drafts at a time, counted as vLLM's scheduler counts them: the prefill step emits the first token and
    proposes the first drafts; each later step verifies `k` drafts and emits the accepted ones plus one token; a
    request is verified again while it has fewer than `max_tokens` tokens. `num_drafts` is the request's number of
    decode steps.

    The first draft is right where `draft_right` says. A later draft is right only if the drafts before it were and
    the MTP layer computes its own top-k at that draft step: with `index_share_for_mtp_iteration` it reuses the first
    step's, which holds the planted token of the wrong key, and drafts the fallback token.

    Why this is not `1 - len(mtp_wrong) / chain`: that fraction counts chain positions, the counters count drafts,
    and the positions drafted are not a uniform sample of the chain. After an accepted draft the next position is the
    verify step's bonus token, which is never drafted; so how the wrong chain tokens fall along a prompt's cycle
    decides how many of them are drafted at all."""
    if k < 1:
        raise RecallModelError(f"num_speculative_tokens must be >= 1, got {k}")
    target = predict(spec, prompt, max_tokens + k + 1)
    shared = bool(spec.shape.extra.get("index_share_for_mtp_iteration"))
    return count_verified_drafts(
        max_tokens, k, lambda emitted, i: (i == 0 or not shared) and draft_right(spec, target[emitted + i])
    )


# --- weights --------------------------------------------------------------------------------------------------------


def _background(torch, gen, name: str, shape: tuple[int, ...], spec: RecallSpec, device):
    """A random tensor for an undesigned weight: norms 1, biases 0, N(0, 1/fan_in) with output projections scaled."""
    if name.endswith("norm.weight"):
        return torch.ones(shape, device=device)
    if name.endswith(".bias") or name.endswith("e_score_correction_bias"):
        return torch.zeros(shape, device=device)
    std = shape[-1] ** -0.5
    if spec.random_weights:
        t = torch.empty(shape, device=device)
        return t.normal_(0.0, 1.0 if name.endswith("embed_tokens.weight") else std, generator=gen)
    if name.endswith(("o_proj.weight", "down_proj.weight")):
        std *= spec.background_gain
    if name.endswith("embed_tokens.weight"):
        std = 0.0
    if name.endswith(("lm_head.weight", "shared_head.head.weight", "eh_proj.weight")):
        std = 0.0
    t = torch.empty(shape, device=device)
    if std == 0.0:
        return t.zero_()
    return t.normal_(0.0, std, generator=gen)


def _design_index(torch, t: dict, p: str, spec: RecallSpec, residual_bias: float) -> None:
    """Layer prefix `p`'s q_a_proj and indexer: the match +1, other planted tokens -1, everything else 0."""
    s, d, n = spec.shape, spec.dims, spec.chain
    qa = t[f"{p}.self_attn.q_a_proj.weight"]
    qa.zero_()
    for i in range(n):
        qa[i, d.kq(i)] = 1.0
    for dim in (d.bias, d.fill, d.pl):
        qa[n, dim] = 1.0  # every token has a q_lora entry: the RMS norm never amplifies noise
    ix = f"{p}.self_attn.indexer"
    wq = t[f"{ix}.wq_b.weight"].view(s.index_n_heads, s.index_head_dim, s.q_lora_rank)
    wq.zero_()
    nope = s.qk_rope_head_dim  # lanes 0..63 are roped; the design lives in the nope lanes 64..127
    g_pair, f_pair = n, n + 1
    for i in range(n):
        wq[0, nope + 2 * i, i] = 1.0
        wq[0, nope + 2 * i + 1, i] = -1.0
    wq[1, nope + 2 * g_pair, n] = 1.0
    wq[1, nope + 2 * g_pair + 1, n] = -1.0
    wk = t[f"{ix}.wk.weight"]
    wk.zero_()
    for i in range(n):
        wk[nope + 2 * i, d.kk(i)] = 1.0
        wk[nope + 2 * i + 1, d.kk(i)] = -1.0
    wk[nope + 2 * g_pair, d.pl] = 1.0
    wk[nope + 2 * g_pair + 1, d.pl] = -1.0
    for dim in (d.bias, d.fill):
        wk[nope + 2 * f_pair, dim] = 1.0
        wk[nope + 2 * f_pair + 1, dim] = -1.0
    t[f"{ix}.k_norm.weight"].fill_(1.0)
    t[f"{ix}.k_norm.bias"].zero_()
    w = t[f"{ix}.weights_proj.weight"]
    w.zero_()
    # only a chain token's query (BIAS) weighs its heads: head 0 finds the key, head 1 pushes every planted token down
    w[0, d.bias] = 2.0 / residual_bias
    w[1, d.bias] = -1.0 / residual_bias


def _design_recall(torch, t: dict, p: str, spec: RecallSpec, residual_bias: float, wrong: tuple[int, ...] = ()) -> None:
    """Layer prefix `p`'s MLA: query a_i matches the latent key of c(i, .), whose value VAL_j goes to OUT_j."""
    s, d, n = spec.shape, spec.dims, spec.chain
    h = s.num_attention_heads
    qa = t[f"{p}.self_attn.q_a_proj.weight"]
    qa.zero_()
    for i in range(n):
        qa[i, d.kq(i)] = 1.0
    for dim in (d.bias, d.fill, d.pl):
        qa[n, dim] = 1.0
    qk = s.qk_nope_head_dim + s.qk_rope_head_dim
    qb = t[f"{p}.self_attn.q_b_proj.weight"].view(h, qk, s.q_lora_rank)
    qb.zero_()
    for i in range(n):
        qb[:, i, i] = spec.query_gain  # nope lane i; the rope lanes stay 0 so positions do not matter
    kva = t[f"{p}.self_attn.kv_a_proj_with_mqa.weight"]
    kva.zero_()
    null = 2 * n  # every token has a latent entry: the RMS norm never amplifies noise
    for i in range(n):
        kva[i, d.kk(i)] = 1.0
        kva[n + i, d.val(i)] = 1.0
    for dim in (d.bias, d.fill, d.pl):
        kva[null, dim] = 1.0
    kvb = t[f"{p}.self_attn.kv_b_proj.weight"].view(h, s.qk_nope_head_dim + s.v_head_dim, s.kv_lora_rank)
    kvb.zero_()
    for i in range(n):
        kvb[:, i, i] = 1.0  # key lane i <- latent key i
        kvb[:, s.qk_nope_head_dim + i, n + i] = 1.0  # value lane i <- latent value i
    # a planted token's latent has three equal entries (key, value, null): each sqrt(kv_lora / 3) after the norm
    v_read = math.sqrt(s.kv_lora_rank / 3)
    o = t[f"{p}.self_attn.o_proj.weight"].view(s.hidden_size, h, s.v_head_dim)
    o.zero_()
    gain = 2.0 * residual_bias / (h * v_read)
    for j in range(n):
        # a value in `wrong` is written as the next chain token's (the MTP layer's designed wrong drafts)
        o[d.out((j + 1) % n if j in wrong else j), :, j] = gain


def make_tensors(spec: RecallSpec, device: str = "cpu", checkpoint_dtypes: bool = False) -> dict[str, Any]:
    """Every checkpoint tensor, deterministic from the shape's seed: drawn on `device` and kept there in float32, or,
    with `checkpoint_dtypes`, moved to the CPU in its checkpoint dtype as soon as it is drawn (a GLM-5-shaped model
    then needs one tensor of GPU memory and 9.2 GB of host memory, not 18 GB of either)."""
    import torch

    spec.validate()
    s, d = spec.shape, spec.dims
    layout = tensor_layout(s)
    t: dict[str, Any] = {}
    for index, (name, (shape, dtype)) in enumerate(layout.items()):
        gen = torch.Generator(device=device)
        gen.manual_seed(s.seed * 1_000_003 + index)
        x = _background(torch, gen, name, shape, spec, device)
        if checkpoint_dtypes:
            x = x.to(torch.bfloat16 if dtype == "BF16" else torch.float32).cpu()
        t[name] = x
    if spec.random_weights:
        _drop_shared_indexers(t, s)
        return t
    # embeddings: one designed pattern per token role, entries of size embed_scale
    e = t["model.embed_tokens.weight"]
    for i in range(spec.chain):
        e[spec.chain_token(i), d.kq(i)] = spec.embed_scale
        e[spec.chain_token(i), d.bias] = spec.embed_scale
    e[spec.fallback_token, d.bias] = spec.embed_scale
    for tok in list(range(SPECIAL_TOKENS)) + [spec.filler_token(f) for f in range(spec.fillers)]:
        e[tok, d.fill] = spec.embed_scale
    for tok in range(spec.tokens_used, s.vocab_size):
        e[tok, d.fill] = spec.embed_scale
    for i in range(spec.chain):
        for j in range(spec.chain):
            if i != j:
                c = spec.planted_token(i, j)
                e[c, d.kk(i)] = e[c, d.val(j)] = e[c, d.pl] = spec.embed_scale
    # the main model: its residual starts at the embedding (BIAS entry embed_scale)
    _design_index(torch, t, f"model.layers.{spec.index_layer}", spec, spec.embed_scale)
    _design_recall(torch, t, f"model.layers.{spec.recall_layer}", spec, spec.embed_scale)
    if not is_shared_layer(s, spec.recall_layer):  # no IndexCache here (DeepSeek-V3.2): its own indexer finds it
        _design_index(torch, t, f"model.layers.{spec.recall_layer}", spec, spec.embed_scale)
    # LM head: a_j reads OUT_j, the fallback reads BIAS; both see the final norm's output, where a chain token's
    # BIAS entry is sqrt(h / 6) after a recall (entries KQ, BIAS and OUT = 2 * BIAS)
    head = t["lm_head.weight"]
    gain = spec.head_logit / math.sqrt(s.hidden_size / 6)
    for j in range(spec.chain):
        head[spec.chain_token(j), d.out(j)] = gain
    head[spec.fallback_token, d.bias] = gain
    # MTP: eh_proj passes the normed embedding of the token through (the hidden half is 0); that residual starts with
    # entries sqrt(h / 2) for a chain token, so the recall writes twice that
    for k in range(s.num_nextn_predict_layers):
        p = f"model.layers.{s.num_hidden_layers + k}"
        eh = t[f"{p}.eh_proj.weight"]
        eh[:, : s.hidden_size] = torch.eye(s.hidden_size, device=eh.device, dtype=eh.dtype)
        mtp_bias = math.sqrt(s.hidden_size / 2)
        _design_index(torch, t, p, spec, mtp_bias)
        _design_recall(torch, t, p, spec, mtp_bias, wrong=spec.mtp_wrong)
        t[f"{p}.embed_tokens.weight"] = e.clone()  # copies, as in the real checkpoints
        t[f"{p}.shared_head.head.weight"] = head.clone()
    _drop_shared_indexers(t, s)
    return t


def _drop_shared_indexers(t: dict, s: TinyGlmSpec) -> None:
    """A layer that shares the top-k has no indexer (v0.30+ loaders refuse its weights, earlier ones skip them)."""
    for layer in range(s.num_hidden_layers):
        if is_shared_layer(s, layer):
            for name in [n for n in t if n.startswith(f"model.layers.{layer}.self_attn.indexer.")]:
                del t[name]


#: the quantization group of the w4a16 experts (along each matrix's input dimension)
QUANT_GROUP = 128

#: which checkpoint tensors `moe_quant` quantizes: the routed experts' three projections
_EXPERT_WEIGHT = re.compile(r"\.mlp\.experts\.\d+\.(gate|up|down)_proj\.weight$")


def quantize_w4(weight, group: int = QUANT_GROUP) -> dict[str, Any]:
    """A [out, in] float matrix as compressed-tensors "pack-quantized" int4, symmetric, per group of `group` inputs:
    `weight_packed` (int32 [out, in / 8]; input k at bits 4 * (k % 8) of word k // 8, stored as q + 8),
    `weight_scale` (bf16 [out, in / group]: max |w| of the group / 7) and `weight_shape` (int64 [out, in])."""
    import torch

    out_f, in_f = weight.shape
    w = weight.float().reshape(out_f, in_f // group, group)
    scale = (w.abs().amax(-1, keepdim=True) / 7).clamp_min(1e-12).to(torch.bfloat16).float()
    q = torch.clamp(torch.round(w / scale), -8, 7).to(torch.int32).reshape(out_f, in_f) + 8
    words = q.reshape(out_f, in_f // 8, 8) << (torch.arange(8, dtype=torch.int32, device=q.device) * 4)
    unsigned = words.sum(-1, dtype=torch.int64)  # in [0, 2**32): the word's bits
    return {
        "weight_packed": ((unsigned + 2**31) % 2**32 - 2**31).to(torch.int32),  # the same bits as int32
        "weight_scale": scale.reshape(out_f, in_f // group).to(torch.bfloat16),
        "weight_shape": torch.tensor([out_f, in_f], dtype=torch.int64),
    }


def dequantize_w4(packed: dict[str, Any], group: int = QUANT_GROUP):
    """The float matrix `quantize_w4`'s tensors stand for (for tests and the CPU reference)."""
    import torch

    out_f, in_f = (int(v) for v in packed["weight_shape"])
    words = packed["weight_packed"].to(torch.int64) & 0xFFFFFFFF
    q = (words[:, :, None] >> (torch.arange(8) * 4)) & 0xF
    q = q.reshape(out_f, in_f).float() - 8
    scale = packed["weight_scale"].float().repeat_interleave(group, dim=1)
    return q * scale


def quantization_config(spec: RecallSpec) -> dict[str, Any] | None:
    """The config.json `quantization_config` of a `moe_quant` checkpoint: the routed experts only."""
    if not spec.moe_quant:
        return None
    return {
        "quant_method": "compressed-tensors",
        "format": "pack-quantized",
        "quantization_status": "compressed",
        "config_groups": {
            "group_0": {
                "targets": ["Linear"],
                "weights": {
                    "num_bits": 4,
                    "type": "int",
                    "symmetric": True,
                    "strategy": "group",
                    "group_size": QUANT_GROUP,
                    "dynamic": False,
                    "actorder": None,
                },
                "input_activations": None,
                "output_activations": None,
            }
        },
        # everything that is not a routed expert stays bf16 (vLLM matches these against its layer names)
        "ignore": [
            "lm_head",
            "re:.*self_attn.*",
            "re:.*shared_experts.*",
            "re:.*mlp\\.gate$",
            "re:.*eh_proj$",
            "re:.*shared_head.*",
            *[f"re:model\\.layers\\.{i}\\.mlp\\..*" for i in range(spec.shape.first_k_dense_replace)],
        ],
    }


def write_checkpoint(spec: RecallSpec, out_dir: Path, device: str = "cpu", max_shard_bytes: int = 4 << 30) -> Path:
    """config.json and bf16 safetensors shards (with their index) for `spec` under `out_dir`; returns `out_dir`.

    Needs torch and safetensors (the serving environment has both). On a GPU (`device="cuda"`) the random weights of
    a GLM-5-shaped model take seconds. With `moe_quant` the routed experts are written quantized (`quantize_w4`)."""
    import torch
    from safetensors.torch import save_file

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    layout = tensor_layout(spec.shape)
    tensors = make_tensors(spec, device, checkpoint_dtypes=True)
    shards: list[dict[str, Any]] = [{}]
    size = 0
    for name, (_shape, dtype) in layout.items():
        if name not in tensors:
            continue
        if spec.moe_quant and _EXPERT_WEIGHT.search(name):
            parts = {
                f"{name[: -len('weight')]}{k}": v.contiguous().cpu() for k, v in quantize_w4(tensors[name]).items()
            }
        else:
            parts = {name: tensors[name].to(torch.bfloat16 if dtype == "BF16" else torch.float32).contiguous().cpu()}
        nbytes = sum(x.numel() * x.element_size() for x in parts.values())
        if size and size + nbytes > max_shard_bytes:
            shards.append({})
            size = 0
        shards[-1].update(parts)
        size += nbytes
    weight_map = {}
    for k, shard in enumerate(shards):
        fname = f"model-{k + 1:05d}-of-{len(shards):05d}.safetensors"
        save_file(shard, str(out_dir / fname), metadata={"format": "pt"})
        weight_map.update({name: fname for name in shard})
    (out_dir / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}, indent=1) + "\n")
    config = config_dict(spec.shape)
    if spec.moe_quant:
        config["quantization_config"] = quantization_config(spec)
    (out_dir / "config.json").write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
    (out_dir / "recall_spec.json").write_text(json.dumps(spec_to_json(spec), indent=2, sort_keys=True) + "\n")
    return out_dir


def spec_to_json(spec: RecallSpec) -> dict[str, Any]:
    out = asdict(spec)
    out["recall_layer"] = spec.recall_layer
    return out


def spec_from_json(data: dict[str, Any]) -> RecallSpec:
    data = dict(data)
    data.pop("recall_layer", None)
    data["mtp_wrong"] = tuple(data.get("mtp_wrong", ()))
    shape = TinyGlmSpec(**data.pop("shape"))
    return RecallSpec(shape=shape, **data)


def with_shape(spec: RecallSpec, **changes: Any) -> RecallSpec:
    """`spec` with shape fields changed (e.g. `extra` for another IndexCache pattern)."""
    return replace(spec, shape=replace(spec.shape, **changes))


__all__ = [
    "Fault",
    "GLM5_INDEXCACHE",
    "GLM5_LAYER",
    "RecallModelError",
    "RecallPrompt",
    "RecallSpec",
    "SHAPES",
    "dsv32_spec",
    "glm5_pattern_spec",
    "glm5_spec",
    "random_spec",
    "is_shared_layer",
    "make_prompts",
    "make_tensors",
    "predict",
    "predict_drafts",
    "spec_from_json",
    "tiny_spec",
    "with_draft_acceptance",
    "draft_right",
    "with_shape",
    "write_checkpoint",
]
