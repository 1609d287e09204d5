"""What encloses a line: the class/def chain, the syntactic role of a position, and the if/elif/else branch.

Placement asks two questions about a candidate site, and this module answers both the same way for a whole target
file and for the fragment of code a diff hunk shows:

1. *Role* — the innermost syntactic container of a position.  A small lexer (`PythonLayout`) walks the lines with
   one regular expression, skipping strings and comments, and keeps the stack of open brackets at the start of each
   physical line.  The innermost open bracket names the role, classified from the text just before it:

   ======================  =================================================
   opener                  role
   ======================  =================================================
   ``def name(``           ``parameters``
   ``class Name(``         ``class-bases``
   ``import (``            ``import-names``
   ``name(`` ``x)(``       ``call-arguments``
   any other ``(``         ``tuple`` (parenthesised expression or tuple)
   ``name[`` ``x)[``       ``subscript``
   any other ``[``         ``list``
   ``{`` with a ``:``      ``dict`` (else ``set``)
   ======================  =================================================

   Outside any bracket the role is ``string`` inside a multi-line string, else ``block`` (``module`` at top level).
   Roles fall in classes — ``(``, ``[``, ``{``, ``stmt``, ``string`` — so that a hunk which shows only a closing
   ``)`` can still say "inside some parentheses" (see `HunkIntent`).

2. *Enclosing headers* — for a statement at indentation *I* before line *i*, walking back over the logical lines
   (lines that start a statement: no open bracket, not inside a string, not after a backslash) collects each line
   with a smaller indentation than the last one found.  In valid Python those are exactly the compound-statement
   headers that enclose the position (``def``, ``class``, ``if``, ``elif``, ``else``, ``try``, ``except``, ``with``,
   ``for`` ...).  ``def``/``class`` headers make the *chain*; the innermost ``if``/``elif``/``else``/``try``/
   ``except``/``finally``/``case`` header is the *branch*.  An ``else``/``elif`` header is keyed with the ``if`` that
   owns it (``else|if x == 10``) so two ``else:`` of different ``if`` statements never compare equal.  For a
   position inside brackets, the headers are those of the statement that opened the outermost bracket.

The same indentation walk is deliberately used instead of the `ast` node spans: it gives an answer for the few lines
of a hunk (which do not parse on their own) and for the gap *between* two lines, where what encloses an inserted
statement depends only on the indentation it will be written with.  Whether a file parses is decided by compiling it
(`scope_at` returns None for a file that does not; `parse_error` compiles the source, which is faster than
building `ast` objects and also reports the errors the compiler finds after parsing).

How placement infers what a hunk intends (`HunkIntent`), from the hunk's own lines and its ``@@`` section text:

- Role: lex the hunk's lines before the change; an open bracket there names the role exactly (``foo(`` ...
  change → ``call-arguments``).  If none is open, lex the lines after the change: the first closing bracket without
  an opener names the role class (a ``)`` → "inside some parentheses"; ``) -> T:`` → ``parameters``).  If neither,
  the change sits at statement level only when a line shows it (a header enclosing it, a line only a statement
  can be: ``return``, ``import``, ``self.x = ...``, ``x += 1``, ``name = value``, a decorator); otherwise the role
  is unknown — the middle of a long signature, call or display shows no bracket, and ``x: int = 1,`` parses as a
  statement only by accident.  An unknown role rejects no site.  A fragment that ends inside a string (the hunk
  started inside a docstring) says nothing about its role, nor does one whose first triple quote starts its line
  or follows text that starts no expression (``...the model's dtype.`` and three quotes: it may close a
  docstring the hunk began inside).
- Headers: the enclosing-header walk run on the hunk's lines; each header the hunk shows must enclose the site in
  the target too, in the same order (the target may add enclosing headers, e.g. a new ``with`` block).
- Section: a ``@@ ... @@ def name(`` / ``class Name`` section text names the def/class that precedes the hunk's
  first line (git's python diff driver: the last ``def``/``class`` line above; git's default driver: the last
  unindented line).  `SectionIndex` computes both for any target line; the site is acceptable when either names
  the same def/class.
"""

