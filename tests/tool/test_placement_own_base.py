"""A patch applied to the very file it was made from is `exact`, wherever in the file it edits.

Every element of a long signature, call, list/tuple/dict display, import list, enum and `__all__`, and every simple
statement and decorator of one module, is edited in turn (a new element after it, or the element rewritten); the
one-hunk diff of each edit, with 1 to 3 lines of context, is placed onto the unedited module.  In the middle of a
long signature the hunk shows no bracket at all: its role cannot be told from its lines, which must never make an
exact site a conflict.
"""

from __future__ import annotations

import difflib

import pytest

from vllm_compose.patchfile import parse_patch
from vllm_compose.placement import Verdict, place_file
from vllm_compose.scope import scope_at

MODULE = '''\
"""Module doc."""

from __future__ import annotations

import enum
from typing import (
    Any,
    Callable,
    Optional,
    Sequence,
    Union,
)

import torch


class Kind(enum.Enum):
    FIRST = 1
    SECOND = 2
    THIRD = 3
    FOURTH = 4
    FIFTH = 5


__all__ = [
    "Kind",
    "Runner",
    "build",
    "helper",
    "other",
]


@dataclass(frozen=True)
@register(
    "runner",
    priority=10,
)
class Runner(Base):
    def __init__(
        self,
        model: torch.nn.Module,
        batch_size: int,
        max_tokens: int = 128,
        temperature: float = 1.0,
        top_p: float = 1.0,
        top_k: int = -1,
        seed: int | None = None,
        device: str = "cuda",
        dtype: torch.dtype = torch.float16,
        cache: dict[str, Any] | None = None,
    ) -> None:
        self.model = model
        self.batch_size = batch_size
        table = {
            "alpha": 1,
            "beta": 2,
            "gamma": 3,
            "delta": 4,
            "epsilon": 5,
        }
        result = self.model.forward(
            batch_size,
            max_tokens,
            temperature=temperature,
            top_p=top_p,
            top_k=top_k,
            seed=seed,
            device=device,
            dtype=dtype,
        )
        names = (
            "one",
            "two",
            "three",
            "four",
            "five",
        )
        self.table = table
        self.names = names
        return result
'''
LINES = MODULE.splitlines()

#: what a new element looks like in each container
_NEW = {
    "parameters": "extra_{n}: int | None = None,",
    "call-arguments": "extra_{n}=None,",
    "import-names": "Extra{n},",
    "list": '"extra_{n}",',
    "tuple": '"extra_{n}",',
    "dict": '"extra_{n}": {n},',
}


def _edits() -> list[tuple[str, list[str]]]:
    """(description, edited lines) for every edit of MODULE this test makes; each edited module parses."""
    out: list[tuple[str, list[str]]] = []
    for k, line in enumerate(LINES):
        text = line.strip()
        indent = line[: len(line) - len(line.lstrip())]
        scope = scope_at(LINES, k + 1)
        role = scope.role if scope else None
        n = k + 1
        candidates: list[tuple[str, list[str]]] = []
        if role in _NEW and text.endswith(",") and not text.endswith("(,"):
            new = indent + _NEW[role].format(n=n)
            if role == "parameters" and "=" not in text:
                new = indent + f"extra_{n}: int,"  # no default after a parameter without one
            if role == "call-arguments" and "=" not in text:
                new = indent + f"extra_{n},"  # no keyword argument before a positional one
            candidates.append((f"{role}: new element after line {n} `{text}`", LINES[: k + 1] + [new] + LINES[k + 1 :]))
            rewritten = line + "  # edited"
            if "#" not in line:
                candidates.append((f"{role}: line {n} `{text}` rewritten", LINES[:k] + [rewritten] + LINES[k + 1 :]))
        elif text.startswith("@"):
            new = indent + f"@decorator_{n}"
            candidates.append((f"decorator before line {n} `{text}`", LINES[:k] + [new] + LINES[k:]))
        elif role == "block" and scope.chain and scope.chain[-1] == "class Kind":
            new = indent + f"EXTRA_{n} = {n}"
            candidates.append((f"enum member after line {n} `{text}`", LINES[: k + 1] + [new] + LINES[k + 1 :]))
        elif role == "block" and " = " in text and not text.endswith(("(", "[", "{")):
            new = indent + f"extra_{n} = None"
            candidates.append((f"statement after line {n} `{text}`", LINES[: k + 1] + [new] + LINES[k + 1 :]))
        for what, edited in candidates:
            compile("\n".join(edited) + "\n", "module.py", "exec", dont_inherit=True)  # each edit is valid Python
            out.append((what, edited))
    return out


EDITS = _edits()


def _diff(base: list[str], edited: list[str], context: int) -> str:
    body = difflib.unified_diff(
        [ln + "\n" for ln in base], [ln + "\n" for ln in edited], "a/module.py", "b/module.py", n=context
    )
    return "".join(body)


def test_every_kind_of_edit_is_covered() -> None:
    kinds = {what.split(":")[0].split(" ")[0] for what, _ in EDITS}
    assert kinds >= {"parameters", "call-arguments", "import-names", "list", "tuple", "dict", "decorator", "enum"}
    assert len(EDITS) >= 80


@pytest.mark.parametrize("context", [1, 2, 3])
def test_patch_on_its_own_base_is_exact_everywhere(context: int) -> None:
    """100 % exact: every edit, whatever its context shows (no bracket in the middle of a long signature)."""
    failures = []
    for what, edited in EDITS:
        fp = parse_patch(_diff(LINES, edited, context)).files[0]
        result = place_file(fp, MODULE, "module.py")
        verdicts = [p.verdict for p in result.placements]
        if verdicts != [Verdict.EXACT] * len(fp.hunks) or result.new_text != "\n".join(edited) + "\n":
            failures.append(f"{what}: {[(str(p.verdict), p.evidence) for p in result.placements]}")
    assert not failures, f"{len(failures)} of {len(EDITS)} edits not exact:\n" + "\n".join(failures)


def test_middle_of_a_long_signature_shows_no_bracket() -> None:
    """The case the rule is for: a hunk whose lines are all parameters, with `x: int = 1,` lines that parse as
    statements; its role is unknown, never "statement", and its exact site is taken."""
    k = next(i for i, ln in enumerate(LINES) if ln.strip() == "top_p: float = 1.0,")
    edited = LINES[: k + 1] + ["        extra: int | None = None,"] + LINES[k + 1 :]
    diff = _diff(LINES, edited, 3)
    assert "(" not in "".join(ln for ln in diff.splitlines()[3:] if ln.startswith(" "))
    result = place_file(parse_patch(diff).files[0], MODULE, "module.py")
    (p,) = result.placements
    assert p.verdict is Verdict.EXACT, p.evidence
    assert p.scope is not None and p.scope.role == "parameters"
