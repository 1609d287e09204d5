"""lab/device/sitecustomize: the token-id diagnostic (VC_CHECK_TOKEN_IDS) on stand-in vLLM modules, numpy for tensors.

The hook patches a module right after it executes; a spawned process picks the file up from PYTHONPATH the way the
validation's engine and workers do.
"""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("numpy", reason="numpy arrays stand in for tensors (numpy is installed by .ci/run)")

REPO = Path(__file__).resolve().parents[2]
HOOK_DIR = REPO / "lab" / "device" / "sitecustomize"

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


SPECULATOR = """
class DraftModelSpeculator:
    def __init__(self, vllm_config, tokens):
        self.vllm_config, self.tokens = vllm_config, tokens

    def sample_draft(self, hidden_states):
        return self.tokens
"""

AUTOREGRESSIVE = """
def prepare_prefill_inputs(last_token_indices, current_draft_step, input_buffers, input_batch, num_sampled,
                           num_rejected, last_sampled):
    last_token_indices[:] = last_sampled


def propose(*args):
    return prepare_prefill_inputs(*args)  # looked up in the module at call time, as vLLM's speculator does
"""

PP_UTILS = """
class PPHandler:
    def __init__(self):
        self.main_stream, self.broadcast_stream = "main", "side"
"""

ASYNC_PROGRAM = """
import types
import numpy as np
import sitecustomize
import vllm.model_executor.layers.vocab_parallel_embedding as m
import vllm.v1.worker.gpu.spec_decode.speculator as spec
import vllm.v1.worker.gpu.spec_decode.autoregressive.speculator as ar
import vllm.v1.worker.gpu.pp_utils as pp
e = m.VocabParallelEmbedding(np.arange(8))
print("embedded", e.forward(np.array([3, 9, -1])).tolist(), e.forward(np.array([2])).tolist())
config = types.SimpleNamespace(model_config=types.SimpleNamespace(get_vocab_size=lambda: 8))
print("drafts", spec.DraftModelSpeculator(config, np.array([5, 8])).sample_draft(None).tolist())
idx = np.zeros(4, dtype=np.int64)
batch = types.SimpleNamespace(num_reqs=3, num_tokens_after_padding=6)
ar.propose(idx, None, None, batch, None, np.array([0, 2, 1]), np.array([5, 6, -2, 9]))
print("indices", idx.tolist())
batch = types.SimpleNamespace(num_reqs=2, num_tokens_after_padding=9)
ar.propose(idx, None, None, batch, None, np.array([0, 2]), np.array([8, 7, -2, 9]))
print("indices", idx.tolist())
print("stream", pp.PPHandler().broadcast_stream)
for r in sitecustomize.flush_tally():
    print("tally", r["check"], r["bad"], r["calls"], r["min"], r["max"], r["range"])
"""


