"""The GPU oracle for the software E4M3FN encoding: `e4m3fn_bits(x)` against Triton's native `x.to(tl.float8e4nv)`.

On an sm_89+ GPU (the H200 of the device machine) Triton lowers the native conversion to PTX
`cvt.rn.satfinite.e4m3x2.f32`; on Ampere it refuses fp8e4nv, and the DSA fused kernels take
`vllm/models/deepseek_v32/common/e4m3.py`'s integer encoding instead. The two must give the same bytes. Three parts:

  encode  every bf16 and fp16 bit pattern, an fp32 edge set and seeded random fp32 bit patterns, through a kernel
          storing the native conversion and one storing `e4m3fn_bits`; every differing byte is listed
  bench   both encodings on an indexer-shaped workload (tokens x heads x 128, fp32), bare and as the full ue8m0
          quantize (amax, power-of-two scale, divide, encode, store), in us and GB/s (triton.testing.do_bench)
  fused   `_fused_q_kernel` and `_fused_norm_rope_kernel` loaded from a vLLM tree (kernel_gate's loader, no vLLM
          import), each run natively and with `SOFTWARE_E4M3` on (fp8 tensors passed as uint8 views) on identical
          random bf16 inputs; outputs compared byte for byte, both timed, the software build compiled for sm_80

    python3 lab/device/e4m3_oracle.py --tree /tmp/vc/composed        # from the repo root; results in $OUT
    TRITON_INTERPRET=1 python lab/device/e4m3_oracle.py --device cpu --parts encode   # the CPU rehearsal (tests)

In the interpreter (--device cpu) the native column is the interpreter's own fp8e4nv conversion, which is not the
GPU's (no round-to-nearest-even at ties, no saturation: 464 -> 0x7f, inf -> 0x78), so there only the software
bytes mean anything; tests/series/test_e4m3_numerics.py checks them against an independent reference.

The module source is read from the series patch that creates `vllm/models/deepseek_v32/common/e4m3.py`
(`--module FILE` overrides). Writes `$OUT/e4m3-oracle.json` (OUT defaults to ./e4m3-oracle-out) and
`$OUT/e4m3-bytes.npz` (input bits, native and software bytes per set). Exit status 0: every byte agreed; 1: some
byte differed (listed); 3: bad input (no module source, a tree without the kernels).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[2]
# the device machine runs this from a copy of the working tree, where vllm_compose is not installed
sys.path.insert(0, str(REPO / "src"))

import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402

from vllm_compose.ampere.kernel_gate import ReleaseLoader  # noqa: E402
from vllm_compose.errors import ComposeError  # noqa: E402
from vllm_compose.patchfile import join_lines, parse_patch  # noqa: E402

E4M3_PATH = "vllm/models/deepseek_v32/common/e4m3.py"
E4M3_MODULE = "vllm.models.deepseek_v32.common.e4m3"
KERNELS_MODULE = "vllm.models.deepseek_v32.common.kernels"
SERIES_PATCHES = REPO / "series" / "patches"

EXIT_AGREE, EXIT_MISMATCH, EXIT_BAD_INPUT = 0, 1, 3

#: E4M3FN's largest finite magnitude and its code
E4M3_MAX, E4M3_MAX_CODE = 448.0, 0x7E


class OracleError(ComposeError):
    """The oracle cannot run: no module source, or a tree without the kernels it checks."""


# --- the module under test ---------------------------------------------------------------------------------------


def series_e4m3_source(patches_dir: Path = SERIES_PATCHES) -> tuple[str, str] | None:
    """(text, patch name) of the series patch that creates e4m3.py, or None when no patch creates it."""
    for patch_file in sorted(Path(patches_dir).glob("*.patch")):
        patch = parse_patch(patch_file.read_bytes(), name=patch_file.name)
        for fp in patch.files:
            if fp.is_new and fp.new_path == E4M3_PATH:
                added = [text for hunk in fp.hunks for text in hunk.added]
                no_newline = bool(fp.hunks) and fp.hunks[-1].new_no_newline
                return join_lines(added, final_newline=not no_newline), patch_file.name
    return None


def module_source(explicit: Path | None = None, patches_dir: Path = SERIES_PATCHES, tree: Path | None = None) -> dict:
    """The e4m3.py text to test and where it came from: `explicit`, else the series patch, else the copy in
    `tree`."""
    if explicit is not None:
        return _source_record(Path(explicit).read_text(), str(explicit))
    found = series_e4m3_source(patches_dir)
    if found is not None:
        return _source_record(found[0], f"series/patches/{found[1]}")
    if tree is not None and (Path(tree) / E4M3_PATH).is_file():
        return _source_record((Path(tree) / E4M3_PATH).read_text(), str(Path(tree) / E4M3_PATH))
    raise OracleError(
        f"no series patch creates {E4M3_PATH} and the tree has none",
        file=E4M3_PATH,
        hint="pass the module with --module FILE (e.g. the tree's vllm/models/deepseek_v32/common/e4m3.py)",
    )


def _source_record(text: str, origin: str) -> dict:
    return {"text": text, "origin": origin, "sha256": hashlib.sha256(text.encode()).hexdigest()}


def load_e4m3(text: str) -> dict:
    """Execute e4m3.py's text as kernel_gate's loader executes vLLM modules (vLLM imports skipped); its namespace.

    Under TRITON_INTERPRET=1 its `@triton.jit` functions come out as interpreted functions.
    """
    root = Path(tempfile.mkdtemp(prefix="e4m3-module-"))
    (root / E4M3_PATH).parent.mkdir(parents=True)
    (root / E4M3_PATH).write_text(text)
    ns = ReleaseLoader(root).namespace(E4M3_MODULE)
    if "e4m3fn_bits" not in ns:
        raise OracleError("the module defines no e4m3fn_bits", file=E4M3_PATH, hint="is this the right e4m3.py?")
    return ns


# --- inputs ------------------------------------------------------------------------------------------------------


def e4m3fn_values() -> np.ndarray:
    """float64 value of every code 0..255 (NaN for 0x7f and 0xff), decoded from the bit fields."""
    codes = np.arange(256)
    sign = np.where(codes & 0x80, -1.0, 1.0)
    exp, man = (codes >> 3) & 0xF, codes & 0x7
    value = np.where(exp == 0, man * 2.0**-9, (1 + man / 8) * 2.0 ** (exp - 7.0))
    value = np.where((exp == 15) & (man == 7), np.nan, value)
    return sign * value


def bf16_all() -> np.ndarray:
    """The float32 bits of all 65536 bf16 values (NaN payloads and signs included)."""
    return np.arange(1 << 16, dtype=np.uint32) << 16


def fp16_all() -> np.ndarray:
    """The float32 bits of all 65536 fp16 values, widened by numpy (NaNs stay NaN with their sign)."""
    return np.arange(1 << 16, dtype=np.uint32).astype(np.uint16).view(np.float16).astype(np.float32).view(np.uint32)


def fp32_edges() -> np.ndarray:
    """float32 bits of the edge cases: exact codes, midpoints and their neighbours, boundaries, saturation, NaNs."""
    f32 = np.float32
    finite = np.unique(np.abs(e4m3fn_values()[np.isfinite(e4m3fn_values())]))  # 0 .. 448, ascending
    mids = ((finite[:-1] + finite[1:]) / 2).astype(f32)  # exact in float32 (5 significant bits)
    above = np.nextafter(mids, f32(np.inf))
    below = np.nextafter(mids, f32(0))
    b = f32(2.0**-6)
    special = [
        b,
        np.nextafter(b, f32(0)),
        np.nextafter(b, f32(1)),
        f32(2.0**-10),  # half the smallest subnormal: ties to 0
        np.nextafter(f32(2.0**-10), f32(1)),
        np.nextafter(f32(2.0**-10), f32(0)),
        f32(2.0**-11),
        f32(2.0**-20),
        f32(2.0**-126),  # FLT_MIN
        f32(448),
        f32(464),  # the tie above 448
        np.nextafter(f32(464), f32(0)),
        np.nextafter(f32(464), f32(np.inf)),
        f32(480),
        f32(500),
        f32(1e10),
        np.finfo(f32).max,
        f32(np.inf),
    ]
    values = np.concatenate([finite.astype(f32), mids, above, below, np.array(special, dtype=f32)])
    bits = values.view(np.uint32)
    denormals = np.array([0x00000001, 0x00000002, 0x00400000, 0x007FFFFF], dtype=np.uint32)
    nans = np.array([0x7FC00000, 0x7FC00001, 0x7F800001, 0x7FA00000, 0x7FFFFFFF], dtype=np.uint32)
    bits = np.concatenate([bits, denormals, nans])
    return np.unique(np.concatenate([bits, bits | np.uint32(0x80000000)]))


def random_fp32(count: int, seed: int = 0) -> np.ndarray:
    """`count` uniformly random float32 bit patterns (seeded)."""
    return np.random.default_rng(seed).integers(0, 1 << 32, size=count, dtype=np.uint64).astype(np.uint32)


def input_sets(random_count: int = 1 << 18) -> dict[str, np.ndarray]:
    """Every set the encode part compares, by name: float32 bit patterns as uint32."""
    sets = {"bf16_all": bf16_all(), "fp16_all": fp16_all(), "fp32_edges": fp32_edges()}
    if random_count:
        sets["fp32_random"] = random_fp32(random_count)
    return sets


# --- the encode kernels ------------------------------------------------------------------------------------------

#: bound by `bind_e4m3` to the module's function before the first launch (Triton reads kernel globals at compile time)
e4m3fn_bits = None


def bind_e4m3(ns: dict) -> None:
    """Make this script's kernels call the loaded module's `e4m3fn_bits`."""
    global e4m3fn_bits
    e4m3fn_bits = ns["e4m3fn_bits"]


@triton.jit
def _store_native(bits_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    x = tl.load(bits_ptr + offs, mask=m).to(tl.float32, bitcast=True)  # bits in, so NaN payloads arrive intact
    tl.store(y_ptr + offs, x.to(tl.float8e4nv), mask=m)


@triton.jit
def _store_software(bits_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    x = tl.load(bits_ptr + offs, mask=m).to(tl.float32, bitcast=True)
    tl.store(y_ptr + offs, e4m3fn_bits(x), mask=m)


def encode(bits: np.ndarray, mode: str, device: str, block: int = 1024) -> tuple[np.ndarray, object]:
    """The bytes `mode` ('native' | 'software') stores for float32 bit patterns `bits`, and the compiled kernel."""
    x = torch.from_numpy(np.ascontiguousarray(bits).view(np.int32)).to(device)
    n = x.numel()
    if mode == "native":
        y = torch.empty(n, dtype=torch.float8_e4m3fn, device=device)
        compiled = _store_native[(triton.cdiv(n, block),)](x, y, n, BLOCK=block)
    else:
        y = torch.empty(n, dtype=torch.uint8, device=device)
        compiled = _store_software[(triton.cdiv(n, block),)](x, y, n, BLOCK=block)
    return y.view(torch.uint8).cpu().numpy(), compiled


def e4m3_cvt_instructions(compiled) -> list[str]:
    """The distinct e4m3 conversion instructions in a compiled kernel's PTX ([] in the interpreter)."""
    asm = getattr(compiled, "asm", None) or {}
    ptx = asm.get("ptx", "")
    return sorted({line.strip().split()[0] for line in ptx.splitlines() if "cvt" in line and "e4m3" in line})


