#!/usr/bin/env python3
"""Drift benchmark: port synthetic one-hunk edits from one vLLM release onto later ones and score each patch tool.

For every case (see `drift/cases.py`) the same single-file diff — made against the *source* release — is applied to
the *target* release's copy of the file by GNU patch (fuzz 0, 2, 3), `git apply`, `git apply --3way` (repository
holding only the target, as when patching an unpacked release), `git apply --3way` with the diff's pre-image blob
available (as in a clone with history), and this project's placement engine. Each outcome is

  correct    the result equals the ground truth (the same edit made on the target by syntax)
  misplaced  the tool applied the hunk but the result differs from the ground truth, or it applied a hunk whose
             site no longer exists uniquely ("must be rejected")
  rejected   the tool refused

A result that differs from the ground truth only in layout (same syntax tree) counts as correct and is tallied
separately as "equivalent".

Every case is also applied to the file its diff was made from ("own base": the result must be the edited file),
and synthetic drift classes (`drift/synthetic.py`: the target is the source file with one change, so the truth is
known by construction) add cases where the target inserted its own element next to the hunk's, or split a list into
a spliced sub-list.

Usage:
  python benchmarks/drift_benchmark.py [--cases 450] [--synthetic 10] [--seed 1] [--source 0.26.0]
                                       [--targets 0.27.0 0.28.0 0.30.0] [--no-own-base]
                                       [--json FILE] [--docs docs/benchmarks.md | --no-docs]

Sdists come from vllm-compose's cache (downloaded once, sha256-verified: `vllm_compose.releases.fetch_sdist`).
"""

from __future__ import annotations

import argparse
import ast
import difflib
import json
import sys
import time
from collections import Counter
from pathlib import Path

from drift.cases import Case, choose_cases, synthetic_cases
from drift.markdown import publish, table
from drift.sdist import SdistSource, cache_dir, fetch_sdist
from drift.sites import ORDER_FREE_KINDS
from drift.synthetic import SYNTHETIC_CLASSES
from drift.tools import ToolResult, Workbench, engine_runner

from vllm_compose.audit import audit
from vllm_compose.patchfile import parse_patch

REPO = Path(__file__).resolve().parent.parent
TOOLS = (
    "patch --fuzz=0",
    "patch --fuzz=2",
    "patch --fuzz=3",
    "git apply",
    "git apply --3way",
    "git apply --3way (+pre-image)",
    "vllm-compose",
)
OUTCOMES = ("correct", "misplaced", "rejected")
DRIFTS = ("drifted", "undrifted")


def _same_tree(a: str, b: str) -> bool:
    try:
        return ast.dump(ast.parse(a)) == ast.dump(ast.parse(b))
    except (SyntaxError, ValueError):
        return False


def judge(result: ToolResult, truth: str | None) -> tuple[str, bool]:
    """(outcome, equivalent): equivalent is True when the result is correct by syntax tree but not byte for byte."""
    if result.text is None:
        return "rejected", False
    if truth is None:
        return "misplaced", False
    if result.text == truth:
        return "correct", False
    if _same_tree(result.text, truth):
        return "correct", True
    return "misplaced", False


def _run_tools(path: str, target: str, diff: str, base: str, bench: Workbench, engine) -> dict[str, ToolResult]:
    """Every tool applying `diff` (made against `base`) to `target`."""
    results: dict[str, ToolResult] = {}
    for fuzz in (0, 2, 3):
        results[f"patch --fuzz={fuzz}"] = bench.gnu_patch(path, target, diff, fuzz)
    results["git apply"] = bench.git_apply(path, target, diff, three_way=False)
    results["git apply --3way"] = bench.git_apply(path, target, diff, three_way=True)
    results["git apply --3way (+pre-image)"] = bench.git_apply(path, target, diff, True, base=base)
    if engine is not None:
        try:
            results["vllm-compose"] = engine(path, target, diff)
        except Exception as exc:  # a crash is a finding to report, not a reason to lose the run
            results["vllm-compose"] = ToolResult(None, f"engine raised {type(exc).__name__}: {exc}", ["crash"])
    return results


