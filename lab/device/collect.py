"""Gather a validation session's results into at most three files under $OUT and print the verdict table.

    python3 lab/device/collect.py /tmp/vc $OUT
results.json  every run's JSON (token ids, timings, errors; a failed run's exception lines from its log as
              `log_errors`) plus the equality verdicts against the PP1 baseline
records.json  per run: the model classes built, the capability call sites that asked (under the sm_80 override)
              and the Triton kernels compiled
logs.txt      the last lines of each run's log
Keep what comes back under lab/results/<session>/: the status table's GPU column (`vllm-compose status`) reads it.
"""

import json
import re
import sys
from pathlib import Path

# the device machine runs this from a copy of the working tree, where vllm_compose is not installed
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "src"))
from vllm_compose.proof.expected import first_difference, judge  # noqa: E402
from vllm_compose.proof.tinyglm import TinyGlmSpec, TokenCycle, prompts  # noqa: E402

#: label prefix -> (baseline run, model folder under the stage, judged against the cycle prediction)
MODELS = {
    "composed": ("composed_pp1", "tiny", False),
    "fixed": ("fixed_pp1", "tiny_fixed", False),
    "cycle": ("cycle_pp1", "tiny_cycle", True),
    "cyclewrong": ("cyclewrong_pp1_mtp2", "tiny_cycle_wrong", True),
}


def margin_at(run, prompt, position):
    """Top-1 minus top-2 log-prob of `run` at one position (None without log-probs)."""
    try:
        lps = sorted((lp for _t, lp in run["top_logprobs"][prompt][position]), reverse=True)
    except (KeyError, IndexError, TypeError):
        return None
    return round(lps[0] - lps[1], 4) if len(lps) > 1 else None


def verdicts_for(stage, runs):
    """Cycle-model runs: `expected.judge` (prediction, baseline, spec counters, log-probs). Others: first token
    difference from their model's PP1 baseline, with both runs' top-2 margins there."""
    verdicts = {}
    for prefix, (baseline, folder, predicted) in MODELS.items():
        family = {k: r for k, r in runs.items() if k.split("_")[0] == prefix}
        if predicted and family:
            spec = TinyGlmSpec(**json.loads((stage / folder / "tinyglm_spec.json").read_text()))
            n = max((len(r.get("token_ids") or []) for r in family.values()), default=0)  # prompts per run
            verdicts.update(judge(family, TokenCycle.of(spec), prompts(spec, n), baseline))
    for label, r in runs.items():
        base_label, _folder, predicted = MODELS.get(label.split("_")[0], MODELS["composed"])
        base = runs.get(base_label, {})
        if predicted or label == base_label or not r.get("ok") or not base.get("ok"):
            continue
        diff = first_difference(base["token_ids"], r["token_ids"])
        v = {"baseline": base_label, "identical_to_baseline": diff is None, "first_difference_from_baseline": diff}
        if diff and "position" in diff:
            v["baseline_top2_margin_there"] = margin_at(base, diff["prompt"], diff["position"])
            v["other_top2_margin_there"] = margin_at(r, diff["prompt"], diff["position"])
        verdicts[label] = v
    return verdicts


#: a Python exception line as vLLM's processes log it ("(EngineCore pid=12) ValueError: ...", "RuntimeError: ...")
_EXCEPTION = re.compile(r"^(?:\(\w+(?: pid=\d+)?\) )?(?:[\w.]+\.)?(\w*(?:Error|Exception|Exit)): (.+)$")


def log_errors(text: str, most: int = 6) -> list[str]:
    """The distinct exception lines of a run's log, in order (a failing engine's driver only says "Engine core
    initialization failed. See root cause above"; the cause is a worker's or the engine core's own exception)."""
    seen: list[str] = []
    for line in text.splitlines():
        m = _EXCEPTION.match(line.strip())
        if m and f"{m[1]}: {m[2]}" not in seen:
            seen.append(f"{m[1]}: {m[2]}")
    return seen[:most]


