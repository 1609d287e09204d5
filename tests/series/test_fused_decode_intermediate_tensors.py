"""Series entry 0032 against the releases' own code: PR #46994's `propose()` passes `intermediate_tensors=` to
whichever multi-step decode it picks, and v0.28.0 added a fused one that lacks the parameter.

Found by `semantic-check` (ty: unknown-argument on `AutoRegressiveSpeculator._fused_multi_step_decode`, entry pr46994,
composed v0.28.0 and v0.29.0). These tests show from the v0.29.0 and v0.30.0 sdists that the fused decode exists
without the parameter (so 0032 is needed where PR #46994 is composed, and v0.30.0, where it ships upstream, passes
none), and that 0032 adds it to both fused functions and passes it on.
"""

from __future__ import annotations

import ast
import tomllib
from pathlib import Path

import pytest
from release_trees import release_files

from vllm_compose.patchfile import parse_patch

REPO = Path(__file__).resolve().parents[2]
SPECULATOR = "vllm/v1/worker/gpu/spec_decode/autoregressive/speculator.py"
PATCH = REPO / "series" / "patches" / "0032-autoregressive-fused-multi-step-decode-intermediate-tensors.patch"
FUSED = ("_fused_multi_step_decode", "_generate_fused_drafts")


def _methods(source: str) -> dict[str, ast.FunctionDef]:
    module = ast.parse(source)
    cls = next(n for n in module.body if isinstance(n, ast.ClassDef) and n.name == "AutoRegressiveSpeculator")
    return {f.name: f for f in cls.body if isinstance(f, ast.FunctionDef)}


@pytest.mark.sdist
@pytest.mark.parametrize("tag", ["v0.29.0", "v0.30.0"])
def test_the_fused_decode_takes_no_intermediate_tensors_in_the_release(tmp_path_factory, tag):
    methods = _methods(release_files(tmp_path_factory, tag, [SPECULATOR])[SPECULATOR])
    for name in FUSED:
        assert "intermediate_tensors" not in [a.arg for a in methods[name].args.args], (tag, name)
    # both decodes are picked by the same call in propose(), which PR #46994 gives intermediate_tensors=
    propose = ast.unparse(methods["propose"])
    assert "self._fused_multi_step_decode if self.use_fused_multi_step_decode else self._multi_step_decode" in propose


def test_0032_covers_v028_v029_and_threads_the_parameter_through_both_fused_functions():
    series = tomllib.loads((REPO / "series" / "series.toml").read_text())
    entry = next(e for e in series["entry"] if e.get("file", "").endswith(PATCH.name))
    assert entry["tags"] == ">=0.28.0,<0.30.0"  # the fused decode is new in v0.28.0; v0.30.0 ships #46994 itself
    patch = parse_patch(PATCH.read_bytes(), name=PATCH.name)
    assert [f.new_path for f in patch.files] == [SPECULATOR]
    added = [text.strip() for h in patch.files[0].hunks for op, text in h.lines if op == "+"]
    assert added.count("intermediate_tensors: IntermediateTensors | None = None,") == 2  # both fused functions
    assert added.count("intermediate_tensors=intermediate_tensors,") == 2  # passed on to them and to each draft step
