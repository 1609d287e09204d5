def fresh():
    return 1
