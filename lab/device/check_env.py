"""Print the device machine's versions and import the vLLM modules the validation run needs (no GPU work).

PYTHONPATH=/tmp/vc/composed:/tmp/vc/site python3 lab/device/check_env.py
"""

import importlib
import importlib.util
import json
import sys
from pathlib import Path

import torch
from dsa_modules import dsa_modules  # lab/device/, the script's folder

OPTIONAL = [
    "vllm.v1.attention.backends.mla.triton_mla_sparse",  # composed tree only
    "vllm.models.deepseek_v32.common.e4m3",  # composed v0.29.0 and later only
    "vllm.v1.worker.gpu.spec_decode.autoregressive.speculator",  # moved in later releases
]


VLLM_SPEC = importlib.util.find_spec("vllm")
if VLLM_SPEC is None or not VLLM_SPEC.submodule_search_locations:
    sys.exit("check_env.py: no vllm package on sys.path; set PYTHONPATH to the stock or composed tree (see above)")
MODULES = ["vllm", *dsa_modules(Path(VLLM_SPEC.submodule_search_locations[0]))]
report = {"python": sys.version.split()[0]}
for name in ("torch", "triton", "transformers", "tokenizers", "huggingface_hub", "numpy", "pydantic", "torchvision"):
    try:
        report[name] = importlib.import_module(name).__version__
    except Exception as exc:
        report[name] = f"MISSING {exc!r}"

report["gpus"] = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
report["nccl"] = ".".join(map(str, torch.cuda.nccl.version()))
report["torch_file"] = torch.__file__
failed = {}
for name in MODULES + OPTIONAL:
    try:
        importlib.import_module(name)
    except Exception as exc:
        failed[name] = f"{type(exc).__name__}: {exc}"
report["import_failures"] = failed
print(json.dumps(report, indent=1))
sys.exit(1 if set(failed) - set(OPTIONAL) else 0)