from __future__ import annotations

import functools
import keyword
import re
from dataclasses import dataclass

# One regular expression finds everything the lexer cares about on a physical line.  Order matters: a string or a
# comment that starts earlier hides the brackets inside it.
_TOKEN = re.compile(
    r"""(?P<s3>(?<![\w])[rRbBuUfF]{0,2}(?:\"\"\"|'''))"""
    r"""|(?P<s1>(?<![\w])[rRbBuUfF]{0,2}(?:"(?:[^"\\\n]|\\.)*"|'(?:[^'\\\n]|\\.)*'))"""
    r"""|(?P<c>\#)"""
    r"""|(?P<o>[(\[{])"""
    r"""|(?P<x>[)\]}])"""
    r"""|(?P<bs>\\$)"""
)
#: a line with none of these characters changes no lexer state (most lines have some, but it is cheap to ask)
_INTERESTING = re.compile(r"""["'#()\[\]{}\\]""")
#: a line (from a position on) with none of these holds brackets only: no string, comment or line continuation
_TRICKY = re.compile(r"""["'#\\]""")
_BRACKET = re.compile(r"[()\[\]{}]")
#: the text after a `{` that makes it a dict: a key followed by ':' (or `**mapping`, or `}` right away)
_DICT_START = re.compile(r"""^\s*(?:\*\*|\}|(?:[^,:'"{}\[\]()]|'[^']*'|"[^"]*")+:(?!=))""")
_CLOSER_OF = {"(": ")", "[": "]", "{": "}"}
_OPENER_OF = {")": "(", "]": "[", "}": "{"}
_ROLE_CLASS = {
    "parameters": "(",
    "call-arguments": "(",
    "tuple": "(",
    "import-names": "(",
    "class-bases": "(",
    "list": "[",
    "subscript": "[",
    "dict": "{",
    "set": "{",
    "block": "stmt",
    "module": "stmt",
    "string": "string",
}
_COMPOUND = {
    "if",
    "elif",
    "else",
    "for",
    "while",
    "try",
    "except",
    "finally",
    "with",
    "def",
    "class",
    "async",
    "match",
    "case",
}
_BRANCH = {"if", "elif", "else", "try", "except", "finally", "case"}
_DEF_RE = re.compile(r"^\s*(?:async\s+)?(def|class)\s+(\w+)")
_PY_SECTION_RE = re.compile(r"^[ \t]*((class|(async[ \t]+)?def)[ \t].*)$")
_DEFAULT_SECTION_RE = re.compile(r"^[A-Za-z_$]")
_TAIL_DEF = re.compile(r"\b(def|class)\s+\w+\s*$")
_TAIL_WORD = re.compile(r"(\w+)\s*$")
_TRIPLE = re.compile(r'[rRbBuUfF]{0,2}(?:"""|\'\'\')')
#: the text before a string that opens it as an expression: an operator, bracket, comma, colon or keyword ends it
_STRING_INTRODUCER = re.compile(r"(?:[=(\[{,:+%*|&<>!-]|\b(?:return|yield|in|not|and|or|else|if|lambda|await))\s*$")


def role_class(role: str | None) -> str | None:
    """The class of a role: "(", "[", "{", "stmt" or "string" (None for an unknown role)."""
    if role is None:
        return None
    return _ROLE_CLASS.get(role, role)


@dataclass(frozen=True)
class Scope:
    """Where a line sits syntactically.

    chain: enclosing definitions outermost first, e.g. ("class CudaPlatform", "def _get_backend_priorities").
    role: the innermost syntactic container of the position: "module", "block", "parameters", "call-arguments",
          "list", "tuple", "dict", "set", "subscript", "import-names", "string", "decorator", ... .
    branch: which branch of the innermost enclosing if/elif/else (or try/except, match/case) the line is in, named
            by the branch's test text, e.g. "if capability.major == 10" / "else"; None outside any branch.
    headers: every enclosing compound-statement header, innermost first, as comparison keys
             (e.g. "else|if capability.major == 10", "if use_mla", "def _get_backend_priorities").
    """

    chain: tuple[str, ...] = ()
    role: str = "module"
    branch: str | None = None
    headers: tuple[str, ...] = ()

    def describe(self) -> str:
        where = ".".join(c.split()[-1] for c in self.chain) or "<module>"
        text = f"{where} [{self.role}]"
        if self.branch:
            text += f" in branch `{self.branch}`"
        return text

    def to_json(self) -> dict:
        """The scope as a JSON-ready dict."""
        return {"chain": list(self.chain), "role": self.role, "branch": self.branch}


