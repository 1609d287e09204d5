"""Syntax anchors: what a hunk's own lines say about its site, and what a file has at a line, compared by identity.

This is the audit's ruler for *where a hunk belongs*. It shares no code with the placement engine (`placement/`,
`scope.py`): the engine scores candidate sites by how much of the hunk's text agrees; this module asks what the
code around the change *is*, and whether the landing is the same thing.

Both sides go through one description, `Outline`, built from parso's tokens (parso is the error-recovering parser
jedi uses on code being typed: its tokenizer lexes strings, f-strings, comments and continuation lines, and keeps
going on a fragment that starts inside brackets or a block). For every physical line the outline records:

- the brackets open at its start, each named by its opener (`Container`): the callee of a call (`call
  self.propose`), the def whose parameters they are (`params forward`), the name a display is assigned to (`list
  sparse_tail`, `list return`), the module of an import (`import vllm.config`);
- the line's *key*: what the line starts, by identity rather than text (`x=` for an assignment or a keyword
  argument, `x:` for a parameter, `self.foo(` for a call statement, `AttentionBackendEnum.FLASHMLA`, `def name`,
  `if cond`). A keyword argument whose value drifted keeps its key;
- the def/class headers that enclose it, by indentation.

A hunk's `Anchor` for one change group comes from the outline of its own lines (the post-image, or the pre-image
for a pure removal): the innermost container (named when the hunk shows the opener; else only "some brackets" when
a closer without opener follows, or statement level), the siblings it shows in that container before and after the
change (keys), the def/class headers it shows above it, and its ``@@`` section. The landing's `Spot` is the same
description computed on the whole patched file at the change's line. `judge` then says:

- **contradicted** when the landing is provably another site: the hunk's change is inside brackets and it landed at
  statement level (or the reverse, when the hunk shows the block's header); the hunk names its container and the
  landing's is another; a sibling the hunk shows in the same container is elsewhere in the enclosing def and not in
  the landing's container (the container was split or the change went into a look-alike); a def/class the hunk shows
  or names in its section exists in the file but does not enclose (or precede) the landing;
- **confirmed** when something the hunk shows is the same thing at the landing (its container, its nearest sibling
  before or after, another sibling, the block header);
- **unconfirmed** otherwise.

An anchor the file no longer has is no evidence either way: the target may have renamed or deleted it. Only an
anchor found *elsewhere* contradicts, with one exception (`vanished_anchor`, which the audit asks of an insertion
the anchors confirm): the element the hunk inserts after, when nothing in the file names it any more, was removed
by the release outright, and the insertion has no site at all.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Collection, Iterable
from dataclasses import dataclass, field

from parso.python.tokenize import tokenize
from parso.utils import parse_version_string

_VERSION = parse_version_string("3.12")
_OPEN = {"(": ")", "[": "]", "{": "}"}
_CLOSE = {")": "(", "]": "[", "}": "{"}
_BLOCK_KEYWORDS = frozenset(
    {"if", "elif", "else", "for", "while", "with", "try", "except", "finally", "match", "case", "async"}
)
_STATEMENT_KEYWORDS = frozenset(
    {"return", "yield", "raise", "pass", "break", "continue", "assert", "del", "global", "nonlocal", "await"}
)
#: sites compared per change group (nearest to the landing first)
_MAX_CANDIDATES = 24
#: keys that say too little to confirm or contradict a site on their own
_GENERIC_KEYS = frozenset({"else:", "try:", "finally:", "return", "pass", "break", "continue", "raise", "yield"})


@dataclass(frozen=True)
class Container:
    """The innermost construct around a position. `kind`: call, params, bases, subscript, list, tuple, dict, import,
    paren (after a keyword: ``if (``), block; or brackets-( / brackets-[ / brackets-{ when only a closer shows them.
    `name`: its identity (callee, def name, assignment target, import module, block header key; "" unknown)."""

    kind: str
    name: str = ""

    @property
    def bracketed(self) -> bool:
        return self.kind != "block"

    @property
    def named(self) -> bool:
        return bool(self.name) and not self.kind.startswith("brackets")

    def describe(self) -> str:
        if self.kind == "block":
            if self.name.startswith(("def ", "class ")):
                return f"the body of `{self.name}`"
            return f"the block of `{self.name}`" if self.name else "statement level"
        if self.kind.startswith("brackets"):
            return f"inside `{self.kind[-1]}` brackets"
        if self.kind in ("list", "tuple", "dict") and self.name:
            return f"the {self.kind} returned" if self.name == "return" else f"the {self.kind} `{self.name}`"
        label = {"params": "parameters of", "call": "arguments of", "bases": "bases of", "import": "import from"}
        return f"{label.get(self.kind, self.kind)} `{self.name}`" if self.name else f"a {self.kind}"


@dataclass
class _Line:
    depth: int = 0  # bracket depth at the line's start, relative to the text's start (negative: closed above it)
    openers: tuple[tuple[Container, int], ...] = ()  # brackets opened in the text and open at the line's start
    indent: int | None = None  # column of the line's first token; None for a blank or comment-only line
    key: str | None = None  # what the line starts (None: blank, comment, inside a string, or a closer)
    closer: str | None = None  # the line starts with this closing bracket
    in_string: bool = False  # the line is inside a multi-line string
    header: str | None = None  # "def name" / "class Name" when the line is such a header
    comment: str | None = None  # a comment-only line: "#" and its text (a sibling by identity, never a boundary)
    comment_indent: int | None = None


class Outline:
    """Per physical line of a text: its brackets, key, indentation and def/class header (see the module doc)."""

    def __init__(self, lines: list[str]) -> None:
        self.lines = [_Line() for _ in lines]
        self.text = lines
        self._headers: dict[str, list[int]] | None = None
        self._rows: dict[str, list[int]] | None = None
        self.n = len(lines)
        self._build("\n".join(lines) + "\n")
        for text, line in zip(lines, self.lines, strict=True):
            stripped = text.strip()
            if line.indent is None and not line.in_string and stripped.startswith("#") and len(stripped) > 1:
                line.comment = "#" + " ".join(stripped[1:].split())
                line.comment_indent = len(text) - len(text.lstrip())

    def _build(self, code: str) -> None:
        stack: list[tuple[Container, int]] = []
        depth = 0
        fstring = 0
        logical: list = []  # tokens of the current logical line, for naming openers
        by_line: dict[int, list] = {}
        for tok in tokenize(code, version_info=_VERSION):
            kind = tok.type.name
            row = tok.start_pos[0] - 1
            if row >= self.n:
                break
            if kind in ("INDENT", "DEDENT", "ERROR_DEDENT", "ENDMARKER"):
                continue
            if kind == "NEWLINE":
                logical = []
                continue
            end_row = row + tok.string.count("\n")
            for r in range(row + 1, min(end_row, self.n - 1) + 1):
                self.lines[r].in_string = True
            if kind == "FSTRING_START":
                fstring += 1
            elif kind == "FSTRING_END":
                fstring = max(0, fstring - 1)
            line = self.lines[row]
            if row not in by_line:
                by_line[row] = []
                line.depth = depth
                line.openers = tuple(stack)
                line.indent = tok.start_pos[1]
                if kind == "OP" and tok.string in _CLOSE:
                    line.closer = tok.string
            by_line[row].append(tok)
            if kind == "OP" and not fstring:
                if tok.string in _OPEN:
                    stack.append((_name_opener(logical, tok.string), row))
                    depth += 1
                elif tok.string in _CLOSE:
                    if stack:
                        stack.pop()
                    depth -= 1
            logical.append(tok)
        for row, toks in by_line.items():
            line = self.lines[row]
            if line.closer is None and not (line.in_string and toks[0].start_pos[1] == 0 and row > 0):
                line.key = _key(toks)
            if line.key and (line.key.startswith("def ") or line.key.startswith("class ")):
                line.header = line.key
        self._floor = []
        low = 0
        for line in self.lines:
            low = min(low, line.depth)
            self._floor.append(low)
        # lines that carry no token (blank, comment-only) take the depth and brackets of the next line with one
        nxt = _Line()
        for row in range(self.n - 1, -1, -1):
            line = self.lines[row]
            if row not in by_line:
                line.depth, line.openers = nxt.depth, nxt.openers
            else:
                nxt = line

    # ----------------------------------------------------------------------------------------------------------
    # what encloses a line

    def chain(self, at: int) -> list[str]:
        """The def/class headers enclosing line `at` (outermost first), by indentation of the statements above."""
        indent = self._statement_indent(at)
        found: list[str] = []
        for r in range(min(at, self.n) - 1, -1, -1):
            line = self.lines[r]
            if line.indent is None or line.key is None or line.in_string or line.depth != self._base(r):
                continue
            if indent is None or line.indent < indent:
                if line.header:
                    found.append(line.header)
                indent = line.indent
                if indent == 0:
                    break
        return found[::-1]

    def header_before(self, at: int) -> str | None:
        """The nearest def/class header above line `at` at any indentation (git's python diff driver)."""
        for r in range(min(at, self.n) - 1, -1, -1):
            if self.lines[r].header and not self.lines[r].in_string:
                return self.lines[r].header
        return None

    def rows_of(self, key: str) -> list[int]:
        """The lines whose key (or comment) is `key`."""
        if self._rows is None:
            rows: dict[str, list[int]] = {}
            for r, line in enumerate(self.lines):
                k = line.key if line.key is not None else line.comment
                if k is not None:
                    rows.setdefault(k, []).append(r)
            self._rows = rows
        return self._rows.get(key, [])

    def headers(self) -> dict[str, list[int]]:
        """Every def/class header of the text, by key, with its lines."""
        if self._headers is not None:
            return self._headers
        out: dict[str, list[int]] = {}
        for r, line in enumerate(self.lines):
            if line.header and not line.in_string:
                out.setdefault(line.header, []).append(r)
        self._headers = out
        return out

    def def_range(self, at: int) -> tuple[int, int]:
        """Lines of the innermost def/class around `at` (the whole text when there is none)."""
        chain_rows = [r for r in range(min(at, self.n) - 1, -1, -1) if self.lines[r].header]
        enclosing = self.chain(at)
        if not enclosing:
            return 0, self.n
        target = enclosing[-1]
        start = next((r for r in chain_rows if self.lines[r].header == target), 0)
        indent = self.lines[start].indent or 0
        end = start + 1
        while end < self.n:
            line = self.lines[end]
            if line.indent is not None and line.key and line.depth == self._base(end) and line.indent <= indent:
                break
            end += 1
        return start, end

    def _base(self, r: int) -> int:
        """The depth of statement level at line `r`: 0 in a whole file; in a fragment, the lowest depth reached."""
        return self._floor[min(r, self.n - 1)] if self.n else 0

    def _statement_indent(self, at: int) -> int | None:
        """The indentation of the statement that line `at` belongs to (the line that opened its outermost bracket)."""
        if at >= self.n:
            return None
        line = self.lines[at]
        if line.openers:
            return self.lines[line.openers[0][1]].indent
        return line.indent

    # ----------------------------------------------------------------------------------------------------------
    # the container of a position, and its siblings

    def container(self, at: int, span: int, indent: int | None = None) -> tuple[Container, int, int, int]:
        """The container of the change at lines [at, at+span) (`indent`: its statement indentation): the container,
        the depth of its elements, and the line range [lo, hi) in which its siblings are looked for."""
        line = self.lines[at] if at < self.n else _Line()
        depth = line.depth
        if line.openers:
            c, opened = line.openers[-1]
            hi = at + span
            while hi < self.n and not (
                self.lines[hi].depth < depth or (self.lines[hi].closer and self.lines[hi].depth == depth)
            ):
                hi += 1
            return c, depth, opened + 1, hi
        # no opener shown: a closer below that takes the depth under this line's means hidden brackets
        for r in range(at + span, self.n):
            other = self.lines[r]
            if other.closer and other.depth == depth:
                return Container(f"brackets-{_CLOSE[other.closer]}"), depth, 0, r
            if other.depth < depth:
                break
            if other.indent is not None and line.indent is not None and other.key and other.indent < line.indent:
                break
        # statement level: the block of the header above
        indent = line.indent if indent is None else indent
        lo = at
        name = ""
        while lo > 0:
            prev = self.lines[lo - 1]
            if prev.key and prev.depth == depth and prev.indent is not None and indent is not None:
                if prev.indent < indent:
                    head = prev.key.split(" ", 1)[0].rstrip(":")
                    name = prev.key if head in _BLOCK_KEYWORDS or head in ("def", "class") else ""
                    break
            lo -= 1
        hi = at + span
        while hi < self.n:
            nxt = self.lines[hi]
            if nxt.key and nxt.depth == depth and nxt.indent is not None and indent is not None and nxt.indent < indent:
                break
            hi += 1
        return Container("block", name), depth, lo, hi

    def siblings(self, lo: int, hi: int, depth: int, indent: int | None, skip: range) -> list[tuple[int, str]]:
        """The element lines (line, key) at `depth` in [lo, hi), outside `skip`; at statement level (`indent`
        given) only the statements at that indentation."""
        out = []
        for r in range(lo, hi):
            line = self.lines[r]
            if r in skip or line.in_string or line.depth != depth:
                continue
            if line.key is not None:
                if indent is not None and line.indent != indent:
                    continue
                out.append((r, line.key))
            elif line.comment is not None and (indent is None or line.comment_indent == indent):
                out.append((r, line.comment))
        return out


def outline(lines: list[str]) -> Outline:
    """The outline of a text (its lines, without line ends)."""
    return Outline(lines)


def _dotted_before(toks: list) -> str:
    """The dotted name that ends the token list (``self.propose`` in ``x = self.propose``), or ""."""
    parts: list[str] = []
    i = len(toks) - 1
    while i >= 0:
        t = toks[i]
        if t.type.name == "NAME":
            parts.append(t.string)
            if i > 0 and toks[i - 1].string == ".":
                i -= 2
                continue
        break
    return ".".join(reversed(parts))


def _name_opener(logical: list, char: str) -> Container:
    """Name the bracket `char` from the tokens of its logical line before it."""
    prev = logical[-1] if logical else None
    if prev is not None and prev.type.name == "NAME" and len(logical) >= 2 and logical[-2].string == "def":
        return Container("params", prev.string)
    if prev is not None and prev.type.name == "NAME" and len(logical) >= 2 and logical[-2].string == "class":
        return Container("bases", prev.string)
    if prev is not None and prev.string == "import" and char == "(":
        mod = [t.string for t in logical[1:-1]] if logical and logical[0].string == "from" else []
        return Container("import", "".join(mod))
    if prev is not None and (prev.type.name == "NAME" or prev.string in (")", "]")) and prev.string not in _KEYWORDS:
        callee = _dotted_before(logical) if prev.type.name == "NAME" else ""
        return Container("call" if char == "(" else ("subscript" if char == "[" else "dict"), callee)
    kind = {"(": "tuple", "[": "list", "{": "dict"}[char]
    if prev is None:
        return Container(kind)
    if prev.string in ("=", ":") and len(logical) >= 2:
        # `target = [`, `name=[` (a keyword argument), `"key": [`
        target = _dotted_before(logical[:-1]) or logical[-2].string
        return Container(kind, target)
    if prev.type.name == "NAME":  # a keyword: return [ / if ( / in (
        return Container("paren" if char == "(" else kind, prev.string)
    return Container(kind)


_KEYWORDS = _BLOCK_KEYWORDS | _STATEMENT_KEYWORDS | {"in", "not", "and", "or", "is", "lambda", "import", "from"}


def _key(toks: list) -> str | None:
    """What a line starts, by identity (see the module doc)."""
    if not toks:
        return None
    first = toks[0]
    if first.type.name == "NAME":
        if first.string in ("def", "class") and len(toks) > 1:
            return f"{first.string} {toks[1].string}"
        if first.string == "async" and len(toks) > 2 and toks[1].string == "def":
            return f"def {toks[2].string}"
        if first.string in ("from", "import"):
            mod = []
            for t in toks[1:]:
                if t.string in ("import", ",", "as"):
                    break
                mod.append(t.string)
            return f"{first.string} {''.join(mod)}"
        if first.string in _BLOCK_KEYWORDS:
            name = _dotted_after(toks, 1)
            return f"{first.string} {name}".rstrip() if name else f"{first.string}:"
        if first.string in _STATEMENT_KEYWORDS:
            return first.string
    if first.string == "@":
        return "@" + _dotted_after(toks, 1)
    if first.string == "*" or first.string == "**":
        return first.string + _dotted_after(toks, 1)
    parts: list[str] = []
    for t in toks:
        if t.type.name in ("OP",) and t.string in ("(", "[", "{", "=", ":", "+=", "-=", "*=", "|=", "->"):
            parts.append(t.string if t.string != "->" else "")
            break
        if t.type.name == "OP" and t.string in (",", ")", "]", "}"):
            break
        parts.append(t.string.split("\n", 1)[0])
    key = "".join(parts)
    return key or None


def _dotted_after(toks: list, i: int) -> str:
    parts: list[str] = []
    while i < len(toks) and toks[i].type.name == "NAME" and toks[i].string not in ("not",):
        parts.append(toks[i].string)
        if i + 1 < len(toks) and toks[i + 1].string == ".":
            i += 2
            continue
        break
    return ".".join(parts)


# --------------------------------------------------------------------------------------------------------------
# The hunk's claims and the landing's facts


@dataclass
class Spot:
    """What a text has around lines [at, at+span): the change's container and the siblings next to it."""

    container: Container
    before: list[tuple[int, str]]  # (line, key), nearest last
    after: list[tuple[int, str]]  # nearest first
    chain: list[str]
    line: int
    #: the first line after the container ends: its key and its indentation relative to the container's end
    follows: tuple[str, int] | None = None

    def describe(self) -> str:
        where = " > ".join(h.split(" ", 1)[1] for h in self.chain) or "<module>"
        return f"in {where}, {self.container.describe()}"


@dataclass
class Anchor:
    """What a hunk's own lines say about one change group's site."""

    spot: Spot  # the hunk fragment's own description (line numbers index the fragment)
    shows_header: bool  # the hunk shows the block header that encloses the change (statement level is certain)
    section: str | None  # "def name" / "class Name" from the @@ section text
    leading_headers: int  # def/class headers among the hunk's lines above the change
    shown_chain: list[str] = field(default_factory=list)
    #: the fragment's outline (its texts break a tie between sites the anchors cannot tell apart)
    fragment: Outline | None = None


def spot_at(o: Outline, at: int, span: int, skip: range | None = None, indent: int | None = None) -> Spot:
    """The description of lines [at, at+span) of an outlined text (`skip`: lines that are not there, default the
    span; `indent`: the indentation a statement inserted at `at` has, default that of its first line)."""
    skip = range(at, at + span) if skip is None else skip
    if indent is None:
        indent = next((o.lines[r].indent for r in range(at, min(at + max(span, 1), o.n)) if o.lines[r].key), None)
    container, depth, lo, hi = o.container(at, span, indent)
    if not container.bracketed and indent is None:
        indent = o.lines[at].indent if at < o.n else None
    sibs = o.siblings(lo, hi, depth, None if container.bracketed else indent, skip)
    before = [s for s in sibs if s[0] < at]
    after = [s for s in sibs if s[0] >= at + span]
    return Spot(container, before, after, o.chain(at), at, _follows(o, container, hi, indent, skip))


def _follows(o: Outline, container: Container, hi: int, indent: int | None, skip: range) -> tuple[str, int] | None:
    """What comes after the container: for brackets, the first line after the closing line; for a block, the line
    that ends it. Its key and indentation relative to the closing line (brackets) or to the block (statements)."""
    if container.bracketed:
        if hi >= o.n or o.lines[hi].closer is None or o.lines[hi].indent is None:
            return None
        base, r = o.lines[hi].indent, hi + 1
    else:
        if indent is None:
            return None
        base, r = indent, hi
    while r < o.n and (r in skip or o.lines[r].key is None or o.lines[r].in_string):
        r += 1
    if r >= o.n or o.lines[r].indent is None:
        return None
    return o.lines[r].key, o.lines[r].indent - base


def anchor_of(fragment: list[str], at: int, span: int, section: str) -> Anchor:
    """The hunk's claims for the change at fragment lines [at, at+span) (the fragment: the hunk's post-image, or its
    pre-image for a pure removal).

    A hunk may start inside a docstring: its first triple quote then closes a string, and read from the top every
    line after it would be string. When the change reads as string, the lines up to that quote are left out."""
    o = outline(fragment)
    if any(o.lines[r].in_string for r in range(at, min(at + max(span, 1), o.n))):
        first = next((r for r, t in enumerate(fragment[:at]) if '"""' in t or "'''" in t), None)
        if first is not None:
            retry = outline([""] * (first + 1) + fragment[first + 1 :])
            if not any(retry.lines[r].in_string for r in range(at, min(at + max(span, 1), retry.n))):
                o = retry
    spot = spot_at(o, at, span)
    shows_header = not spot.container.bracketed and bool(spot.container.name)
    headers_above = sum(1 for r in range(at) if o.lines[r].header)
    sec = _section_key(section)
    return Anchor(spot, shows_header, sec, headers_above, o.chain(at), o)


def _section_key(section: str) -> str | None:
    s = section.strip()
    for prefix in ("async def ", "def ", "class "):
        if s.startswith(prefix):
            name = s[len(prefix) :].split("(")[0].split(":")[0].strip()
            if name.isidentifier():
                return ("def " if "def" in prefix else "class ") + name
    return None


def _distinctive(key: str) -> bool:
    """A key that can contradict a site: code (a comment says where, never that a site is wrong)."""
    return not key.startswith("#") and key not in _GENERIC_KEYS and sum(c.isalnum() for c in key) >= 3


class Fit(enum.StrEnum):
    """What the anchors say of a landing."""

    CONFIRMED = "confirmed"  # something the hunk shows is the same thing at the landing
    CONTRADICTED = "contradicted"  # a claim of the hunk is broken there, or another site fits better
    UNCONFIRMED = "unconfirmed"  # nothing the hunk shows is next to it
    AMBIGUOUS = "ambiguous"  # another site fits exactly as well


@dataclass
class Judgement:
    """`judge`'s answer: contradicted / confirmed / unconfirmed / ambiguous, why, and the insertion point (a line of
    the judged text) where the hunk's anchors fit best when that is not the landing (None when nowhere else)."""

    status: Fit
    reason: str
    expected_line: int | None = None


def judge(anchor: Anchor, o: Outline, at: int, span: int) -> Judgement:
    """Compare the hunk's claims with the landing at lines [at, at+span) of the outlined text `o`, and with every
    other site of `o` its anchors point at."""
    skip = range(at, at + span)
    land = spot_at(o, at, span)
    # a point with the landing's container and neighbours is the landing itself (e.g. the lines after a replaced
    # def header are its body, not another site)
    gap = _gap(anchor.spot, land)
    fitting = [
        (p, s, spot)
        for p, s, spot in _candidates(anchor, o, skip)
        if s is not None
        and not (at <= p <= at + span)
        and not _same_site(spot, land)
        and not (gap and _gap(anchor.spot, spot) == gap)
    ]
    best = max(fitting, key=lambda c: c[1], default=None)
    expected = best[0] if best else None
    hard = _contradiction(anchor, o, land, at, span)
    if hard:
        return Judgement(Fit.CONTRADICTED, hard, expected)
    mine = _score(anchor, o, land)
    if mine is None:
        return Judgement(Fit.CONTRADICTED, f"the hunk's anchors do not fit the landing ({land.describe()})", expected)
    if best and best[1] > mine:
        return Judgement(
            Fit.CONTRADICTED,
            f"another site fits what the hunk shows better ({_why(anchor, o, best[2])} "
            f"there, against {_why(anchor, o, land)} at the landing)",
            expected,
        )
    if mine[0] == 0 and _signature_of_shown_def(anchor, land):
        # the hunk rewrites a def line; the target wrapped that signature over several lines, so the change landed
        # inside it: the def's name is the identity, and it is the landing's container
        return Judgement(
            Fit.CONFIRMED, f"the hunk rewrites the signature of `{land.container.name}`, and landed in that signature"
        )
    if mine[0] == 0:
        return Judgement(
            Fit.UNCONFIRMED,
            f"nothing the hunk shows around the change is next to the landing ({land.describe()})",
            expected,
        )
    if best and best[1] == mine:
        # the anchors tie: the site whose neighbours are the hunk's lines verbatim more often is the hunk's
        here, there = _verbatim(anchor, o, land), _verbatim(anchor, o, best[2])
        if here > there:
            return Judgement(
                Fit.CONFIRMED,
                f"{_why(anchor, o, land)}; {here} neighbours verbatim, against {there} at line {best[0] + 1}",
            )
        if here < there:
            return Judgement(
                Fit.CONTRADICTED,
                f"another site fits what the hunk shows as well, and {there} of its neighbours are the hunk's lines "
                f"verbatim, against {here} at the landing",
                expected,
            )
        return Judgement(
            Fit.AMBIGUOUS, f"another site fits what the hunk shows as well ({_why(anchor, o, land)})", expected
        )
    return Judgement(Fit.CONFIRMED, _why(anchor, o, land))


def _signature_of_shown_def(anchor: Anchor, land: Spot) -> bool:
    """The hunk's change is a def header line (its whole signature on one line) and the landing is inside the
    parameters of the def of that name."""
    frag = anchor.fragment
    at = anchor.spot.line
    if frag is None or not 0 <= at < frag.n or land.container.kind != "params":
        return False
    header = frag.lines[at].header
    return header is not None and header == f"def {land.container.name}"


def _contradiction(anchor: Anchor, o: Outline, land: Spot, at: int, span: int) -> str | None:
    """A claim of the hunk that the landing provably breaks (see the module doc), or None."""
    mine = anchor.spot
    headers = o.headers()
    for h in anchor.shown_chain:
        if h not in land.chain and h in headers:
            return f"the hunk shows it inside `{h}`, it landed {land.describe()}"
    if anchor.section and not anchor.leading_headers and anchor.section in headers and anchor.section not in land.chain:
        # the section is the def/class above the hunk (git's python driver: at any depth): before the landing, at
        # its nesting or inside something there (the release may have put other defs in between)
        chain = land.chain
        if not any(r < at and o.chain(r)[: len(chain)] == chain for r in headers[anchor.section]):
            return f"its @@ section names `{anchor.section}`, it landed {land.describe()}"
    if mine.container.bracketed and not land.container.bracketed:
        where = " > ".join(h.split(" ", 1)[1] for h in land.chain) or "<module>"
        return f"the hunk puts it {mine.container.describe()}, it landed at statement level in {where}"
    if anchor.shows_header and land.container.bracketed:
        return f"the hunk puts it in {mine.container.describe()}, it landed {land.container.describe()}"
    if mine.container.named and land.container.named and mine.container != land.container:
        return f"the hunk puts it in {mine.container.describe()}, it landed in {land.container.describe()}"
    land_keys = {k for _, k in land.before + land.after}
    lo, hi = o.def_range(at)
    # at statement level only a statement at the landing's own indentation is a sibling found elsewhere: one that
    # went into a nested block (a new `try:`) was moved by the release, which says nothing against the site
    indent = None if land.container.bracketed else next((o.lines[r].indent for r in range(at, at + span)), None)
    for _, key in mine.before[::-1] + mine.after:
        if key in land_keys or not _distinctive(key):
            continue
        for r in range(lo, hi):
            if at <= r < at + span or o.lines[r].key != key or o.lines[r].in_string:
                continue
            if indent is not None and o.lines[r].indent != indent:
                continue
            if _bracketed_at(o, r) == land.container.bracketed:
                return (
                    f"the hunk shows `{key}` in the same {_what(mine.container)} as the change; the landing's "
                    f"({land.container.describe()}) lacks it, and it is at line {r + 1}"
                )
    return None


def _score(anchor: Anchor, o: Outline, spot: Spot) -> tuple[int, int] | None:
    """How much of what the hunk shows is at `spot`: (claims met, siblings matched), or None when the spot is of
    another kind (brackets vs statement level) or in a def the hunk's section rules out."""
    mine = anchor.spot
    if mine.container.bracketed != spot.container.bracketed and (mine.container.bracketed or anchor.shows_header):
        return None
    if mine.container.named and spot.container.named and mine.container != spot.container:
        return None
    met = 0
    if mine.container.named and mine.container == spot.container:
        met += 2
    before = _run([k for _, k in mine.before[::-1]], [k for _, k in spot.before[::-1]])
    after = _run([k for _, k in mine.after], [k for _, k in spot.after])
    met += before + after
    if anchor.section and (
        anchor.section in spot.chain or (not anchor.leading_headers and o.header_before(spot.line) == anchor.section)
    ):
        met += 1
    if mine.follows and spot.follows == mine.follows:
        met += 1
    return met, before + after


def _run(a: list[str], b: list[str]) -> int:
    """How many of `a` (nearest first) are in `b` (nearest first) in the same order, each at most two elements
    after the previous one's match: the target may have added elements, or dropped one the hunk shows."""
    n = 0
    j = 0
    for key in a:
        try:
            k = b.index(key, j, j + 3)
        except ValueError:
            continue
        n += 1
        j = k + 1
    return n


def _gap(mine: Spot, spot: Spot) -> tuple[int | None, int | None] | None:
    """The lines of the nearest siblings the hunk shows that `spot` has before and after it: two points with the
    same ones are the same gap in the hunk's terms (the target added elements there; the order among them is the
    engine's decision, not a second site)."""
    before = next((r for r, k in spot.before[::-1] if k in {key for _, key in mine.before}), None)
    after = next((r for r, k in spot.after if k in {key for _, key in mine.after}), None)
    if before is None and after is None:
        return None
    return before, after


def _same_site(a: Spot, b: Spot) -> bool:
    return a.container == b.container and a.before[-1:] == b.before[-1:] and a.after[:1] == b.after[:1]


def _candidates(anchor: Anchor, o: Outline, skip: range) -> list[tuple[int, tuple[int, int] | None, Spot]]:
    """Insertion points of `o` next to a line keyed like the hunk's nearest sibling, each with its `_score` (None
    where the hunk's kind or section rules it out)."""
    mine = anchor.spot
    points: dict[int, int | None] = {}
    before = {k for _, k in mine.before if _distinctive(k) or k.startswith("#")}
    after = {k for _, k in mine.after if _distinctive(k) or k.startswith("#")}
    for r in sorted({r for k in before | after for r in o.rows_of(k)}):
        line = o.lines[r]
        key = line.key if line.key is not None else line.comment
        if r in skip or line.in_string or key is None:
            continue
        indent = line.indent if line.key is not None else line.comment_indent
        if key in before:
            points[r + 1 if line.key is None else _element_end(o, r, skip)] = indent
        if key in after:
            points.setdefault(r, indent)
    out = []
    # the nearest sites only: in repetitive code a common key is everywhere, and a far copy never outscores a near
    # one by the anchors alone
    near = sorted(points.items(), key=lambda pi: abs(pi[0] - (skip.start if skip else 0)))[:_MAX_CANDIDATES]
    for p, indent in sorted(near):
        spot = spot_at(o, p, 0, skip, indent)
        hard = _contradiction(anchor, o, spot, p, 0)
        out.append((p, None if hard else _score(anchor, o, spot), spot))
    return out


def _element_end(o: Outline, r: int, skip: range) -> int:
    """The line after the element that starts at line `r` (its continuation lines and nested block included)."""
    depth, indent = o.lines[r].depth, o.lines[r].indent
    e = r + 1
    while e < o.n:
        line = o.lines[e]
        if e not in skip and (line.key or line.closer) and not line.in_string and line.depth <= depth:
            if line.depth < depth or line.closer or indent is None or (line.indent or 0) <= indent:
                break
        e += 1
    return e


def _why(anchor: Anchor, o: Outline, spot: Spot) -> str:
    mine = anchor.spot
    parts = []
    if mine.container.named and mine.container == spot.container:
        parts.append(spot.container.describe())
    before = _run([k for _, k in mine.before[::-1]], [k for _, k in spot.before[::-1]])
    after = _run([k for _, k in mine.after], [k for _, k in spot.after])
    if before:
        parts.append(f"{before} of {len(mine.before)} siblings before")
    if after:
        parts.append(f"{after} of {len(mine.after)} after")
    if mine.follows and spot.follows == mine.follows:
        parts.append(f"then `{spot.follows[0]}` as the hunk shows")
    if anchor.section and (
        anchor.section in spot.chain or (not anchor.leading_headers and o.header_before(spot.line) == anchor.section)
    ):
        parts.append(f"under its @@ section `{anchor.section}`")
    return ", ".join(parts) or "none of its anchors"


def _verbatim(anchor: Anchor, o: Outline, spot: Spot) -> int:
    """How many of the siblings next to `spot` (nearest first, each side) are the hunk's shown ones verbatim."""
    frag = anchor.fragment
    if frag is None:
        return 0
    mine = anchor.spot
    n = 0
    for a, b in zip(mine.before[::-1], spot.before[::-1], strict=False):
        n += frag.text[a[0]].strip() == o.text[b[0]].strip()
    for a, b in zip(mine.after, spot.after, strict=False):
        n += frag.text[a[0]].strip() == o.text[b[0]].strip()
    return n


def _what(c: Container) -> str:
    return "block" if c.kind == "block" else "brackets"


def _bracketed_at(o: Outline, r: int) -> bool:
    line = o.lines[r]
    return bool(line.openers) or line.depth > o._base(r)


def fit(anchor: Anchor, o: Outline, at: int, span: int = 0) -> tuple[int, int] | None:
    """How well the hunk's anchors fit the change at lines [at, at+span) of `o` (span 0: a change that would be
    inserted at `at`): `_score`'s (claims met, siblings matched), or None where a claim is broken or the kind
    differs."""
    spot = spot_at(o, at, span)
    if _contradiction(anchor, o, spot, at, span) is not None:
        return None
    return _score(anchor, o, spot)


# --------------------------------------------------------------------------------------------------------------
# An anchor the release removed outright

#: statements that stand alone among their peers: their order carries no meaning
_PEER_STATEMENTS = ("from ", "import ", "def ", "class ", "@")
_NAMED_KEY = re.compile(r"[@*]*\.*([A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*)(?:[-+*/%&|^@<>]*=|:|\(|\[|\{)?")
_STRING_KEY = re.compile(r"[rbuRBU]{0,2}(['\"])([^'\"\\\n]+)\1")


def identity_name(key: str) -> str | None:
    """The name a sibling (a line's key) is known by anywhere in a file, or None when it has none to look for.

    `x` for a keyword argument or assignment `x=`, a parameter `x:` or a call statement `x(`; the last part of a
    dotted name (`propose` for `self.propose(`: the object may be reached another way); the whole module of
    `from m` / `import m` (its last part, `protocol`, names many modules); the name of `def f`, `class C`,
    `@deco`, `*rest`; the text of a string element (`"name"` in `__all__`). Comments, block headers, bare
    statements and other expressions have no such name."""
    if not _distinctive(key):
        return None
    head, _, rest = key.partition(" ")
    if rest:
        if head not in ("def", "class", "from", "import"):
            return None  # a block header: `if cond`, `for x`
        m = _NAMED_KEY.fullmatch(rest)
        if m is None:
            return None
        return m.group(1) if head in ("from", "import") else m.group(1).rsplit(".", 1)[-1]
    s = _STRING_KEY.fullmatch(key)
    if s is not None:
        text = s.group(2).strip()
        return text if sum(c.isalnum() for c in text) >= 3 else None
    m = _NAMED_KEY.fullmatch(key)
    if m is None:
        return None
    return m.group(1).rsplit(".", 1)[-1]


def vanished_anchor(anchor: Anchor, context: Collection[int], texts: Iterable[str]) -> tuple[str, str] | None:
    """The element the change is inserted after, when the release removed it outright: (its key, its name).

    That element is the nearest sibling the hunk shows before the change, as a context line (`context`: the
    fragment's context rows). It is gone when no text of `texts` (the whole stock file, and every line the other
    hunks of the audited patches add or remove there) names it, by `identity_name`, even in a comment or a
    string. Then there is no site to insert after: wherever the change landed, it is next to something else.

    Only the parts of one construct count: the arguments of a call, the parameters of a def, the elements of a
    display or of one import, the statements of a block. An import statement, a def or a class the release
    dropped next to the hunk's is another construct, independent of the one the hunk adds, and where that one
    goes among its peers means nothing (pr46994's `from vllm.sequence import IntermediateTensors`, shown after
    `from vllm.multimodal import ...`, which v0.28.0 dropped from speculator.py).

    An element that is only absent from the landing's container, or whose name the file still uses elsewhere
    (the patch's base had an argument the release never added, but the release passes that value around), says
    nothing: None. So does a nearest sibling that is a comment, an added line or a block header."""
    before = anchor.spot.before
    if not before:
        return None
    row, key = before[-1]
    if row not in context or key.startswith(_PEER_STATEMENTS):
        return None
    name = identity_name(key)
    if name is None:
        return None
    word = re.compile(rf"(?<!\w){re.escape(name)}(?!\w)")
    if any(word.search(text) for text in texts):
        return None
    return key, name
