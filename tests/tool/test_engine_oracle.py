"""The in-engine DSA oracle (`proof.engine_oracle`) on a CPU, against a stand-in of the four vLLM modules it
wraps: every check runs and passes on a faithful path, each corruption makes its check fail, a kernel bug that is
not a corruption is caught, and records made inside a (simulated) CUDA-graph capture are checked after replay."""

from __future__ import annotations

import sys
import types

import pytest

torch = pytest.importorskip("torch")

from vllm_compose.proof import dsa_oracle as o  # noqa: E402
from vllm_compose.proof import engine_oracle as eo  # noqa: E402

BS = 16  # tokens a block
D = 128  # indexer head dim
H_IDX = 4  # indexer heads
H = 3  # attention heads
TOPK = 32
NUM_BLOCKS = 24
PAGE = BS * (D + 4) + 64  # a padded page, as entry 0009 gives the indexer cache

# The stand-in modules: each function looks the others up in its module's globals at call time, as vLLM's do.
INDEXER_SRC = """
import torch
from vllm_compose.proof import dsa_oracle as o

def fp8_paged_mqa_logits_triton(q, kv_cache, weights, context_lens, block_tables, max_model_len, clean_logits=True):
    ref = o.paged_decode_logits(q, kv_cache, weights, context_lens, block_tables, kv_cache.shape[1],
                                width=max_model_len)
    if BUG == "swap_blocks":
        bt = block_tables.clone(); bt[:, [0, 1]] = bt[:, [1, 0]]
        ref = o.paged_decode_logits(q, kv_cache, weights, context_lens, bt, kv_cache.shape[1], width=max_model_len)
    # clean_logits=False: the columns outside each row's range hold whatever was there
    out = torch.where(torch.isfinite(ref), ref, torch.full_like(ref, 7.0))
    if BUG == "fp8_rounding":  # every logit 5e-4 off, as DeepGEMM's FP8 logits were measured on an H100
        out = torch.where(torch.isfinite(ref), ref * (1 + 5e-4), out)
    if BUG == "spill":  # a row's last block written past its end, over the next row's first keys
        out[1, :3] = float("-inf")
    return out

def fp8_mqa_logits_triton(q, kv, weights, cu_seqlen_ks, cu_seqlen_ke, clean_logits=True):
    k, scale = kv
    ref = o.prefill_logits(q, k, scale, weights, cu_seqlen_ks, cu_seqlen_ke)
    return torch.where(torch.isfinite(ref), ref, torch.full_like(ref, -3.0))

# DeepGEMM's forms (the native path): q as (values, scales), (batch, next_n) context bounds
def fp8_fp4_paged_mqa_logits(q, kv_cache, weights, context_lens, block_tables, schedule_metadata, max_model_len,
                             clean_logits):
    values, scales = q
    lens = context_lens[:, -1] if context_lens.ndim == 2 else context_lens
    return fp8_paged_mqa_logits_triton(values, kv_cache, weights, lens, block_tables, max_model_len, clean_logits)

def fp8_fp4_mqa_logits(q, kv, weights, cu_seqlen_ks, cu_seqlen_ke, clean_logits):
    return fp8_mqa_logits_triton(q[0], kv, weights, cu_seqlen_ks, cu_seqlen_ke, clean_logits)

BUG = None
"""

SPARSE_SRC = """
import torch

def triton_convert_req_index_to_global_index(req_id, block_table, token_indices, BLOCK_SIZE=64,
                                             NUM_TOPK_TOKENS=2048, BLOCK_N=128, return_valid_counts=False):
    ti = token_indices.long()
    col = ti.clamp_min(0) // BLOCK_SIZE
    ok = (ti >= 0) & (col < block_table.shape[1])
    base = block_table.long()[req_id.long()[:, None].expand_as(col), col.clamp_max(block_table.shape[1] - 1)]
    out = torch.where(ok, base * BLOCK_SIZE + ti.clamp_min(0) % BLOCK_SIZE, torch.full_like(ti, -1)).int()
    return (out, (out >= 0).sum(1).int()) if return_valid_counts else out

class XPUMLASparseImpl:
    def __init__(self, buf):
        self.topk_indices_buffer = buf

    def forward_mqa(self, q, kv_c_and_k_pe_cache, attn_metadata, layer):
        n = q.shape[0]
        glob = triton_convert_req_index_to_global_index(
            attn_metadata["req_id"], attn_metadata["block_table"], self.topk_indices_buffer[:n],
            BLOCK_SIZE=attn_metadata["block_size"], NUM_TOPK_TOKENS=self.topk_indices_buffer.shape[1])
        import vllm.v1.attention.backends.mla.triton_mla_sparse as t
        return t.run(q, kv_c_and_k_pe_cache, glob), None
"""

