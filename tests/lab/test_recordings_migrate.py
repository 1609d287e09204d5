"""Stale kernel records and their carry-over: `kernel_gate.stale_record` / `migrate_specialization` and
lab/recordings/migrate.py, on a look-alike vLLM tree whose kernel lost one parameter and gained a constexpr (as series
entry 0040 did to the paged decode-logits kernel)."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

pytest.importorskip("triton", reason="the compile gate needs triton (see .ci/run)")

from vllm_compose.ampere.kernel_gate import (
    KernelGateError,
    ReleaseLoader,
    migrate_specialization,
    run_gate,
    stale_record,
)

MIGRATE = Path(__file__).resolve().parents[2] / "lab" / "recordings" / "migrate.py"

#: the kernel after the change: `w_ptr` is gone, `UNROLL` is new
CHANGED = """\
from vllm.triton_utils import tl, triton


@triton.jit
def scaled_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr, UNROLL: tl.constexpr):
    offs = tl.program_id(0) * BLOCK * UNROLL + tl.arange(0, BLOCK * UNROLL)
    m = offs < n
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=m) * 2.0, mask=m)
"""


def _old_record():
    """What a GPU recorded before the change: `w_ptr` between x and y, BLOCK 128, all pointers 16-aligned."""
    return {
        "module": "vllm.ops.kern",
        "qualname": "scaled_kernel",
        "specialization": {
            "signature": {"x_ptr": "*fp32", "w_ptr": "*bf16", "y_ptr": "*fp32", "n": "i32", "BLOCK": "constexpr"},
            "constant_keys": [[4]],
            "constant_vals": [128],
            "attrs_keys": [[0], [1], [2]],
            "attrs_vals": [[["tt.divisibility", 16]]] * 3,
            "options": {"num_warps": 4, "num_stages": 3, "arch": "sm90"},
            "key": "[('*fp32', 'D'), ('*bf16', 'D'), ...]",
        },
    }


@pytest.fixture
def tree(tmp_path):
    root = tmp_path / "tree"
    (root / "vllm" / "ops").mkdir(parents=True)
    (root / "vllm" / "ops" / "kern.py").write_text(CHANGED)
    return root


@pytest.fixture
def kernel(tree):
    return ReleaseLoader(tree).kernel("vllm.ops.kern", "scaled_kernel")


def _migrate_module():
    spec = importlib.util.spec_from_file_location("vc_recordings_migrate", MIGRATE)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_a_record_of_a_changed_kernel_is_reported_stale_not_compiled(tree, kernel):
    why = stale_record(kernel, _old_record()["specialization"])
    assert "['w_ptr']" in why and "['UNROLL']" in why and "migrate.py" in why
    results = run_gate([_old_record()], tree)
    assert [(r.target, r.ok) for r in results] == [(80, False), (86, False)]
    assert all(r.error == why for r in results)


def test_migration_keeps_types_values_and_alignment_by_name(tree, kernel):
    spec = migrate_specialization(kernel, _old_record()["specialization"], {"UNROLL": 2})
    assert spec["signature"] == {
        "x_ptr": "*fp32",
        "y_ptr": "*fp32",
        "n": "i32",
        "BLOCK": "constexpr",
        "UNROLL": "constexpr",
    }
    assert (spec["constant_keys"], spec["constant_vals"]) == ([[3], [4]], [128, 2])
    assert (spec["attrs_keys"], spec["attrs_vals"]) == ([[0], [1]], [[["tt.divisibility", 16]]] * 2)
    assert "key" not in spec and spec["options"]["num_warps"] == 4
    assert stale_record(kernel, spec) is None
    rec = {**_old_record(), "specialization": spec}
    assert [r.ok for r in run_gate([rec], tree)] == [True, True]


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({}, "takes UNROLL, which the record lacks"),
        ({"UNROLL": 2, "n": 4}, "n of scaled_kernel is not a constexpr"),
        ({"UNROLL": 2, "W": 1}, "values given for ['W']"),
    ],
)
def test_migration_refuses_what_a_value_cannot_specialize(kernel, values, message):
    with pytest.raises(KernelGateError) as err:
        migrate_specialization(kernel, _old_record()["specialization"], values)
    assert message in str(err.value)


def _recording(tmp_path):
    path = tmp_path / "rec.json"
    other = {**_old_record(), "qualname": "other_kernel"}
    path.write_text(json.dumps({"schema": 1, "runs": ["r1"], "kernels": [_old_record(), other]}, indent=1))
    return path


def test_migrate_script_rewrites_only_the_stale_records_and_says_so(tmp_path, tree):
    migrate = _migrate_module()
    path = _recording(tmp_path)
    args = ["--tree", str(tree), "--kernel", "vllm.ops.kern:scaled_kernel", "--recording", str(path)]
    assert migrate.main([*args, "--set", "UNROLL=2", "--because", "entry 0099"]) == 0
    data = json.loads(path.read_text())
    new, other = data["kernels"]
    assert new["migrated"]["recorded_parameters"] == ["x_ptr", "w_ptr", "y_ptr", "n", "BLOCK"]
    assert new["migrated"]["set"] == {"UNROLL": 2} and new["migrated"]["because"] == "entry 0099"
    assert list(new["specialization"]["signature"]) == ["x_ptr", "y_ptr", "n", "BLOCK", "UNROLL"]
    assert other == {**_old_record(), "qualname": "other_kernel"}
    assert data["migrations"] == [
        {"kernel": "vllm.ops.kern:scaled_kernel", "records": 1, "set": {"UNROLL": 2}, "because": "entry 0099"}
    ]
    before = path.read_bytes()
    assert migrate.main([*args, "--set", "UNROLL=2", "--because", "again"]) == 0
    assert path.read_bytes() == before  # nothing left to carry over


def test_migrate_script_writes_nothing_when_the_carried_record_does_not_compile(tmp_path, tree, capsys):
    migrate = _migrate_module()
    path = _recording(tmp_path)
    before = path.read_bytes()
    args = ["--tree", str(tree), "--kernel", "vllm.ops.kern:scaled_kernel", "--recording", str(path)]
    # UNROLL=3: tl.arange needs a power-of-two length, so the sm_80 compile fails
    assert migrate.main([*args, "--set", "UNROLL=3", "--because", "x"]) == 2
    assert "do not compile for sm_80" in capsys.readouterr().err
    assert path.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".rec.json")] == []


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--kernel", "vllm.ops.kern.scaled_kernel", "--set", "UNROLL=2"], "is not MODULE:QUALNAME"),
        (["--kernel", "vllm.ops.kern:scaled_kernel", "--set", "UNROLL"], "is not NAME=VALUE"),
        (["--kernel", "vllm.ops.kern:scaled_kernel", "--set", "UNROLL=two"], "is not a Python literal"),
        (["--kernel", "vllm.ops.kern:absent_kernel"], "no record of vllm.ops.kern:absent_kernel"),
        (["--kernel", "vllm.ops.kern:scaled_kernel"], "takes UNROLL"),
    ],
)
def test_migrate_script_bad_input_exits_2_and_writes_nothing(tmp_path, tree, capsys, extra, message):
    migrate = _migrate_module()
    path = _recording(tmp_path)
    before = path.read_bytes()
    args = ["--tree", str(tree), "--recording", str(path), "--because", "x", *extra]
    assert migrate.main(args) == 2
    assert message in capsys.readouterr().err
    assert path.read_bytes() == before


def test_migrate_script_refuses_a_tree_without_vllm(tmp_path, capsys):
    migrate = _migrate_module()
    path = _recording(tmp_path)
    args = ["--tree", str(tmp_path), "--recording", str(path), "--because", "x", "--kernel", "a:b"]
    assert migrate.main(args) == 2
    assert "holds no vllm/ folder" in capsys.readouterr().err


def test_migrate_script_where_carries_only_the_matching_records_and_num_warps_replaces_the_warps(tmp_path, tree):
    # two stale records of the same kernel, BLOCK 128 and 64: the new constexpr depends on BLOCK (as 0045's
    # BLOCK_SPLITS depends on NUM_KV_SPLITS), so each value gets a run of its own
    migrate = _migrate_module()
    path = tmp_path / "rec.json"
    small = _old_record()
    small["specialization"] = {**small["specialization"], "constant_vals": [64]}
    path.write_text(json.dumps({"schema": 1, "runs": ["r1"], "kernels": [_old_record(), small]}, indent=1))
    args = ["--tree", str(tree), "--kernel", "vllm.ops.kern:scaled_kernel", "--recording", str(path), "--because", "x"]
    assert migrate.main([*args, "--where", "BLOCK=64", "--set", "UNROLL=4", "--num-warps", "1"]) == 0
    big, done = json.loads(path.read_text())["kernels"]
    assert "migrated" not in big and big == _old_record()
    assert done["migrated"]["where"] == {"BLOCK": 64} and done["migrated"]["recorded_num_warps"] == 4
    assert done["specialization"]["options"]["num_warps"] == 1 and done["specialization"]["constant_vals"] == [64, 4]
    assert migrate.main([*args, "--where", "BLOCK=128", "--set", "UNROLL=2"]) == 0
    data = json.loads(path.read_text())
    big, again = data["kernels"]
    assert big["specialization"]["constant_vals"] == [128, 2] and big["specialization"]["options"]["num_warps"] == 4
    assert again == done
    assert [m.get("where") for m in data["migrations"]] == [{"BLOCK": 64}, {"BLOCK": 128}]
    assert data["migrations"][0]["num_warps"] == 1 and "num_warps" not in data["migrations"][1]
    before = path.read_bytes()
    assert migrate.main([*args, "--where", "BLOCK=32", "--set", "UNROLL=2"]) == 0  # none left to match
    assert path.read_bytes() == before


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--where", "BLOCK"], "--where 'BLOCK' is not NAME=VALUE"),
        (["--where", "NOPE=1"], "--where NOPE: the records' constexprs are ['BLOCK']"),
        (["--num-warps", "3"], "--num-warps 3: a power of two"),
    ],
)
def test_migrate_script_bad_where_or_warps_exits_2_and_writes_nothing(tmp_path, tree, capsys, extra, message):
    migrate = _migrate_module()
    path = _recording(tmp_path)
    before = path.read_bytes()
    args = ["--tree", str(tree), "--kernel", "vllm.ops.kern:scaled_kernel", "--recording", str(path), "--because", "x"]
    assert migrate.main([*args, "--set", "UNROLL=2", *extra]) == 2
    assert message in capsys.readouterr().err
    assert path.read_bytes() == before
