"""Per-step records of an in-process vLLM engine: what each engine step scheduled, produced and cost.

`install(llm)` hooks an `LLM` built in-process (`VLLM_ENABLE_V1_MULTIPROCESSING=0`, one GPU, the V2 model runner)
after its start-up, so that profiling, warm-up and CUDA-graph capture neither see a hook nor are recorded. Each hook
is an instance attribute over the engine's own method, which its caller looks up at call time:

| wrapped | object | recorded per step |
|---|---|---|
| `schedule` | the scheduler | per request: tokens scheduled, draft tokens among them, whether it is a prefill chunk |
| `update_from_output` | the scheduler | per request: tokens produced (accepted drafts + 1); when the step's output arrived |
| `execute_model` | the model runner | a span around the target forward (its inputs, then a graph replay or the eager forward) |
| `dispatch` | the runner's CUDA-graph manager | the target forward's mode: FULL (a graph replay) or NONE (eager) |
| `sample_tokens` | the model runner | a span around sampling, rejection and the draft |
| `propose` | the speculator (MTP) | a span around the draft: the MTP layer over the verified rows, then its sampling |
| `dispatch` | the speculator's first-step graph manager | the draft's mode |
| `jit_cache_hook` | Triton's knobs | every kernel specialization compiled (or loaded from disk) while armed: a one-off cost |

A span is two CUDA events on the current stream (GPU time between two points of the stream: the GPU's work there,
plus any wait for the host to launch it) and the host clock around the call. The scheduler and the runner are
matched by the `SchedulerOutput` object both receive; with async scheduling the runner's calls for a step come
between that step's `schedule` and its `update_from_output`, as without.

Nothing is recorded unless armed: `arm(label)` starts one generation's records (and returns its start on the host
clock), `collect()` ends the last one, waits for the GPU, turns the events into milliseconds and returns every
generation's records, JSON-able. A step record:

    {"t_scheduled": s, "t_done": s,            # since arm(): scheduled, and its output taken by the scheduler
     "tokens": n,                              # scheduled in all
     "reqs": {request id: {"scheduled": n, "drafts": d, "prefill": bool, "generated": g}},
     "gpu_ms": {"target": ms, "sample": ms, "draft": ms}, "cpu_ms": {...},   # sample excludes the draft
     "graph": "FULL", "draft_graph": "FULL"}                                 # absent where the release has no such part

`summarize(steps, batch)` reduces one generation's records to the figures `mtp_gain.explain` reads; it is pure and
runs anywhere (tests/benchmarks/test_step_timing.py holds it against hand-made records).
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field
from typing import Any

from vllm_compose.errors import ComposeError


class StepTimingError(ComposeError):
    """The engine could not be hooked, or step records cannot be summarized."""


# --- spans: CUDA events on a GPU, a stand-in in tests --------------------------------------------------------------


class CudaSpans:
    """Spans timed by CUDA events on the current stream and by the host clock; resolved after a device sync."""

    kind = "cuda-events"

    def __init__(self) -> None:
        import torch

        self._torch = torch

    def start(self) -> tuple:
        ev = self._torch.cuda.Event(enable_timing=True)
        ev.record()
        return ev, time.perf_counter()

    def stop(self, start: tuple) -> tuple:
        ev = self._torch.cuda.Event(enable_timing=True)
        ev.record()
        return start[0], ev, time.perf_counter() - start[1]

    def wait(self) -> None:
        self._torch.cuda.synchronize()

    def resolve(self, span: tuple) -> tuple[float, float]:
        """(GPU ms, host ms) of a stopped span."""
        begin, end, host_s = span
        return begin.elapsed_time(end), host_s * 1e3

    def segments(self) -> int:
        """cudaMalloc'd segments the caching allocator holds (a generation that grows it paid for the growth)."""
        return int(self._torch.cuda.memory_stats().get("segment.all.allocated", 0))


def default_spans() -> CudaSpans:
    """The spans a GPU run uses (tests replace this)."""
    return CudaSpans()


# --- the recorder -------------------------------------------------------------------------------------------------


@dataclass
class _Generation:
    """One armed generation: its label, start, steps in order, Triton specializations and allocator growth."""

    label: str
    t0: float
    segments0: int
    steps: list[dict] = field(default_factory=list)
    jit: list[str] = field(default_factory=list)
    segments: int | None = None


