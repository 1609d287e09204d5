"""A tiny random-init GLM-DSA (`glm_moe_dsa`, GlmMoeDsaForCausalLM) checkpoint, made here from a seed.

The checkpoint has the real GLM-5.x / DeepSeek-V3.2 layout as vLLM 0.26.0's `deepseek_v2` / `deepseek_mtp` loaders
read it: a dense first layer (`first_k_dense_replace`), MoE layers with one tensor per routed expert plus shared
experts and a routing bias, the lightning indexer (`indexer.wq_b/wk/k_norm/weights_proj`) in every layer, and the MTP
"nextn" layer at index `num_hidden_layers` with `eh_proj`, `enorm`, `hnorm`, `shared_head` (and its own
`embed_tokens`, which a draft on the last pipeline stage needs because the target's embedding lives on the first).

Sizes keep what the kernels need (MLA latent 512 + rope 64 = the 576-wide sparse-MLA head; indexer head 128 with rope
64, the shape that selects the fused indexer-q kernel) and shrink the rest. `index_topk` stays below `max_model_len`
so the indexer KV cache is built and the top-k really drops tokens once a sequence passes `index_topk`.

Only numpy is needed: the safetensors file is written directly (8-byte header length, JSON header, raw little-endian
data), with bfloat16 made by round-to-nearest-even from float32, so CI can test the layout without torch.
"""

from __future__ import annotations

import json
import struct
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ..errors import ComposeError

#: safetensors dtype names for the two dtypes this checkpoint uses, with their byte widths.
_DTYPE_BYTES = {"BF16": 2, "F32": 4}


class TinyGlmError(ComposeError):
    """A tiny checkpoint could not be specified, written or read."""


@dataclass(frozen=True)
class TinyGlmSpec:
    """Sizes of the tiny model; every field ends up in config.json under the HF name."""

    seed: int = 0
    vocab_size: int = 2048
    hidden_size: int = 512
    intermediate_size: int = 1024
    moe_intermediate_size: int = 256
    num_hidden_layers: int = 4
    num_attention_heads: int = 8
    n_routed_experts: int = 8
    num_experts_per_tok: int = 2
    n_shared_experts: int = 1
    first_k_dense_replace: int = 1
    q_lora_rank: int = 256
    kv_lora_rank: int = 512
    qk_nope_head_dim: int = 128
    qk_rope_head_dim: int = 64
    v_head_dim: int = 128
    index_topk: int = 256
    index_n_heads: int = 32
    index_head_dim: int = 128
    num_nextn_predict_layers: int = 1
    max_position_embeddings: int = 4096
    #: std of the output heads relative to 1/sqrt(hidden): large margins between the top two logits keep greedy
    #: decoding stable against bf16 rounding differences between batch shapes (PP, MTP verification).
    head_gain: float = 6.0
    #: route every token to the same experts (gate weight 0, distinct routing biases): removes the near-tie expert
    #: flips that turn bf16 rounding differences between batch shapes into different tokens; the MoE kernels still
    #: run, with num_experts_per_tok of the experts active.
    fixed_routing: bool = False
    #: "random": every weight random. "cycle": the token-cycle model (see `TokenCycle`): embedding, LM head and the
    #: MTP layer's `eh_proj` are built so that greedy decoding follows a fixed permutation of the vocabulary with
    #: logit margins far above bf16 rounding, and so that the MTP draft is right for a known set of tokens; every
    #: other weight (attention, indexer, MoE, norms) stays random and still adds context-dependent logits.
    weights: str = "random"
    #: cycle model: per-element RMS of the embedding rows (the residual stream's token signal against the layers' output)
    embed_rms: float = 4.0
    #: cycle model: logit of the cycle's next token for a clean (context-free) hidden state; every other logit is 0
    #: there, so this is the designed top-1 margin before the layers' context-dependent contributions
    head_logit: float = 8.0
    #: cycle model: per-element RMS of `eh_proj`'s output (the draft's token signal against the MTP block's output)
    mtp_gain: float = 4.0
    #: cycle model: fractions of the vocabulary whose draft comes through the embedding half of `eh_proj` and through
    #: its hidden-state half; the rest gets a draft that is wrong by design
    draft_via_embedding: float = 0.4
    draft_via_hidden: float = 0.4
    #: extra fields merged into config.json last (e.g. index_topk_freq to give some layers a shared indexer)
    extra: dict[str, Any] = field(default_factory=dict)

    def validate(self, max_model_len: int | None = None) -> None:
        """Refuse sizes the kernels or the loaders cannot take."""
        problems = []
        if self.num_hidden_layers < 1:
            problems.append("num_hidden_layers must be >= 1")
        if not 0 <= self.first_k_dense_replace <= self.num_hidden_layers:
            problems.append("first_k_dense_replace must lie in [0, num_hidden_layers]")
        if self.kv_lora_rank + self.qk_rope_head_dim != 576:
            problems.append("kv_lora_rank + qk_rope_head_dim must be 576 (the sparse-MLA head width)")
        if self.index_head_dim % 128:
            problems.append("index_head_dim must be a multiple of 128 (the indexer's fp8 quant block)")
        if self.num_experts_per_tok > self.n_routed_experts:
            problems.append("num_experts_per_tok exceeds n_routed_experts")
        if self.weights not in ("random", "cycle"):
            problems.append(f"weights must be 'random' or 'cycle', not {self.weights!r}")
        if self.weights == "cycle":
            if self.vocab_size > self.hidden_size:
                problems.append(
                    f"the cycle model needs vocab_size <= hidden_size (one orthonormal embedding row per token); "
                    f"got {self.vocab_size} > {self.hidden_size}"
                )
            if self.vocab_size < 8:
                problems.append("the cycle model needs vocab_size >= 8")
            fractions = (self.draft_via_embedding, self.draft_via_hidden)
            if min(fractions) < 0 or sum(fractions) > 1:
                problems.append("draft_via_embedding and draft_via_hidden must be >= 0 and sum to at most 1")
            if min(self.embed_rms, self.head_logit, self.mtp_gain) <= 0:
                problems.append("embed_rms, head_logit and mtp_gain must be positive")
        if max_model_len is not None and max_model_len <= self.index_topk:
            problems.append(
                f"max_model_len {max_model_len} <= index_topk {self.index_topk}: the indexer cache would never "
                "drop a token"
            )
        if problems:
            raise TinyGlmError(
                "tiny GLM spec refused: " + "; ".join(problems),
                hint="change the sizes (TinyGlmSpec fields) or raise max_model_len",
            )