TRITON_SRC = """
import torch
from vllm_compose.proof import dsa_oracle as o

def triton_mla_sparse_attention(q, kv, indices, sm_scale, num_kv_splits=None, sm_count=None):
    out, _ = o.sparse_mla_attention(q, kv, indices, sm_scale)
    return out.to(torch.bfloat16)

def run(q, kv, glob):
    return triton_mla_sparse_attention(q, kv.view(-1, 1, kv.shape[-1]), glob.view(q.shape[0], 1, -1), sm_scale=0.1)
"""


# the native path's backend module: FlashMLA's kernel returns [out, max_logits, lse] (a list: the torch op's
# `Tensor[]` return, as `torch.ops._flashmla_C.sparse_prefill_fwd` gives it) and runs on q padded to 8 heads, the padding left as NaN here (FlashMLA leaves it unwritten) so that a check reading it would fail
FLASHMLA_SRC = """
import torch
from vllm_compose.proof import dsa_oracle as o
from vllm.v1.attention.backends.mla.xpu_mla_sparse import triton_convert_req_index_to_global_index

PAD = 8

def flash_mla_sparse_fwd(q, kv, indices, sm_scale, d_v=512, attn_sink=None, topk_length=None, out=None):
    heads = q.shape[1]
    res = torch.full((q.shape[0], heads, d_v), float("nan"))
    real = ~torch.isnan(q.float()).any(dim=2).any(dim=0)
    got, lse = o.sparse_mla_attention(q[:, real], kv, indices, sm_scale)
    res[:, real] = got
    return [res.to(torch.bfloat16), None, lse]

class FlashMLASparseImpl:
    num_heads = 3

    def __init__(self, buf):
        self.topk_indices_buffer = buf

    def forward_mqa(self, q, kv_c_and_k_pe_cache, attn_metadata, layer):
        n = q.shape[0]
        glob, lens = triton_convert_req_index_to_global_index(
            attn_metadata["req_id"], attn_metadata["block_table"], self.topk_indices_buffer[:n],
            BLOCK_SIZE=attn_metadata["block_size"], NUM_TOPK_TOKENS=self.topk_indices_buffer.shape[1],
            return_valid_counts=True)
        padded = q.new_full((n, PAD, q.shape[2]), float("nan"))
        padded[:, : self.num_heads] = q
        out = flash_mla_sparse_fwd(padded, kv_c_and_k_pe_cache.view(-1, 1, kv_c_and_k_pe_cache.shape[-1]),
                                   glob.view(n, 1, -1), 0.1, topk_length=lens)[0]
        return out[:, : self.num_heads], None
"""


def _module(name: str, src: str | None = None) -> types.ModuleType:
    mod = types.ModuleType(name)
    if src:
        exec(compile(src, name, "exec"), mod.__dict__)
    return mod


@pytest.fixture
def fake_vllm(monkeypatch):
    parts = {
        "vllm": None,
        "vllm.model_executor": None,
        "vllm.model_executor.layers": None,
        "vllm.v1": None,
        "vllm.v1.attention": None,
        "vllm.v1.attention.backends": None,
        "vllm.v1.attention.backends.mla": None,
        eo.INDEXER_MODULE: INDEXER_SRC,
        eo.SPARSE_MODULE: SPARSE_SRC,
        eo.TRITON_MODULE: TRITON_SRC,
        eo.FLASHMLA_MODULE: FLASHMLA_SRC,
    }
    mods = {}
    for name, src in parts.items():
        mods[name] = _module(name, src)
        monkeypatch.setitem(sys.modules, name, mods[name])
    yield mods
    eo.uninstall()
    eo.arm(False)
    eo.corrupt(None)
    eo.reset()
    eo._S.graph_groups.clear()
    eo._S.capturing.clear()


class _Layer:
    def __init__(self, name: str):
        self.layer_name = name


