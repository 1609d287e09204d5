"""Pick the sparse-MLA candidate's heads a program and split policy from one sweep of benchmarks/dsa_kernels.py, by
the rule lab/candidates/README.md states, and write the candidate's tree with the winner as its defaults.

    python3 lab/candidates/mla_decide.py SWEEP.json --tree .devkern/mla --write .devkern/win --out DECISION.json

SWEEP.json is a `dsa_kernels.py --mla-only --tree BEFORE --tree CANDIDATE --mla-max-block-h ... --mla-max-splits ...`
run: the first tree is the kernel as composed (its rows have no `policies`), the candidate's rows name the policies
that make each launch, and the document's `mla_policies` gives each policy's module attributes. A sweep of more
trees (`--tree BASE --tree BEFORE --tree CANDIDATE --mla-fixed-tree BEFORE`: the kernel the series had before the
entry being tuned, at its own defaults, beside PR #38476's) names with `--before BEFORE` the tree the guard and the
agreement are judged against and with `--target-base BASE` the one the 3x target is (default: the first tree, both).

The rule, per policy (a combination of the swept values):

1. it must agree with the kernel before at every shape it ran: finite, and its largest |difference| at most two bf16
   steps of the largest output (`max_abs_first / 64`); a policy that does not is a bug to find, never an entry;
2. it must not be slower than the kernel before by more than `GUARD` (5%) at any shape, the TP8 ones included;
3. the issue's targets, at GLM-5 TP1 (64 heads) and DeepSeek-V3.2 TP1 (128 heads): at least `TARGET_SPEEDUP` (3x)
   the kernel before at 1 row, and at least `TARGET_SHARE` (40%) of the HBM roofline (the row's least bytes over
   its time, against `--peak-gbs`) at 32 and 64 rows.

Of the policies that pass 1-3, the least geometric mean time over the eight target shapes wins; among those within
`TIE` (2%) of it, the one nearest the candidate's present defaults (fewest attributes changed), then the fewest
splits at most (fewer split counts to compile at start-up, a smaller partial-output buffer), then the most indices
a split. Where none passes 3, the same order picks among those that pass 1 and 2, and the verdict says which targets
were missed: the candidate may still enter the series as faster everywhere, and the issue's item stays open. Where
none passes 1 and 2, there is no winner and no tree is written.

The DECISION.json records every policy's figures, the verdict, the winner's attributes and the split counts the
oracle and the past-2**31 runs must cover (`check_splits`: 1 and every split count the winner launched). The winner's tree is the candidate tree with those attributes as its module's defaults (a line each,
rewritten), so the oracle and offset scripts run it without knowing of the sweep.
"""

from __future__ import annotations

import argparse
import ast
import json
import math
import re
import shutil
import sys
from pathlib import Path

KERNEL = "vllm/v1/attention/ops/triton_mla_sparse_kernel.py"
#: the shapes the issue's targets are stated at: (label, heads) x rows
TARGET_MODELS = (("GLM-5 TP1", 64), ("DSv3.2 TP1", 128))
TARGET_ROWS = (1, 8, 32, 64)
TARGET_SPEEDUP = 3.0  # at 1 row
TARGET_SHARE = 0.40  # of the HBM roofline at 32 rows and more
GUARD = 0.95  # the least speed-up allowed at any shape
TIE = 1.02  # geometric means within 2% of the best are a tie
#: the policy knobs, at the first candidate's values: what a decision falls back to without the candidate's tree
#: (`module_defaults` reads a tree's own, which `main` uses whenever --tree is given)
DEFAULTS = {"_MAX_BLOCK_H": 64, "_MAX_KV_SPLITS": 16, "_MIN_TOPK_PER_SPLIT": 128, "_SPLIT_MIN_FILL": 0.75}


class DecisionError(Exception):
    """A sweep this script cannot decide from (no policies, no kernel-before rows, a shape missing)."""


def target_shapes(topk: int = 2048) -> list[str]:
    return [f"{label} {heads}h top-k {topk} rows {n}" for label, heads in TARGET_MODELS for n in TARGET_ROWS]


def rows_of(shape: str) -> int:
    return int(shape.rsplit(" ", 1)[1])


def _unswept_rows(rows: list[dict], tree: str | None) -> dict[str, dict]:
    """{shape: row} of the timed rows without policies of `tree` (None: of the first such tree at each shape)."""
    out: dict[str, dict] = {}
    for r in rows:
        if "policies" in r or r.get("ms") is None or (tree is not None and r["tree"] != tree):
            continue
        out.setdefault(r["shape"], r)
    return out


