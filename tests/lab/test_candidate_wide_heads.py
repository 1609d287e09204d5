"""The candidate lab/candidates/perf-sparse-mla-wide-heads.patch (on top of series entry 0045): 32 heads a program once
a call's query rows times heads reach `_WIDE_MIN_TOKEN_HEADS`, 16 below that. Its pre-image is entry 0045's
post-image; its split policy, merge and signature are 0045's.

The rule is checked directly (`_block_h` at the defaults, and the launch `dsa_kernels.mla_launch` derives from it). The
wide program is run in Triton's interpreter on a CPU with the threshold set to 1 (`wide`: the interpreter's 4-token
cases then take it at 20 and 64 heads), against `vllm_compose.proof.dsa_oracle` and against entry 0045's kernel on
the same inputs, at 1-4 splits and the wrapper's choice. Interpreter times say nothing about GPU speed: the
candidate's GPU run is in lab/candidates/README.md.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch", reason="the kernel checks need torch (see .ci/run)")
pytest.importorskip("triton", reason="the kernel checks need triton (see .ci/run)")

from sparse_mla_checks import (  # noqa: E402
    assert_as_close_as,
    assert_padding_rows,
    assert_paths_match_oracle,
    assert_shifted_indices_fail,
    interpreted_runs,
    sparse_tree,
)

from vllm_compose.series import load_series  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "lab" / "candidates"))
sys.path.insert(0, str(REPO / "benchmarks"))
import candidate_patch  # noqa: E402

PATCH = REPO / "lab" / "candidates" / "perf-sparse-mla-wide-heads.patch"
ENTRY_0045 = "perf-triton-mla-sparse-merge-one-warp"
SPARSE_FILE = "vllm/v1/attention/ops/triton_mla_sparse_kernel.py"
HEADS = (20, 64)
PATHS = ("splits_1", "splits_2", "splits_3", "splits_4", "splits_auto")
THRESHOLD = "_WIDE_MIN_TOKEN_HEADS = 2048\n"


def module_texts() -> tuple[str, str]:
    path, before, after = candidate_patch.images(PATCH)
    assert path == SPARSE_FILE
    # the pre-image is entry 0045's module, as the compose writes it
    assert before == candidate_patch.images(load_series(REPO / "series").entry(ENTRY_0045).file)[2]
    return before, after


def always_wide(text: str) -> str:
    assert text.count(THRESHOLD) == 1
    return text.replace(THRESHOLD, "_WIDE_MIN_TOKEN_HEADS = 1\n")


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict:
    before, after = module_texts()
    return interpreted_runs(
        tmp_path_factory.mktemp("sparse-mla-wide"), {"before": before, "wide": always_wide(after)}, HEADS
    )


@pytest.fixture
def candidate(tmp_path, no_lasting_stand_in):
    from kernel_offsets import install_vllm_shim

    _, after = module_texts()
    return install_vllm_shim(sparse_tree(after, tmp_path / "after"))["triton_mla_sparse_kernel"]


def test_the_patch_is_what_rewrite_writes_from_its_own_images_and_message():
    _, _, after = candidate_patch.images(PATCH)
    assert candidate_patch.rewrite(PATCH, after, candidate_patch.message_of(PATCH)) == PATCH.read_text()


def test_heads_a_program_widen_at_the_threshold_and_nowhere_else(candidate):
    mod = candidate
    assert (mod._MAX_BLOCK_H, mod._WIDE_BLOCK_H, mod._WIDE_MIN_TOKEN_HEADS) == (16, 32, 2048)
    # 64 heads (GLM-5 TP1): 16 up to 31 rows, 32 from 32; 128 heads (DeepSeek-V3.2 TP1): 32 from 16 rows
    assert [mod._block_h(64, n) for n in (1, 8, 31, 32, 64)] == [16, 16, 16, 32, 32]
    assert [mod._block_h(128, n) for n in (1, 8, 15, 16, 64)] == [16, 16, 16, 32, 32]
    # 8 and 16 heads (the TP8 shapes) never exceed their own heads, rounded up to 16
    assert {mod._block_h(h, n) for h in (8, 16) for n in (1, 64, 4096)} == {16}
    assert mod._block_h(20, 128) == 32 and mod._block_h(64) == 16  # one row by default
    # a benchmark's setting is read at the call
    mod._WIDE_BLOCK_H = 64
    try:
        assert mod._block_h(64, 32) == 64 and mod._block_h(128, 32) == 64
    finally:
        mod._WIDE_BLOCK_H = 32


def test_the_benchmark_derives_the_launch_from_the_rows(candidate):
    import dsa_kernels as dk

    mod = candidate
    one, many = (dk.mla_launch(mod, rows, 64, 2048, 132) for rows in (1, 64))
    assert (one["block_h"], one["head_groups"], one["splits"]) == (16, 4, 16)
    # 64 rows x 2 head groups = 128 programs, under 1.5 x 132: two splits
    assert (many["block_h"], many["head_groups"], many["splits"], many["programs"]) == (32, 2, 2, 256)
    policies = dk.mla_policies({"mla_wide_block_h": "32,64", "mla_wide_from": "4096"})
    assert policies == {
        "wide32/from4096": {"_WIDE_BLOCK_H": 32, "_WIDE_MIN_TOKEN_HEADS": 4096},
        "wide64/from4096": {"_WIDE_BLOCK_H": 64, "_WIDE_MIN_TOKEN_HEADS": 4096},
    }
    plan = dk.mla_plan(mod, policies, 64, 64, 2048, 132)
    assert [(launch["block_h"], labels) for launch, labels in plan] == [
        (32, ["wide32/from4096"]),
        (64, ["wide64/from4096"]),
    ]
    assert [launch["block_h"] for launch, _ in dk.mla_plan(mod, policies, 32, 64, 2048, 132)] == [16]
    assert (mod._WIDE_BLOCK_H, mod._WIDE_MIN_TOKEN_HEADS) == (32, 2048)  # restored


def test_the_wide_run_takes_32_heads_a_program(runs):
    assert runs["wide"]["block_h"][20] == 32 and runs["wide"]["block_h"][64] == 32
    assert runs["before"]["block_h"][64] == 16


@pytest.mark.parametrize("heads", HEADS)
def test_every_path_matches_the_oracle(runs, heads):
    assert_paths_match_oracle(runs["wide"]["sparse_by_heads"][heads], PATHS, heads)


@pytest.mark.parametrize("heads", HEADS)
def test_a_row_with_no_valid_index_is_zero_and_a_single_index_is_its_row(runs, heads):
    assert_padding_rows(runs["wide"]["sparse_by_heads"][heads], PATHS, heads)


@pytest.mark.parametrize("heads", HEADS)
def test_as_close_as_entry_0045(runs, heads):
    assert_as_close_as(runs["wide"]["sparse_by_heads"][heads], runs["before"]["sparse_by_heads"][heads], PATHS)


@pytest.mark.parametrize("heads", HEADS)
def test_shifted_indices_fail(runs, heads):
    assert_shifted_indices_fail(runs["wide"]["sparse_by_heads"][heads])
