"""The software E4M3FN encoding (`e4m3fn_bits` of vllm/models/deepseek_v32/common/e4m3.py) on the CPU, and the
plumbing of its GPU oracle, device/e4m3_oracle.py.

`e4m3fn_bits` runs in the Triton interpreter, in a subprocess started with TRITON_INTERPRET=1 (the interpreter must
be on when the module is executed and the kernels are decorated, and must not leak into the other tests' Triton
use): the oracle script itself, `--device cpu --parts encode`, over every bf16 and fp16 bit pattern, the fp32 edge
set and seeded random fp32 bit patterns. Its bytes are compared with `reference_e4m3fn` below, which shares no code
or method with it: it decodes all 256 codes and picks the nearest finite one by exhaustive search (ties to the even
code), then applies the saturation rules. The reference is itself checked against torch's CPU cast wherever the two
rules coincide (finite |x| <= 448). (torch 2.13.0+cpu, this venv's, was seen to agree beyond that too: it saturates
overflow and +-inf to +-448 and keeps the NaN sign, 0x7f / 0xff; older torch releases do not saturate, so only the
range where every release agrees is asserted.)

The native column the interpreter writes is the interpreter's own fp8e4nv conversion, not the GPU's; the GPU
oracle (run on the device) is what compares `e4m3fn_bits` with `cvt.rn.satfinite.e4m3x2.f32`.

The fused part runs the real DSA kernels of vLLM 0.33.0 (its PyPI sdist, marked `sdist`) with the series' two e4m3
entries applied, the only entries that change vllm/models/deepseek_v32/ (checked: the folder is byte-identical to
the one of a full compose); they need no PR diff, so CI runs it.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from release_trees import release_tree

torch = pytest.importorskip("torch", reason="the E4M3 checks need torch (see .ci/run)")
triton = pytest.importorskip("triton", reason="the E4M3 checks need triton (see .ci/run)")

from vllm_compose.patchfile import format_patch, unified_diff  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
ORACLE = REPO / "lab" / "device" / "e4m3_oracle.py"
#: the series entries that add e4m3.py (0025) and route v0.31.0+'s fused kernels through it (0027)
E4M3_ENTRIES = ("0025-", "0027-")


def _load_oracle():
    spec = importlib.util.spec_from_file_location("device_e4m3_oracle", ORACLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


oracle = _load_oracle()  # imported with the interpreter off: its kernels are JITFunctions here


def _interpreted(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "TRITON_INTERPRET": "1", "OUT": str(cwd / "out")}
    return subprocess.run(
        [sys.executable, str(ORACLE), "--device", "cpu", *args], cwd=cwd, env=env, capture_output=True, text=True
    )


# --- the independent reference -----------------------------------------------------------------------------------


def reference_e4m3fn(bits: np.ndarray) -> np.ndarray:
    """E4M3FN bytes of float32 bit patterns, from the value: nearest finite code by exhaustive search, ties to the
    even code; |x| > 448 and +-inf saturate to +-448; NaN -> 0x7f whatever its sign (what the H200's native
    conversion gave for every NaN input of the oracle run, lab/notebook/validation.md)."""
    with np.errstate(invalid="ignore"):  # signalling NaN payloads widen to NaN, as they should
        x = np.asarray(bits, dtype=np.uint32).view(np.float32).astype(np.float64)
    sign = np.where(np.signbit(x), 0x80, 0).astype(np.uint8)
    mag = np.abs(x)
    codes = np.arange(256)
    exp, man = (codes >> 3) & 0xF, codes & 0x7
    values = np.where(exp == 0, man * 2.0**-9, (1 + man / 8) * 2.0 ** (exp - 7.0))
    finite_codes = [c for c in range(0x80) if c != 0x7F]  # magnitudes; 0x7f is NaN
    best_code = np.zeros(x.shape, dtype=np.uint8)
    best_dist = np.full(x.shape, np.inf)
    for c in finite_codes:
        # float64 holds every float32 and every code exactly; near a tie the difference is exact too
        d = np.abs(mag - values[c])
        take = (d < best_dist) | ((d == best_dist) & (c % 2 == 0))
        best_code = np.where(take, c, best_code)
        best_dist = np.where(take, d, best_dist)
    code = np.where(mag > oracle.E4M3_MAX, oracle.E4M3_MAX_CODE, best_code)  # finite overflow and inf
    code = (code.astype(np.uint8) | sign).astype(np.uint8)
    return np.where(np.isnan(x), np.uint8(0x7F), code).astype(np.uint8)


def _f32_bits(*values: float) -> np.ndarray:
    return np.array(values, dtype=np.float32).view(np.uint32)


def test_reference_on_hand_checked_values():
    cases = [  # (value, byte): a list, as a dict would fold -0.0 into 0.0
        (0.0, 0x00),
        (-0.0, 0x80),
        (1.0, 0x38),  # exponent 7, mantissa 0
        (2.0**-6, 0x08),  # the smallest normal
        (2.0**-9, 0x01),  # the smallest subnormal
        (2.0**-10, 0x00),  # half of it: ties to even (0)
        (-(2.0**-10), 0x80),  # and keeps its sign
        (3 * 2.0**-10, 0x02),  # 1.5 subnormal steps: ties to even (2)
        (1.0625, 0x38),  # halfway 1 .. 1.125: ties to even (1.0)
        (1.1875, 0x3A),  # halfway 1.125 .. 1.25: ties to even (1.25)
        (15 * 2.0**-10, 0x08),  # halfway 7 * 2**-9 .. 2**-6: rounds up into the normals (0x08 is even)
        (448.0, 0x7E),
        (464.0, 0x7E),  # the tie above 448 (480 would be 0x7f, odd and NaN): 448
        (480.0, 0x7E),  # saturates
        (-1e30, 0xFE),
        (float("inf"), 0x7E),
        (float("-inf"), 0xFE),
    ]
    got = reference_e4m3fn(_f32_bits(*(v for v, _ in cases)))
    assert [f"{b:02x}" for b in got] == [f"{b:02x}" for _, b in cases]
    nans = np.array([0x7FC00000, 0x7F800001, 0xFFC00000, 0xFFFFFFFF], dtype=np.uint32)
    assert list(reference_e4m3fn(nans)) == [0x7F, 0x7F, 0x7F, 0x7F]  # the sign is dropped, as on the H200


def test_reference_decodes_back_to_every_finite_code():
    values = oracle.e4m3fn_values()
    codes = np.array([c for c in range(256) if np.isfinite(values[c])])
    assert codes.size == 254
    assert np.array_equal(reference_e4m3fn(values[codes].astype(np.float32).view(np.uint32)), codes)


def test_reference_agrees_with_torch_cast_for_finite_magnitudes_up_to_448():
    bits = np.concatenate(list(oracle.input_sets(1 << 18).values()))
    x = bits.view(np.float32)
    in_range = np.isfinite(x) & (np.abs(x) <= oracle.E4M3_MAX)
    torch_bytes = torch.from_numpy(x[in_range].copy()).to(torch.float8_e4m3fn).view(torch.uint8).numpy()
    ours = reference_e4m3fn(bits[in_range])
    assert in_range.sum() > 200_000
    assert np.array_equal(torch_bytes, ours), np.flatnonzero(torch_bytes != ours)[:10]


# --- e4m3fn_bits in the interpreter ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def interpreted_encode(tmp_path_factory):
    """The oracle's encode part in the Triton interpreter: (report, arrays, seconds)."""
    cwd = tmp_path_factory.mktemp("e4m3-interp")
    started = time.monotonic()
    proc = _interpreted("--parts", "encode", "--random", str(1 << 18), cwd=cwd)
    seconds = time.monotonic() - started
    # 1: the interpreter's own native conversion differs from the software bytes (see the module docstring)
    assert proc.returncode in (0, 1), proc.stderr
    report = json.loads((cwd / "out" / "e4m3-oracle.json").read_text())
    arrays = dict(np.load(cwd / "out" / "e4m3-bytes.npz"))
    return report, arrays, seconds


