"""Run an upstream PR's own kernel tests (e.g. #47629's tests/kernels/attention/test_mqa_logits_triton.py and
test_triton_mla_sparse_kernel.py) against the DSA Triton kernel files of a tree, without vLLM installed.

A lab script. The tests import `vllm.v1.attention.ops.mqa_logits_triton` / `triton_mla_sparse_kernel`,
`vllm.platforms.current_platform` and `vllm.utils.math_utils.cdiv`; `kernel_offsets.install_vllm_shim` provides them,
the kernels from `--tree`. The test files come from the PR's diff and never enter this repository: on this machine

    git init -q T && git -C T apply --include='tests/kernels/attention/*' SOURCES/47629.diff

then carry T (e.g. as .devkern/pr47629-tests) and run on the GPU, once per tree and selection (an illegal memory
access poisons the process, so a test that may fault runs in its own process):

    python3 lab/device/pr_kernel_tests.py --tree .devkern/new --tests .devkern/pr47629-tests -- -q -k "not overflow"

Exit status: pytest's.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from kernel_offsets import install_vllm_shim  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tree", type=Path, required=True, help="a tree root holding vllm/v1/attention/ops/")
    ap.add_argument("--tests", type=Path, required=True, help="a folder holding tests/kernels/attention/")
    ap.add_argument("--sm80-ptx", action="store_true", help="compile for sm_80 and assemble that PTX (sm80_ptx.py)")
    ap.add_argument("--record", type=Path, help="with --sm80-ptx: write the compiled kernels' records here (JSON)")
    ap.add_argument("pytest_args", nargs="*", help="after --: arguments for pytest")
    args = ap.parse_args()
    import pytest

    compiled: list[dict] = []
    if args.sm80_ptx:
        from sm80_ptx import enable

        enable(compiled)
    install_vllm_shim(args.tree)
    files = sorted(str(p) for p in (args.tests / "tests" / "kernels" / "attention").glob("test_*.py"))
    rc = pytest.main([*files, "-p", "no:cacheprovider", *args.pytest_args])
    if args.record:
        import json

        args.record.write_text(json.dumps(compiled, indent=1) + "\n")
    return rc


if __name__ == "__main__":
    sys.exit(main())
