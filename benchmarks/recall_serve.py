"""The recall model served as users serve it: `vllm serve` with the user guide's flags, driven over HTTP.

`recall_e2e.py serve` runs this. One server per configuration (MTP, eager or CUDA graphs); for each batch size, three
passes of concurrent requests, each pass with prompts of its own (`recall_model.make_prompts` with another seed, so
no pass reuses another's prefill):

- streamed (`stream: true`): each request's time to first token (TTFT), the gaps between the chunks that carry
  tokens (inter-token latency; under MTP a chunk carries every token one step accepted) and its decode rate
  (n - 1) / (t(last token) - t(first token)); prefill tok/s = the batch's prompt tokens / the time from sending to
  the last first token;
- not streamed, with 1 and with N new tokens: decode tok/s per request = (N - 1) / (t(N) - t(1)), the offline path's
  arithmetic (`recall_e2e.decode_rates`), so the `serve` rows compare one to one with the `offline` ones. Each of
  those passes prefills its batch again, so at long prompts and large batches the difference is a small share of two
  long times and the rate mostly noise (32 x 32k: about 40 s of prefill against under a second of decode). With
  `reuse_prompts` the two passes resend the streamed pass's prompts from vLLM's prefix cache (rows `serve-cached`):
  each pass then prefills at most a block a request. The pair runs once untimed (what is new at this batch compiles
  there), then `pair_repeats` times; the rate is from the fastest t(1) and the fastest t(N). The noise is one-sided:
  on an H100 some cached passes took 1.5-2.3 s more than their siblings (0.08 s against 2.37 s for the same eight
  1-token requests), so a median of three was still a stalled sample at two of fifteen pairs, and a minimum is what
  the GPU needs for the work. Every sample is kept in the row, and `decode_share`, (t(N) - t(1)) / t(N), says what the
  rate rests on. At 131,072-token prompts and batch 8 or 32 a cached 1-token pass still takes 0.5-2.9 s (the server
  reads and hashes every prompt token) and the share falls to 0.16-0.32, where two rates of one server differed by
  2.6x. So the cached prompts are also streamed `pair_repeats` times (`stream_cached_tok_s`): each request's rate
  runs from its own first token to its last, nothing subtracted, and no other request's prompt is prefilled in
  between.

Every pass's tokens are judged against `recall_model.predict` (a fast wrong run is not a result). MTP's first-draft
acceptance is read from the server's own counters (`/metrics`), and KV bytes per token from its log (available KV
memory / KV cache tokens).

Why not `vllm bench serve`: the recall checkpoint has no tokenizer and its prompts are token ids. In v0.26.0 the
benchmark asserts a tokenizer before loading any dataset (`--skip-tokenizer-init` sets it to None and then fails),
and none of its datasets takes token-id prompts (`custom` reads text prompts and tokenizes them); in v0.33.0 the
assert is gone but the `custom` dataset sets every request's output length to 1 without a tokenizer. It also never
returns the tokens, which must be judged here. So the client is the standard library's `http.client`, one thread a
request: nothing to stage on the device, the same code against the CPU tests' stub server.

How a tokenizer-less model is served (v0.26.0 and v0.33.0 alike): `--skip-tokenizer-init`; the completions API takes
`prompt` as a list of token ids, and `return_token_ids: true` returns the generated ids (`token_ids` of a choice;
per chunk the new ones when streamed) while `text` stays empty (no detokenizer).
"""

from __future__ import annotations

import dataclasses
import http.client
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from vllm_compose.errors import ComposeError  # noqa: E402
from vllm_compose.proof.suites import GRAPHS, SERVING_ENV  # noqa: E402


class ServeError(ComposeError):
    """The server could not be started, answered wrongly, or could not be stopped."""


#: the user guide's environment (section "Serve on Ampere"): proof.SERVING_ENV less the in-process engine, which only
#: the offline harness needs (it reaches the scheduler); a server runs its engine in its own process
USER_ENV = {k: v for k, v in SERVING_ENV.items() if k != "VLLM_ENABLE_V1_MULTIPROCESSING"}

