TABLE = {
    "alpha": 1,
    "beta": 2,
    "beta_two": 5,
    "gamma": 3,
}

__all__ = [
    "TABLE",
    "build",
    "run",
]