@dataclass
class _State:
    """The recorder's state in the engine's process (the engine is in-process: the harness reads it directly)."""

    #: the span clock (None until install)
    spans: Any = None
    #: every generation armed so far; the last one is being recorded while `armed`
    generations: list[_Generation] = field(default_factory=list)
    armed: bool = False
    #: id(SchedulerOutput) -> (generation, step record), from `schedule` until `update_from_output`
    pending: dict[int, tuple[_Generation, dict]] = field(default_factory=dict)
    #: the step record the runner is executing (set by `execute_model`, read by sampling and the draft)
    current: dict | None = None
    #: what `install` hooked and what it did not find
    hooked: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)


_STATE = _State()


def _engine_core(llm) -> Any:
    """The in-process engine core of a `vllm.LLM` (the attribute path differs by release), or None."""
    core = getattr(getattr(llm, "llm_engine", None), "engine_core", None)
    return getattr(core, "engine_core", core)


def _wrap(obj: Any, name: str, make) -> bool:
    """Replace `obj.name` by `make(original)` as an instance attribute; False when `obj` has no such method."""
    orig = getattr(obj, name, None) if obj is not None else None
    if orig is None or not callable(orig):
        return False
    setattr(obj, name, make(orig))
    return True


def _hook_scheduler(sched: Any, state: _State) -> None:
    def make_schedule(orig):
        def schedule(*args, **kwargs):
            out = orig(*args, **kwargs)
            if state.armed and getattr(out, "total_num_scheduled_tokens", 0) > 0:
                gen = state.generations[-1]
                spec = getattr(out, "scheduled_spec_decode_tokens", None) or {}
                reqs = {}
                for rid, n in out.num_scheduled_tokens.items():
                    req = sched.requests.get(rid)
                    # the scheduler has already counted this step's tokens as computed
                    before = req.num_computed_tokens - n if req is not None else None
                    prefill = before is not None and before < req.num_prompt_tokens
                    reqs[rid] = {"scheduled": int(n), "drafts": len(spec.get(rid, ())), "prefill": prefill,
                                 "generated": 0}  # fmt: skip
                rec = {"t_scheduled": time.perf_counter() - gen.t0, "tokens": int(out.total_num_scheduled_tokens),
                       "reqs": reqs, "_spans": {}}  # fmt: skip
                state.pending[id(out)] = (gen, rec)
            return out

        return schedule

    def make_update(orig):
        def update_from_output(scheduler_output, model_runner_output, *args, **kwargs):
            entry = state.pending.pop(id(scheduler_output), None)
            if entry is not None:
                gen, rec = entry
                rec["t_done"] = time.perf_counter() - gen.t0
                sampled = getattr(model_runner_output, "sampled_token_ids", None) or []
                for i, rid in enumerate(getattr(model_runner_output, "req_ids", None) or []):
                    if rid in rec["reqs"] and i < len(sampled):
                        rec["reqs"][rid]["generated"] = len(sampled[i])
                gen.steps.append(rec)
            return orig(scheduler_output, model_runner_output, *args, **kwargs)

        return update_from_output

    for name, make in (("schedule", make_schedule), ("update_from_output", make_update)):
        (state.hooked if _wrap(sched, name, make) else state.missing).append(f"scheduler.{name}")


def _span(state: _State, part: str, orig):
    """`orig` timed into the current step's span `part` (the target forward starts the step)."""

    def timed(*args, **kwargs):
        rec = state.current
        if rec is None:
            return orig(*args, **kwargs)
        start = state.spans.start()
        try:
            return orig(*args, **kwargs)
        finally:
            rec["_spans"][part] = state.spans.stop(start)

    return timed


def _graph_mode(state: _State, key: str, orig):
    """`orig` (a CUDA-graph manager's `dispatch`) with the mode it chose written into the current step's `key`."""

    def dispatch(*args, **kwargs):
        desc = orig(*args, **kwargs)
        if state.current is not None:
            mode = getattr(desc, "cg_mode", None)
            state.current[key] = getattr(mode, "name", str(mode))
        return desc

    return dispatch


