"""Series rules: a fix whose `resolves` name only hunks of an entry the compose does not apply goes with it, and an
entry goes when an entry it `requires` is not applied (a fix re-targeting a PR's hunks, applied after the PR was
dropped as upstream, breaks the release at run time)."""

from __future__ import annotations

import json
import textwrap

from toy_compose import compose, git

from vllm_compose.series import load_series

#: carries the PR's second hunk (Engine.reset) in its own form
RETARGET = textwrap.dedent(
    """\
    From 0000000000000000000000000000000000000000 Mon Sep 17 00:00:00 2001
    From: Fixer <fixer@example.invalid>
    Date: Tue, 14 Nov 2023 22:13:20 +0000
    Subject: [PATCH] Engine.reset, re-targeted

    The PR's reset hunk in the form this release needs.
    ---
    diff --git a/pkg/mod.py b/pkg/mod.py
    --- a/pkg/mod.py
    +++ b/pkg/mod.py
    @@ -22,3 +22,6 @@ class Engine:
         def step(self, batch):
             self.steps += 1
             return [x * self.size for x in batch]
    +
    +    def reset(self):
    +        self.steps = 0
    """
)


def _add_entries(series_dir, text: str) -> None:
    (series_dir / "patches" / "0002-retarget.patch").write_text(RETARGET)
    toml = series_dir / "series.toml"
    toml.write_text(toml.read_text() + "\n" + textwrap.dedent(text))


RETARGET_ENTRY = """\
[[entry]]
id = "fix-retarget"
file = "patches/0002-retarget.patch"
title = "Engine.reset, re-targeted"
upstream_status = "Inappropriate"
why = "the PR's reset hunk no longer fits"
resolves = ["pr101:pkg/mod.py#2"]
"""


def _entries(out) -> dict:
    return {e["id"]: e for e in json.loads(out.read_text())["entries"]}


def test_a_fix_resolving_only_a_dropped_entrys_hunks_goes_with_it(toy_series, toy_upstream, tmp_path):
    _add_entries(toy_series, RETARGET_ENTRY)
    out = tmp_path / "r.json"
    assert compose(toy_series, toy_upstream, "v1.0.0", json_out=out) == 0
    assert _entries(out)["fix-retarget"]["status"] == "applied"
    assert git(toy_upstream, "show", "compose-101-v1.0.0:pkg/mod.py").count("def reset(self):") == 1
    # v1.3.0 ships the PR: the PR entry is dropped as upstream, and the fix that re-targets its hunk with it
    assert compose(toy_series, toy_upstream, "v1.3.0", json_out=out) == 0
    entries = _entries(out)
    assert entries["pr101"]["status"] == "dropped-upstream"
    assert entries["fix-retarget"]["status"] == "skipped"
    assert entries["fix-retarget"]["reason"].startswith("dropped with pr101, whose hunks its resolves name")
    assert git(toy_upstream, "show", "compose-101-v1.3.0:pkg/mod.py").count("def reset(self):") == 1


def test_an_entry_goes_when_an_entry_it_requires_is_not_applied(toy_series, toy_upstream, tmp_path):
    toml = toy_series / "series.toml"
    toml.write_text(toml.read_text().replace('why = "skew between', 'requires = ["pr101"]\nwhy = "skew between'))
    assert load_series(toy_series).entries[1].requires == ("pr101",)
    out = tmp_path / "r.json"
    assert compose(toy_series, toy_upstream, "v1.0.0", json_out=out) == 0
    assert _entries(out)["fix-farewell"]["status"] == "applied"
    assert compose(toy_series, toy_upstream, "v1.3.0", json_out=out) == 0
    fix = _entries(out)["fix-farewell"]
    assert fix["status"] == "skipped" and fix["reason"].startswith("requires pr101, which this compose does not apply")


def test_requiring_an_absent_entry_while_carrying_an_applied_ones_hunks_is_refused(
    toy_series, toy_upstream, tmp_path, capsys
):
    toml = toy_series / "series.toml"
    toml.write_text(toml.read_text().replace('why = "skew between', 'tags = "==1.0.0"\nwhy = "skew between'))
    _add_entries(toy_series, RETARGET_ENTRY.replace("resolves =", 'requires = ["fix-farewell"]\nresolves ='))
    # v1.1.0: the PR applies (its reset hunk carried by fix-retarget), fix-farewell's tags exclude the release
    assert compose(toy_series, toy_upstream, "v1.1.0") == 3
    err = capsys.readouterr().err
    assert "'fix-retarget' requires fix-farewell" in err and "carries hunks of pr101" in err
    assert git(toy_upstream, "branch", "--list", "compose-101-v1.1.0") == ""  # nothing written


def test_requires_must_name_an_earlier_entry(toy_series, capsys):
    from vllm_compose.cli import main

    toml = toy_series / "series.toml"
    toml.write_text(toml.read_text().replace('why = "skew between', 'requires = ["fix-later"]\nwhy = "skew between'))
    assert main(["validate", "--series", str(toy_series)]) == 3
    assert "requires names 'fix-later', which is not an earlier entry" in capsys.readouterr().err
