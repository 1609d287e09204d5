"""Scope: class/def chain, syntactic role and branch of a position, for whole files and for hunk fragments."""

from __future__ import annotations

import pytest

from vllm_compose.scope import PythonLayout, Scope, SectionIndex, hunk_intent, parse_error, scope_at

SOURCE = '''\
import os
from pkg import (
    alpha,
    beta,
)


class Engine(Base):
    """Doc with a ( bracket and a 'quote."""

    def run(
        self,
        count: int,
    ) -> None:
        table = {
            "a": 1,
        }
        names = [
            "x",
        ]
        self.call(
            count,
        )
        if count == 10:
            value = self.pick(
                table,
            )
        elif count > 10:
            value = 2
        else:
            value = 3
        text = """
        not ( code
        """
        return value[
            0
        ]
'''
LINES = SOURCE.splitlines()


def _line(text: str) -> int:
    """1-based number of the first line whose stripped text is `text`."""
    return next(i + 1 for i, ln in enumerate(LINES) if ln.strip() == text)


@pytest.mark.parametrize(
    "text, role",
    [
        ("alpha,", "import-names"),
        ("count: int,", "parameters"),
        ('"a": 1,', "dict"),
        ('"x",', "list"),
        ("count,", "call-arguments"),
        ("table,", "call-arguments"),
        ("not ( code", "string"),
        ("0", "subscript"),
        ("value = 2", "block"),
        ("import os", "module"),
    ],
)
def test_role(text: str, role: str) -> None:
    scope = scope_at(LINES, _line(text))
    assert scope is not None and scope.role == role


def test_chain_and_branch() -> None:
    s = scope_at(LINES, _line("value = 2"))
    assert s.chain == ("class Engine", "def run")
    assert s.branch == "elif count > 10"
    assert s.describe() == "Engine.run [block] in branch `elif count > 10`"
    s = scope_at(LINES, _line("value = 3"))
    assert s.branch == "else"
    assert s.headers[0] == "else|if count == 10"
    # inside the signature: the def itself encloses the position
    assert scope_at(LINES, _line("count: int,")).chain == ("class Engine", "def run")
    # inside a call in a branch: the branch of the statement that opened the call
    assert scope_at(LINES, _line("table,")).branch == "if count == 10"


def test_scope_at_none_when_file_does_not_parse() -> None:
    assert scope_at(["def f(:", "    pass"], 1) is None
    assert parse_error("def f(:\n") is not None
    assert parse_error("x = 1\n") is None


def test_layout_survives_fragments() -> None:
    """A fragment starting inside a call records the unmatched closer instead of failing."""
    lay = PythonLayout(["        b,", "    )", "    return x"])
    assert lay.unmatched_closers == [(1, ")")]


@pytest.mark.parametrize(
    "before, change, after, role, klass",
    [
        # the hunk shows only the closing parenthesis after the change: inside some parentheses
        (
            ["            batch,", "            steps,"],
            ["            extra=extra,"],
            ["        )", "", "        return x"],
            None,
            "(",
        ),
        # a closing `) -> T:` after the change: a signature
        (["        count: int,"], ["        extra: int = 0,"], ["    ) -> None:", "        pass"], "parameters", "("),
        # the opener is visible: exact role
        (["        self.call("], ["            extra,"], ["        )"], "call-arguments", "("),
        (["    names = ["], ['        "y",'], ["    ]"], "list", "["),
        # balanced context with a line only a statement can be: statement level
        (["    a = 1"], ["    b = 2"], ["    return a + b"], None, "stmt"),
        (["        self.size = size"], ["        self.extra = None"], [""], None, "stmt"),
        (["    if ready:"], ["        go()"], [], None, "stmt"),
        (["    ) -> None:"], ["        go()"], [], None, "stmt"),
        # no bracket and nothing only a statement can be: the middle of a long signature, call or display
        (
            ["        top_k: int = -1,", "        seed: int | None = None,"],
            ["        extra: int = 0,"],
            ["        device: str = 'cuda',"],
            None,
            None,
        ),
        (["            top_k=top_k,"], ["            extra=extra,"], ["            seed=seed,"], None, None),
        (['    "alpha": 1,'], ['    "extra": 2,'], ['    "beta": 3,'], None, None),
        (["    value"], ["    other"], ["    more"], None, None),
    ],
)
def test_hunk_intent_role(before, change, after, role, klass) -> None:
    intent = hunk_intent(before, change, after)
    assert (intent.role, intent.klass) == (role, klass)


def test_hunk_intent_rejects_wrong_role_and_branch() -> None:
    # a keyword argument meant inside a call, checked against a statement-level site (after the `)`)
    intent = hunk_intent(["            steps,"], ["            extra=extra,"], ["        )"])
    assert intent.accepts(Scope(("def plan",), "block")) is not None
    assert intent.accepts(Scope(("def plan",), "call-arguments")) is None
    # a parameter meant inside a signature, checked against the first statement of the body
    intent = hunk_intent(["        count: int,"], ["        extra: int = 0,"], ["    ) -> None:"])
    assert "parameters" in intent.accepts(Scope(("def run",), "block"))
    # the hunk shows its list sits in the `else` branch
    intent = hunk_intent(["        else:", "            return ["], ["                NEW,"], ["            ]"])
    assert intent.headers == ("else",)
    assert intent.accepts(Scope(role="list", headers=("if major == 10", "def f"))) is not None
    assert intent.accepts(Scope(role="list", headers=("else|if major == 10", "def f"))) is None


