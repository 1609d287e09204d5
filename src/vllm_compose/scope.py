"""What encloses a line: the class/def chain and the syntactic role of a position (Python syntax tree).

INTERFACE DRAFT (to be implemented).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Scope:
    """Where a line sits syntactically.

    chain: enclosing definitions outermost first, e.g. ("class CudaPlatform", "def _get_backend_priorities").
    role: the innermost syntactic container of the position: "module", "block", "parameters", "call-arguments",
          "list", "tuple", "dict", "set", "subscript", "import-names", "string", "decorator", ... .
    branch: which branch of the innermost enclosing if/elif/else (or try/except, match/case) the line is in, named
            by the branch's test text, e.g. "if capability.major == 10" / "else"; None outside any branch.
    """

    chain: tuple[str, ...] = ()
    role: str = "module"
    branch: str | None = None

    def describe(self) -> str:
        where = ".".join(c.split()[-1] for c in self.chain) or "<module>"
        text = f"{where} [{self.role}]"
        if self.branch:
            text += f" in branch `{self.branch}`"
        return text


def scope_at(lines: list[str], line_no: int) -> Scope | None:
    """Scope of 1-based `line_no` in a Python file given as lines; None when the file does not parse."""
    raise NotImplementedError
