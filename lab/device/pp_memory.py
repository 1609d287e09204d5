"""Check pp-plan's memory figures against vLLM's own profile: one stage's worth of a GLM-5-shaped model on one GPU.

A lab script, not the product (`vllm_compose.pp.plan` is). On the device machine, after `lab/device/stage.py install`
(v0.26.0's payload: the image has its torch):

    python3 lab/device/pp_memory.py --out $OUT/pp_memory.json             # 5 layers, MTP 0 and 1, ~4 min
    python3 lab/device/pp_memory.py --layers 4 --mtp 0 --out $OUT/x.json  # another shape

Each configuration runs in a fresh process (`--one`; vLLM keeps global state per process) with the serving
environment of `lab/device/validate.py` and the composed tree at the Ampere capability (`VC_FAKE_CAPABILITY=8.0`,
`TRITON_MLA_SPARSE`), as `lab/device/run_all.sh` runs it. That process writes a config.json with GLM-5.x's shapes
(`vllm_compose.proof.tinyglm.config_dict`: hidden 6144, 64 heads, q_lora 2048, kv_lora 512, QK 192 + 64,
V 256, indexer 32 x 128, 256 experts top-8 of width 2048, vocab 154880, IndexCache freq 4 offset 3) and N decoder
layers (default 5: layers 0-2 dense and full, 3-4 MoE and shared), starts vLLM's engine with `load_format=dummy` at
the given `--gpu-memory-utilization` (PP1: the one stage holds the embedding, the LM head and, with MTP, the MTP
layer), and reads from the worker (`collective_rpc`): the bytes allocated while loading (`model_memory_usage`), the
profile's torch peak increase (`peak_activation_memory`) and non-torch increase, the KV bytes and the block count
vLLM allocated, the GPU's total memory. The parent keeps each child's log under --out's folder.

Then the parent asks pp-plan (`pp_plan.stage` for the same config, PP1, the measured total memory and vLLM's
settings) and writes one JSON: per configuration `measured`, `predicted` and `compare` (`compare()`: the ratio of
each figure; weights, KV bytes and KV tokens must be within 10%, the issue's bar; the activation estimate is
reported with its ratio, its own bar is +/- 50%). Feed it back here:

    python3 lab/device/pp_memory.py --check lab/results/DATE/pp_memory.json   # exit 0 when every run is within 10%

`tests/tool/test_pp_plan.py` runs `compare` and `--check` on a made-up measurement, so the comparison is tested on CPU.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
# the device machine runs this from a copy of the working tree, where vllm_compose is not installed
sys.path.insert(0, str(REPO / "src"))
#: where lab/device/stage.py installed the payload
STAGE = Path(os.environ.get("VC_STAGE_DEST", "/tmp/vc"))
#: the issue's bar for weights and KV; the activation estimate's own uncertainty
BAR, ACTIVATION_BAR = 0.10, 0.50
#: GLM-5.x's shapes (docs/CONTEXT.md); TinyGlmSpec field names
GLM5 = dict(
    vocab_size=154880,
    hidden_size=6144,
    intermediate_size=12288,
    moe_intermediate_size=2048,
    num_attention_heads=64,
    n_routed_experts=256,
    num_experts_per_tok=8,
    n_shared_experts=1,
    first_k_dense_replace=3,
    q_lora_rank=2048,
    kv_lora_rank=512,
    qk_nope_head_dim=192,
    qk_rope_head_dim=64,
    v_head_dim=256,
    index_topk=2048,
    index_n_heads=32,
    index_head_dim=128,
    num_nextn_predict_layers=1,
)
#: the vLLM settings of every run (and of pp-plan's prediction)
SERVE = dict(block_size=64, max_num_batched_tokens=8192, max_num_seqs=256, max_model_len=32768)


def write_config(folder: Path, layers: int) -> Path:
    """config.json of the GLM-5-shaped model with `layers` decoder layers (no weights: load_format=dummy)."""
    from vllm_compose.proof.tinyglm import TinyGlmSpec, config_dict

    spec = TinyGlmSpec(
        num_hidden_layers=layers,
        max_position_embeddings=SERVE["max_model_len"],
        extra={"index_topk_freq": 4, "index_skip_topk_offset": 3, "index_share_for_mtp_iteration": True},
        **GLM5,
    )
    spec.validate(SERVE["max_model_len"])
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(config_dict(spec), indent=1))
    return folder


def _worker_figures(worker) -> dict:
    """Runs in the worker (collective_rpc): vLLM's own memory figures."""
    runner = worker.model_runner
    cfg = getattr(runner, "kv_cache_config", None)
    return {
        "weights": int(runner.model_memory_usage),
        "activation": int(getattr(worker, "peak_activation_memory", -1)),
        "non_torch": int(getattr(worker, "non_torch_memory", -1)),
        "kv_bytes": int(getattr(worker, "available_kv_cache_memory_bytes", -1)),
        "requested": int(getattr(worker, "requested_memory", -1)),
        "total": int(worker.init_snapshot.total_memory),
        "num_blocks": int(cfg.num_blocks) if cfg is not None else -1,
        "kv_tensor_bytes": sum(int(t.size) for t in cfg.kv_cache_tensors) if cfg is not None else -1,
    }


