"""A stand-in for an in-process vLLM engine (`vllm.LLM`, V2 model runner, async scheduling) in the CPU tests of
benchmarks/step_timing.py and of `recall_e2e.py run`.

It has the objects and methods `step_timing.install` hooks, called in the order vLLM's `EngineCore.
step_with_batch_queue` calls them with async scheduling: step n+1 is scheduled, executed and sampled before step
n's output reaches `update_from_output`. Its scheduler chunks prefills under a token budget (running requests
first, then waiting ones, first come first served) and gives every decoding request 1 + k rows; a request's
drafts are right where the recall model's design says (`recall_model.draft_right`), so its tokens and spec-decode
counters are the design's. Its GPU is a clock the runner advances by fixed milliseconds per part (`FakeSpans`
reads it), so span figures are exact.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import SimpleNamespace

from vllm_compose.proof.recall_model import draft_right, predict

#: GPU milliseconds each part of a step takes on the fake GPU
PART_MS = {"target": 10.0, "sample": 1.0, "draft": 2.0}


class FakeSpans:
    """`step_timing`'s span clock on the fake GPU: a span is the GPU clock's advance between start and stop."""

    kind = "fake"

    def __init__(self, gpu: FakeGpu) -> None:
        self.gpu = gpu

    def start(self):
        return self.gpu.now

    def stop(self, start):
        return start, self.gpu.now

    def wait(self) -> None:
        pass

    def resolve(self, span):
        return span[1] - span[0], 0.0

    def segments(self) -> int:
        return self.gpu.segments


@dataclass
class FakeGpu:
    now: float = 0.0
    segments: int = 0


@dataclass
class Request:
    request_id: str
    num_prompt_tokens: int
    max_tokens: int
    target: list[int]
    num_computed_tokens: int = 0
    output: int = 0
    rows: int = 0  # rows of the step in flight


@dataclass
class SchedulerOutput:
    num_scheduled_tokens: dict[str, int]
    scheduled_spec_decode_tokens: dict[str, list[int]]
    total_num_scheduled_tokens: int


@dataclass
class ModelRunnerOutput:
    req_ids: list[str]
    sampled_token_ids: list[list[int]]


class FakeScheduler:
    def __init__(self, budget: int, k: int) -> None:
        self.budget, self.k = budget, k
        self.requests: dict[str, Request] = {}
        self.waiting: list[str] = []
        self.updates = 0

    def has_requests(self) -> bool:
        return any(r.output < r.max_tokens for r in self.requests.values())

    def schedule(self) -> SchedulerOutput:
        budget, sched, spec = self.budget, {}, {}
        for r in self.requests.values():
            if r.rows or r.output >= r.max_tokens or budget <= 0:
                continue  # a step in flight, finished, or no budget left
            if r.num_computed_tokens >= r.num_prompt_tokens:
                n = 1 + self.k
                spec.update({r.request_id: [-1] * self.k} if self.k else {})
            else:
                n = min(r.num_prompt_tokens - r.num_computed_tokens, budget)
            sched[r.request_id] = n
            r.num_computed_tokens += n
            r.rows = n
            budget -= n
        return SchedulerOutput(sched, spec, sum(sched.values()))

    def update_from_output(self, scheduler_output: SchedulerOutput, model_runner_output: ModelRunnerOutput):
        self.updates += 1
        return {}


class FakeCudaGraphManager:
    def __init__(self, mode: str) -> None:
        self.mode = mode

    def dispatch(self, num_reqs, num_tokens, uniform_token_count, num_active_loras=0):
        return SimpleNamespace(cg_mode=SimpleNamespace(name=self.mode if uniform_token_count else "NONE"))


class FakeSpeculator:
    def __init__(self, gpu: FakeGpu) -> None:
        self.gpu = gpu
        self.prefill_cudagraph_manager = FakeCudaGraphManager("FULL")

    def propose(self, num_reqs: int, uniform: bool):
        self.prefill_cudagraph_manager.dispatch(num_reqs, num_reqs, uniform)
        self.gpu.now += PART_MS["draft"]


class FakeRunner:
    """Runs a step on the fake GPU: the target forward, then sampling with the rejection and the draft."""

    def __init__(self, scheduler: FakeScheduler, spec, k: int, gpu: FakeGpu) -> None:
        self.scheduler, self.spec, self.k, self.gpu = scheduler, spec, k, gpu
        self.cudagraph_manager = FakeCudaGraphManager("FULL")
        self.speculator = FakeSpeculator(gpu) if k else None
        self._step: SchedulerOutput | None = None
        self.counters = {"num_drafts": 0, "num_draft_tokens": 0, "num_accepted_tokens": 0, "per_pos": [0] * k}

    def execute_model(self, scheduler_output: SchedulerOutput, intermediate_tensors=None):
        n = scheduler_output.num_scheduled_tokens
        uniform = len(set(n.values())) == 1 and next(iter(n.values())) == 1 + self.k
        self.cudagraph_manager.dispatch(len(n), scheduler_output.total_num_scheduled_tokens, uniform)
        self.gpu.now += PART_MS["target"]
        self._step = scheduler_output
        self._uniform = uniform

    def sample_tokens(self, grammar_output) -> ModelRunnerOutput:
        so, self._step = self._step, None
        self.gpu.now += PART_MS["sample"]
        ids, sampled = [], []
        for rid in so.num_scheduled_tokens:
            r = self.scheduler.requests[rid]
            r.rows = 0
            ids.append(rid)
            if r.num_computed_tokens < r.num_prompt_tokens:
                sampled.append([])  # a prefill chunk that is not the last: nothing sampled
                continue
            if rid not in so.scheduled_spec_decode_tokens:  # the last prefill chunk: the first token
                got = 1
            else:
                got = 1
                while got <= self.k and (got == 1) and draft_right(self.spec, r.target[r.output + got - 1]):
                    self.counters["per_pos"][got - 1] += 1
                    got += 1
                self.counters["num_drafts"] += 1
                self.counters["num_draft_tokens"] += self.k
                self.counters["num_accepted_tokens"] += got - 1
                r.num_computed_tokens -= self.k + 1 - got  # rejected rows are not computed
            sampled.append(r.target[r.output : r.output + got])
            r.output += got
        if self.speculator is not None:
            self.speculator.propose(len(ids), self._uniform)
        return ModelRunnerOutput(ids, sampled)


class FakeTime:
    """`time` for the modules under test: `perf_counter` is the fake GPU's clock, in seconds."""

    def __init__(self, gpu: FakeGpu) -> None:
        self.gpu = gpu

    def perf_counter(self) -> float:
        return self.gpu.now / 1e3


