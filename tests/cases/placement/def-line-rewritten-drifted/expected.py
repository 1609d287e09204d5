"""Toy text helpers."""

import os
import sys

DEFAULT_NAME = "world"


def greet(name, *, loud=False, suffix=""):
    text = "hello, " + name  # comma
    if loud:
        text = text.upper()
    if suffix:
        text += suffix
    return text


def farewell(name):
    return "bye " + name