def measure_one(layers: int, mtp: int, utilization: float, out: Path) -> int:
    """One engine start; writes `out` (measured figures, or the error)."""
    sys.path.insert(0, str(REPO / "device"))
    from validate import AMPERE_ENV

    for k, v in {**AMPERE_ENV, "VLLM_ALLOW_INSECURE_SERIALIZATION": "1"}.items():
        os.environ.setdefault(k, v)
    result: dict = {"layers": layers, "mtp": mtp, "gpu_memory_utilization": utilization, **SERVE}
    try:
        with tempfile.TemporaryDirectory(prefix="pp-memory-") as tmp:
            model = write_config(Path(tmp) / "model", layers)
            import vllm
            from vllm import LLM

            result["vllm_version"] = vllm.__version__
            kwargs = dict(
                model=str(model),
                load_format="dummy",
                skip_tokenizer_init=True,
                dtype="bfloat16",
                kv_cache_dtype="auto",
                enforce_eager=True,
                gpu_memory_utilization=utilization,
                attention_backend="TRITON_MLA_SPARSE",
                seed=0,
                **SERVE,
            )
            if mtp:
                kwargs["speculative_config"] = {"method": "mtp", "num_speculative_tokens": mtp}
            t0 = time.perf_counter()
            llm = LLM(**kwargs)
            result["init_s"] = round(time.perf_counter() - t0, 1)
            result["measured"] = llm.collective_rpc(_worker_figures)[0]
        result["ok"] = True
    except BaseException as exc:  # a failed start is a result too
        result["ok"] = False
        result["error"] = f"{type(exc).__name__}: {exc}"
        result["traceback"] = traceback.format_exc()[-4000:]
    out.write_text(json.dumps(result, indent=1))
    return 0 if result["ok"] else 1


def predict(layers: int, mtp: int, utilization: float, total_bytes: int) -> dict:
    """pp-plan's figures for the run's config: one stage (PP1) of `layers` layers on a GPU of `total_bytes`."""
    from vllm_compose.pp import plan as pp_plan

    with tempfile.TemporaryDirectory(prefix="pp-memory-") as tmp:
        shape = pp_plan.read_config(write_config(Path(tmp), layers))
    settings = pp_plan.Settings(
        pp=1,
        gpu_memory_gib=total_bytes / pp_plan.GIB,
        mtp=mtp,
        gpu_memory_utilization=utilization,
        max_num_batched_tokens=SERVE["max_num_batched_tokens"],
        max_num_seqs=SERVE["max_num_seqs"],
        max_model_len=SERVE["max_model_len"],
        block_size=SERVE["block_size"],
    )
    s = pp_plan.stage(shape, settings, 0, 0, layers)
    return {
        "weights": s.weights,
        "activation": s.activation,
        "non_torch": s.non_torch,
        "kv_bytes": s.kv_bytes,
        "num_blocks": s.kv_blocks,
        "kv_tokens": s.kv_tokens(settings.block_size),
        "kv_block_bytes": s.kv_block_bytes,
        "mtp_resident": s.mtp.resident if s.mtp else 0,
    }


