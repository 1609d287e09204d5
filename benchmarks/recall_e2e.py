"""End-to-end decode speed of the recall model at GLM-5's per-layer shape, with MTP acceptance set by construction.

The recall model (`vllm_compose.proof.recall_model`) makes MTP's first draft right for a chosen fraction of the
chain (`with_draft_acceptance`), so the speed-up of MTP 1 / 2 against no MTP is measured along a curve of
acceptance, not at one point. Each configuration runs in its own engine (one process): a batch of `--batch`
concurrent requests of `--context` tokens, greedy, generated twice, with 1 and with `--tokens` new tokens; decode
time is the difference (prefill cancels), so

    per-request decode tok/s = (tokens - 1) / (t(tokens) - t(1)),   aggregate = batch x that.

The tokens are judged against the prediction too: a fast wrong run is not a result. `run` is offline
(`LLM.generate`); `serve` measures the same model as users run it, through `vllm serve` with the user guide's flags
and an HTTP client, streamed (TTFT, inter-token latency, prefill tok/s) and not (the same difference as offline):
see `recall_serve.py`. Rows carry a `path`: offline, serve, serve-stream.

    python benchmarks/recall_e2e.py model --out /tmp/vc/recall_a80 --acceptance 0.8      # on the GPU, 10-20 s
    python benchmarks/recall_e2e.py run --model /tmp/vc/recall_a80 --mtp 1 --batch 8 --out r.json
    python benchmarks/recall_e2e.py serve --model /tmp/vc/recall_a80 --mtp 1 --batches 1,8,32 --out s.json
    python benchmarks/recall_e2e.py table r1.json s.json ...                              # markdown rows

Needs a GPU and vLLM (run it as lab/device/prove.sh runs the suites: the staged site on PYTHONPATH).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))


def decode_rates(batch: int, tokens: int, t_one: float, t_all: float) -> dict:
    """Per-request and aggregate decode tok/s from the two timings (seconds for 1 and for `tokens` new tokens)."""
    if tokens < 2 or t_all <= t_one:
        raise ValueError(f"cannot derive a decode rate from tokens={tokens}, t(1)={t_one}, t({tokens})={t_all}")
    per_request = (tokens - 1) / (t_all - t_one)
    return {"per_request_tok_s": round(per_request, 2), "aggregate_tok_s": round(per_request * batch, 2)}


def table(results: list[dict]) -> str:
    """Markdown rows: path (offline, serve, serve-stream), mode, MTP, designed and measured first-draft acceptance,
    batch, context, decode rates, TTFT and prefill (streamed rows), KV bytes per token (served rows), tokens right."""
    rows = [
        "| path | mode | MTP | acceptance (designed) | first drafts accepted | batch | context | decode tok/s per request "
        "| aggregate | TTFT ms (mean) | prefill tok/s | KV bytes/token | tokens as predicted |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]

    def key(r: dict):
        return (r["mode"], r["batch"], r["mtp"], r["acceptance"], PATHS.index(r.get("path", "offline")))

    def opt(value, fmt: str = "{}") -> str:
        return "-" if value is None else fmt.format(value)

    for r in sorted(results, key=key):
        rows.append(
            f"| {r.get('path', 'offline')} | {r['mode']} | {r['mtp']} | {r['acceptance']:.2f} | "
            f"{opt(r.get('first_draft_accepted'), '{:.2f}')} | {r['batch']} | {r['context']:,} | "
            f"{r['per_request_tok_s']} | {r['aggregate_tok_s']} | {opt((r.get('ttft_ms') or {}).get('mean'))} | "
            f"{opt(r.get('prefill_tok_s'))} | {opt(r.get('kv_bytes_per_token'), '{:,.0f}')} | "
            f"{'yes' if r['as_predicted'] else 'NO'} |"
        )
    return "\n".join(rows) + "\n"


#: a result's `path`, in the order the table lists a configuration's rows (offline results before it had none)
PATHS = ("offline", "serve", "serve-stream")


def read_results(paths: list[Path]) -> list[dict]:
    """The rows of result files: `run` writes one row a file, `serve` a list."""
    out = []
    for p in paths:
        data = json.loads(p.read_text())
        out += data if isinstance(data, list) else [data]
    return out


def _first_draft_rate(metrics: dict, mtp: int) -> float | None:
    from vllm_compose.proof.recall_run import judge_drafts

    drafts = judge_drafts(metrics, mtp)
    if not drafts["drafts"] or not drafts["accepted_per_position"]:
        return None
    return drafts["accepted_per_position"][0] / drafts["drafts"]


def run(args) -> dict:

    from vllm_compose.proof.recall_model import make_prompts, predict, spec_from_json
    from vllm_compose.proof.recall_run import Suite, engine, generate, spec_metrics
    from vllm_compose.proof.suites import GRAPHS, SERVING_ENV

    os.environ.update(SERVING_ENV)
    spec = spec_from_json(json.loads((Path(args.model) / "recall_spec.json").read_text()))
    lengths = [args.context + 64 * i for i in range(args.batch)]  # distinct lengths, distinct planted positions
    suite = Suite(
        label="e2e",
        model_dir=args.model,
        lengths=lengths,
        max_tokens=args.tokens,
        mtp=args.mtp,
        eager=not args.graphs,
        compilation=GRAPHS if args.graphs else None,
    )
    llm = engine(suite, spec)
    prompts = make_prompts(spec, lengths)
    generate(llm, prompts[:1], 4)  # warm-up
    t0 = time.perf_counter()
    generate(llm, prompts, 1)
    t_one = time.perf_counter() - t0
    before = spec_metrics(llm)
    t0 = time.perf_counter()
    got = generate(llm, prompts, args.tokens)
    t_all = time.perf_counter() - t0
    after = spec_metrics(llm)
    delta = {
        k: (
            [a - b for a, b in zip(v, before.get(k, [0] * len(v)), strict=False)]
            if isinstance(v, list)
            else v - before.get(k, 0)
        )
        for k, v in after.items()
        if k != "error"
    }
    return {
        "path": "offline",
        "mode": "graphs" if args.graphs else "eager",
        "mtp": args.mtp,
        "acceptance": 1.0 - len(spec.mtp_wrong) / spec.chain,
        "first_draft_accepted": _first_draft_rate(delta, args.mtp) if args.mtp else None,
        "batch": args.batch,
        "context": args.context,
        "tokens": args.tokens,
        "t_one_s": round(t_one, 3),
        "t_all_s": round(t_all, 3),
        **decode_rates(args.batch, args.tokens, t_one, t_all),
        "as_predicted": all(g == predict(spec, p, args.tokens) for g, p in zip(got, prompts, strict=True)),
        "spec_metrics": delta,
    }


def _interrupt(signum, _frame):
    raise KeyboardInterrupt(f"signal {signum}")


def serve(args) -> int:
    """The `serve` command: rows printed as they come, all of them written to --out; the server is gone after."""
    from recall_serve import Plan, ServeError
    from recall_serve import run as serve_run

    from vllm_compose.errors import ExitCode

    try:
        batches = [int(b) for b in args.batches.split(",")]
    except ValueError:
        print(f"--batches {args.batches!r}: comma-separated whole numbers, e.g. 1,8,32", file=sys.stderr)
        return int(ExitCode.USAGE)
    plan = Plan(args.model, batches, args.context, args.tokens, args.mtp, args.graphs, args.prefix_caching)
    log = args.log or args.out.with_suffix(".server.log")
    # `timeout` and the device's limit send SIGTERM: unwind as on Ctrl-C, so the server's group is killed
    signal.signal(signal.SIGTERM, _interrupt)

    # rows so far go to OUT.partial as they come (a late failure keeps the earlier batches); OUT only when all ran
    partial, done = args.out.with_name(args.out.name + ".partial"), []
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.unlink(missing_ok=True)

    def show(r: dict) -> None:
        done.append(r)
        partial.write_text(json.dumps(done, indent=1))
        print(json.dumps({k: r.get(k) for k in ("path", "mode", "mtp", "batch", "per_request_tok_s", "as_predicted")}))

    try:
        rows = serve_run(plan, log, port=args.port or None, python=args.python, ready_timeout_s=args.ready_timeout,
                         on_row=show)  # fmt: skip
    except (ServeError, ValueError) as exc:
        kept = f" ({len(done)} rows so far in {partial})" if done else ""
        print(f"error: {exc}{kept}", file=sys.stderr)
        return int(getattr(exc, "exit_code", ExitCode.REFUSED))
    args.out.write_text(json.dumps(rows, indent=1))
    partial.unlink(missing_ok=True)
    return 0 if all(r["as_predicted"] for r in rows) else 1


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    m = sub.add_parser("model", help="write the recall model with a designed first-draft acceptance")
    m.add_argument("--out", required=True)
    m.add_argument("--acceptance", type=float, default=1.0)
    r = sub.add_parser("run", help="one configuration, one engine")
    r.add_argument("--model", required=True)
    r.add_argument("--mtp", type=int, default=0)
    r.add_argument("--batch", type=int, default=1)
    r.add_argument("--context", type=int, default=8192)
    r.add_argument("--tokens", type=int, default=128)
    r.add_argument("--graphs", action="store_true", help="CUDA graphs for decode (no Inductor)")
    r.add_argument("--out", required=True)
    s = sub.add_parser("serve", help="one configuration through `vllm serve`, batch sizes one after another")
    s.add_argument("--model", required=True)
    s.add_argument("--mtp", type=int, default=0)
    s.add_argument("--batches", default="1,8,32", help="comma-separated batch sizes (concurrent requests)")
    s.add_argument("--context", type=int, default=8192)
    s.add_argument("--tokens", type=int, default=64)
    s.add_argument("--graphs", action="store_true", help="CUDA graphs for decode (no Inductor), else --enforce-eager")
    s.add_argument("--prefix-caching", action="store_true", help="leave vLLM's prefix caching on (off as offline)")
    s.add_argument("--port", type=int, default=0, help="default: a free one")
    s.add_argument("--ready-timeout", type=float, default=600.0, help="seconds for the server to answer /health")
    s.add_argument("--python", default=sys.executable, help="the interpreter that runs `vllm serve`")
    s.add_argument("--log", type=Path, help="the server's log (default: OUT with .server.log)")
    s.add_argument("--out", required=True, type=Path)
    t = sub.add_parser("table", help="markdown rows of result files")
    t.add_argument("results", nargs="+", type=Path)
    args = ap.parse_args(argv)
    if args.cmd == "model":
        from vllm_compose.proof.recall_model import glm5_spec, with_draft_acceptance, write_checkpoint

        write_checkpoint(with_draft_acceptance(glm5_spec(), args.acceptance), Path(args.out), device="cuda")
        return 0
    if args.cmd == "table":
        sys.stdout.write(table(read_results(args.results)))
        return 0
    if args.cmd == "serve":
        return serve(args)
    result = run(args)
    Path(args.out).write_text(json.dumps(result, indent=1))
    print(json.dumps({k: result[k] for k in ("mode", "mtp", "batch", "per_request_tok_s", "as_predicted")}))
    return 0 if result["as_predicted"] else 1


if __name__ == "__main__":
    sys.exit(main())