def config_dict(spec: TinyGlmSpec) -> dict[str, Any]:
    """The config.json of the tiny checkpoint (GlmMoeDsaConfig field names)."""
    cfg: dict[str, Any] = {
        "architectures": ["GlmMoeDsaForCausalLM"],
        "model_type": "glm_moe_dsa",
        "dtype": "bfloat16",
        "vocab_size": spec.vocab_size,
        "hidden_size": spec.hidden_size,
        "intermediate_size": spec.intermediate_size,
        "moe_intermediate_size": spec.moe_intermediate_size,
        "num_hidden_layers": spec.num_hidden_layers,
        "num_attention_heads": spec.num_attention_heads,
        "num_key_value_heads": spec.num_attention_heads,
        "n_routed_experts": spec.n_routed_experts,
        "num_experts_per_tok": spec.num_experts_per_tok,
        "n_shared_experts": spec.n_shared_experts,
        "n_group": 1,
        "topk_group": 1,
        "topk_method": "noaux_tc",
        "scoring_func": "sigmoid",
        "norm_topk_prob": True,
        "routed_scaling_factor": 2.5,
        "moe_layer_freq": 1,
        "first_k_dense_replace": spec.first_k_dense_replace,
        "q_lora_rank": spec.q_lora_rank,
        "kv_lora_rank": spec.kv_lora_rank,
        "qk_nope_head_dim": spec.qk_nope_head_dim,
        "qk_rope_head_dim": spec.qk_rope_head_dim,
        "v_head_dim": spec.v_head_dim,
        "head_dim": spec.qk_rope_head_dim,
        "index_topk": spec.index_topk,
        "index_n_heads": spec.index_n_heads,
        "index_head_dim": spec.index_head_dim,
        "indexer_rope_interleave": True,
        "rope_interleave": True,
        "num_nextn_predict_layers": spec.num_nextn_predict_layers,
        "hidden_act": "silu",
        "rms_norm_eps": 1e-5,
        "max_position_embeddings": spec.max_position_embeddings,
        "rope_parameters": {"rope_theta": 10000.0, "rope_type": "default"},
        "attention_bias": False,
        "attention_dropout": 0.0,
        "tie_word_embeddings": False,
        "initializer_range": 0.02,
        "bos_token_id": 0,
        "eos_token_id": 1,
        "pad_token_id": 2,
        "use_cache": True,
    }
    cfg.update(spec.extra)
    return cfg