def test_interpreted_e4m3fn_bits_matches_the_reference_on_every_input(interpreted_encode):
    report, arrays, seconds = interpreted_encode
    assert report["environment"]["interpreter"] is True
    sets = {name.split(".")[0] for name in arrays}
    assert sets == {"bf16_all", "fp16_all", "fp32_edges", "fp32_random"}
    counts = {}
    for name in sorted(sets):
        bits, software = arrays[f"{name}.bits"], arrays[f"{name}.software"]
        is_nan = np.isnan(bits.view(np.float32))
        expected = reference_e4m3fn(bits)
        differ = np.flatnonzero(software != expected)
        assert differ.size == 0, [(f"{bits[i]:08x}", f"{software[i]:02x}", f"{expected[i]:02x}") for i in differ[:10]]
        assert np.all(software[is_nan] == 0x7F)  # NaN of either sign, as the H200's native conversion
        counts[name] = (int(bits.size), int(is_nan.sum()))
    assert counts["bf16_all"] == (65536, 254) and counts["fp16_all"] == (65536, 2046)
    assert counts["fp32_random"][0] == 1 << 18 and counts["fp32_edges"][0] > 1000
    print(f"\ne4m3fn_bits == reference on {counts} (size, NaNs) in {seconds:.1f} s")


def test_edge_set_holds_every_case_the_encoding_turns_on(interpreted_encode):
    _, arrays, _ = interpreted_encode
    bits = set(arrays["fp32_edges.bits"].tolist())
    values = oracle.e4m3fn_values()
    finite = np.unique(np.abs(values[np.isfinite(values)]))
    mids = ((finite[:-1] + finite[1:]) / 2).astype(np.float32)
    must = {
        *finite.astype(np.float32).view(np.uint32).tolist(),
        *mids.view(np.uint32).tolist(),
        *np.nextafter(mids, np.float32(np.inf)).view(np.uint32).tolist(),
        *np.nextafter(mids, np.float32(0)).view(np.uint32).tolist(),
        *_f32_bits(2.0**-6, 448, 464, 480, np.finfo(np.float32).max, np.inf).tolist(),
        0x80000000,  # -0
        0x00000001,  # the smallest fp32 denormal
        0x7FC00000,
        0xFFC00000,
        0x7F800001,  # a signalling NaN payload
        0xFF800001,
    }
    assert must - bits == set()


