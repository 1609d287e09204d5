"""`prove`: the recall model's proof suites on the installed vLLM (a GPU machine), its options and its handler."""

from __future__ import annotations

import json
from pathlib import Path

from ..errors import CommandLineError, ExitCode


def add_parsers(sub) -> None:
    """Add this group's commands to `sub`, each with its handler (`handler` in the parsed arguments)."""
    pr = sub.add_parser(
        "prove",
        help="prove on this GPU that the installed vLLM's sparse attention reads the right tokens (recall model)",
        description="Write the checkpoints the suites run on into --model-dir (one folder each, unless there), then "
        "run each suite in a fresh interpreter: a recall model's tokens must be the predicted ones, every DSA layer "
        "must agree with the DSA oracle on its kernels' arguments and, in the layer-reference suites, with an fp32 "
        "reference computed from the checkpoint and its config.json alone; every injected fault must be caught. "
        "docs/user-guide.md says what each suite catches and what it cannot. Run it in the environment vLLM is "
        "installed in.",
    )
    pr.add_argument(
        "--model-dir",
        type=Path,
        metavar="DIR",
        help="where the checkpoints are written, one sub-folder per model (required to run)",
    )
    pr.add_argument(
        "--suite",
        action="append",
        metavar="NAME",
        help="a suite to run (repeatable; default: every suite but native and graph_default); --list names them",
    )
    pr.add_argument("--list", action="store_true", help="list the suites and exit")
    pr.add_argument(
        "--shape",
        choices=("glm5", "tiny"),
        default="glm5",
        help="the recall model written for the glm5 suites (default glm5; tiny: a quick small one)",
    )
    pr.add_argument(
        "--moe-quant",
        choices=("none", "w4a16"),
        default="none",
        help="routed experts as written: bf16 (default) or compressed-tensors int4 (Marlin on sm_80)",
    )
    pr.add_argument("--out", type=Path, default=Path("prove-results"), metavar="DIR", help="default prove-results/")
    pr.add_argument("--timeout", type=float, metavar="S", help="seconds per suite (default: none)")
    pr.set_defaults(handler=prove)


def prove(args) -> int:
    from ..proof import suites as proof

    if args.list:
        for name, fields in proof.SUITES.items():
            print(f"{name:14} {json.dumps(fields)}")
        return ExitCode.OK
    if args.model_dir is None:
        raise CommandLineError(
            "--model-dir DIR is required to run suites",
            hint="e.g. --model-dir /data/prove-models (one sub-folder per checkpoint)",
        )
    names = args.suite or list(proof.DEFAULT_SUITES)
    models = sorted({proof.model_of(n) for n in names})  # an unknown name stops before any model is written
    quant = "" if args.moe_quant == "none" else args.moe_quant
    for model in models:
        shape = args.shape if model == "glm5" else model
        if proof.ensure_model(args.model_dir / model, shape, quant if model == "glm5" else ""):
            print(f"wrote the {shape} model{f' ({quant} experts)' if quant else ''} to {args.model_dir / model}")

    def done(result: dict) -> None:
        label = result["suite"]["label"]
        verdict = "passed" if result["passed"] else "FAILED"
        print(f"{label}: {verdict} ({result.get('vllm_version', '?')})")
        for check, ok in result.get("checks", []):
            print(f"  {'ok ' if ok else 'NO '} {check}")
        if result.get("error"):
            print(f"  error: {result['error'][:500]}")

    results = proof.run(args.model_dir, names, args.out, on_done=done, timeout_s=args.timeout)
    passed = sum(r["passed"] for r in results)
    print(f"{passed} of {len(results)} suites passed; results in {args.out}/")
    return ExitCode.OK if passed == len(results) else ExitCode.REFUSED
