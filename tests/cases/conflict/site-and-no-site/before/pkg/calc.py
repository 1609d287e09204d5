import sys


def total(xs):
    n = 0
    for x in xs:
        x = round(x)
        n += x
    return n


def mean(xs):
    if not xs:
        return None
    return statistics.fmean(xs)


def median(xs):
    ys = sorted(xs)
    return ys[len(ys) // 2]