def _is_moe_layer(spec: TinyGlmSpec, layer: int) -> bool:
    return layer >= spec.first_k_dense_replace


def tensor_layout(spec: TinyGlmSpec) -> dict[str, tuple[tuple[int, ...], str]]:
    """Every checkpoint tensor: name -> (shape as [out, in] for linear weights, safetensors dtype), in file order."""
    h, v = spec.hidden_size, spec.vocab_size
    heads = spec.num_attention_heads
    out: dict[str, tuple[tuple[int, ...], str]] = {
        "model.embed_tokens.weight": ((v, h), "BF16"),
    }

    def decoder(prefix: str, layer: int) -> None:
        a = f"{prefix}.self_attn"
        out[f"{prefix}.input_layernorm.weight"] = ((h,), "BF16")
        out[f"{a}.q_a_proj.weight"] = ((spec.q_lora_rank, h), "BF16")
        out[f"{a}.q_a_layernorm.weight"] = ((spec.q_lora_rank,), "BF16")
        out[f"{a}.q_b_proj.weight"] = (
            (heads * (spec.qk_nope_head_dim + spec.qk_rope_head_dim), spec.q_lora_rank),
            "BF16",
        )
        out[f"{a}.kv_a_proj_with_mqa.weight"] = ((spec.kv_lora_rank + spec.qk_rope_head_dim, h), "BF16")
        out[f"{a}.kv_a_layernorm.weight"] = ((spec.kv_lora_rank,), "BF16")
        out[f"{a}.kv_b_proj.weight"] = ((heads * (spec.qk_nope_head_dim + spec.v_head_dim), spec.kv_lora_rank), "BF16")
        out[f"{a}.o_proj.weight"] = ((h, heads * spec.v_head_dim), "BF16")
        i = f"{a}.indexer"
        out[f"{i}.wq_b.weight"] = ((spec.index_n_heads * spec.index_head_dim, spec.q_lora_rank), "BF16")
        out[f"{i}.wk.weight"] = ((spec.index_head_dim, h), "BF16")
        out[f"{i}.k_norm.weight"] = ((spec.index_head_dim,), "BF16")
        out[f"{i}.k_norm.bias"] = ((spec.index_head_dim,), "BF16")
        out[f"{i}.weights_proj.weight"] = ((spec.index_n_heads, h), "BF16")
        out[f"{prefix}.post_attention_layernorm.weight"] = ((h,), "BF16")
        m = f"{prefix}.mlp"
        if _is_moe_layer(spec, layer):
            im = spec.moe_intermediate_size
            out[f"{m}.gate.weight"] = ((spec.n_routed_experts, h), "BF16")
            out[f"{m}.gate.e_score_correction_bias"] = ((spec.n_routed_experts,), "F32")
            for e in range(spec.n_routed_experts):
                out[f"{m}.experts.{e}.gate_proj.weight"] = ((im, h), "BF16")
                out[f"{m}.experts.{e}.up_proj.weight"] = ((im, h), "BF16")
                out[f"{m}.experts.{e}.down_proj.weight"] = ((h, im), "BF16")
            ims = im * spec.n_shared_experts
            out[f"{m}.shared_experts.gate_proj.weight"] = ((ims, h), "BF16")
            out[f"{m}.shared_experts.up_proj.weight"] = ((ims, h), "BF16")
            out[f"{m}.shared_experts.down_proj.weight"] = ((h, ims), "BF16")
        else:
            out[f"{m}.gate_proj.weight"] = ((spec.intermediate_size, h), "BF16")
            out[f"{m}.up_proj.weight"] = ((spec.intermediate_size, h), "BF16")
            out[f"{m}.down_proj.weight"] = ((h, spec.intermediate_size), "BF16")

    for layer in range(spec.num_hidden_layers):
        decoder(f"model.layers.{layer}", layer)
    for k in range(spec.num_nextn_predict_layers):
        layer = spec.num_hidden_layers + k
        p = f"model.layers.{layer}"
        out[f"{p}.embed_tokens.weight"] = ((v, h), "BF16")
        out[f"{p}.enorm.weight"] = ((h,), "BF16")
        out[f"{p}.hnorm.weight"] = ((h,), "BF16")
        out[f"{p}.eh_proj.weight"] = ((h, 2 * h), "BF16")
        decoder(p, layer)
        out[f"{p}.shared_head.norm.weight"] = ((h,), "BF16")
        out[f"{p}.shared_head.head.weight"] = ((v, h), "BF16")
    out["model.norm.weight"] = ((h,), "BF16")
    out["lm_head.weight"] = ((v, h), "BF16")
    return out


