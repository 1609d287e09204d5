"""Kernel launches derived from a release's own code on a CPU: the records the Ampere compile gate compiles.

The recorded gate (`kernel_gate`, recordings) compiles what one GPU run of one release launched. This module
derives the launches for any release tree instead: it loads vLLM's modules from the tree without importing vLLM
(`kernel_gate.ReleaseLoader`, executing Python as well as kernels), binds `vllm.platforms.current_platform` to a
fake CUDA platform of an Ampere capability (`fake_platform.FakeCudaPlatform`) before any module-level statement
runs, and calls the release's own Python (a layer's `forward` with a stub `self`, or the wrapper the layer calls) on
CPU tensors with the sizes of GLM-5.x and DeepSeek-V3.2. Every `kernel[grid](...)` those calls make goes through
Triton 3.6's own binder and specialization (a fake active driver reports the sm_8x target);
`knobs.runtime.jit_cache_hook` records the specialization and returns True, which makes Triton skip the compile and
the launch (`fake_platform.capture_launches`). The record is the one lab/device/sitecustomize writes on a GPU (module,
qualname, Triton's `specialization_data`), so `kernel_gate.run_gate` compiles either.

What is driven is the DSA path on an Ampere GPU as the release's registry chooses it (`DRIVERS`, each naming the
release code it calls): what its requests launch, and what its layers register for the start-up JIT warm-up
(v0.30.0+), which compiles before the first request and stops the engine when a compile fails. Outcomes per driver:
`ran` (its launches recorded), `not on path` (the tree lacks the module or the code the driver drives, e.g. a stock
tree without PR #38476's Triton fallbacks, or a release before the JIT warm-up: said, not failed), or a typed
`DriverError` (the release's function is missing where the registry puts it on the path, or asks for a parameter
the driver does not know). Autotuned kernels are recorded once per config the autotuner would benchmark (after its
pruning): on a GPU any of them may win, so every one must compile. Each record names the drivers that launched it,
so that a failure says whether a request or the start-up warm-up needs it.
"""

from __future__ import annotations

import ast
import contextlib
import copy
import inspect
import types
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .facts import BLOCK_SIZE, BY_CAPABILITY, CAPABILITIES, GPUS, KV_CACHE_DTYPE, LAUNCH_CONTRACT
from .fake_platform import FakeCudaPlatform, PlatformProbeError, capture_launches, record_key
from .kernel_gate import KernelGateError, ReleaseLoader

#: module of the DSA models' code, per registry target (`registry.py` maps the architecture to one of these)
REGISTRY_ARCHITECTURES = ("GlmMoeDsaForCausalLM", "DeepseekV32ForCausalLM")


@dataclass(frozen=True)
class ModelShape:
    """The sizes of a DSA model that reach a kernel's specialization (strides, constexpr sizes, head counts)."""

    name: str
    hidden_size: int
    num_attention_heads: int
    q_lora_rank: int
    kv_lora_rank: int
    qk_nope_head_dim: int
    qk_rope_head_dim: int
    v_head_dim: int
    index_n_heads: int
    index_head_dim: int
    index_topk: int
    n_routed_experts: int
    moe_intermediate_size: int
    num_experts_per_tok: int
    rms_norm_eps: float


#: GLM-5.x: zai-org/GLM-5 (GlmMoeDsaForCausalLM); hidden 6144, 64 heads, q_lora 2048, kv_lora 512, QK head 192 + rope
#: 64, V head 256, indexer 32 heads x 128, 256 experts top-8 of width 2048: the GLM-5 technical report's table
#: (as quoted at glennklockwood.com/garden/GLM-5) and NVIDIA NeMo AutoModel's GLM-5 page (kv_lora_rank=512, rope
#: head_dim=64); index_topk 2048 and rms_norm_eps 1e-5 from the model's config.json as other ports quote it.
GLM5 = ModelShape("GLM-5.x", 6144, 64, 2048, 512, 192, 64, 256, 32, 128, 2048, 256, 2048, 8, 1e-5)
#: DeepSeek-V3.2(-Exp): the DeepSeek-V3 config.json (hidden 7168, 128 heads, q_lora 1536, kv_lora 512, nope 128,
#: rope 64, v 128, 256 experts top-8 of width 2048, rms_norm_eps 1e-6) plus the V3.2 indexer (index_n_heads 64,
#: index_head_dim 128, index_topk 2048: DeepseekV32Config's defaults, e.g. in lmdeploy, as in V3.2-Exp's config.json)
DSV32 = ModelShape("DeepSeek-V3.2", 7168, 128, 1536, 512, 128, 64, 128, 64, 128, 2048, 256, 2048, 8, 1e-6)
MODELS = (GLM5, DSV32)
TP_SIZES = (1, 8)
#: MTP 0/1/2 speculative tokens -> decode rows per request (next_n)
DECODE_NEXT_N = (1, 2, 3)
#: tokens of a prefill chunk and requests of a decode batch the drivers use (alignment-relevant only: odd sizes)
PREFILL_TOKENS = 37
DECODE_REQUESTS = 3
NUM_BLOCKS = 8
#: the paged decode logits' width (the batch's longest context, as the compose's caller sizes it) of a second decode
#: call: launchers that choose their tiling by it (series entry 0041: four KV blocks a program for next_n 2 from a
#: 32,768 width) launch their long-context specialization there
LONG_DECODE_WIDTH = 131072


class DriverError(KernelGateError):
    """A driver cannot drive the release's code: its function is missing, or it takes a parameter unknown here."""


