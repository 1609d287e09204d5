"""Run Triton kernels on a Hopper GPU as an A100 would: compiled for sm_80, assembled from that PTX.

A lab helper. Triton builds for the GPU it runs on, so on an H200 a kernel takes Hopper's instructions (wgmma, TMA,
native fp8 conversions) even when vLLM's Python is told the device is sm_80. `enable()` makes every later Triton
compile target sm_80 (the driver's current target answers capability 80: TTGIR layouts, LLVM and the PTX's
`.target` are sm_80's, so an fp8e4nv store fails to compile as it does on an A100), and assembles that PTX with
ptxas for the GPU actually present, as the driver's JIT does for a PTX-only image: sm_80 instructions, run on sm_90.
Each compiled kernel is recorded (name, the PTX's `.target`, whether Hopper-only instructions appear), so a run can
show which kernels took the sm_80 path.
"""

from __future__ import annotations

import hashlib
import re

#: PTX that an sm_80 build never holds (wgmma, TMA bulk copies, setmaxnreg): its presence means the sm_80 path was
#: not taken
HOPPER_ONLY = re.compile(r"\b(wgmma\.|cp\.async\.bulk\.tensor|setmaxnreg)")


def stage_hook(record, device_arch: int):
    """A Triton `add_stages_inspection_hook`: keep the PTX stage of the sm_80 target, call `record` with one dict
    per compiled kernel, and assemble the PTX for `device_arch` (the GPU present, e.g. 90)."""

    # Triton 3.8 also calls the hook with no arguments, for the key it adds to the kernel's cache key (a kernel
    # built through this hook must not be taken for one built without it); Triton 3.6 does not
    tag = f"sm80-ptx-for-sm_{device_arch}"
    digest = hashlib.sha256(tag.encode()).hexdigest()

    def hook(backend=None, stages=None, options=None, language=None, capability=None):
        if stages is None:
            return tag, digest
        make_ptx = stages["ptx"]

        def ptx(src, metadata):
            text = make_ptx(src, metadata)
            target = re.search(r"\.target (sm_\d+\w*)", text)
            record(
                {
                    "kernel": metadata.get("name"),
                    "ptx_target": target.group(1) if target else None,
                    "hopper_only_instructions": bool(HOPPER_ONLY.search(text)),
                    "assembled_for": f"sm_{device_arch}",
                }
            )
            return text

        stages["ptx"] = ptx
        stages["cubin"] = lambda src, metadata: backend.make_cubin(src, metadata, options, device_arch)

    return hook


def enable(records: list[dict]) -> None:
    """Target sm_80 for every later compile in this process; append one record per compiled kernel to `records`."""
    import torch
    from triton import knobs
    from triton.backends.compiler import GPUTarget
    from triton.runtime import driver

    major, minor = torch.cuda.get_device_capability()
    active = driver.active
    active.get_current_target = lambda: GPUTarget("cuda", 80, 32)
    knobs.runtime.add_stages_inspection_hook = stage_hook(records.append, major * 10 + minor)
