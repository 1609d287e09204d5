"""The candidate sparse-MLA decode kernel of lab/candidates/perf-sparse-mla-decode-all-heads.patch (not a series
entry: it has no GPU numbers yet), run in Triton's interpreter on a CPU and held against
`vllm_compose.proof.dsa_oracle` and against the kernel it replaces.

CI has no composed tree, so both kernels come from the candidate's own patch: its single hunk covers
triton_mla_sparse_kernel.py from line 1 to its end, so its pre-image is the composed v0.26.0 module (PR #38476's
kernel with fix-dsa-triton-kernels-int64-offsets) and its post-image the candidate, each runnable alone.
tests/dsa_kernels_interpreted.py runs them with `--sparse-heads` in a subprocess (TRITON_INTERPRET=1, the
interpreter's bf16 `tl.dot` and loop-bound corrections on): 4 tokens at 8, 20 and 64 heads (one program of 16, one
of 32 with 12 heads masked, one of 64), top-k 64 with -1 padding, a repeated slot, the last slot, a token with no
valid index and one with a single valid index, single-pass, 2 and 4 splits and the wrapper's own choice, and the
planted fault (every index one slot on) that must fail.

Interpreter times say nothing about GPU speed: lab/candidates/README.md says how to time the candidate on a GPU.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from release_trees import composed_tree

torch = pytest.importorskip("torch", reason="the kernel checks need torch (see .ci/run)")
pytest.importorskip("triton", reason="the kernel checks need triton (see .ci/run)")

from vllm_compose.patchfile import parse_patch  # noqa: E402
from vllm_compose.proof import dsa_oracle as o  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
CANDIDATE = REPO / "lab" / "candidates" / "perf-sparse-mla-decode-all-heads.patch"
SPARSE_FILE = "vllm/v1/attention/ops/triton_mla_sparse_kernel.py"
HEADS = (8, 20, 64)
PATHS = ("splits_1", "splits_2", "splits_4", "splits_auto")


def module_texts() -> tuple[str, str]:
    """(pre-image, post-image) of the candidate's one hunk: the composed module and the candidate module."""
    patch = parse_patch(CANDIDATE.read_bytes(), CANDIDATE.name)
    (fp,) = patch.files
    assert fp.path == SPARSE_FILE
    (hunk,) = fp.hunks
    # each image is a runnable module only if the hunk spans the whole file
    assert (hunk.old_start, hunk.new_start) == (1, 1), hunk.header
    before, after = ("\n".join(lines) + "\n" for lines in (hunk.pre_image, hunk.post_image))
    for text in (before, after):
        assert "def triton_mla_sparse_attention(" in text and text.rstrip().endswith("return out")
    return before, after


def tree_of(text: str, root: Path) -> Path:
    """A tree whose triton_mla_sparse_kernel.py is `text` (and an empty indexer module, which the loader wants and
    `--sparse-heads` never calls)."""
    from dsa_kernels_interpreted import kernel_tree

    return kernel_tree(root, triton_mla_sparse_kernel=text)


def interpret(tree: Path, out: Path) -> dict:
    from dsa_kernels_interpreted import run_interpreted

    return run_interpreted(tree, out, "--sparse-heads", ",".join(map(str, HEADS)))


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict:
    """{"before": the composed kernel's run, "after": the candidate's}, on the same seeded inputs."""
    tmp = tmp_path_factory.mktemp("candidate-sparse-mla")
    before, after = module_texts()
    return {
        name: interpret(tree_of(text, tmp / name), tmp / f"{name}.pt")
        for name, text in (("before", before), ("after", after))
    }


def reference(case: dict) -> torch.Tensor:
    want, _ = o.sparse_mla_attention(case["q"], case["kv"], case["indices"], case["sm_scale"])
    return want


@pytest.mark.parametrize("heads", HEADS)
def test_every_path_of_the_candidate_matches_the_oracle(runs, heads):
    case = runs["after"]["sparse_by_heads"][heads]
    want = reference(case)
    for path in PATHS:
        got = case["outputs"][path]
        assert got.shape == (4, heads, 512) and got.dtype == torch.bfloat16, (path, got.shape, got.dtype)
        verdict = o.compare_attention(got, want)
        # measured at most 3.0e-3 and at least 0.999995 (bf16 outputs), the composed kernel's figures on these inputs
        assert verdict.passed and verdict.min_cosine > 0.99999 and verdict.max_rel_error < 5e-3, (path, verdict)


