def gone():
    return 0
