"""The vLLM modules a DSA + MTP validation run imports, shared by check_env.py (on the device) and make_lock.py (the
import probe that chooses a payload). Standard library only."""

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


def dsa_modules(has_deepseek_v32: bool) -> list[str]:
    """COMMON and the release's model path."""
    return COMMON + (V32_PATH if has_deepseek_v32 else V2_PATH)