def compare(bits: np.ndarray, native: np.ndarray, software: np.ndarray, set_name: str) -> dict:
    """The per-set summary and every differing byte: input bits and value, native byte, software byte."""
    bits = np.asarray(bits, dtype=np.uint32)
    differ = np.flatnonzero(native != software)
    is_nan = np.isnan(bits.view(np.float32))
    negative = (bits >> 31).astype(bool)
    mismatches = [
        {
            "set": set_name,
            "bits": f"0x{int(bits[i]):08x}",
            "value": repr(float(bits[i : i + 1].view(np.float32)[0])),
            "native": f"0x{int(native[i]):02x}",
            "software": f"0x{int(software[i]):02x}",
        }
        for i in differ
    ]
    summary = {
        "count": int(bits.size),
        "mismatches": int(differ.size),
        "nan_inputs": int(is_nan.sum()),
        "nan_mismatches": int(is_nan[differ].sum()),
        # what each encoding makes of NaN, by the input's sign: the oracle settles the NaN sign rule
        "native_nan_bytes": _nan_bytes(native, is_nan, negative),
        "software_nan_bytes": _nan_bytes(software, is_nan, negative),
    }
    return {"summary": summary, "mismatches": mismatches}


def _nan_bytes(out: np.ndarray, is_nan: np.ndarray, negative: np.ndarray) -> dict:
    return {
        "positive": [f"0x{b:02x}" for b in np.unique(out[is_nan & ~negative])],
        "negative": [f"0x{b:02x}" for b in np.unique(out[is_nan & negative])],
    }


