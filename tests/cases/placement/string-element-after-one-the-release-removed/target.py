FUSED_OPS = [
    "rms_norm",
    "fused_add_rms_norm",
    "gelu_and_mul",
]
