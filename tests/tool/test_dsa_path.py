"""The DSA path analysis (ampere/dsa_path.py) on synthetic look-alike vLLM trees, and on real releases (sdist).

A look-alike tree is a dict of files: `BASE` is a stock release in miniature (registry, a CUDA/ROCm package
`__init__`, the MTP rewrite, the CUDA backend priorities, an indexer with a DeepGEMM call, a fused kernel converting
to fp8e4nv); each test writes it with the changes a compose would make and checks what the analysis says.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
from release_trees import release_tree

from vllm_compose.ampere import dsa_path
from vllm_compose.ampere.dsa_path import Handling
from vllm_compose.status import write_marked_section
from vllm_compose.trees import DirTree

BASE = {
    "vllm/model_executor/models/registry.py": """
        _TEXT_GENERATION_MODELS = {
            "DeepseekV32ForCausalLM": ("vllm.models.dsa", "DeepseekV32ForCausalLM"),
            "GlmMoeDsaForCausalLM": ("vllm.models.dsa", "GlmMoeDsaForCausalLM"),
            "DeepseekV3ForCausalLM": ("deepseek_v2", "DeepseekV3ForCausalLM"),
        }
        _SPECULATIVE_DECODING_MODELS = {
            "DeepSeekMTPModel": ("deepseek_mtp", "DeepSeekMTP"),
            "DeepseekV32MTPModel": ("vllm.models.dsa", "DeepseekV32MTP"),
        }
        _VLLM_MODELS = {**_TEXT_GENERATION_MODELS, **_SPECULATIVE_DECODING_MODELS}
    """,
    "vllm/model_executor/models/deepseek_v2.py": """
        class DeepseekV3ForCausalLM:
            pass
        class GlmMoeDsaForCausalLM(DeepseekV3ForCausalLM):
            pass
    """,
    "vllm/model_executor/models/deepseek_mtp.py": """
        from vllm.model_executor.models.interfaces import SupportsPP
        class DeepSeekMTP(SupportsPP):
            pass
    """,
    "vllm/model_executor/models/interfaces.py": "class SupportsPP:\n    pass\n",
    "vllm/models/dsa/__init__.py": """
        from vllm.platforms import current_platform
        if current_platform.is_cuda():
            from .nvidia.model import DeepseekV32ForCausalLM
            from .nvidia.model import DeepseekV32ForCausalLM as GlmMoeDsaForCausalLM
            from .nvidia.mtp import DeepseekV32MTP
        elif current_platform.is_rocm():
            from .amd.model import DeepseekV32ForCausalLM, GlmMoeDsaForCausalLM
            from .amd.mtp import DeepseekV32MTP
        else:
            from vllm.model_executor.models.deepseek_v2 import DeepseekV3ForCausalLM as DeepseekV32ForCausalLM
            from vllm.model_executor.models.deepseek_v2 import GlmMoeDsaForCausalLM
            from vllm.model_executor.models.deepseek_mtp import DeepSeekMTP as DeepseekV32MTP
    """,
    "vllm/models/dsa/nvidia/model.py": """
        from vllm.models.deepseek_v32.common.kernels import fused_q
        from vllm.model_executor.layers.sparse_attn_indexer import sparse_attn_indexer
        class DeepseekV32ForCausalLM:
            def forward(self, x):
                return sparse_attn_indexer(fused_q(x))
    """,
    "vllm/models/dsa/nvidia/mtp.py": """
        from torch import nn
        from .model import DeepseekV32ForCausalLM
        class DeepseekV32MTP(nn.Module):
            pass
    """,
    "vllm/models/dsa/amd/model.py": "class DeepseekV32ForCausalLM:\n    pass\nGlmMoeDsaForCausalLM = DeepseekV32ForCausalLM\n",
    "vllm/models/dsa/amd/mtp.py": "class DeepseekV32MTP:\n    pass\n",
    "vllm/config/speculative.py": """
        class SpeculativeConfig:
            @staticmethod
            def hf_config_override(hf_config):
                use_v32_mtp = hf_config.model_type in ("deepseek_v32", "glm_moe_dsa")
                if hf_config.model_type in ("deepseek_v3", "deepseek_v32", "glm_moe_dsa"):
                    hf_config.model_type = "deepseek_mtp"
                if hf_config.model_type == "deepseek_mtp":
                    hf_config.update(
                        {"architectures": ["DeepseekV32MTPModel" if use_v32_mtp else "DeepSeekMTPModel"]}
                    )
                return hf_config
    """,
    "vllm/platforms/cuda.py": """
        def _get_backend_priorities(use_mla, device_capability):
            if use_mla:
                if device_capability.major == 10:
                    return [AttentionBackendEnum.FLASHMLA_SPARSE]
                else:
                    return [AttentionBackendEnum.TRITON_MLA, AttentionBackendEnum.FLASHMLA_SPARSE]
            return [AttentionBackendEnum.FLASH_ATTN]
    """,
    "vllm/v1/attention/backends/registry.py": """
        class AttentionBackendEnum:
            FLASHMLA_SPARSE = "vllm.v1.attention.backends.mla.flashmla_sparse.FlashMLASparseBackend"
            TRITON_MLA_SPARSE = "vllm.v1.attention.backends.mla.triton_mla_sparse.TritonMLASparseBackend"
    """,
    "vllm/v1/attention/backends/mla/flashmla_sparse.py": """
        from vllm.v1.attention.ops.flashmla import flash_mla_sparse_fwd
        class FlashMLASparseBackend:
            @classmethod
            def supports_compute_capability(cls, capability):
                return capability.major in [9, 10]
            def forward(self, q):
                return flash_mla_sparse_fwd(q)
    """,
    "vllm/model_executor/layers/sparse_attn_indexer.py": """
        from vllm.platforms import current_platform
        from vllm.utils.deep_gemm import fp8_mqa_logits, has_deep_gemm
        def sparse_attn_indexer(q):
            if current_platform.is_xpu():
                return torch.ops.vllm.xpu_fp8_mqa_logits(q)
            return fp8_mqa_logits(q)
    """,
    "vllm/models/deepseek_v32/common/kernels.py": """
        from vllm.triton_utils import tl, triton

        @triton.jit
        def _quant(x):
            return x.to(tl.float8e4nv)

        @triton.jit
        def _fused_q_kernel(x_ptr, QUANTIZE_MQA: tl.constexpr, HAS_INDEXER: tl.constexpr):
            x = tl.load(x_ptr)
            if QUANTIZE_MQA:
                tl.store(x_ptr, x.to(tl.float8e4nv))
            if HAS_INDEXER:
                tl.store(x_ptr, _quant(x))

        def fused_q(x):
            _fused_q_kernel[(1,)](x, QUANTIZE_MQA=False, HAS_INDEXER=True)
            return x
    """,
}

#: what the compose changes in BASE: the indexer's DeepGEMM call behind is_deep_gemm_supported() with PR #38476's
#: Triton fallback, and TRITON_MLA_SPARSE on the 8.x list
COMPOSE = {
    "vllm/model_executor/layers/sparse_attn_indexer.py": """
        from vllm.platforms import current_platform
        from vllm.utils.deep_gemm import fp8_mqa_logits, is_deep_gemm_supported
        from vllm.v1.attention.ops.mqa_logits_triton import fp8_mqa_logits_triton
        def sparse_attn_indexer(q):
            use_deep_gemm = is_deep_gemm_supported()
            if use_deep_gemm:
                return fp8_mqa_logits(q)
            return fp8_mqa_logits_triton(q)
    """,
    "vllm/v1/attention/ops/mqa_logits_triton.py": "def fp8_mqa_logits_triton(q):\n    return q\n",
    "vllm/platforms/cuda.py": BASE["vllm/platforms/cuda.py"].replace(
        "AttentionBackendEnum.FLASHMLA_SPARSE]\n            return",
        "AttentionBackendEnum.FLASHMLA_SPARSE, AttentionBackendEnum.TRITON_MLA_SPARSE]\n            return",
    ),
    "vllm/v1/attention/backends/mla/triton_mla_sparse.py": """
        class TritonMLASparseBackend:
            @classmethod
            def supports_compute_capability(cls, capability):
                return True
    """,
    "vllm/models/dsa/nvidia/mtp.py": """
        from torch import nn
        from vllm.model_executor.models.interfaces import SupportsPP
        from .model import DeepseekV32ForCausalLM
        class DeepseekV32MTP(nn.Module, SupportsPP):
            pass
    """,
}

#: the series' SOFTWARE_E4M3 fix in miniature: the hardware fp8 stores only where SOFTWARE_E4M3 is false
E4M3 = {
    "vllm/models/deepseek_v32/common/kernels.py": """
        from vllm.models.deepseek_v32.common.e4m3 import SOFTWARE_E4M3, e4m3fn_bits
        from vllm.triton_utils import tl, triton

        @triton.jit
        def _quant(x):
            if SOFTWARE_E4M3:
                return e4m3fn_bits(x)
            else:
                return x.to(tl.float8e4nv)

        @triton.jit
        def _fused_q_kernel(x_ptr, QUANTIZE_MQA: tl.constexpr, HAS_INDEXER: tl.constexpr):
            x = tl.load(x_ptr)
            if QUANTIZE_MQA:
                tl.store(x_ptr, x.to(tl.float8e4nv))
            if HAS_INDEXER:
                tl.store(x_ptr, _quant(x))

        def fused_q(x):
            _fused_q_kernel[(1,)](x, QUANTIZE_MQA=False, HAS_INDEXER=True)
            return x
    """,
}


def write_tree(root: Path, *layers: dict[str, str]) -> DirTree:
    """Write BASE and then each layer (later files replace earlier ones) under `root`."""
    files: dict[str, str] = {}
    for layer in (BASE, *layers):
        files.update(layer)
    for path, text in files.items():
        p = root / path
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(textwrap.dedent(text).lstrip("\n"))
    return DirTree(root)


def by_function(path: dsa_path.AmperePath) -> dict[str, dsa_path.ClassifiedBlocker]:
    return {c.blocker.function: c for c in path.classified}


def test_registry_resolves_relative_and_absolute_names(tmp_path):
    entries = dsa_path.registry_entries(write_tree(tmp_path))
    assert entries["DeepseekV3ForCausalLM"] == ("vllm.model_executor.models.deepseek_v2", "DeepseekV3ForCausalLM")
    assert entries["GlmMoeDsaForCausalLM"] == ("vllm.models.dsa", "GlmMoeDsaForCausalLM")


def test_package_init_resolves_along_the_cuda_branch(tmp_path):
    classes = {c.arch: c for c in dsa_path.dsa_model_classes(write_tree(tmp_path))}
    glm = classes["GlmMoeDsaForCausalLM"]
    assert (glm.path, glm.cls) == ("vllm/models/dsa/nvidia/model.py", "DeepseekV32ForCausalLM")
    assert "as GlmMoeDsaForCausalLM" in glm.via[0]
    assert classes["DeepseekV32ForCausalLM"].module == "vllm.models.dsa.nvidia.model"


def test_mtp_draft_condition_class_and_supports_pp(tmp_path):
    stock = {d.model_type: d for d in dsa_path.mtp_drafts(write_tree(tmp_path / "s"))}
    composed = {d.model_type: d for d in dsa_path.mtp_drafts(write_tree(tmp_path / "c", COMPOSE))}
    glm = stock["glm_moe_dsa"]
    assert glm.arch == "DeepseekV32MTPModel"
    assert glm.condition == 'use_v32_mtp = hf_config.model_type in ("deepseek_v32", "glm_moe_dsa")'
    assert (glm.serving.path, glm.serving.cls) == ("vllm/models/dsa/nvidia/mtp.py", "DeepseekV32MTP")
    assert not glm.serving.supports_pp
    assert composed["glm_moe_dsa"].serving.supports_pp and composed["deepseek_v32"].serving.supports_pp


def test_mtp_draft_without_condition(tmp_path):
    plain = {
        "vllm/config/speculative.py": BASE["vllm/config/speculative.py"].replace(
            '"DeepseekV32MTPModel" if use_v32_mtp else "DeepSeekMTPModel"', '"DeepSeekMTPModel"'
        )
    }
    (draft, *_) = dsa_path.mtp_drafts(write_tree(tmp_path, plain))
    assert (draft.arch, draft.condition, draft.serving.cls) == ("DeepSeekMTPModel", None, "DeepSeekMTP")
    assert draft.serving.supports_pp  # through its base


def test_sparse_backends_for_8x(tmp_path):
    stock = dsa_path.sparse_backends(write_tree(tmp_path / "s"))
    composed = dsa_path.sparse_backends(write_tree(tmp_path / "c", COMPOSE))
    assert [(b.name, b.admits_ampere) for b in stock] == [("FLASHMLA_SPARSE", False)]
    assert [(b.name, b.admits_ampere) for b in composed] == [("FLASHMLA_SPARSE", False), ("TRITON_MLA_SPARSE", True)]


def test_blockers_of_the_stock_tree_unguarded(tmp_path):
    tree = write_tree(tmp_path)
    path = dsa_path.tree_path(tree)
    found = {(b.kind, b.function): b for b in path.blockers}
    # the fused kernel: one use pruned (QUANTIZE_MQA), one live through its helper
    kernel = found[("triton", "_fused_q_kernel")]
    assert {(u.via, u.pruned is None) for u in kernel.uses} == {(None, False), ("_quant", True)}
    assert found[("triton", "_quant")].called_from == ("_fused_q_kernel",)
    assert found[("deep_gemm", "sparse_attn_indexer")].guard == "unguarded"
    assert ("backend", "_get_backend_priorities") in found
    # the XPU op is off CUDA, the FlashMLA backend rejects 8.x: neither is on the path
    assert not any(b.kind in ("torch_op", "flash_mla") for b in path.blockers)
    assert "vllm/v1/attention/backends/mla/flashmla_sparse.py" not in path.modules


def test_compose_vs_stock_classification(tmp_path):
    stock = write_tree(tmp_path / "s")
    got = by_function(dsa_path.ampere_path(write_tree(tmp_path / "c", COMPOSE), stock, "v0"))
    assert got["sparse_attn_indexer"].handling is Handling.DEEP_GEMM_FALLBACK
    assert "is_deep_gemm_supported()" in got["sparse_attn_indexer"].blocker.guard
    assert got["_get_backend_priorities"].handling is Handling.REMOVED_BY_COMPOSE
    assert "TRITON_MLA_SPARSE" in got["_get_backend_priorities"].detail
    # the compose has not touched the kernel: still not handled, the live use named
    assert got["_fused_q_kernel"].handling is Handling.NOT_HANDLED
    assert "in _quant" in got["_fused_q_kernel"].detail
    assert got["_quant"].handling is Handling.NOT_HANDLED


def test_software_e4m3_branch_is_handled(tmp_path):
    stock = write_tree(tmp_path / "s")
    got = by_function(dsa_path.ampere_path(write_tree(tmp_path / "c", COMPOSE, E4M3), stock, "v0"))
    assert got["_quant"].handling is Handling.SOFTWARE_E4M3
    assert got["_fused_q_kernel"].handling is Handling.SOFTWARE_E4M3
    assert "QUANTIZE_MQA" in got["_fused_q_kernel"].detail  # the other use: pruned by the bf16 KV cache


GATED = {
    "vllm/model_executor/layers/sparse_attn_indexer.py": """
        from vllm.platforms import current_platform
        from vllm.utils.deep_gemm import fp8_mqa_logits
        def sparse_attn_indexer(q):
            if current_platform.has_device_capability(90):
                return fp8_mqa_logits(q)
            return q
    """,
}


def test_guard_added_by_the_compose_and_guard_upstream(tmp_path):
    stock = write_tree(tmp_path / "s")
    gated = write_tree(tmp_path / "c", GATED)
    added = by_function(dsa_path.ampere_path(gated, stock, "v0"))["sparse_attn_indexer"]
    assert added.handling is Handling.GATED_BY_COMPOSE
    assert added.blocker.guard == "current_platform.has_device_capability(90)"
    upstream = by_function(dsa_path.ampere_path(gated, gated, "v0"))["sparse_attn_indexer"]
    assert upstream.handling is Handling.GATED_UPSTREAM


def test_a_guard_that_lets_sm8x_through_is_not_handled(tmp_path):
    weak = {
        "vllm/model_executor/layers/sparse_attn_indexer.py": GATED[
            "vllm/model_executor/layers/sparse_attn_indexer.py"
        ].replace("current_platform.has_device_capability(90)", "current_platform.has_device_capability(80)")
    }
    got = by_function(dsa_path.ampere_path(write_tree(tmp_path / "c", weak), write_tree(tmp_path / "s"), "v0"))
    assert got["sparse_attn_indexer"].handling is Handling.NOT_HANDLED


def test_undecidable_arch_guard_is_unclassified(tmp_path):
    odd = {
        "vllm/model_executor/layers/sparse_attn_indexer.py": GATED[
            "vllm/model_executor/layers/sparse_attn_indexer.py"
        ].replace("current_platform.has_device_capability(90)", "current_platform.get_device_capability() > limit")
    }
    got = by_function(dsa_path.ampere_path(write_tree(tmp_path / "c", odd), write_tree(tmp_path / "s"), "v0"))
    assert got["sparse_attn_indexer"].handling is Handling.UNCLASSIFIED


def test_render_and_write_marked_section(tmp_path):
    path = dsa_path.ampere_path(write_tree(tmp_path / "c", COMPOSE), write_tree(tmp_path / "s"), "v0.0.0")
    text = dsa_path.render_ampere_path([path])
    assert text.splitlines()[2].startswith("| v0.0.0 | `vllm.models.dsa.nvidia.model.DeepseekV32ForCausalLM` |")
    assert "| **no** → yes |" in text
    doc = tmp_path / "ampere-path.md"
    doc.write_text("# intro\n\nhand-written\n")
    write_marked_section(doc, text, dsa_path.BEGIN, dsa_path.END)
    write_marked_section(doc, text, dsa_path.BEGIN, dsa_path.END)
    written = doc.read_text()
    assert written.startswith("# intro\n\nhand-written\n") and written.count(dsa_path.BEGIN) == 1


# ------------------------------------------------------------------------------------------- real releases (sdist)


@pytest.fixture(scope="module")
def releases(tmp_path_factory):
    """Stock trees of the releases where the DSA path moved."""
    return {tag: DirTree(release_tree(tmp_path_factory, tag)) for tag in ("v0.26.0", "v0.29.0", "v0.30.0", "v0.33.0")}


@pytest.mark.sdist
def test_real_serving_classes(releases):
    v26 = {c.arch: c for c in dsa_path.dsa_model_classes(releases["v0.26.0"])}
    assert v26["GlmMoeDsaForCausalLM"].module == "vllm.model_executor.models.deepseek_v2"
    assert v26["DeepseekV32ForCausalLM"].cls == "DeepseekV3ForCausalLM"
    for tag in ("v0.29.0", "v0.30.0", "v0.33.0"):
        classes = dsa_path.dsa_model_classes(releases[tag])
        assert {(c.module, c.cls) for c in classes} == {
            ("vllm.models.deepseek_v32.nvidia.model", "DeepseekV32ForCausalLM")
        }, tag


@pytest.mark.sdist
def test_real_mtp_drafts_supports_pp(releases):
    for tag, pp in (("v0.29.0", False), ("v0.30.0", True)):
        (draft, *_) = dsa_path.mtp_drafts(releases[tag])
        assert (draft.arch, draft.serving.module, draft.serving.cls) == (
            "DeepseekV32MTPModel",
            "vllm.models.deepseek_v32.nvidia.mtp",
            "DeepseekV32MTP",
        )
        assert draft.condition.startswith("use_v32_mtp = ")
        assert draft.serving.supports_pp is pp, tag


@pytest.mark.sdist
def test_real_v0300_fused_kernels_are_fp8e4nv_blockers(releases):
    path = dsa_path.tree_path(releases["v0.30.0"])
    triton = {b.function: b for b in path.blockers if b.kind == "triton" and b.path.endswith("common/kernels.py")}
    for name in ("_fused_q_kernel", "_fused_norm_rope_kernel"):
        assert "fp8e4nv" in triton[name].what
        assert any(u.pruned is None for u in triton[name].uses), name  # a live use on sm_8x
    # the MQA query pack after `if not QUANTIZE_MQA: return` (in `if pid == 2:`): compiled, so live, on sm_8x
    assert [u.line for u in triton["_fused_q_kernel"].uses if u.pruned is None and u.via is None] == [748]
    assert any(b.kind == "backend" for b in path.blockers)  # stock: no sparse-MLA backend admits sm_8x


#: the series' form of the fix: a jit helper in another module takes the native dtype and branches on SOFTWARE_E4M3
E4M3_HELPER = {
    "vllm/models/deepseek_v32/common/e4m3.py": """
        from vllm.triton_utils import tl, triton
        SOFTWARE_E4M3 = tl.constexpr(True)

        @triton.jit
        def to_e4m3fn(x, NATIVE_DTYPE: tl.constexpr):
            if SOFTWARE_E4M3:
                return x.to(tl.uint8, bitcast=True)
            else:
                return x.to(NATIVE_DTYPE)
    """,
    "vllm/models/deepseek_v32/common/kernels.py": E4M3["vllm/models/deepseek_v32/common/kernels.py"]
    .replace("from vllm.models.deepseek_v32.common.e4m3 import SOFTWARE_E4M3, e4m3fn_bits", "")
    .replace(
        "from vllm.triton_utils import tl, triton",
        "from vllm.models.deepseek_v32.common.e4m3 import to_e4m3fn\n        from vllm.triton_utils import tl, triton",
    )
    .replace(
        """if SOFTWARE_E4M3:
                return e4m3fn_bits(x)
            else:
                return x.to(tl.float8e4nv)""",
        "return to_e4m3fn(x, tl.float8e4nv)",
    ),
}


def test_fp8_dtype_passed_to_a_helper_counts_where_the_helper_converts(tmp_path):
    stock = write_tree(tmp_path / "s")
    got = by_function(dsa_path.ampere_path(write_tree(tmp_path / "c", COMPOSE, E4M3_HELPER), stock, "v0"))
    assert "to_e4m3fn(x, tl.float8e4nv)" in (tmp_path / "c/vllm/models/deepseek_v32/common/kernels.py").read_text()
    assert got["_quant"].handling is Handling.SOFTWARE_E4M3
    assert {u.via for u in got["_quant"].blocker.uses} == {"to_e4m3fn"}
    assert "to_e4m3fn" not in got  # the helper alone names no fp8 dtype: its callers carry the use


#: the indexer's DCP merge in miniature (v0.33.0's `_merge_dcp_topk_global` and its CuTeDSL warm-up): CuTeDSL calls
#: after an early return of their own function on the DCP size, and behind `self.dcp_world_size > 1`
DCP = {
    "vllm/model_executor/layers/sparse_attn_indexer.py": """
        from vllm.platforms import current_platform
        from vllm.utils.deep_gemm import fp8_mqa_logits, is_deep_gemm_supported
        from vllm.v1.attention.ops.mqa_logits_triton import fp8_mqa_logits_triton

        def _merge_dcp_topk_global(logits, topk_indices, dcp_world_size):
            \"\"\"Merge each DCP rank's local top-K into the global top-K.\"\"\"
            if dcp_world_size <= 1:
                return
            from vllm.model_executor.kernels.dsa.dcp_indexer_cutedsl import pack_dcp_topk_candidates_cutedsl
            pack_dcp_topk_candidates_cutedsl(logits, topk_indices)

        class SparseAttnIndexer:
            def __init__(self, parallel_config):
                self.dcp_world_size = parallel_config.decode_context_parallel_size
                if self.dcp_world_size > 1 and current_platform.is_cuda():
                    from vllm.model_executor.kernels.dsa.dcp_indexer_cutedsl import _PACK_DCP_KERNEL
                    _PACK_DCP_KERNEL.register_warmup()

        def sparse_attn_indexer(q, dcp_world_size=1):
            logits = fp8_mqa_logits(q) if is_deep_gemm_supported() else fp8_mqa_logits_triton(q)
            _merge_dcp_topk_global(logits, q, dcp_world_size)
            return logits
    """,
}


def test_early_return_of_the_enclosing_function_on_a_contract_value_is_off(tmp_path):
    stock = write_tree(tmp_path / "s", DCP)
    path = dsa_path.ampere_path(write_tree(tmp_path / "c", COMPOSE, DCP), stock, "v0")
    got = by_function(path)
    merge = got["_merge_dcp_topk_global"]
    assert merge.blocker.kind == "cutedsl" and merge.blocker.reach == "off-contract"
    assert merge.handling is Handling.OFF_BY_CONTRACT
    assert merge.blocker.guard == (
        "decode context parallel off (DCP size 1, the Ampere launch contract) (`dcp_world_size <= 1` returns early)"
    )
    warmup = got["SparseAttnIndexer.__init__"]  # the warm-up behind `self.dcp_world_size > 1`, set from the config
    assert warmup.blocker.what == "_PACK_DCP_KERNEL.register_warmup"
    assert warmup.handling is Handling.OFF_BY_CONTRACT
    assert warmup.blocker.guard.startswith("decode context parallel off (DCP size 1, the Ampere launch contract): ")
    assert "self.dcp_world_size = parallel_config.decode_context_parallel_size" in warmup.blocker.guard
    # off whatever the compose does: counted with the release's own guards, never as the compose's
    assert not Handling.OFF_BY_CONTRACT.by_compose and Handling.OFF_BY_CONTRACT.handled
    assert not [c for c in path.classified if c.blocker.kind == "cutedsl" and not c.handling.handled]


def test_early_return_on_a_value_the_analysis_cannot_decide_stays_flagged(tmp_path):
    undecided = {
        path: text.replace("dcp_world_size <= 1", "num_ranks <= 1").replace(
            "(logits, topk_indices, dcp_world_size)", "(logits, topk_indices, num_ranks)"
        )
        for path, text in DCP.items()
    }
    assert "num_ranks <= 1" in undecided["vllm/model_executor/layers/sparse_attn_indexer.py"]
    stock = write_tree(tmp_path / "s", undecided)
    got = by_function(dsa_path.ampere_path(write_tree(tmp_path / "c", COMPOSE, undecided), stock, "v0"))
    merge = got["_merge_dcp_topk_global"]
    assert merge.handling is Handling.NOT_HANDLED
    assert merge.blocker.reach == "on" and merge.blocker.guard == "unguarded"


#: stock v0.30.0's `_fused_q_kernel` in miniature: the MQA query pack after `if not QUANTIZE_MQA: return` (nested in
#: `if pid == 2:`, as in the release), and the same early return at the top of a kernel (`k`, the kernel compiled
#: on this machine). Triton 3.6 prunes only
#: the branch of a constexpr `if`, it still traces what follows an early return: with QUANTIZE_MQA=False compiling
#: either for sm_80 fails with "type fp8e4nv not supported in this architecture" (as stock failed on A100s)
EARLY_RETURN = {
    "vllm/models/deepseek_v32/common/kernels.py": """
        from vllm.triton_utils import tl, triton

        @triton.jit
        def _fused_q_kernel(x_ptr, y_ptr, QUANTIZE_MQA: tl.constexpr):
            pid = tl.program_id(0)
            if pid == 2:
                if not QUANTIZE_MQA:
                    return
                x = tl.load(x_ptr)
                tl.store(y_ptr, x.to(tl.float8e4nv).to(tl.float32))
                return
            if QUANTIZE_MQA:
                tl.store(y_ptr, tl.load(x_ptr).to(tl.float8e4nv))

        @triton.jit
        def k(x_ptr, y_ptr, QUANTIZE_MQA: tl.constexpr):
            if not QUANTIZE_MQA:
                return
            x = tl.load(x_ptr)
            tl.store(y_ptr, x.to(tl.float8e4nv).to(tl.float32))

        def fused_q(x):
            _fused_q_kernel[(3,)](x, x, QUANTIZE_MQA=False)
            k[(1,)](x, x, QUANTIZE_MQA=False)
            return x
    """,
}


def test_a_constexpr_early_return_in_a_jit_function_does_not_prune_what_follows(tmp_path):
    stock = write_tree(tmp_path / "s", EARLY_RETURN)
    found = {b.function: b for b in dsa_path.tree_path(stock).blockers if b.kind == "triton"}
    kernel = found["_fused_q_kernel"]
    # the use after the early return is live; the one inside `if QUANTIZE_MQA:` is pruned
    assert sorted((u.line, u.pruned is None) for u in kernel.uses) == [(10, True), (13, False)]
    assert [u.constexpr for u in kernel.uses if u.pruned is None] == [()]
    assert [u.pruned is None for u in found["k"].uses] == [True]
    got = by_function(dsa_path.ampere_path(write_tree(tmp_path / "c", COMPOSE, EARLY_RETURN), stock, "v0"))
    for name in ("_fused_q_kernel", "k"):
        assert got[name].handling is Handling.NOT_HANDLED, name
        assert got[name].detail.startswith("live: "), name