class _World:
    """Two requests (decode, next_n 1) over a paged indexer cache and a latent KV, and layers 0 (full) and 1
    (shared), run the way vLLM's DSA path runs them."""

    def __init__(self, seed: int = 0):
        g = torch.Generator().manual_seed(seed)
        self.ctx = torch.tensor([45, 70], dtype=torch.int32)
        perm = torch.randperm(NUM_BLOCKS, generator=g).int()
        self.block_table = perm[:10].reshape(2, 5).contiguous()
        self.cache = o.new_indexer_cache(NUM_BLOCKS, BS, D, page_bytes=PAGE)
        for r in range(2):
            n = int(self.ctx[r])
            k = (torch.randn(n, D, generator=g) * 2).to(torch.float8_e4m3fn)
            o.write_indexer_cache(self.cache, k, torch.rand(n, generator=g) + 0.5, self.block_table[r], BS)
        self.kv = (torch.randn(NUM_BLOCKS * BS, 576, generator=g) * 0.5).to(torch.bfloat16)
        self.q_idx = (torch.randn(2, 1, H_IDX, D, generator=g) * 2).to(torch.float8_e4m3fn)
        self.w = torch.randn(2, H_IDX, generator=g).abs()
        self.q = (torch.randn(2, H, 576, generator=g)).to(torch.bfloat16)
        self.buf = torch.full((8, TOPK), -1, dtype=torch.int32)
        self.meta = {
            "req_id": torch.tensor([0, 1], dtype=torch.int32),
            "block_table": self.block_table,
            "block_size": BS,
        }

    def indexer(self, mods) -> None:
        ind = mods[eo.INDEXER_MODULE]
        logits = ind.fp8_paged_mqa_logits_triton(
            self.q_idx,
            self.cache.as_strided((NUM_BLOCKS, BS, 1, D + 4), (PAGE, D + 4, D + 4, 1)),
            self.w,
            self.ctx,
            self.block_table,
            max_model_len=80,
            clean_logits=False,
        )
        # the top-k kernel reads each row's valid range only
        valid = torch.arange(80)[None, :] < self.ctx[:, None]
        top = o.topk_indices(torch.where(valid, logits, torch.tensor(float("-inf"))), TOPK)
        self.buf[:2] = top.int()

    def native_indexer(self, mods, scales=None) -> None:
        """The indexer as the native path calls DeepGEMM: q as (values, scales), (batch, next_n) bounds."""
        ind = mods[eo.INDEXER_MODULE]
        logits = ind.fp8_fp4_paged_mqa_logits(
            (self.q_idx, scales),
            self.cache.as_strided((NUM_BLOCKS, BS, 1, D + 4), (PAGE, D + 4, D + 4, 1)),
            self.w,
            self.ctx[:, None],
            self.block_table,
            None,
            max_model_len=80,
            clean_logits=False,
        )
        valid = torch.arange(80)[None, :] < self.ctx[:, None]
        self.buf[:2] = o.topk_indices(torch.where(valid, logits, torch.tensor(float("-inf"))), TOPK).int()

    def forward(self, mods, impl, native: bool = False) -> None:
        if native:
            self.native_indexer(mods)
        else:
            self.indexer(mods)
        impl.forward_mqa(self.q, self.kv, self.meta, _Layer("model.layers.0.self_attn.attn"))
        impl.forward_mqa(self.q, self.kv, self.meta, _Layer("model.layers.1.self_attn.attn"))


def _prefill(mods, buf, g) -> None:
    """One prefill chunk of 6 rows over 30 gathered keys, rows 2..7 of the forward."""
    ind = mods[eo.INDEXER_MODULE]
    q_all = (torch.randn(8, H_IDX, D, generator=g) * 2).to(torch.float8_e4m3fn)
    k = (torch.randn(30, D, generator=g) * 2).to(torch.float8_e4m3fn)
    scale = torch.rand(30, generator=g) + 0.5
    w = torch.randn(8, H_IDX, generator=g).abs()
    ks = torch.zeros(6, dtype=torch.int32)
    ke = torch.arange(25, 31, dtype=torch.int32)
    logits = ind.fp8_mqa_logits_triton(q_all[2:8], (k, scale), w[2:8], ks, ke, clean_logits=False)
    valid = (torch.arange(30)[None, :] >= ks[:, None]) & (torch.arange(30)[None, :] < ke[:, None])
    buf[2:8] = o.topk_indices(torch.where(valid, logits, torch.tensor(float("-inf"))), TOPK, row_starts=ks).int()


