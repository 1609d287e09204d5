"""Gather a validation session's results into at most three files under $OUT and print the verdict table.

    python3 device/collect.py /tmp/vc $OUT
results.json  every run's JSON (token ids, timings, errors) plus the equality verdicts against the PP1 baseline
records.json  per run: capability call sites that asked (under the sm_80 override) and the Triton kernels compiled
logs.txt      the last lines of each run's log
"""

import json
import sys
from pathlib import Path

BASELINES = {"composed": "composed_pp1", "fixed": "fixed_pp1"}


def compare(base, other):
    """First differing (prompt, position) between two runs' token ids, or None when identical."""
    for p, (a, b) in enumerate(zip(base, other, strict=False)):
        for i, (x, y) in enumerate(zip(a, b, strict=False)):
            if x != y:
                return {"prompt": p, "position": i, "baseline": x, "other": y}
        if len(a) != len(b):
            return {"prompt": p, "position": min(len(a), len(b)), "baseline_len": len(a), "other_len": len(b)}
    if len(base) != len(other):
        return {"prompts": [len(base), len(other)]}
    return None


def main():
    stage, out = Path(sys.argv[1]), Path(sys.argv[2])
    out.mkdir(parents=True, exist_ok=True)
    runs = {p.stem: json.loads(p.read_text()) for p in sorted((stage / "res").glob("*.json"))}
    verdicts = {}
    for label, r in runs.items():
        base_label = BASELINES.get(label.split("_")[0], BASELINES["composed"])
        base = runs.get(base_label, {})
        if label == base_label or not r.get("ok") or not base.get("ok") or "token_ids" not in r:
            continue
        diff = compare(base["token_ids"], r["token_ids"])
        v = {"baseline": base_label, "identical": diff is None, "first_difference": diff}
        if diff and "position" in diff and base.get("top2_margins"):
            v["baseline_top2_margin_there"] = base["top2_margins"][diff["prompt"]][diff["position"]]
        if diff and "position" in diff and r.get("top2_margins"):
            v["other_top2_margin_there"] = r["top2_margins"][diff["prompt"]][diff["position"]]
        verdicts[label] = v
    (out / "results.json").write_text(json.dumps({"runs": runs, "verdicts": verdicts}, indent=1))
    records = {}
    for d in sorted((stage / "rec").glob("*")):
        caps, kernels, other = [], {}, []
        for f in d.glob("*.jsonl"):
            for line in f.read_text().splitlines():
                try:
                    r = json.loads(line)
                except ValueError:
                    continue
                if r["kind"] == "capability":
                    caps.append(r["caller"] + "  <- " + r["asked"])
                elif r["kind"] == "triton":
                    spec = json.loads(r["specialization"]) if r.get("specialization") else {}
                    key = (r["module"], r["qualname"], json.dumps(spec, sort_keys=True))
                    kernels[key] = {"module": r["module"], "qualname": r["qualname"], "specialization": spec}
                else:
                    other.append(r)
        records[d.name] = {
            "capability_callers": sorted(set(caps)),
            "triton_kernels": list(kernels.values()),
            "other": other[:20],
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
    print(f"{'run':28} {'ok':5} {'tok':>6} {'tok/s':>8} {'bench tok/s':>11} {'accept':>7}  verdict / error")
    for label, r in runs.items():
        b = r.get("bench") or {}
        v = verdicts.get(label)
        note = (
            ("identical" if v["identical"] else f"DIFFERS {v['first_difference']}")
            if v
            else (r.get("error") or "")[:150]
        )
        tps = r.get("tok_per_s")
        print(
            f"{label:28} {str(r.get('ok')):5} {r.get('generated_tokens', 0):>6} {tps or 0:8.1f} "
            f"{b.get('decode_tok_per_s') or 0:11.1f} {str(b.get('acceptance_rate')):>7}  {note}"
        )
    for label, rec in records.items():
        print(
            f"{label}: {len(rec['triton_kernels'])} triton compilations, {len(rec['capability_callers'])} capability call sites"
        )


if __name__ == "__main__":
    main()
