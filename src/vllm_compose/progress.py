"""Progress reporting for long steps (downloads, imports) without printing from library code.

Library functions accept an optional `progress(event, done, total)` callback; the CLI passes one that draws a rich
progress bar. `event` names the step (e.g. "download vllm-0.26.0.tar.gz"), `done` counts units so far (bytes or
files) and `total` is the expected count, or None when unknown. A step ends with a call where `done == total`.
"""

from __future__ import annotations

from collections.abc import Callable

#: progress(event, done, total)
ProgressCallback = Callable[[str, int, "int | None"], None]


def no_progress(event: str, done: int, total: int | None) -> None:
    """The callback used when the caller passed none."""


class Throttled:
    """Wraps a callback so that at most one call per `step` units reaches it (plus the final one).

    Readers call back per chunk; a rich bar needs far fewer updates than a 38 MB download has chunks.
    """

    def __init__(self, callback: ProgressCallback | None, event: str, total: int | None, step: int = 1 << 20) -> None:
        self.callback = callback or no_progress
        self.event = event
        self.total = total
        self.step = step
        self._last = -step

    def __call__(self, done: int, final: bool = False) -> None:
        if final or done - self._last >= self.step:
            self._last = done
            self.callback(self.event, done, self.total if not final or self.total is not None else done)
