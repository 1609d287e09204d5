def pick(backend):
    if backend == "a":
        from .a import (
            A,
        )

        return [A, "extra"]
    if backend == "b":
        from .b import B

        return [B]
    return []
