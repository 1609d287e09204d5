"""Weight mappers."""

import re

_PATTERN = re.compile(r"w\d+")


def make_mapper(
    expert_dtype: str,
    fuse_shared: bool = False,
) -> dict:
    if expert_dtype == "fp4":
        return {"scale": "weight_scale", "fused": fuse_shared}
    return {"scale": "weight_scale_inv", "fused": fuse_shared}


def other(x):
    return x
