"""The sparse-MLA decode under Nsight Compute: what a kernel's hardware counters say bounds it at a shape.

Entry 0045's kernel reaches 19-34% of the HBM roofline at 32-64 rows of the TP1 shapes, where issue 40 asks 40%, and
the wide-heads sweep ruled out the head groups' rereads of the gathered rows (lab/candidates/README.md). This tool
runs the kernel of one tree at a few decode shapes under `ncu` and reads back, per launch (the split pass, the merge
or the single pass): its time, DRAM and L2 traffic and throughput, occupancy (achieved and what the launch allows),
registers and shared memory, the tensor pipe's and the issue slots' use, and the warp stall reasons as cycles per
issued instruction.

    python3 lab/candidates/mla_profile.py profile --tree T --out DIR [--shape "GLM-5 TP1:64:32" ...] [--sm80-ptx]
    python3 lab/candidates/mla_profile.py summarize --csv DIR/mla_profile.csv --plan DIR/mla_profile_plan.json \\
        --out DIR/mla_profile.json

`profile` (on the GPU machine) collects ncu's own `SECTIONS` and, of `METRICS`, those `ncu --query-metrics` lists
for this GPU (a metric ncu does not know would end its run; the ones left out are named in the summary), then runs
this script's `launch` under `ncu --profile-from-start off`: each shape's call runs once outside the profiled range
(compile, autotune), then once inside it. The report is kept (`mla_profile.ncu-rep`), imported as CSV (`ncu --import
--csv --page raw --print-units base`; the details page where the raw one cannot be read) and summarized. `summarize` does the last step again on a saved CSV, without a
GPU. A launch's kernel must be the one the plan says (`launch` writes it from the kernel's own launch rules): a
report whose launches do not line up is refused, never matched by position alone.

A shape is `LABEL:HEADS:ROWS` (top-k 2,048 over a 600,000-slot latent cache, seeded random inputs shaped as
benchmarks/dsa_kernels.py's). The counters are ncu's replay of each kernel with its caches flushed (`--cache-control
all`, ncu's default) and the clocks left alone (`--clock-control none`, which is what ncu was seen working with on
these machines); the times are therefore not the CUDA-graph times of docs/benchmarks.md, and a summary says so.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import os
import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

#: the shapes profiled by default: the four TP1 rows below issue 40's 40% and one row of GLM-5 TP1, with a TP8 shape
#: at 64 rows (68% of the roofline) as the contrast
SHAPES = (
    ("GLM-5 TP1", 64, 1),
    ("GLM-5 TP1", 64, 32),
    ("GLM-5 TP1", 64, 64),
    ("DSv3.2 TP1", 128, 32),
    ("DSv3.2 TP1", 128, 64),
    ("GLM-5 TP8", 8, 64),
)
TOPK = 2048
SLOTS = 600_000
QK_DIM = 576
SM_SCALE = 0.0625
#: the kernels `triton_mla_sparse_attention` launches: single pass, or the split pass and the merge
FINAL, SPLIT, MERGE = "_sparse_mla_kernel_final", "_sparse_mla_kernel_split", "_sparse_mla_merge_kernel"
KERNEL_REGEX = "regex:_sparse_mla"

#: the warp stall reasons ncu reports on sm_80 and sm_90, each as cycles per issued instruction
STALLS = (
    "barrier",
    "branch_resolving",
    "dispatch_stall",
    "drain",
    "imc_miss",
    "lg_throttle",
    "long_scoreboard",
    "math_pipe_throttle",
    "membar",
    "mio_throttle",
    "misc",
    "no_instruction",
    "not_selected",
    "selected",
    "short_scoreboard",
    "sleeping",
    "tex_throttle",
    "wait",
)
STALL_METRIC = "smsp__average_warps_issue_stalled_{}_per_issue_active.ratio"

#: summary key -> ncu metric
FIELDS = {
    "us": "gpu__time_duration.sum",
    "dram_read_bytes": "dram__bytes_read.sum",
    "dram_write_bytes": "dram__bytes_write.sum",
    "dram_pct_of_peak": "dram__throughput.avg.pct_of_peak_sustained_elapsed",
    "l2_bytes": "lts__t_bytes.sum",
    "l2_hit_pct": "lts__t_sector_hit_rate.pct",
    "l1_global_load_bytes": "l1tex__t_bytes_pipe_lsu_mem_global_op_ld.sum",
    "sm_throughput_pct": "sm__throughput.avg.pct_of_peak_sustained_elapsed",
    "achieved_occupancy_pct": "sm__warps_active.avg.pct_of_peak_sustained_active",
    "theoretical_occupancy_pct": "sm__maximum_warps_per_active_cycle_pct",
    "tensor_pipe_pct": "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active",
    "issue_active_per_cycle": "smsp__issue_active.avg.per_cycle_active",
    "warp_cycles_per_issue": "smsp__average_warps_active_per_issue_active.ratio",
    "registers": "launch__registers_per_thread",
    "shared_mem_dynamic_bytes": "launch__shared_mem_per_block_dynamic",
    "shared_mem_static_bytes": "launch__shared_mem_per_block_static",
    "grid_size": "launch__grid_size",
    "block_size": "launch__block_size",
    "waves_per_sm": "launch__waves_per_multiprocessor",
    "occupancy_limit_registers": "launch__occupancy_limit_registers",
    "occupancy_limit_shared_mem": "launch__occupancy_limit_shared_mem",
    "occupancy_limit_warps": "launch__occupancy_limit_warps",
}
METRICS = tuple(FIELDS.values()) + tuple(STALL_METRIC.format(s) for s in STALLS)

#: unit -> factor to the summary's unit (bytes, microseconds); every other unit is taken as it is. ncu names a unit
#: in words on its details page ("nsecond") and by its symbol under `--print-units base` ("ns")
_TIME_SCALE = {"nsecond": 1e-3, "usecond": 1.0, "msecond": 1e3, "second": 1e6, "ns": 1e-3, "us": 1.0, "ms": 1e3,
               "s": 1e6}  # fmt: skip
_SCALE = {
    "byte": 1.0,
    "Kbyte": 1e3,
    "Mbyte": 1e6,
    "Gbyte": 1e9,
    **_TIME_SCALE,
}
#: the columns each layout of ncu's CSV must have (`parse_report`)
_LAUNCH_COLUMNS = ("ID", "Kernel Name")
_DETAILS_COLUMNS = ("Metric Name", "Metric Unit", "Metric Value")
#: ncu's own sections, which every ncu has: they collect most of `FIELDS` and the stall reasons whatever the
#: metric query offers; `METRICS` are asked for besides them
SECTIONS = (
    "SpeedOfLight",
    "LaunchStats",
    "Occupancy",
    "MemoryWorkloadAnalysis",
    "ComputeWorkloadAnalysis",
    "SchedulerStats",
    "WarpStateStats",
)


class ProfileError(Exception):
    """A report this tool cannot read, or one that does not line up with its plan."""


# --- the shapes and the plan ----------------------------------------------------------------------------------------


def parse_shape(text: str) -> tuple[str, int, int]:
    """`LABEL:HEADS:ROWS` -> (label, heads, rows); ValueError saying what is wrong."""
    parts = text.rsplit(":", 2)
    if len(parts) != 3 or not parts[0]:
        raise ValueError(f"--shape {text!r}: want LABEL:HEADS:ROWS, e.g. 'GLM-5 TP1:64:32'")
    try:
        heads, rows = int(parts[1]), int(parts[2])
    except ValueError:
        raise ValueError(f"--shape {text!r}: HEADS and ROWS must be integers") from None
    if heads <= 0 or rows <= 0:
        raise ValueError(f"--shape {text!r}: HEADS and ROWS must be positive")
    return parts[0], heads, rows


def kernels_of(splits: int) -> list[str]:
    """The kernels one call launches, in order, at `splits` split-KV slices."""
    return [FINAL] if splits == 1 else [SPLIT, MERGE]


def plan_entry(label: str, heads: int, rows: int, launch: dict) -> dict:
    """One shape's entry of the plan: its launch (benchmarks/dsa_kernels.py's `mla_launch`) and its kernels."""
    return {
        "shape": f"{label} {heads}h top-k {TOPK} rows {rows}",
        "heads": heads,
        "rows": rows,
        "launch": launch,
        "kernels": kernels_of(launch["splits"]),
    }


# --- reading ncu's CSV ----------------------------------------------------------------------------------------------


def _number(text: str) -> float | None:
    """ncu's printed value as a float (thousands separators dropped); None for n/a or an empty cell."""
    text = text.strip().replace(",", "")
    if not text or text.lower() in ("n/a", "nan"):
        return None
    try:
        return float(text)
    except ValueError:
        return None


