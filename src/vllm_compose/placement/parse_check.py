"""The re-parse of the result: a Python file the merged hunks leave unparsable (when the target parsed) turns the
hunks whose new lines hold the error into conflicts, and is assembled again without them (all placed hunks, when the
error lies outside every hunk).  Only the statements the hunks touched are compiled, when that is equivalent."""

from __future__ import annotations

import re

from ..scope import PythonLayout, parse_error
from ..verdicts import Verdict
from .files import assemble, to_conflict
from .outcome import Placement
from .target import Target, indent_of, strip_cr


def assemble_parsable(
    tgt: Target, final_nl: bool, placements: list[Placement], target_text: str, path: str
) -> tuple[str, list[tuple[Placement, tuple[int, int]]], str | None]:
    """(text, each applied placement's 1-based line span in it, "line N: message" or None): the placed hunks
    assembled; for Python, each time the result no longer parses, the hunks whose lines hold the error (all of
    them, when it is outside every hunk) turned into conflicts and the file assembled again."""
    text, regions = assemble(tgt, final_nl, placements)
    perr = None
    if tgt.is_py:
        for _ in range(len(placements) + 1):
            err = _result_parse_error(tgt, placements, text, path)
            if err is None:
                break
            if perr is None and parse_error(_strip_all_cr(target_text), path) is not None:
                break  # the target did not parse to begin with: not the hunks' doing
            line, msg = err
            perr = f"line {line}: {msg}"
            guilty = [p for p, (s, e) in regions if s <= line <= max(e, s)]
            if not guilty:
                guilty = [p for p, _ in regions]
            for p in guilty:
                where = f"the file no longer parses with this hunk: line {line}: {msg}"
                to_conflict(p, where)
            text, regions = assemble(tgt, final_nl, placements)
    return text, regions, perr


#: first words of clauses that continue a compound statement: such a line never starts a statement
_CONTINUATIONS = frozenset({"else", "elif", "except", "finally"})


def _result_parse_error(tgt: Target, placements: list[Placement], text: str, path: str) -> tuple[int, str] | None:
    """The first syntax error of the assembled file `text`, checked by compiling only the statements the hunks
    touched when that is equivalent (compiling a large module costs tens of milliseconds per check).

    The target parses (else `place_file` ignores the answer).  Each applied hunk lies inside a run of whole target
    statements [a, b) — top-level statements, or member statements of the classes (only classes) that enclose it,
    compiled inside stand-in ``class`` headers, followed by a stand-in for the statement after the run.  Runs that
    meet are joined.  Target lines outside the runs are unchanged complete statements, so the file parses exactly
    when every run does — but for the errors that depend on other statements: a file with a ``global``/
    ``nonlocal`` statement, or a ``from __future__`` import after the first hunk, is compiled whole.  An error
    found in a run is confirmed, and its line taken, by compiling the whole file."""
    applied = [p for p in placements if p.verdict is not Verdict.CONFLICT and p.replacement is not None]
    last_future, scoped = tgt.statement_sensitive
    if applied and not scoped and min(p.start for p in applied) > last_future:
        groups = [[p] for p in sorted(applied, key=lambda p: (p.start, p.end))]
        runs = [_statement_run(tgt, g) for g in groups]
        # runs that overlap or touch are checked as one (a hunk may edit the header of another one's class)
        joined = True
        while joined:
            joined = False
            for x in range(len(runs)):
                for y in range(x + 1, len(runs)):
                    if runs[x][0] <= runs[y][1] and runs[y][0] <= runs[x][1]:
                        groups[x] = groups[x] + groups.pop(y)
                        runs.pop(y)
                        runs[x] = _statement_run(tgt, groups[x])
                        joined = True
                        break
                if joined:
                    break
        for _, _, head, body in runs:
            chunk = "\n".join(head + [strip_cr(ln) for ln in body]) + "\n"
            if any(w in chunk for w in ("__future__", "global", "nonlocal")) or parse_error(chunk, path) is not None:
                break
        else:
            return None
    return parse_error(_strip_all_cr(text), path)