class _Texts:
    """A one-file tree for the audit."""

    def __init__(self, path: str, text: str) -> None:
        self.path, self.data = path, text.encode()

    def read(self, path: str) -> bytes | None:
        return self.data if path == self.path else None


def audit_result(path: str, target: str, result: str, diff: str) -> tuple[bool, str]:
    """The audit (`vllm_compose.audit`, which shares no code with the engine) of one tool's result: (flagged, why)."""
    report = audit(_Texts(path, target), _Texts(path, result), [parse_patch(diff.encode(), "case.diff")])
    bad = report.bad_hunks
    return bool(bad), (f"{bad[0].verdict}: {bad[0].reason}" if bad else "")


def run_case(case: Case, bench: Workbench, engine, own_base: bool = True) -> dict:
    """Every tool on one case (and, with `own_base`, on the file the diff was made from); the case's JSON record."""
    results = _run_tools(case.path, case.target_text, case.diff, case.source_text, bench, engine)
    record = {
        "case": case.case_id,
        "path": case.path,
        "kind": case.site.kind,
        "site": case.site.describe(),
        "source_line": case.site.line,
        "drift": case.drift,
        "synthetic": case.synthetic,
        "must_reject": case.must_reject,
        "order_free": case.order_free,
        "tools": {},
    }
    for tool, res in results.items():
        outcome, equivalent = judge(res, case.truth)
        entry = {"outcome": outcome, "equivalent": equivalent, "detail": res.detail[:2000]}
        if res.verdicts is not None:
            entry["verdicts"] = res.verdicts
        if res.applied:
            try:
                flagged, why = audit_result(case.path, case.target_text, res.text, case.diff)
            except Exception as exc:  # a crash is a finding to report
                flagged, why = True, f"audit raised {type(exc).__name__}: {exc}"
            entry["audit"] = {"flagged": flagged, "why": why[:600]}
        record["tools"][tool] = entry
    if own_base and case.edited:
        own = _run_tools(case.path, case.source_text, case.diff, case.source_text, bench, engine)
        record["own_base"] = {}
        for tool, res in own.items():
            outcome, _ = judge(res, case.edited)
            entry = {"outcome": outcome}
            if res.verdicts is not None:
                entry["verdicts"] = res.verdicts
            if outcome != "correct":
                entry["detail"] = res.detail[:2000]
            record["own_base"][tool] = entry
    return record


def harm(record: dict) -> str:
    """For a must-reject case: "harmless" when order carries no meaning for its elements (keyword arguments,
    imported names, ``__all__``, keyword-only parameters: applied anyway, the element still lands in the intended
    statement), else "harmful" (parameters, statements, list elements)."""
    return "harmless" if record["kind"] in ORDER_FREE_KINDS or record.get("order_free") else "harmful"


def summarize(records: list[dict]) -> dict:
    """Counts per tool × drift class × outcome, plus totals that make the tables self-explanatory.

    Real cases fill the drifted/undrifted tallies; synthetic ones (see `drift/synthetic.py`) theirs, per class.
    Every case applied to its own base fills `own_base`; every applied must-reject case counts in `harm`."""
    out: dict = {"cases": Counter(), "must_reject": Counter(), "tools": {}, "own_base": {}, "synthetic": {}}
    out["harm"] = {}
    out["own_base_cases"] = 0
    for r in records:
        if "own_base" in r:
            out["own_base_cases"] += 1
            for tool, e in r["own_base"].items():
                t = out["own_base"].setdefault(tool, Counter())
                t[e["outcome"]] += 1
                t["exact"] += e.get("verdicts") is not None and set(e["verdicts"]) == {"exact"}
        for tool, e in r["tools"].items():
            if r["must_reject"] and e["outcome"] != "rejected":
                out["harm"].setdefault(tool, Counter())[harm(r)] += 1
        if r.get("synthetic"):
            klass = out["synthetic"].setdefault(r["synthetic"], {"cases": 0, "must_reject": 0, "tools": {}})
            klass["cases"] += 1
            klass["must_reject"] += r["must_reject"]
            for tool, e in r["tools"].items():
                t = klass["tools"].setdefault(tool, Counter())
                t[e["outcome"]] += 1
                if r["must_reject"] and e["outcome"] == "rejected":
                    t["rejected_rightly"] += 1
            continue
        out["cases"][r["drift"]] += 1
        out["must_reject"][r["drift"]] += r["must_reject"]
        for tool, e in r["tools"].items():
            t = out["tools"].setdefault(tool, {d: Counter() for d in DRIFTS})
            t[r["drift"]][e["outcome"]] += 1
            t[r["drift"]]["equivalent"] += e["equivalent"]
            if r["must_reject"] and e["outcome"] == "rejected":
                t[r["drift"]]["rejected_rightly"] += 1
    return json.loads(json.dumps(out))