def test_async_checks_count_without_raising_clamp_and_report_once(tmp_path):
    fake = tmp_path / "fake"
    _package(
        fake,
        {
            "vllm/model_executor/layers/vocab_parallel_embedding.py": EMBEDDING,
            "vllm/v1/worker/gpu/spec_decode/speculator.py": SPECULATOR,
            "vllm/v1/worker/gpu/spec_decode/autoregressive/speculator.py": AUTOREGRESSIVE,
            "vllm/v1/worker/gpu/pp_utils.py": PP_UTILS,
        },
    )
    records = tmp_path / "rec"
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(fake), str(HOOK_DIR)]),
        "VC_CHECK_TOKEN_IDS": "async",
        "VC_PP_SAME_STREAM": "1",
        "VC_RECORD_DIR": str(records),
    }
    env.pop("VC_FAKE_CAPABILITY", None)
    proc = subprocess.run([sys.executable, "-c", ASYNC_PROGRAM], env=env, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout.splitlines()
    # bad ids are clamped into the embedding's rows, not raised
    assert "embedded [3, 7, 0] [2]" in out
    # draft tokens are counted, returned unchanged
    assert "drafts [5, 8]" in out
    # the first num_reqs indices are clamped to the batch's tokens; the padding row is left alone
    assert "indices [5, 5, 0, 9]" in out
    assert "indices [8, 7, -2, 9]" in out  # a wider batch of 2: 8 and 7 in range there, row 3 is not checked
    assert "stream main" in out
    tallies = sorted(x.split(" ", 1)[1] for x in out if x.startswith("tally "))
    assert tallies == [
        "draft-tokens 1 1 5 8 [0, 8]",
        "embedding 2 2 -1 9 [0, 8]",
        "last-token-indices 2 2 -2 8 [0, [6, 9]]",
        "num-rejected 0 2 0 2 [0, [7, 10]]",
    ]
    lines = [json.loads(x) for f in records.glob("*.jsonl") for x in f.read_text().splitlines()]
    assert sorted(r["check"] for r in lines if r["kind"] == "tally") == [
        "draft-tokens",
        "embedding",
        "last-token-indices",
        "num-rejected",
    ]
    assert [r.get("change") for r in lines if r.get("what") == "vllm.v1.worker.gpu.pp_utils"] == [
        "broadcast on the main stream"
    ]


LOADER_UTILS = """
class Model:
    pass


class Draft:
    pass


def initialize_model(vllm_config, *, prefix="", model_class=None, model_config=None):
    return Draft() if model_config is not None else Model()
"""


def test_the_model_classes_a_run_builds_are_recorded(tmp_path):
    fake = tmp_path / "fake"
    _package(fake, {"vllm/model_executor/model_loader/utils.py": LOADER_UTILS})
    records = tmp_path / "rec"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(fake), str(HOOK_DIR)]), "VC_RECORD_DIR": str(records)}
    for key in ("VC_CHECK_TOKEN_IDS", "VC_FAKE_CAPABILITY"):
        env.pop(key, None)
    code = (
        # imported by name, as vLLM's loaders do: the patch must be in place before anyone takes the function
        "from vllm.model_executor.model_loader.utils import initialize_model\n"
        "initialize_model(None, prefix='model')\n"
        "initialize_model(None, model_config=object())\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    lines = [json.loads(x) for f in records.glob("*.jsonl") for x in f.read_text().splitlines()]
    built = [(r["class"], r["prefix"]) for r in lines if r["kind"] == "model-class"]
    assert built == [
        ("vllm.model_executor.model_loader.utils.Model", "model"),
        ("vllm.model_executor.model_loader.utils.Draft", ""),
    ]


PLATFORM_INTERFACE = """
from typing import NamedTuple


class DeviceCapability(NamedTuple):
    major: int
    minor: int
"""

PLATFORM_CUDA = """
from vllm.platforms.interface import DeviceCapability


class CudaPlatformBase:
    @classmethod
    def get_device_capability(cls, device_id=0):
        return DeviceCapability(9, 0)  # the H200 the validation runs on


class NonNvmlCudaPlatform(CudaPlatformBase):
    @classmethod
    def get_device_capability(cls, device_id=0):
        return DeviceCapability(9, 0)
"""


def _platform_run(tmp_path, capability: str) -> subprocess.CompletedProcess:
    fake = tmp_path / "fake"
    _package(fake, {"vllm/platforms/interface.py": PLATFORM_INTERFACE, "vllm/platforms/cuda.py": PLATFORM_CUDA})
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(fake), str(HOOK_DIR)]), "VC_FAKE_CAPABILITY": capability}
    for key in ("VC_CHECK_TOKEN_IDS", "VC_RECORD_DIR", "VC_PP_SAME_STREAM"):
        env.pop(key, None)
    code = (
        "import sys, vllm.platforms.cuda as c\n"
        "print(tuple(c.CudaPlatformBase.get_device_capability()), tuple(c.NonNvmlCudaPlatform.get_device_capability()))\n"
        "print('vllm_compose importable:', any('vllm_compose' in m for m in sys.modules))\n"
    )
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)


def test_the_platform_answers_the_faked_capability_read_by_the_tools_ampere_facts(tmp_path):
    facts = importlib.import_module("vllm_compose.ampere.facts")
    for gpu in facts.GPUS:
        text = f"{gpu.capability[0]}.{gpu.capability[1]}"
        proc = _platform_run(tmp_path / text, text)
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout.splitlines() == [f"{gpu.capability} {gpu.capability}", "vllm_compose importable: False"]
        assert facts.parse_capability(text) == gpu.capability


