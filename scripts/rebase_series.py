#!/usr/bin/env python3
"""Thin entry point: `vllm-compose rebase ...` (see README); runs under the project's .venv (scripts/_launch.py)."""

import sys

from _launch import run

if __name__ == "__main__":
    sys.exit(run("rebase"))
