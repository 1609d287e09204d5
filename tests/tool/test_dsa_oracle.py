"""The DSA reference (`vllm_compose.proof.dsa_oracle`): hand-made cases with answers worked out by hand, and the
compose's own Triton kernels run in the Triton interpreter against it.

The hand-made cases carry the weight in CI: they need only torch. The cache bytes of the layout cases are written
here byte by byte (fp8 codes, then `struct`-packed fp32 scales), not through the module's writer, so the reader is
checked against the layout as vLLM defines it, not against its own inverse.

The kernel cases need a composed tree (`VLLM_COMPOSE_TEST_TREES`, see tests/release_trees.py), which CI cannot
have (locally: `git archive <compose branch> vllm/v1/attention/ops | tar x -C $TREES/c-<tag>`): tests/
dsa_kernels_interpreted.py runs the tree's kernels with TRITON_INTERPRET=1 in a subprocess, once per
distinct pair of kernel files, and the comparison happens here. Each comparison is paired with a planted fault (a
swapped block-table entry, indices shifted by one slot) that the same verdict must reject.
"""

from __future__ import annotations

import hashlib
import math
import os
import struct
import subprocess
import sys
from pathlib import Path

import pytest
from release_trees import composed_tree

torch = pytest.importorskip("torch", reason="the DSA oracle needs torch (see .ci/run)")

from vllm_compose.proof import dsa_oracle as o  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
DRIVER = REPO / "tests" / "dsa_kernels_interpreted.py"
LOGITS_FILE = "vllm/v1/attention/ops/mqa_logits_triton.py"
SPARSE_FILE = "vllm/v1/attention/ops/triton_mla_sparse_kernel.py"
NEG_INF = float("-inf")


def fp8(values) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.float32).to(torch.float8_e4m3fn)