def _scaled(value: float | None, unit: str) -> tuple[float | None, str]:
    """A value in bytes or microseconds where its unit is one of `_SCALE`'s; otherwise as ncu gave it."""
    if value is not None and unit in _SCALE:
        return value * _SCALE[unit], ("usecond" if unit in _TIME_SCALE else "byte")
    return value, unit


def parse_report(text: str) -> list[dict]:
    """ncu's CSV of a report -> one dict per profiled launch, in report order: {"id", "kernel", "metrics": {metric
    name: value in bytes / microseconds / the unit ncu gave}, "units": {name: unit}}. Reads both of ncu's layouts:
    `--page raw` (a column a metric, a row a launch, the units in the row after the header; what `profile` imports)
    and `--page details` (a row a metric of a launch, "Metric Name" / "Metric Unit" / "Metric Value"). Lines before
    the header (ncu's `==PROF==` messages) are skipped. Raises ProfileError where there is no header or it lacks a
    column this tool reads."""
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith('"ID"')), None)
    if start is None:
        raise ProfileError(
            f'no CSV header (a line starting with "ID") in ncu\'s output of {len(lines)} line(s): not an '
            "`ncu --import --csv` report"
        )
    reader = csv.DictReader(io.StringIO("\n".join(lines[start:])))
    header = list(reader.fieldnames or ())
    long = "Metric Name" in header
    required = _LAUNCH_COLUMNS + (_DETAILS_COLUMNS if long else ())
    missing = [c for c in required if c not in header]
    if missing:
        raise ProfileError(f"ncu's CSV lacks the column(s) {', '.join(missing)}; its header: {header}")
    launches: dict[str, dict] = {}
    units: dict[str, str] = {}
    for row in reader:
        if not row.get("ID"):
            if not long and not launches:  # the raw page's units row
                units = {k: (v or "").strip() for k, v in row.items() if k is not None}
            continue
        if not long and not units:
            raise ProfileError(
                "ncu's raw CSV has no units row after its header: its values' units (ns or us, bytes or KB) are "
                "unknown; read the details page instead (`--page details`)"
            )
        launch = launches.setdefault(row["ID"], {"id": row["ID"], "kernel": row["Kernel Name"], "metrics": {},
                                                 "units": {}})  # fmt: skip
        if long:
            cells = [(row["Metric Name"], (row["Metric Unit"] or "").strip(), row["Metric Value"] or "")]
        else:
            cells = [(k, units.get(k, ""), v or "") for k, v in row.items() if k is not None and "__" in k]
        for name, unit, text_value in cells:
            launch["metrics"][name], launch["units"][name] = _scaled(_number(text_value), unit)
    return sorted(launches.values(), key=lambda launch: int(launch["id"]))


