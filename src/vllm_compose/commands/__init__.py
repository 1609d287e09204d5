"""The commands, one module per group: each adds its subcommands with their options to the parser, and holds their
handlers: the parsed options in, the library called, its report printed (a result's JSON is its own `to_json()`),
the exit code out.

`cli` builds the parser from `GROUPS`, in this order (the order `--help` lists the commands in), and calls the
handler the parsed command line names. The work itself is in the modules of its nouns (compose, review, status,
artifacts, ampere, proof, pp, ...), which return values and raise `ComposeError`s; only this layer and `cli` print.
Options several commands take are declared once (`shared.SHARED_OPTIONS`).
"""

from __future__ import annotations

from . import artifacts, compose, gates, pp, pr_bump, prove

#: the command groups, in the order `--help` lists their commands
GROUPS = (compose, gates, artifacts, pp, prove, pr_bump)
