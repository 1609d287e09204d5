def gone():
    return undefined_in_stock
