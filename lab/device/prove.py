"""On the device machine: the recall model's proof suites (vllm_compose.proof.recall_run), one engine per process.

    python3 lab/device/prove.py model --out /tmp/vc/models/glm5 [--shape glm5]   # write a checkpoint (recall_model.SHAPES)
    python3 lab/device/prove.py suite NAME --models /tmp/vc/models --out RESULT.json  # a suite of proof.suites.SUITES,
                                                                    # on its checkpoint (written first when missing)

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
    m.add_argument("--shape", default="glm5", help="a recall_model.SHAPES name")
    m.add_argument("--moe-quant", default="", help="'' or w4a16")
    s = sub.add_parser("suite")
    s.add_argument("name")
    s.add_argument("--models", required=True, help="the folder of the checkpoints, one sub-folder per model")
    s.add_argument("--out", required=True)
    args = ap.parse_args()
    if args.cmd == "model":
        from vllm_compose.proof.suites import ensure_model

        t0 = time.perf_counter()
        wrote = ensure_model(Path(args.out), args.shape, args.moe_quant)
        print(json.dumps({"model": args.out, "written": wrote, "write_s": round(time.perf_counter() - t0, 1)}))
        return 0
    from validate import AMPERE_ENV

    for k, v in AMPERE_ENV.items():
        os.environ.setdefault(k, v)
    from vllm_compose.proof.recall_run import run_suite
    from vllm_compose.proof.suites import SERVING_ENV, ensure_model, model_of
    from vllm_compose.proof.suites import suite as named_suite

    os.environ.update(SERVING_ENV)
    model_dir = Path(args.models) / model_of(args.name)
    t0 = time.perf_counter()
    if ensure_model(model_dir, model_of(args.name)):
        print(json.dumps({"model": str(model_dir), "write_s": round(time.perf_counter() - t0, 1)}), flush=True)
    suite = named_suite(args.name, model_dir)
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
