from pkg.util import alpha, beta


def shape(x, size):
    out = [*x.shape[:-1], size, "theirs"]
    return out
