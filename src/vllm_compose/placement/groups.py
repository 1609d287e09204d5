"""A hunk's change groups: the runs of removed and added lines, each with what the hunk's own lines imply about
its site (`scope.HunkIntent`)."""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..patchfile import Hunk
from ..scope import HunkIntent, hunk_intent
from .target import strip_cr


@dataclass
class Group:
    """A run of removed/added lines: removes pre-image[a:b], adds `added` in their place."""

    a: int
    b: int
    added: list[str]
    intent: HunkIntent | None = None


def hunk_groups(hunk: Hunk) -> list[Group]:
    groups: list[Group] = []
    pre = 0
    cur: Group | None = None
    for op, text in hunk.lines:
        if op == " ":
            cur = None
            pre += 1
            continue
        if cur is None:
            cur = Group(pre, pre, [])
            groups.append(cur)
        if op == "-":
            pre += 1
            cur.b = pre
        else:
            cur.added.append(text)
    return groups


def attach_intents(hunk: Hunk, groups: list[Group]) -> None:
    """Attach to each group what the hunk's own lines imply about its site (Python only)."""
    lines = hunk.lines
    pos = 0
    spans = []
    while pos < len(lines):
        if lines[pos][0] == " ":
            pos += 1
            continue
        start = pos
        while pos < len(lines) and lines[pos][0] != " ":
            pos += 1
        spans.append((start, pos))
    # What each post-image line was in the pre-image: context is itself, an added line is the removed line of
    # its run that it rewrites (if any), so a header the hunk edits is compared with the target by its old text.
    pre_of: list[str | None] = [t if op == " " else None for op, t in lines]
    for s, e in spans:
        removed = [t for op, t in lines[s:e] if op == "-"]
        used = [False] * len(removed)
        for k in range(s, e):
            op, text = lines[k]
            if op != "+":
                continue
            sig = _line_sig(text)
            for r, old in enumerate(removed):
                if not used[r] and _line_sig(old) == sig:
                    used[r] = True
                    pre_of[k] = old
                    break
    for g, (s, e) in zip(groups, spans, strict=True):
        post_before = [t for op, t in lines[:s] if op != "-"]
        before_pre = [pre_of[k] for k in range(s) if lines[k][0] != "-"]
        change = [t for op, t in lines[s:e] if op == "+"] or [t for op, t in lines[s:e] if op == "-"]
        after = [t for op, t in lines[e:] if op != "-"]
        g.intent = hunk_intent(post_before, change, after, before_pre)


def _line_sig(line: str) -> tuple[int, str]:
    """Indentation and leading keyword of a line: an added line with the same signature as a removed line of the
    same change rewrites it (``if a:`` -> ``if a and b:``, ``def f(x):`` -> ``def f(x, y):``)."""
    line = strip_cr(line)
    body = line.lstrip()
    words = re.split(r"[\s:(\[{=.,]", body, maxsplit=2)
    word = words[1] if words[0] == "async" and len(words) > 1 else words[0]
    return len(line[: len(line) - len(body)].expandtabs(8)), word
