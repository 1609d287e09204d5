"""Placement engine: case folders (stock file, patch, expected verdicts and result), unit checks, and the real-data
acceptance run of the two pinned upstream PRs onto vLLM 0.26.0 (skipped when those files are absent)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from vllm_compose.patchfile import decode_text, parse_patch, split_lines
from vllm_compose.placement import Verdict, place_file, place_hunk

CASES = Path(__file__).resolve().parents[1] / "cases" / "placement"
CASE_DIRS = sorted(p for p in CASES.iterdir() if p.is_dir()) if CASES.is_dir() else []
EXPECTED_KEYS = {"description", "hunks", "deleted", "parse_error"}


def _one(folder: Path, stem: str) -> Path | None:
    found = sorted(folder.glob(f"{stem}.*"))
    return found[0] if found else None


def _expected(case: Path) -> dict:
    """The case's expected.json: a one-line `description` of what the case shows and at least one hunk."""
    path = case / "expected.json"
    expected = json.loads(path.read_text())
    description = expected.get("description")
    assert isinstance(description, str) and description.strip(), f'{path}: needs a non-empty "description"'
    assert "\n" not in description, f"{path}: the description is one line"
    assert expected.get("hunks"), f'{path}: needs a non-empty "hunks" list (the verdicts to check)'
    unknown = sorted(set(expected) - EXPECTED_KEYS)
    assert not unknown, f"{path}: unknown keys {unknown} (known: {sorted(EXPECTED_KEYS)})"
    return expected


@pytest.mark.parametrize("case", CASE_DIRS, ids=[p.name for p in CASE_DIRS])
def test_case_folder(case: Path) -> None:
    """Each folder: target.<ext> (absent for a new file), patch.diff (one file), expected.json, expected.<ext>."""
    expected = _expected(case)
    patch = parse_patch((case / "patch.diff").read_bytes(), name=f"{case.name}/patch.diff")
    assert len(patch.files) == 1, "a case holds a one-file patch"
    target_file = _one(case, "target")
    target = decode_text(target_file.read_bytes()) if target_file else None
    result = place_file(patch.files[0], target, patch.files[0].path)

    got = [
        {"hunk": p.hunk.index, "verdict": p.verdict.value, "landing_line": p.landing_line} for p in result.placements
    ]
    want = [
        {"hunk": h["hunk"], "verdict": h["verdict"], "landing_line": h.get("landing_line")} for h in expected["hunks"]
    ]
    evidence = "\n".join(f"hunk {p.hunk.index}: {p.evidence}" for p in result.placements)
    assert got == want, evidence
    for p, h in zip(result.placements, expected["hunks"], strict=True):
        for needle in h.get("evidence_contains", []):
            assert needle in p.evidence, f"hunk {p.hunk.index}: {needle!r} not in {p.evidence!r}"
        if "scope" in h:
            assert p.scope is not None and p.scope.describe() == h["scope"], p.scope
    if expected.get("deleted"):
        assert result.new_text is None
        return
    result_file = next((f for f in sorted(case.glob("expected.*")) if f.name != "expected.json"), None)
    if result_file is None:
        # everything conflicted: the target is left as it was
        assert all(p.verdict is Verdict.CONFLICT for p in result.placements)
        assert result.new_text == target
    else:
        assert result.new_text == decode_text(result_file.read_bytes()), evidence
    if "parse_error" in expected:
        assert (result.parse_error is not None) == bool(expected["parse_error"])


def test_case_folders_exist() -> None:
    assert len(CASE_DIRS) >= 10
    # case folders are named in kebab-case, as under tests/cases/{audit,checks,compose,series}
    assert [p.name for p in CASE_DIRS if not re.fullmatch(r"[a-z0-9]+(-[a-z0-9]+)*", p.name)] == []