def _hook_runner(runner: Any, state: _State) -> None:
    def make_execute(orig):
        timed = _span(state, "target", orig)

        def execute_model(scheduler_output, *args, **kwargs):
            entry = state.pending.get(id(scheduler_output)) if state.armed else None
            state.current = entry[1] if entry is not None else None
            return timed(scheduler_output, *args, **kwargs)

        return execute_model

    def make_sample(orig):
        timed = _span(state, "sample", orig)

        def sample_tokens(*args, **kwargs):
            try:
                return timed(*args, **kwargs)
            finally:
                state.current = None

        return sample_tokens

    parts = [
        (runner, "model_runner", "execute_model", make_execute),
        (runner, "model_runner", "sample_tokens", make_sample),
        (getattr(runner, "cudagraph_manager", None), "cudagraph_manager", "dispatch",
         lambda orig: _graph_mode(state, "graph", orig)),
    ]  # fmt: skip
    # the V2 runner's MTP drafter is `speculator`; V1's is `drafter`
    drafter = getattr(runner, "speculator", None) or getattr(runner, "drafter", None)
    if drafter is not None:
        parts += [
            (drafter, "speculator", "propose", lambda orig: _span(state, "draft", orig)),
            (getattr(drafter, "prefill_cudagraph_manager", None), "speculator.prefill_cudagraph_manager", "dispatch",
             lambda orig: _graph_mode(state, "draft_graph", orig)),
        ]  # fmt: skip
    for obj, where, name, make in parts:
        (state.hooked if _wrap(obj, name, make) else state.missing).append(f"{where}.{name}")


def _install_worker(worker_wrapper: Any) -> dict:
    """Run in the worker (through `collective_rpc`): hook its model runner."""
    worker = getattr(worker_wrapper, "worker", None) or worker_wrapper
    runner = getattr(worker, "model_runner", None)
    if runner is None:
        _STATE.missing.append("worker.model_runner")
        return {"runner": None}
    _hook_runner(runner, _STATE)
    return {"runner": type(runner).__name__}


def _hook_triton(state: _State) -> None:
    try:
        from triton import knobs
    except Exception:  # no Triton or one without knobs: the records say so
        state.missing.append("triton.knobs.runtime.jit_cache_hook")
        return
    prev = knobs.runtime.jit_cache_hook

    def hook(**kwargs):
        if state.armed:
            fn = kwargs.get("fn")
            state.generations[-1].jit.append(str(getattr(fn, "name", fn)))
        return prev(**kwargs) if prev is not None else False  # never skip the compilation itself

    knobs.runtime.jit_cache_hook = hook
    state.hooked.append("triton.knobs.runtime.jit_cache_hook")


def install(llm: Any, spans: Any = None) -> dict:
    """Hook an in-process `vllm.LLM` (after its start-up); returns what was hooked and what was not found."""
    global _STATE
    core = _engine_core(llm)
    sched = getattr(core, "scheduler", None)
    if sched is None:
        raise StepTimingError(
            "the engine's scheduler was not found: step records need an in-process engine",
            hint="run with VLLM_ENABLE_V1_MULTIPROCESSING=0 (proof.SERVING_ENV sets it)",
        )
    _STATE = _State(spans=spans if spans is not None else default_spans())
    _hook_scheduler(sched, _STATE)
    try:
        llm.collective_rpc(_install_worker)
    except Exception as exc:  # the scheduler's records still come: steps, tokens, periods; no spans
        _STATE.missing.append(f"worker hooks ({type(exc).__name__}: {exc})")
    _hook_triton(_STATE)
    return {"spans": _STATE.spans.kind, "hooked": list(_STATE.hooked), "missing": list(_STATE.missing)}


def _end(state: _State) -> None:
    if state.armed and state.generations:
        state.generations[-1].segments = state.spans.segments() - state.generations[-1].segments0
    state.armed = False


def arm(label: str) -> float:
    """Start recording one generation under `label` (ending the previous one); returns its start (host clock).
    Without `install`, records nothing and returns the clock."""
    if _STATE.spans is None:
        return time.perf_counter()
    _end(_STATE)
    gen = _Generation(label=label, t0=time.perf_counter(), segments0=_STATE.spans.segments())
    _STATE.generations.append(gen)
    _STATE.armed = True
    return gen.t0


