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
    return dict(DEFAULTS, **dict(item.split("=", 1) for item in text.split(";")))
