"""Property tests: a patch made from a random edit of a random file, applied to its own base, is `exact` and
changes nothing else (the result is exactly the edited file)."""

from __future__ import annotations

import difflib

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from vllm_compose.patchfile import parse_patch
from vllm_compose.placement import Verdict, place_file

# Lines drawn from a small vocabulary so that repeats (the hard case for placement) are common; a numbered tail
# makes most lines distinct, as in real code, while `_COMMON` lines repeat freely.
_COMMON = ["", "    pass", "    )", "        return None", "else:", "    x = 1"]
_line = st.one_of(
    st.sampled_from(_COMMON),
    st.builds(lambda w, n: f"{w}_{n} = compute({n})", st.sampled_from(["alpha", "beta", "gamma"]), st.integers(0, 400)),
)
_file = st.lists(_line, min_size=1, max_size=60)


@st.composite
def _edited(draw):
    """A base file and an edited copy: a few replacements, insertions and deletions at random places."""
    base = draw(_file)
    edited = list(base)
    for _ in range(draw(st.integers(1, 4))):
        kind = draw(st.sampled_from(["insert", "delete", "replace"]))
        at = draw(st.integers(0, len(edited)))
        new = draw(st.lists(_line, min_size=1, max_size=3))
        if kind == "insert" or not edited:
            edited[at:at] = new
        elif kind == "delete":
            at = min(at, len(edited) - 1)
            del edited[at : at + draw(st.integers(1, 3))]
        else:
            at = min(at, len(edited) - 1)
            edited[at : at + 1] = new
    return base, edited


def _diff(base: list[str], edited: list[str], context: int) -> str:
    body = difflib.unified_diff(
        [ln + "\n" for ln in base], [ln + "\n" for ln in edited], "a/f.txt", "b/f.txt", n=context
    )
    return "".join(body)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_edited(), st.integers(1, 4))
def test_patch_on_its_own_base_is_exact_and_touches_nothing_else(case, context):
    base, edited = case
    diff = _diff(base, edited, context)
    if not diff:
        return
    fp = parse_patch(diff).files[0]
    base_text = "\n".join(base) + "\n"
    result = place_file(fp, base_text, "f.txt")
    # repeated context may make a hunk ambiguous; then it must say so, never guess
    for p in result.placements:
        assert p.verdict in (Verdict.EXACT, Verdict.CONFLICT), (p.hunk.index, p.verdict, p.evidence)
        if p.verdict is Verdict.CONFLICT:
            assert "ambiguous" in p.evidence, p.evidence
    if all(p.verdict is Verdict.EXACT for p in result.placements):
        assert result.new_text == "\n".join(edited) + ("\n" if edited else "")


_distinct_file = st.lists(st.integers(0, 10_000), min_size=1, max_size=80, unique=True).map(
    lambda ns: [f"value_{n} = compute({n})" for n in ns]
)