class NotOnPath(Exception):
    """Raised by a driver before it launches anything: the release lacks what it drives (said, not failed)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


# --- the release's code ------------------------------------------------------------------------------------------


class Stub(types.SimpleNamespace):
    """A stand-in `self` (or config) whose missing attribute is a `DriverError` naming it."""

    def __getattr__(self, name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        raise DriverError(
            f"release code read .{name} of a stub the driver built ({self.__dict__.get('_what', 'stub')})",
            key=name,
            hint="the release's method reads more of `self` than the driver provides: add it to the driver",
        )


@dataclass
class Release:
    """The tree being derived, its loader, and the helpers drivers use to call its code."""

    tree: Path
    capability: tuple[int, int]
    loader: ReleaseLoader
    label: str = ""

    def has(self, module: str) -> bool:
        try:
            self.loader.module_file(module)
        except KernelGateError:
            return False
        return True

    def value(self, module: str, name: str):
        try:
            return self.loader.value(module, name)
        except PlatformProbeError:
            raise
        except KernelGateError as exc:
            raise DriverError(
                f"{module}.{name} is missing from {self.label}, where the DSA path needs it",
                tag=self.label or None,
                key=name,
                hint="the release moved or renamed it: update the driver in kernel_launches.py",
            ) from exc

    def method_node(self, module: str, cls: str, name: str) -> ast.FunctionDef | None:
        """The syntax tree of method `name` of class `cls` of `module`, read from the source; None when the class
        or the method is not there."""
        body = ast.parse(self.loader.module_file(module).read_text()).body
        klass = next((n for n in body if isinstance(n, ast.ClassDef) and n.name == cls), None)
        if klass is None:
            return None
        return next((n for n in klass.body if isinstance(n, ast.FunctionDef) and n.name == name), None)

    def required_method_node(self, module: str, cls: str, name: str) -> ast.FunctionDef:
        """`method_node`, or a `DriverError` naming the method when the release lacks it."""
        fn = self.method_node(module, cls, name)
        if fn is None:
            raise DriverError(
                f"{module}.{cls}.{name} is missing from {self.label}, where the DSA path needs it",
                tag=self.label or None,
                key=f"{cls}.{name}",
                hint="the release moved or renamed it: update the driver in kernel_launches.py",
            )
        return fn

    def has_method(self, module: str, cls: str, name: str) -> bool:
        """Whether class `cls` of `module` defines method `name` (read from the source)."""
        return self.method_node(module, cls, name) is not None

    def method(self, module: str, cls: str, name: str) -> Callable:
        """Method `name` of class `cls` of `module`, defined alone in the module's namespace (the class itself may
        not load: its bases are vLLM layers the loader does not build)."""
        ns = self.loader.namespace(module)
        path = self.loader.module_file(module)
        fn = copy.deepcopy(self.required_method_node(module, cls, name))
        fn.decorator_list = []
        scratch: dict[str, Any] = {}
        exec(compile(ast.Module([fn], []), str(path), "exec"), ns, scratch)  # noqa: S102 - the release's own code
        method = scratch[name]
        method.__qualname__ = f"{cls}.{name}"
        return method

    def call(self, fn: Callable, known: dict[str, Any], *, what: str):
        """Call `fn` with the arguments among `known` it takes; a required parameter `known` lacks is an error."""
        params = inspect.signature(fn).parameters
        args = {}
        for p in params.values():
            if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
                continue
            if p.name in known:
                args[p.name] = known[p.name]
            elif p.default is p.empty:
                raise DriverError(
                    f"{what} of {self.label} takes a required parameter {p.name!r} the driver does not know",
                    tag=self.label or None,
                    key=p.name,
                    hint="read what the release's caller passes for it and add it to the driver",
                )
        return fn(**args)

    @contextlib.contextmanager
    def patched(self, module: str, **names: Any) -> Iterator[None]:
        """Bind `names` in `module`'s namespace for the block: the runtime the driver stands in for (forward
        context, vLLM config) that has no meaning on a CPU."""
        ns = self.loader.namespace(module)
        saved = {k: dict.get(ns, k, _ABSENT) for k in names}
        ns.update(names)
        try:
            yield
        finally:
            for k, v in saved.items():
                if v is _ABSENT:
                    ns.pop(k, None)
                else:
                    ns[k] = v


_ABSENT = object()


def registry_module(tree: Path, architecture: str) -> str | None:
    """The module the release's model registry maps `architecture` to (`deepseek_v2` or `vllm.models...`)."""
    # TODO(dsa_path): use src/vllm_compose/ampere/dsa_path.py's registry lookup once it offers one
    path = Path(tree) / "vllm" / "model_executor" / "models" / "registry.py"
    if not path.is_file():
        return None
    for node in ast.walk(ast.parse(path.read_text())):
        if not isinstance(node, ast.Dict):
            continue
        for k, v in zip(node.keys, node.values, strict=True):
            if isinstance(k, ast.Constant) and k.value == architecture and isinstance(v, ast.Tuple) and v.elts:
                first = v.elts[0]
                if isinstance(first, ast.Constant) and isinstance(first.value, str):
                    return first.value
    return None


# --- drivers -----------------------------------------------------------------------------------------------------


def _torch():
    import torch

    return torch


def _cases() -> Iterator[tuple[ModelShape, int]]:
    for model in MODELS:
        for tp in TP_SIZES:
            yield model, tp


def _phases() -> Iterator[tuple[str, int, int]]:
    """(phase, requests, rows per request): one prefill chunk, then decode with MTP 0/1/2."""
    yield "prefill", 1, PREFILL_TOKENS
    for next_n in DECODE_NEXT_N:
        yield f"decode next_n={next_n}", DECODE_REQUESTS, next_n


