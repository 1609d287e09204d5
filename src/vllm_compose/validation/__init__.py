"""Validation of a composed vLLM: a tiny GLM-DSA checkpoint, the pipeline layer split, and the Ampere compile gate.

`tinyglm` writes a small random-init `glm_moe_dsa` checkpoint (numpy only, no hub); `kernel_gate` compiles the Triton
kernels a validation run launched for sm_80 / sm_86 without a GPU. The GPU-side harness lives in `device/`.
"""
