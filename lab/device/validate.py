"""One validation run on the device machine: greedy generation of the tiny GLM-DSA model under one configuration.

Run in a fresh process per configuration (vLLM keeps global state per process). Writes one JSON file:
configuration, environment, token ids per prompt, wall time, spec-decode counters, and the error if the engine
failed (the negative control on stock 0.26.0 is expected to fail; its error is the result).

    python lab/device/validate.py --model /tmp/tiny --pp 2 --mtp 1 --out $OUT/pp2_mtp1.json
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import traceback
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
# the device machine runs this from a copy of the working tree, where vllm_compose is not installed
sys.path.insert(0, str(REPO / "src"))

from vllm_compose.proof.suites import SERVING_ENV  # noqa: E402  (the user guide's serving environment)

#: the Ampere serving environment (lab/notebook/validation.md explains each); set before vLLM is imported: the user
#: guide's, with the engine in its own process, DeepGEMM off, and NVLink multicast off on the lab's machines
AMPERE_ENV = {
    **SERVING_ENV,
    "VLLM_ENABLE_V1_MULTIPROCESSING": "1",
    "VLLM_USE_DEEP_GEMM": "0",
    "NCCL_NVLS_ENABLE": "0",
    "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
    "NVSHMEM_DISABLE_NVLS": "1",
    "TOKENIZERS_PARALLELISM": "false",
}


def spec_metrics(llm) -> dict:
    """Spec-decode counters from the engine's Prometheus-style metrics (empty without MTP)."""
    out: dict = {}
    try:
        for m in llm.get_metrics():
            name = getattr(m, "name", "")
            if "spec_decode" in name:
                value = getattr(m, "value", None)
                if value is None and hasattr(m, "values"):
                    value = list(m.values)
                out[name] = value
    except Exception as exc:  # metrics API drift must not lose the tokens
        out["error"] = repr(exc)
    return out


def generate_late(engine, prompts: list, params: list, late: int) -> list[list[int]]:
    """Greedy-generate `prompts` through `engine` (a vLLM `LLMEngine`), the last prompt only after `late` engine
    outputs: the others are decoding with drafts by then, so the last one's prefill shares a batch with them.

    `params` must ask for final outputs only (`RequestOutputKind.FINAL_ONLY`). Returns each prompt's token ids, in
    prompt order. Raises RuntimeError if the engine runs out of work before the last prompt was added (it would
    never be generated) or finishes a request it was not given.
    """
    if late < 1:
        raise ValueError(f"late must be at least 1 engine output, got {late}")
    *first, last = range(len(prompts))
    for i in first:
        engine.add_request(str(i), prompts[i], params[i])
    done: dict[int, list[int]] = {}
    steps, added_last = 0, False
    while True:
        if not added_last and steps >= late:
            engine.add_request(str(last), prompts[last], params[last])
            added_last = True
        if not engine.has_unfinished_requests():
            if added_last:
                break
            raise RuntimeError(
                f"all {len(first)} early prompts finished after {steps} engine outputs, before the late prompt was "
                f"added (late={late}): use a smaller --late"
            )
        for out in engine.step():
            if not out.finished:
                continue
            index = int(out.request_id)
            if index not in range(len(prompts)):
                raise RuntimeError(f"the engine finished request {out.request_id!r}, which was never added")
            done[index] = list(out.outputs[0].token_ids)
        steps += 1
    return [done[i] for i in range(len(prompts))]


