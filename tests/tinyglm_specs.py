"""The tiny GLM-DSA checkpoint specs the tests write (`proof.tinyglm`): small, and the cycle model."""

from __future__ import annotations

from vllm_compose.proof.tinyglm import TinyGlmSpec

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

#: the cycle model (greedy decoding and MTP drafts designed in advance) at the small widths
CYCLE = TinyGlmSpec(**{**SMALL.__dict__, "weights": "cycle", "vocab_size": 64, "hidden_size": 64})