# --- the oracle's plumbing ---------------------------------------------------------------------------------------


def test_compare_lists_every_differing_byte_and_the_nan_bytes_per_sign():
    bits = np.array([0x3F800000, 0x43E80000, 0x7FC00000, 0xFFC00000], dtype=np.uint32)  # 1.0, 464, +NaN, -NaN
    native = np.array([0x38, 0x7E, 0x7F, 0x7F], dtype=np.uint8)
    software = np.array([0x38, 0x7F, 0x7F, 0xFF], dtype=np.uint8)
    result = oracle.compare(bits, native, software, "fake")
    assert result["mismatches"] == [
        {"set": "fake", "bits": "0x43e80000", "value": "464.0", "native": "0x7e", "software": "0x7f"},
        {"set": "fake", "bits": "0xffc00000", "value": "nan", "native": "0x7f", "software": "0xff"},
    ]
    summary = result["summary"]
    assert (summary["count"], summary["mismatches"], summary["nan_inputs"], summary["nan_mismatches"]) == (4, 2, 2, 1)
    assert summary["native_nan_bytes"] == {"positive": ["0x7f"], "negative": ["0x7f"]}
    assert summary["software_nan_bytes"] == {"positive": ["0x7f"], "negative": ["0xff"]}


def test_input_sets_are_complete_bit_pattern_sweeps():
    sets = oracle.input_sets(1000)
    assert np.array_equal(np.sort(sets["bf16_all"] >> 16), np.arange(1 << 16))
    fp16 = sets["fp16_all"].view(np.float32)
    assert np.array_equal(fp16[:0x7C00], np.arange(0x7C00, dtype=np.uint16).view(np.float16).astype(np.float32))
    assert np.isinf(fp16[0x7C00]) and np.isnan(fp16[0x7C01:0x8000]).all() and np.signbit(fp16[0x8000:]).all()
    assert sets["fp32_random"].size == 1000 and np.array_equal(sets["fp32_random"], oracle.random_fp32(1000))