def _pct(n: int, total: int) -> str:
    return f"{n} ({100 * n / total:.0f}%)" if total else "0"


def render(summary: dict, records: list[dict], meta: dict) -> str:
    """The markdown section for docs/benchmarks.md."""
    cases, must = summary["cases"], summary["must_reject"]
    lines = [
        f"Source release **{meta['source']}**, targets **{', '.join(meta['targets'])}**, "
        f"{sum(cases.values())} cases and {meta['count'] - sum(cases.values())} synthetic ones (seed "
        f"{meta['seed']}), generated {meta['date']} in {meta['seconds']:.0f} s.",
        "",
        f"- drifted: {cases.get('drifted', 0)} cases, of which {must.get('drifted', 0)} must be rejected "
        "(the site is gone or no longer unique in the target);",
        f"- undrifted: {cases.get('undrifted', 0)} cases, of which {must.get('undrifted', 0)} must be rejected.",
        "",
        "A rejection of a must-reject case is the right answer; it is counted under *rejected* and, in brackets, "
        "as *rightly*.",
        "",
    ]
    header = ["tool"] + [f"{d}: {o}" for d in DRIFTS for o in OUTCOMES] + ["drifted: right answer"]
    rows = []
    for tool in TOOLS:
        if tool not in summary["tools"]:
            continue
        row = [f"`{tool}`"]
        for d in DRIFTS:
            c = summary["tools"][tool][d]
            total = cases.get(d, 0)
            row.append(_pct(c.get("correct", 0), total))
            row.append(_pct(c.get("misplaced", 0), total))
            rej = _pct(c.get("rejected", 0), total)
            if c.get("rejected_rightly"):
                rej += f" [{c['rejected_rightly']} rightly]"
            row.append(rej)
        d = summary["tools"][tool]["drifted"]
        row.append(_pct(d.get("correct", 0) + d.get("rejected_rightly", 0), cases.get("drifted", 0)))
        rows.append(row)
    lines.append(table(header, rows))
    lines.append("")
    lines.append(
        "*Right answer*: correct, or a must-reject case rejected (a drifted case can only be correct when its site "
        "still exists)."
    )
    lines.append("")
    equivalent = {t: sum(summary["tools"][t][d].get("equivalent", 0) for d in DRIFTS) for t in summary["tools"]}
    if any(equivalent.values()):
        lines.append(
            "Counted correct though not byte-identical (same syntax tree, other layout): "
            + ", ".join(f"`{t}` {n}" for t, n in equivalent.items() if n)
            + "."
        )
        lines.append("")
    lines += _own_base(summary)
    lines += _synthetic(summary)
    lines += _harm(summary)
    lines += _audit_table(records)
    lines.append("")
    lines.append("Per target release and edit kind (drifted cases only; correct / misplaced / rejected):")
    lines.append("")
    lines.append(_breakdown(records))
    wrong = _misplacements(records)
    if wrong:
        lines += ["", wrong]
    engine_notes = _engine_rejections(records)
    if engine_notes:
        lines += ["", engine_notes]
    return "\n".join(lines)


