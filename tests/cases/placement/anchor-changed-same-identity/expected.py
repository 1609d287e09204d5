def group(layers, buckets):
    # smallest group decides
    low = min(len(x) for x in buckets)
    marker = None
    size = low
    high = max(len(x) for x in buckets)
    return size, high
