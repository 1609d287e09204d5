"""Plan a pipeline-parallel layer partition for a DSA model (GLM-5.x, DeepSeek-V3.2) from its `config.json`.

What a plan is: a `VLLM_PP_LAYER_PARTITION` (the comma list vLLM's `get_pp_indices` honours) and, per stage, the
bytes vLLM will hold there and the KV-cache tokens left at a given `--gpu-memory-utilization`. The partition is
chosen for two things at once:

* **IndexCache.** GLM-5.x sets `index_topk_freq` 4 and `index_skip_topk_offset` 3: only the "full" layers (0, 1,
  2, 6, 10, ..., 74 of 78) build an indexer and compute a top-k selection; every other ("shared") layer reads the
  selection the last full layer left in `topk_indices_buffer`. Nothing carries that buffer between pipeline stages
  in stock vLLM, so a stage whose first layer is shared reads a stale selection (the compose relays it; a stage that
  starts on a full layer needs no relay, on stock or composed). `computes_topk` is the release's rule.
* **Memory.** vLLM gives every stage the KV block count of the stage with the fewest (`get_kv_cache_configs`:
  "Change the num_blocks of each rank to the smallest among all ranks"), so the pipeline holds as many tokens as its
  tightest stage. The first stage holds the embedding, the last the final norm, the LM head and, with MTP, the MTP
  layer(s), their `eh_proj`/norms and, under PP, the MTP's own embedding: the partition balances bytes, not layers.

The choice (`plan`): let B be the most KV blocks any partition gives the pipeline. Among the partitions that keep at
least `(1 - tolerance) * B` blocks (default tolerance 5%: "costs little" means costs at most 5% of the pipeline's KV
tokens), take the one with the fewest later stages starting on a shared layer, then the fewest layers on its longest
stage (pipeline throughput follows the slowest stage), then the most KV blocks. When no partition within the
tolerance starts every stage on a full layer, the plan names the stages that need the relay, and `Plan.all_full`
is the best partition that needs none, with its cost.

What vLLM counts, and so what a stage's KV memory is (v0.26.0 `gpu_worker.determine_available_memory`,
`utils/mem_utils.memory_profiling`): `ceil(total * utilization)` less the bytes allocated while loading the model
(weights and the buffers built with it), less the torch peak increase of one dummy forward of
`max_num_batched_tokens` tokens, less the non-torch increase since the worker started. The KV layout: with one
block size for all layers (`--block-size 64` for every layer), the MLA and indexer caches of a stage form one
uniform-type group (`UniformTypeKVCacheSpecs`), whose page is the sum of the layers' own pages: a full layer costs
`block * (576 * 2 + 132)` bytes per block in bf16, a shared layer `block * 576 * 2`. (The page-size padding of
series entry 0009, two MLA pages per full layer, applies only when layers have different block sizes.)

Estimates, not readings: the activation peak (`activation_bytes`, its docstring says how and how uncertain) and the
non-torch allowance (`NON_TORCH_BYTES`). `lab/device/pp_memory.py` measures vLLM's own figures on a GPU to check them.
Pure functions and dataclasses: nothing here prints, reads the environment or imports torch; `report` renders
a plan as text.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, replace
from functools import lru_cache
from pathlib import Path
from typing import Any

from ..errors import ComposeError

GIB = 1024**3
MIB = 1024**2

#: vLLM pads the vocabulary of `VocabParallelEmbedding` / `ParallelLMHead` to a multiple of this
#: (`vocab_parallel_embedding.DEFAULT_VOCAB_PADDING_SIZE`)
VOCAB_PADDING = 64
#: bytes per element of the unquantized tensors (the model dtype; GLM-5.x and DeepSeek-V3.2 serve in bf16)
BF16 = 2
#: bytes per index of `topk_indices_buffer` (int32): what the buffer holds and what the relay sends a row
TOPK_INDEX_BYTES = 4
#: what stock vLLM's `IntermediateTensors` carries from one stage to the next for these models (bf16, `hidden`
#: wide a row each); the top-k relay adds its own key beside them
INTERMEDIATE_KEYS = ("hidden_states", "residual")
#: the indexer K cache stores 128 fp8 bytes and one fp32 scale per 128 elements per token (`Indexer.k_cache`)
INDEXER_QUANT_BLOCK = 128
#: the profile run reserves the indexer's prefill K-gather workspace for `40 * max_model_len` tokens
#: (`indexer.get_max_prefill_buffer_size`) plus the radix top-k workspace (`RADIX_TOPK_WORKSPACE_SIZE`)
INDEXER_PREFILL_TOKENS_PER_LEN = 40
RADIX_TOPK_WORKSPACE = 1 * MIB
#: and a dummy logits tensor of `VLLM_SPARSE_INDEXER_MAX_LOGITS_MB` (default 512) while a full layer's indexer runs
INDEXER_LOGITS_BYTES = 512 * MIB
#: non-torch memory that appears between the worker's first snapshot and the end of the profile run (cuBLAS and
#: Triton workspaces, loaded kernels); an allowance, not a derivation (vLLM logs 0.3-0.9 GiB for its tiny test
#: models on an H200, weights included)
NON_TORCH_BYTES = int(0.5 * GIB)

#: bytes per token and layer of the MLA latent cache (kv_lora_rank + qk_rope_head_dim elements) per KV dtype
KV_DTYPE_BYTES = {"auto": BF16, "bfloat16": BF16, "bf16": BF16, "fp8": 1, "fp8_e4m3": 1}
#: DeepSeek's fp8_ds_mla layout stores a fixed 656 bytes per token (`MLAAttentionSpec.real_page_size_bytes`)
FP8_DS_MLA_BYTES = 656

#: the serving settings a plan assumes when the user names none; each is vLLM's or the Ampere recipe's
DEFAULTS: dict[str, Any] = {
    "gpu_memory_utilization": 0.9,  # vLLM's default
    "max_num_batched_tokens": 8192,  # vLLM's default for the OpenAI server on a GPU of 70 GiB or more
    "max_num_seqs": 256,  # vLLM's default for the OpenAI server
    "block_size": 64,  # the indexer kernels need it (docs/user-guide.md)
    "kv_cache_dtype": "bfloat16",  # FP8 KV needs sm_89+; Ampere serves bf16
    "bits": 16,  # unquantized
    "group_size": 128,  # one bf16 scale per 128 weights of a quantized matrix (GPTQ/AWQ/compressed-tensors int4/int8)
    "tolerance": 0.05,  # "costs little": at most 5% of the pipeline's KV tokens
}


class PlanError(ComposeError):
    """A config, a setting or a memory budget pp-plan cannot plan for."""


# --- the model's shape ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class IndexCache:
    """The IndexCache keys of the config, with vLLM's defaults where a key is absent (`index_topk_freq` 1,
    `index_skip_topk_offset` 2, no `index_topk_pattern`): with the defaults every layer computes its top-k."""

    freq: int = 1
    offset: int = 2
    #: one letter per layer, "S" = shared (skips the top-k); when set it decides and freq/offset are not used
    pattern: str | None = None


@dataclass(frozen=True)
class ModelShape:
    """What pp-plan reads from `config.json` (HF key names in the comments)."""

    source: str  # the file, for messages
    model_type: str  # model_type
    num_layers: int  # num_hidden_layers
    hidden: int  # hidden_size
    vocab: int  # vocab_size
    heads: int  # num_attention_heads
    q_lora: int | None  # q_lora_rank (None: the model projects q directly)
    kv_lora: int  # kv_lora_rank
    qk_nope: int  # qk_nope_head_dim
    qk_rope: int  # qk_rope_head_dim
    v_head: int  # v_head_dim
    intermediate: int  # intermediate_size (the dense MLP of the first layers)
    moe_intermediate: int  # moe_intermediate_size (one expert's width)
    n_routed: int | None  # n_routed_experts (None: no MoE layers)
    n_shared: int  # n_shared_experts
    experts_per_token: int  # num_experts_per_tok
    first_k_dense: int  # first_k_dense_replace
    moe_layer_freq: int  # moe_layer_freq
    routing_bias: bool  # topk_method == "noaux_tc": an fp32 e_score_correction_bias per MoE layer
    index_topk: int | None  # index_topk (None: no DSA indexer)
    index_heads: int  # index_n_heads
    index_head_dim: int  # index_head_dim
    index_cache: IndexCache
    mtp_layers: int  # num_nextn_predict_layers
    max_position: int  # max_position_embeddings
    rope_rows: int  # rows of a rotary cos/sin cache (max_position, or original_max * factor under yarn)
    tie_embeddings: bool  # tie_word_embeddings

    @property
    def vocab_padded(self) -> int:
        return -(-self.vocab // VOCAB_PADDING) * VOCAB_PADDING

    @property
    def is_dsa(self) -> bool:
        return self.index_topk is not None


def read_config(path: Path) -> ModelShape:
    """The shape of the model whose `config.json` is `path` (a file, or a folder holding config.json)."""
    path = Path(path)
    if path.is_dir():
        path = path / "config.json"
    try:
        text = path.read_text()
    except OSError as exc:
        raise PlanError(
            f"cannot read {path}: {exc.strerror}", file=str(path), hint="pass the model's config.json or its folder"
        ) from None
    try:
        cfg = json.loads(text)
    except json.JSONDecodeError as exc:
        raise PlanError(
            f"{path} is not JSON: {exc.msg} at line {exc.lineno}", file=str(path), hint="pass the model's config.json"
        ) from None
    if not isinstance(cfg, dict):
        raise PlanError(f"{path} holds a JSON {type(cfg).__name__}, not an object", file=str(path))
    return shape_from_config(cfg, str(path))


def shape_from_config(cfg: dict[str, Any], source: str = "config.json") -> ModelShape:
    """The shape from a parsed config; a missing or malformed key is a `PlanError` naming it."""
    cfg = dict(cfg.get("text_config") or {}, **cfg) if isinstance(cfg.get("text_config"), dict) else cfg

    def need(key: str, kind=int, minimum: int = 1):
        if key not in cfg or cfg[key] is None:
            raise PlanError(
                f"{source} has no {key!r}, which pp-plan needs to count the model's bytes",
                file=source,
                key=key,
                hint="pass the model's own config.json (an MLA model: DeepSeek-V3/V3.2 or GLM-5.x)",
            )
        return _checked(cfg[key], key, kind, minimum)

    def _checked(value, key: str, kind, minimum: int):
        if kind is int and (isinstance(value, bool) or not isinstance(value, int) or value < minimum):
            raise PlanError(
                f"{source}: {key!r} is {value!r}, not an integer >= {minimum}",
                file=source,
                key=key,
                hint="fix the config or pass the model's own config.json",
            )
        return value

    def opt(key: str, default, minimum: int = 0):
        value = cfg.get(key)
        return default if value is None else _checked(value, key, int, minimum)

    n_routed = opt("n_routed_experts", None, 1)
    index_topk = opt("index_topk", None, 1)
    pattern = cfg.get("index_topk_pattern")
    if pattern is not None and not (isinstance(pattern, str) and set(pattern) <= {"F", "S"}):
        raise PlanError(
            f"{source}: 'index_topk_pattern' is {pattern!r}, not a string of F (full) and S (shared)",
            file=source,
            key="index_topk_pattern",
        )
    shape = ModelShape(
        source=source,
        model_type=str(cfg.get("model_type", "?")),
        num_layers=need("num_hidden_layers"),
        hidden=need("hidden_size"),
        vocab=need("vocab_size"),
        heads=need("num_attention_heads"),
        q_lora=opt("q_lora_rank", None, 1),
        kv_lora=need("kv_lora_rank"),
        qk_nope=need("qk_nope_head_dim"),
        qk_rope=need("qk_rope_head_dim"),
        v_head=need("v_head_dim"),
        intermediate=need("intermediate_size") if opt("first_k_dense_replace", 0) or n_routed is None else 0,
        moe_intermediate=need("moe_intermediate_size") if n_routed is not None else 0,
        n_routed=n_routed,
        n_shared=opt("n_shared_experts", 0),
        experts_per_token=need("num_experts_per_tok") if n_routed is not None else 0,
        first_k_dense=opt("first_k_dense_replace", 0),
        moe_layer_freq=opt("moe_layer_freq", 1, 1),
        routing_bias=cfg.get("topk_method") == "noaux_tc",
        index_topk=index_topk,
        index_heads=need("index_n_heads") if index_topk is not None else 0,
        index_head_dim=need("index_head_dim") if index_topk is not None else 0,
        index_cache=IndexCache(
            freq=opt("index_topk_freq", 1, 1), offset=opt("index_skip_topk_offset", 2), pattern=pattern
        ),
        mtp_layers=opt("num_nextn_predict_layers", 0),
        max_position=need("max_position_embeddings"),
        rope_rows=_rope_rows(cfg, source),
        tie_embeddings=bool(cfg.get("tie_word_embeddings", False)),
    )
    if shape.index_topk is not None and shape.index_head_dim % INDEXER_QUANT_BLOCK:
        raise PlanError(
            f"{source}: 'index_head_dim' {shape.index_head_dim} is not a multiple of {INDEXER_QUANT_BLOCK} (the "
            "indexer's fp8 quantization block)",
            file=source,
            key="index_head_dim",
        )
    return shape


def _rope_rows(cfg: dict[str, Any], source: str) -> int:
    """Rows of a rotary cos/sin cache: `max_position_embeddings`, or under DeepSeek's yarn scaling
    `original_max_position_embeddings * factor` (`rotary_embedding.get_rope`)."""
    rope = cfg.get("rope_parameters") or cfg.get("rope_scaling") or {}
    kind = rope.get("rope_type") or rope.get("type") or "default"
    if kind in ("yarn", "deepseek_yarn", "deepseek_llama_scaling") and "factor" in rope:
        original = rope.get("original_max_position_embeddings")
        if not isinstance(original, int):
            raise PlanError(
                f"{source}: rope scaling {kind!r} without an integer 'original_max_position_embeddings'",
                file=source,
                key="rope_parameters",
            )
        return int(original * float(rope["factor"]))
    return int(cfg.get("max_position_embeddings") or 0)


def computes_topk(shape: ModelShape, layer: int) -> bool:
    """Whether decoder layer `layer` builds an indexer and computes its own top-k selection ("full").

    vLLM's rule (`deepseek_v2.py` `DeepseekV2MLAAttention.__init__` up to v0.28.0, `deepseek_v32/attention.py`
    `DeepseekV32Attention.__init__` from v0.29.0): without `index_topk_pattern`, a layer skips the top-k when
    `max(layer - offset + 1, 0) % freq != 0`; with a pattern, when its letter is "S" (a layer past the pattern's end
    computes). MTP layers (index >= num_hidden_layers) always build an indexer. A model without `index_topk` has
    no indexer: every layer counts as full here (there is no selection to go stale)."""
    if not shape.is_dsa or layer >= shape.num_layers:
        return True
    ic = shape.index_cache
    if ic.pattern is not None:
        return not (0 <= layer < len(ic.pattern) and ic.pattern[layer] == "S")
    return max(layer - ic.offset + 1, 0) % ic.freq == 0


def is_moe_layer(shape: ModelShape, layer: int) -> bool:
    """`DeepseekV2DecoderLayer`'s test: routed experts, past `first_k_dense_replace`, on the `moe_layer_freq` grid."""
    return shape.n_routed is not None and layer >= shape.first_k_dense and layer % shape.moe_layer_freq == 0


