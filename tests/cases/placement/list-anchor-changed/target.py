def pick_backends(kind, major):
    if kind == "dense":
        if major == 10:
            return [
                Backend.MEDIUM,
                Backend.SLOW,
            ]
        else:
            return [
                Backend.MEDIUM_V2,
                Backend.SLOW,
            ]
    return [Backend.BASIC]
