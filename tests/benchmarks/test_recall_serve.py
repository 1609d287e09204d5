"""benchmarks/recall_serve.py without a GPU or vLLM: the server's command line against the user guide, the requests,
the timing arithmetic, the rows, and the server's lifecycle against a stub HTTP server (tests/benchmarks/serve_stub.py)
with known tokens and delays."""

from __future__ import annotations

import json
import os
import re
import shlex
import socket
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import recall_serve as rs  # noqa: E402
import serve_stub  # noqa: E402
from recall_e2e import main, table  # noqa: E402

from vllm_compose.proof.recall_model import make_prompts, predict, spec_to_json, tiny_spec  # noqa: E402
from vllm_compose.proof.suites import GRAPHS  # noqa: E402

STUB = str(Path(serve_stub.__file__))

#: taken before the suite's network guard (tests/conftest.py) replaces them: the stub listens on loopback only
_CONNECT, _GETADDRINFO = socket.socket.connect, socket.getaddrinfo


@pytest.fixture(autouse=True)
def _loopback_allowed(monkeypatch):
    """The stub server on 127.0.0.1 is reachable; everything else stays blocked."""
    guarded_connect, guarded_getaddrinfo = socket.socket.connect, socket.getaddrinfo

    def connect(self, address):
        is_loopback = isinstance(address, tuple) and address[0] == "127.0.0.1"
        return (_CONNECT if is_loopback else guarded_connect)(self, address)

    def getaddrinfo(host, *args, **kwargs):
        return (_GETADDRINFO if host == "127.0.0.1" else guarded_getaddrinfo)(host, *args, **kwargs)

    monkeypatch.setattr(socket.socket, "connect", connect)
    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)


def _user_guide_serving() -> tuple[dict[str, str], list[str]]:
    """The environment and the `vllm serve` arguments of the user guide's "Serve on Ampere" section."""
    text = (ROOT / "docs" / "user-guide.md").read_text()
    section = text[text.index("## 3. Serve on Ampere") :]
    section = section[: section.index("\n## ", 5)]
    env_block = section[section.index("Environment") : section.index("vllm-compose pp-plan")]
    env = dict(re.findall(r"^\s+export (VLLM_\w+)=(\S+)", env_block, re.M))
    block = re.search(r"^\s+vllm serve (.*?)\n\n", section, re.M | re.S)[1]
    return env, shlex.split(block.replace("\\\n", " "))[1:]  # less the model


def test_the_server_gets_the_user_guides_environment():
    env, _ = _user_guide_serving()
    assert env == rs.USER_ENV
    assert set(env) == {"VLLM_USE_V2_MODEL_RUNNER", "VLLM_WORKER_MULTIPROC_METHOD", "VLLM_USE_FLASHINFER_SAMPLER"}


def test_the_server_gets_the_user_guides_flags():
    _, guide = _user_guide_serving()
    cmd = rs.serve_command(rs.ServeConfig("/m", max_model_len=9000, max_num_seqs=32, mtp=1), port=8123, python="py")
    assert cmd[:5] == ["py", "-m", "vllm.entrypoints.cli.main", "serve", "/m"]
    flags = {}
    for i, a in enumerate(guide):
        if a.startswith("--"):
            flags[a] = guide[i + 1] if i + 1 < len(guide) and not guide[i + 1].startswith("--") else None
    flags.pop("--pipeline-parallel-size")  # one GPU
    assert flags  # the parse found the guide's flags
    for flag, value in flags.items():
        assert flag in cmd, flag
        if value is not None:
            got = cmd[cmd.index(flag) + 1]
            assert (json.loads(got) == json.loads(value)) if value.startswith("{") else got == value, flag


def test_the_server_command_for_graphs_without_mtp():
    cmd = rs.serve_command(rs.ServeConfig("/m", max_model_len=9000, max_num_seqs=8, graphs=True), port=1)
    assert "--enforce-eager" not in cmd and "--speculative-config" not in cmd
    assert json.loads(cmd[cmd.index("--compilation-config") + 1]) == GRAPHS
    for flag, value in [
        ("--attention-backend", "TRITON_MLA_SPARSE"),
        ("--max-model-len", "9000"),
        ("--max-num-seqs", "8"),
        ("--port", "1"),
        ("--host", "127.0.0.1"),
    ]:
        assert cmd[cmd.index(flag) + 1] == value
    assert "--skip-tokenizer-init" in cmd and "--no-enable-prefix-caching" in cmd
    cmd = rs.serve_command(rs.ServeConfig("/m", 9000, 8, prefix_caching=True), port=1)
    assert "--no-enable-prefix-caching" not in cmd