def collect() -> dict:
    """End the last generation, wait for the GPU and return every generation's records, JSON-able:
    {"spans": kind, "hooked": [...], "missing": [...], "generations": [{"label", "steps", "jit", "segments"}]}."""
    state = _STATE
    if state.spans is None:
        return {"spans": None, "hooked": [], "missing": ["install"], "generations": []}
    _end(state)
    state.spans.wait()
    out = []
    for gen in state.generations:
        for rec in gen.steps:
            spans = rec.pop("_spans", {})
            if spans:
                resolved = {part: state.spans.resolve(s) for part, s in spans.items()}
                gpu = {part: round(v[0], 4) for part, v in resolved.items()}
                cpu = {part: round(v[1], 4) for part, v in resolved.items()}
                if "draft" in gpu and "sample" in gpu:  # the draft runs inside sample_tokens
                    gpu["sample"] = round(gpu["sample"] - gpu["draft"], 4)
                    cpu["sample"] = round(cpu["sample"] - cpu["draft"], 4)
                rec["gpu_ms"], rec["cpu_ms"] = gpu, cpu
            rec["t_scheduled"] = round(rec["t_scheduled"], 6)
            rec["t_done"] = round(rec["t_done"], 6)
        out.append({"label": gen.label, "steps": gen.steps, "jit": gen.jit, "segments": gen.segments})
    state.generations = []
    return {"spans": state.spans.kind, "hooked": list(state.hooked), "missing": list(state.missing),
            "generations": out}  # fmt: skip


def engine_facts(llm: Any) -> dict:
    """The settings that decide a step's cost and that differ between engines (MTP 0 / 1): async scheduling, the
    token budget, the CUDA-graph mode and capture sizes, the speculative config."""
    try:
        cfg = llm.llm_engine.vllm_config
        sc, cc, spec = cfg.scheduler_config, cfg.compilation_config, cfg.speculative_config
        return {
            "async_scheduling": getattr(sc, "async_scheduling", None),
            "max_num_seqs": sc.max_num_seqs,
            "max_num_batched_tokens": sc.max_num_batched_tokens,
            "max_num_scheduled_tokens": getattr(sc, "max_num_scheduled_tokens", None),
            "chunked_prefill": getattr(sc, "enable_chunked_prefill", None),
            "cudagraph_mode": str(getattr(cc, "cudagraph_mode", None)),
            "cudagraph_capture_sizes": list(getattr(cc, "cudagraph_capture_sizes", None) or []),
            "max_cudagraph_capture_size": getattr(cc, "max_cudagraph_capture_size", None),
            "speculative": None if spec is None else {"method": spec.method, "k": spec.num_speculative_tokens},
        }
    except Exception as exc:  # another release's config layout: the row says so, the timing goes on
        return {"error": f"{type(exc).__name__}: {exc}"}


# --- the summary (pure) -------------------------------------------------------------------------------------------


def _median(values: list[float]) -> float | None:
    return round(statistics.median(values), 4) + 0.0 if values else None  # + 0.0: no "-0.0"


