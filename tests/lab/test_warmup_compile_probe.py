"""`lab/device/warmup_compile_probe.py`: the indexer's pack kernel compiled as v0.30.0+'s JIT warm-up registers it
(fp8e4nv pointers, pad -inf) fails for sm_80 with the test environment's Triton (the gate's pin), and the uint8 pack
with pad 0 that the indexer launches on sm_8x compiles. The kernel is the release's own, read from its sdist."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
from release_trees import release_tree

pytest.importorskip("triton", reason="the probe compiles with Triton")

REPO = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("vc_warmup_probe", REPO / "lab" / "device" / "warmup_compile_probe.py")
probe = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(probe)


@pytest.mark.sdist
def test_the_warmup_fp8_pack_fails_sm80_and_the_uint8_pack_compiles(tmp_path_factory):
    kernel, where = probe.load_pack_kernel(release_tree(tmp_path_factory, "v0.30.0"))
    assert where.endswith("vllm/v1/attention/ops/common.py:30")
    assert [v[1:] for v in probe.VARIANTS] == [("*fp8e4nv", float("-inf"), False), ("*u8", 0, True)]
    error = probe.compile_variant(kernel, "*fp8e4nv", float("-inf"), False, 80, 32)
    assert error is not None and "type fp8e4nv not supported in this architecture" in error
    assert probe.compile_variant(kernel, "*u8", 0, True, 80, 32) is None
