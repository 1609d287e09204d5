"""Benchmark cases: a synthetic edit made on the source release, its diff, and its ground truth on a target release.

A case is (site, diff against the source file, target file text, ground-truth text or None = "must be rejected").
Its *drift class* says whether the hunk's pre-image (context and removed lines) still occurs verbatim in the target
("undrifted") or not ("drifted"). Cases are chosen with a seeded RNG, so a run is reproducible from
(source release, target release, seed, case count).
"""

from __future__ import annotations

import difflib
import hashlib
import random
import re
from dataclasses import dataclass

from .sites import EDIT_KINDS, Site, apply_edit, find_sites, new_element_text, order_free
from .synthetic import SYNTHETIC_CLASSES, adjacent_target, adjacent_truth, restructured_target

#: git's built-in `python` diff driver pattern for the text after `@@ ... @@` (what GitHub diffs show)
_FUNCNAME = re.compile(r"^[ \t]*((class|(async[ \t]+)?def)[ \t].*)$")
#: git truncates the section heading to this many bytes
_FUNCNAME_MAX = 80


@dataclass
class Case:
    """One benchmark case."""

    case_id: str
    path: str
    site: Site
    #: identifier the inserted element is built around
    name: str
    #: the new element's text
    new: str
    #: the unified diff (git format, 3 lines of context) of the edit against the source release
    diff: str
    source_text: str
    target_text: str
    #: the same semantic edit applied to the target, or None: the site is gone or ambiguous, the hunk must be rejected
    truth: str | None
    #: "undrifted" (pre-image verbatim in the target) or "drifted"
    drift: str
    #: "" for a real target release, else the synthetic drift class (`synthetic.SYNTHETIC_CLASSES`)
    synthetic: str = ""
    #: the source file with the edit made: what the diff applied to its own base must give
    edited: str = ""
    #: the order of the site's elements carries no meaning (`sites.order_free`): a must-reject case applied is
    #: harmless
    order_free: bool = False

    @property
    def must_reject(self) -> bool:
        return self.truth is None


def git_blob_id(text: str) -> str:
    """The git blob id of a file with this text (what `index a..b` lines name)."""
    data = text.encode("utf-8", "surrogateescape")
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def _section(lines: list[str], before: int) -> str:
    """The nearest class/def line above 0-based line index `before`, as git's python driver finds it."""
    for i in range(before - 1, -1, -1):
        m = _FUNCNAME.match(lines[i])
        if m:
            return m.group(1).rstrip()[:_FUNCNAME_MAX]
    return ""


def make_diff(path: str, old: str, new: str, context: int = 3) -> str:
    """A git-style unified diff of one file (with `index` blob ids and python-driver section headings).

    Lines are compared with `difflib` over the changed window only: the common prefix and suffix are trimmed first,
    so a one-line edit to a 5,000-line file costs no more than to a 50-line one. Both texts must end with a newline.
    """
    old_lines = old.split("\n")[:-1]
    new_lines = new.split("\n")[:-1]
    limit = min(len(old_lines), len(new_lines))
    p = 0
    while p < limit and old_lines[p] == new_lines[p]:
        p += 1
    s = 0
    while s < limit - p and old_lines[-1 - s] == new_lines[-1 - s]:
        s += 1
    lo = max(0, p - context)
    old_hi, new_hi = (
        min(len(old_lines), len(old_lines) - s + context),
        min(len(new_lines), len(new_lines) - s + context),
    )
    body = [f"--- a/{path}", f"+++ b/{path}"]
    for line in difflib.unified_diff(old_lines[lo:old_hi], new_lines[lo:new_hi], n=context, lineterm=""):
        if line.startswith(("---", "+++")):
            continue
        if line.startswith("@@"):
            m = re.match(r"@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@", line)
            o_start, n_start = int(m.group(1)) + lo, int(m.group(3)) + lo
            o_len = m.group(2) if m.group(2) is not None else "1"
            n_len = m.group(4) if m.group(4) is not None else "1"
            first = o_start - 1 if int(o_len) else o_start
            sec = _section(old_lines, first)
            line = f"@@ -{_range(o_start, o_len)} +{_range(n_start, n_len)} @@" + (f" {sec}" if sec else "")
        body.append(line)
    header = [
        f"diff --git a/{path} b/{path}",
        f"index {git_blob_id(old)[:12]}..{git_blob_id(new)[:12]} 100644",
    ]
    return "\n".join(header + body) + "\n"


def _range(start: int, length: str) -> str:
    return str(start) if length == "1" else f"{start},{length}"


def pre_image(diff: str) -> list[str]:
    """The context and removed lines of the (single-file) diff's hunks, in order."""
    out = []
    in_hunk = False
    for line in diff.split("\n"):
        if line.startswith("@@"):
            in_hunk = True
            continue
        if not in_hunk or line.startswith(("---", "+++")):
            continue
        if line.startswith((" ", "-")):
            out.append(line[1:])
    return out


def _contains(haystack: list[str], needle: list[str]) -> bool:
    if not needle:
        return True
    first = needle[0]
    n = len(needle)
    for i in range(len(haystack) - n + 1):
        if haystack[i] == first and haystack[i : i + n] == needle:
            return True
    return False


def drift_class(diff: str, target_text: str) -> str:
    """ "undrifted" when the diff's pre-image occurs verbatim in the target, else "drifted"."""
    return "undrifted" if _contains(target_text.split("\n"), pre_image(diff)) else "drifted"


