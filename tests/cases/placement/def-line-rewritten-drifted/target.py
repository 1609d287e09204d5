"""Toy text helpers."""

import os
import sys

DEFAULT_NAME = "world"


def greet(name, *, loud=False):
    text = "hello, " + name  # comma
    if loud:
        text = text.upper()
    return text


def farewell(name):
    return "bye " + name
