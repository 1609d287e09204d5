def pick(backend):
    if backend == "a":
        from .a import (
            A,
        )

        return [A]
    if backend == "b":
        from .b import B

        return [B]
    return []
