def first(x):
    return late_bound(x)


def second(x):
    return x
