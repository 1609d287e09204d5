import math


def g(x):
    y = x * 2
    z = y + 1
    z = abs(z)
    return z
