"""benchmarks/mla_served_tuning.py without a GPU: the warm-up read from a backend file and run from its own source,
and the served-against-tuned procedure on a stand-in kernel module whose autotuner, like Triton's, keeps one config a
key and picks by the call it tunes on.

The stand-in's tuner prefers "one-slot" on a call whose indices name one slot and "spread" otherwise, and the
stand-in timer makes "one-slot" twice as slow: so the composed warm-up (one row, every index 0) must come out served
at 2x the tuned time with other configs, and the candidate warm-up (spread indices) at 1x with the same configs.
The two warm-ups are the images of lab/candidates/perf-triton-mla-sparse-warmup-decode-shapes.patch.
"""

from __future__ import annotations

import json
import sys
import types
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

REPO = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(REPO / "benchmarks"), str(REPO / "lab" / "candidates")]

import candidate_patch as cp  # noqa: E402
import dsa_kernels as dk  # noqa: E402
import mla_served_tuning as mst  # noqa: E402

PATCH = REPO / "lab" / "candidates" / "perf-triton-mla-sparse-warmup-decode-shapes.patch"


class Tuner:
    """An autotuned kernel's state as Triton's Autotuner keeps it (`cache`, `configs`, `best_config`,
    `configs_timings`)."""

    def __init__(self):
        self.configs = ["one-slot", "spread"]
        self.cache: dict = {}
        self.best_config = None
        self.configs_timings = None

    def run(self, key, distinct: int) -> None:
        if key not in self.cache:
            fast = "one-slot" if distinct == 1 else "spread"
            self.configs_timings = {c: 1.0 if c == fast else 2.0 for c in self.configs}
            self.cache[key] = fast
        self.best_config = self.cache[key]


