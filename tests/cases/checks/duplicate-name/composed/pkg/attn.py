def first(x):
    return late_bound(x)


def second(x):
    y = x + 1
    return late_bound(y)
