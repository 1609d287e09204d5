def m():
    values = (
        1,
        2,
    )
    return values
