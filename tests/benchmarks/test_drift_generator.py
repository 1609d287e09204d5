"""The drift benchmark's generator: sites chosen by syntax, edits laid out like the code around them, diffs, ground
truth on a drifted target, case selection, scoring, and the scratch tool runners. Small sources written here; no
downloads."""

from __future__ import annotations

import shutil
import sys
import textwrap
from pathlib import Path

import pytest

# benchmarks/ is a folder of scripts, not a package: put it first on the path, as `python benchmarks/X.py` does
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

from drift.cases import build_case, choose_cases, drift_class, make_diff, pre_image  # noqa: E402
from drift.markdown import table, write_section  # noqa: E402
from drift.sites import Site, apply_edit, find_sites, new_element_text  # noqa: E402
from drift.tools import ToolResult, Workbench  # noqa: E402
from drift_benchmark import judge, summarize  # noqa: E402

from vllm_compose.patchfile import parse_patch  # noqa: E402

SOURCE = textwrap.dedent(
    '''\
    """A look-alike module."""

    from pkg.layers import (
        Linear,
        Norm,
    )
    from pkg.util import cdiv


    class Runner:
        def __init__(self, config, prefix: str = ""):
            super().__init__(config)
            self.size = cdiv(config.size, 2)

        def build(
            self,
            batch: int,
            device: str = "cuda",
        ) -> list:
            out = make_buffers(
                batch,
                device=device,
            )
            names = [
                "alpha",
                "beta",
            ]
            return out + names


    def priorities(major: int) -> list[str]:
        if major == 10:
            return ["FLASH", "CUTLASS"]
        return ["TRITON", "FLASH"]
    '''
)


def site_of(text: str, kind: str, anchor: str) -> Site:
    matches = [s for s in find_sites(text) if s.kind == kind and s.anchor == anchor]
    assert len(matches) == 1, [s for s in find_sites(text) if s.kind == kind]
    return matches[0]


# --- sites -----------------------------------------------------------------------------------------------------------


def test_sites_have_syntactic_identities():
    ids = {(s.kind, s.chain, s.container, s.anchor) for s in find_sites(SOURCE)}
    assert ("param", ("class Runner", "def build"), "", "device") in ids
    assert ("param", ("class Runner", "def __init__"), "", "prefix") in ids
    assert ("kwarg", ("class Runner", "def build"), "make_buffers", "device") in ids
    assert ("import-name", (), "pkg.layers", "Norm") in ids
    assert ("import-name", (), "pkg.util", "cdiv") in ids
    assert ("list-element", ("class Runner", "def build"), "", "'beta'") in ids
    # statements are identified by what they assign or call, not by their full text
    assert ("statement", ("class Runner", "def __init__"), "", "super().__init__(...)") in ids
    assert ("statement", ("class Runner", "def __init__"), "", "self.size = ...") in ids


def test_sites_that_are_not_unique_are_not_offered():
    # "FLASH" ends no list, but "CUTLASS" and "FLASH" each end one list: only unique anchors are offered, and the
    # two returns' lists differ by last element; a repeated last element would be dropped
    text = SOURCE.replace('return ["FLASH", "CUTLASS"]', 'return ["TRITON", "FLASH"]')
    anchors = [s.anchor for s in find_sites(text) if s.kind == "list-element" and s.chain == ("def priorities",)]
    assert anchors == []


def test_unparseable_file_has_no_sites():
    assert find_sites("def broken(:\n") == []


# --- edit layouts ---------------------------------------------------------------------------------------------------


def edited_lines(text: str, kind: str, anchor: str, name: str = "extra") -> list[str]:
    out = apply_edit(text, site_of(text, kind, anchor), new_element_text(kind, name))
    assert out is not None
    added = [line for line in out.split("\n") if line not in text.split("\n")]
    return added


def test_vertical_param_with_trailing_comma_gets_its_own_line():
    assert edited_lines(SOURCE, "param", "device") == ["        extra: int | None = None,"]


def test_inline_param_is_spliced_into_the_signature():
    assert edited_lines(SOURCE, "param", "prefix") == [
        '    def __init__(self, config, prefix: str = "", extra: int | None = None):'
    ]


def test_vertical_element_without_trailing_comma_gets_one():
    text = SOURCE.replace('"beta",\n', '"beta"\n')
    out = apply_edit(text, site_of(text, "list-element", "'beta'"), '"gamma"')
    assert '            "beta",\n            "gamma"\n        ]' in out


