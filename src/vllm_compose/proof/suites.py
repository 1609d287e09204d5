"""`vllm-compose prove`: the recall model's proof suites on the installed vLLM, one engine per process.

A user with an Ampere GPU runs the same proof the project runs on an H200: write the GLM-5-shaped recall checkpoint
(`recall_model`), then run named suites (`SUITES`) in fresh interpreters (vLLM keeps global state per process), each
judged by `recall_run.run_suite`: the tokens as predicted, every injected fault caught (eager suites), the engine
clean again afterwards. Nothing here prints; `run` reports each finished suite through a callback.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..errors import ComposeError
from .recall_run import Suite

#: the serving environment of the user guide plus an in-process engine (the harness reaches the scheduler)
SERVING_ENV = {
    "VLLM_USE_V2_MODEL_RUNNER": "1",
    "VLLM_WORKER_MULTIPROC_METHOD": "spawn",
    "VLLM_USE_FLASHINFER_SAMPLER": "0",
    "VLLM_ENABLE_V1_MULTIPROCESSING": "0",
}

#: CUDA graphs without Inductor: decode batches are captured as full graphs, prefill runs eagerly. (The release
#: default also compiles with Inductor; on an H200 posing as sm_80 its autotuner builds sm_80 cubins the GPU refuses.)
GRAPHS = {"mode": 0, "cudagraph_mode": "FULL_DECODE_ONLY"}

_MIXED = [8192, 32768, 131072, 20000]
_ORACLE = {"oracle": True}
#: the layer reference (`layer_probe`) with every model fault; the reference's fp32 weights need GPU memory beside
#: the engine, so these suites give the engine 60% of it
_MODEL_FAULTS = ["softmax-x0.53", "softmax-x1.25", "indexer-rope-half", "kcache-x2", "indexer-weights-x0.5"]
_LAYERS = {"layer_reference": True, "gpu_memory_utilization": 0.6}

#: name -> Suite fields (besides label and model_dir). Every suite moves the requests' KV blocks to the back of the
#: pool (`rotate_blocks` -1), so their offsets pass 2**31 when the pool is large enough (the result says), and checks
#: every layer against the DSA oracle (`engine_oracle`); `eager` also shows that each oracle check can fail.
SUITES: dict[str, dict[str, Any]] = {
    "eager": {
        "lengths": [8192, 32768, 131072, 16384],
        "fault_lengths": [8192, 12288, 16384],
        "oracle_corruptions": ["logits", "slots", "attention", "topk"],
        "model_faults": _MODEL_FAULTS,
        **_LAYERS,
        **_ORACLE,
    },
    # a GLM-5-shaped checkpoint with random weights: its logits are not peaked, so a wrong scale or RoPE shows in
    # them; nothing predicts its tokens, the reference judges every layer and the logits
    "random": {"model": "random", "lengths": [8192, 32768], "model_faults": _MODEL_FAULTS, **_LAYERS, **_ORACLE},
    # DeepSeek-V3.2's shape and config form: 128 heads, every layer its own top-k, yarn RoPE
    "dsv32": {"model": "dsv32", "lengths": [8192, 32768, 16384], **_LAYERS, **_ORACLE},
    # GLM-5's shape with the IndexCache given as an index_topk_pattern string
    "glm5-pattern": {"model": "glm5-pattern", "lengths": [8192, 32768, 16384], **_LAYERS, **_ORACLE},
    "mtp1": {"lengths": _MIXED, "mtp": 1, **_ORACLE},
    "mtp2": {"lengths": _MIXED, "mtp": 2, **_ORACLE},
    "graph": {"lengths": _MIXED, "eager": False, "compilation": GRAPHS, **_ORACLE},
    "graph_mtp1": {"lengths": _MIXED, "mtp": 1, "eager": False, "compilation": GRAPHS, **_ORACLE},
    "graph_mtp2": {"lengths": _MIXED, "mtp": 2, "eager": False, "compilation": GRAPHS, **_ORACLE},
    "graph_default": {"lengths": [8192, 16384], "eager": False, **_ORACLE},
    # the native Hopper path (FLASHMLA_SPARSE, DeepGEMM's indexer logits) against the same oracle: its second
    # opinion, from kernels the compose did not write. Runs at the GPU's own capability (sm_90+), without the sm_80
    # override, and needs FlashMLA and DeepGEMM installed (lab/device/stage.py build --native)
    "native": {
        "lengths": [8192, 32768, 131072, 16384],
        "backend": "FLASHMLA_SPARSE",
        "oracle_corruptions": ["logits", "slots", "attention", "topk"],
        # DeepGEMM's indexer logits: with VLLM_USE_DEEP_GEMM=0 (the sm_80 harness's setting) the indexer takes the
        # compose's Triton fallback and the oracle's DeepGEMM wrappers never run
        "env": {"VLLM_USE_DEEP_GEMM": "1"},
        **_ORACLE,
    },
}
DEFAULT_SUITES = ("eager", "random", "dsv32", "glm5-pattern", "mtp1", "mtp2", "graph", "graph_mtp1", "graph_mtp2")


def model_of(name: str) -> str:
    """The checkpoint (a `recall_model.SHAPES` name) suite `name` runs on."""
    if name not in SUITES:
        raise ProofError(f"unknown suite {name!r}", hint=f"one of: {', '.join(SUITES)}")
    return SUITES[name].get("model", "glm5")


class ProofError(ComposeError):
    """A proof could not be run."""


def suite(name: str, model_dir: Path, **changes: Any) -> Suite:
    """The named suite for the checkpoint in `model_dir`."""
    if name not in SUITES:
        raise ProofError(f"unknown suite {name!r}", hint=f"one of: {', '.join(SUITES)}")
    fields = {"rotate_blocks": -1, **{k: v for k, v in SUITES[name].items() if k != "model"}, **changes}
    return Suite(label=name, model_dir=str(model_dir), **fields)


def ensure_model(model_dir: Path, shape: str = "glm5", moe_quant: str = "") -> bool:
    """Write the recall checkpoint into `model_dir` unless one is there; True if it was written.

    Needs torch and safetensors (the serving environment has both); uses the GPU when there is one."""
    from .recall_model import SHAPES, spec_from_json, write_checkpoint

    spec_file = model_dir / "recall_spec.json"
    if spec_file.is_file():
        try:
            have = spec_from_json(json.loads(spec_file.read_text()))
        except (ValueError, TypeError, KeyError) as exc:
            raise ProofError(
                f"{spec_file} is not a recall model's spec: {exc}",
                hint="point --model-dir at an empty folder to write a fresh checkpoint",
            ) from exc
        if have.moe_quant != moe_quant:
            raise ProofError(
                f"{model_dir} holds a recall model with moe_quant {have.moe_quant!r}, not {moe_quant!r}",
                hint="use another --model-dir for each variant",
            )
        return False
    if model_dir.exists() and any(model_dir.iterdir()):
        raise ProofError(
            f"{model_dir} holds files but no recall_spec.json",
            hint="use an empty or new folder: the checkpoint is written there",
        )
    import torch

    if shape not in SHAPES:
        raise ProofError(f"unknown model shape {shape!r}", hint=f"one of: {', '.join(SHAPES)}")
    spec = dataclasses.replace(SHAPES[shape](), moe_quant=moe_quant)
    spec.validate()
    write_checkpoint(spec, model_dir, device="cuda" if torch.cuda.is_available() else "cpu")
    return True


def model_dirs(models: Path, names: list[str]) -> dict[str, Path]:
    """Each named suite's checkpoint folder: `models/<model_of(name)>`."""
    return {n: models / model_of(n) for n in names}


