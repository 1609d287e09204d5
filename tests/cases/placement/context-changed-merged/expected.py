def h(items):
    items.sort(reverse=True)
    first = items[0]
    middle = items[len(items) // 2]
    last = items[-1]
    return first, last
