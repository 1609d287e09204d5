def gone():
    return 1