def policy_figures(doc: dict, before_tree: str | None = None, target_tree: str | None = None) -> dict[str, dict]:
    """{policy: {"shapes": {shape: figures}, "failed": [shapes where its launch raised]}} from a sweep document,
    each shape's figures being its launch, time, share of the peak, speed-up and agreement with the kernel before
    (`before_tree`, default the first unswept tree) and its speed-up over `target_tree` (default the same)."""
    policies = doc.get("mla_policies") or {}
    if not policies:
        raise DecisionError("the sweep has no `mla_policies`: run dsa_kernels.py with --mla-max-block-h/--mla-max-"
                            "splits/--mla-min-split/--mla-split-fill")  # fmt: skip
    rows = [r for r in doc["rows"] if r["kernel"] == "sparse MLA decode"]
    before = _unswept_rows(rows, before_tree)
    if not before:
        raise DecisionError(f"the sweep has no timed row of the kernel before ({before_tree or 'the first --tree'}, "
                            "not swept)")  # fmt: skip
    target = _unswept_rows(rows, target_tree) if target_tree is not None else before
    if not target:
        raise DecisionError(f"the sweep has no timed row of the target base {target_tree}")
    out = {label: {"shapes": {}, "failed": []} for label in policies}
    for r in rows:
        base = before.get(r["shape"])
        for label in r.get("policies", []):
            if r.get("ms") is None:
                out[label]["failed"].append(f"{r['shape']}: {r.get('status')}")
                continue
            if base is None:
                continue
            vs = r.get("vs_first_tree", {})
            # two bf16 steps of the largest output: the kernels sum in different orders, each rounds once
            agrees = bool(vs.get("finite")) and vs.get("max_abs_diff", math.inf) <= vs.get("max_abs_first", 0) / 64
            aim = target.get(r["shape"], base)
            out[label]["shapes"][r["shape"]] = {
                "tree": r["tree"],
                "launch": r.get("launch"),
                "us": r["ms"] * 1e3,
                "before_us": base["ms"] * 1e3,
                "speedup": base["ms"] / r["ms"],
                "target_base_us": aim["ms"] * 1e3,
                "target_speedup": aim["ms"] / r["ms"],
                "share_of_peak": r["share_of_peak"],
                "agrees": agrees,
            }
    return out


def judge(fig: dict) -> dict:
    """The rule's three tests for one policy's figures, on the shapes it ran: {"agrees", "guard", "targets_missed":
    [...], "geomean_us" (None unless it ran every target shape)}."""
    shapes = fig["shapes"]
    missed = []
    for shape in target_shapes():
        f = shapes.get(shape)
        if f is None:
            missed.append(f"{shape}: not run")
        elif rows_of(shape) == 1 and f.get("target_speedup", f["speedup"]) < TARGET_SPEEDUP:
            missed.append(f"{shape}: {f.get('target_speedup', f['speedup']):.2f}x < {TARGET_SPEEDUP:g}x")
        elif rows_of(shape) >= 32 and f["share_of_peak"] < TARGET_SHARE:
            missed.append(f"{shape}: {f['share_of_peak']:.1%} < {TARGET_SHARE:.0%} of the roofline")
    times = [shapes[s]["us"] for s in target_shapes() if s in shapes]
    return {
        "agrees": bool(shapes) and all(f["agrees"] for f in shapes.values()) and not fig["failed"],
        "guard": bool(shapes) and all(f["speedup"] >= GUARD for f in shapes.values()),
        "targets_missed": missed,
        "geomean_us": math.exp(sum(map(math.log, times)) / len(times)) if len(times) == len(target_shapes()) else None,
    }


def module_defaults(tree: Path) -> dict:
    """The policy knobs' values in `tree`'s kernel module (its top-level `NAME = literal` lines): a knob the sweep
    leaves out keeps the candidate's own value, not DEFAULTS'. DecisionError when a knob is missing or not a
    literal."""
    if not (tree / KERNEL).is_file():
        raise DecisionError(f"{tree / KERNEL}: no kernel module (--tree is the candidate's tree, as trees writes it)")
    text = (tree / KERNEL).read_text()
    out = {}
    for name in DEFAULTS:
        found = re.findall(rf"^{re.escape(name)} = ([^\n#]*)", text, re.M)
        try:
            if len(found) != 1:
                raise ValueError(f"{len(found)} lines")
            out[name] = ast.literal_eval(found[0].strip())
        except (ValueError, SyntaxError) as exc:
            raise DecisionError(f"{tree / KERNEL}: want one top-level `{name} = <literal>` line ({exc})") from exc
    return out


def preference(attrs: dict, defaults: dict = DEFAULTS) -> tuple:
    """Ties go to the fewest attributes changed from the defaults, then the fewest splits, then the most indices a
    split."""
    full = {**defaults, **attrs}
    changed = sum(full[k] != v for k, v in defaults.items())
    return (changed, full["_MAX_KV_SPLITS"], -full["_MIN_TOPK_PER_SPLIT"])