def test_kwarg_import_statement_layouts():
    assert edited_lines(SOURCE, "kwarg", "device") == ["            extra=None,"]
    assert edited_lines(SOURCE, "import-name", "Norm") == ["    extra,"]
    assert edited_lines(SOURCE, "import-name", "cdiv") == ["from pkg.util import cdiv, extra"]
    assert edited_lines(SOURCE, "statement", "self.size = ...") == ["        extra = None"]


def test_edit_that_breaks_the_syntax_is_refused():
    # a default-less parameter after one with a default: the new one has a default, fine; but after `/` with a
    # required positional following, the edit would put a defaulted parameter before a required one
    text = "def f(a, /, b):\n    pass\n"
    bad = Site("param", ("def f",), "", "a")
    assert apply_edit(text, bad, "x: int | None = None") is None


# --- diffs and drift ------------------------------------------------------------------------------------------------


def test_diff_is_a_git_style_single_hunk_with_section_heading():
    site = site_of(SOURCE, "kwarg", "device")
    edited = apply_edit(SOURCE, site, "extra=None")
    diff = make_diff("pkg/runner.py", SOURCE, edited)
    patch = parse_patch(diff)
    (fp,) = patch.files
    assert fp.path == "pkg/runner.py" and fp.old_blob and fp.new_blob
    (hunk,) = fp.hunks
    assert hunk.section == "def build("
    assert hunk.added == ["            extra=None,"]
    assert hunk.leading_context == 3 and hunk.trailing_context == 3
    assert pre_image(diff) == hunk.pre_image


def test_diff_applies_with_gnu_patch(tmp_path):
    if shutil.which("patch") is None:
        pytest.skip("GNU patch is not installed")
    site = site_of(SOURCE, "param", "device")
    edited = apply_edit(SOURCE, site, "extra: int | None = None")
    with Workbench() as bench:
        res = bench.gnu_patch("pkg/runner.py", SOURCE, make_diff("pkg/runner.py", SOURCE, edited), fuzz=0)
    assert res.text == edited


def test_ground_truth_on_a_drifted_target():
    # the target added a line above the call and an argument to super().__init__: same sites, drifted context
    target = SOURCE.replace(
        "        super().__init__(config)\n",
        "        self.ready = False\n        super().__init__(config, strict=True)\n",
    )
    site = site_of(SOURCE, "statement", "super().__init__(...)")
    case = build_case("t#1", "pkg/runner.py", site, "extra", SOURCE, target)
    assert case.drift == "drifted" and not case.must_reject
    assert "        super().__init__(config, strict=True)\n        extra = None\n" in case.truth


def test_ground_truth_follows_the_anchor_wherever_it_now_is():
    # upstream appended a parameter after the anchor: the new one still goes right after the anchor
    target = SOURCE.replace(
        '        device: str = "cuda",\n', '        device: str = "cuda",\n        pin: bool = False,\n'
    )
    site = site_of(SOURCE, "param", "device")
    case = build_case("t#1", "pkg/runner.py", site, "extra", SOURCE, target)
    assert (
        '        device: str = "cuda",\n        extra: int | None = None,\n        pin: bool = False,\n' in case.truth
    )
    # but only last elements are offered as sites in the source
    assert "self" not in {s.anchor for s in find_sites(SOURCE) if s.kind == "param"}


def test_ground_truth_is_reject_when_the_site_is_gone_or_ambiguous():
    site = site_of(SOURCE, "param", "device")
    renamed = SOURCE.replace('device: str = "cuda"', 'target: str = "cuda"').replace("device=device", "device=target")
    assert build_case("t#1", "p.py", site, "extra", SOURCE, renamed).must_reject
    # the whole class defined twice (e.g. under a platform switch): the site is no longer unique
    twice = SOURCE + "\n" + SOURCE[SOURCE.index("class Runner") : SOURCE.index("def priorities")]
    case = build_case("t#2", "p.py", site, "extra", SOURCE, twice)
    assert case.must_reject and case.drift == "undrifted"


def test_drift_class_compares_the_pre_image_verbatim():
    site = site_of(SOURCE, "import-name", "Norm")
    diff = make_diff("p.py", SOURCE, apply_edit(SOURCE, site, "extra"))
    assert drift_class(diff, "# header\n\n" + SOURCE) == "undrifted"  # offset only
    assert drift_class(diff, SOURCE.replace("    Linear,\n", "    Linear,\n    Conv,\n")) == "drifted"


# --- case selection -------------------------------------------------------------------------------------------------


