"""Config look-alike."""

import os


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
