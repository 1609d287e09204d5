"""lab/device/validate.py's late-arrival generation (`--late`), driven through a stand-in engine.

The stand-in follows the part of vLLM's `LLMEngine` contract that `generate_late` relies on: `add_request` queues a
request, `step` returns one engine output (the requests finished in that step, only final outputs), and
`has_unfinished_requests` says whether anything is queued or running. Each request emits one token per step,
`prompt_id * 100 + position`, so which step a request joined is visible in its tokens' timing.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import SimpleNamespace

import pytest

VALIDATE = Path(__file__).resolve().parents[2] / "lab" / "device" / "validate.py"


def _load_validate():
    spec = importlib.util.spec_from_file_location("device_validate", VALIDATE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


validate = _load_validate()


class StandInEngine:
    def __init__(self, finish_unknown: bool = False):
        self.running: dict[str, list[int]] = {}
        self.max_tokens: dict[str, int] = {}
        self.joined_at: dict[str, int] = {}
        self.steps = 0
        self.finish_unknown = finish_unknown

    def add_request(self, request_id, prompt, params):
        self.running[request_id] = []
        self.max_tokens[request_id] = params.max_tokens
        self.joined_at[request_id] = self.steps

    def has_unfinished_requests(self):
        return bool(self.running)

    def step(self):
        self.steps += 1
        finished = []
        for rid, tokens in list(self.running.items()):
            tokens.append(int(rid) * 100 + len(tokens))
            if len(tokens) == self.max_tokens[rid]:
                del self.running[rid]
                out_id = "99" if self.finish_unknown else rid
                finished.append(
                    SimpleNamespace(request_id=out_id, finished=True, outputs=[SimpleNamespace(token_ids=tokens)])
                )
            else:
                finished.append(SimpleNamespace(request_id=rid, finished=False, outputs=[]))
        return finished


def _params(*max_tokens):
    return [SimpleNamespace(max_tokens=n) for n in max_tokens]


def test_last_prompt_joins_after_the_given_number_of_outputs_and_results_keep_prompt_order():
    engine = StandInEngine()
    tokens = validate.generate_late(engine, ["p0", "p1", "p2", "p3"], _params(6, 6, 6, 4), late=3)
    assert engine.joined_at == {"0": 0, "1": 0, "2": 0, "3": 3}
    assert tokens == [
        [0, 1, 2, 3, 4, 5],
        [100, 101, 102, 103, 104, 105],
        [200, 201, 202, 203, 204, 205],
        [300, 301, 302, 303],
    ]
    # the late prompt ran alongside the others' decodes (steps 4-6) and then alone (step 7)
    assert engine.steps == 7


def test_early_prompts_finishing_before_the_late_one_is_added_is_an_error():
    with pytest.raises(RuntimeError, match=r"before the late prompt was added \(late=5\)"):
        validate.generate_late(StandInEngine(), ["p0", "p1"], _params(2, 2), late=5)


def test_a_finished_request_the_engine_was_never_given_is_an_error():
    with pytest.raises(RuntimeError, match="'99', which was never added"):
        validate.generate_late(StandInEngine(finish_unknown=True), ["p0", "p1"], _params(1, 1), late=1)


def test_late_must_be_positive():
    with pytest.raises(ValueError, match="at least 1"):
        validate.generate_late(StandInEngine(), ["p0", "p1"], _params(1, 1), late=0)