#: the user guide's `vllm serve` flags that hold on one GPU (no pipeline parallelism): the DSA indexer kernels need
#: 64-token blocks, FP8 KV needs sm_89+, and 0.85 leaves the MTP stage its slack
USER_FLAGS = ("--block-size", "64", "--kv-cache-dtype", "auto", "--gpu-memory-utilization", "0.85")

#: per-request HTTP timeout (seconds without a byte): a prefill of 32 x 8k tokens stays far below it
REQUEST_TIMEOUT_S = 600.0


@dataclasses.dataclass(frozen=True)
class ServeConfig:
    """One server: the checkpoint, its MTP and graph settings, and the sizes it must admit."""

    model_dir: str
    max_model_len: int
    max_num_seqs: int
    mtp: int = 0
    #: CUDA graphs for decode as the offline `--graphs` runs them (proof.GRAPHS); False: --enforce-eager
    graphs: bool = False
    #: forced, as the offline path forces it: on the H200 posing as sm_80 the automatic choice is not Ampere's
    backend: str = "TRITON_MLA_SPARSE"
    #: off by default, as in the offline engine, so the two paths run the same engine; each pass has prompts of its
    #: own anyway
    prefix_caching: bool = False
    seed: int = 0


def serve_command(cfg: ServeConfig, port: int, python: str = sys.executable) -> list[str]:
    """The `vllm serve` command line (through `python -m vllm.entrypoints.cli.main`, so it runs from a staged tree
    without the console script)."""
    cmd = [python, "-m", "vllm.entrypoints.cli.main", "serve", cfg.model_dir, "--host", "127.0.0.1"]
    cmd += ["--port", str(port), *USER_FLAGS, "--skip-tokenizer-init", "--dtype", "bfloat16"]
    cmd += ["--max-model-len", str(cfg.max_model_len), "--max-num-seqs", str(cfg.max_num_seqs)]
    cmd += ["--seed", str(cfg.seed), "--attention-backend", cfg.backend]
    if not cfg.prefix_caching:
        cmd.append("--no-enable-prefix-caching")
    cmd += ["--compilation-config", json.dumps(GRAPHS)] if cfg.graphs else ["--enforce-eager"]
    if cfg.mtp:
        cmd += ["--speculative-config", json.dumps({"method": "mtp", "num_speculative_tokens": cfg.mtp})]
    return cmd


