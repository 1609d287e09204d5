"""End-to-end decode speed of the recall model at GLM-5's per-layer shape, with MTP acceptance set by construction.

The recall model (`vllm_compose.validation.recall_model`) makes MTP's first draft right for a chosen fraction of the
chain (`with_draft_acceptance`), so the speed-up of MTP 1 / 2 against no MTP is measured along a curve of
acceptance, not at one point. Each configuration runs in its own engine (one process): a batch of `--batch`
concurrent requests of `--context` tokens, greedy, generated twice, with 1 and with `--tokens` new tokens; decode
time is the difference (prefill cancels), so

    per-request decode tok/s = (tokens - 1) / (t(tokens) - t(1)),   aggregate = batch x that.

The tokens are judged against the prediction too: a fast wrong run is not a result. Offline (`LLM.generate`), not
through `vllm serve`.

    python benchmarks/recall_e2e.py model --out /tmp/vc/recall_a80 --acceptance 0.8      # on the GPU, 10-20 s
    python benchmarks/recall_e2e.py run --model /tmp/vc/recall_a80 --mtp 1 --batch 8 --out r.json
    python benchmarks/recall_e2e.py table r1.json r2.json ...                             # markdown rows

Needs a GPU and vLLM (run it as lab/device/prove.sh runs the suites: the staged site on PYTHONPATH).
"""

from __future__ import annotations

import argparse
import json
import os
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
    """Markdown rows: mode, MTP, designed acceptance, measured first-draft acceptance, batch, context, rates."""
    rows = [
        "| mode | MTP | acceptance (designed) | first drafts accepted | batch | context | decode tok/s per request "
        "| aggregate | tokens as predicted |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in sorted(results, key=lambda r: (r["mode"], r["batch"], r["mtp"], r["acceptance"])):
        measured = r.get("first_draft_accepted")
        rows.append(
            f"| {r['mode']} | {r['mtp']} | {r['acceptance']:.2f} | "
            f"{'-' if measured is None else f'{measured:.2f}'} | {r['batch']} | {r['context']:,} | "
            f"{r['per_request_tok_s']} | {r['aggregate_tok_s']} | {'yes' if r['as_predicted'] else 'NO'} |"
        )
    return "\n".join(rows) + "\n"


def _first_draft_rate(metrics: dict, mtp: int) -> float | None:
    from vllm_compose.validation.recall_run import judge_drafts

    drafts = judge_drafts(metrics, mtp)
    if not drafts["drafts"] or not drafts["accepted_per_position"]:
        return None
    return drafts["accepted_per_position"][0] / drafts["drafts"]


def run(args) -> dict:

    from vllm_compose.validation.proof import GRAPHS, SERVING_ENV
    from vllm_compose.validation.recall_model import make_prompts, predict, spec_from_json
    from vllm_compose.validation.recall_run import Suite, engine, generate, spec_metrics

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
    t = sub.add_parser("table", help="markdown rows of result files")
    t.add_argument("results", nargs="+", type=Path)
    args = ap.parse_args(argv)
    if args.cmd == "model":
        from vllm_compose.validation.recall_model import glm5_spec, with_draft_acceptance, write_checkpoint

        write_checkpoint(with_draft_acceptance(glm5_spec(), args.acceptance), Path(args.out), device="cuda")
        return 0
    if args.cmd == "table":
        sys.stdout.write(table([json.loads(p.read_text()) for p in args.results]))
        return 0
    result = run(args)
    Path(args.out).write_text(json.dumps(result, indent=1))
    print(json.dumps({k: result[k] for k in ("mode", "mtp", "batch", "per_request_tok_s", "as_predicted")}))
    return 0 if result["as_predicted"] else 1


if __name__ == "__main__":
    sys.exit(main())