def test_place_hunk_on_lines() -> None:
    """place_hunk works on a bare line list and reports the window it replaces."""
    diff = "--- a/m.py\n+++ b/m.py\n@@ -1,3 +1,4 @@\n import os\n+import re\n import sys\n \n"
    hunk = parse_patch(diff).files[0].hunks[0]
    target = ["import os", "import sys", "", "print(os, sys)"]
    p = place_hunk(hunk, target, "m.py")
    assert p.verdict is Verdict.EXACT
    assert (p.start, p.end, p.replacement, p.landing_line) == (1, 1, ["import re"], 2)
    assert p.scope is not None and p.scope.role == "module"


def test_no_context_hunk_on_nonempty_target_conflicts() -> None:
    diff = "--- a/m.txt\n+++ b/m.txt\n@@ -3,0 +4 @@\n+new\n"
    hunk = parse_patch(diff).files[0].hunks[0]
    p = place_hunk(hunk, ["a", "b", "c", "d"], "m.txt")
    assert p.verdict is Verdict.CONFLICT
    assert "no context" in p.evidence


@pytest.mark.sdist
def test_real_prs_onto_vllm_0_26_0(release_v0260: Path, real_pr_diffs: tuple[Path, Path]) -> None:
    """The four hunks GNU `patch --fuzz=3` misplaced are placed right or conflict (each as its evidence says); the
    rest place; all parse."""
    V0260, (PR46994, PR38476) = release_v0260, real_pr_diffs
    files: dict[str, str] = {}
    verdicts: dict[tuple[str, int], object] = {}
    for diff in (PR46994, PR38476):
        for fp in parse_patch(diff.read_bytes(), name=diff.name).files:
            text = files.get(fp.path)
            if text is None and fp.old_path and (V0260 / fp.old_path).is_file():
                text = decode_text((V0260 / fp.old_path).read_bytes())
            res = place_file(fp, text, fp.path)
            assert res.parse_error is None, (fp.path, res.parse_error)
            for p in res.placements:
                verdicts[(fp.path, p.hunk.index)] = p
            if res.new_text is not None:
                files[fp.path] = res.new_text

    spec = "vllm/v1/worker/gpu/spec_decode/autoregressive/speculator.py"
    lines, _ = split_lines(files[spec])
    # hunk 4: keyword argument inside the call to _multi_step_decode, before its closing parenthesis
    call = next(i for i, ln in enumerate(lines) if ln.strip() == "self._multi_step_decode(")
    close = next(i for i in range(call, len(lines)) if lines[i].strip() == ")")
    # (both are placed: a conflict here would be a stop on every compose, not a safe answer)
    assert verdicts[(spec, 4)].verdict is Verdict.MERGED, verdicts[(spec, 4)].evidence
    assert lines[close - 1].strip() == "intermediate_tensors=intermediate_tensors,"
    # hunk 9: parameter inside the signature of _multi_step_decode, not the first statement of its body
    sig = next(i for i, ln in enumerate(lines) if ln.strip() == "def _multi_step_decode(")
    end = next(i for i in range(sig, len(lines)) if lines[i].strip().startswith(") ->"))
    assert verdicts[(spec, 9)].verdict is Verdict.MERGED, verdicts[(spec, 9)].evidence
    assert lines[end - 1].strip() == "intermediate_tensors: IntermediateTensors | None = None,"
    assert "intermediate_tensors" not in lines[end + 1]

    sai = "vllm/model_executor/layers/sparse_attn_indexer.py"
    h3 = verdicts[(sai, 3)]
    if h3.verdict is not Verdict.CONFLICT:
        assert h3.scope is not None and h3.scope.chain == ("def sparse_attn_indexer",)
    for k in (4, 5, 6):
        assert verdicts[(sai, k)].verdict is Verdict.CONFLICT
    for k in (1, 2):
        assert verdicts[(sai, k)].ok

    # the SM8x/9x priority list gained FLASH_ATTN_MLA_SPARSE where the PR inserts TRITON_MLA_SPARSE: in a priority
    # list which comes first is a decision (the series' fix 0006 puts it last), never the SM100 list
    cuda = verdicts[("vllm/platforms/cuda.py", 1)]
    assert cuda.verdict is Verdict.CONFLICT and "which comes first is a decision" in cuda.evidence, cuda.evidence
    assert "TRITON_MLA_SPARSE," not in files["vllm/platforms/cuda.py"]

    hazards = {(spec, 4), (spec, 9), (sai, 3), (sai, 4), (sai, 5), (sai, 6), ("vllm/platforms/cuda.py", 1)}
    others = [p for key, p in verdicts.items() if key not in hazards]
    assert len(others) >= 45
    assert all(p.ok for p in others), [(p.hunk.index, p.evidence) for p in others if not p.ok]


