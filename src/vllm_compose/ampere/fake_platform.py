"""An Ampere GPU as release code and Triton see it on a CPU: vLLM's `current_platform` (`FakeCudaPlatform`),
Triton's active driver (`FakeTritonDriver`), and the launch capture that records what a `kernel[grid](...)` would
compile without compiling or launching it (`capture_launches`).

`kernel_launches` binds the fake platform into the release's modules before they execute and drives the release's
code inside `capture_launches`. What the fake platform answers is `facts`' (the same facts the static path
evaluates conditions with), so the derivation and the static path cannot disagree about what an sm_8x GPU is.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from typing import Any

from .facts import (
    BY_CAPABILITY,
    FP8_MIN_CAPABILITY,
    PDL_MIN_CAPABILITY,
    PLATFORM_IS,
    capability_int,
    compile_target,
    has_device_capability,
    is_device_capability,
    is_device_capability_family,
)
from .kernel_gate import KernelGateError


class PlatformProbeError(KernelGateError):
    """Release code asked the fake platform something it does not implement (a new platform probe)."""


# --- the fake platform -------------------------------------------------------------------------------------------


class DeviceCapability(tuple):
    """`vllm.platforms.interface.DeviceCapability` as release code uses it: (major, minor), `.to_int()`."""

    def __new__(cls, major: int, minor: int):
        return super().__new__(cls, (major, minor))

    major = property(lambda self: self[0])
    minor = property(lambda self: self[1])

    def to_int(self) -> int:
        return capability_int(self)

    def as_version_str(self) -> str:
        return f"{self[0]}.{self[1]}"


def _answer(name: str, value: bool):
    """A platform identity probe (`is_cuda`, ...) that answers `value`, as `facts.PLATFORM_IS` says."""

    def probe(self) -> bool:
        return value

    probe.__name__ = probe.__qualname__ = name
    return probe


class FakeCudaPlatform:
    """`current_platform` of a CUDA GPU of compute capability `capability` (an A100 is (8, 0)).

    Only what the DSA path's release code asks is implemented (found by reading the trees); any other attribute
    raises `PlatformProbeError` naming it, so a new release's new probe is visible instead of silently false. The
    answers are `facts`': the platform identity probes (`PLATFORM_IS`, set on the class below it), the
    capability probes, the fp8 and PDL thresholds, the device name.
    """

    device_type = "cuda"
    device_name = "cuda"
    dispatch_key = "CUDA"
    ray_device_key = "GPU"
    simple_compile_backend = "inductor"

    def __init__(self, capability: tuple[int, int]) -> None:
        self.capability = DeviceCapability(*capability)

    def get_device_capability(self, device_id: int = 0) -> DeviceCapability:
        return self.capability

    def has_device_capability(self, capability, device_id: int = 0) -> bool:
        return has_device_capability(self.capability, capability)

    def is_device_capability(self, capability, device_id: int = 0) -> bool:
        return is_device_capability(self.capability, capability)

    def is_device_capability_family(self, capability, device_id: int = 0) -> bool:
        return is_device_capability_family(self.capability, capability)

    def fp8_dtype(self):
        import torch

        return torch.float8_e4m3fn

    def is_fp8_fnuz(self) -> bool:
        return False

    def supports_fp8(self) -> bool:
        return self.has_device_capability(FP8_MIN_CAPABILITY)

    def is_arch_support_pdl(self) -> bool:
        return self.has_device_capability(PDL_MIN_CAPABILITY)

    def get_device_name(self, device_id: int = 0) -> str:
        gpu = BY_CAPABILITY.get(tuple(self.capability))
        return gpu.name if gpu is not None else "NVIDIA"

    def is_pin_memory_available(self) -> bool:
        return True

    def manual_seed_all(self, seed: int) -> None:
        return None

    def __getattr__(self, name: str):
        raise PlatformProbeError(
            f"release code asked current_platform.{name}, which the fake CUDA platform does not implement",
            key=name,
            hint="read what the real CudaPlatform answers on an sm_8x GPU and add it to FakeCudaPlatform",
        )


for _name, _value in PLATFORM_IS.items():
    setattr(FakeCudaPlatform, _name, _answer(_name, _value))


# --- launch capture ----------------------------------------------------------------------------------------------


class FakeTritonDriver:
    """Triton's active driver as the binder asks it: the target, a device and a stream (no GPU behind them)."""

    def __init__(self, capability: tuple[int, int]) -> None:
        from triton.backends.compiler import GPUTarget

        self.target = GPUTarget("cuda", *compile_target(capability))

    def get_current_target(self):
        return self.target

    def get_current_device(self) -> int:
        return 0

    def get_current_stream(self, device=None) -> int:
        return 0

    def get_active_torch_device(self):
        import torch

        return torch.device("cpu")

    def is_active(self) -> bool:
        return True


def launch_record(module: str, qualname: str, specialization_data: str) -> dict[str, Any]:
    """One kernel record: what lab/device/sitecustomize stores and kernel_gate compiles (Triton's own serialization,
    `JITFunction._call_hook`'s `specialization_data`, parsed as lab/device/collect.py parses it)."""
    return {"module": module, "qualname": qualname, "specialization": json.loads(specialization_data)}


def record_key(rec: dict[str, Any]) -> str:
    """Identity of a specialization (the per-launch `key` aside): records with equal keys compile the same."""
    spec = {k: v for k, v in rec["specialization"].items() if k != "key"}
    return json.dumps([rec["module"], rec["qualname"], spec], sort_keys=True, default=str)


@contextlib.contextmanager
def capture_launches(capability: tuple[int, int]) -> Iterator[list[dict[str, Any]]]:
    """Within the block, Triton launches are recorded into the yielded list and neither compiled nor run.

    The fake driver stands in for `triton.runtime.driver.active`; the cache hook returns True, which makes
    `JITFunction._do_compile` return before compiling (and `run` before launching). An autotuner benchmarks each
    config it keeps by launching it: the benchmark is replaced by one recorded launch per config.
    """
    from triton import knobs
    from triton.runtime import driver
    from triton.runtime.autotuner import Autotuner

    records: list[dict[str, Any]] = []

    def hook(*, key, repr, fn, compile, is_manual_warmup, already_compiled):
        records.append(launch_record(fn.module, fn.name, compile["specialization_data"]))
        return True

    def bench(self, *args, config, **meta):
        self.fn.run(*args, **{**meta, **config.all_kwargs()})
        return [float(self.configs.index(config)) if config in self.configs else 0.0]

    saved_driver, saved_hook, saved_bench = driver._active, knobs.runtime.jit_cache_hook, Autotuner._bench
    driver.set_active(FakeTritonDriver(capability))
    knobs.runtime.jit_cache_hook = hook
    Autotuner._bench = bench
    try:
        yield records
    finally:
        driver._active = saved_driver
        knobs.runtime.jit_cache_hook = saved_hook
        Autotuner._bench = saved_bench