def test_every_check_runs_and_passes_on_a_faithful_path(fake_vllm):
    info = eo.install()
    assert {"decode_logits", "prefill_logits", "slots", "attention", "forward_mqa", "graph.replay"} <= set(
        info["wrapped"]
    )
    w = _World()
    impl = fake_vllm[eo.SPARSE_MODULE].XPUMLASparseImpl(w.buf)
    eo.arm(True)
    w.forward(fake_vllm, impl)
    # a mixed forward: the decode rows first, then a prefill chunk
    g = torch.Generator().manual_seed(3)
    w.indexer(fake_vllm)
    _prefill(fake_vllm, w.buf, g)
    meta = dict(w.meta, req_id=torch.tensor([0, 1, 0, 0, 0, 0, 0, 0], dtype=torch.int32))
    q8 = torch.cat([w.q, w.q, w.q, w.q]).contiguous()
    impl.forward_mqa(q8, w.kv, meta, _Layer("model.layers.0.self_attn.attn"))
    s = eo.summary()
    assert s["passed"], s
    assert set(s["checks"]) == set(eo.CHECKS)
    assert all(s["checks"][c]["count"] > 0 and s["checks"][c]["failed"] == 0 for c in eo.CHECKS)
    assert s["forwards"] == 2
    # the measurements are kept: logits agree to rounding, top-k recall 1, the attention to bf16 rounding
    layer0 = "model.layers.0.self_attn.attn"
    assert s["checks"]["decode_topk"]["layers"][layer0]["worst"]["min_tie_recall"] == 1.0
    assert s["checks"]["attention"]["layers"][layer0]["worst"]["min_cosine"] > 0.999
    assert s["checks"]["index_share"]["layers"]["model.layers.1.self_attn.attn"]["worst"]["from_layer"] == 0


def test_unarmed_records_nothing(fake_vllm):
    eo.install()
    w = _World()
    w.forward(fake_vllm, fake_vllm[eo.SPARSE_MODULE].XPUMLASparseImpl(w.buf))
    s = eo.summary()
    assert s["total"] == 0 and not s["passed"] and s["checks"] == {}


@pytest.mark.parametrize("kind", sorted(eo.CORRUPTIONS))
def test_each_corruption_fails_its_check(fake_vllm, kind):
    eo.install()
    w = _World()
    impl = fake_vllm[eo.SPARSE_MODULE].XPUMLASparseImpl(w.buf)
    eo.arm(True)
    eo.corrupt(kind)
    w.forward(fake_vllm, impl)
    s = eo.summary()
    assert not s["passed"]
    assert s["checks"][eo.CORRUPTIONS[kind]]["failed"] > 0, s
    eo.corrupt(None)
    eo.reset()
    w.forward(fake_vllm, impl)
    assert eo.summary()["passed"]


def test_a_kernel_bug_is_caught_without_a_corruption(fake_vllm):
    eo.install()
    fake_vllm[eo.INDEXER_MODULE].BUG = "swap_blocks"
    w = _World()
    eo.arm(True)
    w.forward(fake_vllm, fake_vllm[eo.SPARSE_MODULE].XPUMLASparseImpl(w.buf))
    s = eo.summary()
    assert s["checks"]["decode_logits"]["failed"] == 1
    assert s["checks"]["decode_topk"]["failed"] == 1
    first = s["checks"]["decode_logits"]["layers"]["model.layers.0.self_attn.attn"]["first_failure"]
    assert first["max_rel_error"] > 0.01
    # the failed top-k row says where it went wrong: picks the reference left out, with their reference logits
    diag = s["checks"]["decode_topk"]["layers"]["model.layers.0.self_attn.attn"]["first_failure"]["diagnosis"]
    assert diag["picks_left_out"] > 0 and diag["left_out_logits"]["max"] <= diag["reference_max"], diag
    assert diag["context_len"] > 0 and diag["picks_past_row"] == 0, diag


def test_a_top_k_row_diagnosis_names_padding_picks_past_the_row_and_left_out_logits():
    import torch

    ref = torch.tensor([5.0, 4.0, 3.0, 2.0, 1.0, float("-inf")])
    d = eo._topk_diagnosis(torch.tensor([0, 4, 5, -1, 9]), torch.tensor([0, 1, 2, 3, -1]), ref, torch)
    assert d["finite_columns"] == 5 and d["reference_kth"] == 2.0 and d["reference_max"] == 5.0
    assert (d["padding_picks"], d["picks_past_row"], d["picks_not_finite"]) == (1, 1, 1)
    # 4 and 5 were left out by the reference; 5 is -inf there, so only 4's logit (1.0) is summarized
    assert d["picks_left_out"] == 2 and d["left_out_logits"] == {"min": 1.0, "median": 1.0, "max": 1.0}


