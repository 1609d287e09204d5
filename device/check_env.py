"""Print the device machine's versions and import the vLLM modules the validation run needs (no GPU work).

PYTHONPATH=/tmp/vc/composed:/tmp/vc/site python3 device/check_env.py
"""

import importlib
import json
import sys

import torch

MODULES = [
    "vllm",
    "vllm.entrypoints.llm",
    "vllm.v1.engine.core",
    "vllm.v1.executor.multiproc_executor",
    "vllm.v1.worker.gpu_worker",
    "vllm.v1.worker.gpu.model_runner",
    "vllm.model_executor.models.deepseek_v2",
    "vllm.model_executor.models.deepseek_mtp",
    "vllm.v1.attention.backends.mla.indexer",
    "vllm.v1.worker.gpu.spec_decode.autoregressive.speculator",
]
OPTIONAL = ["vllm.v1.attention.backends.mla.triton_mla_sparse"]  # composed tree only

report = {"python": sys.version.split()[0]}
for name in ("torch", "triton", "transformers", "numpy", "pydantic"):
    try:
        report[name] = importlib.import_module(name).__version__
    except Exception as exc:
        report[name] = f"MISSING {exc!r}"

report["gpus"] = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
failed = {}
for name in MODULES + OPTIONAL:
    try:
        importlib.import_module(name)
    except Exception as exc:
        failed[name] = f"{type(exc).__name__}: {exc}"
report["import_failures"] = failed
print(json.dumps(report, indent=1))
sys.exit(1 if set(failed) - set(OPTIONAL) else 0)
