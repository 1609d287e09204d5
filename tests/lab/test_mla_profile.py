"""lab/candidates/mla_profile.py without a GPU: shapes, ncu's CSV read back, the report matched to its plan (and
refused where it does not match), the ncu command lines, the whole `profile` step with a stand-in `ncu`, and the plan
entry 0045's kernel makes at the default shapes.

The CSVs here are written for these tests in the two layouts of `ncu --import --csv`, with made-up values; neither is
a recorded report: `--page details` (a row a metric of a launch: "ID", ..., "Kernel Name", ..., "Section Name",
"Metric Name", "Metric Unit", "Metric Value") and `--page raw` (a row a launch, a column a metric, the units in the
row after the header).
"""

from __future__ import annotations

import csv
import io
import json
import stat
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "lab" / "candidates"))

import mla_profile as mp  # noqa: E402

COLUMNS = ["ID", "Process ID", "Process Name", "Host Name", "Kernel Name", "Context", "Stream", "Block Size",
           "Grid Size", "Device", "CC", "Section Name", "Metric Name", "Metric Unit", "Metric Value"]  # fmt: skip


def launch_rows(launch_id: int, kernel: str, values: dict[str, tuple[str, str]]) -> list[list[str]]:
    head = [str(launch_id), "4242", "python3", "127.0.0.1", kernel, "1", "7", "(128, 1, 1)", "(1, 4, 16)", "0", "9.0"]
    return [[*head, "Command line profiler metrics", name, unit, value] for name, (unit, value) in values.items()]


def report(launches: list[tuple[str, dict]]) -> str:
    buf = io.StringIO()
    buf.write("==PROF== Connected to process 4242\n==PROF== Disconnected from process 4242\n")
    w = csv.writer(buf, quoting=csv.QUOTE_ALL, lineterminator="\n")
    w.writerow(COLUMNS)
    for i, (kernel, values) in enumerate(launches):
        w.writerows(launch_rows(i, kernel, values))
    return buf.getvalue()


def raw_report(launches: list[tuple[str, dict]], units_row: bool = True) -> str:
    """The same launches in the raw page's layout: one column a metric (every launch's, in first-seen order), the
    units in the row after the header unless `units_row` is False."""
    names = list(dict.fromkeys(name for _, values in launches for name in values))
    units = {name: unit for _, values in launches for name, (unit, _) in values.items()}
    buf = io.StringIO()
    w = csv.writer(buf, quoting=csv.QUOTE_ALL, lineterminator="\n")
    w.writerow(COLUMNS[:11] + names)
    if units_row:
        w.writerow([""] * 11 + [units[n] for n in names])
    for i, (kernel, values) in enumerate(launches):
        head = [str(i), "4242", "python3", "127.0.0.1", kernel, "1", "7", "(128, 1, 1)", "(1, 4, 16)", "0", "9.0"]
        w.writerow(head + [values[n][1] if n in values else "" for n in names])
    return buf.getvalue()


def split_metrics(us_ns: str = "11,200") -> dict[str, tuple[str, str]]:
    """A split pass: 11.2 us, 2.4 MB of DRAM read, stalls long_scoreboard 6, barrier 2, selected 1, wait 1."""
    return {
        mp.FIELDS["us"]: ("nsecond", us_ns),
        mp.FIELDS["dram_read_bytes"]: ("Kbyte", "2,400"),
        mp.FIELDS["l2_bytes"]: ("byte", "9600000"),
        mp.FIELDS["l2_hit_pct"]: ("%", "61.5"),
        mp.FIELDS["achieved_occupancy_pct"]: ("%", "6.1"),
        mp.FIELDS["theoretical_occupancy_pct"]: ("%", "6.25"),
        mp.FIELDS["registers"]: ("register/thread", "193"),
        mp.FIELDS["shared_mem_dynamic_bytes"]: ("byte", "94,208"),
        mp.FIELDS["tensor_pipe_pct"]: ("%", "n/a"),
        mp.STALL_METRIC.format("long_scoreboard"): ("", "6"),
        mp.STALL_METRIC.format("barrier"): ("", "2"),
        mp.STALL_METRIC.format("selected"): ("", "1"),
        mp.STALL_METRIC.format("wait"): ("", "1"),
    }