def compare(measured: dict, predicted: dict, block_size: int) -> dict:
    """Each figure's predicted / measured ratio and whether it is within its bar. `ok` when weights, KV bytes and
    KV tokens are within 10% (activation is reported, with its own 50% bar, and does not decide `ok`)."""
    rows: dict = {}
    pairs = {
        "weights": (predicted["weights"], measured["weights"], BAR),
        "kv_bytes": (predicted["kv_bytes"], measured["kv_bytes"], BAR),
        "kv_tokens": (predicted["kv_tokens"], measured["num_blocks"] * block_size, BAR),
        "activation": (predicted["activation"], measured["activation"], ACTIVATION_BAR),
        "non_kv": (
            predicted["weights"] + predicted["activation"] + predicted["non_torch"],
            measured["weights"] + measured["activation"] + measured["non_torch"],
            BAR,
        ),
    }
    for name, (p, m, bar) in pairs.items():
        ratio = p / m if m > 0 else None
        rows[name] = {
            "predicted": p,
            "measured": m,
            "ratio": round(ratio, 4) if ratio is not None else None,
            "bar": bar,
            "within": ratio is not None and abs(ratio - 1) <= bar,
        }
    rows["ok"] = all(rows[k]["within"] for k in ("weights", "kv_bytes", "kv_tokens"))
    return rows


def check(path: Path) -> int:
    """Print the comparison of a result file; exit 0 when every run is within 10%, 1 otherwise."""
    data = json.loads(Path(path).read_text())
    bad = 0
    for run in data["runs"]:
        label = f"{run['layers']} layers, MTP {run['mtp']}"
        if not run.get("ok"):
            print(f"{label}: not measured: {run.get('error')}")
            bad += 1
            continue
        c = compare(run["measured"], run["predicted"], run["block_size"])
        for name in ("weights", "activation", "non_kv", "kv_bytes", "kv_tokens"):
            r = c[name]
            print(
                f"{label}: {name:<10} predicted {r['predicted']:>16,}  measured {r['measured']:>16,}  "
                f"ratio {r['ratio']}  {'within' if r['within'] else 'OUTSIDE'} {r['bar']:.0%}"
            )
        bad += not c["ok"]
    return 1 if bad else 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--layers", type=int, default=5, help="decoder layers (default 5: 3 dense + 2 MoE)")
    ap.add_argument("--mtp", type=int, nargs="+", default=[0, 1], help="num_speculative_tokens per run (0 1)")
    ap.add_argument("--gpu-memory-utilization", type=float, default=0.9)
    ap.add_argument("--out", type=Path, help="the result JSON (logs go beside it)")
    ap.add_argument("--one", type=Path, metavar="FILE", help=argparse.SUPPRESS)  # a child: one run into FILE
    ap.add_argument("--check", type=Path, metavar="FILE", help="compare a result file here (no GPU)")
    args = ap.parse_args()
    if args.check:
        return check(args.check)
    if args.one:
        return measure_one(args.layers, args.mtp[0], args.gpu_memory_utilization, args.one)
    if not args.out:
        ap.error("--out FILE is required (or --check FILE)")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(
            [str(STAGE / "composed"), str(STAGE / "site"), str(REPO / "lab/device/sitecustomize")]
        ),
        "VC_SITE_DIRS": str(STAGE / "site"),
        "VC_FAKE_CAPABILITY": os.environ.get("VC_FAKE_CAPABILITY", "8.0"),
        "PYTHONUNBUFFERED": "1",
        "NCCL_NVLS_ENABLE": "0",
        "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
        "NVSHMEM_DISABLE_NVLS": "1",
    }
    runs = []
    for mtp in args.mtp:
        one = args.out.parent / f"pp_memory_{args.layers}l_mtp{mtp}.json"
        log = args.out.parent / f"pp_memory_{args.layers}l_mtp{mtp}.log"
        cmd = [sys.executable, __file__, "--one", str(one), "--layers", str(args.layers), "--mtp", str(mtp)]
        cmd += ["--gpu-memory-utilization", str(args.gpu_memory_utilization)]
        with open(log, "w") as f:
            # SIGINT on timeout, never SIGKILL: a killed CUDA process can strand the GPU (docs/CONTEXT.md)
            rc = subprocess.run(
                ["timeout", "-s", "INT", "-k", "30", "240", *cmd], stdout=f, stderr=f, env=env
            ).returncode
        run = json.loads(one.read_text()) if one.is_file() else {"layers": args.layers, "mtp": mtp, "ok": False}
        run.setdefault("error", None if rc == 0 else f"exit {rc}; see {log.name}")
        if run.get("ok"):
            run["predicted"] = predict(args.layers, mtp, args.gpu_memory_utilization, run["measured"]["total"])
            run["compare"] = compare(run["measured"], run["predicted"], run["block_size"])
        runs.append(run)
        print(json.dumps({k: run.get(k) for k in ("layers", "mtp", "ok", "error")}), flush=True)
    args.out.write_text(json.dumps({"runs": runs}, indent=1))
    return check(args.out)


if __name__ == "__main__":
    sys.exit(main())
