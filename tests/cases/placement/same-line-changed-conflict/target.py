def k():
    rate = 10
    limit = 500
    return rate, limit