def main():
    stage, out = Path(sys.argv[1]), Path(sys.argv[2])
    out.mkdir(parents=True, exist_ok=True)
    runs = {p.stem: json.loads(p.read_text()) for p in sorted((stage / "res").glob("*.json"))}
    for label, r in runs.items():
        log = stage / "log" / f"{label}.log"
        if not r.get("ok") and log.exists():
            r["log_errors"] = log_errors(log.read_text(errors="replace"))
    verdicts = verdicts_for(stage, runs)
    (out / "results.json").write_text(json.dumps({"runs": runs, "verdicts": verdicts}, indent=1))
    records = {}
    for d in sorted((stage / "rec").glob("*")):
        caps, kernels, other, classes = [], {}, [], []
        for f in d.glob("*.jsonl"):
            for line in f.read_text().splitlines():
                try:
                    r = json.loads(line)
                except ValueError:
                    continue
                if r["kind"] == "capability":
                    caps.append(r["caller"] + "  <- " + r["asked"])
                elif r["kind"] == "model-class":
                    classes.append({k: r.get(k) for k in ("class", "prefix")})
                elif r["kind"] == "triton":
                    spec = json.loads(r["specialization"]) if r.get("specialization") else {}
                    key = (r["module"], r["qualname"], json.dumps(spec, sort_keys=True))
                    kernels[key] = {"module": r["module"], "qualname": r["qualname"], "specialization": spec}
                else:
                    other.append(r)
        records[d.name] = {
            "model_classes": [dict(t) for t in sorted({tuple(c.items()) for c in classes})],
            "capability_callers": sorted(set(caps)),
            "triton_kernels": list(kernels.values()),
            "other": other[:60],
        }
    (out / "records.json").write_text(json.dumps(records, indent=1))
    logs = []
    for p in sorted((stage / "log").glob("*.log")):
        lines = p.read_text(errors="replace").splitlines()
        keep = [
            ln
            for ln in lines
            if any(w in ln for w in ("Error", "error", "ssert", "backend", "Backend", "Using", "kernel"))
        ]
        logs.append(
            f"===== {p.stem} ({len(lines)} lines)\n" + "\n".join(keep[-120:]) + "\n--- tail\n" + "\n".join(lines[-40:])
        )
    (out / "logs.txt").write_text("\n".join(logs))
    # full logs of the runs that failed (the first lines of a device-side assert are the ones that name it)
    for label, r in runs.items():
        log = stage / "log" / f"{label}.log"
        if not r.get("ok") and log.exists():
            (out / "failed-logs").mkdir(exist_ok=True)
            (out / "failed-logs" / log.name).write_bytes(log.read_bytes()[:2_000_000])
    print(f"{'run':28} {'ok':5} {'tok':>6} {'tok/s':>8} {'bench tok/s':>11} {'accept':>7}  verdict / error")
    for label, r in runs.items():
        b = r.get("bench") or {}
        v = verdicts.get(label)
        note = (r.get("error") or "")[:150]
        if r.get("log_errors"):
            note += " | log: " + r["log_errors"][-1][:150]
        if v:
            parts = []
            if "as_predicted" in v:
                parts.append(
                    "as predicted" if v["as_predicted"] else f"OFF PREDICTION {v['first_difference_from_prediction']}"
                )
            if "identical_to_baseline" in v:
                parts.append(
                    "= baseline" if v["identical_to_baseline"] else f"DIFFERS {v['first_difference_from_baseline']}"
                )
            if "spec_as_predicted" in v:
                parts.append(
                    "spec counters "
                    + (
                        "as predicted"
                        if v["spec_as_predicted"]
                        else f"OFF {v['spec_measured']} vs {v['spec_predicted']}"
                    )
                )
            note = "; ".join(parts)
        tps = r.get("tok_per_s")
        print(
            f"{label:28} {str(r.get('ok')):5} {r.get('generated_tokens', 0):>6} {tps or 0:8.1f} "
            f"{b.get('decode_tok_per_s') or 0:11.1f} {str(b.get('acceptance_rate')):>7}  {note}"
        )
    for label, rec in records.items():
        print(
            f"{label}: {len(rec['triton_kernels'])} triton compilations, {len(rec['capability_callers'])} capability call sites"
            f"; model classes: {', '.join(c['class'] for c in rec['model_classes']) or 'none recorded'}"
        )


if __name__ == "__main__":
    main()
