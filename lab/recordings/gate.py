"""The Ampere compile gate of recorded kernels: `vllm-compose kernel-gate RECORDS TREE` (this file runs it).

    python lab/recordings/gate.py $COMPOSED /path/to/composed                           # the folder holding vllm/
    python lab/recordings/gate.py lab/recordings/stock-v0.26.0-sm80.json /path/to/vllm-0.26.0  # fails: fp8e4nv, sm_80

where COMPOSED=src/vllm_compose/ampere/recordings/composed-v0.26.0-sm80.json (package data: the Ampere gate reads
it to report its coverage, so it ships in the wheel).

Exit status 0 when every record compiles for every target, 1 otherwise; `--json FILE` writes the per-kernel results.
Runs on a CPU-only machine; needs the installed package (`pip install -e .`) and `triton` (3.6.0 was used to record).
"""

import sys

from vllm_compose.cli import main

if __name__ == "__main__":
    sys.exit(main(["kernel-gate", *sys.argv[1:]]))