def run(
    models: Path,
    names: list[str],
    out_dir: Path,
    on_done: Callable[[dict], None] | None = None,
    python: str = sys.executable,
    env: dict[str, str] | None = None,
    timeout_s: float | None = None,
) -> list[dict]:
    """Run each named suite in its own interpreter, on its checkpoint under `models` (`model_dirs`); each result is
    also written to `out_dir/NAME.json`."""
    dirs = model_dirs(models, names)  # unknown names fail before any engine starts
    suites = [suite(n, dirs[n]) for n in names]
    out_dir.mkdir(parents=True, exist_ok=True)
    results = []
    for s in suites:
        out = out_dir / f"{s.label}.json"
        out.unlink(missing_ok=True)
        child_env = {**os.environ, **SERVING_ENV, **(env or {})}
        cmd = [python, "-m", "vllm_compose.proof.recall_run", json.dumps(dataclasses.asdict(s)), str(out)]
        try:
            proc = subprocess.run(cmd, env=child_env, capture_output=True, text=True, timeout=timeout_s)
            tail, code = (proc.stdout + proc.stderr)[-3000:], proc.returncode
        except subprocess.TimeoutExpired as exc:
            tail, code = f"timed out after {exc.timeout} s", None
        if out.is_file():
            result = json.loads(out.read_text())
        else:  # the interpreter died before writing (a crash in the driver, a kill)
            result = {"suite": dataclasses.asdict(s), "ok": False, "passed": False, "checks": []}
            result["error"] = f"no result written (exit {code}): {tail}"
            out.write_text(json.dumps(result, indent=1))
        results.append(result)
        if on_done:
            on_done(result)
    return results
