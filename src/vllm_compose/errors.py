"""One user-facing error type with structured fields, and the named exit codes.

Library code raises `ComposeError` (or a subclass) and never prints or exits; the CLI catches it once at the
top, prints `str(error)` (what happened, to which object, how to proceed) and exits with `error.exit_code`.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field


class ExitCode(enum.IntEnum):
    """Exit codes shared by every command (documented in the README)."""

    OK = 0
    #: compose stopped on a conflict (resumable) / apply left hunks unapplied / audit found bad hunks
    CONFLICT = 1
    #: the audit or the checks refused the result
    REFUSED = 2
    #: bad input, configuration or network
    BAD_INPUT = 3
    #: the command line itself: an unknown command or option, a missing or malformed argument
    USAGE = 4


@dataclass
class ComposeError(Exception):
    """A failure the user can act on.

    `message` says what happened; the optional fields name the object it happened to; `hint` says how to proceed.
    """

    message: str
    entry: str | None = None
    file: str | None = None
    hunk: int | None = None
    tag: str | None = None
    key: str | None = None
    hint: str | None = None
    exit_code: ExitCode = field(default=ExitCode.BAD_INPUT)

    def __post_init__(self) -> None:
        super().__init__(self.message)

    def where(self) -> str:
        """The object the error is about, e.g. `entry 'pr38476', file 'vllm/x.py', hunk 3`."""
        parts = []
        if self.tag:
            parts.append(f"tag {self.tag}")
        if self.entry:
            parts.append(f"entry {self.entry!r}")
        if self.key:
            parts.append(f"key {self.key!r}")
        if self.file:
            parts.append(f"file {self.file!r}")
        if self.hunk is not None:
            parts.append(f"hunk {self.hunk}")
        return ", ".join(parts)

    def __str__(self) -> str:
        where = self.where()
        text = f"{where}: {self.message}" if where else self.message
        if self.hint:
            text += f"\n  hint: {self.hint}"
        return text

    def to_json(self) -> dict:
        """The error as a JSON-ready dict, for `--json` reports."""
        return {
            "message": self.message,
            "entry": self.entry,
            "file": self.file,
            "hunk": self.hunk,
            "tag": self.tag,
            "key": self.key,
            "hint": self.hint,
            "exit_code": int(self.exit_code),
        }


class PatchFormatError(ComposeError):
    """A patch file that cannot be parsed (malformed hunk, binary hunk, unsupported operation)."""


class SeriesError(ComposeError):
    """An invalid series file or entry."""


class SourceError(ComposeError):
    """An upstream release or entry content that cannot be obtained or verified (network, cache, sha256)."""


class RepositoryError(ComposeError):
    """The target git repository is missing, dirty, or in a state the command cannot work from."""


class ConflictError(ComposeError):
    """A hunk that cannot be placed; compose stops here and keeps resumable state."""

    def __init__(self, message: str, **kw) -> None:
        kw.setdefault("exit_code", ExitCode.CONFLICT)
        super().__init__(message, **kw)


class CommandLineError(ComposeError):
    """Options that need or exclude one another, which argparse cannot say (`--onto` unless `--continue`): a usage
    error like argparse's own, exit code 4."""

    def __init__(self, message: str, **kw) -> None:
        kw.setdefault("exit_code", ExitCode.USAGE)
        super().__init__(message, **kw)


class RefusedError(ComposeError):
    """The audit or the checks refused a result."""

    def __init__(self, message: str, **kw) -> None:
        kw.setdefault("exit_code", ExitCode.REFUSED)
        super().__init__(message, **kw)