def test_the_server_admits_the_longest_prompt_and_the_largest_batch():
    cfg = rs.server_config(rs.Plan("/m", [1, 8, 32], contexts=[8192, 2048], tokens=64, mtp=2))
    assert cfg.max_model_len == 8192 + 64 * 31 + 64 + 8  # the longest context at the largest batch
    assert cfg.max_num_seqs == 32 and cfg.mtp == 2


def test_a_request_is_a_greedy_token_id_completion():
    body = rs.completion_body("/m", [5, 6, 7], 16, stream=True)
    assert body["prompt"] == [5, 6, 7] and body["max_tokens"] == 16
    assert body["temperature"] == 0.0 and body["ignore_eos"] and body["return_token_ids"]
    assert body["stream_options"] == {"include_usage": True}
    assert "stream_options" not in rs.completion_body("/m", [5], 1, stream=False)


def test_stream_arithmetic():
    # two requests sent at 0.0; first tokens at 0.5 and 0.7, then chunks of 2 tokens every 0.1 s
    a = rs.Completion(sent=0.0, done=1.0, token_ids=[0] * 7, chunks=[(0.5, 1), (0.6, 2), (0.7, 2), (0.8, 2)])
    b = rs.Completion(sent=0.0, done=1.0, token_ids=[0] * 5, chunks=[(0.7, 1), (0.8, 2), (0.9, 2)])
    s = rs.stream_stats(0.0, [a, b], prompt_tokens=14000)
    assert s["per_request_tok_s"] == 20.0 and s["aggregate_tok_s"] == 40.0  # 6 tokens / 0.3 s, 4 / 0.2 s
    assert s["ttft_ms"] == {"mean": 600.0, "p50": 600.0, "max": 700.0}
    assert s["itl_ms"]["mean"] == pytest.approx(100.0) and s["itl_ms"]["p99"] == pytest.approx(100.0)
    assert s["tokens_per_chunk"] == 2.0
    assert s["prefill_tok_s"] == 20000.0  # 14,000 prompt tokens, the last first token at 0.7 s
    assert s["first_gap_ms"] == {"mean": pytest.approx(100.0), "max": pytest.approx(100.0)}
    # both decode in (0.7, 0.8]: 2 tokens each in 0.1 s
    assert s["all_decoding_tok_s"] == pytest.approx(20.0) and s["all_decoding_window_ms"] == pytest.approx(100.0)
    # a long wait after the first token is the first gap's, apart from the steady gaps after it
    c = rs.Completion(sent=0.0, done=1.0, token_ids=[0] * 7, chunks=[(0.5, 1), (0.56, 2), (0.57, 2), (0.58, 2)])
    s = rs.stream_stats(0.0, [c], prompt_tokens=100)
    assert s["first_gap_ms"]["max"] == pytest.approx(60.0) and s["itl_ms"]["p50"] == pytest.approx(10.0)


def test_the_all_decoding_rate_is_the_batchs_speed_where_the_other_two_are_not():
    # request a starts 0.3 s early and decodes alone at 1 token / 10 ms, then beside b at 1 token / 20 ms; the server
    # sends two 20 ms steps in one chunk now and then. While both decode the batch makes 50 tok/s a request
    alone = [(0.2 + 0.01 * i, 1) for i in range(31)]  # 0.20 .. 0.50
    together = [0.52, 0.54, 0.58, 0.60, 0.62, 0.66, 0.68, 0.70, 0.74, 0.76, 0.78]
    steps = lambda times, first: [(first, 1)] + [(t, 2 if round((t - first) * 100) % 4 == 2 and t > 0.56 else 1)  # noqa: E731
                                               for t in times]  # fmt: skip
    a = rs.Completion(sent=0.0, done=1.0, token_ids=[], chunks=alone[:-1] + steps(together, 0.50)[1:])
    b = rs.Completion(sent=0.0, done=1.0, token_ids=[], chunks=steps(together, 0.50))
    s = rs.stream_stats(0.0, [a, b], prompt_tokens=100)
    window = 0.78 - 0.50
    tokens = sum(n for t, n in b.chunks if t > 0.50)
    assert s["all_decoding_tok_s"] == pytest.approx(tokens / window, rel=1e-6)
    assert 45 < s["all_decoding_tok_s"] < 55
    # a's early start lifts the first-to-last rate, and the chunks of two steps lift the median-gap rate
    assert s["per_request_tok_s"] > 60
    gap_rate = s["tokens_per_chunk"] / (s["itl_ms"]["p50"] / 1000.0)
    assert gap_rate > 1.1 * s["all_decoding_tok_s"]


