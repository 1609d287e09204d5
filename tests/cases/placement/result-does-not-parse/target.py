def n(a):
    if a:
        return 1
    return 0