def test_a_row_overwritten_by_its_neighbour_is_located(fake_vllm):
    """The defect entry 0037 fixes (a row's last block written past the row, over the next row's first keys) shows
    as columns the reference holds valid and the kernel left at -inf; the report says which row and columns."""
    eo.install()
    fake_vllm[eo.INDEXER_MODULE].BUG = "spill"
    w = _World()
    eo.arm(True)
    w.forward(fake_vllm, fake_vllm[eo.SPARSE_MODULE].XPUMLASparseImpl(w.buf))
    first = eo.summary()["checks"]["decode_logits"]["layers"]["model.layers.0.self_attn.attn"]["first_failure"]
    assert first["mask_mismatches"] == 3
    assert first["where"] == [{"row": 1, "context_len": 70, "columns": 3, "first": 0, "last": 2}]


def test_records_made_in_a_capture_are_checked_after_each_replay(fake_vllm, monkeypatch):
    eo.install()
    w = _World()
    impl = fake_vllm[eo.SPARSE_MODULE].XPUMLASparseImpl(w.buf)
    graph = object()  # the wrappers know a graph by its identity
    monkeypatch.setattr(eo, "_capturing", lambda: True)
    eo._S.capturing.append(graph)
    eo._S.graph_groups[id(graph)] = []
    w.forward(fake_vllm, impl)  # captured: nothing checked, the layers' records kept for the graph
    eo._S.capturing.pop()
    monkeypatch.setattr(eo, "_capturing", lambda: False)
    assert eo.summary()["total"] == 0
    assert len(eo._S.graph_groups[id(graph)]) == 2
    replay = eo._replay(lambda self: None)
    replay(graph)  # not armed: still nothing
    assert eo.summary()["total"] == 0
    eo.arm(True)
    replay(graph)
    replay(graph)
    s = eo.summary()
    assert s["passed"] and s["graph_replays_checked"] == 2 and s["forwards"] == 2
    assert s["checks"]["decode_logits"]["count"] == 2 and s["checks"]["index_share"]["count"] == 2
    # a replay that wrote other top-k into the captured (static) rows is caught at the next check
    eo._S.graph_groups[id(graph)][1].slots["token_indices"].add_(1)
    replay(graph)
    assert eo.summary()["checks"]["index_share"]["failed"] == 1


def test_install_refuses_a_tree_without_the_path(fake_vllm):
    del fake_vllm[eo.TRITON_MODULE].triton_mla_sparse_attention
    with pytest.raises(eo.EngineOracleError, match="triton_mla_sparse_attention"):
        eo.install()
    assert not eo._S.originals  # nothing half-wrapped


def test_unknown_corruption_is_refused():
    with pytest.raises(eo.EngineOracleError, match="unknown corruption"):
        eo.corrupt("everything")


