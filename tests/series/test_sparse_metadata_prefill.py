"""Series entry 0029 on the releases' own code: the deepseek_v32 attention's `_use_sparse_mha` on the metadata that
TRITON_MLA_SPARSE reuses.

From v0.29.0 `DeepseekV32Attention` asks the shared MLA layer `_use_sparse_mha(attn_metadata)` on every forward, and
that method reads `attn_metadata.prefill` first. TRITON_MLA_SPARSE (PR #38476) reuses `XPUMLASparseMetadata`, which
has no such field in any release up to v0.33.0: on an Ampere GPU the first forward would raise AttributeError. The
test builds the release's own metadata dataclass and runs the release's own `_use_sparse_mha` on a CPU, stock and
with 0029's hunk to the metadata applied (the other hunk goes to `triton_mla_sparse.py`, which only PR #38476
creates, so CI cannot apply it without the PR diff).
"""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path
from types import SimpleNamespace

import pytest
from release_trees import release_files, release_functions

from vllm_compose.apply import apply_patches
from vllm_compose.patchfile import parse_patch

XPU = "vllm/v1/attention/backends/mla/xpu_mla_sparse.py"
MLA = "vllm/model_executor/layers/attention/mla_attention.py"
ATTENTION = "vllm/models/deepseek_v32/attention.py"
PATCH = Path(__file__).resolve().parents[2] / "series" / "patches" / "0029-triton-mla-sparse-no-dense-mha-prefill.patch"


def _metadata_class(source: str):
    """The release's XPUMLASparseMetadata as a dataclass, its annotations and defaults exactly as written."""
    cls = next(n for n in ast.parse(source).body if isinstance(n, ast.ClassDef) and n.name == "XPUMLASparseMetadata")
    ns: dict = {"dataclass": dataclasses.dataclass, "torch": SimpleNamespace(Tensor=object)}
    cls.decorator_list = [ast.Name("dataclass", ast.Load())]
    cls.bases = []
    exec(compile(ast.fix_missing_locations(ast.Module([cls], [])), XPU, "exec"), ns)  # noqa: S102
    return ns["XPUMLASparseMetadata"]


def _metadata(cls):
    """An instance as the XPU builder fills it for a batch of 2 requests, 5 tokens (every token a decode)."""
    required = {f.name: 0 for f in dataclasses.fields(cls) if f.default is dataclasses.MISSING}
    return cls(**{**required, "num_actual_tokens": 5, "num_decodes": 2, "num_decode_tokens": 5})


def _use_sparse_mha(source: str):
    fns = release_functions(source, MLA, ["_use_sparse_mha"], {"_use_masked_mha": lambda **k: True}, "MLAAttention")
    layer = SimpleNamespace(hisparse_cache=None, prefill_backend=None)
    return lambda md: fns["_use_sparse_mha"](layer, md)


def _with_0029(tmp_path: Path, source: str) -> str:
    (tmp_path / Path(XPU).parent).mkdir(parents=True)
    (tmp_path / XPU).write_text(source)
    patch = parse_patch(PATCH.read_bytes(), name=PATCH.name)
    patch.files = [fp for fp in patch.files if fp.new_path == XPU]
    assert len(patch.files) == 1
    assert apply_patches(tmp_path, [patch]).exit_code == 0
    return (tmp_path / XPU).read_text()


@pytest.mark.sdist
@pytest.mark.parametrize("tag", ["v0.29.0", "v0.30.0", "v0.33.0"])
def test_the_reused_xpu_metadata_breaks_use_sparse_mha_until_0029(tmp_path_factory, tmp_path, tag):
    files = release_files(tmp_path_factory, tag, [XPU, MLA, ATTENTION])
    assert "self._use_sparse_mha(attn_metadata)" in files[ATTENTION]  # asked on every forward with metadata
    use_sparse_mha = _use_sparse_mha(files[MLA])
    with pytest.raises(AttributeError, match="prefill"):
        use_sparse_mha(_metadata(_metadata_class(files[XPU])))
    fixed = _metadata_class(_with_0029(tmp_path, files[XPU]))
    assert use_sparse_mha(_metadata(fixed)) is False  # no dense-MHA prefill: every token takes the sparse MQA path