def merge_metrics() -> dict[str, tuple[str, str]]:
    return {mp.FIELDS["us"]: ("nsecond", "1,700"), mp.STALL_METRIC.format("long_scoreboard"): ("", "3")}


PLAN = [
    mp.plan_entry("GLM-5 TP1", 64, 1, {"block_h": 16, "head_groups": 4, "splits": 16, "programs": 64}),
    mp.plan_entry("GLM-5 TP1", 64, 64, {"block_h": 16, "head_groups": 4, "splits": 1, "programs": 256}),
]
LAUNCHES = [(mp.SPLIT, split_metrics()), (mp.MERGE, merge_metrics()), (mp.FINAL, split_metrics("140,400"))]


def test_shapes_are_label_heads_rows_and_bad_ones_say_what_is_wrong():
    assert mp.parse_shape("GLM-5 TP1:64:32") == ("GLM-5 TP1", 64, 32)
    assert mp.parse_shape("a:b:8:1") == ("a:b", 8, 1)  # the label may hold a colon; heads and rows are the last two
    for bad, why in (("GLM-5:64", "LABEL:HEADS:ROWS"), (":64:1", "LABEL:HEADS:ROWS"), ("x:64:y", "integers"),
                     ("x:0:1", "positive")):  # fmt: skip
        with pytest.raises(ValueError, match=why):
            mp.parse_shape(bad)


def test_a_call_launches_the_single_pass_or_the_split_pass_and_the_merge():
    assert mp.kernels_of(1) == [mp.FINAL]
    assert mp.kernels_of(16) == [mp.SPLIT, mp.MERGE]
    assert PLAN[0]["shape"] == "GLM-5 TP1 64h top-k 2048 rows 1" and PLAN[0]["kernels"] == [mp.SPLIT, mp.MERGE]


def test_the_csv_reads_back_in_bytes_and_microseconds_past_ncus_messages():
    launches = mp.parse_report(report(LAUNCHES))
    assert [(x["id"], x["kernel"]) for x in launches] == [("0", mp.SPLIT), ("1", mp.MERGE), ("2", mp.FINAL)]
    m = launches[0]["metrics"]
    assert m[mp.FIELDS["us"]] == pytest.approx(11.2)  # 11,200 ns
    assert m[mp.FIELDS["dram_read_bytes"]] == pytest.approx(2.4e6)  # 2,400 Kbyte
    assert m[mp.FIELDS["shared_mem_dynamic_bytes"]] == 94208
    assert m[mp.FIELDS["tensor_pipe_pct"]] is None  # n/a
    assert launches[0]["units"][mp.FIELDS["us"]] == "usecond"
    assert launches[1]["metrics"][mp.FIELDS["us"]] == pytest.approx(1.7)
    # ncu's other scaled units, and a unit taken as it is
    assert mp._scaled(1.7, "usecond") == (1.7, "usecond") and mp._scaled(2.0, "msecond") == (2000.0, "usecond")
    assert mp._scaled(1.5, "Mbyte") == (1.5e6, "byte") and mp._scaled(61.5, "%") == (61.5, "%")


def test_the_base_units_ncu_prints_by_symbol_read_back_as_its_words_do():
    """`--print-units base` names time by symbol ("ns"), as the H100's ncu printed it; 13,920 ns is 13.92 us, not
    13,920 us."""
    symbols = [(k, {n: ({"nsecond": "ns"}.get(u, u), v) for n, (u, v) in values.items()}) for k, values in LAUNCHES]
    by_symbol, by_word = mp.parse_report(raw_report(symbols)), mp.parse_report(raw_report(LAUNCHES))
    assert [x["metrics"] for x in by_symbol] == [x["metrics"] for x in by_word]
    assert by_symbol[0]["metrics"][mp.FIELDS["us"]] == pytest.approx(11.2)
    assert by_symbol[0]["units"][mp.FIELDS["us"]] == "usecond"
    assert mp._scaled(2.0, "ms") == (2000.0, "usecond") and mp._scaled(3.0, "s") == (3e6, "usecond")
    assert mp._scaled(5.0, "byte/s") == (5.0, "byte/s")  # a rate is not a time: taken as it is