def test_run_suite_judges_the_oracle_and_its_corruptions(fake_vllm, tmp_path, monkeypatch):
    """`recall_run.run_suite` with `oracle`: installs it before the engine, arms it around the generation, and turns
    its summary (and each corruption's) into checks. The engine is a stand-in whose generation runs the DSA path."""
    import json

    from vllm_compose.proof import recall_model, recall_run

    world = _World()
    impl = fake_vllm[eo.SPARSE_MODULE].XPUMLASparseImpl(world.buf)
    built = []

    class _Out:
        def __init__(self, toks):
            self.outputs = [types.SimpleNamespace(token_ids=toks)]

    class LLM:
        def __init__(self, **kwargs):
            assert eo._S.originals, "the oracle must be installed before the engine is built"
            built.append(kwargs)

        def generate(self, prompts, sp, use_tqdm=False):
            world.forward(fake_vllm, impl)
            return [_Out([0] * sp.max_tokens) for _ in prompts]

        def get_metrics(self):
            return []

    vllm = fake_vllm["vllm"]
    vllm.__version__ = "0.0-fake"
    vllm.LLM = LLM
    vllm.SamplingParams = lambda **kw: types.SimpleNamespace(**kw)
    inputs = _module("vllm.inputs")
    inputs.TokensPrompt = lambda prompt_token_ids: prompt_token_ids
    monkeypatch.setitem(sys.modules, "vllm.inputs", inputs)
    spec = recall_model.tiny_spec()
    (tmp_path / "recall_spec.json").write_text(json.dumps(recall_model.spec_to_json(spec)))
    n = 4 * spec.chain + spec.shape.index_topk + 8
    suite = recall_run.Suite(
        label="t",
        model_dir=str(tmp_path),
        lengths=[n, n],
        max_tokens=2,
        oracle=True,
        oracle_corruptions=["attention", "slots"],
    )
    result = recall_run.run_suite(suite)
    assert result["ok"], result.get("traceback")
    checks = dict(result["checks"])
    label = next(c for c in checks if c.startswith("every layer agrees with the DSA oracle"))
    assert checks[label] is True and "decode_logits 1" in label and "index_share 1" in label
    assert checks["oracle corruption attention: the attention check fails"] is True
    assert checks["oracle corruption slots: the slots check fails"] is True
    assert checks["clean tokens as predicted"] is False  # the stand-in's tokens are zeros
    assert not result["passed"]
    # graphs with the oracle: one capture size per batch of decode rows
    suite = recall_run.Suite(
        label="g", model_dir=str(tmp_path), lengths=[n], eager=False, mtp=2, oracle=True, compilation={"mode": 0}
    )
    recall_run.run_suite(suite)
    assert built[-1]["compilation_config"]["cudagraph_capture_sizes"] == [3 * b for b in range(1, 9)]


def test_oracle_verdict_needs_every_required_check():
    from vllm_compose.proof import recall_run

    summary = {
        "checks": {"decode_logits": {"count": 3, "failed": 0}, "slots": {"count": 3, "failed": 0}},
        "total": 6,
        "failed": 0,
    }
    ok, label = recall_run.oracle_verdict(summary)
    assert not ok and "never ran: decode_topk, attention" in label
    for c in ("decode_topk", "attention"):
        summary["checks"][c] = {"count": 1, "failed": 0}
    assert recall_run.oracle_verdict(summary)[0]
    summary["checks"]["attention"]["failed"] = 1
    summary["failed"] = 1
    assert not recall_run.oracle_verdict(summary)[0]


