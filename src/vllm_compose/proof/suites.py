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

#: name -> Suite fields (besides label and model_dir). Every suite moves the requests' KV blocks to the back of the
#: pool (`rotate_blocks` -1), so their offsets pass 2**31 when the pool is large enough (the result says), and checks
#: every layer against the DSA oracle (`engine_oracle`); `eager` also shows that each oracle check can fail.
SUITES: dict[str, dict[str, Any]] = {
    "eager": {
        "lengths": [8192, 32768, 131072, 16384],
        "fault_lengths": [8192, 12288, 16384],
        "oracle_corruptions": ["logits", "slots", "attention", "topk"],
        **_ORACLE,
    },
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
        **_ORACLE,
    },
}
DEFAULT_SUITES = ("eager", "mtp1", "mtp2", "graph", "graph_mtp1", "graph_mtp2")


class ProofError(ComposeError):
    """A proof could not be run."""


def suite(name: str, model_dir: Path, **changes: Any) -> Suite:
    """The named suite for the checkpoint in `model_dir`."""
    if name not in SUITES:
        raise ProofError(f"unknown suite {name!r}", hint=f"one of: {', '.join(SUITES)}")
    fields = {"rotate_blocks": -1, **SUITES[name], **changes}
    return Suite(label=name, model_dir=str(model_dir), **fields)


def ensure_model(model_dir: Path, shape: str = "glm5", moe_quant: str = "") -> bool:
    """Write the recall checkpoint into `model_dir` unless one is there; True if it was written.

    Needs torch and safetensors (the serving environment has both); uses the GPU when there is one."""
    from .recall_model import glm5_spec, spec_from_json, tiny_spec, write_checkpoint

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

    spec = dataclasses.replace({"glm5": glm5_spec, "tiny": tiny_spec}[shape](), moe_quant=moe_quant)
    spec.validate()
    write_checkpoint(spec, model_dir, device="cuda" if torch.cuda.is_available() else "cpu")
    return True


def run(
    model_dir: Path,
    names: list[str],
    out_dir: Path,
    on_done: Callable[[dict], None] | None = None,
    python: str = sys.executable,
    env: dict[str, str] | None = None,
    timeout_s: float | None = None,
) -> list[dict]:
    """Run each named suite in its own interpreter; each result is also written to `out_dir/NAME.json`."""
    suites = [suite(n, model_dir) for n in names]  # unknown names fail before any engine starts
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
