"""What "Ampere" means to the gates, the static path and the GPU harness, written once: the GPUs and their compile
targets, what vLLM's CUDA platform answers on them, and the launch contract Ampere runs are held to.

Readers: `kernel_gate` and `gate` (the compile targets, the capabilities gated), `fake_platform` (the
`current_platform` and Triton driver of an sm_8x GPU on a CPU), `dsa_path` and `partial_eval` (the static path's
evaluation of conditions as an sm_80/86 CUDA process sees them), `kernel_launches` (the launch contract's KV-cache
dtype and block size, the SM counts), and on the GPU machine `lab/device/sitecustomize` and `lab/device/make_lock.py`.

Standard library only, and no import of this package: the device shim loads this file by its path from the carried
`src/` tree inside every vLLM process of a validation run (putting `src/` on `sys.path` there would make the tool
importable to the run it observes), and the gate's worker imports it in an environment that holds only torch and
Triton.
"""

from __future__ import annotations

from dataclasses import dataclass

# --------------------------------------------------------------------------------------------------- the GPUs


@dataclass(frozen=True)
class AmpereGpu:
    """One Ampere compute capability and the GPU that stands for it where release code asks for a device."""

    #: (major, minor) as `torch.cuda.get_device_capability` and vLLM's `DeviceCapability` give it
    capability: tuple[int, int]
    #: what `current_platform.get_device_name()` returns on it (vLLM keys tuned kernel configs on this name)
    name: str
    #: streaming multiprocessors: the sparse-MLA split heuristic sizes its grid with the count
    sm_count: int


#: the capabilities the tool composes for: A100 (sm_80) and the GA10x GPUs (RTX 30xx, A10, A40: sm_86)
GPUS: tuple[AmpereGpu, ...] = (
    AmpereGpu((8, 0), "NVIDIA A100-SXM4-80GB", 108),
    AmpereGpu((8, 6), "NVIDIA GeForce RTX 3090", 82),
)
CAPABILITIES: tuple[tuple[int, int], ...] = tuple(g.capability for g in GPUS)
BY_CAPABILITY: dict[tuple[int, int], AmpereGpu] = {g.capability: g for g in GPUS}

#: threads per warp on every NVIDIA GPU Triton targets: the second half of a `GPUTarget`
WARP_SIZE = 32


def capability_int(capability: tuple[int, int] | int) -> int:
    """A capability as vLLM's `DeviceCapability.to_int()` writes it: (8, 6) -> 86; an int is returned as it is."""
    if isinstance(capability, tuple):
        return capability[0] * 10 + capability[1]
    return int(capability)


def parse_capability(text: str) -> tuple[int, int]:
    """A capability written `MAJOR.MINOR` (`VC_FAKE_CAPABILITY=8.0`, lab/device/run_all.sh's table) as (major, minor)."""
    try:
        major, minor = (int(x) for x in text.split("."))
    except ValueError:
        raise ValueError(f"capability {text!r} is not written MAJOR.MINOR (e.g. 8.0 for an A100)") from None
    return major, minor


def compile_target(capability: tuple[int, int]) -> tuple[int, int]:
    """The Triton compile target of a capability: (compute capability as an int, warp size), (8, 0) -> (80, 32)."""
    return capability_int(capability), WARP_SIZE


#: the targets every gated kernel must compile for
COMPILE_TARGETS: tuple[tuple[int, int], ...] = tuple(compile_target(c) for c in CAPABILITIES)

# ------------------------------------------------------------------------------------- what the platform answers

#: vLLM's platform identity probes (`current_platform.is_cuda()`, ...) and what a CUDA process answers to each
PLATFORM_IS: dict[str, bool] = {
    "is_cuda": True,
    "is_cuda_alike": True,
    "is_rocm": False,
    "is_xpu": False,
    "is_cpu": False,
    "is_tpu": False,
    "is_out_of_tree": False,
}

