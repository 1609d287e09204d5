"""Kernel launches derived on a CPU (kernel_launches) and the Ampere gate over them (ampere.gate).

Synthetic cases use a look-alike vLLM tree written here: a wrapper whose constexpr the release's platform probe
chooses, a kernel an sm_89 gate keeps off Ampere, an autotuned kernel. The real-release cases drive the releases'
own code: stock trees from their PyPI sdists (cached, marked `sdist`), composed trees from
$VLLM_COMPOSE_TEST_TREES/c-vX.Y.Z (composing needs the PR diffs, which CI cannot fetch: skipped there, saying what
to set; see release_trees.py).

Composed v0.29.0+ pass because the series carries `deepseek_v32/common/e4m3.py` (0025) and its use in the fused
kernels (0026/0027), every compose because 0030 packs the indexer's ragged-decode fp8 Q as uint8, and v0.30.0+
because 0043 makes the indexer's start-up JIT warm-up register that uint8 pack, not the fp8 one; without them stock
fails on exactly those kernels. Those entries need no PR diff, so CI applies them alone onto the stock sdists and
gates the result.

Gate wall time (`vllm-compose ampere-gate`, both targets, 16-core CPU, Triton 3.6.0), as measured: composed
v0.26.0 74 s with an empty Triton cache, 7.7 s warm; compose branch v0.30.0 from a compose repository 19 s (cache
warm from v0.26.0's shared kernels) and 14 s warm, the branch export included; stock sdist trees 4-12 s (the
fp8e4nv failure comes early). The derivation alone takes 2-8 s per capability.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

triton = pytest.importorskip("triton", reason="the gate needs triton (see .ci/run)")
torch = pytest.importorskip("torch", reason="deriving launches runs the release's wrappers on CPU tensors")

from release_trees import composed_tree, release_tree  # noqa: E402

from vllm_compose import cli  # noqa: E402
from vllm_compose.ampere import coverage_record  # noqa: E402
from vllm_compose.ampere.gate import RECORDINGS, gate_tree, recorded_coverage, render  # noqa: E402
from vllm_compose.ampere.gate_env import GATE_REQUIREMENTS, _pins  # noqa: E402
from vllm_compose.ampere.kernel_gate import run_gate  # noqa: E402
from vllm_compose.ampere.kernel_launches import (  # noqa: E402
    Driver,
    DriverError,
    FakeCudaPlatform,
    PlatformProbeError,
    Release,
    derive_launches,
    registry_module,
    release_loader,
)

SERIES_PATCHES = Path(__file__).resolve().parents[2] / "series" / "patches"

REGISTRY = """\
_MODELS = {
    "GlmMoeDsaForCausalLM": ("deepseek_v2", "GlmMoeDsaForCausalLM"),
    "DeepseekV32ForCausalLM": ("deepseek_v2", "DeepseekV3ForCausalLM"),
}
"""

HELPERS = """\
def block_for(n):
    return 128 if n <= 128 else 256
"""

# A look-alike of the releases' DSA wrappers: a module-level platform probe picks a constexpr, the wrapper imports
# a helper inside its body (as fused_q imports the CuTeDSL module), and `kernel[grid](...)` is the launch.
KERNEL_MODULE = """\
import torch

from vllm.platforms import current_platform
from vllm.triton_utils import tl, triton

NATIVE_FP8 = current_platform.is_cuda() and current_platform.has_device_capability(89)


@triton.jit
def quant_kernel(x_ptr, y_ptr, n, NATIVE: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n)
    if NATIVE:
        tl.store(y_ptr + offs, x.to(tl.float8e4nv), mask=offs < n)
    else:
        tl.store(y_ptr + offs, x.to(tl.float16).to(tl.uint16, bitcast=True).to(tl.uint8), mask=offs < n)


@triton.jit
def always_fp8_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=offs < n).to(tl.float8e4nv), mask=offs < n)


@triton.autotune(configs=[triton.Config({"BLOCK": 64}, num_warps=2), triton.Config({"BLOCK": 128}, num_warps=4)],
                 key=["n"])
@triton.jit
def tuned_kernel(x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(x_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) * 2, mask=offs < n)


def quantize(x):
    from vllm.ops.helpers import block_for

    y = torch.empty(x.shape, dtype=torch.float8_e4m3fn if NATIVE_FP8 else torch.uint8)
    quant_kernel[(1,)](x, y, x.numel(), NATIVE=NATIVE_FP8, BLOCK=block_for(x.numel()))
    return y


