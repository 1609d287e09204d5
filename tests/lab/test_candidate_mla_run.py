"""The tools of the sparse-MLA candidate's GPU run, without a GPU: lab/candidates/candidate_patch.py (the patch's
images, trees from them, the patch written again), lab/candidates/mla_decide.py (the decision rule, on made-up sweeps
whose answer is known) and lab/candidates/mla_gpu_run.sh (its phases in order, with stand-in benchmark, oracle and
offset scripts, the real patch, decision and tree tools)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
CANDIDATES = REPO / "lab" / "candidates"
PATCH = REPO / "series" / "patches" / "0044-perf-triton-mla-sparse-one-gather-tile.patch"
KERNEL = "vllm/v1/attention/ops/triton_mla_sparse_kernel.py"
sys.path.insert(0, str(CANDIDATES))

import candidate_patch as cp  # noqa: E402
import mla_decide as md  # noqa: E402

# --- candidate_patch ---------------------------------------------------------------------------------------------


def test_the_patch_is_what_rewrite_writes_from_its_own_images_and_message(tmp_path):
    # the committed patch is the tool's output for its post-image and message: the images the tests read are the
    # files, and a later rewrite changes only what it is given
    path, before, after = cp.images(PATCH)
    assert path == KERNEL and before.startswith("# SPDX") and after.rstrip().endswith("return out")
    assert cp.rewrite(PATCH, after, cp.message_of(PATCH)) == PATCH.read_text()
    assert cp.message_of(PATCH).startswith("triton_mla_sparse: one gather a KV tile, split-KV to fill 1.5x the SMs\n")


def test_rewrite_carries_a_new_post_image_and_message(tmp_path):
    patch = tmp_path / "c.patch"
    shutil.copy(PATCH, patch)
    _, before, after = cp.images(PATCH)
    new = after.replace("_MAX_KV_SPLITS = 16\n", "_MAX_KV_SPLITS = 64\n")
    assert new != after
    assert cp.main(["rewrite", str(patch), "--post", str(_write(tmp_path / "new.py", new))]) == 0
    assert cp.images(patch) == (KERNEL, before, new)
    assert cp.message_of(patch) == cp.message_of(PATCH)
    msg = _write(tmp_path / "msg", "subject line\n\nbody\n")
    assert cp.main(["rewrite", str(patch), "--post", str(tmp_path / "new.py"), "--message", str(msg)]) == 0
    assert cp.message_of(patch) == "subject line\n\nbody\n" and cp.images(patch)[2] == new


def test_trees_hold_each_image_beside_an_empty_indexer_module(tmp_path, capsys):
    assert cp.main(["trees", str(PATCH), "--before", str(tmp_path / "b"), "--after", str(tmp_path / "a")]) == 0
    _, before, after = cp.images(PATCH)
    assert (tmp_path / "b" / KERNEL).read_text() == before and (tmp_path / "a" / KERNEL).read_text() == after
    assert (tmp_path / "a" / "vllm/v1/attention/ops/mqa_logits_triton.py").read_text() == ""


def test_a_patch_of_several_hunks_is_refused(tmp_path, capsys):
    text = PATCH.read_text()
    bad = tmp_path / "bad.patch"
    bad.write_text(text.replace("@@ -1,550 ", "@@ -2,550 ", 1))
    assert cp.main(["trees", str(bad), "--before", str(tmp_path / "b"), "--after", str(tmp_path / "a")]) == 1
    assert "does not start at line 1" in capsys.readouterr().err


def test_new_writes_a_first_patch_of_any_file_and_refuses_to_write_over_one(tmp_path, capsys):
    pre = _write(tmp_path / "pre.py", "a = 1\nb = 2\n")
    post = _write(tmp_path / "post.py", "a = 1\nb = 3\nc = 4\n")
    msg = _write(tmp_path / "msg", "backend: b is 3\n\nAnd c is 4.\n")
    patch = tmp_path / "c.patch"
    args = ["new", str(patch), "--path", "vllm/x/backend.py", "--pre", str(pre), "--post", str(post), "--message"]
    assert cp.main([*args, str(msg)]) == 0
    assert cp.images(patch) == ("vllm/x/backend.py", pre.read_text(), post.read_text())
    assert cp.message_of(patch) == msg.read_text()
    written = patch.read_text()
    assert cp.main([*args, str(msg)]) == 1 and "exists" in capsys.readouterr().err
    assert patch.read_text() == written and not list(tmp_path.glob("*.tmp"))


def test_trees_on_a_base_tree_replace_only_the_patchs_file(tmp_path):
    # a backend candidate beside a series entry's kernel: both trees are copies of the kernel's tree
    assert cp.main(["trees", str(PATCH), "--before", str(tmp_path / "e0"), "--after", str(tmp_path / "e1")]) == 0
    pre = _write(tmp_path / "pre.py", "warm = 1\n")
    post = _write(tmp_path / "post.py", "warm = 2\n")
    patch = tmp_path / "b.patch"
    backend = "vllm/v1/attention/backends/mla/triton_mla_sparse.py"
    assert cp.main(["new", str(patch), "--path", backend, "--pre", str(pre), "--post", str(post), "--message",
                    str(_write(tmp_path / "m", "s\n\nb\n"))]) == 0  # fmt: skip
    base = tmp_path / "e1"
    assert cp.main(["trees", str(patch), "--on", str(base), "--before", str(tmp_path / "b"), "--after",
                    str(tmp_path / "a")]) == 0  # fmt: skip
    for root, text in ((tmp_path / "b", "warm = 1\n"), (tmp_path / "a", "warm = 2\n")):
        assert (root / backend).read_text() == text
        assert (root / KERNEL).read_text() == (base / KERNEL).read_text() == cp.images(PATCH)[2]  # kept, not emptied
    assert (base / backend).exists() is False  # the base tree is not written
    assert cp.main(["trees", str(patch), "--on", str(tmp_path / "none"), "--before", str(tmp_path / "x"), "--after",
                    str(tmp_path / "y")]) == 1  # fmt: skip


def _write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


# --- mla_decide: made-up sweeps ------------------------------------------------------------------------------------

#: the kernel before's time (us) at each shape: the H200's sm_80 PTX figures of docs/benchmarks.md at TP1
BEFORE_US = {("GLM-5 TP1", 64): [69, 143, 245, 306], ("DSv3.2 TP1", 128): [122, 240, 303, 595],
             ("GLM-5 TP8", 8): [116, 120, 137, 251], ("DSv3.2 TP8", 16): [119, 115, 124, 251]}  # fmt: skip
ROWS = (1, 8, 32, 64)


def _bytes(rows: int, heads: int) -> int:
    return rows * 2048 * (576 * 2 + 4) + rows * heads * 1088 * 2


def _row(tree, label, heads, rows, us, policies=None, splits=1, agree=True) -> dict:
    shape = f"{label} {heads}h top-k 2048 rows {rows}"
    r = {"tree": tree, "kernel": "sparse MLA decode", "shape": shape, "bytes": _bytes(rows, heads), "ms": us / 1e3,
         "launch": {"block_h": 64, "head_groups": 1, "splits": splits, "programs": rows * splits}}  # fmt: skip
    r["share_of_peak"] = r["bytes"] / r["ms"] / 1e6 / 4800
    if policies is not None:
        r["policies"] = policies
        r["vs_first_tree"] = {"speedup": 0, "finite": True, "max_abs_first": 0.25,
                              "max_abs_diff": 2**-9 if agree else 0.01}  # fmt: skip
    return r


def sweep(policies: dict[str, tuple[dict, float, dict]]) -> dict:
    """A sweep document: the kernel before at BEFORE_US, each policy (label -> (attributes, its speed-up everywhere,
    {(label, rows): (speed-up, splits) where it differs, or "disagree"})) as rows of its own."""
    rows = []
    for (label, heads), times in BEFORE_US.items():
        for n, us in zip(ROWS, times, strict=True):
            rows.append(_row("v0260", label, heads, n, us))
            for name, (_, speedup, special) in policies.items():
                got = special.get((label, n), (speedup, 1))
                agree = got != "disagree"
                speed, splits = got if agree else (speedup, 1)
                rows.append(_row(f"mla@{name}", label, heads, n, us / speed, [name], splits, agree))
    return {"mla_policies": {k: v[0] for k, v in policies.items()}, "rows": rows}


def _fast(r1: float, splits1: int = 16) -> dict:
    """Figures meeting every target: `r1` times the kernel before at one row (in `splits1` splits), and 8x at 32 and
    64 rows, over 40% of the roofline at both models (the least: DeepSeek-V3.2 at 32 rows, 303 / 8 = 38 us for
    84.7 MB, 47% of 4.8 TB/s)."""
    out = {}
    for label in ("GLM-5 TP1", "DSv3.2 TP1"):
        out[(label, 1)] = (r1, splits1)
        out[(label, 32)] = (8.0, 4)
        out[(label, 64)] = (8.0, 2)
    return out


def test_the_fastest_policy_meeting_every_target_wins_and_ties_go_to_fewer_splits():
    doc = sweep(
        {
            "bh64/kv16/min128": ({"_MAX_BLOCK_H": 64, "_MAX_KV_SPLITS": 16, "_MIN_TOPK_PER_SPLIT": 128}, 2.0, {}),
            "bh64/kv64/min32": ({"_MAX_BLOCK_H": 64, "_MAX_KV_SPLITS": 64, "_MIN_TOPK_PER_SPLIT": 32}, 2.0,
                                _fast(4.0, 64)),
            # 1% slower in geometric mean: a tie, and it needs 32 splits at most, not 64
            "bh64/kv32/min32": ({"_MAX_BLOCK_H": 64, "_MAX_KV_SPLITS": 32, "_MIN_TOPK_PER_SPLIT": 32}, 2.0,
                                {k: (v[0] * 0.99 ** (8 / 6), v[1] if k[1] != 1 else 32) for k, v in _fast(4.0).items()}),
            # the fastest, but its output differs from the kernel before's at one shape: never a winner
            "bh32/kv64/min32": ({"_MAX_BLOCK_H": 32, "_MAX_KV_SPLITS": 64, "_MIN_TOPK_PER_SPLIT": 32}, 3.0,
                                {**_fast(5.0), ("GLM-5 TP8", 8): "disagree"}),
        }
    )  # fmt: skip
    d = md.decide(doc)
    assert d["winner"] == "bh64/kv32/min32", d["winner"]
    assert d["verdict"] == "series entry: every target met"
    assert d["attrs"] == {"_MAX_BLOCK_H": 64, "_MAX_KV_SPLITS": 32, "_MIN_TOPK_PER_SPLIT": 32, "_SPLIT_MIN_FILL": 0.75}
    assert d["check_splits"] == [1, 2, 4, 32]
    p = d["policies"]
    fastest, winner = p["bh32/kv64/min32"], p["bh64/kv32/min32"]
    assert not fastest["agrees"] and fastest["geomean_us"] < winner["geomean_us"]
    assert p["bh64/kv16/min128"]["targets_missed"][0] == "GLM-5 TP1 64h top-k 2048 rows 1: 2.00x < 3x"
    table = md.table(d)
    assert "| bh64/kv32/min32 (winner) |" in table and "DISAGREE" in table


def test_without_a_policy_meeting_the_targets_the_fastest_sound_one_wins_and_the_verdict_names_what_was_missed():
    doc = sweep(
        {
            "bh64/kv16": ({"_MAX_BLOCK_H": 64, "_MAX_KV_SPLITS": 16}, 2.0, {}),
            "bh64/kv64": ({"_MAX_BLOCK_H": 64, "_MAX_KV_SPLITS": 64}, 2.5, {}),
            # faster at the targets but 10% slower than the kernel before at one TP8 shape: out
            "bh16/kv64": ({"_MAX_BLOCK_H": 16, "_MAX_KV_SPLITS": 64}, 3.5, {("DSv3.2 TP8", 64): (0.9, 1)}),
        }
    )
    d = md.decide(doc)
    assert d["winner"] == "bh64/kv64" and not d["policies"]["bh16/kv64"]["guard"]
    missed = "series entry as faster everywhere; targets missed: "
    assert d["verdict"].startswith(missed + "GLM-5 TP1 64h top-k 2048 rows 1: 2.50x < 3x")
    assert "of the roofline" in d["verdict"]  # 2.5x at 64 rows: 306 / 2.5 = 122 us, 27% of the roofline


def test_no_sound_policy_means_no_winner_and_no_tree(tmp_path):
    doc = sweep({"bh64/kv64": ({"_MAX_BLOCK_H": 64, "_MAX_KV_SPLITS": 64}, 4.0, {("GLM-5 TP1", 8): "disagree"})})
    src = tmp_path / "sweep.json"
    src.write_text(json.dumps(doc))
    out = tmp_path / "d.json"
    args = [str(src), "--tree", str(tmp_path / "mla"), "--write", str(tmp_path / "win"), "--out", str(out)]
    # no tree there yet: refused, naming the module it wanted, nothing written
    assert md.main(args) == 1 and not out.exists()
    cp.write_tree(tmp_path / "mla", KERNEL, cp.images(PATCH)[2])
    assert md.main(args) == 0 and json.loads(out.read_text())["winner"] is None and not (tmp_path / "win").exists()
    assert json.loads(out.read_text())["verdict"].startswith("no entry")


def test_a_sweep_cut_short_is_decided_on_what_ran_and_says_so():
    doc = sweep({"bh64/kv64/min32": ({"_MAX_KV_SPLITS": 64, "_MIN_TOPK_PER_SPLIT": 32}, 2.0, _fast(4.0, 64))})
    # the run ended after DeepSeek-V3.2 TP1: no TP8 row of either kernel, and the last TP1 shape only before
    cut = [r for r in doc["rows"] if "TP8" not in r["shape"]]
    doc["rows"] = cut[:-1]
    d = md.decide(doc)
    # the last target shape is missing for the candidate: no geometric mean over the eight, so no winner
    assert d["winner"] is None and d["policies"]["bh64/kv64/min32"]["targets_missed"] == [
        "DSv3.2 TP1 128h top-k 2048 rows 64: not run"
    ]
    doc["rows"] = cut
    d = md.decide(doc)
    assert d["winner"] == "bh64/kv64/min32" and "not run" not in d["verdict"]


def test_the_winners_tree_has_its_policy_as_the_defaults(tmp_path):
    _, _, after = cp.images(PATCH)
    cp.write_tree(tmp_path / "mla", KERNEL, after)
    attrs = {"_MAX_BLOCK_H": 32, "_MAX_KV_SPLITS": 64, "_MIN_TOPK_PER_SPLIT": 32, "_SPLIT_MIN_FILL": 1.5}
    md.winner_tree(tmp_path / "mla", tmp_path / "win", attrs)
    text = (tmp_path / "win" / KERNEL).read_text()
    for name, value in attrs.items():
        assert f"\n{name} = {value!r}\n" in text
    assert text.count("\n") == after.count("\n") and (tmp_path / "mla" / KERNEL).read_text() == after
    with pytest.raises(md.DecisionError, match="want one top-level `_NO_SUCH = ...` line"):
        md.winner_tree(tmp_path / "mla", tmp_path / "win2", {"_NO_SUCH": 1})


def test_a_knob_the_sweep_leaves_out_keeps_the_candidates_own_value(tmp_path):
    # entry 0045 (swept as a candidate on top of entry 0044) holds 16 heads a program and fill 1.5; a sweep of the
    # split counts alone must not write the first candidate's 64 heads and 0.75 into the winner's tree
    _, _, after = cp.images(REPO / "series" / "patches" / "0045-perf-triton-mla-sparse-merge-one-warp.patch")
    cp.write_tree(tmp_path / "mla", KERNEL, after)
    own = md.module_defaults(tmp_path / "mla")
    assert own == {"_MAX_BLOCK_H": 16, "_MAX_KV_SPLITS": 16, "_MIN_TOPK_PER_SPLIT": 128, "_SPLIT_MIN_FILL": 1.5}
    doc = sweep({"kv32": ({"_MAX_KV_SPLITS": 32}, 2.0, _fast(4.0, 32))})
    d = md.decide(doc, defaults=own)
    assert d["winner"] == "kv32" and d["attrs"] == {**own, "_MAX_KV_SPLITS": 32}
    assert md.decide(doc)["attrs"]["_MAX_BLOCK_H"] == 64  # what the fallback would have written
    # main reads the tree's own values whenever --tree is given
    sweep_file = tmp_path / "sweep.json"
    sweep_file.write_text(json.dumps(doc))
    out = tmp_path / "d.json"
    assert md.main([str(sweep_file), "--tree", str(tmp_path / "mla"), "--write", str(tmp_path / "win"),
                    "--out", str(out)]) == 0  # fmt: skip
    text = (tmp_path / "win" / KERNEL).read_text()
    assert "\n_MAX_BLOCK_H = 16\n" in text and "\n_SPLIT_MIN_FILL = 1.5\n" in text and "\n_MAX_KV_SPLITS = 32\n" in text
    # a tree without one of the knobs is refused, naming it
    (tmp_path / "mla" / KERNEL).write_text(after.replace("\n_SPLIT_MIN_FILL = ", "\n_FILL = "))
    with pytest.raises(md.DecisionError, match="_SPLIT_MIN_FILL = <literal>"):
        md.module_defaults(tmp_path / "mla")


def test_with_three_trees_the_guard_is_the_entry_and_the_target_the_prs_kernel():
    # a candidate on top of an entry: the entry ("prev", unswept, 2x faster than PR #38476's kernel everywhere) sits
    # between the first tree and the candidate's rows, which are 1.6x the PR's kernel (0.8x the entry) at one row
    doc = sweep({"kv32": ({"_MAX_KV_SPLITS": 32}, 4.0, {(label, 1): (1.6, 32) for label in ("GLM-5 TP1",)})})
    prev = [dict(r, tree="prev", ms=r["ms"] / 2.0) for r in doc["rows"] if r["tree"] == "v0260"]
    doc["rows"] = doc["rows"][:1] + prev + doc["rows"][1:]
    # against the first tree (the default): 1.6x at one row, the guard holds, the 3x target is missed there
    first = md.decide(doc)["policies"]["kv32"]
    assert first["guard"] and any("rows 1: 1.60x < 3x" in m for m in first["targets_missed"])
    # the guard against the entry: 0.8x at GLM-5 TP1's one row, so out; the target still against the PR's kernel
    d = md.decide(doc, before_tree="prev", target_tree="v0260")
    fig = d["policies"]["kv32"]
    one = fig["shapes"]["GLM-5 TP1 64h top-k 2048 rows 1"]
    assert one["speedup"] == pytest.approx(0.8) and one["target_speedup"] == pytest.approx(1.6)
    assert not fig["guard"] and d["winner"] is None
    assert any("GLM-5 TP1 64h top-k 2048 rows 1: 1.60x < 3x" in m for m in fig["targets_missed"])
    with pytest.raises(md.DecisionError, match="no timed row of the kernel before \\(nosuch"):
        md.decide(doc, before_tree="nosuch")


def test_a_sweep_without_policies_is_refused(tmp_path, capsys):
    src = tmp_path / "sweep.json"
    src.write_text(json.dumps({"rows": []}))
    assert md.main([str(src), "--out", str(tmp_path / "d.json")]) == 1
    assert "the sweep has no `mla_policies`" in capsys.readouterr().err


# --- mla_gpu_run.sh with stand-ins -------------------------------------------------------------------------------

#: benchmarks/dsa_kernels.py's stand-in: writes a made-up sweep (the JSON in FAKE_SWEEP) and records its arguments
FAKE_BENCH = """
import json, os, sys
args = sys.argv[1:]
out = args[args.index("--out") + 1]
open(out, "w").write(os.environ["FAKE_SWEEP"])
open(os.environ["OUT"] + "/bench_args.json", "w").write(json.dumps(args))
"""
#: the oracle's and the offsets' stand-ins: record their arguments, one file per call
FAKE_RECORDER = """
import json, os, sys
name = os.path.basename(sys.argv[0]).removesuffix(".py")
args = sys.argv[1:]
tree = args[args.index("--tree") + 1].rsplit("/", 1)[-1]
open(os.environ["OUT"] + f"/{name}_{tree}_args.json", "w").write(json.dumps(args))
"""


def test_the_gpu_run_builds_the_trees_sweeps_decides_and_checks_the_winner(tmp_path):
    if shutil.which("bash") is None or shutil.which("timeout") is None:
        pytest.skip("no bash or timeout")
    repo = tmp_path / "repo"
    for rel in ("lab/candidates/mla_gpu_run.sh", "lab/candidates/phases.sh", "lab/candidates/candidate_patch.py",
                "lab/candidates/mla_decide.py", "series/patches/0044-perf-triton-mla-sparse-one-gather-tile.patch"):  # fmt: skip
        (repo / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(REPO / rel, repo / rel)
    _write_mkdirs(repo / "benchmarks/dsa_kernels.py", FAKE_BENCH)
    _write_mkdirs(repo / "lab/device/oracle_kernels.py", FAKE_RECORDER)
    _write_mkdirs(repo / "lab/device/kernel_offsets.py", FAKE_RECORDER)
    bin_dir = tmp_path / "bin"
    _write_mkdirs(bin_dir / "python3", f'#!/bin/sh\nexec {sys.executable} "$@"\n').chmod(0o755)
    out = tmp_path / "out"
    out.mkdir()
    doc = sweep({"bh64/kv64/min32": ({"_MAX_KV_SPLITS": 64, "_MIN_TOPK_PER_SPLIT": 32}, 2.0, _fast(4.0, 64))})
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}", "OUT": str(out),
           "FAKE_SWEEP": json.dumps(doc), "PYTHONPATH": str(REPO / "src")}  # fmt: skip
    proc = subprocess.run(["bash", str(repo / "lab/candidates/mla_gpu_run.sh")], env=env, capture_output=True,
                          text=True, timeout=120)  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    phases = [line.split()[0] for line in (out / "phases.txt").read_text().splitlines()]
    assert phases == ["trees", "sweep", "decide", "oracle_win", "oracle_v0260", "offsets", "done"]
    bench = json.loads((out / "bench_args.json").read_text())
    assert bench[:4] == ["--tree", ".devkern/v0260", "--tree", ".devkern/mla"]
    for flag, value in (("--mla-max-block-h", "16,32,64"), ("--mla-max-splits", "16,32,64"),
                        ("--mla-min-split", "32,64,128"), ("--mla-split-fill", "0.75,1.5")):  # fmt: skip
        assert bench[bench.index(flag) + 1] == value
    assert "--sm80-ptx" in bench and "--mla-only" in bench
    # the winner's split counts (1, and 2 / 4 / 64 at the target shapes) reach the oracle, on both kernels, and the
    # offsets, on the winner
    for tree in ("win", "v0260"):
        args = json.loads((out / f"oracle_kernels_{tree}_args.json").read_text())
        assert args[args.index("--mla-splits") + 1] == "1,2,4,64,auto" and "--sparse-mla-only" in args
        assert args[args.index("--mla-heads") + 1] == "64,128"
    args = json.loads((out / "kernel_offsets_win_args.json").read_text())
    assert args[args.index("--mla-splits") + 1] == "1,2,4,64"
    assert args.count("--case") == 2 and "sparse_mla:high" in args
    winner = (out / "winner_triton_mla_sparse_kernel.py").read_text()
    assert "\n_MAX_KV_SPLITS = 64\n" in winner and "\n_MIN_TOPK_PER_SPLIT = 32\n" in winner
    assert json.loads((out / "mla_decision.json").read_text())["winner"] == "bh64/kv64/min32"


def _write_mkdirs(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


# --- lab/device/oracle_kernels.py's sparse-MLA cases, with the oracle standing in for the kernel ----------------


def test_the_oracle_script_checks_each_head_count_and_split_count_it_is_given(monkeypatch):
    torch = pytest.importorskip("torch")
    monkeypatch.syspath_prepend(str(REPO / "lab" / "device"))
    import dataclasses

    import oracle_kernels

    from vllm_compose.proof import dsa_oracle as o

    calls = []

    def attention(q, kv, indices, sm_scale, num_kv_splits=None):
        calls.append((q.shape[1], num_kv_splits))
        return o.sparse_mla_attention(q, kv, indices, sm_scale)[0].to(torch.bfloat16)

    mods = {"triton_mla_sparse_kernel": type("Kernel", (), {"triton_mla_sparse_attention": staticmethod(attention)})}
    torch.manual_seed(0)
    out = oracle_kernels.sparse_mla_cases(mods, o, dataclasses.asdict, 2048, "cpu", [64, 128], [1, 64, "auto"])
    # `auto` is the kernel's own choice (no split count passed); the fault runs single-pass at each head count
    assert calls == [(64, 1), (64, 64), (64, None), (64, 1), (128, 1), (128, 64), (128, None), (128, 1)]
    assert list(out) == [
        "sparse_mla_splits_1", "sparse_mla_splits_64", "sparse_mla_splits_auto", "sparse_mla_fault_shifted",
        "sparse_mla_h128_splits_1", "sparse_mla_h128_splits_64", "sparse_mla_h128_splits_auto",
        "sparse_mla_h128_fault_shifted",
    ]  # fmt: skip
    assert all(v["passed"] == ("fault" not in k) for k, v in out.items()), out


# --- mla_probe_run.sh with stand-ins -----------------------------------------------------------------------------

#: the served-tuning, floor and profile scripts' stand-in: records its arguments and writes its --out
FAKE_PROBE = """
import json, os, sys
from pathlib import Path
name = Path(sys.argv[0]).stem
args = sys.argv[1:]
Path(os.environ["OUT"], f"{name}_args.json").write_text(json.dumps(args))
out = Path(args[args.index("--out") + 1])
if name == "mla_profile":
    out.mkdir(parents=True)
    (out / "mla_profile.json").write_text("{}")
