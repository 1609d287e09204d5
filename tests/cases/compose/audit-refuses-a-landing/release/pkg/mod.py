import os


def greet(name, *, loud=False):
    text = "hello " + name
    if loud:
        text = text.upper()
    return text


def farewell(name):
    return "bye " + name


class Engine:
    def __init__(self, size):
        self.size = size
        self.steps = 0

    def step(self, batch):
        self.steps += 1
        return [x * self.size for x in batch]