def test_a_batch_that_never_decodes_together_has_no_all_decoding_rate():
    a = rs.Completion(sent=0.0, done=1.0, token_ids=[], chunks=[(0.1, 1), (0.2, 1)])
    b = rs.Completion(sent=0.0, done=1.0, token_ids=[], chunks=[(0.3, 1), (0.4, 1)])
    s = rs.stream_stats(0.0, [a, b], prompt_tokens=100)
    assert s["all_decoding_tok_s"] is None and s["all_decoding_window_ms"] == 0.0


def test_a_stream_without_decode_is_refused():
    one = rs.Completion(sent=0.0, done=1.0, token_ids=[3], chunks=[(0.5, 1)])
    with pytest.raises(ValueError, match="no decode rate"):
        rs.stream_stats(0.0, [one], 100)


def test_percentile_interpolates_between_ranks():
    assert rs.percentile([4.0, 1.0, 3.0, 2.0], 50) == 2.5
    assert rs.percentile([1.0, 2.0, 3.0, 4.0, 5.0], 99) == pytest.approx(4.96)


def test_mtp_counters_from_prometheus_text():
    text = (
        '# HELP x\nvllm:spec_decode_num_drafts_total{engine="0",model_name="m"} 40.0\n'
        'vllm:spec_decode_num_drafts_created{engine="0"} 1.7e9\n'
        'vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="1"} 5.0\n'
        'vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="0"} 30.0\n'
        'vllm:spec_decode_num_drafts_total{engine="1",model_name="m"} 10.0\n'
    )
    got = rs.spec_counters(text)
    assert got == {"drafts": 50.0, "accepted_per_pos": [30.0, 5.0]}
    assert rs.first_draft_rate({"drafts": 10.0, "accepted_per_pos": [2.0, 0.0]}, got) == 0.7
    assert rs.first_draft_rate(got, got) is None


def test_kv_bytes_per_token_from_the_log():
    assert rs.kv_bytes_per_token(serve_stub.KV_LOG) == round(12.5 * 2**30 / 1e6, 1)
    assert rs.kv_bytes_per_token("INFO GPU KV cache size: 1,000 tokens\n") is None


@pytest.fixture
def model_dir(tmp_path):
    """A recall model's spec (no weights: the stub reads only the spec)."""
    d = tmp_path / "recall"
    d.mkdir()
    (d / "recall_spec.json").write_text(json.dumps(spec_to_json(tiny_spec())))
    return d


def test_the_stub_walks_the_prompt_as_predicted(model_dir):
    spec = tiny_spec()
    p = make_prompts(spec, [128])[0]
    assert serve_stub.walk(json.loads((model_dir / "recall_spec.json").read_text()), list(p.tokens), 30) == predict(
        spec, p, 30
    )