def quantize_ungated(x):
    y = torch.empty(x.shape, dtype=torch.float8_e4m3fn)
    always_fp8_kernel[(1,)](x, y, x.numel(), BLOCK=128)
    return y


def double(x):
    tuned_kernel[(1,)](x, x.numel())


def needs_more(x, scale):
    return x
"""


@pytest.fixture
def tree(tmp_path):
    root = tmp_path / "tree"
    (root / "vllm" / "ops").mkdir(parents=True)
    (root / "vllm" / "model_executor" / "models").mkdir(parents=True)
    (root / "vllm" / "model_executor" / "models" / "registry.py").write_text(REGISTRY)
    (root / "vllm" / "ops" / "helpers.py").write_text(HELPERS)
    (root / "vllm" / "ops" / "kern.py").write_text(KERNEL_MODULE)
    return root


def _driver(call, name="look-alike"):
    def run(rel: Release) -> None:
        call(rel, torch.zeros(100, dtype=torch.float32))

    return Driver(name, run, "vllm.ops.kern")


def _constants(rec):
    spec = rec["specialization"]
    return dict(zip(map(tuple, spec["constant_keys"]), spec["constant_vals"], strict=True))


def _quantize(rel, x):
    rel.call(rel.value("vllm.ops.kern", "quantize"), {"x": x}, what="quantize")


def test_the_release_probe_chooses_the_constexpr_per_capability(tree):
    sm80 = derive_launches(tree, (8, 0), drivers=(_driver(_quantize),))
    sm90 = derive_launches(tree, (9, 0), drivers=(_driver(_quantize),))
    ((rec80,), (rec90,)) = sm80.records, sm90.records
    assert (rec80["module"], rec80["qualname"]) == ("vllm.ops.kern", "quant_kernel")
    consts80, consts90 = _constants(rec80), _constants(rec90)
    assert consts80[(3,)] is False and consts90[(3,)] is True
    assert consts80[(4,)] == 128  # from the helper the wrapper imports inside its body
    assert rec80["specialization"]["signature"]["y_ptr"] == "*u8"
    assert rec90["specialization"]["signature"]["y_ptr"] == "*fp8e4nv"
    assert [o.status for o in sm80.outcomes] == ["ran"]


def test_derived_records_compile_where_the_release_gates_and_fail_where_it_does_not(tree):
    gated = derive_launches(tree, (8, 0), drivers=(_driver(_quantize),)).records
    assert [r.ok for r in run_gate(gated, tree, targets=((80, 32), (86, 32)))] == [True, True]

    def ungated(rel, x):
        rel.call(rel.value("vllm.ops.kern", "quantize_ungated"), {"x": x}, what="quantize_ungated")

    records = derive_launches(tree, (8, 0), drivers=(_driver(ungated),)).records
    results = run_gate(records, tree, targets=((80, 32),))
    assert not results[0].ok and "fp8e4nv not supported" in results[0].error


def test_autotuned_kernels_are_recorded_once_per_config(tree):
    def double(rel, x):
        rel.call(rel.value("vllm.ops.kern", "double"), {"x": x}, what="double")

    records = derive_launches(tree, (8, 0), drivers=(_driver(double),)).records
    blocks = sorted(_constants(r)[(2,)] for r in records)
    assert blocks == [64, 128]
    assert sorted(r["specialization"]["options"]["num_warps"] for r in records) == [2, 4]


def test_capture_neither_compiles_nor_launches_and_restores_triton(tree):
    from triton import knobs
    from triton.runtime import driver

    before = (knobs.runtime.jit_cache_hook, driver._active)
    derive_launches(tree, (8, 0), drivers=(_driver(_quantize),))  # CPU tensors: a real launch would fail
    assert (knobs.runtime.jit_cache_hook, driver._active) == before


def test_an_unknown_platform_probe_is_an_error_naming_it(tree):
    kern = tree / "vllm" / "ops" / "kern.py"
    kern.write_text(kern.read_text() + "\nNEW = current_platform.supports_hypothetical_feature()\n")
    with pytest.raises(PlatformProbeError, match="supports_hypothetical_feature"):
        derive_launches(tree, (8, 0), drivers=(_driver(_quantize),))
    with pytest.raises(PlatformProbeError, match="fancy_probe"):
        FakeCudaPlatform((8, 6)).fancy_probe()


def test_fake_platform_answers_as_an_ampere_gpu():
    a100, rtx3090 = FakeCudaPlatform((8, 0)), FakeCudaPlatform((8, 6))
    assert a100.is_cuda() and not a100.is_rocm() and not a100.is_xpu()
    assert a100.has_device_capability(80) and not a100.has_device_capability(89)
    assert rtx3090.has_device_capability((8, 6)) and not rtx3090.has_device_capability(90)
    assert a100.is_device_capability(80) and not rtx3090.is_device_capability(80)
    assert rtx3090.is_device_capability_family(80) and not a100.is_device_capability_family(100)
    assert not a100.is_arch_support_pdl()
    assert a100.get_device_capability().to_int() == 80
    assert str(a100.fp8_dtype()) == "torch.float8_e4m3fn"


def test_a_required_parameter_the_driver_does_not_know_is_an_error_naming_it(tree):
    def needs_more(rel, x):
        rel.call(rel.value("vllm.ops.kern", "needs_more"), {"x": x}, what="needs_more")

    with pytest.raises(DriverError, match="'scale'"):
        derive_launches(tree, (8, 0), label="v9.9.9", drivers=(_driver(needs_more),))


def test_a_function_missing_from_the_release_is_an_error_naming_it(tree):
    def gone(rel, x):
        rel.value("vllm.ops.kern", "renamed_wrapper")

    with pytest.raises(DriverError, match="renamed_wrapper is missing from v9.9.9"):
        derive_launches(tree, (8, 0), label="v9.9.9", drivers=(_driver(gone),))


def test_a_module_the_tree_lacks_is_reported_not_on_path_and_a_registry_module_is_required(tree):
    absent = Driver("PR-only", lambda rel: None, "vllm.ops.pr_only", absent_means="not on this tree's path (PR)")
    out = derive_launches(tree, (8, 0), drivers=(absent,))
    assert [(o.status, o.reason) for o in out.outcomes] == [("not on path", "not on this tree's path (PR)")]
    on_path = Driver("model code", lambda rel: None, "vllm.ops.gone", model_code="dsv2")
    with pytest.raises(DriverError, match="registry puts vllm.ops.gone on the DSA path"):
        derive_launches(tree, (8, 0), drivers=(on_path,))


def test_registry_lookup_reads_the_module_of_an_architecture(tree):
    assert registry_module(tree, "GlmMoeDsaForCausalLM") == "deepseek_v2"
    assert registry_module(tree, "NoSuchForCausalLM") is None


# --- JIT warm-up ---------------------------------------------------------------------------------------------------
# A look-alike of v0.30.0+'s start-up warm-up: a registry the runner activates while the model is built, a kernel
# owner whose `register_warmup` records into it and whose `compile_many` launches its kernel as a warm-up, and an
# indexer whose `__init__` registers the pack for the query dtype it chooses (the release's fp8, unless FP4).

JIT_WARMUP_MODULE = """\
import contextlib
import contextvars