def test_module_source_comes_from_the_series_patch_that_creates_it(tmp_path):
    text = "# e4m3 module\nE4M3 = 1\n"
    diff = unified_diff(oracle.E4M3_PATH, None, text)
    (tmp_path / "0025-e4m3.patch").write_text(format_patch("add e4m3", "why", "a <a@b>", "Mon, 1 Jan 2026", diff))
    # a patch that only edits the file (not the one creating it) is passed over
    edit = unified_diff(oracle.E4M3_PATH, "old\n", "new\n")
    (tmp_path / "0026-edit.patch").write_text(format_patch("edit", "why", "a <a@b>", "Mon, 1 Jan 2026", edit))
    assert oracle.series_e4m3_source(tmp_path) == (text, "0025-e4m3.patch")
    source = oracle.module_source(patches_dir=tmp_path)
    assert source["text"] == text and source["origin"] == "series/patches/0025-e4m3.patch"
    explicit = tmp_path / "mine.py"
    explicit.write_text("X = 2\n")
    assert oracle.module_source(explicit, patches_dir=tmp_path)["text"] == "X = 2\n"


def test_module_source_without_a_patch_falls_back_to_the_tree_or_says_how_to_proceed(tmp_path):
    with pytest.raises(oracle.OracleError, match="no series patch creates") as err:
        oracle.module_source(patches_dir=tmp_path, tree=tmp_path / "no-tree")
    assert "--module FILE" in err.value.hint
    tree_copy = tmp_path / "tree" / oracle.E4M3_PATH
    tree_copy.parent.mkdir(parents=True)
    tree_copy.write_text("T = 1\n")
    assert oracle.module_source(patches_dir=tmp_path, tree=tmp_path / "tree")["text"] == "T = 1\n"


def test_argument_errors_name_the_fix(capsys):
    with pytest.raises(SystemExit):
        oracle.parse_args(["--parts", "encode,fused"])
    assert "needs --tree DIR" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        oracle.parse_args(["--parts", "encode,nope"])
    assert "unknown part(s): nope" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        oracle.parse_args(["--device", "cpu", "--parts", "encode"])  # this process runs without the interpreter
    assert "TRITON_INTERPRET=1" in capsys.readouterr().err
    args = oracle.parse_args(["--tree", "/t", "--heads", "32,64"])
    assert (args.device, args.parts, args.tokens, args.tree) == (
        "cuda",
        ["encode", "bench", "fused"],
        16384,
        Path("/t"),
    )


def test_oracle_kernels_compile_for_sm90_and_the_software_ones_for_sm80():
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    oracle.bind_e4m3(oracle.load_e4m3(oracle.module_source()["text"]))
    sig = {"x_ptr": "*fp32", "y_ptr": "*u8", "scale_ptr": "*fp32", "rows": "i32"}
    for software in (False, True):
        y = "*u8" if software else "*fp8e4nv"
        consts = {"SOFTWARE": software, "DIM": 128, "ROWS": 16}
        quant = ASTSource(oracle._quant_rows, {**sig, "y_ptr": y, **dict.fromkeys(consts, "constexpr")}, consts)
        flat_sig = {"x_ptr": "*fp32", "y_ptr": y, "n": "i32", "SOFTWARE": "constexpr", "BLOCK": "constexpr"}
        flat = ASTSource(oracle._encode_flat, flat_sig, {"SOFTWARE": software, "BLOCK": 1024})
        for src in (quant, flat):
            compiled = triton.compile(src, target=GPUTarget("cuda", 90, 32))
            assert ("cvt.rn.satfinite.e4m3x2.f32" in compiled.asm["ptx"]) != software  # native: Triton's cvt
            assert oracle.e4m3_cvt_instructions(compiled) == ([] if software else ["cvt.rn.satfinite.e4m3x2.f32"])
            # the oracle's sm_80 check of what ran: no fp8e4nv anywhere in the software build, so Ampere compiles it
            sm80 = oracle._compile_for_sm80(compiled)
            assert sm80 == "ok" if software else "fp8e4nv not supported in this architecture" in sm80