def test_measure_against_the_stub(model_dir):
    stub = serve_stub.Stub(ttft=0.08, itl=0.03, chunk=2)
    server = serve_stub.start(stub)
    try:
        plan = rs.Plan(str(model_dir), [1, 3], contexts=[128], tokens=9, mtp=1)
        rows = rs.measure(plan, server.server_address[1])
    finally:
        server.shutdown()
    assert [(r["path"], r["batch"]) for r in rows] == [
        ("serve-stream", 1),
        ("serve", 1),
        ("serve-stream", 3),
        ("serve", 3),
    ]
    assert all(r["as_predicted"] and r["first_draft_accepted"] == 0.75 for r in rows)
    assert all(r["mode"] == "eager" and r["mtp"] == 1 and r["acceptance"] == 1.0 for r in rows)
    stream = rows[2]
    assert stream["tokens_per_chunk"] == 2.0
    assert stream["prompt_tokens"] == 128 * 3 + 64 * 3
    # known delays, measured on a shared 2-core machine: never faster than the stub, within a loose bound above
    assert 80.0 <= stream["ttft_ms"]["p50"] < 1000.0
    assert 30.0 <= stream["itl_ms"]["p50"] < 300.0
    assert 2 / 0.3 < stream["per_request_tok_s"] <= 2 / 0.03 + 1
    plain = rows[3]
    # t(1) = ttft, t(9) = ttft + 4 chunks x itl: 8 tokens in 0.12 s
    # t(1) and t(9) come from two generations, so their difference carries both one's noise: no upper bound, the
    # rate checked against its definition instead
    assert plain["t_all_s"] > plain["t_one_s"] and 8 / 1.5 < plain["per_request_tok_s"]
    assert plain["per_request_tok_s"] == pytest.approx(8 / (plain["t_all_s"] - plain["t_one_s"]), rel=0.02)
    assert plain["aggregate_tok_s"] == pytest.approx(3 * plain["per_request_tok_s"], abs=0.02)
    # every pass sent prompts of its own (no prefill reused), of the offline path's lengths
    prompts = [tuple(b["prompt"]) for b in stub.bodies]
    assert len(prompts) == 1 + 3 * (1 + 3) and len(set(prompts)) == len(prompts)
    assert sorted({len(p) for p in prompts}) == [128, 192, 256]


def test_a_one_token_pass_slower_than_the_full_one_is_timed_again(model_dir):
    # the first plain 1-token request is the warm-up's (4 tokens: not counted); the batch-1 t(1) pass stalls 0.5 s,
    # longer than the 4-token pass takes: timed once more, both kept, the rate from the second
    stub = serve_stub.Stub(ttft=0.02, itl=0.02, one_token_stalls=[0.5])
    server = serve_stub.start(stub)
    try:
        rows = rs.measure(rs.Plan(str(model_dir), [1], contexts=[128], tokens=4), server.server_address[1])
    finally:
        server.shutdown()
    plain = rows[1]
    assert plain["path"] == "serve" and plain["t_one_first_s"] >= 0.5 > plain["t_all_s"] > plain["t_one_s"]
    assert plain["per_request_tok_s"] == pytest.approx(3 / (plain["t_all_s"] - plain["t_one_s"]), rel=0.05)
    assert plain["as_predicted"] and stub.one_token_requests == 2
    # a second stall too: no rate, said in the row, and the run goes on to the next batch
    stub = serve_stub.Stub(ttft=0.02, itl=0.02, one_token_stalls=[0.5, 0.5])
    server = serve_stub.start(stub)
    try:
        rows = rs.measure(rs.Plan(str(model_dir), [1, 2], contexts=[128], tokens=4), server.server_address[1])
    finally:
        server.shutdown()
    assert [(r["path"], r["batch"]) for r in rows] == [("serve-stream", 1), ("serve", 1), ("serve-stream", 2),
                                                        ("serve", 2)]  # fmt: skip
    assert rows[1]["per_request_tok_s"] is None and "cannot derive a decode rate" in rows[1]["no_rate"]
    assert rows[3]["per_request_tok_s"] > 0 and "t_one_first_s" not in rows[3]
    assert "| serve | eager | 0 | 1.00 | - | 1 | 128 | - | - |" in table(rows)


def test_every_context_is_measured_at_every_batch_in_one_server(model_dir):
    stub = serve_stub.Stub(ttft=0.01, itl=0.01)
    server = serve_stub.start(stub)
    try:
        rows = rs.measure(rs.Plan(str(model_dir), [1, 2], contexts=[192, 128], tokens=4), server.server_address[1])
    finally:
        server.shutdown()
    # shortest context first, each at every batch size, two rows each, every pass's tokens judged
    assert [(r["context"], r["batch"], r["path"]) for r in rows] == [
        (c, b, p) for c in (128, 192) for b in (1, 2) for p in ("serve-stream", "serve")
    ]
    assert all(r["as_predicted"] for r in rows)
    # a warm-up per context, then three passes per (context, batch), each with prompts of its own
    prompts = [tuple(b["prompt"]) for b in stub.bodies]
    assert len(prompts) == 2 * (1 + 3 * (1 + 2)) and len(set(prompts)) == len(prompts)
    assert sorted({len(p) for p in prompts}) == [128, 192, 256]