class JitWarmupRegistry:
    _active = contextvars.ContextVar("active", default=None)

    def __init__(self, vllm_config):
        self.vllm_config = vllm_config
        self._registrations = {}

    @contextlib.contextmanager
    def activate(self):
        token = self._active.set(self)
        try:
            yield
        finally:
            self._active.reset(token)

    @classmethod
    def register(cls, kernel, *args, **kwargs):
        registry = cls._active.get()
        if registry is not None:
            registry._registrations.setdefault(kernel, []).append((args, kwargs))
"""

PACK_MODULE = """\
import torch

from vllm.model_executor.warmup.jit_warmup import JitWarmupRegistry
from vllm.triton_utils import tl, triton


@triton.jit
def pack_kernel(x_ptr, out_ptr, n, PAD_VALUE: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=offs < n, other=PAD_VALUE), mask=offs < n)


class PackKernel:
    def register_warmup(self, *args, **kwargs):
        JitWarmupRegistry.register(self, *args, **kwargs)

    def get_warmup_keys(self, *, dtype, pad_value):
        return [(dtype, pad_value)]

    def compile_many(self, keys):
        for dtype, pad_value in keys:
            x = torch.empty(64, dtype=dtype)
            pack_kernel.warmup(x, x, 64, PAD_VALUE=pad_value, BLOCK=64, grid=(1,))