# --- bytes ------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Settings:
    """How the model is served: the inputs of a plan besides the config."""

    pp: int
    gpu_memory_gib: float  # the GPU's total memory as it reports it (nvidia-smi's MiB / 1024)
    mtp: int = 0  # num_speculative_tokens; 0 = no MTP
    bits: int = DEFAULTS["bits"]  # bits per weight of the quantized matrices
    mtp_bits: int | None = None  # the MTP decoder layer's bits (None: as `bits`)
    group_size: int = DEFAULTS["group_size"]
    gpu_memory_utilization: float = DEFAULTS["gpu_memory_utilization"]
    max_num_batched_tokens: int = DEFAULTS["max_num_batched_tokens"]
    max_num_seqs: int = DEFAULTS["max_num_seqs"]
    max_model_len: int | None = None  # None: the config's max_position_embeddings, as vLLM
    block_size: int = DEFAULTS["block_size"]
    kv_cache_dtype: str = DEFAULTS["kv_cache_dtype"]
    tolerance: float = DEFAULTS["tolerance"]
    non_torch_bytes: int = NON_TORCH_BYTES

    @property
    def budget_bytes(self) -> int:
        """What vLLM requests: `ceil(total_memory * gpu_memory_utilization)` (`v1/worker/utils.request_memory`)."""
        return math.ceil(self.gpu_memory_gib * GIB * self.gpu_memory_utilization)

    def validate(self, shape: ModelShape) -> None:
        """Refuse settings no plan can serve, naming the option."""

        def bad(option: str, message: str, hint: str) -> PlanError:
            return PlanError(f"{option} {message}", key=option, hint=hint)

        if self.pp < 1:
            raise bad("--pp", f"is {self.pp}; it must be at least 1", "pass the pipeline-parallel size")
        if self.pp > shape.num_layers:
            raise bad(
                "--pp",
                f"is {self.pp}, more stages than the model has layers ({shape.num_layers} in {shape.source})",
                f"use at most {shape.num_layers} stages: every stage needs a decoder layer",
            )
        if not self.gpu_memory_gib > 0:
            raise bad("--gpu-memory", f"is {self.gpu_memory_gib}; it must be positive", "e.g. 79.2 for an A100 80GB")
        if not 0 < self.gpu_memory_utilization <= 1:
            raise bad(
                "--gpu-memory-utilization", f"is {self.gpu_memory_utilization}", "pass a fraction in (0, 1], e.g. 0.9"
            )
        if self.mtp < 0:
            raise bad("--mtp", f"is {self.mtp}", "pass num_speculative_tokens, 0 for no MTP")
        if self.mtp and shape.mtp_layers < 1:
            raise bad(
                "--mtp",
                f"is {self.mtp} but {shape.source} has no MTP layer (num_nextn_predict_layers is 0 or absent)",
                "serve without MTP (--mtp 0)",
            )
        for option, bits in (("--bits", self.bits), ("--mtp-bits", self.mtp_bits)):
            if bits is not None and bits not in (2, 3, 4, 8, 16):
                raise bad(option, f"is {bits}", "pass 4, 8 or 16 (2 and 3 for the rare lower-bit quants)")
        if self.group_size < 1:
            raise bad("--group-size", f"is {self.group_size}", "pass the quantization group size, e.g. 128")
        for option, value in (
            ("--max-num-batched-tokens", self.max_num_batched_tokens),
            ("--max-num-seqs", self.max_num_seqs),
            ("--block-size", self.block_size),
        ):
            if value < 1:
                raise bad(option, f"is {value}", "pass a positive integer")
        if self.max_model_len is not None and self.max_model_len < 1:
            raise bad("--max-model-len", f"is {self.max_model_len}", "pass a positive integer")
        if self.kv_cache_dtype not in (*KV_DTYPE_BYTES, "fp8_ds_mla"):
            raise bad(
                "--kv-cache-dtype",
                f"is {self.kv_cache_dtype!r}",
                f"pass one of {', '.join([*KV_DTYPE_BYTES, 'fp8_ds_mla'])} (bfloat16 on Ampere)",
            )
        if not 0 <= self.tolerance < 1:
            raise bad("--tolerance", f"is {self.tolerance * 100:g}%", "pass a percentage in [0, 100), e.g. 5")

    def model_len(self, shape: ModelShape) -> int:
        return self.max_model_len if self.max_model_len is not None else shape.max_position