def _measured_by_stub(plan, stub=None):
    """(the stub that served it, the rows) of `plan` measured against a fresh stub server (`stub`'s settings, by
    default 10 ms to the first token and between tokens)."""
    stub = stub or serve_stub.Stub(ttft=0.01, itl=0.01)
    server = serve_stub.start(stub)
    try:
        return stub, rs.measure(plan, server.server_address[1])
    finally:
        server.shutdown()


def test_skipped_pairs_are_not_measured_and_do_not_size_the_server(model_dir):
    plan = rs.Plan(str(model_dir), [1, 2], contexts=[192, 128], tokens=4, skip=frozenset({(192, 2)}))
    assert rs.measured_pairs(plan) == [(128, 1), (128, 2), (192, 1)]
    # the longest prompt is now the 192 context at batch 1, the largest batch still 2 (max_num_seqs floor 8)
    assert rs.server_config(plan).max_model_len == 192 + 4 + 8
    stub, rows = _measured_by_stub(plan)
    assert [(r["context"], r["batch"], r["path"]) for r in rows] == [
        (128, 1, "serve-stream"), (128, 1, "serve"), (128, 2, "serve-stream"), (128, 2, "serve"),
        (192, 1, "serve-stream"), (192, 1, "serve"),
    ]  # fmt: skip
    # no 192-token prompt at batch 2 was sent: warm-ups 2, then 3 passes of 1, 2 and 1 requests
    assert len(stub.bodies) == 2 + 3 * (1 + 2 + 1)
    # a context whose every batch is skipped gets no warm-up either
    only = rs.Plan(str(model_dir), [1], contexts=[192, 128], tokens=4, skip=frozenset({(192, 1)}))
    assert rs.measured_pairs(only) == [(128, 1)]


def test_reused_prompts_are_the_streamed_passs_with_the_prefix_cache_on(model_dir):
    plan = rs.Plan(str(model_dir), [1, 2], contexts=[128], tokens=4, reuse_prompts=True)
    assert rs.server_config(plan).prefix_caching
    assert "--no-enable-prefix-caching" not in rs.serve_command(rs.server_config(plan), port=1)
    stub, rows = _measured_by_stub(plan)
    assert [(r["batch"], r["path"]) for r in rows] == [
        (1, "serve-stream"), (1, "serve-cached"), (2, "serve-stream"), (2, "serve-cached"),
    ]  # fmt: skip
    assert all(r["as_predicted"] and r["per_request_tok_s"] > 0 for r in rows)
    # the warm-up, then per batch size the streamed pass, an untimed cached pair, five timed ones and five streamed
    # passes from the cache, all of the same prompts; the batch sizes' prompts differ
    prompts = [tuple(b["prompt"]) for b in stub.bodies]
    per = 1 + 2 * (1 + 5) + 5
    assert len(prompts) == 1 + per * (1 + 2)
    first, second = prompts[1 : 1 + per], prompts[1 + per :]
    # (a pass's requests arrive in any order)
    assert first == [first[0]] * per and len(set(second)) == 2
    assert all(set(second[i : i + 2]) == set(second[:2]) for i in range(0, 2 * per, 2))
    assert first[0] not in second and prompts[0] not in prompts[1:]
    # the rate is the fastest samples': every sample kept, the minima among them, the share of t(N) the rate rests on
    for r in rows[1::2]:
        assert len(r["t_one_samples_s"]) == len(r["t_all_samples_s"]) == 5
        assert r["t_one_s"] == min(r["t_one_samples_s"]) and r["t_all_s"] == min(r["t_all_samples_s"])
        assert r["per_request_tok_s"] == pytest.approx(3 / (r["t_all_s"] - r["t_one_s"]), rel=0.01)
        assert r["decode_share"] == pytest.approx((r["t_all_s"] - r["t_one_s"]) / r["t_all_s"], abs=1e-3)


def test_a_stalled_cached_pass_does_not_set_the_rate(model_dir):
    # the stub counts plain 1-token requests only: the untimed pair's is the first (no stall), the first two timed
    # ones stall 0.5 s, and the third too (a median of the five would be a stalled one); the fastest sets t(1)
    stub = serve_stub.Stub(ttft=0.02, itl=0.02, one_token_stalls=[0.0, 0.5, 0.5, 0.5])
    _, rows = _measured_by_stub(rs.Plan(str(model_dir), [1], contexts=[128], tokens=4, reuse_prompts=True), stub)
    cached = rows[1]
    assert sorted(cached["t_one_samples_s"])[-3] >= 0.5 and cached["t_one_s"] < 0.1
    assert cached["t_all_s"] > cached["t_one_s"] and cached["per_request_tok_s"] > 3 / 0.5


