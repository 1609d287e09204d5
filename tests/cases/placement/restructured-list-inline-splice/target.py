def backends():
    return [
        Backend.A,
        *[
            Backend.B,
            Backend.C,
        ],
        Backend.D,
        Backend.E,
    ]