def test_dsa_sources_fingerprints_the_files_that_would_be_imported(tmp_path, monkeypatch):
    import hashlib

    from vllm_compose.proof import fingerprint

    pkg = tmp_path / "fakepkg_dsa"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "kernel.py").write_text("X = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    got = fingerprint.dsa_sources(("fakepkg_dsa.kernel", "fakepkg_dsa.missing", "no_such_pkg.x"))
    assert got["fakepkg_dsa.kernel"] == hashlib.sha256(b"X = 1\n").hexdigest()[:16]
    assert got["fakepkg_dsa.missing"] == "not found" and got["no_such_pkg.x"] == "not found"
    assert "fakepkg_dsa.kernel" not in sys.modules  # fingerprinted, not imported


# --- the native path (FLASHMLA_SPARSE): the oracle's second opinion --------------------------------------------------


def test_native_profile_runs_every_check_and_passes_on_a_faithful_path(fake_vllm):
    info = eo.install("FLASHMLA_SPARSE")
    assert info["backend"] == "FLASHMLA_SPARSE"
    w = _World()
    impl = fake_vllm[eo.FLASHMLA_MODULE].FlashMLASparseImpl(w.buf)
    eo.arm(True)
    w.forward(fake_vllm, impl, native=True)
    g = torch.Generator().manual_seed(3)
    w.native_indexer(fake_vllm)
    ind = fake_vllm[eo.INDEXER_MODULE]
    # a prefill chunk through DeepGEMM's prefill form, rows 2..7
    q_all = (torch.randn(8, H_IDX, D, generator=g) * 2).to(torch.float8_e4m3fn)
    k = (torch.randn(30, D, generator=g) * 2).to(torch.float8_e4m3fn)
    scale = torch.rand(30, generator=g) + 0.5
    wts = torch.randn(8, H_IDX, generator=g).abs()
    ks, ke = torch.zeros(6, dtype=torch.int32), torch.arange(25, 31, dtype=torch.int32)
    logits = ind.fp8_fp4_mqa_logits((q_all[2:8], None), (k, scale), wts[2:8], ks, ke, clean_logits=False)
    valid = (torch.arange(30)[None, :] >= ks[:, None]) & (torch.arange(30)[None, :] < ke[:, None])
    w.buf[2:8] = o.topk_indices(torch.where(valid, logits, torch.tensor(float("-inf"))), TOPK, row_starts=ks).int()
    meta = dict(w.meta, req_id=torch.tensor([0, 1, 0, 0, 0, 0, 0, 0], dtype=torch.int32))
    impl.forward_mqa(torch.cat([w.q] * 4).contiguous(), w.kv, meta, _Layer("model.layers.0.self_attn.attn"))
    s = eo.summary()
    assert s["passed"] and s["backend"] == "FLASHMLA_SPARSE" and s["unsupported"] == {}, s
    assert all(s["checks"][c]["count"] > 0 and s["checks"][c]["failed"] == 0 for c in eo.CHECKS)
    # the padded heads (NaN) were not read: the attention check saw the layer's 3 heads
    assert s["checks"]["attention"]["layers"]["model.layers.0.self_attn.attn"]["worst"]["min_cosine"] > 0.999


@pytest.mark.parametrize("kind", sorted(eo.CORRUPTIONS))
def test_native_profile_each_corruption_fails_its_check(fake_vllm, kind):
    eo.install("FLASHMLA_SPARSE")
    w = _World()
    impl = fake_vllm[eo.FLASHMLA_MODULE].FlashMLASparseImpl(w.buf)
    eo.arm(True)
    eo.corrupt(kind)
    w.forward(fake_vllm, impl, native=True)
    s = eo.summary()
    assert not s["passed"] and s["checks"][eo.CORRUPTIONS[kind]]["failed"] > 0, s


@pytest.mark.parametrize("backend", ["FLASHMLA_SPARSE", "TRITON_MLA_SPARSE"])
def test_deepgemms_measured_logits_rounding_passes_native_and_fails_the_composes_kernels(fake_vllm, backend):
    eo.install(backend)
    fake_vllm[eo.INDEXER_MODULE].BUG = "fp8_rounding"
    w = _World()
    native = backend == "FLASHMLA_SPARSE"
    impl = (
        fake_vllm[eo.FLASHMLA_MODULE].FlashMLASparseImpl(w.buf)
        if native
        else fake_vllm[eo.SPARSE_MODULE].XPUMLASparseImpl(w.buf)
    )
    eo.arm(True)
    w.forward(fake_vllm, impl, native=native)
    s = eo.summary()
    assert s["checks"]["decode_logits"]["count"] > 0
    assert (s["checks"]["decode_logits"]["failed"] == 0) is native, s["checks"]["decode_logits"]
    assert s["checks"]["decode_topk"]["failed"] == 0  # a uniform scale keeps the ranking
    eo.uninstall()
    assert eo._S.logits_tolerance == {}


def test_native_fp4_q_is_counted_unsupported_and_fails_the_verdict(fake_vllm):
    from vllm_compose.proof.recall_run import oracle_verdict

    eo.install("FLASHMLA_SPARSE")
    w = _World()
    impl = fake_vllm[eo.FLASHMLA_MODULE].FlashMLASparseImpl(w.buf)
    eo.arm(True)
    w.native_indexer(fake_vllm, scales=torch.ones(2, 1, H_IDX))
    impl.forward_mqa(w.q, w.kv, w.meta, _Layer("model.layers.0.self_attn.attn"))
    s = eo.summary()
    assert s["unsupported"] == {"FP4 indexer q (values with block scales)": 1}
    assert "decode_logits" not in s["checks"] and not s["passed"]
    ok, label = oracle_verdict(s)
    assert not ok and "does not model: FP4 indexer q" in label


def test_install_names_its_backend_and_refuses_another_or_an_unknown_one(fake_vllm):
    with pytest.raises(eo.EngineOracleError, match="no profile for attention backend 'FLASH_ATTN'"):
        eo.install("FLASH_ATTN")
    eo.install("TRITON_MLA_SPARSE")
    with pytest.raises(eo.EngineOracleError, match="installed for TRITON_MLA_SPARSE, not FLASHMLA_SPARSE"):
        eo.install("FLASHMLA_SPARSE")
    eo.uninstall()
    assert eo.install("FLASHMLA_SPARSE")["backend"] == "FLASHMLA_SPARSE"