def _init_tensor(rng, name: str, shape: tuple[int, ...], spec: TinyGlmSpec):
    """Random values for one tensor: norms at 1, biases at 0, heads wider, the rest N(0, 1/sqrt(fan_in))."""
    import numpy as np

    if name.endswith("norm.weight"):
        return np.ones(shape, dtype=np.float32)
    if spec.fixed_routing and name.endswith("mlp.gate.weight"):
        return np.zeros(shape, dtype=np.float32)
    if spec.fixed_routing and name.endswith("e_score_correction_bias"):
        return np.linspace(1.0, 0.0, shape[0], dtype=np.float32)
    if name.endswith(".bias") or name.endswith("e_score_correction_bias"):
        return np.zeros(shape, dtype=np.float32)
    fan_in = shape[-1]
    std = fan_in**-0.5
    if name.endswith("lm_head.weight") or name.endswith("shared_head.head.weight"):
        std *= spec.head_gain
    elif name.endswith("embed_tokens.weight"):
        std = 1.0
    return rng.standard_normal(shape, dtype=np.float32) * np.float32(std)


def to_bf16_bits(x):
    """float32 array -> uint16 bfloat16 bit patterns, rounded to nearest even (NaN kept NaN)."""
    import numpy as np

    bits = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)
    rounding = ((bits >> 16) & 1) + np.uint32(0x7FFF)
    out = ((bits + rounding) >> 16).astype(np.uint16)
    nan = np.isnan(x)
    if nan.any():
        out[nan] = 0x7FC0
    return out


def from_bf16_bits(b):
    """uint16 bfloat16 bit patterns -> float32 array."""
    import numpy as np

    return (np.asarray(b, dtype=np.uint16).astype(np.uint32) << 16).view(np.float32)


#: token ids the config names bos / eos / pad; prompts avoid them and the cycle never produces them
SPECIAL_TOKENS = 3

#: how the cycle model's MTP layer drafts the token after a given one (`TokenCycle.draft_path`)
DRAFT_PATHS = ("embedding", "hidden", "wrong")


@dataclass(frozen=True)
class TokenCycle:
    """The cycle model's designed behaviour, deterministic from the spec's seed.

    `next[t]`: the token greedy decoding emits after `t` — one cycle through all non-special tokens (special tokens
    lead into it). `draft_path[t]`: how the MTP layer learns that the token after `t` is `next[t]` when `t` is the
    token it is given (the one just emitted):
      - "embedding": only the embedding half of `eh_proj` carries it (the draft needs the MTP layer's own
        `embed_tokens` — the weight PR #46994 loads on the last pipeline stage);
      - "hidden": only the hidden-state half carries it (the draft needs the target's hidden states, and at the
        second draft step the MTP layer's own recycled output);
      - "wrong": the embedding half maps `t` to `next[t]`, so the draft is `next[next[t]]`, wrong by design.
    So the draft after `t` is `draft_next(t)`, and vLLM's acceptance counters can be predicted exactly
    (`vllm_compose.proof.expected`).
    """

    next: tuple[int, ...]
    draft_path: tuple[str, ...]

    @classmethod
    def of(cls, spec: TinyGlmSpec) -> TokenCycle:
        import numpy as np

        v = spec.vocab_size
        rng = np.random.Generator(np.random.PCG64([spec.seed, 0x6379636C65]))
        order = [int(t) for t in rng.permutation(np.arange(SPECIAL_TOKENS, v))]
        nxt = [0] * v
        for a, b in zip(order, order[1:] + order[:1], strict=True):
            nxt[a] = b
        for t in range(SPECIAL_TOKENS):
            nxt[t] = order[0]
        u = rng.random(v)
        e, h = spec.draft_via_embedding, spec.draft_via_hidden
        paths = ["embedding" if x < e else "hidden" if x < e + h else "wrong" for x in u]
        for t in range(SPECIAL_TOKENS):
            paths[t] = "embedding"
        return cls(tuple(nxt), tuple(paths))

    def draft_next(self, t: int) -> int:
        """The MTP layer's greedy draft when the last token is `t`."""
        return self.next[self.next[t]] if self.draft_path[t] == "wrong" else self.next[t]


