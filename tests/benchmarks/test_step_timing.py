"""benchmarks/step_timing.py without a GPU or vLLM: `summarize` on hand-made step records (every figure computed by
hand below), and the hooks on a stand-in engine (tests/benchmarks/fake_engine.py: the objects and call order of an
in-process vLLM V2 engine with async scheduling, its drafts right where the recall model's design says)."""

from __future__ import annotations

import sys
import types
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import fake_engine as fe  # noqa: E402
import step_timing as st  # noqa: E402

from vllm_compose.proof.recall_model import make_prompts, predict_drafts, tiny_spec, with_draft_acceptance  # noqa: E402


def _req(scheduled, generated, drafts=0, prefill=False):
    return {"scheduled": scheduled, "drafts": drafts, "prefill": prefill, "generated": generated}


def _step(t_done, reqs, gpu=None, graph="FULL"):
    """A step record; its host time in each runner call is a tenth of the GPU span."""
    s = {"t_scheduled": t_done - 0.001, "t_done": t_done, "tokens": sum(r["scheduled"] for r in reqs.values()),
         "reqs": reqs, "graph": graph}  # fmt: skip
    if gpu:
        s["gpu_ms"] = gpu
        s["cpu_ms"] = {part: ms / 10 for part, ms in gpu.items()}
    return s


#: a batch of 2 with one draft a step: request a's prompt takes one step, b's two (b decodes once less after them)
RECORDS = [
    _step(0.100, {"a": _req(100, 1, prefill=True), "b": _req(60, 0, prefill=True)}, graph="NONE"),
    # a decodes beside b's last chunk: a's draft accepted (2 tokens); b's first token
    _step(0.150, {"a": _req(2, 2, drafts=1), "b": _req(40, 1, prefill=True)}, graph="NONE"),
    # full-batch decode steps, 20 ms, 18 ms and 22 ms apart
    _step(0.170, {"a": _req(2, 1, drafts=1), "b": _req(2, 2, drafts=1)}, {"target": 12.0, "sample": 1.0, "draft": 3.0}),
    _step(0.188, {"a": _req(2, 2, drafts=1), "b": _req(2, 1, drafts=1)}, {"target": 11.0, "sample": 2.0, "draft": 3.0}),
    _step(0.210, {"a": _req(2, 2, drafts=1), "b": _req(2, 2, drafts=1)}, {"target": 13.0, "sample": 1.0, "draft": 4.0}),
    # a is done; b alone
    _step(0.225, {"b": _req(2, 1, drafts=1)}, {"target": 10.0, "sample": 1.0, "draft": 3.0}),
]


def test_summary_of_hand_made_records():
    s = st.summarize(RECORDS, batch=2)
    assert s["steps"] == 6
    # the last step with a prefill chunk is the second: the decode window is the four after it
    assert (s["prefill_steps"], s["prefill_s"]) == (2, 0.15)
    assert (s["window_steps"], s["window_s"]) == (4, 0.075)
    # full-batch decode steps: 3rd to 5th; periods 20, 18, 22 ms -> median 20
    assert s["full_steps"] == 3
    assert s["period_ms"] == 20.0
    assert s["gpu_ms"] == {"target": 12.0, "sample": 1.0, "draft": 3.0}
    # idle: 20 - 16, 18 - 16, 22 - 18 -> 4, 2, 4 -> median 4
    assert s["gpu_idle_ms"] == 4.0
    assert s["cpu_ms"] == {"target": 1.2, "sample": 0.1, "draft": 0.3}
    # decode request-steps: a 4 (2+1+2+2 = 7 tokens), b 4 (2+1+2+1 = 6 tokens) -> 13 / 8
    assert s["tokens_per_step"] == round(13 / 8, 4)
    assert (s["drafts"], s["draft_tokens"], s["accepted"]) == (8, 8, 5)
    assert s["acceptance"] == round(5 / 8, 4)
    # a: the prefill's token + 7; b: its first token + 6
    assert s["per_request"] == [
        {"decode_steps": 4, "tokens": 8, "acceptance": 0.75},
        {"decode_steps": 4, "tokens": 7, "acceptance": 0.5},
    ]
    assert s["straggler"] == 1.0
    # graph modes of the pure decode steps (the mixed second step is a prefill step)
    assert s["graphs"] == {"FULL": 4}


def test_a_generation_that_only_prefilled_has_no_decode_figures():
    s = st.summarize([RECORDS[0], {**RECORDS[1], "reqs": {"b": _req(40, 1, prefill=True)}}], batch=2)
    assert (s["window_steps"], s["window_s"], s["full_steps"]) == (0, 0.0, 0)
    assert s["period_ms"] is None and s["tokens_per_step"] is None and s["acceptance"] is None


@pytest.mark.parametrize(
    "steps, batch, message",
    [
        ([], 2, "no step records"),
        ([{"reqs": {}}], 2, "lacks t_done"),
        (RECORDS, 0, "batch must be >= 1"),
        (RECORDS, 1, "2 requests in the records of a batch of 1"),
    ],
)
def test_records_that_cannot_be_summarized_are_refused(steps, batch, message):
    with pytest.raises(st.StepTimingError, match=message):
        st.summarize(steps, batch)