def test_a_malformed_capability_stops_the_platform_import_naming_the_value(tmp_path):
    proc = _platform_run(tmp_path, "eight")
    assert proc.returncode != 0
    assert "capability 'eight' is not written MAJOR.MINOR" in proc.stderr


def test_run_all_fakes_only_ampere_capabilities():
    facts = importlib.import_module("vllm_compose.ampere.facts")
    table = (HOOK_DIR.parent / "run_all.sh").read_text().split("TABLE='", 1)[1].split("'", 1)[0]
    faked = {row.split()[4] for row in table.splitlines() if row.strip()} - {"-"}
    assert faked and {facts.parse_capability(c) for c in faked} <= set(facts.CAPABILITIES), faked


FAKE_TRITON = {
    "triton/backends/compiler.py": "import collections\nGPUTarget = collections.namedtuple('GPUTarget', 'backend arch warp_size')\n",
    "triton/backends/nvidia/driver.py": (
        "from triton.backends.compiler import GPUTarget\n"
        "class CudaDriver:\n"
        "    def get_current_target(self):\n"
        "        return GPUTarget('cuda', 90, 32)\n"
    ),
    "triton/knobs.py": "class _Runtime:\n    add_stages_inspection_hook = None\nruntime = _Runtime()\n",
}

SM80_PROGRAM = """
from triton.backends.nvidia.driver import CudaDriver
from triton import knobs
print("target", CudaDriver().get_current_target().arch)
class Backend:
    def make_cubin(self, src, metadata, options, arch):
        return f"cubin for sm_{arch} from {src}"
stages = {"ptx": lambda src, md: ".version 8.0\\n.target sm_80\\n" + src, "cubin": None}
knobs.runtime.add_stages_inspection_hook(Backend(), stages, {}, None, 80)
ptx = stages["ptx"]("mma.sync", {"name": "k1"})
print(stages["cubin"](ptx.splitlines()[-1], {"name": "k1"}))
"""


def test_sm80_ptx_targets_sm80_and_assembles_for_the_gpu_present(tmp_path):
    fake = tmp_path / "fake"
    _package(fake, FAKE_TRITON)
    records = tmp_path / "rec"
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(fake), str(HOOK_DIR)]),
        "VC_SM80_PTX": "90",
        "VC_RECORD_DIR": str(records),
    }
    env.pop("VC_FAKE_CAPABILITY", None)
    proc = subprocess.run([sys.executable, "-c", SM80_PROGRAM], env=env, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == ["target 80", "cubin for sm_90 from mma.sync"]
    lines = [json.loads(x) for f in records.glob("*.jsonl") for x in f.read_text().splitlines()]
    [rec] = [r for r in lines if r["kind"] == "sm80-ptx"]
    assert (rec["kernel"], rec["ptx_target"], rec["hopper_only_instructions"], rec["assembled_for"]) == (
        "k1",
        "sm_80",
        False,
        "sm_90",
    )


def test_sm80_ptx_without_an_architecture_stops_the_process(tmp_path):
    fake = tmp_path / "fake"
    _package(fake, FAKE_TRITON)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(fake), str(HOOK_DIR)]), "VC_SM80_PTX": "yes"}
    env.pop("VC_FAKE_CAPABILITY", None)
    code = "import triton.knobs\nprint('ran')"
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert proc.returncode != 0 and "VC_SM80_PTX='yes'" in proc.stderr and "ran" not in proc.stdout


def test_sm80_ptx_hook_answers_tritons_cache_key_call():
    """Triton 3.8 calls the stages hook with no arguments for a key it mixes into every kernel's cache key (a
    kernel built through the hook must not be confused with one built without it); Triton 3.6 never does. The key
    names the assembling architecture, so the caches of two GPUs never share an entry."""
    sys.path.insert(0, str(REPO / "lab" / "device"))
    try:
        import sm80_ptx
    finally:
        sys.path.remove(str(REPO / "lab" / "device"))
    key90, hash90 = sm80_ptx.stage_hook(lambda rec: None, 90)()
    key100, hash100 = sm80_ptx.stage_hook(lambda rec: None, 100)()
    assert key90 == "sm80-ptx-for-sm_90" and len(hash90) == 64
    assert (key90, hash90) != (key100, hash100)
