import os
import sys


def backend():
    return os.environ.get("BACKEND", "FLASH")


def backend():
    return "TRITON_MLA_SPARSE"
