def f0(x):
    y = x + 0
    return y


def f1(x):
    y = x + 1
    return y


def f2(x):
    y = x + 2
    return y


def f3(x):
    y = x + 3
    return y


def f4(x):
    return x + 4


def f5(x):
    y = x + 5
    return y


