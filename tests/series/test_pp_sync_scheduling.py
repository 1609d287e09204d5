"""Skew fixes 0023 and 0024 on the real release files: PP + synchronous scheduling + spec decode.

The bug was found on the GPU (lab/notebook/validation.md, finding 3): PP2 + MTP2 with `async_scheduling=False`
crashed the last rank within a second. Its cause lies in the engine's batch queue and the scheduler's token
accounting, which run on a CPU. Here the release's `EngineCore.step_with_batch_queue` and `post_step`
(vllm/v1/engine/core.py of the sdist) and the same methods after the series' fixes are executed against a stand-in
scheduler and executor, for v0.26.0 (the series applies 0023 and 0024) and v0.33.0 (0023 only: from v0.28.0 the
release clamps the count):

- the stand-in scheduler follows vllm/v1/core/sched/scheduler.py of 0.26.0: a running request is offered
  `num_tokens + len(spec_token_ids) - num_computed_tokens` tokens (line 503), its drafts are cleared once scheduled
  (line 638), rejected drafts are taken off `num_computed_tokens` when the output arrives (line 1695); whether a
  request is skipped is decided by the release's own test of the running loop (`if num_new_tokens == 0:`, line 543),
  taken from the stock or the 0024-patched file. v0.33.0 computes, clears and takes off the same way (lines 839-843,
  1025, 2362) and, before that test, passes the count through `_reserve_prefill_lookahead` (line 887), which runs
  here from the release's file (with the MTP lookahead of 1);
- the stand-in executor is the last PP rank of the V2 runner: it proposes k placeholder drafts for every request of
  each sampled batch (DraftTokensHandler.get_draft_tokens) and records every batch it is given that the V2 runner
  cannot run: a decode whose scheduled tokens are not one known token plus its drafts.
"""

from __future__ import annotations

import ast
import contextlib
import types
from collections import deque
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import pytest
from release_trees import release_files, release_functions

from vllm_compose.apply import apply_patches
from vllm_compose.patchfile import parse_patch
from vllm_compose.series import load_series