# --- the summary ----------------------------------------------------------------------------------------------------


def kernel_summary(launch: dict) -> dict:
    """One launch's figures under `FIELDS`' names (None where ncu gave none), its stall reasons (cycles per issued
    instruction, each with its share of their sum), the top three, and derived rates."""
    m = launch["metrics"]
    out: dict = {"kernel": launch["kernel"], "ncu_id": launch["id"]}
    out.update({key: m.get(metric) for key, metric in FIELDS.items()})
    stalls = {s: m.get(STALL_METRIC.format(s)) for s in STALLS}
    known = {s: v for s, v in stalls.items() if v is not None}
    total = sum(known.values())
    out["stalls"] = {s: {"cycles_per_issue": v, "share": v / total if total else None} for s, v in known.items()}
    out["top_stalls"] = [s for s, _ in sorted(known.items(), key=lambda kv: -kv[1])[:3]]
    us = out["us"]
    for key, nbytes in (("dram_read_gbs", out["dram_read_bytes"]), ("l2_gbs", out["l2_bytes"])):
        out[key] = nbytes / us / 1e3 if nbytes is not None and us else None
    return out


def summarize(launches: list[dict], plan: list[dict], gpu: str | None = None) -> dict:
    """The report's launches matched to the plan's shapes in order: each shape's kernels must be the report's next
    launches and named as the plan says (ncu may add a prefix or suffix). Raises ProfileError, naming the shape and
    the launch, where they do not line up or where launches are left over."""
    shapes = []
    pos = 0
    for entry in plan:
        kernels = []
        for want in entry["kernels"]:
            if pos >= len(launches):
                raise ProfileError(
                    f"{entry['shape']}: the report has {len(launches)} launch(es) and ends before {want} (launch "
                    f"{pos + 1} of the plan): the run was cut short or ncu's kernel filter missed it"
                )
            got = launches[pos]
            if want not in got["kernel"]:
                raise ProfileError(
                    f"{entry['shape']}: launch {pos + 1} of the report (ncu ID {got['id']}) is {got['kernel']!r}, "
                    f"the plan has {want}: the report and the plan are not of the same run"
                )
            kernels.append(kernel_summary(got))
            pos += 1
        shapes.append({**entry, "profiled": kernels})
    if pos != len(launches):
        extra = ", ".join(repr(launch["kernel"]) for launch in launches[pos:])
        raise ProfileError(f"{len(launches) - pos} launch(es) of the report not in the plan: {extra}")
    return {
        "gpu": gpu,
        "timing": "ncu's kernel replay, caches flushed before each, clocks not locked: not the CUDA-graph times of "
        "docs/benchmarks.md",
        "shapes": shapes,
    }


