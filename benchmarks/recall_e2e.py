"""End-to-end decode speed of the recall model at GLM-5's per-layer shape, with MTP acceptance set by construction.

The recall model (`vllm_compose.proof.recall_model`) makes MTP's first draft right for a chosen fraction of the
chain (`with_draft_acceptance`), so the speed-up of MTP 1 / 2 against no MTP is measured along a curve of
acceptance, not at one point. Each configuration runs in its own engine (one process): a batch of `--batch`
concurrent requests of `--context` tokens, greedy, generated twice, with 1 and with `--tokens` new tokens; decode
time is the difference (prefill cancels), so

    per-request decode tok/s = (tokens - 1) / (t(tokens) - t(1)),   aggregate = batch x that.

The pair is timed once cold (the first time the engine sees the batch) and `--repeats` times warm; the headline is
the warm pairs' median (`run` says why). Every step of every timed generation is recorded (`step_timing`: what it
scheduled and produced, its target, sampling and draft spans on the GPU, its CUDA-graph mode), and `explain` (in
`mtp_gain`) predicts MTP's speed-up from the step times and tokens per step and says how far the headline is from
it. The tokens are judged against the prediction too: a fast wrong run is not a result. `run` is offline
(`LLM.generate`); `serve` measures the same model as users run it, through `vllm serve` with the user guide's flags
and an HTTP client, streamed (TTFT, inter-token latency, prefill tok/s) and not (the same difference as offline):
see `recall_serve.py`. Rows carry a `path`: offline, serve, serve-stream.

    python benchmarks/recall_e2e.py model --out /tmp/vc/recall_a80 --acceptance 0.8      # on the GPU, 10-20 s
    python benchmarks/recall_e2e.py run --model /tmp/vc/recall_a80 --mtp 1 --batch 8 --out r.json
    python benchmarks/recall_e2e.py serve --model /tmp/vc/recall_a80 --mtp 1 --batches 1,8,32 --out s.json
    python benchmarks/recall_e2e.py table r1.json s.json ...                              # markdown rows
    python benchmarks/recall_e2e.py explain r0.json r1.json                               # MTP 1 against MTP 0

Needs a GPU and vLLM (run it as lab/device/prove.sh runs the suites: the staged site on PYTHONPATH); `table` and
`explain` run anywhere.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
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
    """Markdown rows: path (offline, serve, serve-cached, serve-stream), mode, MTP, designed and measured first-draft
    acceptance, batch, context, decode rates, the share of t(N) the rate rests on, the rate of the same cached
    prompts streamed, the rate their median gap between chunks gives and their rate while every request decodes
    (served cached rows), TTFT and prefill (streamed rows), KV bytes per token (served rows), tokens right."""
    rows = [
        "| path | mode | MTP | acceptance (designed) | first drafts accepted | batch | context | decode tok/s per request "
        "| aggregate | decode share | streamed from cache tok/s | median-gap tok/s | all-decoding tok/s | TTFT ms (mean) "
        "| prefill tok/s | KV bytes/token | tokens as predicted |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]

    def key(r: dict):
        return (r["mode"], r["batch"], r["mtp"], r["acceptance"], PATHS.index(r.get("path", "offline")))

    def opt(value, fmt: str = "{}") -> str:
        return "-" if value is None else fmt.format(value)

    for r in sorted(results, key=key):
        rows.append(
            f"| {r.get('path', 'offline')} | {r['mode']} | {r['mtp']} | {r['acceptance']:.2f} | "
            f"{opt(r.get('first_draft_accepted'), '{:.2f}')} | {r['batch']} | {r['context']:,} | "
            f"{opt(r['per_request_tok_s'])} | {opt(r['aggregate_tok_s'])} | {opt(r.get('decode_share'), '{:.2f}')} | "
            f"{opt(r.get('stream_cached_tok_s'))} | {opt(r.get('stream_cached_gap_tok_s'))} | "
            f"{opt(r.get('stream_cached_window_tok_s'))} | "
            f"{opt((r.get('ttft_ms') or {}).get('mean'))} | "
            f"{opt(r.get('prefill_tok_s'))} | {opt(r.get('kv_bytes_per_token'), '{:,.0f}')} | "
            f"{'yes' if r['as_predicted'] else 'NO'} |"
        )
    return "\n".join(rows) + "\n"


#: a result's `path`, in the order the table lists a configuration's rows (offline results before it had none)
PATHS = ("offline", "serve", "serve-cached", "serve-stream")


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


def _delta(before: dict, after: dict) -> dict:
    """The spec-decode counters one generation added (lists per draft position, numbers otherwise)."""
    return {
        k: (
            [a - b for a, b in zip(v, before.get(k, [0] * len(v)), strict=False)]
            if isinstance(v, list)
            else v - before.get(k, 0)
        )
        for k, v in after.items()
        if k != "error"
    }


def _timed_pair(llm, prompts, tokens: int, label: str, batch: int) -> dict:
    """Generate the batch with 1 and with `tokens` new tokens, each timed from its `step_timing.arm` on; the rates,
    the tokens of the long generation and the counters it added."""
    import step_timing

    from vllm_compose.proof.recall_run import generate, spec_metrics

    before = spec_metrics(llm)
    t0 = step_timing.arm(f"{label}/one")
    generate(llm, prompts, 1)
    t_one = time.perf_counter() - t0
    t0 = step_timing.arm(f"{label}/all")
    got = generate(llm, prompts, tokens)
    t_all = time.perf_counter() - t0
    after = spec_metrics(llm)
    return {
        "label": label,
        "t_one_s": round(t_one, 4),
        "t_all_s": round(t_all, 4),
        **decode_rates(batch, tokens, t_one, t_all),
        "got": got,
        "spec_metrics": _delta(before, after),
    }


def designed_drafts(spec, prompts, tokens: int, k: int) -> dict:
    """What the recall model's design makes MTP k do on these prompts (`recall_model.predict_drafts`), pooled over
    the requests as the engine's counters pool them, and each request's decode steps."""
    from vllm_compose.proof.recall_model import predict_drafts

    counters = [predict_drafts(spec, p, tokens, k) for p in prompts]
    drafts = sum(c.num_drafts for c in counters)
    accepted = sum(c.num_accepted_tokens for c in counters)
    return {
        "drafts": drafts,
        "draft_tokens": sum(c.num_draft_tokens for c in counters),
        "accepted": accepted,
        "accepted_per_step": round(accepted / drafts, 4),
        "first_draft_rate": round(sum(c.num_accepted_tokens_per_pos[0] for c in counters) / drafts, 4),
        "steps_per_request": [c.num_drafts for c in counters],
    }


def _median(values: list[float]) -> float:
    return round(statistics.median(values), 4)


def run(args) -> dict:
    """The `run` command: one engine. The protocol, in order:

    1. warm-up: one request of the batch, 4 tokens (what the first rows did before timing);
    2. the cold pair: t(1) and t(N) of the whole batch, the first time the engine sees it (the first rows' headline:
       a one-off cost there, e.g. a kernel compiled for a new shape, lands in t(1) and is subtracted from decode);
    3. `--repeats` warm pairs: the headline is the median of their rates (the cold pair's when there are none);
    4. step records (`step_timing`, unless --no-steps) of every generation; the last pair's are summarized for
       `explain` (`timing`), the cold pair's and the last pair's kept whole (`step_records`).
    Every t(N) generation is judged against the prediction."""
    import step_timing

    from vllm_compose.proof.recall_model import make_prompts, predict, spec_from_json
    from vllm_compose.proof.recall_run import Suite, engine, generate
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
    hooks: dict = {"off": "--no-steps"}
    if args.steps:
        try:
            hooks = step_timing.install(llm)
        except step_timing.StepTimingError as exc:  # the rates are still measured; the row says why no steps
            hooks = {"error": str(exc)}
    generate(llm, prompts[:1], 4)  # warm-up
    pairs = [_timed_pair(llm, prompts, args.tokens, "cold", args.batch)]
    pairs += [_timed_pair(llm, prompts, args.tokens, f"warm{i}", args.batch) for i in range(args.repeats)]
    records = step_timing.collect()
    warm = pairs[1:] or pairs
    want = [predict(spec, p, args.tokens) for p in prompts]
    last = pairs[-1]
    row = {
        "path": "offline",
        "mode": "graphs" if args.graphs else "eager",
        "mtp": args.mtp,
        "acceptance": 1.0 - len(spec.mtp_wrong) / spec.chain,
        "first_draft_accepted": _first_draft_rate(last["spec_metrics"], args.mtp) if args.mtp else None,
        "batch": args.batch,
        "context": args.context,
        "tokens": args.tokens,
        "t_one_s": _median([p["t_one_s"] for p in warm]),
        "t_all_s": _median([p["t_all_s"] for p in warm]),
        "per_request_tok_s": _median([p["per_request_tok_s"] for p in warm]),
        "aggregate_tok_s": _median([p["aggregate_tok_s"] for p in warm]),
        "headline": "median of the warm pairs" if args.repeats else "the cold pair",
        "cold": {k: pairs[0][k] for k in ("t_one_s", "t_all_s", "per_request_tok_s")},
        "pairs": [{k: p[k] for k in ("label", "t_one_s", "t_all_s", "per_request_tok_s")} for p in pairs],
        "as_predicted": all(p["got"] == want for p in pairs),
        "spec_metrics": last["spec_metrics"],
        "designed": designed_drafts(spec, prompts, args.tokens, args.mtp) if args.mtp else None,
        "engine": step_timing.engine_facts(llm),
        "step_hooks": hooks,
    }
    row.update(_timing(records, pairs, args.batch))
    return row


def _timing(records: dict, pairs: list[dict], batch: int) -> dict:
    """The row's step figures: every generation summarized, the last pair's as `timing` (what `explain` reads), the
    cold pair's and the last pair's records kept whole."""
    import step_timing

    gens = {g["label"]: g for g in records.get("generations", [])}
    if not gens:
        return {"timing": None, "step_summaries": {}, "step_records": {}}
    summaries = {}
    for label, g in gens.items():
        try:
            summaries[label] = step_timing.summarize_generation(g, batch)
        except step_timing.StepTimingError as exc:
            summaries[label] = {"error": str(exc)}
    last = pairs[-1]
    one, all_ = summaries.get(f"{last['label']}/one"), summaries.get(f"{last['label']}/all")
    timing = None
    if all_ and "error" not in all_:
        timing = {"pair": last["label"], "t_one_s": last["t_one_s"], "t_all_s": last["t_all_s"], "one": one,
                  "all": all_, "spans": records.get("spans")}  # fmt: skip
    keep = {f"cold/{p}" for p in ("one", "all")} | {f"{last['label']}/{p}" for p in ("one", "all")}
    return {
        "timing": timing,
        "step_summaries": summaries,
        "step_records": {label: gens[label] for label in sorted(keep) if label in gens},
    }


def explain_files(paths: list[Path], out: Path | None) -> int:
    """The `explain` command: MTP k rows against the MTP 0 rows of the same configuration, as markdown (and JSON)."""
    from mtp_gain import ExplainError, explain, render

    rows = [r for r in read_results(paths) if r.get("path", "offline") == "offline"]
    try:
        gains = explain([r for r in rows if r.get("mtp") == 0], [r for r in rows if r.get("mtp")])
    except ExplainError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return int(exc.exit_code)
    sys.stdout.write(render(gains))
    if out is not None:
        out.write_text(json.dumps([g.to_json() for g in gains], indent=1))
    return 0 if all(g.explained and g.acceptance_agrees for g in gains) else 1


def _interrupt(signum, _frame):
    raise KeyboardInterrupt(f"signal {signum}")


def serve(args) -> int:
    """The `serve` command: rows printed as they come, all of them written to --out; the server is gone after."""
    from recall_serve import Plan, ServeError, measured_pairs
    from recall_serve import run as serve_run

    from vllm_compose.errors import ExitCode

    try:
        batches = [int(b) for b in args.batches.split(",")]
    except ValueError:
        print(f"--batches {args.batches!r}: comma-separated whole numbers, e.g. 1,8,32", file=sys.stderr)
        return int(ExitCode.USAGE)
    try:
        contexts = [int(c) for c in str(args.context).split(",")]
    except ValueError:
        print(f"--context {args.context!r}: comma-separated whole numbers, e.g. 8192,32768,131072", file=sys.stderr)
        return int(ExitCode.USAGE)
    try:
        skip = frozenset(tuple(int(n) for n in pair.split("x", 1)) for pair in args.skip.split(",") if pair)
        if any(len(pair) != 2 for pair in skip):
            raise ValueError
    except ValueError:
        print(f"--skip {args.skip!r}: comma-separated CONTEXTxBATCH pairs, e.g. 131072x8,131072x32", file=sys.stderr)
        return int(ExitCode.USAGE)
    if args.pair_repeats < 1:
        print(f"--pair-repeats {args.pair_repeats}: at least 1", file=sys.stderr)
        return int(ExitCode.USAGE)
    plan = Plan(
        args.model,
        batches,
        contexts,
        args.tokens,
        args.mtp,
        args.graphs,
        args.prefix_caching,
        skip,
        args.reuse_prompts,
        args.pair_repeats,
    )
    try:
        measured_pairs(plan)
    except ValueError as exc:
        print(f"--skip {args.skip!r}: {exc}", file=sys.stderr)
        return int(ExitCode.USAGE)
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
    r.add_argument("--repeats", type=int, default=3, help="warm pairs after the cold one; the headline is their median")
    r.add_argument("--no-steps", dest="steps", action="store_false", help="no step records (step_timing)")
    r.add_argument("--out", required=True)
    s = sub.add_parser("serve", help="one configuration through `vllm serve`, batch sizes one after another")
    s.add_argument("--model", required=True)
    s.add_argument("--mtp", type=int, default=0)
    s.add_argument("--batches", default="1,8,32", help="comma-separated batch sizes (concurrent requests)")
    s.add_argument(
        "--context", default="8192", help="prompt length(s), comma-separated: each at every batch size, one server"
    )
    s.add_argument("--tokens", type=int, default=64)
    s.add_argument(
        "--skip", default="", help="CONTEXTxBATCH pairs not measured, comma-separated (e.g. 131072x8,131072x32)"
    )
    s.add_argument("--graphs", action="store_true", help="CUDA graphs for decode (no Inductor), else --enforce-eager")
    s.add_argument("--prefix-caching", action="store_true", help="leave vLLM's prefix caching on (off as offline)")
    s.add_argument(
        "--reuse-prompts",
        action="store_true",
        help="the plain passes resend the streamed pass's prompts, from the prefix cache (rows `serve-cached`): one "
        "prefill a pair, and a decode rate that is not lost in the noise of two prefills at long prompts and large "
        "batches",
    )
    s.add_argument(
        "--pair-repeats",
        type=int,
        default=5,
        help="with --reuse-prompts: times the cached pair is timed after an untimed one (the fastest of each kept)",
    )
    s.add_argument("--port", type=int, default=0, help="default: a free one")
    s.add_argument("--ready-timeout", type=float, default=600.0, help="seconds for the server to answer /health")
    s.add_argument("--python", default=sys.executable, help="the interpreter that runs `vllm serve`")
    s.add_argument("--log", type=Path, help="the server's log (default: OUT with .server.log)")
    s.add_argument("--out", required=True, type=Path)
    t = sub.add_parser("table", help="markdown rows of result files")
    t.add_argument("results", nargs="+", type=Path)
    x = sub.add_parser("explain", help="MTP k's speed-up from its step times and tokens per step (mtp_gain)")
    x.add_argument("results", nargs="+", type=Path, help="`run` result files: MTP 0 and MTP k of one configuration")
    x.add_argument("--json", type=Path, help="also write the explanations as JSON here")
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
    if args.cmd == "explain":
        return explain_files(args.results, args.json)
    if args.repeats < 0 or args.tokens < 2:
        from vllm_compose.errors import ExitCode

        print(f"--repeats {args.repeats}, --tokens {args.tokens}: need >= 0 and >= 2", file=sys.stderr)
        return int(ExitCode.USAGE)
    result = run(args)
    Path(args.out).write_text(json.dumps(result, indent=1))
    print(json.dumps({k: result[k] for k in ("mode", "mtp", "batch", "per_request_tok_s", "as_predicted")}))
    return 0 if result["as_predicted"] else 1


if __name__ == "__main__":
    sys.exit(main())