def decide(
    doc: dict, before_tree: str | None = None, target_tree: str | None = None, defaults: dict = DEFAULTS
) -> dict:
    """The decision: every policy judged, the winner (or None) and the verdict; `defaults` are the knobs a policy
    leaves out (the candidate module's, `module_defaults`)."""
    figures = policy_figures(doc, before_tree, target_tree)  # raises for a sweep without policies
    policies = doc["mla_policies"]
    judged = {label: {**judge(fig), **fig, "attrs": policies[label]} for label, fig in figures.items()}
    sound = {k: v for k, v in judged.items() if v["agrees"] and v["guard"] and v["geomean_us"] is not None}
    meeting = {k: v for k, v in sound.items() if not v["targets_missed"]}
    pool = meeting or sound
    if not pool:
        return {"winner": None, "verdict": "no entry: no policy agrees with the kernel before at every shape and is "
                "within 5% of it everywhere", "policies": judged}  # fmt: skip
    best = min(v["geomean_us"] for v in pool.values())
    tied = [k for k, v in pool.items() if v["geomean_us"] <= best * TIE]
    winner = min(tied, key=lambda k: (preference(policies[k], defaults), pool[k]["geomean_us"]))
    w = pool[winner]
    launched = {f["launch"]["splits"] for f in w["shapes"].values()}
    verdict = (
        "series entry: every target met"
        if meeting
        else "series entry as faster everywhere; targets missed: " + "; ".join(w["targets_missed"])
    )
    before_shapes = set(_unswept_rows([r for r in doc["rows"] if r["kernel"] == "sparse MLA decode"], before_tree))
    not_run = sorted(before_shapes - set(w["shapes"]))
    if not_run:  # a sweep cut short: the guard held where it ran
        verdict += f"; not run (the sweep was cut short?): {'; '.join(not_run)}"
    return {
        "winner": winner,
        "attrs": {**defaults, **policies[winner]},
        "verdict": verdict,
        "check_splits": sorted({1, *launched}),
        "policies": judged,
    }


def winner_tree(candidate: Path, dest: Path, attrs: dict) -> Path:
    """`dest`: a copy of the candidate tree whose kernel module has `attrs` as its defaults (each `NAME = value`
    line at the module's top level rewritten; exactly one each, or DecisionError)."""
    text = (candidate / KERNEL).read_text()
    for name, value in attrs.items():
        pattern = re.compile(rf"^{re.escape(name)} = [^\n]*$", re.M)
        if len(pattern.findall(text)) != 1:
            raise DecisionError(f"{candidate / KERNEL}: want one top-level `{name} = ...` line to rewrite")
        text = pattern.sub(f"{name} = {value!r}", text)
    if dest.exists():
        shutil.rmtree(dest)
    shutil.copytree(candidate, dest)
    (dest / KERNEL).write_text(text)
    return dest


def table(decision: dict, top: int = 12) -> str:
    """The best `top` policies by geometric mean (the winner marked), their time and speed-up at each target shape."""
    shapes = target_shapes()
    heads = [f"{s.split()[0]} {s.split()[2]} r{rows_of(s)}" for s in shapes]
    lines = ["| policy | " + " | ".join(heads) + " | geomean | passes |", "|---" * (len(shapes) + 3) + "|"]
    ranked = sorted(decision["policies"].items(), key=lambda kv: kv[1]["geomean_us"] or math.inf)[:top]
    for label, p in ranked:
        cells = []
        for s in shapes:
            f = p["shapes"].get(s)
            cells.append("-" if f is None else f"{f['us']:.1f} us {f['speedup']:.2f}x {f['share_of_peak']:.0%}")
        passes = "agree" if p["agrees"] else "DISAGREE"
        passes += ", guard" if p["guard"] else ", SLOWER somewhere"
        passes += ", targets" if not p["targets_missed"] else f", {len(p['targets_missed'])} target(s) missed"
        mark = " (winner)" if label == decision.get("winner") else ""
        geo = "-" if p["geomean_us"] is None else f"{p['geomean_us']:.1f} us"
        lines.append(f"| {label}{mark} | " + " | ".join(cells) + f" | {geo} | {passes} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("sweep", type=Path)
    ap.add_argument("--tree", type=Path, help="the candidate's tree, for --write")
    ap.add_argument("--write", type=Path, help="write the winner's tree here")
    ap.add_argument("--out", type=Path, required=True, help="the decision, JSON (and a table beside it, .md)")
    ap.add_argument("--before", help="the unswept tree the guard and agreement are judged against (default: first)")
    ap.add_argument("--target-base", help="the unswept tree the 3x target is judged against (default: --before)")
    args = ap.parse_args(argv)
    if (args.tree is None) != (args.write is None):
        ap.error("--tree and --write go together")
    try:
        defaults = DEFAULTS if args.tree is None else module_defaults(args.tree)
        decision = decide(json.loads(args.sweep.read_text()), args.before, args.target_base, defaults)
        if decision["winner"] is not None and args.write is not None:
            decision["tree"] = str(winner_tree(args.tree, args.write, decision["attrs"]))
    except DecisionError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    args.out.write_text(json.dumps(decision, indent=1) + "\n")
    text = table(decision)
    args.out.with_suffix(".md").write_text(text + "\n")
    print(text)
    print(f"winner: {decision['winner']} {decision.get('attrs', '')}")
    print(f"verdict: {decision['verdict']}")
    if decision["winner"] is not None:
        print(f"check splits: {','.join(map(str, decision['check_splits']))}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
