"""series.toml edited as text: an entry's source, `pr`, `pr_url` and a fix's `resolves` replaced, entries removed,
every comment and line the person wrote kept (a TOML writer would drop them).

`pr-bump` writes its candidate series this way (`rewrite_series_text`), then validates it with `load_series`.
"""

from __future__ import annotations

import re

from .errors import SeriesError

_ENTRY_LINE = re.compile(r"^\[\[entry\]\]\s*$")
_KEY_LINE = re.compile(r"^(?P<key>[A-Za-z_][A-Za-z0-9_]*)\s*=")


def _toml_value(value) -> str:
    if isinstance(value, bool) or not isinstance(value, (str, int, list)):
        raise TypeError(f"cannot write {value!r}")
    if isinstance(value, int):
        return str(value)
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def rewrite_series_text(
    text: str,
    entry_id: str,
    source: dict | None,
    pr: int | None,
    pr_url: str | None,
    resolves: dict[str, list[str]],
    retire: tuple[str, ...],
) -> str:
    """series.toml with entry `entry_id`'s [entry.source] table replaced by `source` (when given), its `pr` and
    `pr_url` set (when given), the `resolves` lists of the fixes named in `resolves` replaced, and the entries of
    `retire` removed; every other line as it was. Raises `SeriesError` when the file's layout is not one it can
    edit (an inline `source = {...}`)."""
    lines = text.splitlines(keepends=True)
    starts = [i for i, line in enumerate(lines) if _ENTRY_LINE.match(line)]
    head = lines[: starts[0]] if starts else lines
    blocks = [lines[s : (starts[k + 1] if k + 1 < len(starts) else len(lines))] for k, s in enumerate(starts)]
    out = list(head)
    for block in blocks:
        eid = _block_id(block)
        if eid in retire:
            continue
        if eid == entry_id:
            block = _set_keys(block, {"pr": pr, "pr_url": pr_url})
            if source is not None:
                block = _replace_source(block, entry_id, source)
        if eid in resolves:
            block = _replace_key(block, "resolves", _resolves_text(resolves[eid]))
        out += block
    return "".join(out)


def _block_id(block: list[str]) -> str | None:
    for line in block:
        m = re.match(r'^id\s*=\s*"([^"]*)"', line)
        if m:
            return m.group(1)
    return None


def _key_span(block: list[str], key: str) -> tuple[int, int] | None:
    """[start, end) of `key = value` in the entry's own table (before any sub-table), a multi-line array or string
    included."""
    for i, line in enumerate(block):
        if line.startswith("["):
            if i:
                return None
            continue
        m = _KEY_LINE.match(line)
        if m and m.group("key") == key:
            return i, _value_end(block, i)
    return None


def _value_end(block: list[str], i: int) -> int:
    """The line after the value of the `key = value` at line `i` (a multi-line array or string included)."""
    end = i + 1
    value = block[i].split("=", 1)[1].strip()
    if value.startswith('"""') and value.count('"""') < 2:
        while end < len(block) and '"""' not in block[end]:
            end += 1
        end += 1
    elif value.startswith("[") and value.count("[") > value.count("]"):
        while end < len(block) and not block[end].strip().startswith("]"):
            end += 1
        end += 1
    return end


def _replace_key(block: list[str], key: str, line: str) -> list[str]:
    span = _key_span(block, key)
    if span is None:
        insert = next((i for i, x in enumerate(block) if x.startswith("[") and i), len(block))
        while insert > 1 and not block[insert - 1].strip():
            insert -= 1
        return [*block[:insert], line, *block[insert:]]
    return [*block[: span[0]], line, *block[span[1] :]]


def _set_keys(block: list[str], values: dict) -> list[str]:
    for key, value in values.items():
        if value is not None:
            block = _replace_key(block, key, f"{key} = {_toml_value(value)}\n")
    return block


def _resolves_text(items: list[str]) -> str:
    one = f"resolves = {_toml_value(items)}\n"
    if len(one) <= 120:
        return one
    return "resolves = [\n" + "".join(f"    {_toml_value(i)},\n" for i in items) + "]\n"


def _replace_source(block: list[str], entry_id: str, source: dict) -> list[str]:
    if _key_span(block, "source") is not None:
        raise SeriesError(
            "the entry's source is an inline table; pr-bump edits an [entry.source] table",
            entry=entry_id,
            key="source",
            hint="write the source as an [entry.source] table, then run pr-bump again",
        )
    start = next((i for i, x in enumerate(block) if x.strip() == "[entry.source]"), None)
    if start is None:
        raise SeriesError("the entry has no [entry.source] table", entry=entry_id, key="source")
    end = start + 1
    while end < len(block) and _KEY_LINE.match(block[end]):
        end = _value_end(block, end)
    table = ["[entry.source]\n", *(f"{k} = {_toml_value(v)}\n" for k, v in source.items())]
    return [*block[:start], *table, *block[end:]]