def stand_in_kernel():
    mod = types.ModuleType("stand_in_kernel")
    mod._DIM_QK, mod.KV_SPLITS_CANDIDATES = 576, (1, 2, 4, 8, 16)
    mod._sparse_mla_kernel_split, mod._sparse_mla_kernel_final = Tuner(), Tuner()
    mod._block_h = lambda heads: 16
    mod._choose_num_kv_splits = lambda rows, groups, topk, sm_count: 16 if rows * groups < 198 else 1

    def attention(q, kv, indices, sm_scale, num_kv_splits=None, sm_count=None):
        rows, heads = q.shape[:2]
        splits = num_kv_splits or mod._choose_num_kv_splits(rows, -(-heads // 16), indices.shape[-1], sm_count)
        tuner = mod._sparse_mla_kernel_final if splits == 1 else mod._sparse_mla_kernel_split
        tuner.run((indices.shape[-1], splits), int(indices.unique().numel()))
        return torch.zeros(rows, heads, 512)

    mod.triton_mla_sparse_attention = attention
    return mod


def bench_of(mod):
    """A timer of the stand-in: one call, 2 ms where it ran a "one-slot" config, 1 ms where it ran "spread"."""

    def bench(run):
        run()
        used = {t.best_config for t in (mod._sparse_mla_kernel_split, mod._sparse_mla_kernel_final)}
        return 2e-3 if "one-slot" in used else 1e-3

    return bench


@pytest.fixture
def small(monkeypatch):
    monkeypatch.setattr(dk, "MLA", [("GLM-5 TP1", 64)])
    monkeypatch.setattr(dk, "MLA_ROWS", [1, 64])
    monkeypatch.setattr(dk, "MLA_SLOTS", 4096)
    monkeypatch.setattr(dk, "TOPK", 64)


def warmups(tmp_path: Path) -> dict[str, Path]:
    _, before, after = cp.images(PATCH)
    out = {}
    for name, text in (("composed", before), ("candidate", after)):
        out[name] = tmp_path / f"{name}.py"
        out[name].write_text(text)
    return out


def test_the_composed_warm_up_is_served_at_its_one_slot_configs_and_the_candidates_at_the_shapes(tmp_path, small):
    rows: dict[str, list] = {"composed": [], "candidate": []}
    chosen = {}
    for name, backend in warmups(tmp_path).items():
        mod = stand_in_kernel()
        chosen[name] = mst.time_served(
            name, mod, mst.load_warmup(backend, mod), rows[name].append, bench_of(mod), torch, 132, device="cpu"
        )
    composed, candidate = rows["composed"], rows["candidate"]
    assert [r["rows"] for r in composed] == [1, 64] and [r["launch"]["splits"] for r in composed] == [16, 1]
    for r in composed:
        assert r["served"]["configs"] != r["tuned_at_shape"]["configs"] and not r["same_configs"]
        assert set(r["served"]["configs"].values()) == {"one-slot"}
        assert r["served_over_tuned"] == pytest.approx(2.0)
        assert r["served"]["tuned"] == [] and r["tuned_at_shape"]["tuned"]  # served from the warm-up's cache
        assert r["tuned_at_shape"]["timings"]  # every config's time where it tuned
    for r in candidate:
        assert r["same_configs"] and r["served_over_tuned"] == pytest.approx(1.0)
        assert set(r["served"]["configs"].values()) == {"spread"}
    # the configs each warm-up left, by kernel and key: every split count tuned, on one slot as composed
    left = chosen["composed"]["GLM-5 TP1"]
    assert set(left["_sparse_mla_kernel_split"].values()) == {"one-slot"} and len(left["_sparse_mla_kernel_split"]) == 4
    assert set(chosen["candidate"]["GLM-5 TP1"]["_sparse_mla_kernel_final"].values()) == {"spread"}
    json.dumps(composed)  # a row is what the document holds


def test_a_key_the_warm_up_left_untuned_is_tuned_by_the_served_call_and_says_so(tmp_path, small):
    backend = tmp_path / "b.py"
    backend.write_text(
        "class TritonMLASparseImpl:\n    def _warmup_autotune(self, indexer):\n        pass\n"
    )  # a warm-up that tunes nothing
    mod = stand_in_kernel()
    got: list = []
    mst.time_served("none", mod, mst.load_warmup(backend, mod), got.append, bench_of(mod), torch, 132, device="cpu")
    assert [r["served"]["tuned"] for r in got] == [["_sparse_mla_kernel_split"], ["_sparse_mla_kernel_final"]]
    assert all(r["same_configs"] for r in got)


def test_a_backend_without_the_warm_up_or_reading_an_unknown_name_is_an_error_naming_it(tmp_path):
    mod = stand_in_kernel()
    plain = tmp_path / "plain.py"
    plain.write_text("class Other:\n    pass\n")
    with pytest.raises(mst.WarmupError, match="no TritonMLASparseImpl._warmup_autotune"):
        mst.load_warmup(plain, mod)
    reads = tmp_path / "reads.py"
    reads.write_text("class TritonMLASparseImpl:\n    def _warmup_autotune(self, indexer):\n        nowhere(1)\n")
    warm = mst.load_warmup(reads, mod)
    with pytest.raises(mst.WarmupError, match="reads 'nowhere'"):
        warm(mst.impl_self(torch, 64, 64, 132, "cpu"), mst.INDEXER)
    imports = tmp_path / "imports.py"
    imports.write_text(
        f"from {mst.KERNEL_MODULE} import _gone\n"
        "class TritonMLASparseImpl:\n    def _warmup_autotune(self, indexer):\n        pass\n"
    )
    with pytest.raises(mst.WarmupError, match="imports _gone from the kernel module"):
        mst.load_warmup(imports, mod)


def test_the_stand_in_self_has_what_both_warm_ups_read(tmp_path):
    import ast

    me = mst.impl_self(torch, 64, 2048, 132, "cpu")
    for backend in warmups(tmp_path).values():
        cls = next(n for n in ast.parse(backend.read_text()).body if getattr(n, "name", "") == "TritonMLASparseImpl")
        method = next(n for n in cls.body if getattr(n, "name", "") == "_warmup_autotune")
        read = {
            n.attr for n in ast.walk(method) if isinstance(n, ast.Attribute) and getattr(n.value, "id", "") == "self"
        }
        assert read <= set(vars(me)), read - set(vars(me))


def test_a_tree_without_the_backend_is_a_usage_error(tmp_path, capsys):
    with pytest.raises(SystemExit) as exc:
        mst.main(["--tree", str(tmp_path), "--out", str(tmp_path / "o.json")])
    assert exc.value.code == 2 and mst.BACKEND in capsys.readouterr().err
