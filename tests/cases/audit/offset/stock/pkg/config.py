"""Config look-alike."""

import os
import sys

VERBOSE = bool(os.environ.get("VERBOSE"))
STREAM = sys.stderr


DEFAULTS = {
    "block_size": 16,
    "dtype": "auto",
}


def load(path):
    with open(path) as f:
        text = f.read()
    return parse(text)


def parse(text):
    out = dict(DEFAULTS)
    for line in text.splitlines():
        key, _, value = line.partition("=")
        out[key.strip()] = value.strip()
    return out
