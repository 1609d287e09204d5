"""The trailers of a composed commit: how a compose commit says which entry it holds and that this tool wrote it.

`replay` writes them at the end of every entry commit's message; `composed_branch` (which PRs a branch holds, for
version labels) and `series_diff` (which commit is which entry) read them back. One place, so that writer and readers
cannot drift apart. Kept free of imports so that readers stay light.
"""

from __future__ import annotations

import re

#: in every commit this tool writes; a branch whose tip lacks it holds someone's own work
COMPOSED_BY = "Composed-By: vllm-compose"
#: `Series-Entry: <entry id>`: the series entry a commit holds
ENTRY = re.compile(r"^Series-Entry:\s*(\S+)\s*$", re.M)
#: `Upstream-PR: <url or number>`: the upstream PR an entry carries (group 1: its number)
UPSTREAM_PR = re.compile(r"^Upstream-PR:\s*(?:.*/)?(\d+)\s*$", re.M)
#: the last commit of a compose branch, written after the entries (`precompiled`): not an entry
BUILD_SETUP = "Build-Setup: precompiled-stock-wheel"
#: `Review-Landing: <path>#<hunk> <verdict> <first>-<last> <digest>`: a hunk of the entry that landed relocated or
#: merged, for a person to review (`review`)
REVIEW_LANDING = re.compile(
    r"^Review-Landing:\s*(?P<file>.+)#(?P<hunk>\d+)\s+(?P<verdict>[a-z-]+)\s+(?P<first>\d+)-(?P<last>\d+)\s+"
    r"(?P<digest>[0-9a-f]+)\s*$",
    re.M,
)
#: `Review-Override: <what was let through>`: unreviewed landings allowed with `--allow-unreviewed`
REVIEW_OVERRIDE = "Review-Override:"
