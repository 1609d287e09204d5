"""Toy text helpers."""

import os


def greet(name, *, loud=False, suffix=""):
    text = "hello " + name
    if loud:
        text = text.upper()
    if suffix:
        text += suffix
    return text


def farewell(name):
    return "bye " + name