def test_the_raw_page_reads_back_as_the_details_page_does():
    raw, details = mp.parse_report(raw_report(LAUNCHES)), mp.parse_report(report(LAUNCHES))
    assert [x["kernel"] for x in raw] == [mp.SPLIT, mp.MERGE, mp.FINAL]
    for a, b in zip(raw, details, strict=True):
        # a metric a launch lacks is an empty cell in the raw page (None) and no row in the details page
        assert {k: v for k, v in a["metrics"].items() if v is not None} == {
            k: v for k, v in b["metrics"].items() if v is not None
        }
    assert raw[0]["metrics"][mp.FIELDS["us"]] == pytest.approx(11.2)
    assert raw[0]["metrics"][mp.FIELDS["dram_read_bytes"]] == pytest.approx(2.4e6)
    assert raw[1]["metrics"][mp.FIELDS["registers"]] is None


def test_a_raw_page_without_its_units_row_is_refused_not_read_in_unknown_units():
    with pytest.raises(mp.ProfileError, match="no units row"):
        mp.parse_report(raw_report(LAUNCHES, units_row=False))


def test_profile_reads_the_details_page_where_the_raw_page_cannot_be_read(tmp_path, capsys):
    out = tmp_path / "out"
    rc = mp.main(["profile", "--tree", str(kernel_tree(tmp_path)), "--out", str(out),
                  "--ncu", str(fake_ncu(tmp_path, units_row=False))])  # fmt: skip
    assert rc == 0, capsys.readouterr().err
    summary = json.loads((out / "mla_profile.json").read_text())
    assert summary["read_from"] == "details"
    assert summary["shapes"][0]["profiled"][0]["us"] == pytest.approx(11.2)  # 11,200 ns, by the details page's unit
    assert (out / "mla_profile.csv").exists() and (out / "mla_profile_details.csv").exists()


def test_a_csv_without_the_columns_read_is_refused_naming_them():
    with pytest.raises(mp.ProfileError, match="not an `ncu --import --csv` report"):
        mp.parse_report("==PROF== nothing profiled\n")
    text = report(LAUNCHES).replace('"Metric Unit"', '"Unit"')
    with pytest.raises(mp.ProfileError, match="lacks the column.*Metric Unit"):
        mp.parse_report(text)
    with pytest.raises(mp.ProfileError, match="lacks the column.*Kernel Name"):
        mp.parse_report(raw_report(LAUNCHES).replace('"Kernel Name"', '"Function"'))


def test_the_summary_gives_each_shapes_launches_their_rates_and_stall_shares():
    summary = mp.summarize(mp.parse_report(report(LAUNCHES)), PLAN, "NVIDIA H100 80GB HBM3")
    one, sixty_four = summary["shapes"]
    split, merge = one["profiled"]
    assert (split["kernel"], merge["kernel"]) == (mp.SPLIT, mp.MERGE)
    assert split["us"] == pytest.approx(11.2) and split["registers"] == 193
    assert split["dram_read_gbs"] == pytest.approx(2.4e6 / 11.2 / 1e3)  # 214 GB/s
    assert split["l2_gbs"] == pytest.approx(9.6e6 / 11.2 / 1e3)
    assert split["tensor_pipe_pct"] is None and split["dram_write_bytes"] is None  # not in the report: None, not 0
    assert split["top_stalls"] == ["long_scoreboard", "barrier", "selected"]
    assert split["stalls"]["long_scoreboard"]["share"] == pytest.approx(0.6)
    assert sum(s["share"] for s in split["stalls"].values()) == pytest.approx(1.0)
    assert merge["dram_read_gbs"] is None  # no bytes reported
    assert [k["kernel"] for k in sixty_four["profiled"]] == [mp.FINAL]
    assert sixty_four["profiled"][0]["us"] == pytest.approx(140.4)
    assert "not the CUDA-graph times" in summary["timing"]
    text = mp.table(summary)
    assert "| GLM-5 TP1 64h top-k 2048 rows 1 | _sparse_mla_kernel_split | 11.2 | 214 (-%) | 62% |" in text
    assert "long_scoreboard 60%, barrier 20%, selected 10%" in text
    assert len(text.splitlines()) == 2 + 3