def free_port() -> int:
    """A TCP port on 127.0.0.1 nobody listens on now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def port_in_use(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.settimeout(1.0)
        return s.connect_ex(("127.0.0.1", port)) == 0


def _tail(path: Path, chars: int = 4000) -> str:
    try:
        data = path.read_bytes()
    except OSError:
        return "(no log)"
    return data[-chars:].decode("utf-8", "replace")


class Server:
    """A server process in a process group of its own, stopped with the whole group on exit, error or interrupt.

    `with Server(cmd, env, port, log) as s:` starts it and waits until `/health` answers 200; leaving the block
    (normally, by an exception, by Ctrl-C) sends SIGTERM to the group, SIGKILL to what is left after `grace_s`, and
    waits for the port to be free."""

    def __init__(self, cmd: list[str], env: dict[str, str], port: int, log: Path, ready_timeout_s: float = 600.0):
        #: the command and its environment (the whole of it: the caller merges os.environ in)
        self.cmd, self.env = cmd, env
        self.port = port
        #: the server's stdout and stderr; its tail goes into every error
        self.log = Path(log)
        self.ready_timeout_s = ready_timeout_s
        #: the server process; its pid is the process group's id (start_new_session)
        self.proc: subprocess.Popen | None = None
        #: seconds from start to ready
        self.ready_s: float | None = None

    def __enter__(self) -> Server:
        if port_in_use(self.port):
            raise ServeError(f"port {self.port} is already in use", hint="pass another --port or leave it out")
        self.log.parent.mkdir(parents=True, exist_ok=True)
        with self.log.open("wb") as out:
            self.proc = subprocess.Popen(
                self.cmd, env=self.env, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                start_new_session=True,
            )  # fmt: skip
        try:
            self.wait_ready()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        released = self.stop()
        if exc_type is None and not released:
            raise ServeError(f"port {self.port} is still in use after the server's process group was killed")

    def wait_ready(self) -> None:
        """Poll `/health` until it answers 200; a server that exits or does not answer in time is an error."""
        t0 = time.monotonic()
        while True:
            code = self.proc.poll()
            if code is not None:
                raise ServeError(
                    f"the server exited with status {code} before it was ready; the end of {self.log}:\n"
                    + _tail(self.log),
                    hint="the log's last lines say why (a missing module, a model it cannot load, GPU memory)",
                )
            try:
                status, _ = http_get(self.port, "/health", timeout=5.0)
                if status == 200:
                    self.ready_s = round(time.monotonic() - t0, 1)
                    return
            except OSError:
                pass  # not listening yet
            if time.monotonic() - t0 > self.ready_timeout_s:
                raise ServeError(
                    f"the server was not ready after {self.ready_timeout_s:.0f} s; the end of {self.log}:\n"
                    + _tail(self.log),
                    hint="raise --ready-timeout if it was still loading or compiling",
                )
            time.sleep(0.5)

    def stop(self, grace_s: float = 30.0) -> bool:
        """Kill the server's process group (SIGTERM, SIGKILL after `grace_s`); True when the port is free after."""
        if self.proc is None:
            return True
        pgid = self.proc.pid  # the group outlives its leader: vLLM's engine processes are in it too
        for sig, wait_s in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 10.0)):
            try:
                os.killpg(pgid, sig)
            except ProcessLookupError:
                break
            if _wait_group(pgid, self.proc, wait_s):
                break
        deadline = time.monotonic() + 10.0
        while port_in_use(self.port) and time.monotonic() < deadline:
            time.sleep(0.2)
        return not port_in_use(self.port)


def _wait_group(pgid: int, leader: subprocess.Popen, timeout_s: float) -> bool:
    """Wait until no process of group `pgid` is left (reaping the leader, our child); False on timeout."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        leader.poll()
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.1)
    return False


# --- the client ----------------------------------------------------------------------------------------------------


def http_get(port: int, path: str, timeout: float = 10.0) -> tuple[int, str]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.request("GET", path)
        resp = conn.getresponse()
        return resp.status, resp.read().decode("utf-8", "replace")
    finally:
        conn.close()


def completion_body(model: str, tokens: list[int], max_tokens: int, stream: bool) -> dict[str, Any]:
    """A completions request for a token-id prompt: greedy, EOS ignored, the generated ids returned."""
    body: dict[str, Any] = {
        "model": model,
        "prompt": list(tokens),
        "max_tokens": max_tokens,
        "temperature": 0.0,
        "ignore_eos": True,
        "return_token_ids": True,
        "stream": stream,
    }
    if stream:
        body["stream_options"] = {"include_usage": True}
    return body


@dataclasses.dataclass
class Completion:
    """One request's tokens and times (time.perf_counter seconds)."""

    sent: float
    done: float
    token_ids: list[int]
    #: streamed: (arrival time, tokens it carried) of each chunk that carried tokens; not streamed: empty
    chunks: list[tuple[float, int]] = dataclasses.field(default_factory=list)

    @property
    def first(self) -> float:
        return self.chunks[0][0] if self.chunks else self.done


