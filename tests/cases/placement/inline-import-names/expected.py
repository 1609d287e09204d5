from pkg.util import alpha, beta, gamma, delta


def shape(x, size):
    out = [*x.shape[:-1], size]
    return out
