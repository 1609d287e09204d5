def h(items):
    items.sort(reverse=True)
    first = items[0]
    last = items[-1]
    return first, last
