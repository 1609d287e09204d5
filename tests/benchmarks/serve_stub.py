"""A stand-in for `vllm serve` in the CPU tests of benchmarks/recall_serve.py: the same endpoints, known delays.

It answers /health, /version, /metrics (MTP counters: 4 drafts a request, 3 of them accepted at position 0) and
/v1/completions for token-id prompts. Its tokens come from reading the prompt as the recall model does: the last
token is chain token a_k, and the planted token keyed by a_k names the next one; `--wrong` answers the fallback
token instead. Streamed, the first chunk comes after `--ttft` seconds and each later chunk (`--chunk` tokens) after
`--itl` more. It prints the two KV cache lines vLLM's log has. Run as a script (`--port`; other arguments, e.g. a
whole `vllm serve` command line, are ignored and written to `--argv-file`), or in-process with `start`.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "src"))

from vllm_compose.proof.tinyglm import SPECIAL_TOKENS  # noqa: E402

KV_LOG = "INFO Available KV cache memory: 12.50 GiB\nINFO GPU KV cache size: 1,000,000 tokens\n"


def walk(spec: dict, prompt: list[int], n: int) -> list[int]:
    """The recall model's greedy tokens for `prompt`, read from its planted tokens (independently of recall_model)."""
    chain, base = spec["chain"], SPECIAL_TOKENS + spec["chain"] + 1 + spec["fillers"]
    successor = {}
    for t in prompt:
        off = t - base
        if 0 <= off < chain * (chain - 1):
            key, v = divmod(off, chain - 1)
            successor[key] = v if v < key else v + 1
    out, cur = [], prompt[-1] - SPECIAL_TOKENS
    for _ in range(n):
        cur = successor[cur]
        out.append(SPECIAL_TOKENS + cur)
    return out


class Stub:
    """The stub's settings and counters."""

    def __init__(self, ttft=0.05, itl=0.02, chunk=1, wrong=False, ready=True, one_token_stalls=(), stream_stalls=()):
        self.ttft, self.itl, self.chunk, self.wrong, self.ready = ttft, itl, chunk, wrong, ready
        #: extra seconds for the n-th plain 1-token request (a first compile landing in a t(1) pass), in order
        self.one_token_stalls = list(one_token_stalls)
        self.one_token_requests = 0
        #: extra seconds at every gap of the n-th streamed request (a stalled decode), in order
        self.stream_stalls = list(stream_stalls)
        self.stream_requests = 0
        self.drafts = self.accepted = 0
        self.lock = threading.Lock()
        self.bodies: list[dict] = []

    def tokens(self, body: dict) -> list[int]:
        spec = json.loads((Path(body["model"]) / "recall_spec.json").read_text())
        n = body["max_tokens"]
        if self.wrong:
            return [SPECIAL_TOKENS + spec["chain"]] * n
        return walk(spec, body["prompt"], n)


def handler(stub: Stub):
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *_args):
            pass

        def _send(self, code: int, text: str, ctype: str = "text/plain") -> None:
            data = text.encode()
            self.send_response(code)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self):
            if self.path == "/health":
                self._send(200 if stub.ready else 503, "")
            elif self.path == "/version":
                self._send(200, json.dumps({"version": "stub"}), "application/json")
            elif self.path == "/metrics":
                labels = 'engine="0",model_name="m"'
                self._send(
                    200,
                    "# HELP vllm:spec_decode_num_drafts Number of spec decoding drafts.\n"
                    f"vllm:spec_decode_num_drafts_total{{{labels}}} {float(stub.drafts)}\n"
                    f'vllm:spec_decode_num_accepted_tokens_per_pos_total{{{labels},position="0"}} '
                    f"{float(stub.accepted)}\n"
                    f'vllm:spec_decode_num_accepted_tokens_per_pos_total{{{labels},position="1"}} 0.0\n',
                )
            else:
                self._send(404, "not found")

        def do_POST(self):
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            if not isinstance(body.get("prompt"), list) or not body.get("return_token_ids"):
                self._send(400, "a token-id prompt and return_token_ids are expected")
                return
            with stub.lock:
                stub.bodies.append(body)
                stub.drafts += 4
                stub.accepted += 3
            toks = stub.tokens(body)
            stall = 0.0
            if not body.get("stream") and body["max_tokens"] == 1:
                with stub.lock:
                    n, stub.one_token_requests = stub.one_token_requests, stub.one_token_requests + 1
                stall = stub.one_token_stalls[n] if n < len(stub.one_token_stalls) else 0.0
            if not body.get("stream"):
                time.sleep(stall + stub.ttft + stub.itl * max(0, -(-(len(toks) - 1) // stub.chunk)))
                choice = {"index": 0, "text": "", "token_ids": toks, "finish_reason": "length"}
                self._send(200, json.dumps({"choices": [choice]}), "application/json")
                return
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()

            def event(obj) -> None:
                data = f"data: {obj if isinstance(obj, str) else json.dumps(obj)}\n\n".encode()
                self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
                self.wfile.flush()

            with stub.lock:
                n, stub.stream_requests = stub.stream_requests, stub.stream_requests + 1
            gap_stall = stub.stream_stalls[n] if n < len(stub.stream_stalls) else 0.0
            time.sleep(stub.ttft)
            event({"choices": [{"index": 0, "text": "", "token_ids": toks[:1]}]})
            for i in range(1, len(toks), stub.chunk):
                time.sleep(stub.itl + gap_stall)
                event({"choices": [{"index": 0, "text": "", "token_ids": toks[i : i + stub.chunk]}]})
            event({"choices": [], "usage": {"completion_tokens": len(toks)}})
            event("[DONE]")
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()

    return Handler


def start(stub: Stub, port: int = 0) -> ThreadingHTTPServer:
    """Serve `stub` on 127.0.0.1 from a daemon thread; `server_address[1]` is the port."""
    server = ThreadingHTTPServer(("127.0.0.1", port), handler(stub))
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--argv-file")
    ap.add_argument("--stub-never-ready", action="store_true")
    ap.add_argument("--stub-child-pid-file", help="start a sleeping child (in the group) and write its pid here")
    ap.add_argument("--stub-ignore-term", action="store_true", help="ignore SIGTERM (only SIGKILL stops it)")
    args, _rest = ap.parse_known_args()
    if args.argv_file:
        Path(args.argv_file).write_text(json.dumps({"argv": sys.argv[1:], "env": dict(os.environ)}))
    if args.stub_ignore_term:
        import signal

        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    if args.stub_child_pid_file:
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
        Path(args.stub_child_pid_file).write_text(str(child.pid))
    sys.stdout.write(KV_LOG)
    sys.stdout.flush()
    server = ThreadingHTTPServer(("127.0.0.1", args.port), handler(Stub(ready=not args.stub_never_ready)))
    server.daemon_threads = True
    server.serve_forever()


if __name__ == "__main__":
    main()
