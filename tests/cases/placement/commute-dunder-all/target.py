TABLE = {
    "alpha": 1,
    "beta": 2,
    "gamma": 3,
}

__all__ = [
    "TABLE",
    "build",
    "build_two",
    "run",
]