def table(summary: dict) -> str:
    """The summary as a Markdown table, a row a launch."""
    head = (
        "| shape | kernel | us | DRAM read GB/s (% peak) | L2 hit | occupancy achieved / allowed | regs | smem KB "
        "| tensor pipe | issue/cycle | top stalls (share) |"
    )
    lines = [head, "|" + "---|" * 11]

    def f(value, fmt: str) -> str:
        return "-" if value is None else format(value, fmt)

    for shape in summary["shapes"]:
        for k in shape["profiled"]:
            smem = sum(v for v in (k["shared_mem_dynamic_bytes"], k["shared_mem_static_bytes"]) if v is not None)
            stalls = ", ".join(f"{s} {k['stalls'][s]['share']:.0%}" for s in k["top_stalls"])
            lines.append(
                f"| {shape['shape']} | {k['kernel']} | {f(k['us'], '.1f')} | {f(k['dram_read_gbs'], '.0f')} "
                f"({f(k['dram_pct_of_peak'], '.0f')}%) | {f(k['l2_hit_pct'], '.0f')}% "
                f"| {f(k['achieved_occupancy_pct'], '.1f')}% / {f(k['theoretical_occupancy_pct'], '.1f')}% "
                f"| {f(k['registers'], '.0f')} | {smem / 1e3:.0f} | {f(k['tensor_pipe_pct'], '.1f')}% "
                f"| {f(k['issue_active_per_cycle'], '.2f')} | {stalls or '-'} |"
            )
    return "\n".join(lines)


# --- ncu ------------------------------------------------------------------------------------------------------------


def offered(metrics, query_output: str) -> tuple[list[str], list[str]]:
    """(offered, not offered) of `metrics` by `ncu --query-metrics`' output: a metric is offered where its base name
    (before the first '.') appears there as a word."""
    words = set(re.findall(r"[A-Za-z0-9_]+", query_output))
    kept = [m for m in metrics if m.split(".", 1)[0] in words]
    return kept, [m for m in metrics if m not in kept]


def ncu_command(ncu: str, report: Path, metrics, child: list[str]) -> list[str]:
    """The profiling run: only the launches between the child's profiler start and stop, only the sparse-MLA
    kernels, clocks left alone, ncu's `SECTIONS` and `metrics` collected, the report written to `report` (.ncu-rep
    added by ncu)."""
    return [
        ncu,
        "--profile-from-start",
        "off",
        "--clock-control",
        "none",
        "--kernel-name",
        KERNEL_REGEX,
        *(a for section in SECTIONS for a in ("--section", section)),
        *(("--metrics", ",".join(metrics)) if metrics else ()),
        "--export",
        str(report),
        "--force-overwrite",
        *child,
    ]


