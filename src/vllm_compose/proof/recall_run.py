"""Run the recall model through a vLLM engine and judge its tokens against the prediction, faults included.

One `Suite` is one engine (one process: vLLM keeps global state): a clean generation whose tokens must equal
`recall_model.predict` for every prompt, then, in eager mode, one generation per injected fault whose tokens must
differ from the prediction, then a clean generation again (the engine was not left broken by a fault). The result
is a JSON-able dict; `passed` is True only when every check held. Nothing here prints.

The engine runs in-process (`VLLM_ENABLE_V1_MULTIPROCESSING=0`) so that the harness can reach the scheduler:
`rotate_blocks` moves that many blocks from the front of the KV block pool's free queue to its back before any
request, so the requests' KV and indexer blocks sit at high block ids, where the kernels' byte offsets pass 2**31
(a long-running server reaches them the same way, as freed blocks cycle through the queue).
"""

from __future__ import annotations

import functools
import json
import os
import time
import traceback
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ..errors import ComposeError
from . import engine_faults, engine_oracle, layer_probe
from .fingerprint import dsa_sources
from .recall_model import Fault, RecallSpec, make_prompts, predict, spec_from_json


class RecallRunError(ComposeError):
    """A recall run could not be set up."""


#: the faults a suite injects, in order
FAULTS = (Fault.SHIFT, Fault.OTHER_REQUEST, Fault.PREVIOUS_STEP, Fault.UNFILLED, Fault.ZERO_OUTPUT)


@dataclass
class Suite:
    """One engine's configuration and what it runs."""

    label: str
    model_dir: str
    #: prompt lengths of the clean generation (concurrent requests)
    lengths: list[int]
    max_tokens: int = 32
    #: prompt lengths of each fault generation (eager only); empty: no faults
    fault_lengths: list[int] = field(default_factory=list)
    fault_max_tokens: int = 24
    faults: list[str] = field(default_factory=lambda: [f.value for f in FAULTS])
    eager: bool = True
    #: vLLM compilation_config (e.g. {"mode": 0, "cudagraph_mode": "FULL_DECODE_ONLY"}); None: the release default
    compilation: dict | None = None
    mtp: int = 0
    backend: str = "TRITON_MLA_SPARSE"
    gpu_memory_utilization: float = 0.85
    max_model_len: int = 0
    block_size: int = 64
    rotate_blocks: int = 0
    seed: int = 0
    #: check every layer against the DSA oracle (`engine_oracle`) during the clean and the fault generations
    oracle: bool = False
    #: eager only: one short generation per `engine_oracle.CORRUPTIONS` kind, each of which must fail its check
    oracle_corruptions: list[str] = field(default_factory=list)
    #: eager only: judge every layer and the final logits of one request against the checkpoint reference
    #: (`layer_probe`), clean and under each of `model_faults` (`engine_faults.MODEL_FAULTS`)
    layer_reference: bool = False
    model_faults: list[str] = field(default_factory=list)
    probe_length: int = 8192
    probe_tokens: int = 8
    #: environment the engine needs, set before vLLM reads it (over what the caller set: the native suite needs
    #: DeepGEMM on where a harness turned it off for the sm_80 path)
    env: dict[str, str] = field(default_factory=dict)


def engine(suite: Suite, spec: RecallSpec):
    """The vLLM engine a suite runs on (`vllm.LLM`: in-process, prefix caching off, the suite's MTP and graphs)."""
    from vllm import LLM

    probe = [suite.probe_length] if suite.layer_reference else []
    longest = max(suite.lengths + suite.fault_lengths + probe) + max(suite.max_tokens, suite.fault_max_tokens) + 8
    kwargs: dict[str, Any] = dict(
        model=suite.model_dir,
        skip_tokenizer_init=True,
        dtype="bfloat16",
        block_size=suite.block_size,
        enforce_eager=suite.eager,
        max_model_len=suite.max_model_len or longest,
        max_num_seqs=max(8, len(suite.lengths)),
        gpu_memory_utilization=suite.gpu_memory_utilization,
        enable_prefix_caching=False,
        seed=suite.seed,
        disable_log_stats=False,
    )
    if suite.backend:
        kwargs["attention_backend"] = suite.backend
    if suite.compilation is not None:
        kwargs["compilation_config"] = dict(suite.compilation)
        if suite.oracle and not suite.eager:
            # every decode batch of up to max_num_seqs requests replays a graph of its own size (no padded rows),
            # and each graph keeps the oracle's records
            sizes = sorted({b * (1 + suite.mtp) for b in range(1, kwargs["max_num_seqs"] + 1)})
            kwargs["compilation_config"].setdefault("cudagraph_capture_sizes", sizes)
    if suite.mtp:
        kwargs["speculative_config"] = {"method": "mtp", "num_speculative_tokens": suite.mtp}
    return LLM(**kwargs)