def _cycle_tensors(spec: TinyGlmSpec, tensors: dict[str, Any]) -> None:
    """Overwrite embedding, LM head and `eh_proj` with the cycle model's weights (see `TokenCycle`).

    E: orthonormal rows (QR of a seeded Gaussian), one per token. Embedding = embed_rms * sqrt(h) * E, so a
    token's RMS-normed embedding is sqrt(h) * E[t]. LM head row v = (head_logit / sqrt(h)) * sum of E[u] over the
    u with next[u] = v, so a clean normed state of token u scores head_logit for next[u] and 0 elsewhere.
    eh_proj = mtp_gain * [A | B] on [enorm(embedding of t); hnorm(hidden of the token before t)]:
    A maps E[t] to E[t] ("embedding" tokens) or E[next[t]] ("wrong"), 0 for "hidden" tokens;
    B maps E[w] to E[next[w]] when next[w] is a "hidden" token, else 0 (the hidden state of w is dominated by E[w]).
    The MTP layer's output is then dominated by E[x] with next[x] the draft, and the shared LM head drafts next[x].
    """
    import numpy as np

    cyc = TokenCycle.of(spec)
    v, h = spec.vocab_size, spec.hidden_size
    rng = np.random.Generator(np.random.PCG64([spec.seed, 0x6F7274686F]))
    q, r = np.linalg.qr(rng.standard_normal((h, h)))
    e = (q * np.sign(np.diag(r))).T[:v].astype(np.float64)  # v orthonormal rows of length h
    tensors["model.embed_tokens.weight"] = (e * (spec.embed_rms * h**0.5)).astype(np.float32)
    head = np.zeros((v, h))
    for u, w in enumerate(cyc.next):
        head[w] += e[u]
    tensors["lm_head.weight"] = (head * (spec.head_logit / h**0.5)).astype(np.float32)
    a = np.zeros((h, h))
    b = np.zeros((h, h))
    for t in range(v):
        path = cyc.draft_path[t]
        if path == "embedding":
            a += np.outer(e[t], e[t])
        elif path == "wrong":
            a += np.outer(e[cyc.next[t]], e[t])
    for w in range(v):
        if cyc.draft_path[cyc.next[w]] == "hidden":
            b += np.outer(e[cyc.next[w]], e[w])
    for k in range(spec.num_nextn_predict_layers):
        tensors[f"model.layers.{spec.num_hidden_layers + k}.eh_proj.weight"] = (
            np.concatenate([a, b], axis=1) * spec.mtp_gain
        ).astype(np.float32)


def make_tensors(spec: TinyGlmSpec) -> dict[str, Any]:
    """All tensors as float32 numpy arrays, deterministic from `spec.seed`.

    Each tensor draws from its own generator seeded by (seed, index), so a tensor's values do not depend on which
    tensors come before it when a layout is extended. The MTP layer's `embed_tokens` and `shared_head.head` are the
    main model's, as in the real checkpoints where they are copies.
    """
    import numpy as np

    layout = tensor_layout(spec)
    tensors: dict[str, Any] = {}
    for index, (name, (shape, _dtype)) in enumerate(layout.items()):
        rng = np.random.Generator(np.random.PCG64([spec.seed, index]))
        tensors[name] = _init_tensor(rng, name, shape, spec)
    if spec.weights == "cycle":
        _cycle_tensors(spec, tensors)
    for k in range(spec.num_nextn_predict_layers):
        p = f"model.layers.{spec.num_hidden_layers + k}"
        tensors[f"{p}.embed_tokens.weight"] = tensors["model.embed_tokens.weight"]
        tensors[f"{p}.shared_head.head.weight"] = tensors["lm_head.weight"]
    return tensors


def write_safetensors(path: Path, tensors: dict[str, Any], dtypes: dict[str, str], metadata: dict[str, str]) -> None:
    """Write `tensors` (float32 numpy arrays) to a safetensors file, each stored in `dtypes[name]` (BF16 or F32)."""
    import numpy as np

    header: dict[str, Any] = {"__metadata__": metadata}
    blobs = []
    offset = 0
    for name, arr in tensors.items():
        dtype = dtypes[name]
        if dtype == "BF16":
            data = to_bf16_bits(arr).astype("<u2").tobytes()
        elif dtype == "F32":
            data = np.ascontiguousarray(arr, dtype="<f4").tobytes()
        else:
            raise TinyGlmError(f"unsupported dtype {dtype}", key=name, hint="use BF16 or F32")
        header[name] = {"dtype": dtype, "shape": list(arr.shape), "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    head = json.dumps(header, separators=(",", ":")).encode()
    head += b" " * (-len(head) % 8)  # the format pads the header so the data starts 8-byte aligned
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(head)))
        f.write(head)
        for data in blobs:
            f.write(data)