def complete(port: int, body: dict[str, Any], timeout: float = REQUEST_TIMEOUT_S) -> Completion:
    """POST /v1/completions; a streamed body is read event by event, each chunk's arrival time kept."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        payload = json.dumps(body).encode()
        sent = time.perf_counter()
        conn.request("POST", "/v1/completions", body=payload, headers={"Content-Type": "application/json"})
        resp = conn.getresponse()
        if resp.status != 200:
            raise ServeError(f"/v1/completions answered {resp.status}: {resp.read()[:2000].decode('utf-8', 'replace')}")
        if not body.get("stream"):
            data = json.loads(resp.read())
            done = time.perf_counter()
            ids = data["choices"][0].get("token_ids")
            if ids is None:
                raise ServeError("the response has no token_ids", hint="the server must accept return_token_ids")
            return Completion(sent, done, list(ids))
        ids, chunks = [], []
        while True:
            line = resp.readline()
            if not line:
                break
            line = line.strip()
            if not line.startswith(b"data:"):
                continue
            data = line[5:].strip()
            if data == b"[DONE]":
                break
            event = json.loads(data)
            if "error" in event:
                raise ServeError(f"the stream reported an error: {event['error']}")
            for choice in event.get("choices") or []:
                new = choice.get("token_ids") or []
                if new:
                    chunks.append((time.perf_counter(), len(new)))
                    ids.extend(new)
        return Completion(sent, time.perf_counter(), ids, chunks)
    finally:
        conn.close()


def run_batch(port: int, bodies: list[dict[str, Any]], timeout: float = REQUEST_TIMEOUT_S):
    """Send every body at once, one thread each; returns (batch start, completions in order)."""
    results: list[Completion | BaseException | None] = [None] * len(bodies)
    gate = threading.Barrier(len(bodies) + 1)

    def one(i: int) -> None:
        gate.wait()
        try:
            results[i] = complete(port, bodies[i], timeout)
        except BaseException as exc:  # handed to the caller
            results[i] = exc

    threads = [threading.Thread(target=one, args=(i,), daemon=True) for i in range(len(bodies))]
    for t in threads:
        t.start()
    start = time.perf_counter()
    gate.wait()
    for t in threads:
        t.join()
    failed = [r for r in results if isinstance(r, BaseException)]
    if failed:
        raise failed[0]
    return start, results


# --- arithmetic ----------------------------------------------------------------------------------------------------


def percentile(values: list[float], q: float) -> float:
    """The q-th percentile (0-100), linear between the closest ranks (numpy's default)."""
    if not values:
        raise ValueError("percentile of no values")
    xs = sorted(values)
    k = (len(xs) - 1) * q / 100.0
    lo = int(k)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)


def stream_stats(start: float, completions: list[Completion], prompt_tokens: int) -> dict[str, Any]:
    """A streamed batch's numbers: TTFT, gaps between token-carrying chunks, decode rates and prefill tok/s."""
    ttft, gaps, rates, per_chunk, first_gaps = [], [], [], [], []
    for c in completions:
        if len(c.chunks) < 2 or sum(n for _t, n in c.chunks) < 2:
            raise ValueError(f"a streamed request brought {len(c.chunks)} chunks: no decode rate")
        ttft.append(c.chunks[0][0] - c.sent)
        times = [t for t, _n in c.chunks]
        gaps += [b - a for a, b in zip(times, times[1:], strict=False)]
        first_gaps.append(times[1] - times[0])
        per_chunk += [n for _t, n in c.chunks[1:]]
        decoded = sum(n for _t, n in c.chunks[1:])  # the tokens after the first
        if times[-1] <= times[0]:
            raise ValueError("the last chunk did not come after the first: no decode rate")
        rates.append(decoded / (times[-1] - times[0]))
    last_first = max(c.chunks[0][0] for c in completions)
    # the window in which every request of the batch is decoding: from the last first token to the first last one.
    # Each request's tokens in it over its length, the mean over the requests: the batch's decode speed, which
    # neither staggered starts (the first-to-last rate) nor chunks that carry several steps (the median gap) move
    first_last = min(c.chunks[-1][0] for c in completions)
    window = first_last - last_first
    in_window = [sum(n for t, n in c.chunks if last_first < t <= first_last) for c in completions]

    def ms(x: float) -> float:
        return round(1000.0 * x, 2)

    return {
        "per_request_tok_s": round(sum(rates) / len(rates), 2),
        "aggregate_tok_s": round(sum(rates), 2),
        "ttft_ms": {"mean": ms(sum(ttft) / len(ttft)), "p50": ms(percentile(ttft, 50)), "max": ms(max(ttft))},
        "itl_ms": {"mean": ms(sum(gaps) / len(gaps)), "p50": ms(percentile(gaps, 50)), "p99": ms(percentile(gaps, 99))},
        # the gap from the first token to the next, apart: work queued behind the first token (under MTP with async
        # scheduling, the draft pass over the last prefill chunk) shows here and not in TTFT
        "first_gap_ms": {"mean": ms(sum(first_gaps) / len(first_gaps)), "max": ms(max(first_gaps))},
        "tokens_per_chunk": round(sum(per_chunk) / len(per_chunk), 3),
        "all_decoding_tok_s": round(sum(in_window) / len(in_window) / window, 2) if window > 0 else None,
        "all_decoding_window_ms": ms(max(window, 0.0)),
        "prompt_tokens": prompt_tokens,
        "prefill_tok_s": round(prompt_tokens / (last_first - start), 1),
    }