class _Frame:
    """One open bracket: its character, where it opened, and the statement line that opened it.

    The role is worked out only when asked for: a file has thousands of brackets, placement asks about a few."""

    __slots__ = ("char", "text", "col", "line", "stmt_line", "parent", "_role", "_next")

    def __init__(
        self, char: str, text: str, col: int, line: int, stmt_line: int, parent: _Frame | None, next_line: str = ""
    ) -> None:
        self.char = char
        self.text = text
        self.col = col
        self.line = line
        self.stmt_line = stmt_line
        self.parent = parent
        self._role: str | None = None
        self._next = next_line

    @property
    def role(self) -> str:
        if self._role is None:
            self._role = _opener_role(self.char, self.text[: self.col])
            if self.char == "{":
                after = self.text[self.col + 1 :]
                if not after.strip() or after.lstrip().startswith("#"):
                    after = self._next
                self._role = "dict" if _DICT_START.match(after) else "set"
        return self._role


def _indent_width(line: str) -> int:
    width = 0
    for ch in line:
        if ch == " ":
            width += 1
        elif ch == "\t":
            width = (width // 8 + 1) * 8
        elif ch == "\f":
            width = 0
        else:
            break
    return width


def _opener_role(char: str, before: str) -> str:
    """Classify an opening bracket from the text that precedes it on its line."""
    before = before.rstrip()
    if char == "{":
        return "set"  # the caller tells a dict from the text after the brace
    if char == "(":
        if _TAIL_DEF.search(before):
            return "class-bases" if re.search(r"\bclass\s+\w+\s*$", before) else "parameters"
        if re.search(r"\bimport\s*$", before):
            return "import-names"
    if before and before[-1] in ")]}\"'":
        return "call-arguments" if char == "(" else "subscript"
    m = _TAIL_WORD.search(before)
    if m and not keyword.iskeyword(m.group(1)) and not m.group(1)[0].isdigit():
        return "call-arguments" if char == "(" else "subscript"
    return "tuple" if char == "(" else "list"


def _header_key(text: str) -> str:
    """Comparison key of a header line: whitespace collapsed, trailing comment and colon dropped.

    A def/class is keyed by its kind and name only (``def greet``): its signature or bases are not part of what
    encloses a position, and they are what hunks (and drifted targets) most often edit on a header line."""
    m = _DEF_RE.match(text)
    if m:
        return f"{m.group(1)} {m.group(2)}"
    text = text.split("#", 1)[0] if "#" in text and "'" not in text and '"' not in text else text
    text = " ".join(text.split())
    if text.endswith(":"):
        text = text[:-1].rstrip()
    return text


class PythonLayout:
    """Per-line lexical facts of Python source (a whole file or a hunk's fragment).

    For every physical line: the open-bracket stack at its start, whether it starts inside a multi-line string,
    whether it starts a logical line carrying code, and its indentation width.  Closing brackets that had no
    opener (a fragment that starts inside a call) are recorded in `unmatched_closers`.
    """

    def __init__(self, lines: list[str], lazy: bool = False) -> None:
        self.lines = [ln[:-1] if ln.endswith("\r") else ln for ln in lines]
        n = len(self.lines)
        #: innermost open bracket at the start of each line (index n: at the end of the text)
        self.frame_at: list[_Frame | None] = [None] * (n + 1)
        #: the line starts inside a multi-line string
        self.in_string_at: list[bool] = [False] * (n + 1)
        #: the line starts a statement (a logical line) and carries code (not blank, not only a comment)
        self.code_start: list[bool] = [False] * n
        self.indent: list[int] = [0] * n
        #: (line, char) of every closing bracket that matched nothing
        self.unmatched_closers: list[tuple[int, str]] = []
        # lexer state between lines: the lexer can stop and resume (see `ensure`)
        self._lexed = 0
        self._frame: _Frame | None = None
        self._string_end: str | None = None  # the closing delimiter of the open multi-line string
        self._continued = False
        if not lazy:
            self.ensure(n)

    def ensure(self, i: int) -> None:
        """Make the facts of lines 0..i (and the state at the start of line i) available.

        A layout built with ``lazy=True`` lexes only as far as it is asked: placement asks about a few sites of a
        large file, mostly far from its end.  The query methods call this themselves; code reading the per-line
        lists of a lazy layout directly must call it first."""
        n = len(self.lines)
        stop = min(i + 1, n)
        if stop > self._lexed:
            # lex ahead a little: callers walk forward line by line
            self._lex_to(min(n, max(stop, self._lexed + 128)))
        if i >= n and self._lexed == n:
            self.frame_at[n] = self._frame
            self.in_string_at[n] = self._string_end is not None

    def _lex_to(self, stop: int) -> None:
        frame = self._frame
        string_end = self._string_end
        continued = self._continued
        lines = self.lines
        frame_at, in_string_at, code_start, indent = self.frame_at, self.in_string_at, self.code_start, self.indent
        for i in range(self._lexed, stop):
            line = lines[i]
            frame_at[i] = frame
            in_string_at[i] = string_end is not None
            pos = 0
            if string_end is not None:
                end = _find_close(line, 0, string_end)
                if end < 0:
                    continue
                string_end = None
                pos = end
            else:
                stripped = line.lstrip()
                if frame is None and not continued and stripped and stripped[0] != "#":
                    code_start[i] = True
                    indent[i] = _indent_width(line)
            continued = False
            if not _INTERESTING.search(line, pos):
                continue
            if not _TRICKY.search(line, pos):
                # only brackets on this line (no string, comment or backslash): the common case, lexed cheaply
                for m in _BRACKET.finditer(line, pos):
                    ch = m.group()
                    if ch in "([{":
                        stmt_line = frame.stmt_line if frame is not None else self._stmt_line(i)
                        nxt = lines[i + 1] if ch == "{" and i + 1 < len(lines) else ""
                        frame = _Frame(ch, line, m.start(), i, stmt_line, frame, nxt)
                    elif frame is not None:
                        # a mismatched closer recovers by popping too
                        frame = frame.parent
                    else:
                        self.unmatched_closers.append((i, ch))
                continue
            while True:
                m = _TOKEN.search(line, pos)
                if m is None:
                    break
                kind = m.lastgroup
                pos = m.end()
                if kind == "s3":
                    delim = m.group()[-3:]
                    end = _find_close(line, pos, delim)
                    if end < 0:
                        string_end = delim
                        break
                    pos = end
                elif kind == "c":
                    break
                elif kind == "o":
                    stmt_line = frame.stmt_line if frame is not None else self._stmt_line(i)
                    nxt = lines[i + 1] if m.group() == "{" and i + 1 < len(lines) else ""
                    frame = _Frame(m.group(), line, m.start(), i, stmt_line, frame, nxt)
                elif kind == "x":
                    if frame is not None:
                        frame = frame.parent  # a mismatched closer recovers by popping too
                    else:
                        self.unmatched_closers.append((i, m.group()))
                elif kind == "bs":
                    continued = True
        self._frame, self._string_end, self._continued = frame, string_end, continued
        self._lexed = stop
        if stop == len(lines):
            frame_at[stop] = frame
            in_string_at[stop] = string_end is not None

    def _stmt_line(self, i: int) -> int:
        """The line that starts the logical line containing line i (i is outside brackets here)."""
        j = i
        while j > 0 and not self.code_start[j] and self.lines[j].strip() and not self.in_string_at[j]:
            j -= 1
        return j

    # --- queries ------------------------------------------------------------------------------------------------

    def role_at(self, i: int, indent: int | None = None) -> str:
        """Role of a position at the start of line i (0-based; i == len(lines) is the end of the text)."""
        self.ensure(i)
        frame = self.frame_at[i]
        if frame is not None:
            return frame.role
        if self.in_string_at[i]:
            return "string"
        if indent is None:
            indent = self.indent[i] if i < len(self.lines) and self.code_start[i] else 0
        return "module" if indent == 0 else "block"

    def outer_frame(self, i: int) -> _Frame | None:
        self.ensure(i)
        frame = self.frame_at[i]
        while frame is not None and frame.parent is not None:
            frame = frame.parent
        return frame

    def header_lines(self, i: int, indent: int, stop: int = 0) -> list[int]:
        """Lines of the compound-statement headers enclosing a statement at `indent` placed before line i,
        innermost first (walks back no further than line `stop`)."""
        self.ensure(i)
        found: list[int] = []
        bound = indent
        j = min(i, len(self.lines)) - 1
        while j >= stop and bound > 0:
            if self.code_start[j] and self.indent[j] < bound:
                found.append(j)
                bound = self.indent[j]
            j -= 1
        return found

    def header_key(self, j: int, stop: int = 0, texts: list[str | None] | None = None) -> str | None:
        """Comparison key of header line j; an else/elif is keyed with the `if` that owns it.

        `texts` (optional, parallel to the lines) gives the text each line is to be compared by, when that is not
        the line itself: a hunk compares a header it edits by its pre-image text, and has None for a header it
        adds (no target has it; the key is then None, and an else/elif owned by it is keyed without owner)."""
        self.ensure(j)
        text = self.lines[j] if texts is None else texts[j]
        if text is None:
            return None
        text = text.strip()
        key = _header_key(text)
        first = text.split(None, 1)[0].rstrip(":") if text else ""
        if first in ("else", "elif"):
            owner = self.owner_if(j, stop)
            owner_text = None if owner is None else (self.lines[owner] if texts is None else texts[owner])
            if owner_text is not None:
                key += "|" + _header_key(owner_text.strip())
        return key

    def owner_if(self, j: int, stop: int = 0) -> int | None:
        """The `if` (or `try`/`for`/`while`) line that an `else`/`elif`/`except` at line j belongs to."""
        self.ensure(j)
        ind = self.indent[j]
        k = j - 1
        while k >= stop:
            if self.code_start[k] and self.indent[k] <= ind:
                if self.indent[k] < ind:
                    return None
                word = self.lines[k].strip().split(None, 1)[0].rstrip(":")
                if word in ("if", "try", "for", "while"):
                    return k
                if word not in ("elif", "else", "except"):
                    return None
            k -= 1
        return None

    def is_header(self, j: int) -> bool:
        text = self.lines[j].strip()
        word = re.split(r"[\s:(]", text, maxsplit=1)[0]
        if word not in _COMPOUND:
            return False
        if word in ("match", "case"):
            return text.rstrip().endswith(":")
        return True

    def scope(self, i: int, indent: int | None = None, stop: int = 0) -> Scope:
        """Scope of a position at the start of line i for a statement written at `indent` (default: line i's own
        indentation).  Inside brackets the headers are those of the statement that opened the outermost one."""
        self.ensure(i)
        role = self.role_at(i, indent)
        outer = self.outer_frame(i)
        if outer is not None:
            at, ind = outer.stmt_line, self.indent[outer.stmt_line]
            heads = self.header_lines(at, ind, stop)
        else:
            if indent is None:
                indent = self.indent[i] if i < len(self.lines) and self.code_start[i] else 0
            heads = self.header_lines(i, indent, stop)
        heads = [j for j in heads if self.is_header(j)]
        if outer is not None and _DEF_RE.match(self.lines[outer.stmt_line]):
            heads = [outer.stmt_line] + heads  # inside a signature or class bases: that def/class encloses it
        keys = tuple(self.header_key(j, stop) for j in heads)
        chain: list[str] = []
        branch: str | None = None
        for j in heads:
            m = _DEF_RE.match(self.lines[j])
            if m:
                chain.append(f"{m.group(1)} {m.group(2)}")
            elif branch is None and not chain:
                word = re.split(r"[\s:(]", self.lines[j].strip(), maxsplit=1)[0]
                if word in _BRANCH:
                    branch = _header_key(self.lines[j].strip())
        return Scope(chain=tuple(reversed(chain)), role=role, branch=branch, headers=keys)


def _find_close(line: str, pos: int, delim: str) -> int:
    """End offset of the closing `delim` of a string that continues at `pos`, or -1 when the line ends first."""
    while True:
        k = line.find(delim, pos)
        if k < 0:
            return -1
        # a delimiter preceded by an odd number of backslashes is escaped
        b = k - 1
        while b >= pos and line[b] == "\\":
            b -= 1
        if (k - 1 - b) % 2 == 0:
            return k + len(delim)
        pos = k + 1


class SectionIndex:
    """For any line, the `@@` section text git would print for a hunk starting there (both diff drivers).

    Answers by walking back from the line asked about (to the nearest def/class line and the nearest unindented
    line, both usually close), so a large file costs nothing until asked."""

    def __init__(self, lines: list[str]) -> None:
        self.lines = lines
        self._memo: dict[int, tuple[int, int]] = {}

    def _sections(self, i: int) -> tuple[int, int]:
        """(last python-driver section line, last default-driver section line) strictly above line i; -1: none."""
        got = self._memo.get(i)
        if got is not None:
            return got
        last_py = last_default = -1
        j = i - 1
        while j >= 0 and (last_py < 0 or last_default < 0):
            line = self.lines[j]
            if last_py < 0 and _PY_SECTION_RE.match(line):
                last_py = j
            if last_default < 0 and _DEFAULT_SECTION_RE.match(line):
                last_default = j
            j -= 1
        self._memo[i] = (last_py, last_default)
        return last_py, last_default

    def names_at(self, i: int) -> list[str]:
        """def/class names a hunk whose first line is line i (0-based) would carry in its section text."""
        names = []
        for j in self._sections(max(0, min(i, len(self.lines)))):
            if j >= 0:
                m = _DEF_RE.match(self.lines[j])
                if m:
                    names.append(m.group(2))
        return names


def section_name(section: str) -> str | None:
    """The def/class name a hunk's `@@` section text names, or None when it names none."""
    m = _DEF_RE.match(section or "")
    return m.group(2) if m else None


@dataclass
class HunkIntent:
    """What a hunk's own lines say about the site of one change: role, role class, enclosing headers.

    `role` is exact when the hunk shows the opening bracket; otherwise only `klass` is known ("(" for a hunk that
    shows just the closing ")"). `headers` are the enclosing header keys the hunk shows, innermost first.
    """

    role: str | None
    klass: str | None
    headers: tuple[str, ...]
    evidence: str = ""

    def accepts(self, scope: Scope) -> str | None:
        """None when `scope` agrees with this intent, else the reason it does not."""
        if self.klass is not None:
            got = role_class(scope.role)
            if (
                self.role is not None
                and self.role != scope.role
                and not ({self.role, scope.role} <= {"block", "module"})
            ):
                return f"role: hunk puts the change in {self.role} ({self.evidence}), target site is {scope.role}"
            if self.role is None and got != self.klass:
                return (
                    f"role: hunk puts the change inside {_klass_words(self.klass)} ({self.evidence}), "
                    f"target site is {scope.role}"
                )
        k = 0
        for h in self.headers:
            while k < len(scope.headers) and not _same_header(h, scope.headers[k]):
                k += 1
            if k == len(scope.headers):
                return f"scope: hunk shows the change under `{h.replace('|', ' of ')}`, target site is under " + (
                    ", ".join(f"`{x.replace('|', ' of ')}`" for x in scope.headers) or "no header"
                )
            k += 1
        return None


def _same_header(hunk_key: str, target_key: str) -> bool:
    """Header keys agree; an else/elif whose owning `if` the hunk does not show matches any owner."""
    if hunk_key == target_key:
        return True
    return "|" not in hunk_key and target_key.split("|", 1)[0] == hunk_key


def _klass_words(klass: str) -> str:
    return {"(": "parentheses", "[": "square brackets", "{": "braces", "stmt": "a statement block"}.get(klass, klass)


def hunk_intent(
    before: list[str], change: list[str], after: list[str], before_pre: list[str | None] | None = None
) -> HunkIntent:
    """Infer the intended role and headers of a change from the hunk lines around it.

    before: hunk lines (context, already-present) before the change; change: the change's own lines (added lines,
    or removed lines for a pure removal); after: hunk lines after it.
    before_pre: optional, parallel to `before`: the text each line has in the hunk's pre-image, which is what a
    target can be expected to have — the line itself for a context line, the line it replaces for an edited line
    (``if a:`` rewritten to ``if a and b:``), None for a line the hunk adds outright.  Headers are keyed by these
    texts, so a hunk that edits a header it shows still recognises the unedited header in the target; a header
    with no pre-image text is not required of the target.
    """
    lay = PythonLayout(before + change + after)
    n_before = len(before)
    texts: list[str | None] | None = None
    if before_pre is not None:
        if len(before_pre) != n_before:
            raise ValueError("before_pre must be parallel to before")
        texts = list(before_pre) + [None] * (len(lay.lines) - n_before)

    def keys(heads: list[int]) -> tuple[str, ...]:
        found = (lay.header_key(j, 0, texts) for j in heads)
        return tuple(k for k in found if k is not None)

    if lay.in_string_at[len(lay.lines)]:
        return HunkIntent(None, None, (), "hunk ends inside a string; role unknown")
    first_code = next((ln for ln in change if ln.strip() and not ln.strip().startswith("#")), None)
    indent = _indent_width(first_code) if first_code is not None else None
    frame = lay.frame_at[n_before]
    if frame is not None:
        outer = frame
        while outer.parent is not None:
            outer = outer.parent
        heads = [j for j in lay.header_lines(outer.stmt_line, lay.indent[outer.stmt_line]) if lay.is_header(j)]
        if _DEF_RE.match(lay.lines[outer.stmt_line]):
            heads = [outer.stmt_line] + heads  # inside a signature or class bases: that def/class encloses it
        return HunkIntent(
            frame.role,
            role_class(frame.role),
            keys(heads),
            f"opened at `{lay.lines[frame.line].strip()}`",
        )
    if lay.in_string_at[n_before]:
        at = next((j for j in range(n_before - 1, -1, -1) if _TRIPLE.search(lay.lines[j])), None)
        opener = lay.lines[at] if at is not None else ""
        if _TRIPLE.match(opener.lstrip()):
            # a line that starts with a triple quote may as well close a string the hunk does not show (a hunk
            # that begins inside a docstring): the lexer's reading of it is a guess
            return HunkIntent(None, None, (), "after a triple quote that may open or close a string; role unknown")
        if at is not None and not any(_TRIPLE.search(lay.lines[j]) for j in range(at)):
            # the fragment's first triple quote, after text that does not start an expression (``...text."""``):
            # it closes a string the hunk began inside as likely as it opens one
            last = list(_TRIPLE.finditer(opener))[-1]
            if not _STRING_INTRODUCER.search(opener[: last.start()]):
                return HunkIntent(None, None, (), "after a triple quote that may close a string; role unknown")
        return HunkIntent("string", "string", (), "inside a string")
    # No bracket open before the change: a closing bracket after it that matches nothing says we are inside one.
    after_lay = PythonLayout(change + after) if change or after else None
    if after_lay is not None and after_lay.unmatched_closers and not after_lay.in_string_at[len(after_lay.lines)]:
        line_no, char = after_lay.unmatched_closers[0]
        text = after_lay.lines[line_no].strip()
        role = "parameters" if char == ")" and re.match(r"^\)\s*->", text) else None
        return HunkIntent(role, _OPENER_OF[char], (), f"closed by `{text}` after the change")
    if indent is None:
        return HunkIntent(None, None, (), "change has no code line")
    heads = [j for j in lay.header_lines(n_before, indent) if lay.is_header(j)]
    why = _statement_evidence(lay, n_before, heads)
    if why is None:
        # No bracket is shown around the change, and nothing shows it is outside brackets either: the middle of a
        # long signature, call or display looks exactly like this (`x: int = 1,` even parses as a statement).
        return HunkIntent(None, None, keys(heads), "no bracket and no statement shown around the change; role unknown")
    return HunkIntent(None, "stmt", keys(heads), f"statement level: {why}")


#: first words that only ever start a statement (never an element inside brackets)
_STATEMENT_WORDS = frozenset(
    {"return", "raise", "import", "pass", "del", "global", "nonlocal", "break", "continue", "assert"}
)
#: an augmented assignment, or an assignment to an attribute or item: statements only (no keyword argument looks so)
_STATEMENT_ASSIGN = re.compile(r"^\s*(?:\w+(?:\.\w+|\[[^\]]*\])*\s*[-+*/%&|^@]=|\w+(?:\.\w+|\[[^\]]*\])+\s*=(?!=))")
#: a plain assignment written with spaces and no trailing comma (`name = value`): how statements are written, and
#: how no formatter writes a keyword argument or a parameter default
_PLAIN_ASSIGN = re.compile(r"^\s*\w+\s+=\s+(?!=)\S.*[^,\s]\s*$")


def _statement_evidence(lay: PythonLayout, n_before: int, heads: list[int]) -> str | None:
    """What in a fragment with no open bracket before its change shows the change sits at statement level, or None.

    With no bracket open before the change and none closed after it, the fragment is all at one level: either all
    inside one bracket pair whose ends it does not show, or all statements.  A line that can only be a statement
    decides it.  Before a bracket the fragment closes without showing its opener, lines were inside brackets:
    only lines after the last such closer count (and the closer's own line when it ends a header, ``) -> T:``)."""
    if heads:
        return f"under `{lay.lines[heads[0]].strip()}`"
    closed = [i for i, _ in lay.unmatched_closers if i < n_before]
    first = 0
    if closed:
        first = closed[-1] + 1
        text = lay.lines[closed[-1]].split("#", 1)[0].rstrip()
        if text.endswith(":"):
            return f"after `{lay.lines[closed[-1]].strip()}`"
    for j in range(first, len(lay.lines)):
        if not lay.code_start[j]:
            continue
        text = lay.lines[j].strip()
        code = text.split("#", 1)[0].rstrip() if "'" not in text and '"' not in text else text
        word = re.split(r"[\s:(\[]", code, maxsplit=1)[0]
        if (
            word in _STATEMENT_WORDS
            or (word in _COMPOUND and code.endswith(":"))
            or (word == "from" and " import " in code)
            or re.match(r"@\w", code)
            or _STATEMENT_ASSIGN.match(code)
            or _PLAIN_ASSIGN.match(code)
        ):
            return f"`{text}`"
    return None


def parse_error(text: str, path: str = "<file>") -> tuple[int, str] | None:
    """(1-based line, message) of the first syntax error in Python source `text`, or None when it parses."""
    # memoized by content: a compose checks the same texts repeatedly (each placement's result and target, again
    # in the audit), and compiling a large module costs tens of milliseconds; the path is not in the answer
    return _parse_error(text)


@functools.lru_cache(maxsize=64)
def _parse_error(text: str) -> tuple[int, str] | None:
    path = "<file>"
    try:
        # compiling to code skips building Python AST objects (faster) and also reports the errors the
        # compiler finds after parsing ('return' outside a function, ...)
        compile(text, path, "exec", dont_inherit=True)
    except SyntaxError as e:
        return (e.lineno or 0, e.msg or "invalid syntax")
    except (ValueError, MemoryError, RecursionError) as e:
        return (0, str(e))
    return None


def scope_at(lines: list[str], line_no: int) -> Scope | None:
    """Scope of 1-based `line_no` in a Python file given as lines; None when the file does not parse."""
    if parse_error("\n".join(ln[:-1] if ln.endswith("\r") else ln for ln in lines)) is not None:
        return None
    lay = PythonLayout(lines)
    i = max(0, min(line_no - 1, len(lines)))
    return lay.scope(i)