@pytest.mark.parametrize("heads", HEADS)
def test_padding_a_row_with_no_valid_index_and_a_single_index(runs, heads):
    case = runs["after"]["sparse_by_heads"][heads]
    value = case["kv"][123, 0, :512]
    for path in PATHS:
        out = case["outputs"][path]
        assert torch.equal(out[2], torch.zeros_like(out[2])), f"{path}: a token with no valid index is not 0"
        # one valid index: softmax weight 1, so the output is that slot's value row, bit for bit
        assert torch.equal(out[3], value.expand(heads, 512)), f"{path}: token 3 is not slot 123's value row"


@pytest.mark.parametrize("heads", HEADS)
def test_the_candidate_is_as_close_as_the_kernel_it_replaces(runs, heads):
    new, old = runs["after"]["sparse_by_heads"][heads], runs["before"]["sparse_by_heads"][heads]
    assert torch.equal(new["indices"], old["indices"]) and torch.equal(new["q"], old["q"])  # the same inputs
    want = reference(new)
    for path in PATHS:
        got_new, got_old = new["outputs"][path], old["outputs"][path]
        err_new = o.compare_attention(got_new, want).max_abs_error
        err_old = o.compare_attention(got_old, want).max_abs_error
        # both round fp32 sums to bf16; the order of the sums differs (chunks, tiles, BLOCK_N), so a few outputs
        # round the other way: at most one bf16 step at the outputs' scale (|out| < 4: 2**-6; measured 3.9e-3 at
        # most, and the same largest error against the oracle)
        assert err_new <= err_old + 2**-8, (path, err_new, err_old)
        assert float((got_new.float() - got_old.float()).abs().max()) <= 2**-6, path


@pytest.mark.parametrize("heads", HEADS)
def test_shifted_indices_fail(runs, heads):
    case = runs["after"]["sparse_by_heads"][heads]
    bad = o.compare_attention(case["outputs"]["faulty"], reference(case))
    assert not bad.passed and bad.mean_cosine < 0.5, bad  # measured 0.31-0.42


def test_heads_per_program_and_split_choices(runs):
    after, before = runs["after"], runs["before"]
    assert after["block_h"] == {1: 16, 8: 16, 16: 16, 20: 32, 64: 64, 100: 64, 128: 64}
    # (tokens, head groups, top-k, SMs) -> splits: the smallest power of two covering 3/4 of the SMs, at most 16,
    # at least 128 indices a split
    assert after["splits"] == {
        (64, 1, 2048, 132): 2,  # GLM-5 TP1, 64 rows: 128 programs
        (64, 2, 2048, 132): 1,  # DeepSeek-V3.2 TP1, 64 rows: 128 programs already
        (32, 1, 2048, 132): 4,
        (8, 1, 2048, 132): 16,
        (1, 1, 2048, 132): 16,
        (64, 1, 2048, 108): 2,  # an A100
        (1, 1, 256, 132): 2,  # 128 indices a split at least
        (200, 1, 2048, 132): 1,
    }
    # the composed kernel splits only below a quarter of the SMs (its programs hold 16 heads)
    assert before["splits"][(64, 1, 2048, 132)] == 1 and before["splits"][(1, 1, 2048, 132)] == 16


def test_the_candidates_pre_image_is_the_composed_v0_26_0_module():
    # with VLLM_COMPOSE_TEST_TREES only: the patch must apply to what the compose writes (CI has no composed tree;
    # lab/candidates/README.md applies it with `patch -p1` to the compose branch's archive)
    tree = composed_tree("v0.26.0", SPARSE_FILE)
    before, _ = module_texts()
    assert (tree / SPARSE_FILE).read_text() == before