def run_encode(sets: dict[str, np.ndarray], device: str) -> tuple[dict, dict[str, np.ndarray]]:
    """The encode part over every set: (report section, arrays for the npz)."""
    section: dict = {"sets": {}, "mismatches": []}
    arrays: dict[str, np.ndarray] = {}
    for name, bits in sets.items():
        native, compiled_native = encode(bits, "native", device)
        software, compiled_software = encode(bits, "software", device)
        result = compare(bits, native, software, name)
        section["sets"][name] = result["summary"]
        section["mismatches"] += result["mismatches"]
        section.setdefault("native_cvt", e4m3_cvt_instructions(compiled_native))
        section.setdefault("software_cvt", e4m3_cvt_instructions(compiled_software))
        arrays.update({f"{name}.bits": bits, f"{name}.native": native, f"{name}.software": software})
    section["total"] = sum(s["count"] for s in section["sets"].values())
    section["total_mismatches"] = len(section["mismatches"])
    return section, arrays


# --- bench -------------------------------------------------------------------------------------------------------


@triton.jit
def _quant_rows(x_ptr, y_ptr, scale_ptr, rows, SOFTWARE: tl.constexpr, DIM: tl.constexpr, ROWS: tl.constexpr):
    # the ue8m0 quantize of _fp8_ue8m0_quantize, one 128-element head per row
    r = tl.program_id(0).to(tl.int64) * ROWS + tl.arange(0, ROWS)
    d = tl.arange(0, DIM)
    m = (r < rows)[:, None]
    vals = tl.load(x_ptr + r[:, None] * DIM + d[None, :], mask=m, other=0.0)
    amax = tl.max(tl.abs(vals), axis=1)
    scale = tl.math.exp2(tl.math.ceil(tl.math.log2(tl.div_rn(tl.maximum(amax, 1e-4), 448.0))))
    scaled = tl.div_rn(vals, scale[:, None])
    if SOFTWARE:
        q = e4m3fn_bits(scaled)
    else:
        q = scaled.to(tl.float8e4nv)
    tl.store(y_ptr + r[:, None] * DIM + d[None, :], q, mask=m)
    tl.store(scale_ptr + r, scale, mask=r < rows)


