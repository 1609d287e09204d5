"""Loaders look-alike: two functions share their body text."""


def load_draft(cfg):
    value = cfg.get("layers")
    if value is None:
        value = 0
    return value


def load_target(cfg):
    value = cfg.get("layers")
    if value is None:
        value = 0
    return value