def read_safetensors(path: Path, load: bool = True) -> tuple[dict[str, Any], dict[str, Any]]:
    """Read a safetensors file written by `write_safetensors`: (header without metadata, name -> float32 array)."""
    import numpy as np

    raw = Path(path).read_bytes()
    if len(raw) < 8:
        raise TinyGlmError("safetensors file too short", file=str(path), hint="regenerate the checkpoint")
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8 : 8 + n])
    header.pop("__metadata__", None)
    arrays: dict[str, Any] = {}
    if load:
        base = 8 + n
        for name, info in header.items():
            start, end = info["data_offsets"]
            buf = raw[base + start : base + end]
            if info["dtype"] == "BF16":
                arr = from_bf16_bits(np.frombuffer(buf, dtype="<u2"))
            elif info["dtype"] == "F32":
                arr = np.frombuffer(buf, dtype="<f4").astype(np.float32)
            else:
                raise TinyGlmError(f"unexpected dtype {info['dtype']}", file=str(path), key=name)
            arrays[name] = arr.reshape(info["shape"])
    return header, arrays


def generate(spec: TinyGlmSpec, out_dir: Path, max_model_len: int | None = None) -> Path:
    """Write config.json and model.safetensors for `spec` under `out_dir`; return `out_dir`.

    The output is byte-identical for equal specs (no timestamps), so a checkpoint made on the device machine equals
    the one the CPU tests check.
    """
    spec.validate(max_model_len)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    layout = tensor_layout(spec)
    tensors = make_tensors(spec)
    meta = {"format": "pt", "generator": "vllm_compose.proof.tinyglm", "seed": str(spec.seed)}
    write_safetensors(out_dir / "model.safetensors", tensors, {n: d for n, (_s, d) in layout.items()}, meta)
    (out_dir / "config.json").write_text(json.dumps(config_dict(spec), indent=2, sort_keys=True) + "\n")
    (out_dir / "tinyglm_spec.json").write_text(json.dumps(asdict(spec), indent=2, sort_keys=True) + "\n")
    return out_dir


def pp_layer_partition(num_layers: int, pp_size: int) -> list[int]:
    """Decoder layers per pipeline stage, as vLLM 0.26.0 splits them without VLLM_PP_LAYER_PARTITION.

    An even split; a remainder goes one layer each to the stages before the last, starting next-to-last (the last
    stage holds the final norm, the LM head and, with MTP, the draft). Every stage must get at least one layer.
    """
    if pp_size < 1:
        raise TinyGlmError(f"pipeline size {pp_size} < 1", hint="use a pipeline-parallel size of 1 or more")
    if num_layers < pp_size:
        raise TinyGlmError(
            f"{num_layers} decoder layers cannot fill {pp_size} pipeline stages",
            hint=f"generate the tiny model with num_hidden_layers >= {pp_size}",
        )
    parts = [num_layers // pp_size] * pp_size
    for i in range(2, num_layers % pp_size + 2):
        parts[-i] += 1
    return parts


def stage_layers(num_layers: int, pp_size: int) -> list[range]:
    """The decoder-layer indices each pipeline stage runs (see `pp_layer_partition`)."""
    out, start = [], 0
    for n in pp_layer_partition(num_layers, pp_size):
        out.append(range(start, start + n))
        start += n
    return out


def prompts(spec: TinyGlmSpec, count: int = 4, lengths: tuple[int, ...] = (17, 64, 150, 40)) -> list[list[int]]:
    """Fixed prompts as token ids (the tokenizer is skipped), deterministic from the seed; ids avoid bos/eos/pad."""
    import numpy as np

    rng = np.random.Generator(np.random.PCG64([spec.seed, 0x70726F6D]))
    return [
        [int(t) for t in rng.integers(SPECIAL_TOKENS, spec.vocab_size, size=lengths[i % len(lengths)])]
        for i in range(count)
    ]