_SAMPLE = re.compile(r"^(?P<name>[A-Za-z_:][\w:]*)(?:\{(?P<labels>[^}]*)\})?\s+(?P<value>\S+)")


def spec_counters(metrics_text: str) -> dict[str, Any]:
    """MTP's counters from a Prometheus `/metrics` page, summed over engines: drafts and accepted tokens per draft
    position (vLLM's `vllm:spec_decode_num_drafts` and `..._num_accepted_tokens_per_pos`)."""
    drafts, per_pos = 0.0, {}
    for line in metrics_text.splitlines():
        m = _SAMPLE.match(line)
        if not m:
            continue
        name, value = m["name"], float(m["value"])
        if name == "vllm:spec_decode_num_drafts_total":
            drafts += value
        elif name == "vllm:spec_decode_num_accepted_tokens_per_pos_total":
            pos = re.search(r'position="(\d+)"', m["labels"] or "")
            if pos:
                per_pos[int(pos[1])] = per_pos.get(int(pos[1]), 0.0) + value
    return {"drafts": drafts, "accepted_per_pos": [per_pos[k] for k in sorted(per_pos)]}


def first_draft_rate(before: dict[str, Any], after: dict[str, Any]) -> float | None:
    """The share of first drafts accepted between two `spec_counters` readings; None without drafts."""
    return accepted_over([(before, after)])


def accepted_over(readings: list[tuple[Any, Any]]) -> float | None:
    """The share of first drafts accepted over several passes' (before, after) `spec_counters` readings; None
    without MTP or without drafts."""
    if not readings or any(b is None or a is None for b, a in readings):
        return None
    drafts = sum(a["drafts"] - b["drafts"] for b, a in readings)
    firsts = sum(
        (a["accepted_per_pos"][0] if a["accepted_per_pos"] else 0.0)
        - (b["accepted_per_pos"][0] if b["accepted_per_pos"] else 0.0)
        for b, a in readings
    )
    if drafts <= 0 or not readings[-1][1]["accepted_per_pos"]:
        return None
    return round(firsts / drafts, 4)


_KV_MEMORY = re.compile(r"Available KV cache memory: ([\d.]+) GiB")
_KV_TOKENS = re.compile(r"GPU KV cache size: ([\d,]+) tokens")


def kv_bytes_per_token(log_text: str) -> float | None:
    """KV bytes per token from the server's log: its available KV memory over the tokens that memory holds (every
    layer's latent cache and indexer keys, the MTP layer's included); None when either line is missing."""
    mem, toks = _KV_MEMORY.search(log_text), _KV_TOKENS.search(log_text)
    if not mem or not toks:
        return None
    return round(float(mem[1]) * 2**30 / int(toks[1].replace(",", "")), 1)


