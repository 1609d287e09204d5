"""Toy text helpers."""

import os


def greet(name, *, loud=False):
    text = "hello " + name
    if loud:
        text = text.upper()
    return text


def farewell(name):
    return "bye " + name
