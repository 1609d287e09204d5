"""Skew fix 0022 on the real release files: under PP, every sampled token reaches the earlier stages.

The bug it fixes was found on the GPU (lab/notebook/validation.md: PP2 + MTP2 with every draft rejected emitted a
copy of token 319 as token 320). The decision behind it is plain numpy, so it is checked here on a CPU: the release's
`compute_need_sampled_mask` (stock vllm/v1/worker/gpu/pp_utils.py, from the PyPI sdist) and the same function after
the series' patch are executed on the batch a request presents at its second-to-last step under async scheduling,
where `num_computed_tokens` still counts the previous step's rejected drafts. The series applies 0022 to
v0.26.0-v0.29.0; both ends of that range are run, and v0.30.0, whose own gate (PR #46994 merged) needs no fix.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest
from release_trees import release_files, release_functions

np = pytest.importorskip("numpy", reason="the PP gate is numpy code (numpy is installed by .ci/run)")

from vllm_compose.apply import apply_patches  # noqa: E402
from vllm_compose.patchfile import parse_patch  # noqa: E402
from vllm_compose.series import load_series  # noqa: E402

pytestmark = [pytest.mark.sdist, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
SERIES = REPO / "series"
FIX = "fix-pp-broadcast-every-sampled-token"
PP_UTILS = "vllm/v1/worker/gpu/pp_utils.py"


@dataclass
class Batch:
    """The InputBatch fields the gate reads (numpy arrays, one entry per request)."""

    num_computed_tokens_np: np.ndarray
    prefill_len_np: np.ndarray
    num_scheduled_tokens: np.ndarray
    max_seq_len_np: np.ndarray
    is_prefilling_np: np.ndarray


def _gate(source: str):
    """`compute_need_sampled_mask` from a pp_utils.py text, executed alone (it needs only numpy)."""
    name = "compute_need_sampled_mask"
    return release_functions(source, PP_UTILS, [name], {"np": np, "InputBatch": Batch})[name]


@pytest.fixture(scope="module", params=["v0.26.0", "v0.29.0"])
def stock_and_patched(request, tmp_path_factory):
    (entry,) = [e for e in load_series(SERIES).entries_for(request.param) if e.id == FIX]
    stock = release_files(tmp_path_factory, request.param, [PP_UTILS])[PP_UTILS]
    target = tmp_path_factory.mktemp("pp")
    (target / Path(PP_UTILS).parent).mkdir(parents=True)
    (target / PP_UTILS).write_text(stock)
    result = apply_patches(target, [parse_patch(entry.file.read_bytes(), name=entry.file.name)])
    assert result.ok, [h.to_json() for h in result.hunks]
    return _gate(stock), _gate((target / PP_UTILS).read_text())


def _decode_step(prompt: int, max_tokens: int, emitted: int, drafts: int, overshoot: int) -> Batch:
    """One decoding request after `emitted` tokens, scheduled with `drafts` drafts; `overshoot` rejected drafts of
    the previous step still counted in num_computed_tokens (async scheduling)."""
    one = lambda v: np.array([v], dtype=np.int32)  # noqa: E731
    return Batch(
        num_computed_tokens_np=one(prompt + emitted - 1 + overshoot),
        prefill_len_np=one(prompt),
        num_scheduled_tokens=one(1 + drafts),
        max_seq_len_np=one(prompt + max_tokens),
        is_prefilling_np=np.array([False]),
    )


def test_stock_gate_drops_the_second_to_last_token_when_rejected_drafts_are_still_counted(stock_and_patched):
    stock, _patched = stock_and_patched
    # the step that samples token 319 of 320 feeds the last step: it must be broadcast
    assert stock(_decode_step(17, 320, 318, drafts=2, overshoot=0)) is not None  # sync: counted right
    assert stock(_decode_step(17, 320, 318, drafts=1, overshoot=1)) is not None  # MTP1: one too many is harmless
    assert stock(_decode_step(17, 320, 318, drafts=2, overshoot=2)) is None  # MTP2, both rejected: dropped (bug)


def test_patched_gate_broadcasts_every_sampled_token(stock_and_patched):
    _stock, patched = stock_and_patched
    for drafts in (1, 2, 3):
        for overshoot in range(drafts + 1):
            for emitted in (1, 100, 317, 318, 319):
                mask = patched(_decode_step(17, 320, emitted, drafts, overshoot))
                assert mask is not None and mask.tolist() == [True]


def test_patched_gate_still_skips_prefill_chunks_that_sample_nothing(stock_and_patched):
    _stock, patched = stock_and_patched
    chunk = Batch(
        num_computed_tokens_np=np.array([0, 0], dtype=np.int32),
        prefill_len_np=np.array([100, 40], dtype=np.int32),
        num_scheduled_tokens=np.array([64, 40], dtype=np.int32),
        max_seq_len_np=np.array([420, 360], dtype=np.int32),
        is_prefilling_np=np.array([True, True]),
    )
    assert patched(chunk).tolist() == [False, True]
    first_only = Batch(**{**chunk.__dict__, "num_scheduled_tokens": np.array([64, 32], dtype=np.int32)})
    assert patched(first_only) is None


def test_from_v0_30_0_the_release_gate_broadcasts_every_sampled_token_and_the_series_stops_fixing_it(
    tmp_path_factory,
):
    assert FIX not in [e.id for e in load_series(SERIES).entries_for("v0.30.0")]
    release = _gate(release_files(tmp_path_factory, "v0.30.0", [PP_UTILS])[PP_UTILS])
    for drafts in (1, 2, 3):
        for overshoot in range(drafts + 1):
            for emitted in (1, 100, 317, 318, 319):
                mask = release(_decode_step(17, 320, emitted, drafts, overshoot))
                assert mask is not None and mask.tolist() == [True]