def test_the_cached_prompts_streamed_give_the_decode_rate_and_a_stalled_pass_does_not_set_it(model_dir):
    # streamed requests in order: the fresh streamed pass (0), then the five streamed cached passes (1-5), of which
    # the first two stall 0.1 s at every gap; the stub's own gap is 0.02 s, so the rate is about 50 tok/s
    stub = serve_stub.Stub(ttft=0.02, itl=0.02, stream_stalls=[0.0, 0.1, 0.1])
    _, rows = _measured_by_stub(rs.Plan(str(model_dir), [1], contexts=[128], tokens=6, reuse_prompts=True), stub)
    cached = rows[1]
    samples = cached["stream_cached_samples_tok_s"]
    assert len(samples) == 5 and samples[0] < 10 and samples[1] < 10
    assert cached["stream_cached_tok_s"] == max(samples) and 30 < cached["stream_cached_tok_s"] <= 50
    assert 19 <= cached["stream_cached_itl_ms"]["p50"] < 35
    # the median-gap rate: one token a chunk over each pass's median gap, the median of the five passes (the two
    # stalled ones are the two slowest, so the middle sample is an unstalled pass's)
    gaps = cached["stream_cached_gap_samples_tok_s"]
    assert len(gaps) == 5 and gaps == sorted(gaps) and gaps[0] < 10 and gaps[1] < 10
    assert cached["stream_cached_gap_tok_s"] == gaps[2] and 28 < gaps[2] <= 52
    assert cached["as_predicted"]


def test_a_wrong_token_in_a_streamed_cached_pass_marks_the_row(model_dir, monkeypatch):
    # the cached pair's passes are right; only the streamed cached passes' tokens are wrong
    stub = serve_stub.Stub(ttft=0.01, itl=0.01)
    real = serve_stub.Stub.tokens
    monkeypatch.setattr(
        serve_stub.Stub, "tokens",
        lambda self, body: [t + 1 for t in real(self, body)] if body.get("stream") and self.stream_requests > 1
        else real(self, body),
    )  # fmt: skip
    plan = rs.Plan(str(model_dir), [1], contexts=[128], tokens=4, reuse_prompts=True, pair_repeats=2)
    _, rows = _measured_by_stub(plan, stub)
    assert rows[0]["as_predicted"] and not rows[1]["as_predicted"]


def test_cached_pairs_judge_every_pass_and_count_acceptance_over_every_full_one(model_dir):
    stub = serve_stub.Stub(ttft=0.01, itl=0.01, chunk=2)
    server = serve_stub.start(stub)
    try:
        plan = rs.Plan(str(model_dir), [2], contexts=[128], tokens=5, mtp=1, reuse_prompts=True, pair_repeats=2)
        rows = rs.measure(plan, server.server_address[1])
    finally:
        server.shutdown()
    cached = rows[1]
    assert cached["path"] == "serve-cached" and cached["as_predicted"] and len(cached["t_all_samples_s"]) == 2
    assert cached["first_draft_accepted"] == 0.75
    # over several readings: drafts and first-position acceptances summed, not the rates averaged
    assert rs.accepted_over([]) is None
    seen = [({"drafts": 0.0, "accepted_per_pos": []}, {"drafts": 4.0, "accepted_per_pos": [3.0]}),
            ({"drafts": 4.0, "accepted_per_pos": [3.0]}, {"drafts": 8.0, "accepted_per_pos": [4.0]})]  # fmt: skip
    assert rs.accepted_over(seen) == 0.5 and rs.accepted_over(seen[1:]) == 0.25
    assert rs.accepted_over([(None, seen[0][1])]) is None