def releases() -> tuple[dict[str, str], dict[str, str]]:
    source, target = {}, {}
    drift = [  # (before, after) edits upstream made between the releases, near each kind of site
        ("            batch,\n", "            batch,\n            pinned=True,\n"),
        ('            "alpha",\n', '            "alpha",\n            "omega",\n'),
        ("    Linear,\n", "    Linear,\n    Conv,\n"),
        ("        self.size =", "        self.ready = False\n        self.size ="),
        ('        device: str = "cuda",\n', '        device: str = "cuda",\n        pin: bool = False,\n'),
    ]
    for i in range(6):
        text = SOURCE.replace("Runner", f"Runner{i}")
        source[f"pkg/m{i}.py"] = text
        # odd files drift around every site, even ones only move down
        if i % 2:
            for before, after in drift:
                assert before in text
                text = text.replace(before, after)
            target[f"pkg/m{i}.py"] = text
        else:
            target[f"pkg/m{i}.py"] = "import os\n" + text
    source["pkg/same.py"] = target["pkg/same.py"] = SOURCE  # unchanged: never used
    source["pkg/gone.py"] = SOURCE  # only in the source: never used
    return source, target


def test_case_selection_is_deterministic_and_balanced():
    source, target = releases()
    a = choose_cases(source, target, 6, seed=7, label="x", per_file=2)
    b = choose_cases(source, target, 6, seed=7, label="x", per_file=2)
    assert [(c.path, c.site.identity) for c in a] == [(c.path, c.site.identity) for c in b]
    assert len(a) == 6
    # 6 cases over 2 drift classes x 9 kinds: no (class, kind) pair twice
    assert len({(c.drift, c.site.kind) for c in a}) == 6
    assert {c.path for c in a} <= {f"pkg/m{i}.py" for i in range(6)}
    assert max(sum(c.path == p for c in a) for p in source) <= 2
    assert {c.drift for c in a} == {"drifted", "undrifted"}
    for c in a:  # every case's diff really is against the source, and its truth really is the target edited
        assert parse_patch(c.diff).files[0].hunks[0].added
        assert c.truth is None or c.truth != c.target_text
    other = choose_cases(source, target, 6, seed=8, label="x", per_file=2)
    assert [c.site.identity for c in other] != [c.site.identity for c in a]


# --- scoring and output ---------------------------------------------------------------------------------------------


def test_judge_outcomes():
    truth = "x = f(\n    a,\n    b=None,\n)\n"
    assert judge(ToolResult(truth), truth) == ("correct", False)
    assert judge(ToolResult("x = f(a, b=None)\n"), truth) == ("correct", True)  # same tree, other layout
    assert judge(ToolResult("x = f(a)\nb = None\n"), truth) == ("misplaced", False)
    assert judge(ToolResult(truth), None) == ("misplaced", False)  # applied where it must be rejected
    assert judge(ToolResult(None, "refused"), truth) == ("rejected", False)
    assert judge(ToolResult(None, "refused"), None) == ("rejected", False)


def test_summary_counts_rightful_rejections():
    records = [
        {"drift": "drifted", "must_reject": True, "tools": {"t": {"outcome": "rejected", "equivalent": False}}},
        {"drift": "drifted", "must_reject": False, "tools": {"t": {"outcome": "correct", "equivalent": True}}},
        {"drift": "undrifted", "must_reject": False, "tools": {"t": {"outcome": "misplaced", "equivalent": False}}},
    ]
    s = summarize(records)
    assert s["cases"] == {"drifted": 2, "undrifted": 1}
    assert s["tools"]["t"]["drifted"] == {"rejected": 1, "rejected_rightly": 1, "correct": 1, "equivalent": 1}
    assert s["tools"]["t"]["undrifted"]["misplaced"] == 1


def test_write_section_replaces_only_its_block(tmp_path):
    doc = tmp_path / "bench.md"
    doc.write_text("# Benchmarks\n\nhand-written intro\n")
    write_section(doc, "drift", "first")
    write_section(doc, "speed", "fast")
    write_section(doc, "drift", table(["a", "b"], [[1, 2]]))
    text = doc.read_text()
    assert text.startswith("# Benchmarks\n\nhand-written intro\n")
    assert "first" not in text and "| 1 | 2 |" in text and "fast" in text
    assert text.index("BEGIN drift") < text.index("BEGIN speed")


# --- tools ----------------------------------------------------------------------------------------------------------