pytestmark = [pytest.mark.sdist, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
SERIES = REPO / "series"
ENGINE_FIX, SCHEDULER_FIX = "fix-engine-drafts-after-batch-output", "fix-scheduler-skip-in-flight-spec-requests"
CORE = "vllm/v1/engine/core.py"
SCHEDULER = "vllm/v1/core/sched/scheduler.py"
ENGINE_METHODS = ("post_step", "step_with_batch_queue", "_take_batch_draft_token_ids")


@dataclass
class DraftTokenIds:
    req_ids: list[str]
    draft_token_ids: list[list[int]]


@dataclass
class Output:
    """ModelRunnerOutput: the sampled tokens of each request of a batch."""

    req_ids: list[str]
    sampled_token_ids: list[list[int]]


@dataclass
class SchedulerOutput:
    num_scheduled_tokens: dict[str, int]
    scheduled_spec_decode_tokens: dict[str, list[int]]
    pending_structured_output_tokens: bool = False

    @property
    def total_num_scheduled_tokens(self) -> int:
        return sum(self.num_scheduled_tokens.values())


@dataclass
class Request:
    prompt_len: int
    max_tokens: int
    num_computed_tokens: int = 0
    output: list[int] = field(default_factory=list)
    spec_token_ids: list[int] = field(default_factory=list)

    @property
    def num_tokens(self) -> int:
        return self.prompt_len + len(self.output)

    @property
    def finished(self) -> bool:
        return len(self.output) >= self.max_tokens


class StandInScheduler:
    """vLLM 0.26.0's token accounting for running requests (module docstring); `skip` is the release's test."""

    def __init__(self, requests: dict[str, Request], skip, reserve=None):
        self.requests = requests
        self.skip = skip
        self.reserve = reserve  # the release's _reserve_prefill_lookahead (v0.28.0+), as (request, computed, new)

    def has_requests(self) -> bool:
        return any(not r.finished for r in self.requests.values())

    def schedule(self, _throttle: bool = False) -> SchedulerOutput:
        scheduled, spec = {}, {}
        for rid, r in self.requests.items():
            if r.finished:
                continue
            num_new_tokens = r.num_tokens + len(r.spec_token_ids) - r.num_computed_tokens
            if self.reserve is not None:
                num_new_tokens = self.reserve(r, r.num_computed_tokens, num_new_tokens)
            if self.skip(num_new_tokens):
                continue
            scheduled[rid] = num_new_tokens
            if r.spec_token_ids:
                n = num_new_tokens + r.num_computed_tokens - r.num_tokens
                if n > 0:
                    spec[rid] = r.spec_token_ids[:n]
                r.spec_token_ids = []
            r.num_computed_tokens += num_new_tokens
        return SchedulerOutput(scheduled, spec)

    def update_from_output(self, out: SchedulerOutput, model_output: Output) -> dict:
        for rid, tokens in zip(model_output.req_ids, model_output.sampled_token_ids, strict=True):
            r = self.requests[rid]
            drafts = out.scheduled_spec_decode_tokens.get(rid)
            if drafts and tokens:
                r.num_computed_tokens -= len(drafts) - (len(tokens) - 1)
            r.output.extend(tokens[: r.max_tokens - len(r.output)])
        return {}

    def update_draft_token_ids(self, drafts: DraftTokenIds) -> None:
        for rid, ids in zip(drafts.req_ids, drafts.draft_token_ids, strict=True):
            if not self.requests[rid].finished:
                self.requests[rid].spec_token_ids = list(ids)

    def get_grammar_bitmask(self, _out):
        return None


class LastRank:
    """The V2 runner's last PP rank: samples each batch, proposes k drafts, records batches it cannot run."""

    def __init__(self, requests: dict[str, Request], k: int, accept: int):
        self.requests, self.k, self.accept = requests, k, accept
        self.known = {rid: r.prompt_len for rid, r in requests.items()}  # tokens the rank has (prompt + sampled)
        self.executed: SchedulerOutput | None = None
        self.drafts: DraftTokenIds | None = None
        self.unrunnable: list[tuple[str, int, int]] = []  # (request, scheduled tokens, scheduled drafts)
        self.steps: dict[str, list[tuple[int, int]]] = {rid: [] for rid in requests}  # (tokens, drafts) per step

    def execute_model(self, out: SchedulerOutput, non_block: bool = True) -> Future:
        self.executed = out
        for rid, n in out.num_scheduled_tokens.items():
            drafts = len(out.scheduled_spec_decode_tokens.get(rid, ()))
            prefill = self.requests[rid].num_computed_tokens - n < self.requests[rid].prompt_len
            self.steps[rid].append((n, drafts))
            if not prefill and n != 1 + drafts:
                self.unrunnable.append((rid, n, drafts))
        if out.num_scheduled_tokens and out.total_num_scheduled_tokens <= 0:
            # the V2 runner's prepare_inputs: `assert num_tokens > 0`
            failed: Future = Future()
            failed.set_exception(AssertionError("num_tokens > 0"))
            return failed
        # an empty batch returns its (empty) output from execute_model; a batch that samples returns None
        return _done(Output([], []) if out.total_num_scheduled_tokens == 0 else None)

    def sample_tokens(self, _grammar, non_block: bool = True) -> Future:
        out, sampled = self.executed, []
        assert out is not None
        for rid in out.num_scheduled_tokens:
            drafts = len(out.scheduled_spec_decode_tokens.get(rid, ()))
            n = 1 + min(self.accept, drafts)
            sampled.append([7] * n)
            self.known[rid] += n
        self.drafts = DraftTokenIds(list(out.num_scheduled_tokens), [[-1] * self.k for _ in out.num_scheduled_tokens])
        return _done(Output(list(out.num_scheduled_tokens), sampled))

    def take_draft_token_ids(self) -> DraftTokenIds | None:
        return self.drafts


def _done(value) -> Future:
    f: Future = Future()
    f.set_result(value)
    return f


class StandInEngine:
    """What the engine methods read from `self`, for a PP2 engine with spec decode and sync scheduling."""

    def __init__(self, scheduler, executor, pp_size: int = 2):
        self.scheduler, self.model_executor = scheduler, executor
        self.batch_queue_size = pp_size
        self.batch_queue: deque = deque(maxlen=pp_size)
        self.batch_draft_token_ids: deque = deque()  # 0023's attribute (the stock methods never read it)
        self.check_for_draft_tokens = True
        self.async_scheduling = False
        self.is_ec_consumer = True
        self.is_mm_encoder_only = False  # v0.33.0
        self.is_pooling_model = False

    def _should_throttle_prefills(self) -> bool:
        return False

    def log_error_detail(self, _out):
        return contextlib.nullcontext()

    def capture_iteration_details(self, _out):
        return contextlib.nullcontext({})

    def _attach_iteration_details(self, _outputs, _details) -> None:
        pass

    def _process_aborts_queue(self) -> None:
        pass

    def _attach_weight_version(self, _outputs) -> None:  # v0.33.0
        pass


def _methods(source: str) -> dict[str, Any]:
    """EngineCore methods from a core.py text, executed alone (the release's own code)."""
    namespace = {
        "deque": deque,
        "cast": cast,
        "Future": Future,
        "Any": Any,
        "ModelRunnerOutput": Output,
        "EngineCoreOutputs": dict,
        "DraftTokenIds": DraftTokenIds,
    }
    return release_functions(source, CORE, ENGINE_METHODS, namespace, in_class="EngineCore")


def _bind(engine: StandInEngine, core: str) -> None:
    for name, fn in _methods(core).items():
        setattr(engine, name, types.MethodType(fn, engine))


def _skip_test(source: str):
    """The running loop's `if num_new_tokens ...:` test of Scheduler.schedule, as a function of num_new_tokens."""
    cls = next(n for n in ast.parse(source).body if isinstance(n, ast.ClassDef) and n.name == "Scheduler")
    schedule = next(n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == "schedule")
    test = next(
        n.test
        for n in ast.walk(schedule)
        if isinstance(n, ast.If)
        and isinstance(n.test, ast.Compare)
        and isinstance(n.test.left, ast.Name)
        and n.test.left.id == "num_new_tokens"
    )
    fn = ast.Expression(ast.Lambda(ast.arguments([], [ast.arg("num_new_tokens")], None, [], [], None, []), test))
    return eval(compile(ast.fix_missing_locations(fn), SCHEDULER, "eval"))  # noqa: S307 - the release's own code


def _reserve(source: str):
    """The release's `Scheduler._reserve_prefill_lookahead` bound to a scheduler with the MTP lookahead of 1, or None
    where the release has none (before v0.28.0)."""
    cls = next(n for n in ast.parse(source).body if isinstance(n, ast.ClassDef) and n.name == "Scheduler")
    if not any(isinstance(n, ast.FunctionDef) and n.name == "_reserve_prefill_lookahead" for n in cls.body):
        return None
    method = release_functions(source, SCHEDULER, ["_reserve_prefill_lookahead"], {"Request": Request}, "Scheduler")
    return types.MethodType(method["_reserve_prefill_lookahead"], types.SimpleNamespace(num_prefill_lookahead=1))


def _scheduler(requests: dict[str, Request], source: str) -> StandInScheduler:
    return StandInScheduler(requests, _skip_test(source), _reserve(source))


@pytest.fixture(scope="module", params=["v0.26.0", "v0.33.0"])
def releases(request, tmp_path_factory):
    """(tag, stock files, files after the fixes the series applies to that tag, ids of those fixes)."""
    tag = request.param
    stock = release_files(tmp_path_factory, tag, [CORE, SCHEDULER])
    target = tmp_path_factory.mktemp("sync")
    for path, text in stock.items():
        (target / Path(path).parent).mkdir(parents=True, exist_ok=True)
        (target / path).write_text(text)
    fixes = [e for e in load_series(SERIES).entries_for(tag) if e.id in (ENGINE_FIX, SCHEDULER_FIX)]
    result = apply_patches(target, [parse_patch(e.file.read_bytes(), name=e.file.name) for e in fixes])
    assert result.ok, [h.to_json() for h in result.hunks]
    patched = {p: (target / p).read_text() for p in (CORE, SCHEDULER)}
    return tag, stock, patched, [e.id for e in fixes]


def _run(
    core: str, scheduler: str, *, k: int = 2, accept: int = 0, max_tokens: int = 6, pp: int = 2, max_steps: int = 400
):
    """Serve 3 requests to the end (or `max_steps` engine steps, or the first error the engine raises); return the
    requests, the last rank and that error."""
    requests = {f"r{i}": Request(prompt_len=10 + i, max_tokens=max_tokens) for i in range(3)}
    executor = LastRank(requests, k, accept)
    engine = StandInEngine(_scheduler(requests, scheduler), executor, pp_size=pp)
    _bind(engine, core)
    for _ in range(max_steps):
        if not (engine.scheduler.has_requests() or engine.batch_queue):
            break
        try:
            _outputs, model_executed = engine.step_with_batch_queue()  # as EngineCore._process_engine_step does
        except AssertionError as exc:
            return requests, executor, exc
        engine.post_step(model_executed)
    return requests, executor, None


def test_stock_engine_schedules_drafts_without_the_token_they_follow(releases):
    _tag, stock, _patched, _fixes = releases
    _requests, rank, _error = _run(stock[CORE], stock[SCHEDULER])
    # the batch after the prefill: each request's 2 drafts alone (the GPU run's illegal memory access)
    assert rank.unrunnable[:3] == [("r0", 2, 2), ("r1", 2, 2), ("r2", 2, 2)]


def test_engine_fix_alone_meets_the_schedulers_negative_counts_until_the_release_clamps_them(releases):
    tag, stock, patched, fixes = releases
    _requests, rank, error = _run(patched[CORE], stock[SCHEDULER])
    if tag == "v0.26.0":
        # in-flight requests scheduled with -2 tokens (the GPU run's "assert num_tokens > 0" on both ranks)
        assert rank.unrunnable == [("r0", -2, 0), ("r1", -2, 0), ("r2", -2, 0)]
        assert str(error) == "num_tokens > 0"
        assert SCHEDULER_FIX in fixes
    else:
        # the release's _reserve_prefill_lookahead returns max(num_new_tokens, 0): the engine fix is enough, and
        # the series does not carry the scheduler fix here
        assert error is None and rank.unrunnable == []
        assert fixes == [ENGINE_FIX]


@pytest.mark.parametrize("accept", [0, 1, 2], ids=["all-rejected", "one-accepted", "all-accepted"])
@pytest.mark.parametrize("pp", [2, 4])
def test_the_series_fixes_run_every_decode_as_one_token_and_its_drafts(releases, accept, pp):
    _tag, _stock, patched, _fixes = releases
    requests, rank, error = _run(patched[CORE], patched[SCHEDULER], accept=accept, max_tokens=12, pp=pp)
    assert error is None and rank.unrunnable == []
    assert all(len(r.output) == 12 and r.finished for r in requests.values())
    # speculation is kept: after the prefill every step is the known token and both drafts; each step yields
    # 1 + accept tokens, so the 11 tokens after the prefill's take ceil(11 / (1 + accept)) steps
    decodes = -(-11 // (1 + accept))
    for rid, r in requests.items():
        assert rank.steps[rid] == [(r.prompt_len, 0)] + [(3, 2)] * decodes


def test_without_a_batch_queue_post_step_still_hands_over_the_drafts(releases):
    _tag, _stock, patched, _fixes = releases
    requests = {"r0": Request(prompt_len=10, max_tokens=4, num_computed_tokens=10, output=[5])}
    rank = LastRank(requests, k=2, accept=0)
    rank.drafts = DraftTokenIds(["r0"], [[-1, -1]])
    engine = StandInEngine(_scheduler(requests, patched[SCHEDULER]), rank)
    engine.batch_queue = None  # pipeline parallelism off: EngineCore.step, then post_step
    _bind(engine, patched[CORE])
    engine.post_step(True)
    assert requests["r0"].spec_token_ids == [-1, -1]