def matrix_bytes(rows: int, cols: int, bits: int, group_size: int) -> int:
    """A linear layer's weight of `rows x cols` at `bits` per weight; below 16 bits, plus one bf16 scale per
    `group_size` weights along the input (`cols`) dimension (rounded up). Zero points, packing padding and
    per-channel-only schemes are not modelled: at 4 bits and group 128 the scales are 3% of the matrix."""
    if bits >= 16:
        return rows * cols * BF16
    return math.ceil(rows * cols * bits / 8) + rows * -(-cols // group_size) * BF16


@dataclass(frozen=True)
class LayerWeights:
    """One decoder layer's resident bytes, by part (what `DeepseekV2DecoderLayer` / `DeepseekV32DecoderLayer`
    allocate). Quantized: the attention projections, the indexer's `wq_b`, the dense MLP, the routed and the shared
    experts. Unquantized (bf16): norms, the router gate (`GateLinear` has no quant_config) and its fp32 routing
    bias, the indexer's `wk_weights_proj` (quant_config=None) and its LayerNorm (fp32, weight and bias)."""

    attention: int  # MLA projections and their two RMSNorms
    mla_absorbed: int  # bf16 W_UK_T / W_UV made from a quantized kv_b_proj (a view of it when unquantized)
    indexer: int  # 0 on shared layers
    mlp: int  # dense MLP, or routed + shared experts + gate
    norms: int  # input_layernorm + post_attention_layernorm
    #: of `attention`, what tensor parallelism keeps whole on every rank: the down-projection (`fused_qkv_a_proj`
    #: or `kv_a_proj_with_mqa`, built with TP disabled) and the latent RMSNorms (the step model's TP reads)
    attention_replicated: int = 0

    @property
    def total(self) -> int:
        return self.attention + self.mla_absorbed + self.indexer + self.mlp + self.norms


@lru_cache(maxsize=4096)  # the partition search asks for every layer of every candidate stage
def layer_weights(shape: ModelShape, layer: int, bits: int, group_size: int) -> LayerWeights:
    """The resident bytes of decoder layer `layer` (an MTP layer when `layer >= num_layers`)."""
    h, heads = shape.hidden, shape.heads

    def q(rows: int, cols: int) -> int:  # a quantizable matrix: out x in
        return matrix_bytes(rows, cols, bits, group_size)

    qk_head = shape.qk_nope + shape.qk_rope
    if shape.q_lora is not None:
        down = q(shape.q_lora + shape.kv_lora + shape.qk_rope, h) + shape.q_lora * BF16  # fused_qkv_a, q_a_layernorm
        attention = down + q(heads * qk_head, shape.q_lora)  # q_b_proj
    else:
        down = q(shape.kv_lora + shape.qk_rope, h)  # kv_a_proj_with_mqa
        attention = down + q(heads * qk_head, h)  # q_proj
    down += shape.kv_lora * BF16  # kv_a_layernorm
    kv_b_elems = heads * (shape.qk_nope + shape.v_head) * shape.kv_lora
    attention += q(heads * (shape.qk_nope + shape.v_head), shape.kv_lora) + shape.kv_lora * BF16  # kv_b, kv_a_norm
    attention += q(h, heads * shape.v_head)  # o_proj
    absorbed = kv_b_elems * BF16 if bits < 16 else 0

    indexer = 0
    if shape.is_dsa and computes_topk(shape, layer):
        d, n = shape.index_head_dim, shape.index_heads
        indexer = q(n * d, shape.q_lora or h) + (d + n) * h * BF16 + 2 * d * 4  # wq_b, wk_weights_proj, k_norm

    if is_moe_layer(shape, layer):
        assert shape.n_routed is not None
        expert = q(2 * shape.moe_intermediate, h) + q(h, shape.moe_intermediate)  # gate_up + down
        mlp = shape.n_routed * expert + shape.n_routed * h * BF16  # experts, gate
        mlp += shape.n_routed * 4 if shape.routing_bias else 0  # e_score_correction_bias (fp32)
        shared = shape.moe_intermediate * shape.n_shared
        mlp += q(2 * shared, h) + q(h, shared) if shared else 0
    else:
        mlp = q(2 * shape.intermediate, h) + q(h, shape.intermediate)
    return LayerWeights(attention, absorbed, indexer, mlp, 2 * h * BF16, down)


def kv_bytes_per_token(shape: ModelShape, full: bool, kv_cache_dtype: str) -> int:
    """KV-cache bytes one token takes in one layer: the MLA latent (`kv_lora_rank + qk_rope_head_dim` elements),
    plus on a full layer the indexer's K (`index_head_dim` fp8 bytes and a 4-byte scale per 128)."""
    if kv_cache_dtype == "fp8_ds_mla":
        mla = FP8_DS_MLA_BYTES
    else:
        mla = (shape.kv_lora + shape.qk_rope) * KV_DTYPE_BYTES[kv_cache_dtype]
    indexer = 0
    if shape.is_dsa and full:
        indexer = shape.index_head_dim + shape.index_head_dim // INDEXER_QUANT_BLOCK * 4
    return mla + indexer


# --- one stage --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class MtpShare:
    """What MTP adds to the last stage."""

    layers: int  # MTP decoder layers (num_nextn_predict_layers; num_speculative_tokens reuses them)
    weights: int  # MTP decoder layer(s), eh_proj, enorm/hnorm, shared_head.norm, its top-k buffer
    embedding: int  # the MTP's own embedding: kept under PP (the target's is on the first stage), shared at PP1
    kv_bytes_per_token: int  # the MTP layers' MLA + indexer caches
    load_transient: int  # the MTP's shared_head.head (and at PP1 its embedding), loaded then replaced by the target's

    @property
    def resident(self) -> int:
        return self.weights + self.embedding


@dataclass(frozen=True)
class Stage:
    """One pipeline stage of a partition: its layers, its bytes and its KV room. Bytes are exact for the weights
    as counted by `layer_weights`; `activation` is an estimate (`activation_bytes`)."""

    index: int  # 0-based
    start: int  # first decoder layer
    end: int  # one past the last
    first_full: bool  # the first layer computes its top-k (no relay needed into this stage)
    layer_weights: int
    embedding: int  # the first stage's embed_tokens
    lm_head: int  # the last stage's LM head and final norm
    buffers: int  # top-k index buffer, rotary cos/sin caches
    mtp: MtpShare | None  # the last stage's MTP share, when serving with MTP
    activation: int  # estimated torch peak increase of the profile run
    non_torch: int
    budget: int  # ceil(total * utilization)
    kv_bytes_per_token: int  # all the stage's layers (MTP included)
    kv_block_bytes: int  # one block of every layer: the uniform-type group's page
    kv_blocks: int  # what the stage's KV memory holds (may be < 0: the stage does not fit)

    @property
    def layers(self) -> int:
        return self.end - self.start

    @property
    def weights(self) -> int:
        """What vLLM reports as "Model loading took": every byte allocated while loading, kept afterwards."""
        return (
            self.layer_weights + self.embedding + self.lm_head + self.buffers + (self.mtp.resident if self.mtp else 0)
        )

    @property
    def kv_bytes(self) -> int:
        return self.budget - self.weights - self.activation - self.non_torch

    def kv_tokens(self, block_size: int) -> int:
        return max(self.kv_blocks, 0) * block_size

    @property
    def load_peak(self) -> int:
        """Bytes held at the end of loading, before the MTP's duplicate heads are dropped."""
        return self.weights + (self.mtp.load_transient if self.mtp else 0)


def activation_bytes(shape: ModelShape, settings: Settings, start: int, end: int, last: bool, with_mtp: bool) -> int:
    """Estimated torch peak increase of vLLM's profile run (a dummy forward of `max_num_batched_tokens` tokens N,
    attention skipped, then the sampler on the last stage), counted in bf16 elements of the tensors alive at once:

    * always: hidden states, residual and the stage's input (3 x N x hidden);
    * on a stage with an indexer: the K-gather workspace the profile reserves and keeps (40 x max_model_len x
      (index_head_dim + 4) bytes, plus 1 MiB), and while a full layer runs, a 512 MiB dummy logits tensor;
    * the largest per-layer transient: MLA projections (q_c, q, the attention output, o_proj's output); the fused
      MoE's workspaces (N x top_k x (max(2 x width, hidden) + width)), router logits in fp32, the shared experts'
      intermediates; the dense MLP's (N x (3 x intermediate + hidden));
    * on the last stage: fp32 logits and probabilities for min(N, max_num_seqs) sampled rows, twice with MTP.

    Uncertainty: kernel choice changes the MoE workspaces (Triton here, as on Ampere), and allocator rounding and
    short-lived copies are not counted. Measured on an H200 (lab/notebook/validation.md), vLLM's profile of a
    GLM-5-shaped stage peaked 4.5-4.9 GB above this count at N = 8192 (3.5x): it is a floor, not a bound. The KV
    room it is subtracted from is 10-50x larger on the GPUs these models are served on."""
    n, h = settings.max_num_batched_tokens, shape.hidden
    layers = range(start, end)
    has_full = shape.is_dsa and (any(computes_topk(shape, x) for x in layers) or with_mtp)
    has_moe = any(is_moe_layer(shape, x) for x in layers) or (with_mtp and is_moe_layer(shape, shape.num_layers))
    has_dense = any(not is_moe_layer(shape, x) for x in layers)

    base = 3 * n * h * BF16
    if has_full:
        base += INDEXER_PREFILL_TOKENS_PER_LEN * settings.model_len(shape) * (shape.index_head_dim + 4)
        base += RADIX_TOPK_WORKSPACE
    heads = shape.heads
    attn = n * ((shape.q_lora or 0) + shape.kv_lora + shape.qk_rope) * BF16
    attn += n * heads * (shape.qk_nope + shape.qk_rope + shape.v_head) * BF16 + n * h * BF16
    if has_full:
        attn += n * shape.index_heads * shape.index_head_dim * BF16 + INDEXER_LOGITS_BYTES
    transients = [attn]
    if has_moe:
        width, k = shape.moe_intermediate, shape.experts_per_token
        moe = n * k * (max(2 * width, h) + width) * BF16 + n * h * BF16  # workspaces, output
        moe += n * (shape.n_routed or 0) * 4 + n * k * 8  # router logits (fp32), top-k ids and weights
        moe += n * 3 * width * shape.n_shared * BF16  # shared experts' gate_up and activation
        transients.append(moe)
    if has_dense:
        transients.append(n * (3 * shape.intermediate + h) * BF16)
    if last:
        rows = min(n, settings.max_num_seqs)
        transients.append(rows * shape.vocab_padded * 4 * 2 * (2 if with_mtp else 1))
    return base + max(transients)


def _mtp_share(shape: ModelShape, settings: Settings) -> MtpShare:
    bits = settings.mtp_bits if settings.mtp_bits is not None else settings.bits
    h, vocab = shape.hidden, shape.vocab_padded * shape.hidden * BF16
    weights = 0
    kv = 0
    for i in range(shape.mtp_layers):
        weights += layer_weights(shape, shape.num_layers + i, bits, settings.group_size).total
        weights += 2 * h * h * BF16 + 3 * h * BF16  # eh_proj (plain nn.Linear, unquantized), enorm, hnorm, head norm
        if shape.is_dsa:
            weights += settings.max_num_batched_tokens * shape.index_topk * TOPK_INDEX_BYTES  # its own top-k buffer
        kv += kv_bytes_per_token(shape, True, settings.kv_cache_dtype)
    pp1 = settings.pp == 1
    # the draft loads its own embedding and one shared_head.head per MTP layer; load_eagle_model then points the
    # heads at the target's LM head (always) and the embedding at the target's (only at PP1: the target's embedding
    # lives on the first stage under PP), and the replaced tensors are freed
    transient = shape.mtp_layers * vocab + (vocab if pp1 else 0)
    return MtpShare(shape.mtp_layers, weights, 0 if pp1 else vocab, kv, transient)


def stage(shape: ModelShape, settings: Settings, index: int, start: int, end: int) -> Stage:
    """Stage `index` of `settings.pp` holding decoder layers [start, end)."""
    first, last = index == 0, index == settings.pp - 1
    bits, group = settings.bits, settings.group_size
    h = shape.hidden
    vocab = shape.vocab_padded * h * BF16
    weights = sum(layer_weights(shape, x, bits, group).total for x in range(start, end))
    embedding = vocab if first else 0
    lm_head = 0
    if last:
        shared = shape.tie_embeddings and first  # tied and on one rank: one tensor
        lm_head = (0 if shared else vocab) + h * BF16
    mtp = _mtp_share(shape, settings) if last and settings.mtp else None
    has_indexer = shape.is_dsa and (any(computes_topk(shape, x) for x in range(start, end)) or mtp is not None)
    buffers = 0
    if shape.is_dsa:
        buffers += settings.max_num_batched_tokens * shape.index_topk * TOPK_INDEX_BYTES  # topk_indices_buffer
    buffers += shape.rope_rows * shape.qk_rope * BF16 * (2 if has_indexer else 1)  # MLA and indexer rope caches
    full = [computes_topk(shape, x) for x in range(start, end)]
    per_token = sum(kv_bytes_per_token(shape, f, settings.kv_cache_dtype) for f in full)
    per_token += mtp.kv_bytes_per_token if mtp else 0
    block_bytes = per_token * settings.block_size
    activation = activation_bytes(shape, settings, start, end, last, mtp is not None)
    partial = Stage(
        index, start, end, computes_topk(shape, start), weights, embedding, lm_head, buffers, mtp, activation,
        settings.non_torch_bytes, settings.budget_bytes, per_token, block_bytes, 0,
    )  # fmt: skip
    # floor division: a stage whose weights and activations already exceed the budget gets a negative count
    return replace(partial, kv_blocks=partial.kv_bytes // block_bytes)


# --- partitions -------------------------------------------------------------------------------------------------


def default_partition(num_layers: int, pp: int) -> list[int]:
    """vLLM's own split without `VLLM_PP_LAYER_PARTITION` (`distributed/utils.get_pp_indices`): equal parts, the
    remainder spread over the stages before the last (from the second-to-last backwards)."""
    sizes = [num_layers // pp] * pp
    for i in range(2, num_layers % pp + 2):
        sizes[-i] += 1
    return sizes


@dataclass(frozen=True)
class Partition:
    """A partition and its stages."""

    sizes: tuple[int, ...]
    stages: tuple[Stage, ...]
    block_size: int

    @property
    def env(self) -> str:
        """The value of `VLLM_PP_LAYER_PARTITION`."""
        return ",".join(map(str, self.sizes))

    @property
    def shared_starts(self) -> list[Stage]:
        """The later stages whose first layer reads a selection computed on another stage (need the relay)."""
        return [s for s in self.stages[1:] if not s.first_full]

    @property
    def kv_blocks(self) -> int:
        """The pipeline's blocks: every stage gets the smallest stage's count."""
        return min(s.kv_blocks for s in self.stages)

    @property
    def kv_tokens(self) -> int:
        return max(self.kv_blocks, 0) * self.block_size

    @property
    def tightest(self) -> Stage:
        return min(self.stages, key=lambda s: (s.kv_blocks, -s.index))


def evaluate(shape: ModelShape, settings: Settings, sizes: list[int] | tuple[int, ...]) -> Partition:
    """The stages of the partition `sizes` (layers per stage, as `VLLM_PP_LAYER_PARTITION` lists them)."""
    if len(sizes) != settings.pp or sum(sizes) != shape.num_layers or min(sizes) < 1:
        raise PlanError(
            f"partition {','.join(map(str, sizes))} does not split {shape.num_layers} layers into {settings.pp} "
            "non-empty stages",
            key="VLLM_PP_LAYER_PARTITION",
            hint=f"give {settings.pp} positive counts that sum to {shape.num_layers}",
        )
    stages, start = [], 0
    for i, n in enumerate(sizes):
        stages.append(stage(shape, settings, i, start, start + n))
        start += n
    return Partition(tuple(sizes), tuple(stages), settings.block_size)


@dataclass(frozen=True)
class Plan:
    """The chosen partition, and what it is compared with."""

    shape: ModelShape
    settings: Settings
    chosen: Partition
    default: Partition  # vLLM's split without the variable
    balanced: Partition  # the most KV blocks any partition gives (fewest shared starts among those)
    all_full: Partition | None  # the best partition starting every stage on a full layer, if `chosen` does not
    required_blocks: int  # blocks one max_model_len request needs (vLLM refuses to start below it)

    @property
    def full_layers(self) -> list[int]:
        return [x for x in range(self.shape.num_layers) if computes_topk(self.shape, x)]

    def to_json(self) -> dict[str, Any]:
        def stage_json(s: Stage) -> dict[str, Any]:
            out = {
                "stage": s.index + 1,
                "layers": [s.start, s.end - 1],
                "num_layers": s.layers,
                "first_layer": "full" if s.first_full else "shared",
                "needs_relay": s.index > 0 and not s.first_full,
                "bytes": {
                    "weights": s.weights,
                    "decoder_layers": s.layer_weights,
                    "embedding": s.embedding,
                    "lm_head_and_norm": s.lm_head,
                    "buffers": s.buffers,
                    "activation_estimate": s.activation,
                    "non_torch_allowance": s.non_torch,
                    "budget": s.budget,
                    "kv": s.kv_bytes,
                    "load_peak": s.load_peak,
                },
                "kv_bytes_per_token": s.kv_bytes_per_token,
                "kv_block_bytes": s.kv_block_bytes,
                "kv_blocks": s.kv_blocks,
                "kv_tokens": s.kv_tokens(self.settings.block_size),
            }
            if s.mtp:
                out["mtp"] = {
                    "layers": s.mtp.layers,
                    "weights": s.mtp.weights,
                    "embedding": s.mtp.embedding,
                    "kv_bytes_per_token": s.mtp.kv_bytes_per_token,
                    "load_transient": s.mtp.load_transient,
                }
            return out

        def part_json(p: Partition | None) -> dict[str, Any] | None:
            if p is None:
                return None
            return {
                "VLLM_PP_LAYER_PARTITION": p.env,
                "stage_starts": [s.start for s in p.stages],
                "shared_starts": [s.index + 1 for s in p.shared_starts],
                "kv_blocks": p.kv_blocks,
                "kv_tokens": p.kv_tokens,
                "tightest_stage": p.tightest.index + 1,
                "stages": [stage_json(s) for s in p.stages],
            }

        st = self.settings
        return {
            "model": {
                "config": self.shape.source,
                "model_type": self.shape.model_type,
                "num_layers": self.shape.num_layers,
                "full_layers": self.full_layers,
                "mtp_layers": self.shape.mtp_layers,
            },
            "settings": {
                "pp": st.pp,
                "gpu_memory_gib": st.gpu_memory_gib,
                "gpu_memory_utilization": st.gpu_memory_utilization,
                "mtp": st.mtp,
                "bits": st.bits,
                "mtp_bits": st.mtp_bits if st.mtp_bits is not None else st.bits,
                "group_size": st.group_size,
                "max_num_batched_tokens": st.max_num_batched_tokens,
                "max_num_seqs": st.max_num_seqs,
                "max_model_len": st.model_len(self.shape),
                "block_size": st.block_size,
                "kv_cache_dtype": st.kv_cache_dtype,
                "tolerance": st.tolerance,
            },
            "VLLM_PP_LAYER_PARTITION": self.chosen.env,
            "required_blocks": self.required_blocks,
            "plan": part_json(self.chosen),
            "default": part_json(self.default),
            "balanced": part_json(self.balanced),
            "all_full": part_json(self.all_full),
        }


class _Search:
    """Dynamic programmes over (stage, first layer) with each stage's blocks computed once."""

    def __init__(self, shape: ModelShape, settings: Settings) -> None:
        self.shape, self.settings = shape, settings
        self.n, self.pp = shape.num_layers, settings.pp
        #: (role, start, end) -> blocks; role 0 first, 1 middle, 2 last, 3 the only stage
        self._blocks: dict[tuple[int, int, int], int] = {}

    def blocks(self, k: int, i: int, j: int) -> int:
        role = 3 if self.pp == 1 else (0 if k == 0 else 2 if k == self.pp - 1 else 1)
        key = (role, i, j)
        if key not in self._blocks:
            index = {0: 0, 1: 1, 2: self.pp - 1, 3: 0}[role]
            self._blocks[key] = stage(self.shape, self.settings, index, i, j).kv_blocks
        return self._blocks[key]

    def ends(self, k: int, i: int, longest: int) -> range:
        """Where stage k starting at layer i may end: every later stage keeps at least one layer."""
        if k == self.pp - 1:
            return range(self.n, self.n + 1) if self.n - i <= longest else range(0)
        return range(i + 1, min(self.n - (self.pp - k - 1), i + longest) + 1)

    def most_blocks(self) -> int:
        """The most blocks any partition gives the pipeline (max over partitions of the min over stages)."""
        best: dict[int, float] = {self.n: math.inf}
        for k in reversed(range(self.pp)):
            nxt: dict[int, float] = {}
            for i in range(k, self.n - (self.pp - k) + 1):
                values = [min(self.blocks(k, i, j), best[j]) for j in self.ends(k, i, self.n) if j in best]
                if values:
                    nxt[i] = max(values)
            best = nxt
        return int(best[0])

    def fewest_shared(self, floor: int, longest: int) -> tuple[int, int, list[int]] | None:
        """Among partitions whose every stage keeps >= `floor` blocks and <= `longest` layers: the fewest later
        stages starting on a shared layer, then the most blocks, then the most even layer counts (the least sum of
        squared stage sizes: among partitions whose tightest stage is the same, spread the rest evenly). Returns
        (shared, blocks, sizes) or None."""
        # best[i] = (shared, -blocks, sum of squares, sizes) for stages k.. starting at layer i
        best: dict[int, tuple[int, float, int, list[int]]] = {self.n: (0, -math.inf, 0, [])}
        for k in reversed(range(self.pp)):
            nxt: dict[int, tuple[int, float, int, list[int]]] = {}
            for i in range(k, self.n - (self.pp - k) + 1):
                shared = 0 if k == 0 or computes_topk(self.shape, i) else 1
                for j in self.ends(k, i, longest):
                    if j not in best:
                        continue
                    b = self.blocks(k, i, j)
                    if b < floor:
                        continue
                    s, negb, sq, sizes = best[j]
                    cand = (shared + s, max(-b, negb), sq + (j - i) ** 2, [j - i, *sizes])
                    if i not in nxt or cand[:3] < nxt[i][:3]:
                        nxt[i] = cand
            best = nxt
        if 0 not in best:
            return None
        s, negb, _, sizes = best[0]
        return s, int(-negb), sizes

    def choose(self, floor: int, max_shared: int | None = None) -> list[int] | None:
        """Fewest shared starts (at most `max_shared`), then the shortest longest stage, then the most blocks."""
        unbounded = self.fewest_shared(floor, self.n)
        if unbounded is None or (max_shared is not None and unbounded[0] > max_shared):
            return None
        fewest = unbounded[0]
        # the shortest longest stage that still reaches the fewest shared starts: scan upwards from the even split
        for longest in range(-(-self.n // self.pp), self.n + 1):
            r = self.fewest_shared(floor, longest)
            if r is not None and r[0] == fewest:
                return r[2]
        return unbounded[2]


def plan(shape: ModelShape, settings: Settings) -> Plan:
    """Choose a partition (module docstring: how), or raise `PlanError` naming the stage that cannot fit."""
    settings.validate(shape)
    search = _Search(shape, settings)
    required = -(-settings.model_len(shape) // settings.block_size)
    most = search.most_blocks()
    if most < required:
        _raise_shortfall(shape, settings, search, most, required)
    balanced_sizes = search.choose(most)
    floor = max(required, math.ceil(most * (1 - settings.tolerance)))
    chosen_sizes = search.choose(floor)
    assert balanced_sizes is not None and chosen_sizes is not None  # `most` is reachable, and floor <= most
    chosen = evaluate(shape, settings, chosen_sizes)
    all_full = None
    if chosen.shared_starts:
        # outside the tolerance by construction: here KV tokens come first (no bound on the longest stage)
        best_full = search.fewest_shared(required, shape.num_layers)
        all_full = evaluate(shape, settings, best_full[2]) if best_full and best_full[0] == 0 else None
    return Plan(
        shape,
        settings,
        chosen,
        evaluate(shape, settings, default_partition(shape.num_layers, settings.pp)),
        evaluate(shape, settings, balanced_sizes),
        all_full,
        required,
    )


def _raise_shortfall(shape: ModelShape, settings: Settings, search: _Search, most: int, required: int) -> None:
    """No partition fits: name the tightest stage of the best partition and what it lacks."""
    sizes = search.choose(most) or default_partition(shape.num_layers, settings.pp)
    best = evaluate(shape, settings, sizes)
    s = best.tightest
    need = required * s.kv_block_bytes
    short = need - s.kv_bytes
    what = "its weights and activations" if s.kv_bytes < 0 else f"{required * settings.block_size:,} tokens of KV"
    raise PlanError(
        f"stage {s.index + 1} of {settings.pp} (layers {s.start}-{s.end - 1}"
        f"{' + MTP' if s.mtp else ''}) is {short / GIB:.2f} GiB short: {settings.gpu_memory_utilization:g} of "
        f"{settings.gpu_memory_gib:g} GiB is {s.budget / GIB:.2f} GiB, it holds {s.weights / GIB:.2f} GiB of "
        f"weights and an estimated {(s.activation + s.non_torch) / GIB:.2f} GiB of activations, and one request "
        f"of max_model_len {settings.model_len(shape):,} needs {need / GIB:.2f} GiB of KV (the best partition, "
        f"{best.env}, leaves {max(s.kv_bytes, 0) / GIB:.2f} GiB; {what} do not fit)",
        key="--gpu-memory",
        hint="use more stages (--pp), fewer bits per weight (--bits), a lower --max-model-len or a higher "
        "--gpu-memory-utilization",
    )