@settings(max_examples=200, deadline=None)
@given(_distinct_file, st.data(), st.integers(1, 3))
def test_distinct_lines_always_exact(base, data, context):
    """With no repeated line in the file, every hunk is found: always `exact`, result == edited file."""
    edited = list(base)
    at = data.draw(st.integers(0, len(edited)))
    edited[at:at] = ["inserted_line = True"]
    if data.draw(st.booleans()) and len(edited) > 2:
        k = data.draw(st.integers(0, len(edited) - 1))
        if edited[k] != "inserted_line = True":
            del edited[k]
    diff = _diff(base, edited, context)
    fp = parse_patch(diff).files[0]
    result = place_file(fp, "\n".join(base) + "\n", "f.py")
    assert [p.verdict for p in result.placements] == [Verdict.EXACT] * len(fp.hunks), [
        p.evidence for p in result.placements
    ]
    assert result.new_text == "\n".join(edited) + "\n"


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_file, st.data(), st.integers(1, 3))
def test_random_drift_never_misplaces(base, data, context):
    """Drift the target away from the patch's base (foreign lines inserted, lines deleted, outside the hunk's
    context): the hunk lands where the same edit lands in the drifted file, or conflicts — it is never misplaced."""
    # the edit: one new, distinct line inserted at gap `at` of the base
    at = data.draw(st.integers(0, len(base)))
    new_line = "inserted_marker = 1"
    edited = base[:at] + [new_line] + base[at:]
    # the drift, tracked per base line so the ground truth is known: None = deleted, else the lines it becomes
    drifted: list[list[str]] = [[ln] for ln in base]
    # drift only outside the hunk's context: a context line deleted while an identical line survives elsewhere
    # fools any context-only placement (GNU patch included); that is what the section/scope checks are for
    outside = [k for k in range(len(base)) if not (at - context - 1 <= k < at + context)]
    if not outside:
        return
    for _ in range(data.draw(st.integers(1, 4))):
        k = data.draw(st.sampled_from(outside))
        if data.draw(st.booleans()):
            drifted[k] = drifted[k] + [f"foreign_{data.draw(st.integers(0, 99))} = 0"]
        else:
            drifted[k] = []
    truth_lines: list[str] = []
    for i, lines in enumerate(drifted):
        if i == at:
            truth_lines.append(new_line)
        truth_lines.extend(lines)
    if at == len(base):
        truth_lines.append(new_line)
    target_lines = [ln for lines in drifted for ln in lines]
    diff = _diff(base, edited, context)
    fp = parse_patch(diff).files[0]
    result = place_file(fp, "\n".join(target_lines) + "\n" if target_lines else "", "f.txt")
    if any(p.verdict is Verdict.CONFLICT for p in result.placements):
        return
    assert result.new_text == "\n".join(truth_lines) + "\n", [(p.verdict, p.evidence) for p in result.placements]


_PY_BASE = '''\
"""Module doc."""
from __future__ import annotations

import os_0


class Alpha_1(Base):
    """Doc of alpha."""

    size_2 = 3

    def first_3(self, x):
        if x:
            return x + 4
        else:
            return 5

    @property
    def second_6(self):
        return self.size_2


def helper_7(y):
    try:
        return y + 8
    except ValueError:
        return 9


class Outer_10:
    class Inner_11:
        def deep_12(self):
            return 13

    def shallow_14(self):
        return 15


if os_0:
    flag_16 = 17
else:
    flag_16 = 18
'''.splitlines()

_SNIPPETS = [
    "value_{n} = {n}",
    "def fn_{n}(self):",
    "return {n}",
    "else:",
    "x_{n} = (",
    ")",
    "pass  # {n}",
    '"""{n}',
    "global g_{n}",
    "from __future__ import division  # {n}",
    "class K_{n}:",
    "elif x_{n}:",
    "@decorator_{n}",
    "yield {n}",
    "except E_{n}:",
]


@st.composite
def _py_edit(draw):
    edited = list(_PY_BASE)
    for k in range(draw(st.integers(1, 3))):
        at = draw(st.integers(0, len(edited)))
        new = []
        for m in range(draw(st.integers(1, 2))):
            text = draw(st.sampled_from(_SNIPPETS)).format(n=100 + 10 * k + m)
            new.append(" " * draw(st.sampled_from([0, 4, 8, 12])) + text)
        if draw(st.booleans()) and at < len(edited):
            edited[at : at + 1] = new
        else:
            edited[at:at] = new
    return edited


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_py_edit(), st.integers(1, 3))
def test_parse_check_agrees_with_compiling_the_whole_file(edited, context):
    """Placement checks a Python result by compiling only the statements the hunks touched; on a file of classes,
    methods and top-level statements, edited at random (valid and invalid lines at any depth), that check says
    exactly what compiling the whole edited file says."""
    diff = _diff(_PY_BASE, edited, context).replace("f.txt", "f.py")
    if not diff:
        return
    fp = parse_patch(diff).files[0]
    result = place_file(fp, "\n".join(_PY_BASE) + "\n", "f.py")
    if any(p.verdict is Verdict.CONFLICT and "no longer parses" not in p.evidence for p in result.placements):
        return  # refused for another reason (a `)` at statement level is out of scope): not this property's case
    whole = "\n".join(edited) + "\n"
    try:
        compile(whole, "f.py", "exec", dont_inherit=True)
        parses = True
    except SyntaxError:
        parses = False
    assert (result.parse_error is None) == parses, (result.parse_error, whole)
    if parses:
        assert all(p.verdict is Verdict.EXACT for p in result.placements), [p.evidence for p in result.placements]
        assert result.new_text == whole
