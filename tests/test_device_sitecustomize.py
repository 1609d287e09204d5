"""device/sitecustomize: the token-id diagnostic (VC_CHECK_TOKEN_IDS) on stand-in vLLM modules, numpy for tensors.

The hook patches a module right after it executes; a spawned process picks the file up from PYTHONPATH the way the
validation's engine and workers do.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("numpy", reason="numpy arrays stand in for tensors (numpy is installed by .ci/run)")

HOOK_DIR = Path(__file__).resolve().parent.parent / "device" / "sitecustomize"

EMBEDDING = """
class VocabParallelEmbedding:
    def __init__(self, weight):
        self.weight = weight

    def forward(self, input_):
        return self.weight[input_]
"""

PROGRAM = """
import numpy as np
import vllm.model_executor.layers.vocab_parallel_embedding as m
import vllm.model_executor.models.deepseek_mtp as mtp
e = m.VocabParallelEmbedding(np.zeros((8, 2)))
assert e.forward(np.array([1, 7])).shape == (2, 2)
try:
    e.forward(np.array([[3, 9], [-1, 2]]))
except RuntimeError as exc:
    print("raised:", exc)
"""


def _package(root: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        for parent in [path.parent, *path.parent.parents]:
            if parent == root:
                break
            (parent / "__init__.py").touch()
        path.write_text(text)


def test_out_of_range_ids_are_recorded_and_raised_and_a_failed_patch_does_not_stop_the_run(tmp_path):
    fake = tmp_path / "fake"
    _package(
        fake,
        {
            "vllm/model_executor/layers/vocab_parallel_embedding.py": EMBEDDING,
            "vllm/model_executor/models/deepseek_mtp.py": "X = 1  # no DeepSeekMTP: its patch fails\n",
        },
    )
    records = tmp_path / "rec"
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(fake), str(HOOK_DIR)]),
        "VC_CHECK_TOKEN_IDS": "1",
        "VC_RECORD_DIR": str(records),
    }
    env.pop("VC_FAKE_CAPABILITY", None)
    proc = subprocess.run([sys.executable, "-c", PROGRAM], env=env, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert "raised: VC_CHECK_TOKEN_IDS: token ids [9, -1] outside the embedding's 8 rows" in proc.stdout
    lines = [json.loads(x) for f in records.glob("*.jsonl") for x in f.read_text().splitlines()]
    bad = [r for r in lines if r["kind"] == "bad-token-ids"]
    assert len(bad) == 1 and bad[0]["ids"] == [9, -1] and bad[0]["rows"] == 8 and bad[0]["shape"] == [2, 2]
    failed = [r for r in lines if r["kind"] == "patch-failed"]
    assert [r["what"] for r in failed] == ["vllm.model_executor.models.deepseek_mtp"]


def test_without_the_variable_nothing_is_patched(tmp_path):
    fake = tmp_path / "fake"
    _package(fake, {"vllm/model_executor/layers/vocab_parallel_embedding.py": EMBEDDING})
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(fake), str(HOOK_DIR)])}
    for key in ("VC_CHECK_TOKEN_IDS", "VC_FAKE_CAPABILITY", "VC_RECORD_DIR"):
        env.pop(key, None)
    code = (
        "import numpy as np, vllm.model_executor.layers.vocab_parallel_embedding as m\n"
        "print(m.VocabParallelEmbedding.forward.__qualname__)"
    )
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "VocabParallelEmbedding.forward"
