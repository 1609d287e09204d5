"""Which compose a GPU result ran: the DSA path's source files, fingerprinted the same way on both sides.

A staged tree's version string is the release's own, so it cannot tell two composes of one release apart; the
source of the DSA modules can. A suite records `dsa_sources()` (the files the installed vLLM would import) in its
result; the status table fingerprints the same modules of the current compose branch with `source_fingerprint`
(`status.dsa_file_hashes`) and `gpu_evidence` compares the two. A leaf: the status reads it without loading the
suites that run an engine.
"""

from __future__ import annotations

import hashlib
import importlib.util
from pathlib import Path

#: the modules of the DSA path whose source a result fingerprints
DSA_MODULES = (
    "vllm.v1.attention.ops.mqa_logits_triton",
    "vllm.v1.attention.ops.triton_mla_sparse_kernel",
    "vllm.model_executor.layers.sparse_attn_indexer",
    "vllm.v1.attention.backends.mla.triton_mla_sparse",
    "vllm.v1.attention.backends.mla.xpu_mla_sparse",
)


def source_fingerprint(data: bytes) -> str:
    """A DSA module's fingerprint: the sha256 of its source, first 16 hex digits (`dsa_sources`, and the status's
    fingerprint of a compose branch, compare these)."""
    return hashlib.sha256(data).hexdigest()[:16]


def dsa_sources(modules: tuple[str, ...] = DSA_MODULES) -> dict[str, str]:
    """sha256 (first 16 hex digits) of each DSA module's source file as the interpreter would import it, without
    importing it; 'not found' where the installed vLLM has no such module."""
    out = {}
    for name in modules:
        try:
            spec = importlib.util.find_spec(name)
        except (ImportError, ValueError):
            spec = None
        origin = getattr(spec, "origin", None)
        if origin and Path(origin).is_file():
            out[name] = source_fingerprint(Path(origin).read_bytes())
        else:
            out[name] = "not found"
    return out