@pytest.mark.skipif(shutil.which("git") is None or shutil.which("patch") is None, reason="needs git and GNU patch")
def test_tools_on_a_drifted_case():
    target = SOURCE.replace("            batch,\n", "            batch,\n            pinned=True,\n")
    site = site_of(SOURCE, "kwarg", "device")
    case = build_case("t#1", "pkg/runner.py", site, "extra", SOURCE, target)
    assert case.drift == "drifted"
    with Workbench() as bench:
        assert not bench.gnu_patch(case.path, target, case.diff, fuzz=0).applied
        assert not bench.git_apply(case.path, target, case.diff, three_way=False).applied
        # without the pre-image blob, --3way has nothing to merge with
        assert not bench.git_apply(case.path, target, case.diff, three_way=True).applied
        merged = bench.git_apply(case.path, target, case.diff, three_way=True, base=SOURCE)
        assert merged.text == case.truth
        fuzzy = bench.gnu_patch(case.path, target, case.diff, fuzz=2)
        assert fuzzy.text == case.truth


# --- the classes without a bracket in the context, import statements, synthetic drift ----------------------------

LONG = textwrap.dedent(
    """\
    import os
    from pkg.layers import Linear


    def build(
        self,
        batch: int,
        steps: int,
        device: str = "cuda",
        dtype: str = "half",
        seed: int = 0,
        extra: int = 1,
    ) -> list:
        return [
            "one",
            "two",
            "three",
            "four",
            "five",
            "six",
        ]
    """
)


def test_mid_sites_have_elements_only_in_their_context():
    mids = {(s.kind, s.anchor) for s in find_sites(LONG) if s.kind.endswith("-mid")}
    # 2 elements before and 3 after, none on the opener's line
    assert mids == {("param-mid", "steps"), ("param-mid", "device"), ("list-mid", "'three'")}
    case = build_case("m#1", "pkg/long.py", site_of(LONG, "param-mid", "steps"), "new", LONG, LONG)
    body = [ln for ln in case.diff.splitlines()[5:] if ln.startswith(" ")]
    assert len(body) == 6 and not any(c in ln for ln in body for c in "()[]")


def test_import_statement_sorts_right_after_its_anchor():
    site = site_of(LONG, "import-statement", "from pkg.layers")
    assert new_element_text("import-statement", "bench_1", site) == "from pkg.layers.aaa_bench_1 import bench_1"
    out = apply_edit(LONG, site, new_element_text("import-statement", "bench_1", site))
    assert "from pkg.layers import Linear\nfrom pkg.layers.aaa_bench_1 import bench_1\n" in out
    # a new name is no `__future__` feature: not offered
    assert not [s for s in find_sites("from __future__ import annotations\n") if s.kind.startswith("import")]


def test_adjacent_drift_truth_by_order():
    from drift.synthetic import adjacent_target, adjacent_truth

    site = site_of(LONG, "param", "extra")  # the hunk appends: the anchor fixes the order
    target = adjacent_target(LONG, site, "theirs")
    assert "extra: int = 1,\n    theirs: int | None = None,\n" in target
    truth = adjacent_truth(target, site, new_element_text("param", "new"))
    assert "extra: int = 1,\n    new: int | None = None,\n    theirs: int | None = None,\n" in truth
    mid = site_of(LONG, "param-mid", "steps")  # an ordered element between two: a decision, must reject
    assert adjacent_truth(adjacent_target(LONG, mid, "theirs"), mid, new_element_text("param-mid", "new")) is None


def test_restructured_drift_splices_a_sub_list():
    from drift.synthetic import restructured_target

    site = site_of(LONG, "list-mid", "'three'")
    target = restructured_target(LONG, site, "_sub")
    assert '_sub = [\n    "one",\n    "two",\n    "three",\n]\n\n\ndef build(' in target
    assert '        *_sub,\n        "four",' in target
    assert restructured_target(LONG, site_of(LONG, "param-mid", "steps"), "_sub") is None


def test_summary_splits_must_reject_harm_by_kind():
    from drift_benchmark import harm

    def rec(kind, outcome):
        return {
            "drift": "drifted",
            "kind": kind,
            "must_reject": True,
            "synthetic": "",
            "tools": {"t": {"outcome": outcome, "equivalent": False}},
        }

    s = summarize([rec("kwarg", "misplaced"), rec("param", "misplaced"), rec("statement", "rejected")])
    assert s["harm"]["t"] == {"harmless": 1, "harmful": 1}
    assert harm(rec("import-name", "misplaced")) == "harmless" and harm(rec("list-mid", "x")) == "harmful"
    assert harm({**rec("list-mid", "x"), "order_free": True}) == "harmless"  # the names of __all__


def test_order_free_sites():
    from drift.sites import order_free

    text = 'def f(a, b, *, c=1, d=2):\n    pass\n\n\n__all__ = [\n    "x",\n    "y",\n]\n'
    assert order_free(text, site_of(text, "param", "d")) and not order_free(text, Site("param", ("def f",), "", "b"))
    assert order_free(text, site_of(text, "list-element", "'y'"))