@pytest.mark.parametrize(
    "launches, why",
    [
        # the one-row call ran single-pass: not the plan's run
        ([(mp.FINAL, split_metrics()), (mp.FINAL, split_metrics())], r"rows 1: launch 1 .*ncu ID 0.* the plan has "),
        # the merge missing: the report's second launch is the 64-row call's
        ([(mp.SPLIT, split_metrics()), (mp.FINAL, split_metrics())], r"rows 1: launch 2 .* is '_sparse_mla_kernel_f"),
        # cut short before the 64-row call
        (LAUNCHES[:2], r"rows 64: the report has 2 launch\(es\) and ends before _sparse_mla_kernel_final"),
        # a launch the plan does not have
        (LAUNCHES + [(mp.MERGE, merge_metrics())], r"1 launch\(es\) of the report not in the plan"),
    ],
)
def test_a_report_that_does_not_line_up_with_its_plan_is_refused(launches, why):
    with pytest.raises(mp.ProfileError, match=why):
        mp.summarize(mp.parse_report(report(launches)), PLAN)


def test_only_the_metrics_ncu_offers_are_asked_for():
    query = "Device GH100\n dram__bytes_read  Counter  byte  # of bytes read from DRAM\n gpu__time_duration ...\n"
    kept, dropped = mp.offered(["dram__bytes_read.sum", "gpu__time_duration.sum", "no__such_metric.sum"], query)
    assert kept == ["dram__bytes_read.sum", "gpu__time_duration.sum"] and dropped == ["no__such_metric.sum"]


def test_the_profiling_command_profiles_only_the_childs_range_and_the_sparse_mla_kernels(tmp_path):
    cmd = mp.ncu_command("ncu", tmp_path / "r", ["a.sum", "b.pct"], ["python3", "x.py", "launch"])
    joined = " ".join(cmd)
    assert "--profile-from-start off" in joined and "--clock-control none" in joined
    assert "--kernel-name regex:_sparse_mla" in joined and "--metrics a.sum,b.pct" in joined
    assert [cmd[i + 1] for i, a in enumerate(cmd) if a == "--section"] == list(mp.SECTIONS)
    assert "--metrics" not in mp.ncu_command("ncu", tmp_path / "r", [], ["python3"])  # the sections alone
    assert cmd[-3:] == ["python3", "x.py", "launch"] and f"--export {tmp_path / 'r'}" in joined
    assert mp.import_command("ncu", tmp_path / "r.ncu-rep") == [
        "ncu", "--import", str(tmp_path / "r.ncu-rep"), "--csv", "--page", "raw", "--print-units", "base"
    ]  # fmt: skip


# --- `profile` with a stand-in ncu ----------------------------------------------------------------------------------