#: vLLM's `supports_fp8()`: hardware fp8 (e4m3fn) from sm_89 (Ada) on; false on Ampere
FP8_MIN_CAPABILITY = 89
#: vLLM's `is_arch_support_pdl()`: programmatic dependent launch from sm_90 (Hopper) on; false on Ampere
PDL_MIN_CAPABILITY = 90


def has_device_capability(capability: tuple[int, int], asked: tuple[int, int] | int) -> bool:
    """`current_platform.has_device_capability(asked)` on a GPU of `capability`: at least that capability."""
    return capability_int(capability) >= capability_int(asked)


def is_device_capability(capability: tuple[int, int], asked: tuple[int, int] | int) -> bool:
    """`current_platform.is_device_capability(asked)` on a GPU of `capability`: exactly that capability."""
    return capability_int(capability) == capability_int(asked)


def is_device_capability_family(capability: tuple[int, int], asked: tuple[int, int] | int) -> bool:
    """`current_platform.is_device_capability_family(asked)`: the same major version (80 and 86 are one family)."""
    return capability_int(capability) // 10 == capability_int(asked) // 10


# ----------------------------------------------------------------------------------------- the launch contract

#: the KV-cache dtype Ampere runs are launched with (docs/user-guide.md): `--kv-cache-dtype auto`, i.e. the model's
#: bf16; an fp8 KV cache needs hardware fp8
KV_CACHE_DTYPE = "auto"
#: the KV-cache block size of the launch contract
BLOCK_SIZE = 64

#: values the Ampere launch contract (PP/TP only, a bf16 KV cache) fixes outside jit code, for the conditions of
#: ordinary Python: a name here counts with its value as a plain name (a parameter, a local), `self.name` or a
#: config field `x.name`, unless a caller binds it to a known value. What a condition on these keeps off is off by
#: how Ampere runs are launched, not by the GPU: "off under the launch contract" (`dsa_path.classify`), never "by
#: the compose". Why each value holds on Ampere:
LAUNCH_CONTRACT: dict[str, tuple[object, str]] = {
    # `--decode-context-parallel-size` is never given: `ParallelConfig.decode_context_parallel_size` stays 1
    "decode_context_parallel_size": (1, "decode context parallel off (DCP size 1, the Ampere launch contract)"),
    # the indexer's DCP size, set from that field (`self.dcp_world_size`) and passed on as a parameter
    "dcp_world_size": (1, "decode context parallel off (DCP size 1, the Ampere launch contract)"),
}

#: constexpr values a sm_80/86 run has, so Triton prunes the branches they switch off before it compiles anything
#: (a use of fp8e4nv in a pruned branch is never compiled). Only the branch of the `if` is pruned: what follows a
#: constexpr early return (`if not QUANTIZE_MQA: return`) is still traced and compiled. Why each value holds on Ampere:
AMPERE_CONSTEXPR: dict[str, tuple[bool, str]] = {
    # the series' fix (vllm/models/deepseek_v32/common/e4m3.py): true on CUDA below sm_89
    "SOFTWARE_E4M3": (True, "software E4M3 on sm_8x (SOFTWARE_E4M3)"),
    # the MLA KV-cache layouts: all off with the Ampere launch contract's bf16 KV cache (`--kv-cache-dtype auto`)
    "MLA_CACHE_FP8": (False, "off with a bf16 KV cache (MLA_CACHE_FP8)"),
    "MLA_CACHE_DS_MLA": (False, "off with a bf16 KV cache (MLA_CACHE_DS_MLA)"),
    "MLA_CACHE_NVFP4": (False, "off with a bf16 KV cache (MLA_CACHE_NVFP4)"),
    # fp8 query packing: attention.py's `_fp8_query` needs fp8 attention, i.e. a quantized KV cache
    "QUANTIZE_MQA": (False, "off with a bf16 KV cache (QUANTIZE_MQA)"),
    # tensor-descriptor gather in the Triton MoE: `resolve_moe_use_td()` is false on CUDA unless VLLM_TRITON_USE_TD=1
    "USE_TD": (False, "off on CUDA unless VLLM_TRITON_USE_TD=1 (USE_TD)"),
}
