def pick_backends(kind, major):
    if kind == "dense":
        if major == 10:
            return [
                Backend.FAST,
                Backend.MEDIUM,
                Backend.SLOW,
                *extra_backends,
            ]
        else:
            return [
                Backend.MEDIUM,
                Backend.SLOW,
                Backend.OTHER,
                Backend.SPARSE,
            ]
    else:
        return [Backend.BASIC]