else:
    out.write_text("{}")
"""


ROWS_KEY = "lab/candidates/perf-triton-mla-sparse-rows-in-tuning-key.patch"
ROWS_KEY_WARM = "lab/candidates/perf-triton-mla-sparse-warmup-rows-buckets.patch"


def probe_repo(tmp_path: Path) -> tuple[Path, dict]:
    repo = tmp_path / "repo"
    for rel in ("lab/candidates/mla_probe_run.sh", "lab/candidates/phases.sh", "lab/candidates/candidate_patch.py",
                "series/patches/0045-perf-triton-mla-sparse-merge-one-warp.patch",
                "lab/candidates/perf-triton-mla-sparse-warmup-decode-shapes.patch", ROWS_KEY, ROWS_KEY_WARM):  # fmt: skip
        (repo / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(REPO / rel, repo / rel)
    for rel in ("benchmarks/mla_served_tuning.py", "benchmarks/mla_decode_floor.py", "lab/candidates/mla_profile.py",
                "lab/device/oracle_kernels.py", "lab/device/kernel_offsets.py"):  # fmt: skip
        _write_mkdirs(repo / rel, FAKE_PROBE)
    bin_dir = tmp_path / "bin"
    _write_mkdirs(bin_dir / "python3", f'#!/bin/sh\nexec {sys.executable} "$@"\n').chmod(0o755)
    out = tmp_path / "out"
    out.mkdir()
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}", "OUT": str(out),
           "PYTHONPATH": str(REPO / "src")}  # fmt: skip
    return repo, env


def test_the_probe_builds_the_three_trees_runs_each_phase_and_leaves_one_archive(tmp_path):
    import tarfile

    if shutil.which("bash") is None or shutil.which("timeout") is None:
        pytest.skip("no bash or timeout")
    repo, env = probe_repo(tmp_path)
    out = Path(env["OUT"])
    proc = subprocess.run(["bash", str(repo / "lab/candidates/mla_probe_run.sh")], env=env, capture_output=True,
                          text=True, timeout=120)  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert sorted(p.name for p in out.iterdir()) == ["phases.txt", "probe.tgz"]
    phases = [line.split()[0] for line in (out / "phases.txt").read_text().splitlines()]
    assert phases == ["trees", "served", "floor", "profile", "done"]
    with tarfile.open(out / "probe.tgz") as tar:
        names = {Path(n).as_posix().removeprefix("./") for n in tar.getnames()}
        args = {s: json.loads(tar.extractfile(f"./{s}_args.json").read()) for s in
                ("mla_served_tuning", "mla_decode_floor", "mla_profile")}  # fmt: skip
    assert {"mla_served_tuning_sm80.json", "mla_floor_sm80.json", "profile/mla_profile.json", "gpu.txt"} <= names
    assert args["mla_served_tuning"][:4] == ["--tree", ".devkern/served", "--tree", ".devkern/warm"]
    assert args["mla_profile"][:3] == ["profile", "--tree", ".devkern/e45"] and "--sm80-ptx" in args["mla_profile"]
    timeout_s = int(args["mla_profile"][args["mla_profile"].index("--timeout-s") + 1])
    assert 30 <= timeout_s < 570
    # the trees: entry 0045's kernel in all three, the backend as composed in `served` and the candidate's in `warm`
    trees = repo / ".devkern"
    backend = "vllm/v1/attention/backends/mla/triton_mla_sparse.py"
    _, composed, candidate = cp.images(repo / "lab/candidates/perf-triton-mla-sparse-warmup-decode-shapes.patch")
    assert (trees / "served" / backend).read_text() == composed and (trees / "warm" / backend).read_text() == candidate
    _, _, e45 = cp.images(repo / "series/patches/0045-perf-triton-mla-sparse-merge-one-warp.patch")
    assert all((trees / t / KERNEL).read_text() == e45 for t in ("e45", "served", "warm"))


def test_the_probe_skips_what_it_is_told_to_and_packs_what_a_failed_start_left(tmp_path):
    if shutil.which("bash") is None or shutil.which("timeout") is None:
        pytest.skip("no bash or timeout")
    repo, env = probe_repo(tmp_path)
    out = Path(env["OUT"])
    proc = subprocess.run(["bash", str(repo / "lab/candidates/mla_probe_run.sh")], env={**env, "SERVED": "0",
                          "PROFILE": "0"}, capture_output=True, text=True, timeout=120)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert [line.split()[0] for line in (out / "phases.txt").read_text().splitlines()] == ["trees", "floor", "done"]
    for p in out.iterdir():
        p.unlink()
    proc = subprocess.run(["bash", str(repo / "lab/candidates/mla_probe_run.sh")], env={**env, "WARM": "no.patch"},
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    assert proc.returncode == 1
    assert sorted(p.name for p in out.iterdir()) == ["phases.txt", "probe.tgz"]
    assert (out / "phases.txt").read_text().startswith("trees rc=1")


def test_with_a_key_candidate_the_probe_serves_its_tree_and_runs_the_oracle_and_offsets_on_it(tmp_path):
    import tarfile

    if shutil.which("bash") is None or shutil.which("timeout") is None:
        pytest.skip("no bash or timeout")
    repo, env = probe_repo(tmp_path)
    out = Path(env["OUT"])
    env = {**env, "KEY": ROWS_KEY, "KEY_WARM": ROWS_KEY_WARM, "FLOOR": "0", "PROFILE": "0"}
    proc = subprocess.run(["bash", str(repo / "lab/candidates/mla_probe_run.sh")], env=env, capture_output=True,
                          text=True, timeout=120)  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    phases = [line.split()[0] for line in (out / "phases.txt").read_text().splitlines()]
    assert phases == ["trees", "served", "oracle", "offsets", "done"]
    with tarfile.open(out / "probe.tgz") as tar:
        args = {s: json.loads(tar.extractfile(f"./{s}_args.json").read()) for s in
                ("mla_served_tuning", "oracle_kernels", "kernel_offsets")}  # fmt: skip
    assert args["mla_served_tuning"][:6] == ["--tree", ".devkern/served", "--tree", ".devkern/warm", "--tree",
                                             ".devkern/bucket"]  # fmt: skip
    for script in ("oracle_kernels", "kernel_offsets"):
        assert args[script][:2] == ["--tree", ".devkern/bucket"] and "--sm80-ptx" in args[script], script
    assert "1,2,4,8,16,auto" in args["oracle_kernels"] and "1,2,4,8,16" in args["kernel_offsets"]
    # the tree: the key candidate's kernel (on entry 0045's) and the warm-up candidate's backend
    bucket = repo / ".devkern" / "bucket"
    k_path, _, kernel = cp.images(repo / ROWS_KEY)
    b_path, _, backend = cp.images(repo / ROWS_KEY_WARM)
    assert (bucket / k_path).read_text() == kernel and (bucket / b_path).read_text() == backend


def test_a_key_candidate_without_its_warm_up_is_refused_before_anything_runs(tmp_path):
    if shutil.which("bash") is None or shutil.which("timeout") is None:
        pytest.skip("no bash or timeout")
    repo, env = probe_repo(tmp_path)
    out = Path(env["OUT"])
    for extra in ({"KEY": ROWS_KEY}, {"KEY_WARM": ROWS_KEY_WARM}):
        proc = subprocess.run(["bash", str(repo / "lab/candidates/mla_probe_run.sh")], env={**env, **extra},
                              capture_output=True, text=True, timeout=60)  # fmt: skip
        assert proc.returncode == 2 and "KEY and KEY_WARM go together" in proc.stderr, proc.stderr
        assert not (repo / ".devkern").exists() and [p.name for p in out.iterdir()] == ["phases.txt"]
        (out / "phases.txt").unlink()
