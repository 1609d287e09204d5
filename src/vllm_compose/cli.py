"""Command line: argument parsing and dispatch only.

`vllm-compose rebase|apply|check-fuzz|validate ...`; `scripts/rebase_series.py`, `scripts/apply_series.py` and
`scripts/check_fuzz.py` are shims that call `main()` with their subcommand. Every `ComposeError` is caught here
once, printed as "error: <what, where>\\n  hint: <how to proceed>" and mapped to its exit code (README: exit codes).
The commands, with their options and handlers, are in `commands` (a module per group); this module only assembles
them.
"""

from __future__ import annotations

import argparse
import sys

from . import commands
from .errors import ComposeError, ExitCode

#: what `vllm-compose --help` says the tool is
DESCRIPTION = (
    "Compose upstream vLLM PRs (#46994 MTP under pipeline parallelism, #38476 TRITON_MLA_SPARSE) and the series' "
    "skew fixes onto a vLLM release as the git branch compose-<PRs>-<tag> of vllm/, placing every hunk where it "
    "belongs and proving it (audit, checks); then build a wheel, an editable install or an image overlay from it."
)
EPILOG = (
    "exit codes: 0 done; 1 stopped on a conflict (resume with --continue) / hunks not placed / audit found bad "
    "hunks; 2 refused by the audit or the checks (nothing written); 3 bad input, configuration or network (the "
    "message says what and how to proceed); 4 bad command line (usage: an unknown or missing option, or options "
    "that do not go together). README.md has the details."
)


class UsageError(Exception):
    """A command line argparse cannot make sense of; `main` prints it with the usage and returns `ExitCode.USAGE`."""

    def __init__(self, parser: argparse.ArgumentParser, message: str) -> None:
        super().__init__(message)
        self.parser = parser


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage error is raised (exit code 4, not argparse's 2: the README gives 2 to "refused")."""

    def error(self, message: str):
        raise UsageError(self, message)


def _tool_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("vllm-compose")
    except PackageNotFoundError:  # run from a source tree that was never installed
        return "unknown (not installed: pip install -e .)"


def _parser() -> argparse.ArgumentParser:
    """The command line: the tool's own options, and each group's commands (`commands.GROUPS`)."""
    p = _Parser(prog="vllm-compose", description=DESCRIPTION, epilog=EPILOG)
    p.add_argument("--version", action="version", version=f"%(prog)s {_tool_version()}")
    sub = p.add_subparsers(dest="command", required=True)
    for group in commands.GROUPS:
        group.add_parsers(sub)
    return p


def main(argv: list[str] | None = None) -> int:
    """Entry point of the console command and the scripts; returns the exit code."""
    try:
        args = _parser().parse_args(argv)
    except UsageError as exc:
        exc.parser.print_usage(sys.stderr)
        print(f"{exc.parser.prog}: error: {exc}", file=sys.stderr)
        return int(ExitCode.USAGE)
    try:
        return int(args.handler(args))
    except ComposeError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return int(exc.exit_code)
    except KeyboardInterrupt:
        print("interrupted: no branch or ref was written", file=sys.stderr)
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