def _audit_table(records: list[dict]) -> list[str]:
    """How the audit judged every applied result: misplacements it flags (the higher the better) and correct
    results it flags (false alarms: must be 0)."""
    rows = []
    for tool in TOOLS:
        mis = flag_mis = ok = flag_ok = 0
        for r in records:
            e = r["tools"].get(tool)
            if not e or "audit" not in e:
                continue
            if e["outcome"] == "misplaced":
                mis += 1
                flag_mis += e["audit"]["flagged"]
            elif e["outcome"] == "correct":
                ok += 1
                flag_ok += e["audit"]["flagged"]
        rows.append([f"`{tool}`", f"{flag_mis} of {mis}", f"{flag_ok} of {ok}"])
    return [
        "",
        "**The audit on every applied result** (`vllm_compose.audit`: where each hunk landed vs where its syntax "
        "anchors say it belongs; it shares no code with the engine). *Misplaced, flagged*: the tool's "
        "misplacements the audit refuses (it should flag all); *correct, flagged*: false alarms (must be 0):",
        "",
        table(["tool", "misplaced, flagged", "correct, flagged"], rows),
    ]


def _own_base(summary: dict) -> list[str]:
    """Each tool applying every case's diff to the very file it was made from."""
    n = summary.get("own_base_cases", 0)
    if not n:
        return []
    rows = []
    for tool in TOOLS:
        c = summary["own_base"].get(tool)
        if c is None:
            continue
        exact = _pct(c.get("exact", 0), n) if tool == "vllm-compose" else ""
        rows.append([f"`{tool}`", _pct(c.get("correct", 0), n), _pct(c.get("rejected", 0), n), exact])
    return [
        f"**Own base**: every case's diff applied to the file it was made from ({n} cases; the result must be the "
        "edited file; the engine's verdict must be `exact`):",
        "",
        table(["tool", "correct", "rejected", "engine verdict exact"], rows),
        "",
    ]


def _synthetic(summary: dict) -> list[str]:
    """The synthetic drift classes (targets made from the source release, truth by construction)."""
    classes = summary.get("synthetic", {})
    if not classes:
        return []
    names = [k for k in SYNTHETIC_CLASSES if k in classes]
    header = ["tool"] + [f"{k} ({classes[k]['cases']}, {classes[k]['must_reject']} must reject)" for k in names]
    rows = []
    for tool in TOOLS:
        if not all(tool in classes[k]["tools"] for k in names):
            continue
        row = [f"`{tool}`"]
        for k in names:
            c = classes[k]["tools"][tool]
            cell = "{correct} / {misplaced} / {rejected}".format(**{o: c.get(o, 0) for o in OUTCOMES})
            if c.get("rejected_rightly"):
                cell += f" [{c['rejected_rightly']} rightly]"
            row.append(cell)
        rows.append(row)
    return [
        "**Synthetic drift** (`drift/synthetic.py`: the target is the source file with one change; correct / "
        "misplaced / rejected): *adjacent* — the target inserted its own element right after the anchor (for "
        "`import-statement`: its own import statement, the import block grew); *restructured* — the target moved "
        "the anchor and the two elements before it into a sub-list spliced in as `*name`:",
        "",
        table(header, rows),
        "",
    ]


def _harm(summary: dict) -> list[str]:
    """Must-reject cases a tool applied anyway, split by whether order carries meaning for their kind."""
    parts = []
    for tool in TOOLS:
        c = summary.get("harm", {}).get(tool)
        if c:
            parts.append(f"`{tool}` {c.get('harmful', 0)} harmful, {c.get('harmless', 0)} harmless")
    if not parts:
        return ["Must-reject cases applied anyway: none, by any tool.", ""]
    return [
        "Must-reject cases applied anyway (real and synthetic), *harmless* where order carries no meaning "
        "(keyword arguments, imported names, import statements, `__all__`, keyword-only parameters), *harmful* for "
        "other parameters, statements and list elements: " + "; ".join(parts) + ".",
        "",
    ]


