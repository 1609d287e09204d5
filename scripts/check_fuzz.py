#!/usr/bin/env python3
"""Thin entry point: `vllm-compose check-fuzz ...` (see README)."""

import sys
from pathlib import Path

try:
    from vllm_compose.cli import main
except ImportError:  # run from a checkout without installing: use the source tree
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))
    from vllm_compose.cli import main

if __name__ == "__main__":
    sys.exit(main(["check-fuzz", *sys.argv[1:]]))