@triton.jit
def _encode_flat(x_ptr, y_ptr, n, SOFTWARE: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    x = tl.load(x_ptr + offs, mask=m)
    if SOFTWARE:
        tl.store(y_ptr + offs, e4m3fn_bits(x), mask=m)
    else:
        tl.store(y_ptr + offs, x.to(tl.float8e4nv), mask=m)


def run_bench(tokens: int, heads_list: list[int], dim: int = 128) -> list[dict]:
    """do_bench of both encodings, bare and as the ue8m0 quantize, on tokens x heads x dim fp32 (on CUDA)."""
    out = []
    for heads in heads_list:
        rows = tokens * heads
        x = torch.randn(rows, dim, device="cuda", dtype=torch.float32) * 3
        n = x.numel()
        for mode in ("native", "software"):
            flat_ms, quant_ms = _bench_one(x, mode == "software")
            out.append(
                {
                    "shape": [tokens, heads, dim],
                    "mode": mode,
                    "encode_us": round(flat_ms * 1e3, 2),
                    "encode_GBps": round(5 * n / (flat_ms * 1e-3) / 1e9, 1),  # 4 bytes in, 1 out
                    "quantize_us": round(quant_ms * 1e3, 2),
                    "quantize_GBps": round((5 * n + 4 * rows) / (quant_ms * 1e-3) / 1e9, 1),  # and a scale a row
                }
            )
    return out


def _bench_one(x: torch.Tensor, software: bool, block: int = 1024, rows_per_program: int = 16) -> tuple[float, float]:
    """Milliseconds of the bare encode and of the ue8m0 quantize of `x` (rows x dim fp32)."""
    from triton.testing import do_bench

    rows, dim = x.shape
    n = x.numel()
    y = torch.empty(n, dtype=torch.uint8 if software else torch.float8_e4m3fn, device=x.device)
    y_rows = y.view(rows, dim)
    scale = torch.empty(rows, dtype=torch.float32, device=x.device)
    flat_grid, quant_grid = (triton.cdiv(n, block),), (triton.cdiv(rows, rows_per_program),)
    flat = do_bench(lambda: _encode_flat[flat_grid](x, y, n, SOFTWARE=software, BLOCK=block))
    quant = do_bench(
        lambda: _quant_rows[quant_grid](x, y_rows, scale, rows, SOFTWARE=software, DIM=dim, ROWS=rows_per_program)
    )
    return flat, quant


# --- fused kernels from a tree -----------------------------------------------------------------------------------

#: rows of the random RoPE caches
_MAX_POS = 4096


def _as_uint8(t):
    return t.view(torch.uint8) if isinstance(t, torch.Tensor) and t.dtype == torch.float8_e4m3fn else t


def fused_q_case(tokens: int, q_heads: int, index_heads: int, quantize_mqa: bool, device: str, seed: int) -> dict:
    """Inputs (by kernel argument name), grid, output names and launch options of one `_fused_q_kernel` run.

    DeepSeek-V3.2 shapes: 512 NoPE + 64 RoPE query dims, indexer heads of 128 with 64 RoPE dims.
    """
    g = torch.Generator(device=device).manual_seed(seed)

    def randn(*shape, scale=1.0, dtype=torch.bfloat16):
        return (torch.randn(*shape, generator=g, device=device) * scale).to(dtype)

    q_pe = randn(tokens, q_heads, 64)
    ql_nope = randn(tokens, q_heads, 512, scale=2.0)
    index_q = randn(tokens, index_heads, 128, scale=2.0)
    cos_sin = randn(_MAX_POS, 64, dtype=torch.float32)
    positions = torch.randint(0, _MAX_POS, (tokens,), generator=g, device=device)
    index_weights = randn(tokens, index_heads, dtype=torch.float32)
    q_scale = torch.tensor([1 / 64], dtype=torch.float32, device=device)  # some |ql_nope / scale| pass 448
    index_q_fp8 = torch.zeros(tokens, index_heads, 128, dtype=torch.float8_e4m3fn, device=device)
    if quantize_mqa:
        mqa_q_fp8 = torch.zeros(tokens, q_heads, 576, dtype=torch.float8_e4m3fn, device=device)
        q_pe_out = mqa_q_fp8
    else:
        q_pe_out = torch.zeros_like(q_pe)
        mqa_q_fp8 = q_pe_out
    index_weights_out = torch.zeros(tokens, index_heads, dtype=torch.float32, device=device)
    args = {
        "pos_ptr": positions,
        "q_pe_ptr": q_pe,
        "q_pe_stride0": q_pe.stride(0),
        "q_pe_stride1": q_pe.stride(1),
        "NUM_Q_HEADS": q_heads,
        "q_pe_cos_sin_ptr": cos_sin,
        "q_pe_cos_sin_stride": cos_sin.stride(0),
        "Q_PE_HALF_ROT_DIM": 32,
        "index_q_ptr": index_q,
        "index_q_stride0": index_q.stride(0),
        "index_q_stride1": index_q.stride(1),
        "NUM_INDEX_Q_HEADS": index_heads,
        "index_q_cos_sin_ptr": cos_sin,
        "index_q_cos_sin_stride": cos_sin.stride(0),
        "INDEX_Q_HALF_ROT_DIM": 32,
        "index_q_fp8_ptr": index_q_fp8,
        "index_q_fp8_stride0": index_q_fp8.stride(0),
        "index_q_fp8_stride1": index_q_fp8.stride(1),
        "INDEX_Q_HEAD_DIM": 128,
        "ql_nope_ptr": ql_nope,
        "ql_nope_stride0": ql_nope.stride(0),
        "ql_nope_stride1": ql_nope.stride(1),
        "mqa_q_fp8_ptr": mqa_q_fp8,
        "mqa_q_fp8_stride0": mqa_q_fp8.stride(0),
        "mqa_q_fp8_stride1": mqa_q_fp8.stride(1),
        "q_scale_ptr": q_scale,
        "QL_NOPE_DIM": 512,
        "QL_NOPE_BLOCK": 512,
        "q_pe_out_ptr": q_pe_out,
        "q_pe_out_stride0": q_pe_out.stride(0),
        "q_pe_out_stride1": q_pe_out.stride(1),
        "index_weights_ptr": index_weights,
        "index_weights_stride": index_weights.stride(0),
        "index_weights_softmax_scale": 128**-0.5,
        "index_weights_head_scale": index_heads**-0.5,
        "index_weights_out_ptr": index_weights_out,
        "index_weights_out_stride": index_weights_out.stride(0),
        "HAS_INDEXER": True,
        "INDEX_ROPE_INTERLEAVE": False,
        "QUANTIZE_MQA": quantize_mqa,
        "USE_PDL": False,
        "FP8_MAX": E4M3_MAX,
        "USE_FNUZ": False,
    }
    outputs = ["index_q_fp8_ptr", "index_weights_out_ptr", "mqa_q_fp8_ptr" if quantize_mqa else "q_pe_out_ptr"]
    grid = (tokens, 3, max((q_heads + 1) // 2, index_heads))
    native_only: list[str] = []  # the MQA query pack goes through to_e4m3fn too (series 0026/0027)
    return {"args": args, "grid": grid, "outputs": outputs, "native_only": native_only, "options": {"num_warps": 1}}


def fused_norm_rope_case(tokens: int, mla_cache: str, device: str, seed: int) -> dict:
    """Inputs of one `_fused_norm_rope_kernel` run: indexer K into an fp8 + fp32-scale cache (64-token blocks), MLA
    K into a bf16 ('auto') or fp8 ('fp8') cache, DeepSeek-V3.2 dims (q_lora 1536, kv_lora 512, rope 64, index 128)."""
    g = torch.Generator(device=device).manual_seed(seed)

    def randn(*shape, scale=1.0, dtype=torch.bfloat16):
        return (torch.randn(*shape, generator=g, device=device) * scale).to(dtype)

    block, blocks = 64, triton.cdiv(tokens, 64) + 1
    q_c, kv_c, k_pe, index_k = randn(tokens, 1536), randn(tokens, 512), randn(tokens, 64), randn(tokens, 128)
    cos_sin = randn(_MAX_POS, 64, dtype=torch.float32)
    slots = torch.randperm(blocks * block, generator=g, device=device)[:tokens]
    # caches start as one byte pattern in both runs, so bytes neither run writes compare equal
    indexer_cache = torch.full((blocks, block, 128 + 4), 0xA5, dtype=torch.uint8, device=device)
    if mla_cache == "fp8":
        mla = torch.full((blocks, block, 576), 0xA5, dtype=torch.uint8, device=device).view(torch.float8_e4m3fn)
    else:
        mla = torch.full((blocks, block, 576), 0.5, dtype=torch.bfloat16, device=device)
    q_c_out = torch.zeros_like(q_c)
    topk = torch.zeros(tokens, 2048, dtype=torch.int32, device=device)
    args = {
        "pos_ptr": torch.randint(0, _MAX_POS, (tokens,), generator=g, device=device),
        "q_c_ptr": q_c,
        "q_c_stride": q_c.stride(0),
        "q_rms_norm_w_ptr": randn(1536),
        "q_rms_eps": 1e-6,
        "q_c_out_ptr": q_c_out,
        "q_c_out_stride": q_c_out.stride(0),
        "Q_DIM": 1536,
        "Q_BLOCK_SIZE": 2048,
        "kv_ptr": kv_c,
        "kv_stride": kv_c.stride(0),
        "kv_rms_norm_w_ptr": randn(512),
        "kv_rms_eps": 1e-6,
        "kv_out_ptr": None,
        "kv_out_stride": 0,
        "KV_DIM": 512,
        "kpe_ptr": k_pe,
        "kpe_stride": k_pe.stride(0),
        "kpe_rope_cos_sin_cache_ptr": cos_sin,
        "kpe_rope_cos_sin_cache_stride": cos_sin.stride(0),
        "kpe_out_ptr": None,
        "kpe_out_stride": 0,
        "KPE_HALF_ROT_DIM": 32,
        "index_k_ptr": index_k,
        "index_k_stride": index_k.stride(0),
        "index_k_layer_norm_w_ptr": randn(128, dtype=torch.float32),
        "index_k_layer_norm_bias_ptr": randn(128, scale=0.1, dtype=torch.float32),
        "index_k_layer_norm_eps": 1e-6,
        "INDEX_K_DIM": 128,
        "INDEX_K_BLOCK_SIZE": 128,
        "index_k_rope_cos_sin_cache_ptr": cos_sin,
        "index_k_rope_cos_sin_cache_stride": cos_sin.stride(0),
        "index_k_out_ptr": None,
        "index_k_out_stride": 0,
        "INDEX_K_HALF_ROT_DIM": 32,
        "slot_mapping_ptr": slots,
        "indexer_slot_mapping_ptr": slots,
        "indexer_cache_ptr": indexer_cache.view(torch.float8_e4m3fn),
        "indexer_cache_scale_ptr": indexer_cache.view(torch.float32),
        "indexer_cache_block_size": block,
        "indexer_cache_stride": indexer_cache.stride(0),
        "INDEXER_CACHE_SHUFFLE": False,
        "INDEXER_CACHE_BLOCK_TILE": 16,
        "INDEXER_CACHE_HEAD_TILE": 16,
        "INDEXER_CACHE_MX_SCALE": False,
        "mla_cache_ptr": mla,
        "mla_cache_block_stride": mla.stride(0),
        "mla_cache_entry_stride": mla.stride(1),
        "MLA_CACHE_BLOCK_SIZE": block,
        "MLA_CACHE_FP8": mla_cache == "fp8",
        "SKIP_MLA_SCALE": False,
        "mla_cache_scale_ptr": torch.tensor([0.02], dtype=torch.float32, device=device),
        "mla_cache_ds_scale_ptr": torch.empty(0, dtype=torch.float32, device=device),
        "mla_cache_ds_rope_ptr": torch.empty(0, dtype=torch.bfloat16, device=device),
        "MLA_CACHE_DS_MLA": False,
        "MLA_CACHE_NVFP4": False,
        "MLA_NUM_TILES": 1,
        "MLA_TILE_DIM": 1,
        "topk_indices_ptr": topk,
        "topk_indices_stride": topk.stride(0),
        "TOPK": 2048,
        "TOPK_BLOCK_SIZE": 1024,
        "HAS_INDEXER": True,
        "INDEX_ROPE_INTERLEAVE": False,
        "USE_PDL": False,
        "FP8_MAX": E4M3_MAX,
        "USE_FNUZ": False,
    }
    outputs = ["indexer_cache_ptr", "mla_cache_ptr", "q_c_out_ptr", "topk_indices_ptr"]
    # an fp8 MLA cache (per-tensor scale) converts with .to(fp8) itself, outside _fp8_ue8m0_quantize
    native_only = ["mla_cache_ptr"] if mla_cache == "fp8" else []
    return {"args": args, "grid": (tokens, 4), "outputs": outputs, "native_only": native_only, "options": {}}


def load_tree_kernels(tree: Path, software: bool) -> dict:
    """The two fused kernels from `tree`, loaded with `SOFTWARE_E4M3` set to `software`, each in its own loader.

    e4m3.py computes the flag from `current_platform`, which the loader never binds (it skips that statement and
    the one making the constexpr), so the flag is set in the loaded e4m3 namespace before the kernels resolve
    their globals; a loader per mode keeps Triton's per-function global check from seeing the flag change.
    """
    loader = ReleaseLoader(Path(tree))
    e4m3 = loader.namespace(E4M3_MODULE)
    e4m3["E4M3_IN_SOFTWARE"] = software
    e4m3["SOFTWARE_E4M3"] = tl.constexpr(software)
    names = ("_fused_q_kernel", "_fused_norm_rope_kernel")
    ns = loader.namespace(KERNELS_MODULE)
    if triton.knobs.runtime.interpret:
        # the loader follows only JITFunctions; interpreted kernels get the vLLM names their module's kernels use
        loader.resolve(KERNELS_MODULE, _jit_names(loader.module_file(KERNELS_MODULE)))
        kernels = {name: ns[name] for name in names}
    else:
        kernels = {name: loader.kernel(KERNELS_MODULE, name) for name in names}
    # the kernels reach the flag through e4m3's to_e4m3fn, which must be the one bound in the kernels' module
    bound = e4m3.get("SOFTWARE_E4M3")
    same_helper = ns.get("to_e4m3fn") is not None and ns.get("to_e4m3fn") is e4m3.get("to_e4m3fn")
    flag_bound = same_helper and bound is not None and bool(getattr(bound, "value", bound)) == software
    return {"kernels": kernels, "flag_bound": flag_bound}


def _jit_names(path: Path) -> set[str]:
    """Every name used inside the module's functions (a superset of what its kernels need)."""
    import ast

    tree = ast.parse(path.read_text())
    funcs = [node for node in tree.body if isinstance(node, ast.FunctionDef)]
    return {n.id for f in funcs for n in ast.walk(f) if isinstance(n, ast.Name)}


def _launch(fn, case: dict, software: bool):
    missing = [a for a in fn.arg_names if a not in case["args"]]
    extra = [a for a in case["args"] if a not in fn.arg_names]
    if missing or extra:
        raise OracleError(
            f"{fn.__name__} in the tree takes other arguments than the oracle passes: missing {missing}, "
            f"unknown {extra}",
            key=fn.__name__,
            hint="update fused_q_case / fused_norm_rope_case in lab/device/e4m3_oracle.py to the tree's signature",
        )
    args = {k: (_as_uint8(v) if software else v) for k, v in case["args"].items()}
    return fn[case["grid"]](**args, **case["options"])


def _bytes_of(t: torch.Tensor) -> np.ndarray:
    return t.contiguous().view(torch.uint8).cpu().numpy().reshape(-1)


def run_fused(tree: Path, device: str, tokens: int, q_heads: int, index_heads: int, bench: bool) -> dict:
    """Native vs software runs of both fused kernels on identical inputs: byte comparison, timing, sm_80 compile."""
    if not (Path(tree) / E4M3_PATH).is_file():
        return {"skipped": f"{tree} has no {E4M3_PATH}: compose a tree with the series entry that adds it"}
    loaded = {mode: load_tree_kernels(tree, mode == "software") for mode in ("native", "software")}
    cases = [
        ("_fused_q_kernel", "quantize_mqa", lambda: fused_q_case(tokens, q_heads, index_heads, True, device, 1)),
        ("_fused_q_kernel", "bf16_mqa", lambda: fused_q_case(tokens, q_heads, index_heads, False, device, 2)),
        ("_fused_norm_rope_kernel", "mla_auto", lambda: fused_norm_rope_case(tokens, "auto", device, 3)),
        ("_fused_norm_rope_kernel", "mla_fp8", lambda: fused_norm_rope_case(tokens, "fp8", device, 4)),
    ]
    section: dict = {
        "tree": str(tree),
        "flag_bound": {mode: loaded[mode]["flag_bound"] for mode in loaded},
        "cases": [],
    }
    for kernel_name, label, make in cases:
        row: dict = {"kernel": kernel_name, "case": label, "tokens": tokens}
        outs, compiled = {}, {}
        for mode in ("native", "software"):
            case = make()  # the same seed: identical inputs, fresh outputs
            row["native_only"] = case["native_only"]
            fn = loaded[mode]["kernels"][kernel_name]
            try:
                compiled[mode] = _launch(fn, case, mode == "software")
            except OracleError:
                raise
            except Exception as exc:  # a kernel that fails to compile or run is this case's finding
                row[f"{mode}_error"] = _first_line(exc)
                continue
            outs[mode] = {name: _bytes_of(case["args"][name]) for name in case["outputs"]}
            row[f"{mode}_cvt"] = e4m3_cvt_instructions(compiled[mode])
            if bench:
                from triton.testing import do_bench

                us = do_bench(lambda fn=fn, case=case, sw=mode == "software": _launch(fn, case, sw)) * 1e3
                row[f"{mode}_us"] = round(us, 2)
        section["cases"].append(row)
        if len(outs) < 2:
            continue
        row["outputs"] = {}
        for name in outs["native"]:
            a, b = outs["native"][name], outs["software"][name]
            differ = np.flatnonzero(a != b)
            row["outputs"][name] = {
                "native_only": name in row["native_only"],
                "bytes": int(a.size),
                "differ": int(differ.size),
                "first": [
                    {"byte": int(i), "native": f"0x{a[i]:02x}", "software": f"0x{b[i]:02x}"} for i in differ[:20]
                ],
            }
        row["sm80_compile"] = _compile_for_sm80(compiled["software"])
    return section


def _first_line(exc: BaseException) -> str:
    """An exception's most telling line: the first naming something unsupported, else its first line."""
    lines = [ln.strip() for ln in f"{type(exc).__name__}: {exc}".splitlines() if ln.strip()]
    line = next((ln for ln in lines if "not supported" in ln), lines[0] if lines else type(exc).__name__)
    return line[:300]


def _compile_for_sm80(compiled) -> str:
    """'ok', the error's first 'not supported' line, or 'n/a' in the interpreter: does the software build of the
    kernel, as launched, compile for sm_80?"""
    src = getattr(compiled, "src", None)
    if src is None or not hasattr(src, "fn"):
        return "n/a"
    from triton.backends.compiler import GPUTarget

    try:
        triton.compile(src, target=GPUTarget("cuda", 80, 32), options={"num_warps": compiled.metadata.num_warps})
        return "ok"
    except Exception as exc:  # the finding is the message
        return _first_line(exc)


# --- report ------------------------------------------------------------------------------------------------------


def environment(device: str) -> dict:
    env = {"python": platform.python_version(), "torch": torch.__version__, "triton": triton.__version__}
    env["interpreter"] = bool(triton.knobs.runtime.interpret)
    if device == "cuda":
        env["gpu"] = torch.cuda.get_device_name()
        env["capability"] = list(torch.cuda.get_device_capability())
    return env


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tree", type=Path, help="the folder holding vllm/ of a composed tree (the fused part)")
    ap.add_argument("--module", type=Path, help="e4m3.py to test (default: from the series patch that creates it)")
    ap.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", "e4m3-oracle-out")))
    ap.add_argument("--device", choices=("cuda", "cpu"), default="cuda", help="cpu: the Triton interpreter")
    ap.add_argument("--parts", default="encode,bench,fused", help="comma-separated: encode, bench, fused")
    ap.add_argument("--random", type=int, default=1 << 20, help="random fp32 bit patterns in the encode part")
    ap.add_argument("--tokens", type=int, default=16384, help="bench: tokens (x heads x 128)")
    ap.add_argument("--heads", default="32,64", help="bench: comma-separated head counts")
    ap.add_argument("--fused-tokens", type=int, default=4096)
    ap.add_argument("--q-heads", type=int, default=128, help="fused: MLA query heads")
    ap.add_argument("--index-heads", type=int, default=64, help="fused: indexer heads")
    args = ap.parse_args(argv)
    args.parts = [p for p in args.parts.split(",") if p]
    unknown = set(args.parts) - {"encode", "bench", "fused"}
    if unknown:
        ap.error(f"unknown part(s): {', '.join(sorted(unknown))}")
    if "fused" in args.parts and args.tree is None:
        ap.error("the fused part needs --tree DIR (or leave it out: --parts encode,bench)")
    if args.device == "cpu" and not triton.knobs.runtime.interpret:
        ap.error("--device cpu runs the Triton interpreter: set TRITON_INTERPRET=1 before starting")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        source = module_source(args.module, tree=args.tree)
        bind_e4m3(load_e4m3(source["text"]))
    except (ComposeError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    args.out.mkdir(parents=True, exist_ok=True)
    report: dict = {
        "format": 1,
        "module": {"origin": source["origin"], "sha256": source["sha256"]},
        "environment": environment(args.device),
    }
    if args.tree is not None and (args.tree / E4M3_PATH).is_file():
        tree_text = (args.tree / E4M3_PATH).read_text()
        report["module"]["tree_copy_matches"] = tree_text == source["text"]
    started = time.monotonic()
    ok = True
    if "encode" in args.parts:
        section, arrays = run_encode(input_sets(args.random), args.device)
        report["encode"] = section
        np.savez_compressed(args.out / "e4m3-bytes.npz", **arrays)
        ok &= section["total_mismatches"] == 0
        print(
            f"encode: {section['total']} inputs, {section['total_mismatches']} differ; native {section['native_cvt']}"
        )
        for name, s in section["sets"].items():
            print(
                f"  {name}: {s['count']} inputs, {s['mismatches']} differ ({s['nan_mismatches']} NaN); "
                f"NaN native {s['native_nan_bytes']} software {s['software_nan_bytes']}"
            )
    if "bench" in args.parts:
        if args.device != "cuda":
            report["bench"] = {"skipped": "do_bench needs CUDA"}
        else:
            report["bench"] = run_bench(args.tokens, [int(h) for h in args.heads.split(",")])
            for row in report["bench"]:
                print(f"bench {row}")
    if "fused" in args.parts:
        try:
            report["fused"] = run_fused(
                args.tree, args.device, args.fused_tokens, args.q_heads, args.index_heads, args.device == "cuda"
            )
        except ComposeError as exc:
            print(f"error: {exc}", file=sys.stderr)
            report["fused"] = {"error": str(exc)}
            ok = False
        if "skipped" in report["fused"]:
            print(f"fused: skipped: {report['fused']['skipped']}")
        for row in report["fused"].get("cases", []):
            # counted: every output the series encodes in software; outputs of stores it leaves native (listed
            # as native_only) are reported, and a case holding one may fail in the software run
            errors = {m: row[f"{m}_error"] for m in ("native", "software") if f"{m}_error" in row}
            differ = {k: v["differ"] for k, v in row.get("outputs", {}).items()}
            counted = [v["differ"] for v in row.get("outputs", {}).values() if not v["native_only"]]
            ok &= (not errors or bool(row["native_only"])) and not any(counted)
            print(
                f"fused {row['kernel']} {row['case']}: differ {differ}, errors {errors}, "
                f"sm_80 {row.get('sm80_compile')}, us {row.get('native_us')} / {row.get('software_us')}"
            )
    report["wall_s"] = round(time.monotonic() - started, 1)
    (args.out / "e4m3-oracle.json").write_text(json.dumps(report, indent=1))
    print(f"wrote {args.out / 'e4m3-oracle.json'}")
    return EXIT_AGREE if ok else EXIT_MISMATCH


if __name__ == "__main__":
    sys.exit(main())