def _breakdown(records: list[dict]) -> str:
    tools = [
        t
        for t in ("patch --fuzz=3", "git apply --3way (+pre-image)", "vllm-compose")
        if records and t in records[0]["tools"]
    ]
    groups: dict[tuple[str, str], dict[str, Counter]] = {}
    for r in records:
        if r["drift"] != "drifted" or r.get("synthetic"):
            continue
        target = r["case"].split("#")[0]
        for key in ((f"target {target}", ""), ("", f"kind {r['kind']}")):
            g = groups.setdefault(key, {t: Counter() for t in tools})
            for t in tools:
                g[t][r["tools"][t]["outcome"]] += 1
    rows = []
    for (tgt, kind), g in sorted(groups.items(), key=lambda kv: (kv[0][0] == "", kv[0])):
        n = sum(g[tools[0]].values()) if tools else 0
        rows.append(
            [tgt or kind, n]
            + ["{correct} / {misplaced} / {rejected}".format(**{o: g[t].get(o, 0) for o in OUTCOMES}) for t in tools]
        )
    return table(["group", "cases"] + [f"`{t}`" for t in tools], rows)


def _misplacements(records: list[dict]) -> str:
    """Each tool's misplacements split into "applied where the site is gone or ambiguous" and "wrong site"."""
    parts = []
    for tool in TOOLS:
        bad = [r for r in records if r["tools"].get(tool, {}).get("outcome") == "misplaced"]
        if not bad:
            continue
        gone = sum(r["must_reject"] for r in bad)
        ids = ", ".join(r["case"] for r in bad) if tool == "vllm-compose" else ""
        parts.append(
            f"`{tool}` {len(bad)} ({gone} applied where the case must be rejected, {len(bad) - gone} at another site"
            + (f": {ids}" if ids else "")
            + ")"
        )
    return "Misplacements: " + "; ".join(parts) + ". Inspect a case with `--show CASE`." if parts else ""


def _engine_rejections(records: list[dict]) -> str:
    """How many engine rejections came with evidence, and what kinds of reasons they gave."""
    rejected = [r for r in records if r["tools"].get("vllm-compose", {}).get("outcome") == "rejected"]
    if not rejected:
        return ""
    explained = [r for r in rejected if r["tools"]["vllm-compose"]["detail"].strip()]
    reasons = Counter(_reason_class(r["tools"]["vllm-compose"]["detail"]) for r in rejected)
    text = (
        f"Engine rejections: {len(rejected)}, of which {len(explained)} carry evidence "
        f"({len([r for r in rejected if r['must_reject']])} were must-reject cases). Reasons: "
        + ", ".join(f"{reason} {n}" for reason, n in reasons.most_common())
        + "."
    )
    return text


def _reason_class(evidence: str) -> str:
    """A short label for an engine rejection, from the words its evidence uses (the full text is in the JSON)."""
    e = evidence.lower()
    for needle, label in (
        ("raised", "engine error"),
        ("parse error", "result does not parse"),
        ("changed lines the hunk removes", "target changed the lines the hunk replaces"),
        ("no longer has the lines the hunk removes", "target changed the lines the hunk replaces"),
        ("the line the insertion follows", "target changed the line the insertion follows"),
        ("hunk adds a copy of that line", "target changed a context line the hunk duplicates"),
        ("container:", "context shown inside the brackets is outside them in the target"),
        ("section heading", "only the @@ section heading tells the sites apart"),
        ("indentation drift", "inconsistent indentation drift"),
        ("both sides changed the same place", "both sides changed the same place"),
        ("overlap", "both sides changed the same place"),
        ("no line next to the change agrees", "nothing next to the change agrees"),
        ("ambiguous", "no unique best site"),
        ("wrong scope", "best site in another scope or role"),
        ("too little agreement", "too little context agrees"),
        ("no acceptable site", "no acceptable site"),
        ("no site", "no site"),
    ):
        if needle in e:
            return label
    return "other"


def _diff(a: str, b: str, label: str) -> str:
    return "".join(difflib.unified_diff(a.splitlines(True), b.splitlines(True), "target", label, n=3))


