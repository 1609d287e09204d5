"""The target file as placement reads it: its lines indexed by their whitespace-collapsed text, its Python layout and
section table built on demand, and the line helpers every strategy shares."""

from __future__ import annotations

import functools
import re
from collections import defaultdict
from operator import methodcaller

from ..scope import PythonLayout, SectionIndex


def norm_text(line: str) -> str:
    """The line with runs of whitespace collapsed: the text lines are indexed and compared by."""
    return " ".join(line.split())


def strip_cr(line: str) -> str:
    """The line without a trailing ``\\r`` (a CRLF file's line end)."""
    return line[:-1] if line.endswith("\r") else line


def is_python(path: str | None) -> bool:
    return bool(path) and path.endswith((".py", ".pyi"))


def indent_of(line: str) -> str:
    """The line's leading spaces and tabs."""
    return line[: len(line) - len(line.lstrip(" \t"))]


class Target:
    """One target file, indexed for placement (built once per file, shared by its hunks)."""

    def __init__(self, lines: list[str], path: str | None) -> None:
        self.lines = lines
        self.norm = [" ".join(ln.split()) for ln in lines]  # norm_text, inlined: this runs over every target line
        self.by_norm: dict[str, list[int]] = defaultdict(list)
        for i, n in enumerate(self.norm):
            self.by_norm[n].append(i)
        self.crlf = sum(map(methodcaller("endswith", "\r"), lines)) * 2 > len(lines) > 0
        self.is_py = is_python(path)
        self._layout: PythonLayout | None = None
        self._sections: SectionIndex | None = None

    @property
    def layout(self) -> PythonLayout:
        if self._layout is None:
            self._layout = PythonLayout(self.lines, lazy=True)
        return self._layout

    @functools.cached_property
    def statement_sensitive(self) -> tuple[int, bool]:
        """(last line of a ``from __future__`` import, -1 if none; whether any ``global``/``nonlocal`` statement
        exists): what makes a syntax check of some statements differ from one of the whole file."""
        last_future = -1
        scoped = False
        for i, n in enumerate(self.norm):
            if n.startswith("from __future__"):
                last_future = i
            elif n.startswith(("global ", "nonlocal ")):
                scoped = True
        return last_future, scoped

    @property
    def sections(self) -> SectionIndex:
        if self._sections is None:
            self._sections = SectionIndex(self.lines)
        return self._sections

    @functools.cached_property
    def _words(self) -> frozenset[str]:
        return frozenset(re.findall(r"\w+", "\n".join(self.lines)))

    def names(self, name: str) -> bool:
        """Whether any line of the file (code, comment or string) names `name`: as a word, or, for a string's
        text that is not one word, anywhere."""
        if re.fullmatch(r"\w+", name):
            return name in self._words
        return any(name in line for line in self.lines)

    def eol(self, line: str) -> str:
        """`line` written with the target's line ending."""
        line = strip_cr(line)
        return line + "\r" if self.crlf else line


def indexed_target(lines: list[str], path: str | None) -> Target:
    """The indexed target for `lines`, shared by every placement onto the same content.

    A compose places onto the same file content more than once (the replay, then the audit re-placing each entry
    on the same text); the index, the lexed layout and the section table depend on the content alone."""
    return _cached_target("\n".join(lines), len(lines), is_python(path))


@functools.lru_cache(maxsize=16)
def _cached_target(text: str, n: int, is_py: bool) -> Target:
    return Target(text.split("\n") if n else [], "x.py" if is_py else None)


# --------------------------------------------------------------------------------------------------------------
# Alignment