_FAKE_NCU = """#!{python}
# A stand-in for ncu: --query-metrics offers every metric but the tensor pipe's (or fails); a profiling run writes
# the plan its child would (the child needs a GPU) and a report file; --import prints that report's raw page (without
# its units row where asked) or its details page
import json, sys
from pathlib import Path
sys.path.insert(0, {tests!r})
import test_mla_profile as t
argv = sys.argv[1:]
if argv == ["--query-metrics"]:
    if {query_fails}:
        sys.exit(3)
    print("\\n".join(m.split(".")[0] for m in t.mp.METRICS if "tensor_op" not in m))
elif argv[0] == "--import":
    page = argv[argv.index("--page") + 1]
    print(t.raw_report(t.LAUNCHES, units_row={units_row}) if page == "raw" else t.report(t.LAUNCHES))
else:
    if {fail}:
        print("==ERROR== the profiled process failed", file=sys.stderr)
        sys.exit(1)
    Path(argv[argv.index("--export") + 1] + ".ncu-rep").write_text("report")
    plan = Path(argv[argv.index("--plan") + 1])
    plan.write_text(json.dumps({{"gpu": "NVIDIA H100 80GB HBM3", "plan": t.PLAN}}))
    Path(plan.parent / "argv.json").write_text(json.dumps(argv))
"""


def fake_ncu(tmp_path: Path, fail: bool = False, query_fails: bool = False, units_row: bool = True) -> Path:
    ncu = tmp_path / "ncu"
    here = str(Path(__file__).parent)
    ncu.write_text(
        _FAKE_NCU.format(python=sys.executable, tests=here, fail=fail, query_fails=query_fails, units_row=units_row)
    )
    ncu.chmod(ncu.stat().st_mode | stat.S_IEXEC)
    return ncu


def kernel_tree(tmp_path: Path) -> Path:
    kernel = tmp_path / "tree" / "vllm/v1/attention/ops/triton_mla_sparse_kernel.py"
    kernel.parent.mkdir(parents=True)
    kernel.write_text("# the kernel\n")
    return tmp_path / "tree"


def test_profile_writes_the_report_csv_summary_and_table_and_names_the_metrics_dropped(tmp_path, capsys):
    out = tmp_path / "out"
    rc = mp.main(["profile", "--tree", str(kernel_tree(tmp_path)), "--out", str(out), "--ncu", str(fake_ncu(tmp_path)),
                  "--shape", "GLM-5 TP1:64:1", "--shape", "GLM-5 TP1:64:64", "--sm80-ptx"])  # fmt: skip
    assert rc == 0, capsys.readouterr().err
    summary = json.loads((out / "mla_profile.json").read_text())
    assert summary["metrics_not_offered"] == [mp.FIELDS["tensor_pipe_pct"]]
    assert summary["gpu"] == "NVIDIA H100 80GB HBM3" and summary["sm80_ptx"] is True and summary["read_from"] == "raw"
    assert [len(s["profiled"]) for s in summary["shapes"]] == [2, 1]
    assert (out / "mla_profile.ncu-rep").read_text() == "report"
    assert (out / "mla_profile.csv").read_text().startswith('"ID"')
    assert (out / "mla_profile.md").read_text().startswith("| shape |")
    argv = json.loads((out / "argv.json").read_text())
    assert mp.FIELDS["tensor_pipe_pct"] not in argv[argv.index("--metrics") + 1]
    child = argv[argv.index("--force-overwrite") + 1 :]
    assert child[1:3] == [str(Path(mp.__file__).resolve()), "launch"]
    assert child[child.index("--shape") + 1] == "GLM-5 TP1:64:1" and child[-1] == "--sm80-ptx"
    assert "_sparse_mla_kernel_split" in capsys.readouterr().out


def test_where_the_metric_query_fails_only_the_sections_are_collected(tmp_path, capsys):
    out = tmp_path / "out"
    rc = mp.main(["profile", "--tree", str(kernel_tree(tmp_path)), "--out", str(out),
                  "--ncu", str(fake_ncu(tmp_path, query_fails=True))])  # fmt: skip
    assert rc == 0, capsys.readouterr().err
    assert json.loads((out / "mla_profile.json").read_text())["metrics_not_offered"] == list(mp.METRICS)
    argv = json.loads((out / "argv.json").read_text())
    assert "--metrics" not in argv and argv.count("--section") == len(mp.SECTIONS)
    assert "rc=3" in (out / "mla_profile.log").read_text()


