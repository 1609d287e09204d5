"""The Ampere compile gate as a command: compile recorded Triton kernels from a vLLM tree for sm_80 and sm_86.

    python kernels/gate.py kernels/composed-v0.26.0-sm80.json /path/to/composed   # the folder holding vllm/
    python kernels/gate.py kernels/stock-v0.26.0-sm80.json /path/to/vllm-0.26.0    # fails: fp8e4nv on sm_80

Exit status 0 when every record compiles for every target, 1 otherwise; `--json FILE` writes the per-kernel results.
Runs on a CPU-only machine; needs only `triton` (3.6.0 was used to record).
"""

import argparse
import collections
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))

from vllm_compose.errors import ComposeError  # noqa: E402
from vllm_compose.validation.kernel_gate import load_records, run_gate  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("records")
    ap.add_argument("tree", help="the folder that holds the vllm/ package of the tree to gate")
    ap.add_argument("--json", help="write per-kernel results here")
    args = ap.parse_args()
    try:
        results = run_gate(load_records(Path(args.records)), Path(args.tree))
    except ComposeError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 3
    failed = [r for r in results if not r.ok]
    by_kernel = collections.Counter((r.qualname, f"sm_{r.target}", r.error) for r in failed)
    for (name, target, error), n in sorted(by_kernel.items()):
        print(f"FAIL {name} {target} x{n}: {error}")
    print(f"{len(results) - len(failed)} passed, {len(failed)} failed")
    if args.json:
        Path(args.json).write_text(json.dumps([r.to_dict() for r in results], indent=1))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