def import_command(ncu: str, report: Path, page: str = "raw") -> list[str]:
    return [ncu, "--import", str(report), "--csv", "--page", page, "--print-units", "base"]


# --- the GPU side ---------------------------------------------------------------------------------------------------


def launch(tree: Path, shapes, sm80_ptx: bool, plan_out: Path) -> list[dict]:
    """Run each shape's call once to compile and tune it, then once between `cudaProfilerStart` and `Stop`; write
    the plan (what each profiled call launches, by the kernel's own rules) to `plan_out`. Needs a GPU."""
    sys.path[:0] = [str(REPO / "lab" / "device"), str(REPO / "benchmarks")]
    compiled: list[dict] = []
    if sm80_ptx:
        from sm80_ptx import enable

        enable(compiled)
    import torch
    from dsa_kernels import mla_launch
    from kernel_offsets import install_vllm_shim

    mod = install_vllm_shim(tree)["triton_mla_sparse_kernel"]
    sm_count = torch.cuda.get_device_properties(0).multi_processor_count
    gen = torch.Generator(device="cuda").manual_seed(0)
    kv = (torch.randn(SLOTS, 1, QK_DIM, device="cuda", generator=gen) * 0.5).to(torch.bfloat16)
    plan = []
    for label, heads, rows in shapes:
        q = (torch.randn(rows, heads, QK_DIM, device="cuda", generator=gen) * 0.5).to(torch.bfloat16)
        idx = torch.randint(0, SLOTS, (rows, 1, TOPK), dtype=torch.int32, device="cuda", generator=gen)
        mod.triton_mla_sparse_attention(q, kv, idx, SM_SCALE, sm_count=sm_count)
        torch.cuda.synchronize()
        plan.append(plan_entry(label, heads, rows, mla_launch(mod, rows, heads, TOPK, sm_count)))
        torch.cuda.profiler.start()
        mod.triton_mla_sparse_attention(q, kv, idx, SM_SCALE, sm_count=sm_count)
        torch.cuda.synchronize()
        torch.cuda.profiler.stop()
    doc = {"gpu": torch.cuda.get_device_name(0), "tree": str(tree), "sm80_ptx": sm80_ptx, "plan": plan,
           "compiled": compiled}  # fmt: skip
    _write_atomically(plan_out, json.dumps(doc, indent=1) + "\n")
    return plan