@pytest.fixture
def fake_triton(monkeypatch):
    """A `triton` module with Triton's knobs, so that the real one (when installed) is never hooked by a test."""
    runtime = types.SimpleNamespace(jit_cache_hook=None)
    module = types.ModuleType("triton")
    module.knobs = types.SimpleNamespace(runtime=runtime)
    monkeypatch.setitem(sys.modules, "triton", module)
    return runtime


@pytest.fixture
def fake_run(monkeypatch, fake_triton):
    """An installed fake engine (MTP 1, three prompts, 0.75 designed acceptance) with the modules' clock on its GPU."""
    spec = with_draft_acceptance(tiny_spec(), 0.75)
    prompts = make_prompts(spec, [256, 320, 384])
    llm = fe.FakeLLM(spec, k=1, budget=512, batch=3)
    monkeypatch.setattr(st, "time", fe.FakeTime(llm.gpu))
    hooked = st.install(llm, spans=fe.FakeSpans(llm.gpu))
    return types.SimpleNamespace(spec=spec, prompts=prompts, llm=llm, hooked=hooked, triton=fake_triton)


def test_install_hooks_every_part_of_a_v2_engine(fake_run):
    assert fake_run.hooked["missing"] == []
    assert set(fake_run.hooked["hooked"]) == {
        "scheduler.schedule", "scheduler.update_from_output", "model_runner.execute_model",
        "model_runner.sample_tokens", "cudagraph_manager.dispatch", "speculator.propose",
        "speculator.prefill_cudagraph_manager.dispatch", "triton.knobs.runtime.jit_cache_hook",
    }  # fmt: skip


def test_records_of_an_async_engine_agree_with_the_design(fake_run):
    """Step n's output reaches the scheduler after step n + 1 ran: the records still pair each step's schedule, spans
    and output, and the tokens per step and acceptance they give are the design's (`predict_drafts`)."""
    st.arm("gen")
    fake_run.llm.fake_generate(fake_run.prompts, 40)
    out = st.collect()
    assert out["spans"] == "fake" and [g["label"] for g in out["generations"]] == ["gen"]
    s = st.summarize_generation(out["generations"][0], batch=3)
    designed = [predict_drafts(fake_run.spec, p, 40, 1) for p in fake_run.prompts]
    drafts = sum(c.num_drafts for c in designed)
    accepted = sum(c.num_accepted_tokens for c in designed)
    assert (s["drafts"], s["accepted"]) == (drafts, accepted)
    assert s["tokens_per_step"] == round(1 + accepted / drafts, 4)
    assert [r["decode_steps"] for r in s["per_request"]] == [c.num_drafts for c in designed]
    # every step's spans: the fake GPU's 10 + 1 + 2 ms, nothing idle
    assert s["gpu_ms"] == {"target": 10.0, "sample": 1.0, "draft": 2.0}
    assert s["period_ms"] == 13.0 and s["gpu_idle_ms"] == 0.0
    assert s["graphs"] == {"FULL": s["window_steps"]} and s["draft_graphs"] == {"FULL": s["window_steps"]}
    assert st._STATE.pending == {}


def test_only_armed_generations_are_recorded_and_jit_compiles_are_counted(fake_run):
    fake_run.llm.fake_generate(fake_run.prompts, 8)  # not armed
    st.arm("first")
    fake_run.llm.fake_generate(fake_run.prompts, 8)
    fake_run.triton.jit_cache_hook(key=1, fn=types.SimpleNamespace(name="_kernel"), compile={})
    st.arm("second")
    fake_run.llm.fake_generate(fake_run.prompts, 8)
    gens = st.collect()["generations"]
    assert [g["label"] for g in gens] == ["first", "second"]
    assert gens[0]["jit"] == ["_kernel"] and gens[1]["jit"] == []
    assert len(gens[0]["steps"]) == len(gens[1]["steps"]) > 0


def test_the_triton_hook_keeps_the_one_it_found(monkeypatch, fake_triton):
    seen = []
    fake_triton.jit_cache_hook = lambda **kw: seen.append(kw["key"]) or False
    spec = tiny_spec()
    llm = fe.FakeLLM(spec, k=0, batch=1)
    st.install(llm, spans=fe.FakeSpans(llm.gpu))
    assert fake_triton.jit_cache_hook(key=7, fn=None, compile={}) is False
    assert seen == [7]


def test_an_engine_in_another_process_is_refused_with_the_fix():
    llm = types.SimpleNamespace(llm_engine=types.SimpleNamespace(engine_core=types.SimpleNamespace()))
    with pytest.raises(st.StepTimingError, match="in-process engine") as err:
        st.install(llm, spans=object())
    assert "VLLM_ENABLE_V1_MULTIPROCESSING=0" in err.value.hint


def test_engine_facts_read_the_config_or_say_why_not(fake_run):
    facts = st.engine_facts(fake_run.llm)
    assert facts["async_scheduling"] is True and facts["speculative"] == {"method": "mtp", "k": 1}
    assert "error" in st.engine_facts(types.SimpleNamespace())


def test_a_worker_that_cannot_be_hooked_leaves_the_scheduler_records(fake_triton):
    llm = fe.FakeLLM(tiny_spec(), k=0, batch=1)

    def broken(fn):
        raise RuntimeError("no workers here")

    llm.collective_rpc = broken
    hooked = st.install(llm, spans=fe.FakeSpans(llm.gpu))
    assert "scheduler.schedule" in hooked["hooked"]
    assert hooked["missing"] == ["worker hooks (RuntimeError: no workers here)"]
