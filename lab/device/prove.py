"""On the device machine: the recall model's proof suites (vllm_compose.proof.recall_run), one engine per process.

    python3 lab/device/prove.py model --out /tmp/vc/recall [--tiny]      # write the GLM-5-shaped recall checkpoint
    python3 lab/device/prove.py suite NAME --model /tmp/vc/recall --out RESULT.json   # a suite of proof.suites.SUITES

`lab/device/prove.sh` runs the suites of a release with the environment `lab/device/run_all.sh` uses (the staged site, the
sm_80 platform answers from lab/device/sitecustomize).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "src"))
sys.path.insert(0, str(REPO / "lab" / "device"))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    m = sub.add_parser("model")
    m.add_argument("--out", required=True)
    m.add_argument("--tiny", action="store_true")
    m.add_argument("--moe-quant", default="", help="'' or w4a16")
    s = sub.add_parser("suite")
    s.add_argument("name")
    s.add_argument("--model", required=True)
    s.add_argument("--out", required=True)
    args = ap.parse_args()
    if args.cmd == "model":
        import dataclasses

        from vllm_compose.proof.recall_model import glm5_spec, tiny_spec, write_checkpoint

        t0 = time.perf_counter()
        spec = dataclasses.replace(tiny_spec() if args.tiny else glm5_spec(), moe_quant=args.moe_quant)
        write_checkpoint(spec, Path(args.out), device="cuda")
        print(json.dumps({"model": args.out, "write_s": round(time.perf_counter() - t0, 1)}))
        return 0
    from validate import AMPERE_ENV

    for k, v in AMPERE_ENV.items():
        os.environ.setdefault(k, v)
    from vllm_compose.proof.recall_run import run_suite
    from vllm_compose.proof.suites import SERVING_ENV
    from vllm_compose.proof.suites import suite as named_suite

    os.environ.update(SERVING_ENV)
    suite = named_suite(args.name, Path(args.model))
    result = run_suite(suite)
    result["env"] = {k: os.environ.get(k) for k in [*AMPERE_ENV, "VC_FAKE_CAPABILITY"]}
    Path(args.out).write_text(json.dumps(result, indent=1, default=str))
    print(
        json.dumps(
            {
                "label": suite.label,
                "ok": result["ok"],
                "passed": result["passed"],
                "checks": result["checks"],
                "error": result.get("error"),
            }
        )
    )
    return 0 if result["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
