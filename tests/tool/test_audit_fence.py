"""The audit's independence from the placement engine, held by a test rather than by convention.

The audit judges where the engine put every hunk; it can only catch the engine's own mistakes if it shares no code
with it. A direct import is easy to avoid and easy to see; an indirect one (the audit importing a module that imports
the engine) is neither. Each check runs in a fresh interpreter, so the modules an earlier test loaded do not hide or
fake what an import loads.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

#: the engine: the placement package and the scope model it places by
ENGINE = ("vllm_compose.placement", "vllm_compose.scope")


def _loaded_after(module: str) -> list[str]:
    """The engine modules (and submodules) in `sys.modules` after `import module` in a fresh interpreter."""
    probe = (
        f"import json, sys, {module}\nprint(json.dumps(sorted(m for m in sys.modules if m.startswith({ENGINE!r}))))\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=False)
    assert done.returncode == 0, f"`import {module}` failed in a fresh interpreter:\n{done.stderr}"
    return json.loads(done.stdout)


@pytest.mark.parametrize("module", ["vllm_compose.audit", "vllm_compose.audit.anchors", "vllm_compose.audit.align"])
def test_the_audit_loads_no_placement_code(module):
    assert _loaded_after(module) == [], f"`import {module}` loads the placement engine"


def test_the_probe_sees_the_engine_where_it_is_loaded():
    # the replay places hunks with the engine: the probe must see it there, or the fence above proves nothing
    loaded = _loaded_after("vllm_compose.replay")
    assert "vllm_compose.placement" in loaded
    assert "vllm_compose.scope" in loaded