class FakeLLM:
    """`vllm.LLM` as `step_timing` and `recall_e2e.run` reach it: `llm_engine.engine_core.engine_core.scheduler`,
    `collective_rpc`, `llm_engine.vllm_config`; `fake_generate` runs the engine loop."""

    def __init__(
        self, spec, k: int, budget: int = 512, batch: int = 8, one_off_ms: float = 0.0, gpu: FakeGpu | None = None
    ) -> None:
        self.spec, self.k = spec, k
        #: GPU ms the first generation of more than one request pays once (a kernel compiled for a new shape)
        self.one_off_ms = one_off_ms
        self.gpu = gpu or FakeGpu()
        self.scheduler = FakeScheduler(budget, k)
        self.runner = FakeRunner(self.scheduler, spec, k, self.gpu)
        core = SimpleNamespace(scheduler=self.scheduler)
        config = SimpleNamespace(
            scheduler_config=SimpleNamespace(async_scheduling=True, max_num_seqs=batch, max_num_batched_tokens=budget,
                                             max_num_scheduled_tokens=budget, enable_chunked_prefill=True),
            compilation_config=SimpleNamespace(cudagraph_mode="FULL_DECODE_ONLY", cudagraph_capture_sizes=[1, 2, 4, 8],
                                               max_cudagraph_capture_size=8),
            speculative_config=SimpleNamespace(method="mtp", num_speculative_tokens=k) if k else None,
        )  # fmt: skip
        self.llm_engine = SimpleNamespace(engine_core=SimpleNamespace(engine_core=core), vllm_config=config)
        self._ids = 0

    def collective_rpc(self, fn):
        worker = SimpleNamespace(model_runner=self.runner)
        return [fn(SimpleNamespace(worker=worker))]

    def fake_generate(self, prompts, max_tokens: int) -> list[list[int]]:
        """The engine loop with a batch queue of 2 (async scheduling): schedule, execute and sample step n + 1
        before step n's output goes to `update_from_output`."""
        sched = self.scheduler
        sched.requests.clear()
        mine = []
        for p in prompts:
            rid = f"{self._ids}-fake"
            self._ids += 1
            sched.requests[rid] = Request(
                rid, len(p.tokens), max_tokens, predict(self.spec, p, max_tokens + self.k + 1)
            )
            mine.append(rid)
        if len(prompts) > 1 and self.one_off_ms:
            self.gpu.now += self.one_off_ms
            self.one_off_ms = 0.0
        queue: list[tuple] = []
        while sched.has_requests() or queue:
            if sched.has_requests():
                so = sched.schedule()
                if so.total_num_scheduled_tokens:
                    self.runner.execute_model(so)
                    queue.append((so, self.runner.sample_tokens(None)))
                    if len(queue) < 2 and sched.has_requests():
                        continue
            if queue:
                so, out = queue.pop(0)
                sched.update_from_output(so, out)
        return [predict(self.spec, p, max_tokens) for p in prompts]

    def fake_metrics(self) -> dict:
        c = self.runner.counters
        if not self.k:
            return {}
        return {
            "vllm:spec_decode_num_drafts": c["num_drafts"],
            "vllm:spec_decode_num_draft_tokens": c["num_draft_tokens"],
            "vllm:spec_decode_num_accepted_tokens": c["num_accepted_tokens"],
            "vllm:spec_decode_num_accepted_tokens_per_pos": list(c["per_pos"]),
        }