def test_a_skip_outside_the_plan_or_of_everything_is_refused(model_dir, tmp_path, capsys):
    with pytest.raises(ValueError, match="skip 8192x2: not a"):
        rs.measured_pairs(rs.Plan("/m", [1], contexts=[128], skip=frozenset({(8192, 2)})))
    with pytest.raises(ValueError, match="nothing to measure"):
        rs.measured_pairs(rs.Plan("/m", [1], contexts=[128], skip=frozenset({(128, 1)})))
    from vllm_compose.errors import ExitCode

    USAGE = int(ExitCode.USAGE)
    out = tmp_path / "s.json"
    base = [
        "serve",
        "--model",
        str(model_dir),
        "--python",
        "/nonexistent",
        "--out",
        str(out),
        "--context",
        "128",
        "--batches",
        "1",
    ]
    assert main([*base, "--skip", "128x1"]) == USAGE and "nothing to measure" in capsys.readouterr().err
    assert main([*base, "--skip", "128by1"]) == USAGE and "CONTEXTxBATCH" in capsys.readouterr().err
    assert main([*base, "--skip", "4096x1"]) == USAGE and "4096x1: not a" in capsys.readouterr().err
    assert not out.exists() and not (tmp_path / "s.json.partial").exists()


def test_wrong_tokens_are_marked(model_dir):
    stub = serve_stub.Stub(ttft=0.01, itl=0.02, wrong=True)
    server = serve_stub.start(stub)
    try:
        rows = rs.measure(rs.Plan(str(model_dir), [2], contexts=[128], tokens=4), server.server_address[1])
    finally:
        server.shutdown()
    assert [r["as_predicted"] for r in rows] == [False, False]
    assert all(r["first_draft_accepted"] is None for r in rows)  # no MTP: its counters are not read


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return Path(f"/proc/{pid}/stat").read_text().split(") ")[1].startswith("Z")  # a zombie left to init


def test_run_starts_measures_and_stops_the_server(model_dir, tmp_path):
    port = rs.free_port()
    pid_file = tmp_path / "child.pid"
    cmd = [sys.executable, STUB, "--port", str(port), "--stub-child-pid-file", str(pid_file)]
    log = tmp_path / "server.log"
    rows = rs.run(rs.Plan(str(model_dir), [2], contexts=[128], tokens=4), log, port=port, command=cmd)
    assert len(rows) == 2 and all(r["as_predicted"] for r in rows)
    assert rows[0]["kv_bytes_per_token"] == round(12.5 * 2**30 / 1e6, 1)
    assert rows[0]["vllm_version"] == "stub" and rows[0]["server_command"] == cmd
    assert rows[0]["server_env"] == rs.USER_ENV and rows[0]["server_ready_s"] is not None
    assert not rs.port_in_use(port) and _gone(int(pid_file.read_text()))


def test_a_server_that_dies_says_why(tmp_path):
    cmd = [sys.executable, "-c", "import sys; print('ModuleNotFoundError: uvicorn'); sys.exit(3)"]
    with pytest.raises(rs.ServeError, match=r"exited with status 3(.|\n)*ModuleNotFoundError: uvicorn"):
        with rs.Server(cmd, dict(os.environ), rs.free_port(), tmp_path / "log"):
            pass


def test_a_server_never_ready_is_killed_with_its_group(tmp_path):
    port, pid_file = rs.free_port(), tmp_path / "child.pid"
    cmd = [sys.executable, STUB, "--port", str(port), "--stub-never-ready", "--stub-child-pid-file", str(pid_file)]
    t0 = time.monotonic()
    with pytest.raises(rs.ServeError, match=r"not ready after 3 s(.|\n)*GPU KV cache size"):
        with rs.Server(cmd, dict(os.environ), port, tmp_path / "log", ready_timeout_s=3):
            pass
    assert time.monotonic() - t0 < 20
    assert not rs.port_in_use(port) and _gone(int(pid_file.read_text()))


def test_an_interrupt_kills_the_group_even_when_it_ignores_sigterm(model_dir, tmp_path):
    port, pid_file = rs.free_port(), tmp_path / "child.pid"
    cmd = [sys.executable, STUB, "--port", str(port), "--stub-child-pid-file", str(pid_file), "--stub-ignore-term"]
    server = rs.Server(cmd, dict(os.environ), port, tmp_path / "log")
    server.stop = lambda grace_s=1.0, _stop=server.stop: _stop(grace_s)  # no 30 s wait for SIGKILL here
    with pytest.raises(KeyboardInterrupt):
        with server:
            assert rs.port_in_use(port)
            raise KeyboardInterrupt
    assert not rs.port_in_use(port) and _gone(server.proc.pid) and _gone(int(pid_file.read_text()))