def test_the_fused_part_skips_a_tree_without_the_module(tmp_path):
    (tmp_path / "vllm").mkdir()
    section = oracle.run_fused(tmp_path, "cpu", 2, 2, 2, bench=False)
    assert "has no vllm/models/deepseek_v32/common/e4m3.py" in section["skipped"]


@pytest.fixture(scope="module")
def e4m3_tree(tmp_path_factory) -> Path:
    """vllm/ of the 0.33.0 sdist with the series' e4m3 entries applied (as a compose lands them: no conflict)."""
    from vllm_compose.apply import apply_patches
    from vllm_compose.patchfile import parse_patch

    tree = tmp_path_factory.mktemp("e4m3-v0.33.0")
    shutil.copytree(release_tree(tmp_path_factory, "v0.33.0") / "vllm", tree / "vllm")
    files = sorted(p for p in oracle.SERIES_PATCHES.glob("*.patch") if p.name.startswith(E4M3_ENTRIES))
    assert len(files) == len(E4M3_ENTRIES), files
    result = apply_patches(tree, [parse_patch(f.read_bytes(), name=f.name) for f in files])
    assert result.exit_code == 0
    assert (tree / oracle.E4M3_PATH).is_file()
    return tree


@pytest.mark.sdist
def test_fused_part_runs_the_tree_kernels_in_the_interpreter_with_the_flag_bound(tmp_path, e4m3_tree):
    proc = _interpreted("--parts", "fused", "--tree", str(e4m3_tree), "--fused-tokens", "4", "--q-heads", "4",
                        "--index-heads", "4", cwd=tmp_path)  # fmt: skip
    assert (tmp_path / "out" / "e4m3-oracle.json").is_file(), proc.stdout + proc.stderr
    report = json.loads((tmp_path / "out" / "e4m3-oracle.json").read_text())
    assert report["module"]["tree_copy_matches"] is True  # the tree's e4m3.py is the series entry's
    fused = report["fused"]
    assert fused["flag_bound"] == {"native": True, "software": True}
    rows = {row["case"]: row for row in fused["cases"]}
    assert set(rows) == {"quantize_mqa", "bf16_mqa", "mla_auto", "mla_fp8"}
    # the stores the series leaves native write fp8 into the software run's uint8 views: reported per case
    assert rows["quantize_mqa"]["native_only"] == [] and rows["mla_fp8"]["native_only"] == ["mla_cache_ptr"]
    assert "software_error" not in rows["quantize_mqa"]  # the MQA query pack is software too (0026/0027)
    assert rows["quantize_mqa"]["outputs"]["index_weights_out_ptr"]["differ"] == 0
    assert "cannot cast" in rows["mla_fp8"]["software_error"]  # the FP8 MLA cache (sm_89+ only) stays native
    # the indexer paths ran both ways; everything but their fp8 bytes (the interpreter's native column is not the
    # GPU's) is identical
    assert rows["bf16_mqa"]["outputs"]["index_weights_out_ptr"]["differ"] == 0
    assert rows["bf16_mqa"]["outputs"]["q_pe_out_ptr"]["differ"] == 0
    for name in ("mla_cache_ptr", "q_c_out_ptr", "topk_indices_ptr"):
        assert rows["mla_auto"]["outputs"][name]["differ"] == 0
    assert rows["bf16_mqa"]["outputs"]["index_q_fp8_ptr"]["bytes"] == 4 * 4 * 128
