"""`vllm-compose validate`: a series folder checked as far as possible without the network or a repository.

`load_series` checks the file, every local patch and the `resolves` items that name local entries. The hunks of an
upstream PR entry are known only once its diff is at hand; when the pinned diff is already in the cache (any
earlier compose put it there) the `resolves` items naming it are checked too, else they are listed as checked by
the next compose (which refuses a missing hunk before writing anything).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from .cache import Cache
from .errors import SourceError
from .patchfile import Patch, parse_patch
from .series import Series, check_resolves, load_series
from .sources import fetch_entry_patch


@dataclass
class SeriesValidation:
    """What `validate` checked: the series, and the PR entries whose hunks it could (not) check offline."""

    series: Series
    #: PR entries whose cached diff the `resolves` items were checked against
    checked: list[str] = field(default_factory=list)
    #: PR entries some `resolves` item names whose diff is not in the cache (checked by the compose)
    unchecked: list[str] = field(default_factory=list)


def validate_series(series_dir: Path, cache: Cache) -> SeriesValidation:
    """Load `series_dir` and check every `resolves` item against the content at hand; raises `SeriesError`."""
    series = load_series(series_dir)
    named = {r.entry for e in series.entries for r in e.resolves}
    result = SeriesValidation(series)
    patches: dict[str, Patch] = {}
    for entry in series.entries:
        if entry.kind != "upstream-pr" or entry.id not in named:
            continue
        try:  # offline and without a repository: only what the cache holds, never a download
            data = fetch_entry_patch(entry, cache, offline=True)
        except SourceError:
            result.unchecked.append(entry.id)
            continue
        patches[entry.id] = parse_patch(data, name=entry.id, strip=entry.source.strip if entry.source else 1)
        result.checked.append(entry.id)
    check_resolves(series.entries, patches, series.file)
    return result
