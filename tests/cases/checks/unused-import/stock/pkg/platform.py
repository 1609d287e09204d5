import os


def backend():
    return os.environ.get("BACKEND", "FLASH")
