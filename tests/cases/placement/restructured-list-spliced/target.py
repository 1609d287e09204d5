_SPARSE = [
    Backend.B,
    Backend.C,
]


def backends():
    return [
        Backend.A,
        *_SPARSE,
        Backend.D,
        Backend.E,
    ]