def _write_atomically(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def _run(cmd: list[str], timeout: float, log: Path) -> subprocess.CompletedProcess:
    """`cmd` with its output appended to `log`; ProfileError where it runs past `timeout` seconds or cannot start."""
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as exc:
        with log.open("a") as fh:
            fh.write(f"$ {' '.join(cmd)}\ntimed out after {timeout:g} s\n{exc.stdout or ''}{exc.stderr or ''}\n")
        raise ProfileError(f"{cmd[0]} ran past {timeout:g} s; its output so far is in {log}") from None
    except OSError as exc:
        raise ProfileError(f"cannot run {cmd[0]}: {exc}") from None
    with log.open("a") as fh:
        fh.write(f"$ {' '.join(cmd)}\nrc={proc.returncode}\n{proc.stdout}{proc.stderr}\n")
    return proc


def profile(tree: Path, out: Path, shapes, sm80_ptx: bool, ncu: str, timeout: float) -> dict:
    """The whole GPU call (see the module's docstring); returns the summary and writes it with the report, the
    CSV, the plan and ncu's log under `out`. Raises ProfileError saying which step failed and where its log is."""
    out.mkdir(parents=True, exist_ok=True)
    log = out / "mla_profile.log"
    query = _run([ncu, "--query-metrics"], 120, log)
    # a metric the query does not list is left out (the sections still collect theirs): one ncu does not know would
    # end the profiled run; where the query itself fails, only the sections are collected
    kept, dropped = offered(METRICS, query.stdout) if query.returncode == 0 else ([], list(METRICS))
    plan_path, report = out / "mla_profile_plan.json", out / "mla_profile"
    child = [sys.executable, str(Path(__file__).resolve()), "launch", "--tree", str(tree), "--plan", str(plan_path)]
    child += [a for label, heads, rows in shapes for a in ("--shape", f"{label}:{heads}:{rows}")]
    child += ["--sm80-ptx"] if sm80_ptx else []
    run = _run(ncu_command(ncu, report, kept, child), timeout, log)
    if run.returncode != 0 or not plan_path.exists():
        raise ProfileError(f"the profiled run failed (rc {run.returncode}); ncu's output is in {log}")
    doc = load_plan(plan_path)
    launches, why = None, []
    # the raw page (every collected metric by its name), else the details page (a unit on every row)
    for page, name in (("raw", "mla_profile.csv"), ("details", "mla_profile_details.csv")):
        imported = _run(import_command(ncu, report.with_suffix(".ncu-rep"), page), 120, log)
        if imported.returncode != 0:
            why.append(f"--page {page}: `ncu --import` rc {imported.returncode}")
            continue
        _write_atomically(out / name, imported.stdout)
        try:
            launches = parse_report(imported.stdout)
            break
        except ProfileError as exc:
            why.append(f"--page {page}: {exc}")
    if launches is None:
        raise ProfileError(f"the report could not be read back ({'; '.join(why)}); see {log}")
    summary = summarize(launches, doc["plan"], doc.get("gpu"))
    summary["read_from"] = page
    summary.update(metrics_not_offered=dropped, sm80_ptx=sm80_ptx, tree=str(tree))
    write_summary(summary, out / "mla_profile.json")
    return summary


def load_plan(path: Path) -> dict:
    """`launch`'s plan document; ProfileError naming the file where it is not one."""
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise ProfileError(f"{path}: not a readable plan ({exc})") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("plan"), list):
        raise ProfileError(f"{path}: no 'plan' list: not written by `mla_profile.py launch`")
    for i, entry in enumerate(doc["plan"]):
        if not isinstance(entry, dict) or not {"shape", "kernels"} <= entry.keys():
            raise ProfileError(f"{path}: plan entry {i} lacks 'shape' or 'kernels'")
    return doc


def write_summary(summary: dict, path: Path) -> None:
    _write_atomically(path, json.dumps(summary, indent=1) + "\n")
    _write_atomically(path.with_suffix(".md"), table(summary) + "\n")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    for name in ("profile", "launch"):
        p = sub.add_parser(name)
        p.add_argument("--tree", type=Path, required=True, help="a tree holding vllm/v1/attention/ops/")
        p.add_argument("--shape", action="append", default=[], help="LABEL:HEADS:ROWS (repeat; default: SHAPES)")
        p.add_argument("--sm80-ptx", action="store_true", help="build the kernels as an A100's sm_80 PTX")
    sub.choices["profile"].add_argument("--out", type=Path, required=True, help="the folder the results go to")
    sub.choices["profile"].add_argument("--ncu", default="ncu")
    sub.choices["profile"].add_argument("--timeout-s", type=float, default=480.0, help="for the profiled run")
    sub.choices["launch"].add_argument("--plan", type=Path, required=True)
    s = sub.add_parser("summarize")
    s.add_argument("--csv", type=Path, required=True)
    s.add_argument("--plan", type=Path, required=True)
    s.add_argument("--out", type=Path, required=True, help="the summary, JSON (and a table beside it, .md)")
    args = ap.parse_args(argv)
    try:
        if args.cmd == "summarize":
            doc = load_plan(args.plan)
            try:
                text = args.csv.read_text()
            except OSError as exc:
                raise ProfileError(f"--csv {args.csv}: {exc}") from None
            summary = summarize(parse_report(text), doc["plan"], doc.get("gpu"))
            write_summary(summary, args.out)
        else:
            if not (args.tree / "vllm/v1/attention/ops/triton_mla_sparse_kernel.py").is_file():
                ap.error(f"--tree {args.tree}: no vllm/v1/attention/ops/triton_mla_sparse_kernel.py there")
            shapes = [parse_shape(s) for s in args.shape] or list(SHAPES)
            if args.cmd == "launch":
                launch(args.tree, shapes, args.sm80_ptx, args.plan)
                return 0
            summary = profile(args.tree, args.out, shapes, args.sm80_ptx, args.ncu, args.timeout_s)
    except ValueError as exc:
        ap.error(str(exc))
    except ProfileError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(table(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
