"""What several commands share: the options declared once, and the cache, progress display and progress lines their
handlers set up.

A command takes shared options through `options(...)` (argparse `parents=`), and may say what one means for it with
its own help text.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from pathlib import Path

from ..errors import ComposeError

#: where things are when the user names nothing (relative to the current directory)
DEFAULTS = {
    "series": "series",  # the series folder of this repository
    "repo": "vllm",  # the vLLM submodule
}

#: options several commands share, each declared once: its flags and `add_argument` keywords
SHARED_OPTIONS = {
    "series": (("--series",), {"default": DEFAULTS["series"], "type": Path, "help": "series folder (default: series)"}),
    "repo": (("--repo",), {"default": DEFAULTS["repo"], "type": Path, "help": "vLLM git repository (default: vllm)"}),
    "init": (
        ("--init",),
        {"action": "store_true", "help": "create the --repo folder and a repository in it if missing"},
    ),
    "json": (("--json",), {"type": Path, "metavar": "FILE", "help": "also write the report as JSON"}),
    "sources": (("--sources",), {"type": Path, "metavar": "DIR", "help": "seed the cache with the files in DIR"}),
    "cache": (
        ("--cache",),
        {"type": Path, "metavar": "DIR", "help": "cache folder (default: $VLLM_COMPOSE_CACHE or XDG)"},
    ),
    "offline": (("--offline",), {"action": "store_true", "help": "use only the cache and --sources"}),
    "quiet": (("--quiet", "-q"), {"action": "store_true", "help": "no progress display"}),
    "no_import_smoke": (
        ("--no-import-smoke",),
        {
            "action": "store_true",
            "help": "skip importing the changed modules (recorded in the report; without it the import smoke runs "
            "only where the installed vLLM is the release composed, its kernels load and a CUDA driver is present, "
            "and is skipped with the reason elsewhere)",
        },
    ),
    "no_ampere_gate": (
        ("--no-ampere-gate",),
        {
            "action": "store_true",
            "help": "build without the Ampere gate (the DSA kernels compiled for sm_80/86); recorded in the report",
        },
    ),
    "allow_unreviewed": (
        ("--allow-unreviewed",),
        {
            "action": "store_true",
            "help": "build although relocated or merged landings have no approval for the release (recorded)",
        },
    ),
}
#: what `--offline` means for the commands that compose into a repository
OFFLINE_REPO = "use only the repository, the cache and --sources"


def options(*names: str, **helps: str) -> argparse.ArgumentParser:
    """A parent parser holding the shared options `names` (keys of `SHARED_OPTIONS`), in that order; `helps`
    replaces an option's help text for this command. Built afresh per command: argparse shares a parent's actions
    with every child, so a help text changed for one command would change for all."""
    parent = argparse.ArgumentParser(add_help=False)
    for name in names:
        flags, kwargs = SHARED_OPTIONS[name]
        parent.add_argument(*flags, **{**kwargs, **({"help": helps[name]} if name in helps else {})})
    return parent


def cache_of(args):
    """The cache the command line names (`--cache`, else the default), seeded with `--sources` when given."""
    from ..cache import Cache, seed_cache

    cache = Cache(args.cache) if getattr(args, "cache", None) else Cache()
    if getattr(args, "sources", None):
        if not args.sources.is_dir():
            raise ComposeError(f"--sources {args.sources} is not a directory", hint="pass a folder of files")
        seed_cache(args.sources, cache)
    return cache


def say(line: str) -> None:
    """A progress line of a long step (the gate's environment being built), on stderr."""
    print(line, file=sys.stderr, flush=True)


@contextlib.contextmanager
def nothing():
    """A context that does nothing (where a command has nothing to set up)."""
    yield None


class ProgressDisplay:
    """A rich progress display for downloads and imports, or a silent callback."""

    def __init__(self, quiet: bool) -> None:
        self.quiet = quiet or not sys.stderr.isatty()
        self._bar = None
        self._tasks: dict[str, int] = {}

    def __enter__(self):
        if self.quiet:
            return None
        from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeRemainingColumn

        self._bar = Progress(
            TextColumn("{task.description}"), BarColumn(), DownloadColumn(), TimeRemainingColumn(), transient=True
        )
        self._bar.start()
        return self._update

    def _update(self, event: str, done: int, total: int | None) -> None:
        if event not in self._tasks:
            self._tasks[event] = self._bar.add_task(event, total=total)
        self._bar.update(self._tasks[event], completed=done, total=total)

    def __exit__(self, *exc) -> None:
        if self._bar is not None:
            self._bar.stop()