def build_case(case_id: str, path: str, site: Site, name: str, source_text: str, target_text: str) -> Case | None:
    """The case for inserting `name` at `site`, or None when the edit cannot be made in the source."""
    new = new_element_text(site.kind, name, site)
    edited = apply_edit(source_text, site, new)
    if edited is None or edited == source_text:
        return None
    diff = make_diff(path, source_text, edited)
    truth = apply_edit(target_text, site, new)
    return Case(
        case_id,
        path,
        site,
        name,
        new,
        diff,
        source_text,
        target_text,
        truth,
        drift_class(diff, target_text),
        "",
        edited,
        order_free(source_text, site),
    )


def choose_cases(
    source: dict[str, str],
    target: dict[str, str],
    count: int,
    seed: int,
    label: str = "",
    per_file: int = 4,
) -> list[Case]:
    """`count` cases over files present (and changed) in both releases: half drifted, half undrifted when the
    files allow it, the edit kinds spread evenly within each class, at most `per_file` cases per file.

    Files are visited in a seeded random order and each file's sites in a seeded random order, so the selection is
    a pure function of (files, count, seed, label)."""
    rng = random.Random(f"{seed}:{label}")
    paths = sorted(p for p in source.keys() & target.keys() if source[p] != target[p] and source[p].endswith("\n"))
    rng.shuffle(paths)
    limit = _quotas(count)
    used = {key: 0 for key in limit}
    cases: list[Case] = []
    for path in paths:
        if len(cases) >= count:
            break
        sites = find_sites(source[path])
        rng.shuffle(sites)
        # a site whose surrounding lines no longer occur together in the target is a likely drifted case; once
        # the undrifted quota of a kind is full, only those are worth building
        source_lines = source[path].split("\n")
        target_lines = target[path].split("\n")
        target_at: dict[str, list[int]] = {}
        for i, line in enumerate(target_lines):
            target_at.setdefault(line, []).append(i)
        taken = 0
        # bounded tries per file: a file whose sites all fall into full quotas should not eat the time budget
        for site in sites[: per_file * 8]:
            if taken >= per_file or len(cases) >= count:
                break
            if all(used[(d, site.kind)] >= limit[(d, site.kind)] for d in ("drifted", "undrifted")):
                continue
            lo = max(0, site.line - 5)
            window = source_lines[lo : site.line + 4]
            near = not any(target_lines[j : j + len(window)] == window for j in target_at.get(window[0], ()))
            if not near and used[("undrifted", site.kind)] >= limit[("undrifted", site.kind)]:
                continue
            n = len(cases) + 1
            name = f"bench_{label.replace('.', '_')}_{n}" if label else f"bench_{n}"
            case = build_case(f"{label}#{n}" if label else f"#{n}", path, site, name, source[path], target[path])
            if case is None or used[(case.drift, site.kind)] >= limit[(case.drift, site.kind)]:
                continue
            used[(case.drift, site.kind)] += 1
            taken += 1
            cases.append(case)
    return cases


def _quotas(count: int) -> dict[tuple[str, str], int]:
    """Per (drift class, kind) caps that add up to `count`, spread as evenly as possible."""
    # kind-major, so that a count smaller than the number of keys still spreads over both drift classes
    keys = [(d, k) for k in EDIT_KINDS for d in ("drifted", "undrifted")]
    base, extra = divmod(count, len(keys))
    return {key: base + (1 if i < extra else 0) for i, key in enumerate(keys)}


def synthetic_cases(source: dict[str, str], per_kind: int, seed: int, label: str = "synthetic") -> list[Case]:
    """Cases whose target is the source file with one synthetic drift (see `synthetic`): `per_kind` cases of each
    edit kind for the `adjacent` class and `per_kind` `list-mid` cases for `restructured`, from files in a seeded
    random order, at most two per file and class."""
    rng = random.Random(f"{seed}:{label}")
    paths = sorted(p for p, text in source.items() if text.endswith("\n"))
    rng.shuffle(paths)
    want = {("adjacent", k): per_kind for k in EDIT_KINDS} | {("restructured", "list-mid"): per_kind}
    cases: list[Case] = []
    for path in paths:
        if all(v == 0 for v in want.values()):
            break
        text = source[path]
        sites = find_sites(text)
        rng.shuffle(sites)
        taken = dict.fromkeys(SYNTHETIC_CLASSES, 0)
        for site in sites:
            for klass in SYNTHETIC_CLASSES:
                if want.get((klass, site.kind), 0) == 0 or taken[klass] >= 2:
                    continue
                n = len(cases) + 1
                name = f"bench_{n}"
                if klass == "adjacent":
                    target = adjacent_target(text, site, f"drift_{n}")
                else:
                    target = restructured_target(text, site, f"_bench_sub_{n}")
                if target is None:
                    continue
                new = new_element_text(site.kind, name, site)
                edited = apply_edit(text, site, new)
                if edited is None:
                    continue
                truth = adjacent_truth(target, site, new) if klass == "adjacent" else None
                diff = make_diff(path, text, edited)
                case = Case(
                    f"{label}#{n}",
                    path,
                    site,
                    name,
                    new,
                    diff,
                    text,
                    target,
                    truth,
                    drift_class(diff, target),
                    klass,
                    edited,
                    order_free(text, site),
                )
                cases.append(case)
                want[(klass, site.kind)] -= 1
                taken[klass] += 1
                break
    return cases
