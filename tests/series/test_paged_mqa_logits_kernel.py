"""Series entry perf-paged-mqa-logits-bit-decode-shared-k (0040): the indexer's paged decode logits kernel as that
entry writes it, run in Triton's interpreter on a CPU and held against `vllm_compose.proof.dsa_oracle` and
against the lookup table PR #38476's kernel decodes fp8 through.

CI has no composed tree (composing needs the pinned PR diffs, which come from GitHub only), so the kernel comes from
the entry's own patch: its single hunk starts at line 1 of mqa_logits_triton.py and ends after the paged wrapper, so
its post-image is the module's head (imports, autotune configs, the table, the bit-placement decoder, the paged
kernel and its wrapper), runnable alone. tests/dsa_kernels_interpreted.py runs it with `--paged-only` in a
subprocess (TRITON_INTERPRET=1): the seeded paged case of tests/tool/test_dsa_oracle.py (2 requests x next_n 2,
contexts 37 and 50, not block-aligned, scattered blocks on a padded page, a swapped block as the planted fault),
every E4M3FN code through the kernel as keys and as queries (a stale block-table entry past one request's context
pointing outside the cache), and the decoder alone over all 256 codes.

Entry perf-paged-mqa-logits-four-blocks-mtp-rows (0041) on top: its launcher's choice of blocks a program (four for
next_n 2 from a 32,768-key width, two otherwise) with the Triton kernel replaced by a recorder, and the interpreted
paged case with four blocks a program (its length threshold set to 0) against the oracle.

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
from vllm_compose.proof import dsa_oracle as o  # noqa: E402
from vllm_compose.series import load_series  # noqa: E402

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


# --- series entry perf-paged-mqa-logits-four-blocks-mtp-rows (0041): four blocks a program for two MTP rows -------

ENTRY_0041 = "perf-paged-mqa-logits-four-blocks-mtp-rows"


def with_0041(tmp: Path, wide_min_len: int | None = None) -> Path:
    """`patch_head`'s tree with entry 0041's hunks applied on top (each hunk's pre-image found once in 0040's
    post-image); `wide_min_len` replaces the context length from which the launcher takes 0041's blocks."""
    tree = patch_head(tmp)
    path = tree / LOGITS_FILE
    text = path.read_text()
    entry = next(e for e in load_series(REPO / "series").entries if e.id == ENTRY_0041)
    (fp,) = parse_patch(entry.file.read_bytes(), entry.file.name).files
    assert fp.path == LOGITS_FILE
    for hunk in fp.hunks:
        old, new = "\n".join(hunk.pre_image) + "\n", "\n".join(hunk.post_image) + "\n"
        assert text.count(old) == 1, hunk.header
        text = text.replace(old, new)
    if wide_min_len is not None:
        assert text.count("_PAGED_WIDE_MIN_LEN = 32768\n") == 1
        text = text.replace("_PAGED_WIDE_MIN_LEN = 32768\n", f"_PAGED_WIDE_MIN_LEN = {wide_min_len}\n")
    path.write_text(text)
    return tree


#: (next_n, the logits' width) -> the blocks a program 0041's launcher must take
CHOICES = {(1, 32767): 2, (1, 32768): 2, (2, 32767): 2, (2, 32768): 4, (2, 131072): 4, (3, 32768): 2, (4, 131072): 2}

LAUNCHES = """
import importlib.util, json, sys
import torch
spec = importlib.util.spec_from_file_location("kernel_offsets", sys.argv[1])
ko = importlib.util.module_from_spec(spec)
spec.loader.exec_module(ko)
mod = ko.install_vllm_shim(__import__("pathlib").Path(sys.argv[2]))["mqa_logits_triton"]
seen = []

class Kernel:  # stands in for the Triton kernel: records the launch, computes nothing
    def __getitem__(self, grid):
        return lambda *args, **kw: seen.append([list(grid), kw["BLOCKS_PER_PROG"]])

mod._fp8_paged_mqa_logits_kernel = Kernel()
for next_n, width in json.loads(sys.argv[3]):
    q = torch.zeros(1, next_n, 4, 128, dtype=torch.float8_e4m3fn)
    cache = torch.zeros(4, 64, 1, 132, dtype=torch.uint8)
    mod.fp8_paged_mqa_logits_triton(q, cache, torch.zeros(next_n, 4), torch.tensor([100], dtype=torch.int32),
                                    torch.zeros(1, 2048, dtype=torch.int32), max_model_len=width, clean_logits=False)
print(json.dumps(seen))
"""


def test_0041_takes_four_blocks_for_next_n_2_from_32k_and_two_otherwise(tmp_path):
    import json
    import subprocess
    import sys

    tree = with_0041(tmp_path / "tree")
    cases = sorted(CHOICES)
    proc = subprocess.run(
        [
            sys.executable,
            "-c",
            LAUNCHES,
            str(REPO / "lab" / "device" / "kernel_offsets.py"),
            str(tree),
            json.dumps(cases),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    seen = json.loads(proc.stdout.strip().splitlines()[-1])
    got = {case: bpp for case, (_grid, bpp) in zip(cases, seen, strict=True)}
    assert got == CHOICES
    # the grid covers the block table's 2,048 blocks with that many blocks a program
    assert [grid for grid, _ in seen] == [[1, 2048 // CHOICES[c]] for c in cases]


def test_0041_four_blocks_for_two_mtp_rows_match_the_oracle_and_a_swapped_block_fails(tmp_path):
    # the interpreted case has 2 requests x next_n 2 over 37 and 50 keys: with the length threshold at 0 the
    # launcher takes four 16-token blocks a program, the whole of each request's table in one tile
    run = interpret(with_0041(tmp_path / "tree", wide_min_len=0), tmp_path / "run.pt")
    test_the_patched_kernel_matches_the_oracle_and_a_swapped_block_fails(run)
    check_codes(run)
