"""Series entry perf-paged-mqa-logits-bit-decode-shared-k (0040): the indexer's paged decode logits kernel as that
entry writes it, run in Triton's interpreter on a CPU and held against `vllm_compose.validation.dsa_oracle` and
against the lookup table PR #38476's kernel decodes fp8 through.

CI has no composed tree (composing needs the pinned PR diffs, which come from GitHub only), so the kernel comes from
the entry's own patch: its single hunk starts at line 1 of mqa_logits_triton.py and ends after the paged wrapper, so
its post-image is the module's head (imports, autotune configs, the table, the bit-placement decoder, the paged
kernel and its wrapper), runnable alone. tests/dsa_kernels_interpreted.py runs it with `--paged-only` in a
subprocess (TRITON_INTERPRET=1): the seeded paged case of tests/tool/test_dsa_oracle.py (2 requests x next_n 2,
contexts 37 and 50, not block-aligned, scattered blocks on a padded page, a swapped block as the planted fault),
every E4M3FN code through the kernel as keys and as queries (a stale block-table entry past one request's context
pointing outside the cache), and the decoder alone over all 256 codes.

With `VLLM_COMPOSE_TEST_TREES` the same fp8-code checks run on the composed v0.26.0 and v0.33.0 trees (the oracle
comparison of those trees is tests/tool/test_dsa_oracle.py's). Interpreter times say nothing about GPU speed:
benchmarks/dsa_kernels.py times the kernel on a GPU.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from release_trees import composed_tree

torch = pytest.importorskip("torch", reason="the kernel checks need torch (see .ci/run)")
pytest.importorskip("triton", reason="the kernel checks need triton (see .ci/run)")

from vllm_compose.patchfile import parse_patch  # noqa: E402
from vllm_compose.series import load_series  # noqa: E402
from vllm_compose.validation import dsa_oracle as o  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
ENTRY = "perf-paged-mqa-logits-bit-decode-shared-k"
LOGITS_FILE = "vllm/v1/attention/ops/mqa_logits_triton.py"
SPARSE_FILE = "vllm/v1/attention/ops/triton_mla_sparse_kernel.py"


def table_values() -> torch.Tensor:
    """What the pinned kernel's table decodes each code to (fp32): torch's E4M3FN value, the NaN codes 0x7f / 0xff
    as +-480 (PR #38476's `_get_e4m3fn_bf16_lut`); written here, not read from the tree under test."""
    values = torch.arange(256, dtype=torch.uint8).view(torch.float8_e4m3fn).float()
    values[0x7F], values[0xFF] = 480.0, -480.0
    return values


def patch_head(tmp: Path) -> Path:
    """A tree whose mqa_logits_triton.py is the entry's post-image (and an empty sparse-MLA module, which the
    loader wants and `--paged-only` never calls)."""
    entry = next(e for e in load_series(REPO / "series").entries if e.id == ENTRY)
    patch = parse_patch(entry.file.read_bytes(), entry.file.name)
    (fp,) = patch.files
    assert fp.path == LOGITS_FILE
    (hunk,) = fp.hunks
    # the post-image is a runnable module only if it starts at the file's first line
    assert (hunk.old_start, hunk.new_start) == (1, 1), hunk.header
    text = "\n".join(hunk.post_image) + "\n"
    assert "def fp8_paged_mqa_logits_triton(" in text and text.rstrip().endswith("return logits")
    from dsa_kernels_interpreted import kernel_tree

    return kernel_tree(tmp, mqa_logits_triton=text)


def interpret(tree: Path, out: Path) -> dict:
    from dsa_kernels_interpreted import run_interpreted

    return run_interpreted(tree, out, "--paged-only", timeout=300)


@pytest.fixture(scope="module")
def patched_run(tmp_path_factory) -> dict:
    tmp = tmp_path_factory.mktemp("paged-0040")
    return interpret(patch_head(tmp / "tree"), tmp / "run.pt")


@pytest.fixture(scope="module", params=["v0.26.0", "v0.33.0"])
def composed_run(request, tmp_path_factory) -> dict:
    tree = composed_tree(request.param, LOGITS_FILE)
    return interpret(tree, tmp_path_factory.mktemp("paged-composed") / "run.pt")


def test_the_patched_kernel_matches_the_oracle_and_a_swapped_block_fails(patched_run):
    from dsa_kernels_interpreted import DECODE

    d = patched_run["paged_decode"]
    want = o.paged_decode_logits(
        d["q"], d["pool"], d["weights"], d["context_lens"], d["block_table"], block_size=DECODE["block_size"]
    )
    good = o.compare_logits(d["logits"], want)
    assert good.passed and good.mask_mismatches == 0 and good.max_rel_error < 1e-6, good  # measured 5.6e-8
    bad = o.compare_logits(d["faulty"], want)
    assert not bad.passed and bad.max_rel_error > 0.1, bad
    for k in (8, 16):
        topk = o.compare_topk(o.topk_indices(d["logits"], k), o.topk_indices(want, k), logits=want)
        assert topk.passed and topk.min_recall == 1.0, (k, topk)


def check_codes(run: dict) -> None:
    want = table_values()
    codes = run["fp8_codes"]
    for part in ("by_key", "by_query"):
        got = codes[part]
        wrong = (got != want).nonzero().flatten().tolist()
        assert not wrong, f"{part}: codes {[hex(c) for c in wrong[:8]]} decode to {got[wrong[:8]].tolist()}"


def test_every_fp8_code_through_the_patched_kernel_is_the_tables_value(patched_run):
    check_codes(patched_run)


def test_the_bit_placement_decoder_is_the_table_bit_for_bit(patched_run):
    got = patched_run["decode_table"]
    assert got is not None and got.dtype == torch.float16
    # the decoder returns the value times 2**-8; times 256 in fp32 is exact, so the bits must equal the table's,
    # the sign of zero (0x80) included
    want = torch.arange(256, dtype=torch.uint8).view(torch.float8_e4m3fn).to(torch.bfloat16).float()
    want[0x7F], want[0xFF] = 480.0, -480.0
    scaled = got.float() * 256.0
    differ = (scaled.view(torch.int32) != want.view(torch.int32)).nonzero().flatten().tolist()
    assert not differ, f"codes {[hex(c) for c in differ[:8]]}: {scaled[differ[:8]].tolist()}"
    assert scaled[0x7F].item() == 480.0 and scaled[0xFF].item() == -480.0 and str(scaled[0x80].item()) == "-0.0"


def test_every_fp8_code_through_the_composed_kernel_is_the_tables_value(composed_run):
    check_codes(composed_run)
    if composed_run["decode_table"] is not None:  # a tree without entry 0040 decodes through the table itself
        assert torch.equal(composed_run["decode_table"].float() * 256.0, table_values())


def test_a_planted_decoder_fault_is_caught(tmp_path):
    # the same checks on a decoder that drops the mantissa's lowest bit must fail: the code cases can tell
    tree = patch_head(tmp_path / "tree")
    path = tree / LOGITS_FILE
    text = path.read_text()
    right = "bits = ((x & 0x80) << 8) | ((x & 0x7F) << 7)"
    assert right in text
    path.write_text(text.replace(right, "bits = ((x & 0x80) << 8) | ((x & 0x7E) << 7)"))
    run = interpret(tree, tmp_path / "run.pt")
    with pytest.raises(AssertionError, match=r"by_key: codes \['0x1', '0x3'"):
        check_codes(run)