def test_a_failed_profiled_run_is_an_error_naming_the_log_and_writes_no_summary(tmp_path, capsys):
    out = tmp_path / "out"
    rc = mp.main(["profile", "--tree", str(kernel_tree(tmp_path)), "--out", str(out), "--ncu",
                  str(fake_ncu(tmp_path, fail=True))])  # fmt: skip
    assert rc == 1
    err = capsys.readouterr().err
    assert "the profiled run failed (rc 1)" in err and str(out / "mla_profile.log") in err
    assert not (out / "mla_profile.json").exists()
    assert "the profiled process failed" in (out / "mla_profile.log").read_text()


def test_a_tree_without_the_kernel_and_a_missing_ncu_are_refused(tmp_path, capsys):
    with pytest.raises(SystemExit) as exc:
        mp.main(["profile", "--tree", str(tmp_path), "--out", str(tmp_path / "o")])
    assert exc.value.code == 2 and "no vllm/v1/attention/ops/triton_mla_sparse_kernel.py" in capsys.readouterr().err
    rc = mp.main(["profile", "--tree", str(kernel_tree(tmp_path)), "--out", str(tmp_path / "o"),
                  "--ncu", str(tmp_path / "no-ncu")])  # fmt: skip
    assert rc == 1 and "cannot run" in capsys.readouterr().err


def test_summarize_reads_a_saved_csv_and_plan_and_refuses_a_plan_it_cannot_read(tmp_path, capsys):
    (tmp_path / "r.csv").write_text(report(LAUNCHES))
    (tmp_path / "plan.json").write_text(json.dumps({"plan": PLAN}))
    out = tmp_path / "s.json"
    assert mp.main(["summarize", "--csv", str(tmp_path / "r.csv"), "--plan", str(tmp_path / "plan.json"),
                    "--out", str(out)]) == 0  # fmt: skip
    assert json.loads(out.read_text())["shapes"][1]["profiled"][0]["kernel"] == mp.FINAL
    (tmp_path / "bad.json").write_text(json.dumps({"shapes": []}))
    assert mp.main(["summarize", "--csv", str(tmp_path / "r.csv"), "--plan", str(tmp_path / "bad.json"),
                    "--out", str(tmp_path / "t.json")]) == 1  # fmt: skip
    assert "no 'plan' list" in capsys.readouterr().err and not (tmp_path / "t.json").exists()


# --- the plan entry 0045's kernel makes -----------------------------------------------------------------------------


def test_entry_0045_splits_one_row_and_runs_64_rows_single_pass_at_the_default_shapes(tmp_path, no_lasting_stand_in):
    pytest.importorskip("triton")
    sys.path[:0] = [str(REPO / "lab" / "device"), str(REPO / "benchmarks")]
    import candidate_patch as cp
    from dsa_kernels import mla_launch
    from kernel_offsets import install_vllm_shim

    path, _, after = cp.images(REPO / "series/patches/0045-perf-triton-mla-sparse-merge-one-warp.patch")
    tree = cp.write_tree(tmp_path / "t", path, after)
    mod = install_vllm_shim(tree)["triton_mla_sparse_kernel"]
    plan = {(label, rows): mp.plan_entry(label, heads, rows, mla_launch(mod, rows, heads, mp.TOPK, 132))
            for label, heads, rows in mp.SHAPES}  # fmt: skip
    assert plan[("GLM-5 TP1", 1)]["kernels"] == [mp.SPLIT, mp.MERGE]
    assert plan[("GLM-5 TP1", 1)]["launch"]["splits"] == 16  # 4 head groups x 16 = 64 programs
    assert plan[("GLM-5 TP1", 32)]["launch"]["splits"] == 2  # 128 programs < 1.5 x 132
    assert plan[("GLM-5 TP1", 64)]["kernels"] == [mp.FINAL]
    assert plan[("DSv3.2 TP1", 64)]["launch"]["programs"] == 512