def show(args: argparse.Namespace) -> int:
    """Print the named cases in full: what a reviewer needs to check a ground truth or a tool's verdict."""
    engine = None if args.no_engine else engine_runner()
    source = SdistSource.load(args.source, fetch_sdist(args.source))
    per_target = dict(zip(args.targets, _split(args.cases, len(args.targets)), strict=True))
    with Workbench() as bench:
        for version in dict.fromkeys(cid.split("#")[0] for cid in args.show):
            target = SdistSource.load(version, fetch_sdist(version))
            cases = {
                c.case_id: c
                for c in choose_cases(source.files, target.files, per_target[version], args.seed, label=version)
            }
            for cid in [c for c in args.show if c.startswith(version + "#")]:
                case = cases.get(cid)
                if case is None:
                    print(f"{cid}: no such case with these options")
                    continue
                print(
                    f"===== {cid} {case.path}: {case.site.describe()} ({case.drift}"
                    f"{', must be rejected' if case.must_reject else ''})\n{case.diff}"
                )
                if case.truth is not None:
                    print("--- ground truth (target -> truth):\n" + _diff(case.target_text, case.truth, "truth"))
                record = run_case(case, bench, engine)
                for tool, entry in record["tools"].items():
                    print(f"--- {tool}: {entry['outcome']}\n    {entry['detail'][:600]}")
    return 0


def _split(total: int, parts: int) -> list[int]:
    return [total // parts + (1 if i < total % parts else 0) for i in range(parts)]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--source", default="0.26.0", help="release the edits are made on")
    ap.add_argument("--targets", nargs="+", default=["0.27.0", "0.28.0", "0.30.0"], help="releases they are ported to")
    ap.add_argument("--cases", type=int, default=450, help="total number of cases, split evenly over the targets")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--synthetic", type=int, default=10, help="synthetic cases per edit kind and class (0: none)")
    ap.add_argument("--no-own-base", action="store_true", help="do not apply each case to its own base")
    ap.add_argument(
        "--json", type=Path, default=None, help="results file (default: the cache's bench/drift-results.json)"
    )
    ap.add_argument("--docs", type=Path, default=REPO / "docs" / "benchmarks.md", help="markdown file to update")
    ap.add_argument("--no-docs", action="store_true", help="do not touch the docs")
    ap.add_argument("--no-engine", action="store_true", help="measure the other tools only")
    ap.add_argument(
        "--show",
        nargs="+",
        metavar="CASE",
        help="print the diff, ground truth and every tool's result "
        "for these case ids (e.g. 0.27.0#12; same --cases/--seed/--targets as the run) and exit",
    )
    args = ap.parse_args(argv)
    if args.show:
        return show(args)

    started = time.monotonic()
    engine = None if args.no_engine else engine_runner()
    if engine is None and not args.no_engine:
        print("note: vllm_compose.placement.place_file is not implemented yet; measuring the other tools only")
    source = SdistSource.load(args.source, fetch_sdist(args.source))
    records: list[dict] = []
    per_target = _split(args.cases, len(args.targets))
    with Workbench() as bench:
        for version, n in zip(args.targets, per_target, strict=True):
            target = SdistSource.load(version, fetch_sdist(version))
            cases = choose_cases(source.files, target.files, n, args.seed, label=version)
            print(f"{args.source} -> {version}: {len(cases)} cases", flush=True)
            for case in cases:
                records.append(run_case(case, bench, engine, not args.no_own_base))
        if args.synthetic:
            cases = synthetic_cases(source.files, args.synthetic, args.seed)
            print(f"{args.source} synthetic drift: {len(cases)} cases", flush=True)
            for case in cases:
                records.append(run_case(case, bench, engine, not args.no_own_base))
    seconds = time.monotonic() - started
    summary = summarize(records)
    meta = {
        "source": args.source,
        "targets": args.targets,
        "count": len(records),
        "seed": args.seed,
        "synthetic": args.synthetic,
        "seconds": seconds,
        "date": time.strftime("%Y-%m-%d"),
    }
    out = args.json or cache_dir() / "drift-results.json"
    markdown = render(summary, records, meta)
    publish(
        out,
        {"meta": meta, "summary": summary, "cases": records},
        markdown,
        None if args.no_docs else args.docs,
        "drift-benchmark",
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