def summarize(steps: list[dict], batch: int) -> dict:
    """One generation's step records reduced to what `mtp_gain.explain` reads:

    - `prefill_steps`, `prefill_s`: the steps up to the last one holding a prefill chunk, and when its output came;
    - `window_steps`, `window_s`: the steps after it and their time, the decode that `t(N) - t(1)` stands for;
    - `full_steps`: decode steps with all `batch` requests; over them the medians `period_ms` (one output to the
      next: the step's whole cost, host included), `gpu_ms` per part, `gpu_idle_ms` (the period less the spans: the
      GPU waiting for the host) and `cpu_ms` per part (the host's time in the runner's calls);
    - `tokens_per_step`: tokens a request gets from a decode step, over every request's decode steps;
    - `drafts`, `draft_tokens`, `accepted`, `acceptance` (accepted / draft tokens), from the same steps;
    - `per_request`: decode steps, tokens (the first, from the prefill, included) and acceptance of each request in
      the order the requests were first scheduled (the prompts' order: first come, first served);
    - `straggler`: the most decode steps a request needed over the mean (the batch waits for the slowest);
    - `graphs`, `draft_graphs`: how many decode steps ran each mode."""
    if batch < 1:
        raise StepTimingError(f"batch must be >= 1, got {batch}")
    if not steps:
        raise StepTimingError("no step records: the generation was not armed, or the hooks did not fire")
    for i, s in enumerate(steps):
        missing = [k for k in ("t_done", "reqs") if k not in s]
        if missing:
            raise StepTimingError(f"step record {i} lacks {', '.join(missing)}: not written by step_timing.collect")
    order: dict[str, dict] = {}
    last_prefill = -1
    full: list[int] = []
    graphs: dict[str, int] = {}
    draft_graphs: dict[str, int] = {}
    decode_request_steps = decode_tokens = drafts = draft_tokens = accepted = 0
    for i, s in enumerate(steps):
        prefill = any(r["prefill"] for r in s["reqs"].values())
        if prefill:
            last_prefill = i
        else:
            graphs[s.get("graph", "?")] = graphs.get(s.get("graph", "?"), 0) + 1
            if "draft_graph" in s:
                draft_graphs[s["draft_graph"]] = draft_graphs.get(s["draft_graph"], 0) + 1
            if len(s["reqs"]) == batch:
                full.append(i)
        for rid, r in s["reqs"].items():
            p = order.setdefault(rid, {"decode_steps": 0, "tokens": 0, "drafts": 0, "draft_tokens": 0, "accepted": 0})
            p["tokens"] += r["generated"]
            if r["prefill"]:
                continue
            p["decode_steps"] += 1
            decode_request_steps += 1
            decode_tokens += r["generated"]
            if r["drafts"]:
                ok = min(max(r["generated"] - 1, 0), r["drafts"])
                p["drafts"] += 1
                p["draft_tokens"] += r["drafts"]
                p["accepted"] += ok
                drafts += 1
                draft_tokens += r["drafts"]
                accepted += ok
    if len(order) > batch:
        raise StepTimingError(f"{len(order)} requests in the records of a batch of {batch}")
    periods = [(steps[i]["t_done"] - steps[i - 1]["t_done"]) * 1e3 for i in full if i > 0]
    parts = sorted({part for i in full for part in steps[i].get("gpu_ms", {})})
    gpu = {part: _median([steps[i]["gpu_ms"][part] for i in full if part in steps[i].get("gpu_ms", {})])
           for part in parts}  # fmt: skip
    cpu_parts = sorted({part for i in full for part in steps[i].get("cpu_ms", {})})
    cpu = {part: _median([steps[i]["cpu_ms"][part] for i in full if part in steps[i].get("cpu_ms", {})])
           for part in cpu_parts}  # fmt: skip
    idle = [
        (steps[i]["t_done"] - steps[i - 1]["t_done"]) * 1e3 - sum(steps[i]["gpu_ms"].values())
        for i in full
        if i > 0 and steps[i].get("gpu_ms")
    ]
    start = steps[last_prefill]["t_done"] if last_prefill >= 0 else 0.0
    decode_steps = [p["decode_steps"] for p in order.values()]
    per_request = [
        {"decode_steps": p["decode_steps"], "tokens": p["tokens"],
         "acceptance": round(p["accepted"] / p["draft_tokens"], 4) if p["draft_tokens"] else None}
        for p in order.values()
    ]  # fmt: skip
    return {
        "steps": len(steps),
        "prefill_steps": last_prefill + 1,
        "prefill_s": round(start, 6),
        "window_steps": len(steps) - 1 - last_prefill,
        "window_s": round(steps[-1]["t_done"] - start, 6),
        "full_steps": len(full),
        "period_ms": _median(periods),
        "gpu_ms": gpu,
        "gpu_idle_ms": _median(idle),
        "cpu_ms": cpu,
        "tokens_per_step": round(decode_tokens / decode_request_steps, 4) if decode_request_steps else None,
        "drafts": drafts,
        "draft_tokens": draft_tokens,
        "accepted": accepted,
        "acceptance": round(accepted / draft_tokens, 4) if draft_tokens else None,
        "per_request": per_request,
        "straggler": round(max(decode_steps) / statistics.mean(decode_steps), 4) if any(decode_steps) else None,
        "graphs": graphs,
        "draft_graphs": draft_graphs,
    }


def summarize_generation(generation: dict, batch: int) -> dict:
    """`summarize` of one collected generation, with its Triton specializations and allocator growth."""
    jit = generation.get("jit") or []
    return {
        **summarize(generation["steps"], batch),
        "triton_jit": len(jit),
        "triton_jit_kernels": sorted(set(jit)),
        "segments_allocated": generation.get("segments"),
    }
