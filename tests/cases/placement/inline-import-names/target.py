from pkg.util import alpha, beta, delta


def shape(x, size):
    out = [*x.shape[:-1], size]
    return out