def _statement_run(tgt: Target, applied: list[Placement]) -> tuple[int, int, list[str], list[str]]:
    """(start, end, stand-in headers, result lines) of the smallest run [start, end) of whole target statements
    holding the given hunks: member statements of the classes that enclose the first one, or top-level ones."""
    lay = tgt.layout
    n = len(tgt.lines)
    lo = min(p.start for p in applied)
    hi = max(max(p.end, p.start) for p in applied)
    lay.ensure(min(lo, n))
    # the member level of the classes (only classes) that enclose the statement holding `lo`
    j = min(lo, n - 1)
    while j > 0 and not lay.code_start[j]:
        j -= 1
    outer_first = list(reversed(lay.header_lines(j, lay.indent[j]))) if j >= 0 and lay.code_start[j] else []
    classes = 0
    while classes < len(outer_first) and tgt.lines[outer_first[classes]].lstrip().startswith("class "):
        classes += 1
    level = 0
    if classes:
        level = lay.indent[outer_first[classes]] if classes < len(outer_first) else lay.indent[j]
    for k in [level, 0] if level else [0]:
        a = _statement_start(lay, lo, k)
        if a is None:
            continue
        head: list[str] = []
        if k:
            heads = lay.header_lines(a, k)
            if not heads or any(not tgt.lines[h].lstrip().startswith("class ") for h in heads):
                continue
            head = [indent_of(strip_cr(tgt.lines[h])) + "class _:" for h in reversed(heads)]
            new_lines = [ln for p in applied for ln in p.replacement]
            if any(ln.strip() and len(indent_of(ln).expandtabs(8)) < k for ln in new_lines):
                continue  # an added line leaves the class body: the run would not bound its effect
            old_lines = [tgt.lines[i] for p in applied for i in range(p.start, min(p.end, n))]
            if any(ln.strip() and len(indent_of(ln).expandtabs(8)) < k for ln in old_lines):
                continue  # a replaced line is outside the class body (e.g. the header of a later top-level block)
        b = _statement_end(lay, hi, k, n)
        body: list[str] = []
        pos = a
        for p in sorted(applied, key=lambda p: (p.start, p.end)):
            body.extend(tgt.lines[pos : p.start])
            body.extend(p.replacement)
            pos = p.end
        body.extend(tgt.lines[pos:b])
        if b < n:
            # a stand-in for the statement that follows: its indentation must close the run's blocks as it does
            # in the file ("unindent does not match" is an error of the line after the run)
            body.append(indent_of(strip_cr(tgt.lines[b])) + "pass")
        return a, b, head, body
    raise AssertionError("a top-level run always exists")  # k == 0 never continues


def _statement_start(lay: PythonLayout, lo: int, k: int) -> int | None:
    """The last line at or before `lo` starting a statement at indentation k inside the same block (0: the start
    of the file when k is 0); None when the block's header comes first."""
    j = min(lo, len(lay.lines) - 1)
    while j >= 0:
        if lay.code_start[j]:
            ind = lay.indent[j]
            if ind < k:
                return None
            if ind == k and _starts_statement(lay, j):
                return j
        j -= 1
    return 0 if k == 0 else None


def _starts_statement(lay: PythonLayout, j: int) -> bool:
    """Whether code line j starts a statement: not a continuing clause (``else:``), not a decorated def/class."""
    if _first_word(lay.lines[j]) in _CONTINUATIONS:
        return False
    p = j - 1
    while p >= 0 and not lay.code_start[p]:
        p -= 1
    return p < 0 or not (lay.lines[p].lstrip().startswith("@") and lay.indent[p] == lay.indent[j])


def _statement_end(lay: PythonLayout, hi: int, k: int, n: int) -> int:
    """The first line at or after `hi` that starts a statement at indentation k or less, or ends k's block."""
    for j in range(hi, n):
        lay.ensure(j)
        if lay.code_start[j]:
            ind = lay.indent[j]
            if ind < k or (ind == k and _starts_statement(lay, j)):
                return j
    return n


def _first_word(line: str) -> str:
    return re.split(r"[\s:(]", line.strip(), maxsplit=1)[0]


def _strip_all_cr(text: str) -> str:
    return text.replace("\r\n", "\n")
