"""The toy module."""

import os
import sys

VERSION = "1.0"
DEBUG = False
LEVEL = 3
COLORS = ("red", "green")
SIZES = (1, 2, 3)
NAMES = ("a", "b")
LIMIT = 10


def greet(name, *, loud=False, color=None):
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