# --- one configuration ---------------------------------------------------------------------------------------------


@dataclasses.dataclass
class Plan:
    """What one server measures."""

    model_dir: str
    batches: list[int]
    #: prompt lengths, each measured at every batch size in one server (shortest first)
    contexts: list[int] = dataclasses.field(default_factory=lambda: [8192])
    tokens: int = 64
    mtp: int = 0
    graphs: bool = False
    prefix_caching: bool = False
    #: (context, batch) pairs not measured: a long context at a large batch is three passes of batch x context
    #: prompt tokens through prefill, more than one device call holds (131,072 x 32: 12.6M tokens)
    skip: frozenset[tuple[int, int]] = frozenset()
    #: the plain passes send the streamed pass's prompts again, served from vLLM's prefix cache (on for this): the
    #: decode rate is still t(N) - t(1), and a pair costs one prefill of batch x context tokens instead of three
    reuse_prompts: bool = False
    #: with reuse_prompts: the cached (1-token, N-token) pair is timed this many times after an untimed one, the rate
    #: from the fastest of each
    pair_repeats: int = 5


def prompt_lengths(context: int, batch: int) -> list[int]:
    """The offline path's lengths: distinct, so distinct planted positions."""
    return [context + 64 * i for i in range(batch)]


def measured_pairs(plan: Plan) -> list[tuple[int, int]]:
    """The (context, batch) pairs `plan` measures, in order: shortest context first, each at every batch size
    not skipped. A skip that names no pair of the plan is refused (a typo would otherwise measure it)."""
    pairs = [(c, b) for c in sorted(plan.contexts) for b in plan.batches]
    unknown = sorted(set(plan.skip) - set(pairs))
    if unknown:
        named = ", ".join(f"{c}x{b}" for c, b in unknown)
        raise ValueError(f"skip {named}: not a (context x batch) pair of this plan; pairs are CONTEXTxBATCH")
    kept = [p for p in pairs if p not in plan.skip]
    if not kept:
        raise ValueError("every (context x batch) pair is skipped: nothing to measure")
    return kept


def server_config(plan: Plan) -> ServeConfig:
    pairs = measured_pairs(plan)
    longest = max(prompt_lengths(c, b)[-1] for c, b in pairs) + plan.tokens + 8
    return ServeConfig(
        model_dir=plan.model_dir,
        max_model_len=longest,
        max_num_seqs=max(8, *(b for _, b in pairs)),
        mtp=plan.mtp,
        graphs=plan.graphs,
        prefix_caching=plan.prefix_caching or plan.reuse_prompts,
    )