def _flush_tally(_worker=None) -> list:
    """Runs in each worker (collective_rpc passes the worker; sending a function needs
    VLLM_ALLOW_INSECURE_SERIALIZATION=1): the VC_CHECK_TOKEN_IDS=async counts of lab/device/sitecustomize."""
    import sitecustomize

    return sitecustomize.flush_tally()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--model", required=True)
    ap.add_argument("--pp", type=int, default=1)
    ap.add_argument("--mtp", type=int, default=0, help="num_speculative_tokens; 0 = no MTP")
    ap.add_argument("--max-tokens", type=int, default=320)
    ap.add_argument("--max-model-len", type=int, default=1024)
    ap.add_argument("--prompts", type=int, default=4)
    ap.add_argument("--logprobs", type=int, default=0, help="top-n logprobs per token (margins for tie analysis)")
    ap.add_argument("--backend", default="TRITON_MLA_SPARSE")
    ap.add_argument("--gpu-mem", type=float, default=0.25)
    ap.add_argument("--bench-tokens", type=int, default=0, help="also time single-stream decode of N tokens")
    ap.add_argument("--sync-scheduling", action="store_true", help="async_scheduling=False (default: vLLM's choice)")
    ap.add_argument(
        "--repeat",
        type=int,
        default=1,
        help="generate the prompts N times in one engine (each repeat must give the same tokens)",
    )
    ap.add_argument(
        "--stagger",
        type=int,
        default=0,
        help="request i asks for max_tokens - i * STAGGER tokens (finishes spread out)",
    )
    ap.add_argument(
        "--late",
        type=int,
        default=0,
        help="add the last prompt only after N engine outputs, so its prefill joins the others' draft decodes",
    )
    ap.add_argument("--label", default="")
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    if args.late and (args.repeat > 1 or args.logprobs):
        ap.error("--late generates through the engine's steps: it takes neither --repeat nor --logprobs")

    for k, v in AMPERE_ENV.items():
        os.environ.setdefault(k, v)
    from vllm_compose.proof.expected import first_difference
    from vllm_compose.proof.tinyglm import TinyGlmSpec, pp_layer_partition, prompts

    spec_file = Path(args.model) / "tinyglm_spec.json"
    spec = TinyGlmSpec(**json.loads(spec_file.read_text()))
    os.environ["VLLM_PP_LAYER_PARTITION"] = ",".join(map(str, pp_layer_partition(spec.num_hidden_layers, args.pp)))
    result: dict = {
        "label": args.label,
        "pp": args.pp,
        "mtp": args.mtp,
        "backend": args.backend,
        "pp_layer_partition": os.environ["VLLM_PP_LAYER_PARTITION"],
        "env": {k: os.environ.get(k) for k in [*AMPERE_ENV, "VC_FAKE_CAPABILITY", "VLLM_PP_LAYER_PARTITION"]},
        "max_tokens": args.max_tokens,
        "max_model_len": args.max_model_len,
        "index_topk": spec.index_topk,
        "model_weights": spec.weights,
        "sync_scheduling": args.sync_scheduling,
        "repeat": args.repeat,
        "stagger": args.stagger,
        "late": args.late,
    }
    out = Path(args.out)
    try:
        from vllm.inputs import TokensPrompt

        import vllm
        from vllm import LLM, SamplingParams

        result["vllm_version"] = vllm.__version__
        result["vllm_file"] = vllm.__file__
        kwargs = dict(
            model=args.model,
            skip_tokenizer_init=True,
            dtype="bfloat16",
            pipeline_parallel_size=args.pp,
            block_size=64,
            kv_cache_dtype="auto",
            enforce_eager=True,
            max_model_len=args.max_model_len,
            max_num_seqs=8,
            gpu_memory_utilization=args.gpu_mem,
            seed=0,
            disable_log_stats=False,
        )
        if args.backend not in ("", "auto"):
            kwargs["attention_backend"] = args.backend
        if args.sync_scheduling:
            kwargs["async_scheduling"] = False
        if args.mtp:
            kwargs["speculative_config"] = {"method": "mtp", "num_speculative_tokens": args.mtp}
        t0 = time.perf_counter()
        llm = LLM(**kwargs)
        result["init_s"] = time.perf_counter() - t0
        ps = [TokensPrompt(prompt_token_ids=p) for p in prompts(spec, args.prompts)]
        sp = [
            SamplingParams(
                temperature=0.0,
                max_tokens=args.max_tokens - i * args.stagger,
                ignore_eos=True,
                detokenize=False,
                logprobs=args.logprobs or None,
            )
            for i in range(len(ps))
        ]
        t0 = time.perf_counter()
        if args.late:
            from vllm.sampling_params import RequestOutputKind

            for p in sp:
                p.output_kind = RequestOutputKind.FINAL_ONLY
            late_tokens = generate_late(llm.llm_engine, ps, sp, args.late)
        else:
            outs = llm.generate(ps, sp, use_tqdm=False)
        result["generate_s"] = time.perf_counter() - t0
        if args.repeat > 1:
            first = [list(o.outputs[0].token_ids) for o in outs]
            result["repeats_equal"], result["repeats_first_difference"] = [], []
            for _ in range(args.repeat - 1):
                again = [list(o.outputs[0].token_ids) for o in llm.generate(ps, sp, use_tqdm=False)]
                result["repeats_equal"].append(again == first)
                # the first (prompt, position) where this repeat differs from the first generation, or None
                result["repeats_first_difference"].append(first_difference(first, again))
        result["prompt_lens"] = [len(p) for p in prompts(spec, args.prompts)]
        result["token_ids"] = late_tokens if args.late else [list(o.outputs[0].token_ids) for o in outs]
        if args.logprobs:
            # per prompt, per position: [[token id, logprob], ...] of the top-n (vllm_compose.proof.expected)
            result["top_logprobs"] = [
                [[[int(t), round(float(x.logprob), 5)] for t, x in lp.items()] for lp in o.outputs[0].logprobs or []]
                for o in outs
            ]
        result["generated_tokens"] = sum(len(t) for t in result["token_ids"])
        result["tok_per_s"] = result["generated_tokens"] / result["generate_s"]
        result["spec_metrics"] = spec_metrics(llm)
        if os.environ.get("VC_CHECK_TOKEN_IDS") == "async":
            try:
                result["tally"] = llm.collective_rpc(_flush_tally)
            except Exception as exc:  # the counts are also in the workers' record files
                result["tally"] = f"not read: {type(exc).__name__}: {exc}"
        if args.bench_tokens:
            # benchmarks/ is a folder of scripts, not a package: put it on the path to import mtp_decode
            sys.path.insert(0, str(REPO / "benchmarks"))
            from mtp_decode import measure

            result["bench"] = measure(llm, prompts(spec, 1)[0], args.bench_tokens)
        result["ok"] = True
    except BaseException as exc:  # the negative control's failure is data
        result["ok"] = False
        result["error"] = f"{type(exc).__name__}: {exc}"
        result["traceback"] = traceback.format_exc()[-6000:]
    out.write_text(json.dumps(result, indent=1, default=str))
    print(json.dumps({k: result.get(k) for k in ("label", "ok", "error", "generated_tokens", "tok_per_s")}))
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