def test_a_site_lacking_what_the_best_site_holds_is_no_rival() -> None:
    """The tie-break the drift benchmark's 0.28.0#115 and 0.27.0#132 needed: a replacement only lands where the lines
    it replaces are; the whole pre-image (re-indented) beats a part of it. Anything less stays ambiguous."""
    from vllm_compose.patchfile import parse_patch
    from vllm_compose.placement.choice import _rival_lacks_what_best_holds
    from vllm_compose.placement.search import Alignment

    replace = (
        parse_patch(b"--- a/m.py\n+++ b/m.py\n@@ -1,3 +1,3 @@\n a = 1\n-b = 2\n+b = 3\n c = 4\n", "p").files[0].hunks[0]
    )
    insert = parse_patch(b"--- a/m.py\n+++ b/m.py\n@@ -1,2 +1,3 @@\n a = 1\n+x = 0\n c = 4\n", "p").files[0].hunks[0]

    def al(mapping, cats, extras=()):
        return Alignment(list(mapping), list(cats), 1.0, 0.5, list(extras))

    holds = al([10, 11, 12], ["exact", "indentation", "exact"])
    lacks_removed = al([20, None, 21], ["exact", None, "exact"])
    changed_removed = al([20, 21, 22], ["exact", "changed", "exact"])
    assert _rival_lacks_what_best_holds(replace, holds, lacks_removed)
    assert not _rival_lacks_what_best_holds(replace, holds, changed_removed)  # it is there, rewritten
    assert not _rival_lacks_what_best_holds(replace, changed_removed, lacks_removed)  # best lacks it as well
    whole = al([10, 11], ["indentation", "indentation"])
    part = al([20, None], ["exact", None])
    assert _rival_lacks_what_best_holds(insert, whole, part)
    assert not _rival_lacks_what_best_holds(insert, al([10, 12], ["exact", "exact"], [11]), part)  # a gap
    assert not _rival_lacks_what_best_holds(insert, whole, al([20, 21], ["exact", "changed"]))


@pytest.mark.parametrize(
    ("line", "name"),
    [
        ("        actorder: ActivationOrdering | None = None,", "actorder"),
        ('            w_gidx_param_name="weight_g_idx",', "w_gidx_param_name"),
        ('    "fused_q_kv_rmsnorm",', "fused_q_kv_rmsnorm"),
        ("    WeightTransferInitInfo,", "WeightTransferInitInfo"),
        ("        self.propose(batch)", "propose"),
        ("        total += step", "total"),
        ("    *rest,", "rest"),
        ("    upper", "upper"),
        ("from vllm.multimodal import MULTIMODAL_REGISTRY", None),
        ("    def forward(", None),
        ("    @staticmethod", None),
        ("class Worker:", None),
        ("        return x", None),
        ("        ),", None),
        ("        # beta is gone", None),
        ('    "ab",', None),
        ("    x,", None),
    ],
)
def test_element_name(line, name):
    """The name the vanished-anchor rule searches the target for: elements, parameters, keyword arguments and
    statements have one; imports, defs, classes, decorators, keyword statements, brackets and comments do not."""
    from vllm_compose.placement.plan import _element_name

    assert _element_name(line) == name