def test_hunk_intent_unknown_role_is_no_mismatch() -> None:
    """A role the hunk cannot tell rejects no site: `x: int = 1,` parses as a statement only by accident."""
    intent = hunk_intent(["        top_k: int = -1,"], ["        extra: int = 0,"], ["        seed: int = 0,"])
    assert (intent.role, intent.klass) == (None, None)
    assert "role unknown" in intent.evidence
    for role in ("parameters", "call-arguments", "block", "list"):
        assert intent.accepts(Scope(role=role)) is None
    # what a statement shows still rejects a site inside brackets
    intent = hunk_intent(["        return x"], ["        extra = 0"], [])
    assert intent.klass == "stmt" and "return x" in intent.evidence
    assert intent.accepts(Scope(role="parameters")) is not None


def test_hunk_intent_unknown_inside_docstring() -> None:
    """A hunk that starts inside a docstring cannot tell its role; it then constrains nothing."""
    intent = hunk_intent(["    Some text.", '    """'], ["    x = 1"], ["    y = 2"])
    assert intent.klass is None
    assert intent.accepts(Scope(role="call-arguments")) is None


def test_hunk_intent_unknown_after_a_closing_triple_quote() -> None:
    """A hunk that starts inside a docstring whose last line ends it after text (``...dtype.\"\"\"``): that first
    triple quote closes a string as likely as it opens one, so the role is unknown; after an ``=`` or ``(`` it
    opens one."""
    intent = hunk_intent(
        ['    for the state will be set by dtype."""', '    mode: str = "none"'],
        ["    extra = None"],
        ['    """The mode.'],
    )
    assert intent.klass is None and "role unknown" in intent.evidence
    assert intent.accepts(Scope(role="block")) is None
    intent = hunk_intent(['    text = """', "    Some words"], ["    more words"], ['    """'])
    assert intent.role == "string"


def test_def_and_class_headers_are_keyed_by_kind_and_name() -> None:
    """A signature or base-class edit does not change which def/class encloses a position."""
    lay = PythonLayout(["class Pool(Base, Mixin):", "    async def take(self, n: int = 1):", "        return n"])
    assert lay.scope(2).headers == ("def take", "class Pool")
    intent = hunk_intent(["def greet(name, *, loud=False):", "    text = name"], ["    text += '!'"], [])
    assert intent.headers == ("def greet",)
    assert intent.accepts(Scope(headers=("def greet",))) is None
    assert intent.accepts(Scope(headers=("def farewell",))) is not None


def test_hunk_intent_compares_edited_headers_by_their_pre_image() -> None:
    """A header the hunk rewrites is required of the target in its old form; one the hunk adds is not required."""
    before = ["    if handler is None or late:", "        miss()", "    else:", "        hit()"]
    # the `if` line is the hunk's rewrite of `if handler is None:`; the rest is context
    pre = ["    if handler is None:", "        miss()", "    else:", "        hit()"]
    intent = hunk_intent(before, ["        count()"], [], pre)
    assert intent.headers == ("else|if handler is None",)
    assert intent.accepts(Scope(headers=("else|if handler is None", "def route"))) is None
    assert intent.accepts(Scope(headers=("else|if handler is None or late", "def route"))) is not None
    # the same fragment without pre-image texts compares the rewritten text (what the target cannot have)
    assert hunk_intent(before, ["        count()"], []).headers == ("else|if handler is None or late",)
    # a header the hunk adds outright (no pre-image line) is not required: its else matches any owner
    intent = hunk_intent(before, ["        count()"], [], [None, "        miss()", "    else:", "        hit()"])
    assert intent.headers == ("else",)
    with pytest.raises(ValueError):
        hunk_intent(before, [], [], pre[:1])


def test_lazy_layout_answers_like_the_eager_one() -> None:
    """A lazy layout lexes only as far as asked; asked in any order, it answers as a fully lexed one does."""
    lines = LINES * 8  # long enough that lexing stops well before the end
    eager = PythonLayout(lines)
    order = list(range(len(lines), -1, -3)) + list(range(len(lines) + 1))
    lazy = PythonLayout(lines, lazy=True)
    assert lazy._lexed == 0
    lazy.scope(3)
    assert lazy._lexed < len(lines)
    for i in order:
        assert lazy.scope(i) == eager.scope(i), i
        assert lazy.role_at(i) == eager.role_at(i), i
    assert (lazy.code_start, lazy.indent, lazy.unmatched_closers) == (
        eager.code_start,
        eager.indent,
        eager.unmatched_closers,
    )


def test_section_names() -> None:
    """The def/class a hunk starting at a line would name in its `@@` section (python and default driver)."""
    idx = SectionIndex(LINES)
    run_body = LINES.index("        table = {")
    assert idx.names_at(run_body) == ["run", "Engine"]
    assert idx.names_at(0) == []
