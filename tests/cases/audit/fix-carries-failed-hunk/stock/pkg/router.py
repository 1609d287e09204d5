"""Router look-alike: the release renamed the method the PR's hunk edits."""


def pick(backends, major):
    if major >= 9:
        order = [
            "FLASH",
            "FLASHMLA",
        ]
    else:
        order = ["TRITON"]
    return [b for b in order if b in backends]


def describe(backend):
    return f"backend {backend}"