#: benchmarks/dsa_kernels.py's sparse-MLA section on the composed kernel and the candidate, in the interpreter at a
#: small shape (20 heads, 2 rows, top-k 256 over 300 slots), `--mla-max-block-h 16,32,64` as the lead runs it; the
#: wrapper's own split choice asks the stand-in for the SM count (132, an H200's): 2 splits for both kernels (256
#: indices, at least 128 a split). `do_bench` calls once.
BENCH_SCRIPT = """
import json, sys
from pathlib import Path
sys.path[:0] = [sys.argv[4] + "/tests", sys.argv[4] + "/benchmarks", sys.argv[4] + "/lab/device"]
import dsa_kernels_interpreted as di
import dsa_kernels as dk
from kernel_offsets import install_vllm_shim
import torch
di._widen_bf16_dot_operands(); di._scalar_loop_bounds()
trees = []
for root in sys.argv[1:3]:
    mods = install_vllm_shim(Path(root))
    di._first_config_only(mods["triton_mla_sparse_kernel"])
    mods["triton_mla_sparse_kernel"].num_compute_units = lambda index=0: 132
    trees.append((Path(root).name, mods))
dk.MLA, dk.MLA_ROWS, dk.TOPK, dk.MLA_SLOTS = [("t", 20)], [2], 256, 300
rows = []
dk.time_mla_decode(trees, [16, 32, 64], rows.append, lambda fn: (fn(), 1.0)[1], torch, "cpu")
Path(sys.argv[3]).write_text(json.dumps(rows))
"""


def test_the_benchmark_times_the_candidate_at_each_heads_per_program(tmp_path):
    import json

    before, after = module_texts()
    trees = [tree_of(before, tmp_path / "before"), tree_of(after, tmp_path / "after")]
    out = tmp_path / "rows.json"
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    cmd = [sys.executable, "-c", BENCH_SCRIPT, *map(str, trees), str(out), str(REPO)]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = json.loads(out.read_text())
    assert [r["tree"] for r in rows] == ["before", "after@bh16", "after@bh32", "after@bh64"]
    for r in rows:
        assert r["shape"] == "t 20h top-k 256 rows 2" and r["bytes"] == 2 * 256 * (576 * 2 + 4) + 2 * 20 * 1088 * 2
        # the autotuned kernel that ran (split-KV, then the merge, which is not autotuned) and its config
        assert list(r["autotune"]) == ["_sparse_mla_kernel_split"], r["autotune"]
        assert r["autotune"]["_sparse_mla_kernel_split"]["config"].startswith("BLOCK_N: 32, num_warps: ")
    for r in rows[1:]:
        diff = r["vs_first_tree"]
        assert diff["finite"] and diff["max_abs_diff"] <= 2**-7 and diff["max_abs_first"] > 0.1, (r["tree"], diff)


@pytest.fixture
def no_lasting_stand_in(monkeypatch):
    """`sm80_resources` loads the tree through `install_vllm_shim`, whose stand-in `vllm` package (no module spec)
    would stay in sys.modules and break later tests that look vLLM up (`importlib.util.find_spec`)."""
    before = {name for name in sys.modules if name == "vllm" or name.startswith("vllm.")}
    monkeypatch.syspath_prepend(str(REPO / "lab" / "candidates"))
    yield
    for name in [n for n in sys.modules if (n == "vllm" or n.startswith("vllm.")) and n not in before]:
        del sys.modules[name]


def test_the_first_config_builds_for_sm80_without_spills_inside_an_a100s_shared_memory(tmp_path, no_lasting_stand_in):
    # a compile for sm_80 on the CPU (Triton's PTX, the wheel's ptxas), not a timing: the config the interpreter runs
    # and the GPU autotune tries first must hold the 64-head accumulator in registers, fit an A100's 163 KB of shared
    # memory, gather 16 bytes a load and double-buffer the gathered tile (measured: 255 registers, 152,320 B)
    from sm80_resources import resources

    _, after = module_texts()
    tree = tree_of(after, tmp_path / "after")
    r = resources(tree, "final", heads=64, block_n=32, num_warps=8, num_stages=5)
    assert r["block_h"] == 64 and r["spill_stack_bytes"] == 0 and r["fits_a100"], r
    assert r["kv_async_copy"] and r["kv_buffers"] == 2 and r["widest_global_load"] == 16, r