def _block_pool(llm):
    """The scheduler's KV block pool of an in-process engine, or None (the attribute path differs by release)."""
    core = getattr(llm.llm_engine, "engine_core", None)
    core = getattr(core, "engine_core", core)
    sched = getattr(core, "scheduler", None)
    mgr = getattr(sched, "kv_cache_manager", None)
    pool = getattr(mgr, "block_pool", None) or getattr(getattr(mgr, "coordinator", None), "block_pool", None)
    return pool


#: element offsets past which the pinned kernels faulted before entries 0036/0038 (per layer cache, 64-token blocks):
#: the sparse-MLA kernel reads 576 elements a token, the indexer's paged logits 73,728 bytes a block
INT32_LIMIT = 2**31


def _blocks_needed(suite: Suite) -> int:
    per = [-(-(n + max(suite.max_tokens, suite.fault_max_tokens) + 8) // suite.block_size) for n in suite.lengths]
    return 2 * (sum(per) + 64) * (1 + suite.mtp)


def rotate_free_blocks(llm, n: int, keep: int = 0) -> dict:
    """Move `n` blocks (-1: all but `keep`) from the front of the free queue to its back; returns the pool's size,
    the first free block id after it and whether that block's offsets pass 2**31."""
    pool = _block_pool(llm)
    if pool is None:
        raise RecallRunError("the engine's KV block pool was not found (in-process engine needed)")
    q = pool.free_block_queue
    total = q.num_free_blocks
    if n < 0:
        n = total - keep
    if n <= 0 or n >= total:
        raise RecallRunError(f"cannot rotate {n} of {total} free blocks", hint="lower rotate_blocks")
    blocks = q.popleft_n(n)
    q.append_n(blocks)
    head = getattr(getattr(q, "fake_free_list_head", None), "next_free_block", None)
    return {
        "free_blocks": total,
        "rotated": n,
        "rotated_ids": [blocks[0].block_id, blocks[-1].block_id],
        "first_free_block_id": getattr(head, "block_id", None),
        "pool_blocks": total,
    }


def generate(llm, prompts, max_tokens: int) -> list[list[int]]:
    """Greedy token ids of each `RecallPrompt`, EOS ignored."""
    from vllm.inputs import TokensPrompt

    from vllm import SamplingParams

    sp = SamplingParams(temperature=0.0, max_tokens=max_tokens, ignore_eos=True, detokenize=False)
    outs = llm.generate([TokensPrompt(prompt_token_ids=list(p.tokens)) for p in prompts], sp, use_tqdm=False)
    return [list(o.outputs[0].token_ids) for o in outs]


def _judge(spec: RecallSpec, prompts, got: list[list[int]], max_tokens: int) -> list[dict]:
    out = []
    for p, toks in zip(prompts, got, strict=True):
        want = predict(spec, p, max_tokens)
        first = next((i for i, (a, b) in enumerate(zip(toks, want, strict=False)) if a != b), None)
        if first is None and len(toks) != len(want):
            first = min(len(toks), len(want))
        out.append(
            {
                "prompt_len": len(p.tokens),
                "as_predicted": toks == want,
                "first_difference": first,
                "differing": sum(a != b for a, b in zip(toks, want, strict=False)) + abs(len(toks) - len(want)),
                "fallback_tokens": sum(t == spec.fallback_token for t in toks),
                "tokens": toks,
            }
        )
    return out


def topk_probe(spec: RecallSpec, prompt, tokens: list[int], forwards: list[list[list[int]]]) -> dict:
    """Judge the recall layer's top-k rows of a one-request generation (`engine_faults.install_probe`): the decode
    step whose input is chain token a_c must select the position of the planted token keyed by a_c, and no other
    planted token (the indexer ranks those last). `forwards` holds one row per decode forward (a one-request decode
    forward has one row); the k-th is the step whose input is `tokens[k]`."""
    key_pos = {prompt.cycle[k]: prompt.planted_at_of(prompt.cycle[k]) for k in range(spec.chain)}
    planted = set(prompt.planted_at)
    steps = [f[0] for f in forwards if len(f) == 1]
    held, wrong, extra = 0, [], 0
    for k, row in enumerate(steps[: len(tokens)]):
        chain = tokens[k] - spec.chain_token(0)
        want = key_pos.get(chain)
        chosen = set(row) & planted
        if want is not None and want in chosen:
            held += 1
        else:
            wrong.append(k)
        extra += len(chosen - {want})
    n = min(len(steps), len(tokens))
    return {
        "steps": n,
        "designed_key_held": held,
        "steps_without_it": wrong[:8],
        "other_planted_selected": extra,
        "topk_width": len(steps[0]) if steps else 0,
        "ok": n > 0 and held == n and extra == 0,
    }


#: the recall layer's output against the design: the successor's OUT lane within 5% of 2 * embed_scale, and at least
#: 95% of the output's norm (the background layers and bf16 add the rest)
OUTPUT_TOLERANCE = 0.05
OUTPUT_MIN_SHARE = 0.95


def output_probe(spec: RecallSpec, tokens: list[int], forwards: list[dict]) -> dict:
    """Judge the recall layer's attention output of a one-request generation (`install_probe` with the OUT lanes as
    `columns`): at the decode step whose input is tokens[k] the output must be the value of the planted token it
    read, the successor tokens[k + 1], written to that token's OUT lane at the designed size (2 * embed_scale)."""
    steps = [f for f in forwards if len(f["norm"]) == 1]
    want = 2 * spec.embed_scale
    worst_share, worst_error, wrong = 1.0, 0.0, []
    n = min(len(steps), len(tokens) - 1)
    for k in range(n):
        lanes, norm = steps[k]["columns"][0], steps[k]["norm"][0]
        j = tokens[k + 1] - spec.chain_token(0)
        top = max(range(len(lanes)), key=lambda i: lanes[i])
        share = lanes[j] / norm if norm > 0 and 0 <= j < len(lanes) else 0.0
        error = abs(lanes[j] - want) / want if 0 <= j < len(lanes) else 1.0
        worst_share, worst_error = min(worst_share, share), max(worst_error, error)
        if top != j or share < OUTPUT_MIN_SHARE or error > OUTPUT_TOLERANCE:
            wrong.append(k)
    return {
        "steps": n,
        "steps_off_design": wrong[:8],
        "min_share_of_norm": round(worst_share, 4),
        "max_relative_error": round(worst_error, 4),
        "thresholds": {"min_share": OUTPUT_MIN_SHARE, "relative_error": OUTPUT_TOLERANCE},
        "ok": n > 0 and not wrong,
    }


def judge_drafts(metrics: dict, mtp: int) -> dict:
    """The MTP counters against the design: the MTP layer recalls the successor of the token just sampled, so every
    first draft is right; a later draft step is right only if it computes its own top-k (with GLM-5's
    `index_share_for_mtp_iteration` applied it reuses the first step's, which holds the wrong planted token)."""

    def pick(suffix: str):
        return next((v for k, v in metrics.items() if k.endswith(suffix)), None)

    drafts = pick("spec_decode_num_drafts")
    per_pos = pick("spec_decode_num_accepted_tokens_per_pos") or []
    later = list(per_pos[1:mtp])
    if not later:
        steps = "n/a (one draft token)"
    elif all(n == drafts for n in later):
        steps = "every later draft accepted: each draft step computed its own top-k"
    elif all(n == 0 for n in later):
        steps = "every later draft rejected: the draft steps shared the first step's top-k"
    else:
        steps = "later drafts partly accepted"
    return {
        "drafts": drafts,
        "accepted_per_position": per_pos,
        "first_all_accepted": bool(drafts) and bool(per_pos) and per_pos[0] == drafts,
        "later_steps": steps,
    }


def spec_metrics(llm) -> dict:
    out: dict = {}
    try:
        for m in llm.get_metrics():
            if "spec_decode" in getattr(m, "name", ""):
                value = getattr(m, "value", None)
                if value is None and hasattr(m, "values"):
                    value = list(m.values)
                out[m.name] = value
    except Exception as exc:  # metrics API drift must not lose the tokens
        out["error"] = repr(exc)
    return out


#: the checks every oracle run must have made at least once (prefill and IndexCache checks are reported as run)
ORACLE_REQUIRED = ("decode_logits", "decode_topk", "slots", "attention")


def oracle_verdict(summary: dict) -> tuple[bool, str]:
    """Whether an oracle summary passes: no check failed and each of `ORACLE_REQUIRED` ran; with a label."""
    counts = {c: e["count"] for c, e in summary["checks"].items()}
    missing = [c for c in ORACLE_REQUIRED if not counts.get(c)]
    ran = ", ".join(f"{c} {n}" for c, n in counts.items())
    label = f"every layer agrees with the DSA oracle ({ran or 'no check ran'})"
    if missing:
        label += f"; never ran: {', '.join(missing)}"
    unsupported = summary.get("unsupported") or {}
    if unsupported:
        label += f"; inputs the oracle does not model: {', '.join(f'{k} ({n})' for k, n in unsupported.items())}"
    return summary["failed"] == 0 and not missing and not unsupported and summary["total"] > 0, label


def _oracle_generate(llm, prompts, max_tokens: int, corruption: str | None = None) -> tuple[list[list[int]], dict]:
    engine_oracle.reset()
    engine_oracle.corrupt(corruption)
    engine_oracle.arm(True)
    try:
        got = generate(llm, prompts, max_tokens)
    finally:
        engine_oracle.arm(False)
        engine_oracle.corrupt(None)
    return got, engine_oracle.summary()


def _failed_checks(summary: dict) -> list[str]:
    return [c for c, e in summary["checks"].items() if e["failed"]]


def _probe(llm, reference, prompt, tokens: int, baseline: dict | None = None) -> dict:
    layer_probe.forget()
    layer_probe.arm(True)
    try:
        got = generate(llm, [prompt], tokens)[0]
    finally:
        layer_probe.arm(False)
    judged = layer_probe.judge(reference, list(prompt.tokens), got, baseline=baseline)
    judged["tokens"] = got
    return judged


#: a fault moves the final logits over the reference indexer's own selections when its error there is at least this
#: many times the clean run's (and past the logits tolerance)
OWN_TOPK_MOVE = 4.0


def _layer_reference(llm, suite: Suite, spec: RecallSpec, result: dict) -> None:
    """The layer probe's clean run and one run per model fault, each with its checks (see `layer_probe`)."""
    from .checkpoint_reference import CheckpointReference

    t0 = time.perf_counter()
    import torch

    reference = CheckpointReference(suite.model_dir, device="cuda" if torch.cuda.is_available() else "cpu", cache=True)
    prompt = make_prompts(spec, [suite.probe_length], seed=suite.seed + 3)[0]
    out: dict[str, Any] = {"install": llm.apply_model(layer_probe.install)}
    try:
        clean = out["clean"] = _probe(llm, reference, prompt, suite.probe_tokens)
        clean_topk = layer_probe.judged_topk()
        worst, tol = clean["worst_layer_error"], clean["layer_tolerance"]
        result["checks"].append(
            (
                f"every layer agrees with the checkpoint reference (worst relative error {worst:.4f} <= {tol})",
                clean["layers_passed"],
            )
        )
        lg = clean["logits"]
        result["checks"].append(
            (
                f"the final logits agree with the checkpoint reference's forward (relative error "
                f"{lg['max_relative_error']:.4f} <= {lg['tolerance']}, argmax {lg['argmax_agree']}/{lg['rows']})",
                lg["passed"],
            )
        )
        out["faults"] = {}
        for name in suite.model_faults:
            hooked = llm.apply_model(
                functools.partial(engine_faults.install_model_fault, fault=name, layer=spec.recall_layer)
            )
            try:
                judged = _probe(llm, reference, prompt, suite.probe_tokens, baseline=clean_topk)
            finally:
                llm.apply_model(engine_faults.clear)
            judged["hooked"] = hooked
            out["faults"][name] = judged
            bad_layers = [k for k, v in judged["layers"].items() if not v["passed"]]
            # off the reference over the engine's selections, or over the reference indexer's own selections by
            # OWN_TOPK_MOVE times the clean run's error there (a wrong indexer RoPE moves only the latter; boundary
            # ties give the clean run an error of its own there)
            own, clean_own = judged["logits"].get("own_topk"), clean["logits"].get("own_topk")
            logits_off = not judged["logits"]["passed"] or bool(
                own
                and clean_own
                and own["max_relative_error"] >= max(own["tolerance"], OWN_TOPK_MOVE * clean_own["max_relative_error"])
            )
            if engine_faults.MODEL_FAULTS[name][1]:
                result["checks"].append(
                    (f"model fault {name}: the layer reference flags layers {bad_layers or 'none'}", bool(bad_layers))
                )
                if spec.random_weights:
                    result["checks"].append(
                        (f"model fault {name}: the final logits move off the reference", logits_off)
                    )
            else:
                result["checks"].append(
                    (
                        f"model fault {name}: the layer reference passes it (a uniform logit scale keeps the top-k)",
                        not bad_layers and judged["logits"]["passed"],
                    )
                )
        out["check_s"] = round(time.perf_counter() - t0, 1)
    finally:
        llm.apply_model(layer_probe.clear)
        result["layer_reference"] = out


def run_suite(suite: Suite) -> dict:
    """Run `suite`; the result dict says what ran, the tokens, and `passed`."""
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    os.environ.update(suite.env)
    spec = spec_from_json(json.loads((Path(suite.model_dir) / "recall_spec.json").read_text()))
    result: dict[str, Any] = {"suite": asdict(suite), "recall_layer": spec.recall_layer, "checks": []}
    try:
        import vllm

        result["vllm_version"] = vllm.__version__
        result["dsa_sources"] = dsa_sources()
        if suite.oracle:
            result["oracle_install"] = engine_oracle.install(suite.backend)
        t0 = time.perf_counter()
        llm = engine(suite, spec)
        result["init_s"] = round(time.perf_counter() - t0, 1)
        if suite.rotate_blocks:
            try:
                result["rotation"] = rotate_free_blocks(llm, suite.rotate_blocks, _blocks_needed(suite))
            except Exception as exc:  # the run goes on at low block ids; the result says so
                result["rotation"] = {"error": f"{type(exc).__name__}: {exc}"}
        prompts = make_prompts(spec, suite.lengths, seed=suite.seed)
        t0 = time.perf_counter()
        if suite.oracle:
            got, result["oracle"] = _oracle_generate(llm, prompts, suite.max_tokens)
        else:
            got = generate(llm, prompts, suite.max_tokens)
        result["clean"] = {
            "generate_s": round(time.perf_counter() - t0, 2),
            "prompts": _judge(spec, prompts, got, suite.max_tokens),
        }
        if spec.random_weights:  # nothing predicts a random model's tokens: the layer reference judges it
            result["clean"]["prompts"] = [
                {"prompt_len": len(p.tokens), "tokens": t} for p, t in zip(prompts, got, strict=True)
            ]
        else:
            result["checks"].append(
                ("clean tokens as predicted", all(p["as_predicted"] for p in result["clean"]["prompts"]))
            )
        if suite.oracle:
            ok, label = oracle_verdict(result["oracle"])
            result["checks"].append((label, ok))
        result["spec_metrics"] = spec_metrics(llm)
        if suite.mtp:
            drafts = judge_drafts(result["spec_metrics"], suite.mtp)
            result["drafts"] = drafts
            result["checks"].append(
                ("every first draft accepted (the MTP layer's recall)", drafts["first_all_accepted"])
            )
        if suite.layer_reference and suite.eager:
            _layer_reference(llm, suite, spec, result)
        if suite.fault_lengths and suite.eager:
            fprompts = make_prompts(spec, suite.fault_lengths, seed=suite.seed + 1)
            result["faults"] = {}
            for name in suite.faults:
                hooked = llm.apply_model(functools.partial(engine_faults.install, fault=name, layer=spec.recall_layer))
                t0 = time.perf_counter()
                if suite.oracle:
                    got, seen = _oracle_generate(llm, fprompts, suite.fault_max_tokens)
                else:
                    got, seen = generate(llm, fprompts, suite.fault_max_tokens), None
                counters = llm.apply_model(engine_faults.clear)
                judged = _judge(spec, fprompts, got, suite.fault_max_tokens)
                result["faults"][name] = {
                    "hooked": hooked,
                    "counters": counters,
                    "generate_s": round(time.perf_counter() - t0, 2),
                    "prompts": judged,
                }
                result["checks"].append(
                    (f"fault {name} changes the tokens", all(not p["as_predicted"] for p in judged))
                )
                if seen is not None:
                    # the oracle checks the kernels given their inputs; a top-k fault at a shared layer shows as
                    # that layer reading other rows than its indexer layer wrote (zeroing the module's output
                    # happens after the kernels, so the oracle has nothing to see there: reported, not judged)
                    result["faults"][name]["oracle_failed_checks"] = _failed_checks(seen)
                    if name != Fault.ZERO_OUTPUT.value:
                        result["checks"].append(
                            (f"the oracle flags fault {name} (index_share)", "index_share" in _failed_checks(seen))
                        )
            if suite.oracle:
                got, result["oracle_after_faults"] = _oracle_generate(llm, fprompts, suite.fault_max_tokens)
                ok, label = oracle_verdict(result["oracle_after_faults"])
                result["checks"].append((f"after the faults: {label}", ok))
            else:
                got = generate(llm, fprompts, suite.fault_max_tokens)
            judged = _judge(spec, fprompts, got, suite.fault_max_tokens)
            result["after_faults"] = {"prompts": judged}
            result["checks"].append(("clean again after the faults", all(p["as_predicted"] for p in judged)))
            # the recall layer's top-k, step by step, for one request: the designed key and no other planted token
            d = spec.dims
            llm.apply_model(
                functools.partial(
                    engine_faults.install_probe, layer=spec.recall_layer, columns=(d.out(0), d.out(spec.chain))
                )
            )
            got = generate(llm, fprompts[:1], suite.fault_max_tokens)
            hook = llm.apply_model(engine_faults.clear)[0]["hooks"][0]
            probe = topk_probe(spec, fprompts[0], got[0], hook["rows"])
            result["topk_probe"] = probe
            result["checks"].append(
                ("the recall layer's top-k holds the designed key and no other planted token", probe["ok"])
            )
            output = output_probe(spec, got[0], hook["outputs"])
            result["output_probe"] = output
            result["checks"].append(("the recall layer's attention writes the designed value", output["ok"]))
        if suite.oracle and suite.oracle_corruptions and suite.eager:
            cprompts = make_prompts(spec, suite.fault_lengths or suite.lengths[:2], seed=suite.seed + 2)
            result["oracle_corruptions"] = {}
            for kind in suite.oracle_corruptions:
                _got, seen = _oracle_generate(llm, cprompts, 4, corruption=kind)
                failed = _failed_checks(seen)
                result["oracle_corruptions"][kind] = {"failed_checks": failed, "summary": seen}
                want = engine_oracle.CORRUPTIONS[kind]
                result["checks"].append((f"oracle corruption {kind}: the {want} check fails", want in failed))
        result["ok"] = True
    except BaseException as exc:  # an engine failure is the result
        result["ok"] = False
        result["error"] = f"{type(exc).__name__}: {exc}"
        result["traceback"] = traceback.format_exc()[-6000:]
    result["passed"] = bool(result["ok"] and result["checks"] and all(ok for _c, ok in result["checks"]))
    return result


def main(argv: list[str]) -> int:
    """`python -m vllm_compose.proof.recall_run SUITE_JSON OUT_FILE`: one suite, its result written to OUT_FILE;
    exit 0 when it passed, 1 when not (`suites.run` starts one interpreter per suite this way)."""
    suite = Suite(**json.loads(argv[0]))
    result = run_suite(suite)
    Path(argv[1]).write_text(json.dumps(result, indent=1, default=str))
    return 0 if result["passed"] else 1


if __name__ == "__main__":  # pragma: no cover - run by suites.run in a fresh interpreter
    import sys

    sys.exit(main(sys.argv[1:]))