def measure(plan: Plan, port: int, on_row: Callable[[dict], None] | None = None) -> list[dict]:
    """Against a ready server on `port`: for each context (shortest first) and batch size, the streamed pass and the
    two plain ones; two rows a (context, batch) (path `serve-stream` and `serve`), in the offline rows' format."""
    from recall_e2e import decode_rates

    from vllm_compose.proof.recall_model import make_prompts, predict, spec_from_json

    spec = spec_from_json(json.loads((Path(plan.model_dir) / "recall_spec.json").read_text()))
    base = {
        "mode": "graphs" if plan.graphs else "eager",
        "mtp": plan.mtp,
        "acceptance": 1.0 - len(spec.mtp_wrong) / spec.chain,
        "tokens": plan.tokens,
    }

    def counters() -> dict[str, Any] | None:
        if not plan.mtp:
            return None
        status, text = http_get(port, "/metrics")
        return spec_counters(text) if status == 200 else None

    def pass_(context: int, batch: int, seed: int, max_tokens: int, stream: bool):
        """One pass of `batch` concurrent requests: (start, completions, tokens right, the MTP counters read before
        and after, prompt tokens)."""
        prompts = make_prompts(spec, prompt_lengths(context, batch), seed=seed)
        bodies = [completion_body(plan.model_dir, list(p.tokens), max_tokens, stream) for p in prompts]
        before = counters()
        start, got = run_batch(port, bodies)
        reading = (before, counters())
        right = all(c.token_ids == predict(spec, p, max_tokens) for c, p in zip(got, prompts, strict=True))
        return start, got, right, reading, sum(len(p.tokens) for p in prompts)

    def timed(context: int, batch: int, seed: int, max_tokens: int) -> tuple[float, bool, tuple[Any, Any]]:
        start, got, right, reading, _ = pass_(context, batch, seed, max_tokens, False)
        return max(r.done for r in got) - start, right, reading

    def fresh_pair(context: int, batch: int, seed: int) -> dict[str, Any]:
        """t(1) and t(N), each pass with prompts of its own (each prefills its batch)."""
        t_one, right_one, _ = timed(context, batch, seed + 1, 1)
        t_all, right_all, reading = timed(context, batch, seed + 2, plan.tokens)
        out: dict[str, Any] = {"first_draft_accepted": accepted_over([reading])}
        if t_all <= t_one:
            # one 1-token pass took longer than the full one: a one-time cost (a first compile at this batch) landed
            # in it. Timed once more with fresh prompts; both kept in the row
            out["t_one_first_s"] = round(t_one, 3)
            t_one, right_again, _ = timed(context, batch, seed + 3, 1)
            right_one = right_one and right_again
        return {**out, "t_one_s": round(t_one, 3), "t_all_s": round(t_all, 3), "as_predicted": right_one and right_all}

    def cached_pair(context: int, batch: int, seed: int) -> dict[str, Any]:
        """t(1) and t(N) of the streamed pass's prompts from the prefix cache: once untimed, then `pair_repeats`
        times, the fastest of each kept (every sample in the row); then the same prompts streamed `pair_repeats`
        times (`stream_cached_tok_s`, the fastest pass's per-request rate; `stream_cached_gap_tok_s`, the median of
        the passes' tokens a chunk over their median gap); acceptance over every timed N-token
        pass, streamed or not."""
        _, warm_one, _ = timed(context, batch, seed, 1)
        _, warm_all, _ = timed(context, batch, seed, plan.tokens)
        ones, alls, right, taken = [], [], warm_one and warm_all, []
        for _ in range(plan.pair_repeats):
            t, ok, _ = timed(context, batch, seed, 1)
            ones.append(t)
            t, ok_all, reading = timed(context, batch, seed, plan.tokens)
            alls.append(t)
            taken.append(reading)
            right = right and ok and ok_all
        # the same prompts streamed from the cache, `pair_repeats` times: every request's rate from its own first
        # token to its last, with no prefill of the others' prompts in between (each brings at most a block) and no
        # subtraction of two pass times; the fastest pass kept, as for the pair
        streamed = []
        for _ in range(plan.pair_repeats):
            start, got, ok, reading, prompt_tokens = pass_(context, batch, seed, plan.tokens, True)
            streamed.append(stream_stats(start, got, prompt_tokens))
            taken.append(reading)
            right = right and ok
        fastest = max(streamed, key=lambda s: s["per_request_tok_s"])
        # the step read directly: tokens a chunk over the median gap between chunks, over all five passes. A
        # request's own rate runs from its first token to its last, and where the server takes its time to receive
        # long prompts the requests start decoding one after another, so the first ones decode beside fewer others
        # and their rates come out above the batch's (measured: 322 against 249 tok/s at 8 x 131,072 tokens)
        gap_rates = sorted(
            s["tokens_per_chunk"] / (s["itl_ms"]["p50"] / 1000.0) for s in streamed if s["itl_ms"]["p50"]
        )
        # the rate while every request decodes (`all_decoding_tok_s`), the median pass: the median-gap rate counts
        # a chunk's tokens over one gap, and where the server sends several steps in one chunk (seen under MTP 1 at
        # 8 x 131,072: more than 2 tokens a chunk) it is too high
        window_rates = sorted(s["all_decoding_tok_s"] for s in streamed if s["all_decoding_tok_s"] is not None)
        return {
            "first_draft_accepted": accepted_over(taken),
            "stream_cached_tok_s": fastest["per_request_tok_s"],
            "stream_cached_samples_tok_s": [s["per_request_tok_s"] for s in streamed],
            "stream_cached_itl_ms": fastest["itl_ms"],
            "stream_cached_gap_tok_s": round(gap_rates[len(gap_rates) // 2], 2) if gap_rates else None,
            "stream_cached_gap_samples_tok_s": [round(r, 2) for r in gap_rates],
            "stream_cached_tokens_per_chunk": [s["tokens_per_chunk"] for s in streamed],
            "stream_cached_window_tok_s": round(window_rates[len(window_rates) // 2], 2) if window_rates else None,
            "stream_cached_window_samples_tok_s": window_rates,
            "t_one_s": round(min(ones), 4),
            "t_all_s": round(min(alls), 4),
            "t_one_samples_s": [round(t, 4) for t in ones],
            "t_all_samples_s": [round(t, 4) for t in alls],
            "as_predicted": right,
        }

    rows = []
    pairs = measured_pairs(plan)
    for c, context in enumerate(sorted(plan.contexts)):
        if not any(pc == context for pc, _ in pairs):
            continue
        # one short generation at this length first: the kernels its shapes need compile before any timing
        warm = make_prompts(spec, prompt_lengths(context, 1), seed=99 + 1000 * c)
        complete(port, completion_body(plan.model_dir, list(warm[0].tokens), 4, False))
        for b, batch in enumerate(plan.batches):
            if (context, batch) not in pairs:
                continue
            # the streamed pass has prompts of its own: its TTFT and prefill rate are never from a cache
            seed = 100 + 1000 * c + 10 * b
            at = {**base, "context": context, "batch": batch}
            start, got, right, reading, prompt_tokens = pass_(context, batch, seed, plan.tokens, True)
            row = {"path": "serve-stream", **at, "first_draft_accepted": accepted_over([reading])}
            row.update(stream_stats(start, got, prompt_tokens), as_predicted=right)
            rows.append(row)
            if plan.reuse_prompts:
                row = cached_pair(context, batch, seed)
            else:
                row = fresh_pair(context, batch, seed)
            row = {"path": "serve-cached" if plan.reuse_prompts else "serve", **at, **row}
            try:
                row.update(decode_rates(batch, plan.tokens, row["t_one_s"], row["t_all_s"]))
            except ValueError as exc:  # still no positive difference: the row says so, the run goes on
                row.update(per_request_tok_s=None, aggregate_tok_s=None, no_rate=str(exc))
            row["decode_share"] = round(max(0.0, row["t_all_s"] - row["t_one_s"]) / row["t_all_s"], 4)
            rows.append(row)
            if on_row:
                for r in rows[-2:]:
                    on_row(r)
    return rows


def run(
    plan: Plan,
    log: Path,
    port: int | None = None,
    python: str = sys.executable,
    ready_timeout_s: float = 600.0,
    on_row: Callable[[dict], None] | None = None,
    command: list[str] | None = None,
) -> list[dict]:
    """Start the server for `plan`, measure, stop it; every row also carries the server's facts (start-up time, KV
    bytes per token, the command line). `command` replaces the `vllm serve` line (the tests' stub server)."""
    port = port or free_port()
    cmd = command or serve_command(server_config(plan), port, python)
    env = {**os.environ, **USER_ENV}
    with Server(cmd, env, port, log, ready_timeout_s) as server:
        rows = measure(plan, port, on_row)
        status, version = http_get(port, "/version")
    facts = {
        "server_ready_s": server.ready_s,
        "kv_bytes_per_token": kv_bytes_per_token(log.read_text(errors="replace")),
        "vllm_version": json.loads(version).get("version") if status == 200 else None,
        "server_command": cmd,
        "server_env": USER_ENV,
    }
    return [{**r, **facts} for r in rows]