PACK = PackKernel()
"""

INDEXER_MODULE = """\
import torch

from vllm.config import get_current_vllm_config
from vllm.platforms import current_platform


class SparseAttnIndexer:
    def __init__(self, k_cache, topk_tokens, use_fp4_cache: bool = False):
        vllm_config = get_current_vllm_config()
        self.dcp_world_size = 1
        if vllm_config.kernel_config.enable_jit_warmup:
            from vllm.ops.pack import PACK

            pack_dtype = torch.uint8 if use_fp4_cache else current_platform.fp8_dtype()
            PACK.register_warmup(dtype=pack_dtype, pad_value=0 if use_fp4_cache else -float("inf"))
"""

#: the registration as a series entry makes it: the bytes the indexer launches on sm_8x, uint8 with pad 0
UINT8_REGISTRATION = "PACK.register_warmup(dtype=torch.uint8, pad_value=0)"


def _warmup_driver():
    from vllm_compose.ampere.kernel_launches import DRIVERS

    return next(d for d in DRIVERS if d.name.startswith("indexer JIT warm-up"))


@pytest.fixture
def warmup_tree(tree):
    (tree / "vllm" / "model_executor" / "warmup").mkdir(parents=True)
    (tree / "vllm" / "model_executor" / "layers").mkdir(parents=True)
    (tree / "vllm" / "model_executor" / "warmup" / "jit_warmup.py").write_text(JIT_WARMUP_MODULE)
    (tree / "vllm" / "ops" / "pack.py").write_text(PACK_MODULE)
    (tree / "vllm" / "model_executor" / "layers" / "sparse_attn_indexer.py").write_text(INDEXER_MODULE)
    return tree


def _set_indexer(tree, old: str, new: str) -> None:
    path = tree / "vllm" / "model_executor" / "layers" / "sparse_attn_indexer.py"
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new))


def test_the_jit_warmup_of_an_fp8_pack_is_derived_and_fails_the_gate_until_it_registers_uint8(warmup_tree):
    derived = derive_launches(warmup_tree, (8, 0), drivers=(_warmup_driver(),))
    ((rec,),) = [derived.records]
    assert (rec["module"], rec["qualname"]) == ("vllm.ops.pack", "pack_kernel")
    assert rec["specialization"]["signature"]["x_ptr"] == "*fp8e4nv"
    assert _constants(rec)[(3,)] == float("-inf")
    (result,) = run_gate(derived.records, warmup_tree, targets=((80, 32),))
    assert not result.ok and "fp8e4nv not supported" in result.error

    _set_indexer(
        warmup_tree,
        'PACK.register_warmup(dtype=pack_dtype, pad_value=0 if use_fp4_cache else -float("inf"))',
        UINT8_REGISTRATION,
    )
    fixed = derive_launches(warmup_tree, (8, 0), drivers=(_warmup_driver(),)).records
    assert [r["specialization"]["signature"]["x_ptr"] for r in fixed] == ["*u8"]
    assert [r.ok for r in run_gate(fixed, warmup_tree, targets=((80, 32),))] == [True]


def test_a_release_without_jit_warmup_is_reported_not_on_path(warmup_tree):
    _set_indexer(warmup_tree, "if vllm_config.kernel_config.enable_jit_warmup:", "if False:")
    out = derive_launches(warmup_tree, (8, 0), drivers=(_warmup_driver(),))
    assert out.records == []
    assert [(o.status, o.reason) for o in out.outcomes] == [
        ("not on path", "SparseAttnIndexer registers no JIT warm-up in this release (it has none before v0.30.0)")
    ]


def test_a_warmup_registration_reading_a_local_the_driver_does_not_know_is_an_error_naming_it(warmup_tree):
    _set_indexer(
        warmup_tree,
        "            pack_dtype =",
        "            PACK.register_warmup(dtype=torch.int32, pad_value=topk_tokens)\n            pack_dtype =",
    )
    with pytest.raises(DriverError, match="'topk_tokens'"):
        derive_launches(warmup_tree, (8, 0), label="v9.9.9", drivers=(_warmup_driver(),))


def test_cli_bad_input_exits_3(tmp_path, capsys):
    assert cli.main(["ampere-gate", "--tree", str(tmp_path)]) == 3
    assert "holds no vllm/" in capsys.readouterr().err
    assert cli.main(["ampere-gate"]) == 3


# --- real releases -------------------------------------------------------------------------------------------------
# This interpreter holds the gate's pins (the test extra), so its derivation of a release must give the counts the
# gate's own environment recorded (ampere/gate_coverage.json): each real-release case checks them too.


def _assert_as_recorded(report, tag: str, kind: str) -> None:
    check = coverage_record.check(report, tag, kind, _pins(GATE_REQUIREMENTS), coverage_record.load_record())
    assert check.state == "as recorded", "\n".join(check.lines())


@pytest.fixture(scope="module")
def stock_trees(tmp_path_factory):
    return {tag: release_tree(tmp_path_factory, tag) for tag in ("v0.26.0", "v0.29.0", "v0.30.0", "v0.33.0")}


@pytest.mark.sdist
def test_stock_0_26_0_fails_on_the_fused_indexer_q_kernel_and_the_ragged_decode_pack(stock_trees):
    report = gate_tree(stock_trees["v0.26.0"], "stock v0.26.0")
    failed = {(k.qualname, k.target) for k in report.kernels if not k.ok}
    assert failed == {(q, t) for q in ("_fused_indexer_q_rope_quant_kernel", "_pack_seq_kernel") for t in (80, 86)}
    assert all("fp8e4nv not supported" in k.reason for k in report.kernels if not k.ok)
    outcomes = {o.driver: o.status for o in report.drivers["sm_80"]}
    assert outcomes["mqa_logits_triton (PR #38476 indexer logits)"] == "not on path"
    assert "FAIL" in render(report).splitlines()[-1]
    _assert_as_recorded(report, "v0.26.0", "stock")


@pytest.mark.sdist
@pytest.mark.parametrize("tag", ["v0.29.0", "v0.30.0", "v0.33.0"])
def test_stock_0_29_on_fails_on_the_deepseek_v32_fused_kernels_and_the_ragged_decode_pack(stock_trees, tag):
    report = gate_tree(stock_trees[tag], f"stock {tag}")
    failed = {k.qualname for k in report.kernels if not k.ok}
    pack = "_pack_seq_kernel" if tag == "v0.29.0" else "PackSeqTritonKernel.kernel"  # a class from v0.30.0
    assert failed == {"_fused_q_kernel", "_fused_norm_rope_kernel", pack}
    assert all("fp8e4nv not supported" in k.reason for k in report.kernels if not k.ok)
    assert not report.ok
    _assert_as_recorded(report, tag, "stock")


def _composed(tag: str) -> Path:
    return composed_tree(tag, "vllm/v1/attention/ops/triton_mla_sparse_kernel.py")


def test_composed_0_26_0_passes_and_covers_the_recorded_dsa_path_kernels():
    report = gate_tree(_composed("v0.26.0"), "composed v0.26.0")
    assert [k for k in report.kernels if not k.ok] == []
    coverage = recorded_coverage(report, RECORDINGS["0.26.0"])
    assert coverage["missing"] == [] and len(coverage["covered"]) == 9
    assert coverage["outside_dsa_path"] > 0  # the runner and sampler kernels: recorded, not derived
    assert "_fused_indexer_q_rope_quant_kernel" not in {k.qualname for k in report.kernels}
    _assert_as_recorded(report, "v0.26.0", "composed")


@pytest.mark.parametrize("tag", ["v0.29.0", "v0.30.0", "v0.31.0", "v0.32.0", "v0.33.0"])
def test_composed_0_29_on_passes(tag):
    tree = _composed(tag)
    report = gate_tree(tree, f"composed {tag}")
    assert [(k.qualname, k.target, k.reason) for k in report.kernels if not k.ok] == []
    assert {"_fused_q_kernel", "_fused_norm_rope_kernel", "_sparse_mla_kernel_split"} <= {
        k.qualname for k in report.kernels
    }
    json.dumps(report.to_json())
    _assert_as_recorded(report, tag, "composed")


#: the series entries that fix stock kernels for sm_80/86, per release: the deepseek_v32 fused kernels (0025-0027),
#: the indexer's ragged-decode pack (0030) and, from v0.30.0, the pack its JIT warm-up registers (0043). They need no
#: PR diff, so CI (which cannot fetch the diffs) applies them alone onto the stock sdist trees
STOCK_KERNEL_FIXES = {
    "v0.29.0": ("0025-", "0026-", "0030-"),
    "v0.30.0": ("0025-", "0026-", "0030-", "0043-"),
    "v0.33.0": ("0025-", "0027-", "0030-", "0043-"),
}


@pytest.mark.sdist
@pytest.mark.parametrize("tag", sorted(STOCK_KERNEL_FIXES))
def test_the_series_kernel_fixes_alone_make_the_stock_failures_compile(stock_trees, tag, tmp_path):
    from vllm_compose.apply import apply_patches
    from vllm_compose.patchfile import parse_patch

    tree = tmp_path / "tree"
    shutil.copytree(stock_trees[tag] / "vllm", tree / "vllm")
    files = sorted(p for p in SERIES_PATCHES.glob("*.patch") if p.name.startswith(STOCK_KERNEL_FIXES[tag]))
    assert len(files) == len(STOCK_KERNEL_FIXES[tag])
    result = apply_patches(tree, [parse_patch(f.read_bytes(), name=f.name) for f in files])
    assert result.exit_code == 0
    report = gate_tree(tree, f"stock {tag} + {', '.join(f.name[:4] for f in files)}")
    assert [(k.qualname, k.target, k.reason) for k in report.kernels if not k.ok] == []
    fused = {(k.qualname, k.target) for k in report.kernels if k.module.endswith("deepseek_v32.common.kernels")}
    assert {("_fused_q_kernel", 80), ("_fused_q_kernel", 86), ("_fused_norm_rope_kernel", 80)} <= fused
    assert any(k.module.endswith("ops.common") and "pack" in k.qualname.lower() for k in report.kernels)


def _linked_copy(tree: Path, dest: Path) -> Path:
    """A copy of a release tree's vllm/ whose files are hard links: cheap, and safe to patch because `apply_patches`
    replaces a file it changes (`write_atomically`) instead of writing into it."""
    shutil.copytree(tree / "vllm", dest / "vllm", copy_function=os.link)
    return dest


@pytest.mark.sdist
def test_stock_0_30_0_with_the_ragged_pack_fix_still_fails_on_the_jit_warmup_pack(tmp_path_factory, tmp_path):
    """The runtime pack is uint8 on sm_8x (0030), yet the start-up warm-up still registers the fp8 pack with pad
    -inf: the gate fails on that specialization alone, and passes once 0043 registers the uint8 pack."""
    from vllm_compose.ampere.kernel_launches import DRIVERS
    from vllm_compose.apply import apply_patches
    from vllm_compose.patchfile import parse_patch

    tree = _linked_copy(release_tree(tmp_path_factory, "v0.30.0"), tmp_path / "tree")
    (patch,) = SERIES_PATCHES.glob("0030-*.patch")
    assert apply_patches(tree, [parse_patch(patch.read_bytes(), name=patch.name)]).exit_code == 0
    drivers = tuple(d for d in DRIVERS if d.name.startswith(("indexer ragged-decode", "indexer JIT warm-up")))

    def gate():
        out = []
        for cap, target in (((8, 0), (80, 32)), ((8, 6), (86, 32))):
            records = derive_launches(tree, cap, label="stock v0.30.0 + 0030", drivers=drivers).records
            loader = release_loader(tree, cap)  # the kernels are class attributes: they load where Python runs
            try:
                results = run_gate(records, tree, targets=(target,), loader=loader)
            finally:
                loader.close()
            out += list(zip(records, results, strict=True))
        return out

    failed = [(rec, res) for rec, res in gate() if not res.ok]
    assert [(res.qualname, res.target) for _, res in failed] == [
        ("PackSeqTritonKernel.kernel", 80),
        ("PackSeqTritonKernel.kernel", 86),
    ]
    assert all("fp8e4nv not supported" in res.error for _, res in failed)
    assert {rec["specialization"]["signature"]["x_ptr"] for rec, _ in failed} == {"*fp8e4nv"}
    # launched by the warm-up alone: the runtime pack is the uint8 one (a failure names its drivers)
    assert [rec["drivers"] for rec, _ in failed] == [[drivers[1].name]] * 2

    (warmup_fix,) = SERIES_PATCHES.glob("0043-*.patch")
    assert apply_patches(tree, [parse_patch(warmup_fix.read_bytes(), name=warmup_fix.name)]).exit_code == 0
    assert [(res.qualname, res.target, res.error) for _, res in gate() if not res.ok] == []