def hand_pool(num_blocks, page, block_size, head_dim, tokens, scales, block_ids) -> torch.Tensor:
    """An indexer cache written byte by byte: per block, block_size x head_dim fp8 codes then block_size fp32
    scales (little-endian), each block at `page` bytes from the last."""
    pool = bytearray(num_blocks * page)
    codes = fp8(tokens).view(torch.uint8).tolist()
    for i, (row, scale) in enumerate(zip(codes, scales, strict=True)):
        base = block_ids[i // block_size] * page
        slot = i % block_size
        pool[base + slot * head_dim : base + (slot + 1) * head_dim] = bytes(row)
        at = base + block_size * head_dim + slot * 4
        pool[at : at + 4] = struct.pack("<f", scale)
    return torch.frombuffer(pool, dtype=torch.uint8).reshape(num_blocks, page).clone()


# --- indexer logits by hand ------------------------------------------------------------------------------------------

#: 2 heads x 4 dims; key 1 is the only one either head scores positive
Q = [[[1.0, 0.0, 0.0, 0.0], [0.0, 1.0, 0.0, 0.0]]]
KEYS = [[-1.0, -1.0, 0.0, 0.0], [2.0, 0.5, 0.0, 0.0], [0.0, -2.0, 1.0, 0.0]]
SCALES = [1.0, 0.5, 2.0]
WEIGHTS = [[1.0, 2.0]]
#: key 1: (relu(2) * 1 + relu(0.5) * 2) * 0.5 = 1.5; keys 0 and 2: every head's score is <= 0
WANT = [0.0, 1.5, 0.0]


def test_planted_key_is_the_only_positive_score():
    got = o.indexer_scores(fp8(Q), fp8(KEYS), torch.tensor(SCALES), torch.tensor(WEIGHTS))
    assert got.tolist() == [WANT]
    assert o.topk_indices(got, 1).tolist() == [[1]]


def test_paged_cache_read_through_a_block_table_with_a_padded_page():
    # block size 2, head dim 4: 2 x 4 fp8 bytes + 2 x 4 scale bytes = 16 used of a 40-byte page; the request's
    # blocks are 3 then 1 (block 0 and 2 hold other data that must not be read)
    pool = hand_pool(4, 40, 2, 4, KEYS, SCALES, [3, 1])
    pool[0].fill_(0x38)  # 1.0 in E4M3FN: a positive key everywhere a wrong block would be read
    pool[2].fill_(0x38)
    k, scale = o.gather_indexer_keys(pool, torch.tensor([3, 1]), 3, block_size=2, head_dim=4)
    assert k.tolist() == KEYS and scale.tolist() == SCALES
    q = fp8(Q)[None]  # [B=1, next_n=1, H=2, D=4]
    logits = o.paged_decode_logits(
        q, pool, torch.tensor(WEIGHTS), torch.tensor([3]), torch.tensor([[3, 1]]), block_size=2, width=5
    )
    assert logits.tolist() == [WANT + [NEG_INF, NEG_INF]]
    # the same cache seen as vLLM's 4-D view [num_blocks, block_size, 1, head_dim + 4] over the padded page
    view = pool[:, :16].view(4, 2, 1, 8)
    again = o.paged_decode_logits(q, view, torch.tensor(WEIGHTS), torch.tensor([3]), torch.tensor([[3, 1]]), 2)
    assert again.tolist() == [WANT]


def test_the_writer_lays_bytes_out_as_the_hand_written_cache():
    pool = o.new_indexer_cache(4, 2, 4, page_bytes=40)
    o.write_indexer_cache(pool, fp8(KEYS), torch.tensor(SCALES), torch.tensor([3, 1]), block_size=2)
    assert torch.equal(pool, hand_pool(4, 40, 2, 4, KEYS, SCALES, [3, 1]))


def test_decode_causal_mask_with_next_n_2():
    # 6 keys, all scoring 1 on the single head; context 5 with next_n 2: the rows sit at positions 3 and 4
    keys = [[1.0, 0.0]] * 6
    pool = hand_pool(3, 2 * (2 + 4), 2, 2, keys, [1.0] * 6, [0, 1, 2])
    q = fp8([[[[1.0, 0.0]], [[1.0, 0.0]]], [[[1.0, 0.0]], [[1.0, 0.0]]]])  # B=2, next_n=2, H=1, D=2
    w = torch.ones(4, 1)
    table = torch.tensor([[0, 1, 2], [0, 1, 2]])
    got = o.paged_decode_logits(q, pool, w, torch.tensor([5, 1]), table, block_size=2, width=6)
    x = NEG_INF
    assert got.tolist() == [
        [1, 1, 1, 1, x, x],  # request 0, row 0: keys 0..3
        [1, 1, 1, 1, 1, x],  # request 0, row 1: keys 0..4
        [x, x, x, x, x, x],  # request 1 (context 1 < next_n): row 0 at position -1 sees nothing
        [1, x, x, x, x, x],  # row 1 at position 0 sees key 0
    ]
    assert o.topk_indices(got, 5).tolist() == [
        [0, 1, 2, 3, -1],
        [0, 1, 2, 3, 4],
        [-1] * 5,
        [0, -1, -1, -1, -1],
    ]


def test_prefill_rows_see_their_ks_ke_range_only():
    q = fp8([[[1.0]], [[1.0]], [[1.0]]])
    k = fp8([[1.0], [2.0], [-1.0], [4.0], [8.0]])
    w = torch.tensor([[1.0], [0.5], [2.0]])
    got = o.prefill_logits(q, k, torch.ones(5), w, torch.tensor([0, 0, 2]), torch.tensor([1, 2, 5]))
    x = NEG_INF
    assert got.tolist() == [[1, x, x, x, x], [0.5, 1, x, x, x], [x, x, 0, 8, 16]]
    # prefill top-k counts from each row's ks, as top_k_per_row_prefill returns it
    assert o.topk_indices(got, 2, row_starts=torch.tensor([0, 0, 2])).tolist() == [[0, -1], [1, 0], [2, 1]]


def test_topk_ties_go_to_the_smaller_index_and_short_rows_are_padded():
    logits = torch.tensor([[1.0, 3.0, 3.0, 0.0, 3.0], [NEG_INF, 2.0, NEG_INF, NEG_INF, NEG_INF]])
    assert o.topk_indices(logits, 3).tolist() == [[1, 2, 4], [1, -1, -1]]
    assert o.topk_indices(logits, 7).tolist() == [[1, 2, 4, 0, 3, -1, -1], [1, -1, -1, -1, -1, -1, -1]]


def test_topk_refuses_nan():
    with pytest.raises(o.DsaOracleError, match="row 1 holds NaN"):
        o.topk_indices(torch.tensor([[1.0, 2.0], [float("nan"), 0.0]]), 1)


def test_recall_counts_sets_and_ignores_padding():
    got = torch.tensor([[1, 2, 3, -1], [-1, -1, -1, -1], [7, -1, -1, -1], [5, 5, 6, -1]])
    want = torch.tensor([[2, 3, 4, 5], [-1, -1, -1, -1], [-1, -1, -1, -1], [5, 6, -1, -1]])
    assert o.topk_recall(got, want).tolist() == [0.5, 1.0, 0.0, 1.0]


def test_recall_agrees_with_python_sets_on_random_rows():
    g = torch.Generator().manual_seed(7)
    got = torch.randint(-1, 12, (200, 6), generator=g)
    want = torch.randint(-1, 12, (200, 6), generator=g)
    expected = []
    for a, b in zip(got.tolist(), want.tolist(), strict=True):
        sa, sb = set(a) - {-1}, set(b) - {-1}
        expected.append(len(sa & sb) / len(sb) if sb else (0.0 if sa else 1.0))
    assert o.topk_recall(got, want).tolist() == pytest.approx(expected)


def test_compare_topk_forgives_a_tie_at_the_boundary_only():
    logits = torch.tensor([[5.0, 1.0, 4.0, 1.0, 0.5]])
    want = o.topk_indices(logits, 3)  # 0, 2 and 1 (1 and 3 tie; the smaller index wins)
    assert want.tolist() == [[0, 2, 1]]
    tied = torch.tensor([[0, 2, 3]])  # the other tied key: as right
    wrong = torch.tensor([[0, 2, 4]])  # a key below the boundary
    v_tied = o.compare_topk(tied, want, logits=logits)
    assert v_tied.passed and v_tied.min_recall == pytest.approx(2 / 3) and v_tied.min_tie_recall == 1.0
    v_wrong = o.compare_topk(wrong, want, logits=logits)
    assert not v_wrong.passed and v_wrong.min_tie_recall == pytest.approx(2 / 3) and v_wrong.worst_row == 0
    assert not o.compare_topk(tied, want).passed  # without logits no tie is forgiven


# --- sparse MLA by hand ----------------------------------------------------------------------------------------------


def _three_token_kv():
    """q attends over slots 2, 5 and 7 with scores ln 1, ln 2, ln 3 (ln 3 split between a latent and a rope lane);
    values 6, 12, 18 in lane 1; a large number in a rope lane that must never reach the output."""
    kv = torch.zeros(9, 1, 576)
    q = torch.zeros(1, 1, 576)
    q[0, 0, 0] = 1.0
    q[0, 0, 512 + 5] = 1.0
    kv[2, 0, 0] = 0.0
    kv[5, 0, 0] = math.log(2)
    kv[7, 0, 0] = math.log(3) / 2
    kv[7, 0, 512 + 5] = math.log(3) / 2
    kv[[2, 5, 7], 0, 1] = torch.tensor([6.0, 12.0, 18.0])
    kv[:, 0, 512 + 10] = 1000.0
    kv[4, 0, 0] = 50.0  # a slot nobody selected, with the largest score
    return q, kv


def test_attention_over_three_selected_tokens_by_hand():
    q, kv = _three_token_kv()
    out, lse = o.sparse_mla_attention(q, kv, torch.tensor([[[2, 5, 7]]]), sm_scale=1.0)
    # weights 1/6, 2/6, 3/6: lane 1 = 1 + 4 + 9 = 14; log-sum-exp = ln 6
    assert out.shape == (1, 1, 512)
    assert out[0, 0, 1].item() == pytest.approx(14.0, rel=1e-6)
    # lane 0 holds the score lanes' values, weighted the same way; every other lane (and so the rope lane's 1000,
    # which lies past the 512 value lanes) stays 0
    assert out[0, 0, 0].item() == pytest.approx((2 * math.log(2) + 1.5 * math.log(3)) / 6, rel=1e-6)
    assert out[0, 0, 2:].abs().sum().item() == 0.0
    assert lse.item() == pytest.approx(math.log(6), rel=1e-6)


def test_attention_skips_minus_one_and_counts_repeats():
    q, kv = _three_token_kv()
    padded = torch.tensor([[[-1, 2, -1, 5, 7, -1]]])
    out, lse = o.sparse_mla_attention(q, kv, padded, sm_scale=1.0)
    assert out[0, 0, 1].item() == pytest.approx(14.0, rel=1e-6) and lse.item() == pytest.approx(math.log(6), rel=1e-6)
    # slot 7 twice: weights 1, 2, 3, 3 of 9 -> (6 + 24 + 54 + 54) / 9
    twice, _ = o.sparse_mla_attention(q, kv, torch.tensor([[[2, 5, 7, 7]]]), sm_scale=1.0)
    assert twice[0, 0, 1].item() == pytest.approx(138 / 9, rel=1e-6)


def test_attention_with_no_valid_index_is_zero_and_refuses_out_of_range():
    q, kv = _three_token_kv()
    out, lse = o.sparse_mla_attention(q, kv, torch.tensor([[[-1, -1]]]), sm_scale=1.0)
    assert out.abs().sum().item() == 0.0 and lse.item() == NEG_INF
    with pytest.raises(o.DsaOracleError, match=r"token 0's index 9 \(top-k slot 1\) is outside the KV's 9 slots"):
        o.sparse_mla_attention(q, kv, torch.tensor([[[2, 9]]]), sm_scale=1.0)


def test_attention_verdict_rejects_zeroed_output_and_nan():
    q, kv = _three_token_kv()
    want, _ = o.sparse_mla_attention(q, kv, torch.tensor([[[2, 5, 7]]]), sm_scale=1.0)
    same = o.compare_attention(want.clone(), want)
    assert same.passed and same.min_cosine == pytest.approx(1.0) and same.max_abs_error == 0.0
    zero = o.compare_attention(torch.zeros_like(want), want)
    assert not zero.passed and zero.min_cosine == 0.0 and zero.max_rel_error == pytest.approx(1.0)
    nan = want.clone()
    nan[0, 0, 3] = float("nan")
    assert not o.compare_attention(nan, want).passed


def test_logits_verdict_rejects_a_mask_disagreement():
    want = torch.tensor([[1.0, 2.0, NEG_INF]])
    assert o.compare_logits(want.clone(), want).passed
    leak = torch.tensor([[1.0, 2.0, 0.5]])  # a key past the causal bound scored
    v = o.compare_logits(leak, want)
    assert not v.passed and v.mask_mismatches == 1


# --- bad inputs ------------------------------------------------------------------------------------------------------


def test_a_page_smaller_than_a_block_is_refused():
    with pytest.raises(o.DsaOracleError, match="page stride 12 bytes is less than a block's 2 x \\(4 \\+ 4\\) = 16"):
        o.gather_indexer_keys(torch.zeros(3, 12, dtype=torch.uint8), torch.tensor([0]), 2, block_size=2, head_dim=4)


def test_a_block_id_outside_the_cache_is_refused():
    pool = o.new_indexer_cache(2, 2, 4)
    with pytest.raises(o.DsaOracleError, match="block ids 0..5 outside the cache's 2 blocks"):
        o.gather_indexer_keys(pool, torch.tensor([0, 5]), 3, block_size=2, head_dim=4)
    with pytest.raises(o.DsaOracleError, match="holds 1 entries, 3 tokens need 2"):
        o.gather_indexer_keys(pool, torch.tensor([0]), 3, block_size=2, head_dim=4)


# --- the compose's kernels in the Triton interpreter -----------------------------------------------------------------

#: (sha256 of the two kernel files) -> the interpreted run's saved tensors: trees with identical kernels run once
_RUNS: dict[str, dict] = {}


@pytest.fixture(scope="module", params=["v0.26.0", "v0.33.0"])
def kernel_run(request, tmp_path_factory) -> dict:
    pytest.importorskip("triton", reason="the kernel comparison needs triton (see .ci/run)")
    tree = composed_tree(request.param, LOGITS_FILE)
    digest = hashlib.sha256((tree / LOGITS_FILE).read_bytes() + (tree / SPARSE_FILE).read_bytes()).hexdigest()
    if digest not in _RUNS:
        out = tmp_path_factory.mktemp("dsa-kernels") / "run.pt"
        env = {**os.environ, "TRITON_INTERPRET": "1"}
        proc = subprocess.run(
            [sys.executable, str(DRIVER), "--tree", str(tree), "--out", str(out)],
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert proc.returncode == 0, f"the interpreted kernels of {tree} failed:\n{proc.stderr[-3000:]}"
        _RUNS[digest] = torch.load(out, weights_only=False)
    return _RUNS[digest]


def _decode_reference(d: dict) -> torch.Tensor:
    from dsa_kernels_interpreted import DECODE

    return o.paged_decode_logits(
        d["q"], d["pool"], d["weights"], d["context_lens"], d["block_table"], block_size=DECODE["block_size"]
    )


def test_paged_decode_logits_match_the_kernel_and_a_swapped_block_fails(kernel_run):
    d = kernel_run["paged_decode"]
    want = _decode_reference(d)
    good = o.compare_logits(d["logits"], want)
    assert good.passed, good
    assert good.mask_mismatches == 0 and good.max_rel_error < 1e-6  # measured 5.6e-8
    bad = o.compare_logits(d["faulty"], want)
    assert not bad.passed and bad.max_rel_error > 0.1, bad


def test_topk_of_the_kernels_logits_recalls_the_reference_and_a_swapped_block_does_not(kernel_run):
    d = kernel_run["paged_decode"]
    want_logits = _decode_reference(d)
    for k in (8, 16):
        want = o.topk_indices(want_logits, k)
        good = o.compare_topk(o.topk_indices(d["logits"], k), want, logits=want_logits)
        assert good.passed and good.min_recall == 1.0, (k, good)
        bad = o.compare_topk(o.topk_indices(d["faulty"], k), want, logits=want_logits)
        assert not bad.passed and bad.min_tie_recall < 0.9, (k, bad)  # measured 0.625 for both
        shifted = o.compare_topk(torch.where(want >= 0, want + 1, want), want, logits=want_logits)
        assert not shifted.passed, (k, shifted)


def test_prefill_logits_match_the_kernel(kernel_run):
    p = kernel_run["prefill"]
    want = o.prefill_logits(p["q"], p["k"], p["k_scale"], p["weights"], p["ks"], p["ke"])
    good = o.compare_logits(p["logits"], want)
    assert good.passed and good.max_rel_error < 1e-6, good  # measured 3.4e-8
    topk = o.compare_topk(
        o.topk_indices(p["logits"], 8, p["ks"]), o.topk_indices(want, 8, p["ks"]), logits=want, row_starts=p["ks"]
    )
    assert topk.passed and topk.min_recall == 1.0, topk
    # a kernel that let a row see one key past its ke would be caught by the mask
    leaked = p["logits"].clone()
    leaked[0, int(p["ke"][0])] = 0.0
    assert o.compare_logits(leaked, want).mask_mismatches == 1


def test_sparse_mla_matches_the_kernel_and_shifted_indices_fail(kernel_run):
    s = kernel_run["sparse_mla"]
    want, lse = o.sparse_mla_attention(s["q"], s["kv"], s["indices"], s["sm_scale"])
    assert torch.isfinite(lse).all()
    good = o.compare_attention(s["out"], want)
    assert good.passed, good
    assert good.min_cosine > 0.99999 and good.max_rel_error < 5e-3, good  # measured 0.9999957 and 2.8e-3
    bad = o.compare_attention(s["faulty"], want)
    assert not bad.passed and bad.mean_cosine < 0.5, bad  # measured 0.03


def test_sparse_mla_split_kv_matches_the_kernel(kernel_run):
    s = kernel_run["sparse_mla"]
    if "split2_error" in s:
        pytest.skip(
            "this Triton's interpreter could not run the split-KV kernel even with the driver's loop-bound correction "
            f"(dsa_kernels_interpreted._scalar_loop_bounds): {s['split2_error']}; the single-pass kernel shares its "
            "tile body and is compared above"
        )
    want, _ = o.sparse_mla_attention(s["q"], s["kv"], s["indices"], s["sm_scale"])
    good = o.compare_attention(s["out_split2"], want)
    assert good.passed and good.min_cosine > 0.99999 and good.max_rel_error < 5e-3, good  # measured as single-pass
