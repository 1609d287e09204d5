"""Decode speed without and with MTP speculative decoding, and the draft acceptance rate, as JSON.

Single-stream decode (one prompt, greedy, `--max-tokens` new tokens, EOS ignored) after one warm-up request, so the
number is decode-dominated. Acceptance = accepted draft tokens / proposed draft tokens from vLLM's spec-decode
counters over the timed request. With the tiny random-init model the draft layer is untrained: its acceptance says
the MTP path ran, not how well MTP predicts (the real GLM-5.x MTP head is trained). With the cycle model
(`TinyGlmSpec(weights="cycle")`) acceptance is designed: `vllm_compose.proof.expected.predicted_spec_counters`
gives the exact counts the timed request must report (lab/notebook/validation.md: 115/141 with one draft, 150/212
with two).

    python benchmarks/mtp_decode.py --model /tmp/tiny --mtp 0 1 2 --out bench.json     # one process per config
    from benchmarks.mtp_decode import measure                                          # inside a running engine

Needs a GPU and vLLM; run through lab/device/run_all.sh on the device machine.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path


def _counters(llm) -> dict[str, float]:
    """The spec-decode counters (draft tokens, accepted tokens, drafts) summed over their label sets."""
    out: dict[str, float] = {}
    for m in llm.get_metrics():
        name = getattr(m, "name", "")
        if "spec_decode" not in name:
            continue
        value = getattr(m, "value", None)
        if isinstance(value, (int, float)):
            out[name] = out.get(name, 0.0) + float(value)
    return out


def measure(llm, prompt_ids: list[int], max_tokens: int = 256) -> dict:
    """Time one greedy single-stream request on a running `vllm.LLM`; return tok/s and acceptance."""
    from vllm.inputs import TokensPrompt

    from vllm import SamplingParams

    sp = SamplingParams(temperature=0.0, max_tokens=max_tokens, ignore_eos=True, detokenize=False)
    prompt = TokensPrompt(prompt_token_ids=prompt_ids)
    llm.generate([prompt], sp, use_tqdm=False)  # warm-up: kernels compiled, caches allocated
    before = _counters(llm)
    t0 = time.perf_counter()
    out = llm.generate([prompt], sp, use_tqdm=False)
    seconds = time.perf_counter() - t0
    after = _counters(llm)
    delta = {k: after.get(k, 0.0) - before.get(k, 0.0) for k in after}
    drafted = next((v for k, v in delta.items() if k.endswith("num_draft_tokens")), 0.0)
    accepted = next((v for k, v in delta.items() if k.endswith("num_accepted_tokens")), 0.0)
    n = len(out[0].outputs[0].token_ids)
    return {
        "generated_tokens": n,
        "seconds": round(seconds, 4),
        "decode_tok_per_s": round(n / seconds, 2),
        "draft_tokens": drafted,
        "accepted_tokens": accepted,
        "acceptance_rate": round(accepted / drafted, 4) if drafted else None,
        "spec_counters": delta,
        "token_ids": list(out[0].outputs[0].token_ids),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True)
    ap.add_argument("--mtp", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--pp", type=int, default=1)
    ap.add_argument("--max-tokens", type=int, default=256)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    validate = Path(__file__).resolve().parent.parent / "device" / "validate.py"
    results = []
    for k in args.mtp:
        part = Path(args.out).with_suffix(f".mtp{k}.json")
        cmd = [
            sys.executable,
            str(validate),
            "--model",
            args.model,
            "--pp",
            str(args.pp),
            "--mtp",
            str(k),
            "--prompts",
            "1",
            "--max-tokens",
            "16",
            "--bench-tokens",
            str(args.max_tokens),
            "--label",
            f"bench-mtp{k}",
            "--out",
            str(part),
        ]
        subprocess.run(cmd, check=False)
        data = json.loads(part.read_text()) if part.exists() else {"ok": False, "error": "no output"}
        results.append({"mtp": k, "ok": data.get("ok"), "error": data.get("error"), **(data.get("bench") or {})})
    base = next((r for r in results if r["mtp"] == 0 and r.get("decode_tok_per_s")), None)
    for r in results:
        if base and r.get("decode_tok_per_s"):
            r["speedup_vs_no_mtp"] = round(r["decode_tok_per_s"] / base["decode_tok_per_s"], 3)
    Path(args.out).write_text(
        json.dumps({"note": "random-init weights: acceptance means little", "runs": results}, indent=1)
    )
    print(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
