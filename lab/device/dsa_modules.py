"""The vLLM modules a DSA + MTP validation run imports, shared by check_env.py (on the device) and make_lock.py (the
import probe that chooses a payload). Standard library only."""

import re
from pathlib import Path

#: the engine, the V2 model runner and the indexer, in every release
COMMON = [
    "vllm.entrypoints.llm",
    "vllm.v1.engine.core",
    "vllm.v1.executor.multiproc_executor",
    "vllm.v1.worker.gpu_worker",
    "vllm.v1.worker.gpu.model_runner",
    "vllm.v1.attention.backends.mla.indexer",
]
#: the DSA model and its MTP draft: v0.26.0-v0.28.0 serve it from deepseek_v2, v0.29.0 and later from deepseek_v32
V2_PATH = ["vllm.model_executor.models.deepseek_v2", "vllm.model_executor.models.deepseek_mtp"]
V32_PATH = ["vllm.models.deepseek_v32.nvidia.model", "vllm.models.deepseek_v32.nvidia.mtp"]

#: the registry entry of the DSA architecture: `"DeepseekV32ForCausalLM": ("deepseek_v2", ...)` in v0.26.0-v0.28.0,
#: `("vllm.models.deepseek_v32", ...)` from v0.29.0 (v0.26.0-v0.28.0 already ship the folder, unused on this path)
_REGISTRY_ENTRY = re.compile(r'"DeepseekV32ForCausalLM":\s*\(\s*"([\w.]+)"')

#: `LLM.__init__` logs its non-default arguments by building the server's argument parser, importing the module that
#: defines `make_arg_parser` inside a function (so a module-scope import of `vllm.entrypoints.llm` never reaches it).
#: That module imports the tool parsers, which import partial_json_parser: the H200 run of v0.29.0 (session 7) failed
#: there. It moved between releases (openai/, launchers/, common/), so it is read from the tree.
_ARG_PARSER_IMPORT = re.compile(r"^\s*from (vllm\.entrypoints\.[\w.]*cli_args) import make_arg_parser\b", re.M)


def lazy_modules(vllm_dir: Path) -> list[str]:
    """The modules the run imports from inside functions, as named by the tree's own `from X import make_arg_parser`
    lines under `vllm/entrypoints/` (sorted, each once)."""
    found = set()
    for path in (vllm_dir / "entrypoints").rglob("*.py"):
        found.update(_ARG_PARSER_IMPORT.findall(path.read_text(encoding="utf-8", errors="replace")))
    return sorted(found)


def serves_from_deepseek_v32(vllm_dir: Path) -> bool:
    """Whether the model registry of the `vllm/` package at `vllm_dir` maps the DSA architecture to
    `vllm.models.deepseek_v32`. ValueError when the registry has no such entry (not a vLLM tree of this era)."""
    registry = vllm_dir / "model_executor" / "models" / "registry.py"
    try:
        match = _REGISTRY_ENTRY.search(registry.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ValueError(f"cannot read the model registry {registry}: {exc}; pass the vllm/ package folder") from exc
    if match is None:
        raise ValueError(f"{registry} has no DeepseekV32ForCausalLM entry; is {vllm_dir} a vLLM 0.26.0+ package?")
    return match.group(1).startswith("vllm.models.deepseek_v32")


def dsa_modules(vllm_dir: Path) -> list[str]:
    """COMMON, the release's model path (as its registry says) and its lazily imported modules, for the `vllm/`
    package at `vllm_dir`."""
    model = V32_PATH if serves_from_deepseek_v32(vllm_dir) else V2_PATH
    return COMMON + model + lazy_modules(vllm_dir)