def _dsv32_attention(rel: Release) -> None:
    """`DeepseekV32Attention.forward` (v0.29.0+): launches `fused_norm_rope` and `fused_q` as the release decides
    (has_indexer, QUANTIZE_MQA from the KV dtype, PDL from the platform). The stub `self` holds the layer's weights
    and caches at the model's sizes; the sparse indexer and attention that follow (`_sparse_indexer_and_attn`) are
    driven by their own drivers, so the stub's is a no-op."""
    torch = _torch()
    mod = "vllm.models.deepseek_v32.attention"
    forward = rel.method(mod, "DeepseekV32Attention", "forward")
    # the attention module's own `is_quantized_kv_cache` (imported from torch_utils up to v0.32.0, from
    # kv_cache_interface in v0.33.0): it and the impl decide `_fp8_query`, i.e. QUANTIZE_MQA
    is_quantized = rel.value(mod, "is_quantized_kv_cache")
    bf16 = torch.bfloat16
    for model, tp in _cases():
        heads = model.num_attention_heads // tp
        qk_head = model.qk_nope_head_dim + model.qk_rope_head_dim
        for has_indexer in (True, False):  # indexer layers, and the layers that skip top-k (shared indices)
            for _phase, reqs, rows in _phases():
                t = reqs * rows
                rope_cache = torch.zeros(4096, model.qk_rope_head_dim, dtype=torch.float32)
                indexer = None
                if has_indexer:
                    k_dim = model.index_head_dim
                    indexer = Stub(
                        _what="DeepseekV32Indexer",
                        head_dim=k_dim,
                        n_head=model.index_n_heads,
                        softmax_scale=k_dim**-0.5,
                        wk_weights_proj=lambda h, k_dim=k_dim, n=model.index_n_heads: (
                            torch.zeros(h.shape[0], k_dim + n, dtype=bf16),
                        ),
                        wq_b=lambda q, k_dim=k_dim, n=model.index_n_heads: (
                            torch.zeros(q.shape[0], n * k_dim, dtype=bf16),
                        ),
                        k_norm=Stub(weight=torch.ones(k_dim), bias=torch.zeros(k_dim), eps=1e-6),
                        k_cache=Stub(
                            prefix="model.layers.0.self_attn.indexer.k_cache",
                            # v0.33.0+: DeepseekV32IndexerCache (CUDA) answers False; ROCm's aiter cache True
                            uses_shuffled_layout=False,
                            kv_cache=torch.zeros(NUM_BLOCKS, BLOCK_SIZE, k_dim + k_dim // 128 * 4, dtype=torch.uint8),
                        ),
                    )
                impl = Stub(_what="impl", prepare_for_batch=lambda md: None, supports_quant_query_input=False)
                stub = Stub(
                    _what="DeepseekV32Attention",
                    q_lora_rank=model.q_lora_rank,
                    kv_lora_rank=model.kv_lora_rank,
                    qk_rope_head_dim=model.qk_rope_head_dim,
                    qk_nope_head_dim=model.qk_nope_head_dim,
                    qk_head_dim=qk_head,
                    v_head_dim=model.v_head_dim,
                    num_local_heads=heads,
                    num_heads=heads,
                    fused_qkv_a_proj=lambda h, model=model: (
                        torch.zeros(
                            h.shape[0], model.q_lora_rank + model.kv_lora_rank + model.qk_rope_head_dim, dtype=bf16
                        ),
                    ),
                    indexer=indexer,
                    skip_topk=False,
                    layer_name="model.layers.0.self_attn.attn",
                    hisparse_cache=None,
                    impl=impl,
                    use_pcp=False,
                    q_a_layernorm=Stub(weight=torch.ones(model.q_lora_rank, dtype=bf16), variance_epsilon=1e-6),
                    kv_a_layernorm=Stub(weight=torch.ones(model.kv_lora_rank, dtype=bf16), variance_epsilon=1e-6),
                    rotary_emb=Stub(cos_sin_cache=rope_cache),
                    indexer_rope_emb=Stub(cos_sin_cache=rope_cache),
                    topk_indices_buffer=torch.zeros(t, model.index_topk, dtype=torch.int32),
                    kv_cache=torch.zeros(
                        NUM_BLOCKS, BLOCK_SIZE, model.kv_lora_rank + model.qk_rope_head_dim, dtype=bf16
                    ),
                    kv_cache_dtype=KV_CACHE_DTYPE,
                    _k_scale=torch.ones(1, dtype=torch.float32),
                    _k_scale_float=1.0,  # v0.33.0+
                    _q_scale=torch.ones(1, dtype=torch.float32),
                    _fp8_query=is_quantized(KV_CACHE_DTYPE) and impl.supports_quant_query_input,
                    _index_rope_interleave=False,
                    q_b_proj=lambda q, heads=heads, qk_head=qk_head: (
                        torch.zeros(q.shape[0], heads * qk_head, dtype=bf16),
                    ),
                    W_UK_T=torch.zeros(heads, model.qk_nope_head_dim, model.kv_lora_rank, dtype=bf16),
                    _sparse_indexer_and_attn=lambda *a, **k: None,
                    # v0.33.0+: whether fused_q prepares the MQA query; true but for a short prefill that takes
                    # dense MHA (a base-class decision on the metadata): the MQA launch is the one to compile
                    _should_prepare_mqa_query=lambda attn_metadata, cudagraph_runtime_mode: True,
                    o_proj=lambda x: (x,),
                )
                slots = torch.arange(t, dtype=torch.int64)
                ctx = Stub(
                    _what="ForwardContext",
                    slot_mapping={stub.layer_name: slots, "model.layers.0.self_attn.indexer.k_cache": slots},
                    attn_metadata=object(),
                    cudagraph_runtime_mode=None,
                )
                with rel.patched(
                    mod,
                    get_forward_context=lambda ctx=ctx: ctx,
                    get_attention_context=lambda name: (object(), None, None, None),
                ):
                    rel.call(
                        lambda positions, hidden_states, stub=stub: forward(stub, positions, hidden_states),
                        {
                            "positions": torch.arange(t, dtype=torch.int64),
                            "hidden_states": torch.zeros(t, model.hidden_size, dtype=bf16),
                        },
                        what="DeepseekV32Attention.forward",
                    )


def _dsv32_mtp_eh_norm(rel: Release) -> None:
    """`fused_eh_norm` (v0.29.0+, the MTP draft's input fusion in nvidia/mtp.py's forward), with the arguments
    that forward passes (embeds and previous hidden states of the draft's rows, the enorm/hnorm weights)."""
    torch = _torch()
    mod = _dsv32_kernels_module(rel)
    fn = rel.value(mod, "fused_eh_norm")
    for model, _tp in _cases():
        for _phase, reqs, rows in _phases():
            t = reqs * rows
            h = model.hidden_size
            known = {
                "positions": torch.arange(t, dtype=torch.int64),
                "inputs_embeds": torch.zeros(t, h, dtype=torch.bfloat16),
                "previous_hidden": torch.zeros(t, h, dtype=torch.bfloat16),
                "previous_hidden_states": torch.zeros(t, h, dtype=torch.bfloat16),
                "enorm_w": torch.ones(h, dtype=torch.bfloat16),
                "hnorm_w": torch.ones(h, dtype=torch.bfloat16),
                "eps": model.rms_norm_eps,
            }
            rel.call(fn, known, what="fused_eh_norm")


def _dsv32_kernels_module(rel: Release) -> str:
    for mod in ("vllm.models.deepseek_v32.common.kernels", "vllm.models.deepseek_v32.nvidia.kernels"):
        if rel.has(mod):
            return mod
    raise DriverError(
        f"{rel.label} maps the DSA models to vllm.models.deepseek_v32 but has neither common/kernels.py nor "
        "nvidia/kernels.py",
        tag=rel.label or None,
        hint="find where the release moved the fused kernels and update the driver",
    )


def _dsv2_indexer_q(rel: Release) -> None:
    """`Indexer.forward` of `deepseek_v2` (v0.26.0-v0.28.0): whether it launches `_fused_indexer_q_rope_quant_kernel`
    is `use_fused_indexer_q`, which the release computes in `Indexer.__init__` (the series' 0007 adds an sm_89
    gate); that expression is evaluated from the release's source with the stub's sizes. The unfused path quantizes
    with `per_token_group_quant_fp8` (a CUDA op on Ampere, not Triton) and ends in the indexer op: both stubs."""
    torch = _torch()
    mod = "vllm.model_executor.models.deepseek_v2"
    forward = rel.method(mod, "Indexer", "forward")
    use_fused = _init_expression(rel, mod, "Indexer", "use_fused_indexer_q")
    bf16 = torch.bfloat16
    for model, _tp in _cases():  # the indexer is replicated: its heads do not depend on TP
        d, n = model.index_head_dim, model.index_n_heads
        for _phase, reqs, rows in _phases():
            t = reqs * rows
            stub = Stub(
                _what="Indexer",
                n_head=n,
                head_dim=d,
                rope_dim=model.qk_rope_head_dim,
                quant_block_size=128,
                scale_fmt="ue8m0",
                softmax_scale=d**-0.5,
                n_head_scale=n**-0.5,
                is_inplace_rope=False,
                wq_b=lambda q, n=n, d=d: (torch.zeros(q.shape[0], n * d, dtype=bf16), None),
                wk_weights_proj=lambda h, n=n, d=d: (torch.zeros(h.shape[0], d + n, dtype=bf16), None),
                k_norm=lambda k: k,
                indexer_op=lambda *a: None,
            )
            stub.use_fused_indexer_q = use_fused(stub)
            rotary = Stub(
                _what="rotary_emb",
                cos_sin_cache=torch.zeros(4096, model.qk_rope_head_dim, dtype=torch.float32),
                is_neox_style=True,
            )
            rope = _Rope(rotary)

            def quant(x, group, column_major_scales=False, use_ue8m0=False):
                return x.to(torch.float8_e4m3fn), torch.ones(x.shape[0], x.shape[-1] // group)

            with rel.patched(mod, per_token_group_quant_fp8=quant):
                rel.call(
                    lambda hidden_states, qr, positions, rotary_emb, stub=stub: forward(
                        stub, hidden_states, qr, positions, rotary_emb
                    ),
                    {
                        "hidden_states": torch.zeros(t, model.hidden_size, dtype=bf16),
                        "qr": torch.zeros(t, model.q_lora_rank, dtype=bf16),
                        "positions": torch.arange(t, dtype=torch.int64),
                        "rotary_emb": rope,
                    },
                    what="Indexer.forward",
                )


class _Rope:
    """The rotary embedding the indexer calls: shape-preserving (as the release's own comment says)."""

    def __init__(self, stub: Stub) -> None:
        self.cos_sin_cache = stub.cos_sin_cache
        self.is_neox_style = stub.is_neox_style

    def __call__(self, positions, q, k=None):
        return q, k


def _init_expression(rel: Release, module: str, cls: str, attr: str) -> Callable[[Stub], Any]:
    """`self.<attr> = <expr>` of `cls.__init__` in the release, as a function of a stub `self`."""
    path = rel.loader.module_file(module)
    init = rel.method_node(module, cls, "__init__")
    for node in ast.walk(init) if init else ():
        if (
            isinstance(node, ast.Assign)
            and len(node.targets) == 1
            and isinstance(node.targets[0], ast.Attribute)
            and node.targets[0].attr == attr
        ):
            code = compile(ast.Expression(node.value), str(path), "eval")
            ns = rel.loader.namespace(module)
            return lambda stub: eval(code, ns, {"self": stub})  # noqa: S307 - the release's own expression
    return lambda stub: False  # releases without the attribute never launch the fused kernel


def _mqa_logits(rel: Release) -> None:
    """PR #38476's Triton indexer logits: `fp8_mqa_logits_triton` (prefill) and `fp8_paged_mqa_logits_triton`
    (decode, next_n = 1 + MTP tokens), with the arguments `sparse_attn_indexer` passes: fp8 Q [rows, heads, 128],
    the uint8 indexer cache [blocks, 64, 1, 132], fp32 weights, int32 ranges / context lengths / block tables."""
    torch = _torch()
    mod = "vllm.v1.attention.ops.mqa_logits_triton"
    prefill = rel.value(mod, "fp8_mqa_logits_triton")
    decode = rel.value(mod, "fp8_paged_mqa_logits_triton")
    fp8 = torch.float8_e4m3fn
    for model in MODELS:
        h, d = model.index_n_heads, model.index_head_dim
        m = n = PREFILL_TOKENS
        known = {
            "q": torch.zeros(m, h, d, dtype=fp8),
            "kv": (torch.zeros(n, d, dtype=fp8), torch.zeros(n, dtype=torch.float32)),
            "weights": torch.zeros(m, h, dtype=torch.float32),
            "cu_seqlen_ks": torch.zeros(m, dtype=torch.int32),
            "cu_seqlen_ke": torch.full((m,), n, dtype=torch.int32),
        }
        rel.call(prefill, known, what="fp8_mqa_logits_triton")
        for next_n in DECODE_NEXT_N:
            b = DECODE_REQUESTS
            for width in (NUM_BLOCKS * BLOCK_SIZE, LONG_DECODE_WIDTH):
                known = {
                    "q": torch.zeros(b, next_n, h, d, dtype=fp8),
                    "kv_cache": torch.zeros(NUM_BLOCKS, BLOCK_SIZE, 1, d + 4, dtype=torch.uint8),
                    "weights": torch.zeros(b * next_n, h, dtype=torch.float32),
                    "context_lens": torch.full((b, next_n), BLOCK_SIZE, dtype=torch.int32),
                    "block_tables": torch.zeros(b, NUM_BLOCKS, dtype=torch.int32),
                    "max_model_len": width,
                }
                rel.call(decode, known, what="fp8_paged_mqa_logits_triton")


def _indexer_decode_padding(rel: Release) -> None:
    """The indexer's ragged-decode repacking (`sparse_attn_indexer`, every release): when a decode batch mixes
    lengths (MTP, or a chunked-prefill tail shorter than 1 + MTP tokens) the FP8 path packs the fp8 Q of the decode
    tokens per request with `pack_seq_triton` before the paged logits, and unpacks the top-k indices with
    `unpack_seq_triton`. The pack call is the release's own: its source (the `pack_seq_triton(...)` calls in the
    `else` of `if q_scale is not None:`, the FP4 path being the `if`) is evaluated with the indexer's locals."""
    torch = _torch()
    mod = "vllm.model_executor.layers.sparse_attn_indexer"
    pack_calls = _fp8_pack_calls(rel, mod)
    pack = rel.value(mod, "pack_seq_triton")
    unpack = rel.value(mod, "unpack_seq_triton")
    for model in MODELS:
        h, d = model.index_n_heads, model.index_head_dim
        for next_n in DECODE_NEXT_N[1:]:  # ragged needs at least two lengths
            lens = torch.tensor([next_n - 1, next_n] * DECODE_REQUESTS, dtype=torch.int32)
            tokens = int(lens.sum())
            local = {
                "torch": torch,
                "pack_seq_triton": pack,
                "q_quant": torch.zeros(tokens, h, d, dtype=torch.float8_e4m3fn),
                "num_decode_tokens": tokens,
                "decode_lens": lens,
            }
            for call in pack_calls:
                eval(call, local)  # noqa: S307 - the release's own call expression
            packed = torch.zeros(len(lens), next_n, model.index_topk, dtype=torch.int32)
            rel.call(unpack, {"packed_tensor": packed, "lengths": lens}, what="unpack_seq_triton")


def _fp8_pack_calls(rel: Release, module: str) -> list:
    """The compiled `pack_seq_triton(...)` call expressions of the indexer's FP8 ragged-decode branch."""
    path = rel.loader.module_file(module)
    calls = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.If) and ast.unparse(node.test) == "q_scale is not None":
            for stmt in node.orelse:
                for sub in ast.walk(stmt):
                    if isinstance(sub, ast.Call) and ast.unparse(sub.func) == "pack_seq_triton":
                        calls.append(compile(ast.Expression(sub), str(path), "eval"))
    if not calls:
        raise DriverError(
            f"no pack_seq_triton call in the FP8 branch (`else` of `if q_scale is not None:`) of {module} in "
            f"{rel.label}",
            file=str(path),
            hint="read how the release packs ragged decode queries and teach _indexer_decode_padding",
        )
    return calls


def _triton_mla_sparse(rel: Release) -> None:
    """TRITON_MLA_SPARSE (PR #38476): the backend impl's own `_warmup_autotune` (every split candidate, and the
    logits warmups at block size 64) and `_forward_bf16_kv` for prefill and decode rows, with a stub impl `self`
    holding the local heads, the softmax scale, the GPU's SM count and the top-k buffer."""
    torch = _torch()
    mod = "vllm.v1.attention.backends.mla.triton_mla_sparse"
    warmup = rel.method(mod, "TritonMLASparseImpl", "_warmup_autotune")
    forward = rel.method(mod, "TritonMLASparseImpl", "_forward_bf16_kv")
    sm_count = BY_CAPABILITY.get(tuple(rel.capability), GPUS[0]).sm_count  # the A100's for a capability not listed
    cfg = Stub(_what="VllmConfig", cache_config=Stub(block_size=BLOCK_SIZE))
    dim_qk = rel.value("vllm.v1.attention.ops.triton_mla_sparse_kernel", "_DIM_QK")
    for model, tp in _cases():
        heads = model.num_attention_heads // tp
        scale = (model.qk_nope_head_dim + model.qk_rope_head_dim) ** -0.5
        for _phase, reqs, rows in _phases():
            t = reqs * rows
            stub = Stub(
                _what="TritonMLASparseImpl",
                num_heads=heads,
                softmax_scale=scale,
                _sm_count=sm_count,
                topk_indices_buffer=torch.zeros(t, model.index_topk, dtype=torch.int32),
            )
            indexer = Stub(_what="indexer", n_head=model.index_n_heads, head_dim=model.index_head_dim)
            with rel.patched(mod, get_current_vllm_config_or_none=lambda: cfg):
                warmup(stub, indexer)
            forward(
                stub,
                torch.zeros(t, heads, dim_qk, dtype=torch.bfloat16),
                torch.zeros(NUM_BLOCKS, BLOCK_SIZE, dim_qk, dtype=torch.bfloat16),
                torch.zeros(t, model.index_topk, dtype=torch.int32),
                None,
            )


def _sparse_utils(rel: Release) -> None:
    """`triton_convert_req_index_to_global_index` as the sparse-MLA backends call it (xpu/triton_mla_sparse):
    per-token request ids, the block table, the top-k indices, block size 64 and the model's top-k."""
    torch = _torch()
    fn = rel.value("vllm.v1.attention.backends.mla.sparse_utils", "triton_convert_req_index_to_global_index")
    for model in MODELS:
        for _phase, reqs, rows in _phases():
            t = reqs * rows
            known = {
                "req_id": torch.arange(t, dtype=torch.int32) // rows,
                "block_table": torch.zeros(reqs, NUM_BLOCKS, dtype=torch.int32),
                "token_indices": torch.zeros(t, model.index_topk, dtype=torch.int32),
                "BLOCK_SIZE": BLOCK_SIZE,
                "NUM_TOPK_TOKENS": model.index_topk,
            }
            rel.call(fn, known, what="triton_convert_req_index_to_global_index")


def _indexer_metadata(rel: Release) -> None:
    """The indexer metadata kernels of `backends/mla/indexer.py`: `build_prefill_chunk_metadata` for one prefill
    chunk, and `_prepare_uniform_decode_kernel`, which the metadata builder launches for uniform MTP decode
    (next_n > 1, flattened): driven by the builder's method that launches it, with a stub builder."""
    torch = _torch()
    mod = "vllm.v1.attention.backends.mla.indexer"
    build = rel.value(mod, "build_prefill_chunk_metadata")
    reqs, rows = 2, PREFILL_TOKENS
    qsl = torch.tensor([0, rows, 2 * rows], dtype=torch.int32)
    seq = torch.tensor([rows, rows], dtype=torch.int32)
    known = {
        "start_idx": 0,
        "end_idx": reqs,
        "query_start_loc": qsl,
        "query_start_loc_cpu": qsl.clone(),
        "seq_lens": seq,
        "seq_lens_cpu": seq.clone(),
        "uncompressed_seq_lens": seq,
        "compressed_seq_lens": seq,
        "compressed_seq_lens_cpu": seq.clone(),
        "block_table": torch.zeros(reqs, NUM_BLOCKS, dtype=torch.int32),
        "compress_ratio": 1,
        "num_prefills": reqs,
    }
    rel.call(build, known, what="build_prefill_chunk_metadata")
    # a Triton kernel launched by subscript up to v0.29.0, a VllmTritonJitKernel instance called from v0.30.0
    launcher = _launch_statement(rel, mod, ("_prepare_uniform_decode_kernel", "_PREPARE_UNIFORM_DECODE_KERNEL"))
    for next_n in DECODE_NEXT_N[1:]:
        b = DECODE_REQUESTS
        tokens = b * next_n
        stub = Stub(
            _what="DeepseekV32IndexerMetadataBuilder",
            decode_seq_lens_buffer=torch.zeros(64, dtype=torch.int32),
            expanded_block_table_buffer=torch.zeros(64, NUM_BLOCKS, dtype=torch.int32),
            decode_lens_buffer=torch.zeros(64, dtype=torch.int32),
        )
        launcher(
            {
                "self": stub,
                "seq_lens": torch.full((b,), BLOCK_SIZE, dtype=torch.int32),
                "block_table": torch.zeros(b, NUM_BLOCKS, dtype=torch.int32),
                "num_decode_tokens": tokens,
                "max_decode_len": next_n,
            }
        )


def _launch_statement(rel: Release, module: str, kernels: tuple[str, ...]) -> Callable[[dict[str, Any]], None]:
    """The release's own `kernel[grid](...)` (or `KERNEL(...)`) statement, found in whichever function holds it, as
    a function of its local variables: for a launch inside a method too entangled to call with a stub."""
    path = rel.loader.module_file(module)
    for node in ast.walk(ast.parse(path.read_text())):
        if not (isinstance(node, ast.Expr) and isinstance(node.value, ast.Call)):
            continue
        func = node.value.func
        func = func.value if isinstance(func, ast.Subscript) else func
        if isinstance(func, ast.Name) and func.id in kernels:
            code = compile(ast.Expression(node.value), str(path), "eval")
            ns = rel.loader.namespace(module)
            return lambda local_vars: eval(code, ns, local_vars)  # noqa: S307 - the release's own statement
    raise DriverError(
        f"no launch of {' or '.join(kernels)} in {module} of {rel.label}",
        tag=rel.label or None,
        key=kernels[0],
        hint="the release moved the launch: update the driver",
    )


def _fused_moe(rel: Release) -> None:
    """bf16 `fused_moe_kernel` through the release's `invoke_fused_moe_triton_kernel` (what `fused_experts_impl`
    calls for the two GEMMs), with the expert sizes of GLM-5.x / DeepSeek-V3.2 under TP1 and TP8 and the config the
    release's `try_get_optimal_moe_config` picks (its defaults: no tuned A100 file is read here). The routing
    (`moe_align_block_size`, a CUDA op) is replaced by its output shapes."""
    torch = _torch()
    mod = "vllm.model_executor.layers.fused_moe.fused_moe"
    invoke = rel.value(mod, "invoke_fused_moe_triton_kernel")
    get_config = rel.value(mod, "try_get_optimal_moe_config")
    bf16 = torch.bfloat16
    for model, tp in _cases():
        e, topk = model.n_routed_experts, model.num_experts_per_tok
        n_inter = model.moe_intermediate_size // tp
        for _phase, reqs, rows in _phases():
            m = reqs * rows
            for w_shape in ((e, 2 * n_inter, model.hidden_size), (e, model.hidden_size, n_inter)):
                config = rel.call(
                    get_config,
                    {
                        "w1_shape": (e, 2 * n_inter, model.hidden_size),
                        "w2_shape": (e, model.hidden_size, n_inter),
                        "top_k": topk,
                        "dtype": None,
                        "M": m,
                        "block_shape": None,
                    },
                    what="try_get_optimal_moe_config",
                )
                block_m = config["BLOCK_SIZE_M"]
                k = w_shape[2]
                a = torch.zeros(m if k == model.hidden_size else m * topk, k, dtype=bf16)
                padded = (m * topk + e * (block_m - 1) + block_m - 1) // block_m * block_m
                known = {
                    "A": a,
                    # two experts of the real width: the specialization sees N, K and the strides (an expert's
                    # stride is N*K whatever E is), never E itself; 256 experts would take 12-15 GB
                    "B": torch.empty(2, *w_shape[1:], dtype=bf16),
                    "C": torch.zeros(m, topk, w_shape[1], dtype=bf16),
                    "A_scale": None,
                    "B_scale": None,
                    "topk_weights": torch.zeros(m, topk, dtype=torch.float32),
                    "sorted_token_ids": torch.zeros(padded, dtype=torch.int32),
                    "expert_ids": torch.zeros(padded // block_m, dtype=torch.int32),
                    "num_tokens_post_padded": torch.zeros(1, dtype=torch.int32),
                    "mul_routed_weight": k != model.hidden_size,
                    "top_k": 1 if k != model.hidden_size else topk,
                    "config": config,
                    "compute_type": _tl_dtype(bf16),
                    "use_fp8_w8a8": False,
                    "use_int8_w8a8": False,
                    "use_int8_w8a16": False,
                    "use_int4_w4a16": False,
                    "per_channel_quant": False,
                    "block_shape": None,
                    "B_bias": None,
                }
                rel.call(invoke, known, what="invoke_fused_moe_triton_kernel")


def _tl_dtype(torch_dtype):
    import triton.language as tl

    return {"torch.bfloat16": tl.bfloat16, "torch.float16": tl.float16}[str(torch_dtype)]


# --- JIT warm-up -------------------------------------------------------------------------------------------------
#
# From v0.30.0 layers register their Triton kernels for a start-up compile while the model is built
# (`VllmJitKernel.register_warmup`, into the runner's `JitWarmupRegistry`); `kernel_warmup()` compiles every
# registration before serving and re-raises a failure, so a warm-up variant that does not compile for sm_80/86 stops
# the engine although no request would launch it. `enable_jit_warmup` is on by default (`--enforce-eager` turns it
# off). The drivers below run the release's own registration statements under the release's own registry, then
# compile each registration as `JitWarmupRegistry.warmup()` does: `get_warmup_keys`, then `compile_many`, which calls
# the kernel's launcher with `_warming` set and `TritonWarmupTensor` inputs, so each compile goes through Triton's
# binder and becomes a record like any launch.


def _warmup_statements(rel: Release, module: str, cls: str, method: str) -> Callable[..., None] | None:
    """The statements of `cls.method` that register JIT warm-ups (each outermost `if` whose condition reads
    `enable_jit_warmup`), as one function of the method's locals they read, or None when there is none (releases
    before v0.30.0). The function takes those locals as keyword parameters: the method's own parameters keep the
    release's defaults; a local the method assigns earlier (`vllm_config = get_current_vllm_config()`) is required,
    so a release whose registrations read a new local fails `Release.call` naming it."""
    path = rel.loader.module_file(module)
    fn = rel.required_method_node(module, cls, method)
    blocks = _warmup_blocks(fn.body)
    if not blocks:
        return None
    args = fn.args
    params = [a.arg for a in args.posonlyargs + args.args + args.kwonlyargs]
    read = {n.id for b in blocks for n in ast.walk(b) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
    local = (set(params) | _bound_names(fn.body)) & (read - _bound_names(blocks))
    positional = args.posonlyargs + args.args
    with_default = positional[len(positional) - len(args.defaults) :]
    defaults = {a.arg: d for a, d in zip(with_default, args.defaults, strict=True)}
    defaults |= {a.arg: d for a, d in zip(args.kwonlyargs, args.kw_defaults, strict=True) if d is not None}
    names = sorted(local, key=lambda n: (n in defaults, n))  # required first, as Python wants them
    signature = ast.arguments(
        posonlyargs=[],
        args=[],
        kwonlyargs=[ast.arg(n) for n in names],
        kw_defaults=[copy.deepcopy(defaults[n]) if n in defaults else None for n in names],
        defaults=[],
    )
    name = f"{cls}_{method}_jit_warmup"
    body: list[ast.stmt] = [copy.deepcopy(b) for b in blocks]
    registrations = ast.FunctionDef(name=name, args=signature, body=body, decorator_list=[])
    code = compile(ast.fix_missing_locations(ast.Module([registrations], [])), str(path), "exec")
    scratch: dict[str, Any] = {}
    exec(code, rel.loader.namespace(module), scratch)  # noqa: S102 - the release's own code
    out = scratch[name]
    out.__qualname__ = f"{cls}.{method} (its JIT warm-up registrations)"
    return out


def _warmup_blocks(body: list[ast.stmt]) -> list[ast.If]:
    """The outermost `if` statements of a function body whose condition reads `enable_jit_warmup`, in source order
    (nested functions and classes aside: they run later, if at all)."""
    blocks: list[ast.If] = []
    pending: list[ast.AST] = list(body)
    while pending:
        node = pending.pop(0)
        if isinstance(node, ast.If) and "enable_jit_warmup" in ast.unparse(node.test):
            blocks.append(node)
        elif not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
            pending.extend(ast.iter_child_nodes(node))
    return sorted(blocks, key=lambda n: n.lineno)


def _bound_names(nodes) -> set[str]:
    """The names the statements `nodes` bind: assignment targets and imports."""
    names = set()
    for node in nodes:
        for n in ast.walk(node):
            if isinstance(n, ast.Name) and not isinstance(n.ctx, ast.Load):
                names.add(n.id)
            elif isinstance(n, (ast.Import, ast.ImportFrom)):
                names |= {(a.asname or a.name).split(".")[0] for a in n.names}
    return names


@contextlib.contextmanager
def _jit_warmup_registry(rel: Release, vllm_config: Stub) -> Iterator[None]:
    """The release's `JitWarmupRegistry`, active in the block as the runner activates it around building the model
    and binding the KV cache; on leaving, every registration made is compiled as `JitWarmupRegistry.warmup()`
    compiles it at start-up (its progress bar and rank check aside: a registration without arguments gets the
    config when its `get_warmup_keys` takes `vllm_config`; then `get_warmup_keys`, then `compile_many`)."""
    registry_cls = rel.value("vllm.model_executor.warmup.jit_warmup", "JitWarmupRegistry")
    registry = registry_cls(vllm_config)
    with registry.activate():
        yield
    registrations = getattr(registry, "_registrations", None)
    if not isinstance(registrations, dict):
        raise DriverError(
            f"the JitWarmupRegistry of {rel.label} keeps no `_registrations` mapping",
            tag=rel.label or None,
            key="JitWarmupRegistry._registrations",
            hint="read how the release's JitWarmupRegistry.warmup() expands its registrations and update the driver",
        )
    for kernel, calls in registrations.items():
        for args, kwargs in calls:
            if not args and not kwargs and "vllm_config" in inspect.signature(kernel.get_warmup_keys).parameters:
                kwargs = {"vllm_config": vllm_config}
            kernel.compile_many(kernel.get_warmup_keys(*args, **kwargs))


def _warmup_config() -> Stub:
    """The part of `VllmConfig` the registrations read: JIT warm-up on, as it is by default and in every run that
    captures CUDA graphs (only `--enforce-eager` turns it off)."""
    return Stub(_what="VllmConfig", kernel_config=Stub(_what="KernelConfig", enable_jit_warmup=True))


def _indexer_jit_warmup(rel: Release) -> None:
    """`SparseAttnIndexer.__init__`'s warm-up registrations (v0.30.0+: the ragged-decode pack for the query dtype it
    chooses, and the top-k unpack), run with the arguments the DSA models' indexer constructs it with (none of
    `use_fp4_cache` & co: the release's defaults) and DCP off, then compiled as the start-up warm-up compiles them."""
    mod = "vllm.model_executor.layers.sparse_attn_indexer"
    register = _warmup_statements(rel, mod, "SparseAttnIndexer", "__init__")
    if register is None:
        raise NotOnPath("SparseAttnIndexer registers no JIT warm-up in this release (it has none before v0.30.0)")
    cfg = _warmup_config()
    dcp_size = LAUNCH_CONTRACT["dcp_world_size"][0]
    indexer = Stub(_what="SparseAttnIndexer", dcp_world_size=dcp_size, dcp_rank=0, use_pcp=False)
    with _jit_warmup_registry(rel, cfg):
        rel.call(register, {"self": indexer, "vllm_config": cfg}, what="SparseAttnIndexer.__init__'s JIT warm-up")


def _mla_jit_warmup(rel: Release) -> None:
    """`MLAAttention`'s warm-up registrations with the sparse-MLA backend an sm_8x GPU runs (TRITON_MLA_SPARSE, its
    name read from the release's backend class): those of `__init__` (metadata kernels, for the backends it lists)
    and of `bind_kv_cache` (the index conversion, for flat KV caches). They register nothing for TRITON_MLA_SPARSE in
    v0.30.0-v0.34.0; a release that adds it to their lists gets its warm-up derived here."""
    torch = _torch()
    mod = "vllm.model_executor.layers.attention.mla_attention"
    register = _warmup_statements(rel, mod, "MLAAttention", "__init__")
    if register is None:
        raise NotOnPath("MLAAttention registers no JIT warm-up in this release (it has none before v0.30.0)")
    backend_cls = rel.value("vllm.v1.attention.backends.mla.triton_mla_sparse", "TritonMLASparseBackend")
    backend = Stub(_what="attn_backend", get_name=backend_cls.get_name)
    bind = rel.method(mod, "MLAAttention", "bind_kv_cache")
    cfg = _warmup_config()
    for model, _tp in _cases():
        layer = Stub(
            _what="MLAAttention",
            attn_backend=backend,
            kv_cache_dtype=KV_CACHE_DTYPE,
            _vllm_config=cfg,
            use_pcp=False,
        )
        if rel.has_method(mod, "MLAAttention", "_uses_flat_kv_cache"):  # v0.31.0+: bind_kv_cache asks it
            uses_flat = rel.method(mod, "MLAAttention", "_uses_flat_kv_cache")
            layer._uses_flat_kv_cache = lambda layer=layer, uses_flat=uses_flat: uses_flat(layer)
        width = model.kv_lora_rank + model.qk_rope_head_dim
        with _jit_warmup_registry(rel, cfg):
            rel.call(register, {"self": layer, "vllm_config": cfg}, what="MLAAttention.__init__'s JIT warm-up")
            bind(layer, torch.zeros(NUM_BLOCKS, 1, BLOCK_SIZE, width, dtype=torch.bfloat16))


@dataclass(frozen=True)
class Driver:
    """One piece of the DSA path: the release code it calls, and the module whose presence puts it on the path."""

    name: str
    run: Callable[[Release], None]
    #: the module the driver needs; None: always on the path
    needs: str
    #: None: on every tree that has `needs`; "dsv32" / "dsv2": only where the registry maps the DSA models there
    model_code: str | None = None
    #: why a tree may lack `needs` (said in the output)
    absent_means: str = "not on this tree's path"


DRIVERS: tuple[Driver, ...] = (
    Driver(
        "deepseek_v32 attention (fused_norm_rope, fused_q)",
        _dsv32_attention,
        "vllm.models.deepseek_v32.attention",
        "dsv32",
    ),
    Driver("deepseek_v32 MTP draft (fused_eh_norm)", _dsv32_mtp_eh_norm, "vllm.models.deepseek_v32", "dsv32"),
    Driver(
        "deepseek_v2 Indexer.forward (indexer Q rope+quant)",
        _dsv2_indexer_q,
        "vllm.model_executor.models.deepseek_v2",
        "dsv2",
    ),
    Driver(
        "mqa_logits_triton (PR #38476 indexer logits)",
        _mqa_logits,
        "vllm.v1.attention.ops.mqa_logits_triton",
        absent_means="not on this tree's path (PR #38476 not in it)",
    ),
    Driver(
        "TRITON_MLA_SPARSE (PR #38476 backend)",
        _triton_mla_sparse,
        "vllm.v1.attention.backends.mla.triton_mla_sparse",
        absent_means="not on this tree's path (PR #38476 not in it)",
    ),
    Driver(
        "indexer ragged-decode Q packing", _indexer_decode_padding, "vllm.model_executor.layers.sparse_attn_indexer"
    ),
    Driver("sparse_utils index conversion", _sparse_utils, "vllm.v1.attention.backends.mla.sparse_utils"),
    Driver("indexer metadata kernels", _indexer_metadata, "vllm.v1.attention.backends.mla.indexer"),
    Driver("fused_moe (bf16 experts)", _fused_moe, "vllm.model_executor.layers.fused_moe.fused_moe"),
    Driver(
        "indexer JIT warm-up (SparseAttnIndexer register_warmup)",
        _indexer_jit_warmup,
        "vllm.model_executor.layers.sparse_attn_indexer",
    ),
    Driver(
        "MLA attention JIT warm-up (MLAAttention register_warmup)",
        _mla_jit_warmup,
        "vllm.v1.attention.backends.mla.triton_mla_sparse",
        absent_means="not on this tree's path (PR #38476 not in it: no sparse-MLA backend runs on sm_8x)",
    ),
)


@dataclass
class DriverOutcome:
    """What one driver did on one tree and capability."""

    driver: str
    status: str  # "ran" | "not on path"
    launches: int = 0
    reason: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"driver": self.driver, "status": self.status, "launches": self.launches, "reason": self.reason}


@dataclass
class Derivation:
    """The launches derived from one tree for one capability, deduplicated, and what each driver did."""

    capability: tuple[int, int]
    records: list[dict[str, Any]] = field(default_factory=list)
    outcomes: list[DriverOutcome] = field(default_factory=list)
    model_code: str | None = None


class _QuietLogger:
    """vLLM's logger (`init_logger(name)`: info, warning_once, ...) that says nothing."""

    def __getattr__(self, name: str):
        return lambda *args, **kwargs: None


def _quiet_logger(name: str) -> _QuietLogger:
    return _QuietLogger()


def dsa_model_code(tree: Path) -> str:
    """ "dsv32" when the registry maps the DSA models to `vllm.models.deepseek_v32` (v0.29.0+), else "dsv2"."""
    targets = {registry_module(tree, arch) for arch in REGISTRY_ARCHITECTURES}
    if targets == {None}:
        raise DriverError(
            f"no DSA architecture ({', '.join(REGISTRY_ARCHITECTURES)}) in the model registry of {tree}",
            file=str(Path(tree) / "vllm" / "model_executor" / "models" / "registry.py"),
            hint="pass the folder that holds vllm/ of a vLLM release tree",
        )
    return "dsv32" if any(t and t.startswith("vllm.models.deepseek_v32") for t in targets) else "dsv2"


def derive_launches(
    tree: Path, capability: tuple[int, int] = CAPABILITIES[0], label: str = "", drivers: tuple[Driver, ...] = DRIVERS
) -> Derivation:
    """Drive the DSA path of the release tree `tree` (the folder holding `vllm/`) as on a GPU of `capability`."""
    import sys

    tree = Path(tree)
    if not (tree / "vllm").is_dir():
        raise DriverError(f"{tree} holds no vllm/ package", file=str(tree), hint="pass the folder that holds vllm/")
    model_code = dsa_model_code(tree)
    loader = release_loader(tree, capability)
    rel = Release(tree, tuple(capability), loader, label or str(tree))
    sys.setrecursionlimit(max(sys.getrecursionlimit(), 5000))
    out = Derivation(tuple(capability), model_code=model_code)
    seen: dict[str, dict[str, Any]] = {}
    try:
        _drive(rel, drivers, model_code, out, seen, label)
    finally:
        loader.close()
    return out


def release_loader(tree: Path, capability: tuple[int, int]) -> ReleaseLoader:
    """A loader that executes the release's Python as on a CUDA GPU of `capability` (call `close()` after)."""
    return ReleaseLoader(
        Path(tree),
        bindings={
            ("vllm.platforms", "current_platform"): FakeCudaPlatform(capability),
            # the release's log lines (e.g. "Using default MoE config") are not ours to print
            ("vllm.logger", "init_logger"): _quiet_logger,
        },
        strict=(PlatformProbeError,),
        executes_python=True,
    )


def _drive(rel: Release, drivers, model_code: str, out: Derivation, seen: dict[str, dict], label: str) -> None:
    capability = rel.capability
    for d in drivers:
        if d.model_code is not None and d.model_code != model_code:
            out.outcomes.append(
                DriverOutcome(
                    d.name,
                    "not on path",
                    reason=f"the registry maps the DSA models to "
                    f"{'deepseek_v2' if model_code == 'dsv2' else 'vllm.models.deepseek_v32'}",
                )
            )
            continue
        if not rel.has(d.needs):
            if d.model_code is not None:
                raise DriverError(
                    f"{rel.label}: the registry puts {d.needs} on the DSA path but the tree lacks it",
                    tag=label or None,
                    key=d.needs,
                    hint="the release restructured its DSA model code: update the driver",
                )
            out.outcomes.append(DriverOutcome(d.name, "not on path", reason=d.absent_means))
            continue
        try:
            with capture_launches(capability) as records:
                d.run(rel)
        except NotOnPath as absent:
            out.outcomes.append(DriverOutcome(d.name, "not on path", reason=absent.reason))
            continue
        for rec in records:
            k = record_key(rec)
            if k not in seen:
                seen[k] = rec
                out.records.append(rec)
            # which drivers launched it: a failure names them (a start-up warm-up, not a request, may be the one)
            drivers_of = seen[k].setdefault("drivers", [])
            if d.name not in drivers_of:
                drivers_of.append(d.name)
        out.outcomes.append(DriverOutcome(d.name, "ran", launches=len(records)))
