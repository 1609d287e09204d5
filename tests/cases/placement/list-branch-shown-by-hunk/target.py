def pick_backends(kind, major):
    if kind == "dense":
        if major == 10:
            return [
                Backend.MEDIUM,
                Backend.SLOW,
            ]
        else:
            return [
                Backend.MEDIUM,
                Backend.SLOW_V2,
            ]
    return [Backend.BASIC]