def test_a_busy_port_is_refused(tmp_path):
    held = serve_stub.start(serve_stub.Stub())
    try:
        with pytest.raises(rs.ServeError, match="already in use"):
            rs.Server(
                [sys.executable, "-c", "pass"], dict(os.environ), held.server_address[1], tmp_path / "l"
            ).__enter__()
    finally:
        held.shutdown()


def test_the_serve_command_end_to_end(model_dir, tmp_path, capsys):
    """`recall_e2e.py serve` with an interpreter that runs the stub in place of vLLM: the command line it got, the
    environment, the rows written, the table made from them."""
    seen = tmp_path / "argv.json"
    fake = tmp_path / "python"
    fake.write_text(f'#!/bin/sh\nexec {sys.executable} {STUB} --argv-file {seen} "$@"\n')
    fake.chmod(0o755)
    out = tmp_path / "res" / "s.json"
    argv = ["serve", "--model", str(model_dir), "--batches", "1,2", "--context", "128", "--tokens", "4"]
    assert main([*argv, "--mtp", "2", "--python", str(fake), "--out", str(out)]) == 0
    got = json.loads(seen.read_text())
    assert got["argv"][2:6] == ["-m", "vllm.entrypoints.cli.main", "serve", str(model_dir)]
    assert json.loads(got["argv"][got["argv"].index("--speculative-config") + 1])["num_speculative_tokens"] == 2
    assert all(got["env"][k] == v for k, v in rs.USER_ENV.items())
    rows = json.loads(out.read_text())
    assert [(r["path"], r["batch"]) for r in rows] == [
        ("serve-stream", 1),
        ("serve", 1),
        ("serve-stream", 2),
        ("serve", 2),
    ]
    assert (out.parent / "s.server.log").read_text().startswith("INFO Available KV cache memory")
    assert not (out.parent / "s.json.partial").exists()
    capsys.readouterr()
    assert main(["table", str(out)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[2].startswith("| serve | eager | 2 | 1.00 | 0.75 | 1 | 128 |")
    assert lines[3].startswith("| serve-stream | eager | 2 | 1.00 | 0.75 | 1 | 128 |")
    assert lines[3].endswith("| 13,422 | yes |")


def test_a_failed_server_keeps_nothing_and_says_why(model_dir, tmp_path, capsys):
    fake = tmp_path / "python"
    fake.write_text("#!/bin/sh\necho 'RuntimeError: no GPU'; exit 1\n")
    fake.chmod(0o755)
    out = tmp_path / "s.json"
    code = main(["serve", "--model", str(model_dir), "--python", str(fake), "--out", str(out), "--context", "128"])
    assert code != 0 and not out.exists()
    assert "RuntimeError: no GPU" in capsys.readouterr().err


def test_table_puts_a_configurations_paths_together():
    base = {"mode": "eager", "mtp": 0, "acceptance": 1.0, "batch": 1, "context": 8192, "as_predicted": True}
    rows = table(
        [
            {**base, "path": "serve-stream", "per_request_tok_s": 29.0, "aggregate_tok_s": 29.0,
             "ttft_ms": {"mean": 812.5}, "prefill_tok_s": 10082.1, "kv_bytes_per_token": 10528.0},
            {**base, "per_request_tok_s": 30.1, "aggregate_tok_s": 30.1},  # an offline result from before `path`
            {**base, "path": "serve", "per_request_tok_s": 29.5, "aggregate_tok_s": 29.5, "decode_share": 0.0412,
             "stream_cached_tok_s": 31.2, "stream_cached_gap_tok_s": 30.4, "stream_cached_window_tok_s": 29.9},
        ]
    ).splitlines()  # fmt: skip
    assert [r.split(" | ")[0] for r in rows[2:]] == ["| offline", "| serve", "| serve-stream"]
    assert rows[2].endswith("| 30.1 | 30.1 | - | - | - | - | - | - | - | yes |")
    assert rows[3].endswith("| 29.5 | 29.5 | 0.04 | 31.2 | 30.4 | 29.9 | - | - | - | yes |")
    assert rows[4].endswith("| 29.0 | 29.0 | - | - | - | - | 812.5 | 10082.1 | 10,528 | yes |")
