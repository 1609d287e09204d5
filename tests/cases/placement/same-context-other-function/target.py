import os


def load_config(path):
    data = read(path)

    result = {}
    for key in data:
        result[key] = data[key]
    return result


def load_cache(path):
    data = read(path)

    result = {}
    for key in data:
        result[key] = data[key]
    return result
