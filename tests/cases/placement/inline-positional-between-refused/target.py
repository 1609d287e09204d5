import os


def call(run, a, b):
    return run(a, theirs, b)


X = 1
