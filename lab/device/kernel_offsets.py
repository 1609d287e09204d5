"""Drive the compose's DSA Triton kernels past 2**31-element offsets on a GPU, against torch references.

A lab script (the GPU half of series entry fix-dsa-triton-kernels-int64-offsets). The kernels are PR #38476's
`vllm/v1/attention/ops/mqa_logits_triton.py` (the indexer's paged-decode and prefill logits) and
`triton_mla_sparse_kernel.py` (the sparse-MLA attention), the same files in every release's compose. They need only
torch and Triton, so they are loaded from a tree's files under a stand-in `vllm.triton_utils`, without vLLM:

    python3 lab/device/kernel_offsets.py --tree OLD_ROOT --tree NEW_ROOT --out $OUT/kernel_offsets.json

Each (tree, case) runs in its own process: an illegal memory access poisons the CUDA context, so a fault is recorded
as that case's outcome (`fault`, with the exit code and the last lines of its output) and the next case starts
clean. A case passes when every checked output matches the fp32 reference within its tolerance. The cases, each at a
low offset (the control, which must pass on both trees) and past 2**31:

- `paged_decode`: one request, next_n 1 and 2, 32 indexer heads x 128, its blocks at ids 10-17 / 29,990-29,997 of
  a pool of 30,000 blocks with 0009's padded page of 73,728 bytes (block 29,128 is the first past 2**31 bytes);
- `prefill`: M rows x N keys of fp32 logits, 512 x 270,000 / 8,192 x 270,000 (2.2e9 elements > 2**31), rows
  0, 1, M-2, M-1 checked;
- `sparse_mla`: 2 tokens x 64 heads x top-k 2048 over a flat bf16 KV of 3,800,000 slots x 576, the indices at
  slots below 100,000 / from 3,740,000 (slot 3,728,271 is the first past 2**31 elements), single-pass and split-KV
  (`--mla-splits`, default 1,4: the split counts it runs).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import subprocess
import sys
import time
import types
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # sm80_ptx, beside this file
OPS = "vllm/v1/attention/ops"
CASES = [
    "paged_decode:low",
    "paged_decode:high",
    "prefill:low",
    "prefill:high",
    "sparse_mla:low",
    "sparse_mla:high",
]


KERNELS = ("mqa_logits_triton", "triton_mla_sparse_kernel")


def install_vllm_shim(root: Path) -> dict:
    """A stand-in `vllm` package in sys.modules whose `vllm.v1.attention.ops.<kernel>` modules are the tree's files
    at `root` (and `triton_utils`, `platforms.current_platform`, `utils.platform_utils`, `utils.math_utils` enough for
    them and their tests); returns the kernel modules by name."""
    import torch
    import triton
    import triton.language as tl

    def module(name: str, **attrs) -> types.ModuleType:
        mod = types.ModuleType(name)
        mod.__path__ = []  # a package, so submodules resolve through sys.modules
        mod.__dict__.update(attrs)
        sys.modules[name] = mod
        return mod

    platform = types.SimpleNamespace(is_cuda_alike=lambda: True, is_cuda=lambda: True, device_type="cuda")
    for name in ("vllm", "vllm.utils", "vllm.v1", "vllm.v1.attention", "vllm.v1.attention.ops"):
        module(name)
    module("vllm.triton_utils", tl=tl, triton=triton, LOG2E=1.4426950408889634, LOGE2=0.6931471805599453)
    module("vllm.platforms", current_platform=platform)
    module("vllm.utils.math_utils", cdiv=lambda a, b: -(-a // b))
    module(
        "vllm.utils.platform_utils",
        num_compute_units=lambda index=0: torch.cuda.get_device_properties(index or 0).multi_processor_count,
    )
    mods = {}
    for name in KERNELS:
        full = f"vllm.v1.attention.ops.{name}"
        spec = importlib.util.spec_from_file_location(full, root / OPS / f"{name}.py")
        mod = importlib.util.module_from_spec(spec)
        sys.modules[full] = mod
        spec.loader.exec_module(mod)
        mods[name] = mod
    return mods


def load_kernels(root: Path) -> dict:
    """The two kernel modules of the tree at `root` (see `install_vllm_shim`)."""
    return install_vllm_shim(root)


def _compare(got, want, atol: float, rtol: float) -> dict:
    import torch

    got, want = got.float(), want.float()
    finite = torch.isfinite(want)
    same_inf = torch.equal(torch.isfinite(got), finite)
    diff = (got[finite] - want[finite]).abs()
    err = float(diff.max()) if diff.numel() else 0.0
    scale = float(want[finite].abs().max()) if diff.numel() else 0.0
    ok = same_inf and bool((diff <= atol + rtol * want[finite].abs()).all())
    return {"ok": ok, "max_abs_err": err, "max_abs_ref": scale, "same_masked": same_inf}


def case_paged_decode(mods, where: str) -> dict:
    import torch

    torch.manual_seed(0)
    dev = "cuda"
    heads, dim, bs, page = 32, 128, 64, 73_728
    num_blocks = 30_000
    first = 10 if where == "low" else 29_990
    blocks = torch.arange(first, first + 8, dtype=torch.int32, device=dev)
    ctx = bs * 8
    pool = torch.zeros(num_blocks, page, dtype=torch.uint8, device=dev)
    k = (torch.randn(8, bs, dim, device=dev) * 0.5).to(torch.float8_e4m3fn)
    scale = torch.rand(8, bs, device=dev) + 0.5
    rows = pool[blocks.long()]
    rows[:, : bs * dim] = k.view(torch.uint8).reshape(8, -1)
    rows[:, bs * dim : bs * dim + bs * 4] = scale.view(torch.uint8).reshape(8, -1)
    pool[blocks.long()] = rows
    kv_cache = pool[:, : bs * (dim + 4)].view(num_blocks, bs, 1, dim + 4)  # 0009: the page is padded
    out = {"first_block": first, "byte_offset_of_first": first * page}
    for next_n in (1, 2):
        q = (torch.randn(1, next_n, heads, dim, device=dev) * 0.5).to(torch.float8_e4m3fn)
        w = torch.rand(next_n, heads, device=dev)
        got = mods["mqa_logits_triton"].fp8_paged_mqa_logits_triton(
            q, kv_cache, w, torch.tensor([ctx], dtype=torch.int32, device=dev), blocks[None, :], max_model_len=ctx
        )
        torch.cuda.synchronize()
        kf = (k.float() * scale[..., None]).reshape(ctx, dim)
        s = torch.einsum("nhd,kd->nhk", q[0].float(), kf).clamp_min(0)
        want = (s * w[..., None]).sum(1)
        pos = torch.arange(ctx, device=dev)
        for j in range(next_n):
            want[j, pos > ctx - next_n + j] = float("-inf")
        out[f"next_n={next_n}"] = _compare(got, want, atol=1e-2, rtol=1e-2)
    return out


def case_prefill(mods, where: str) -> dict:
    import torch

    torch.manual_seed(0)
    dev = "cuda"
    heads, dim = 32, 128
    m_rows, n_keys = (512 if where == "low" else 8_192), 270_000
    q = (torch.randn(m_rows, heads, dim, device=dev) * 0.5).to(torch.float8_e4m3fn)
    k = (torch.randn(n_keys, dim, device=dev) * 0.5).to(torch.float8_e4m3fn)
    ks_scale = torch.rand(n_keys, device=dev) + 0.5
    w = torch.rand(m_rows, heads, device=dev)
    ks = torch.zeros(m_rows, dtype=torch.int32, device=dev)
    ke = torch.linspace(n_keys // 2, n_keys, m_rows, device=dev).to(torch.int32)
    got = mods["mqa_logits_triton"].fp8_mqa_logits_triton(q, (k, ks_scale), w, ks, ke)
    torch.cuda.synchronize()
    out = {"elements": m_rows * n_keys, "past_2_31": m_rows * n_keys > 2**31}
    for row in (0, 1, m_rows - 2, m_rows - 1):
        s = (q[row].float() @ k.float().T * ks_scale).clamp_min(0)
        want = (s * w[row, :, None]).sum(0)
        want[int(ke[row]) :] = float("-inf")
        out[f"row {row}"] = _compare(got[row], want, atol=1e-2, rtol=1e-2)
    return out


def case_sparse_mla(mods, where: str, splits_list: tuple[int, ...] = (1, 4)) -> dict:
    import torch

    torch.manual_seed(0)
    dev = "cuda"
    tokens, heads, topk, slots = 2, 64, 2048, 3_800_000
    kv = torch.empty(slots, 1, 576, dtype=torch.bfloat16, device=dev)
    lo = 0 if where == "low" else 3_740_000
    picked = torch.stack([torch.randperm(50_000, device=dev)[:topk] + lo for _ in range(tokens)]).to(torch.int32)
    kv[picked.long().flatten()] = (torch.randn(tokens * topk, 1, 576, device=dev) * 0.5).to(torch.bfloat16)
    q = (torch.randn(tokens, heads, 576, device=dev) * 0.5).to(torch.bfloat16)
    indices = picked[:, None, :].contiguous()
    indices[:, :, -16:] = -1  # padding the kernel must skip
    sm_scale = 1 / math.sqrt(192 + 64)
    sel = kv[picked.long(), 0].float()  # [T, topk, 576]
    s = torch.einsum("thd,tkd->thk", q.float(), sel) * sm_scale
    s[:, :, -16:] = float("-inf")
    want = torch.einsum("thk,tkd->thd", s.softmax(-1), sel[..., :512])
    out = {"first_slot": lo, "element_offset_of_first": lo * 576}
    for splits in splits_list:
        got = mods["triton_mla_sparse_kernel"].triton_mla_sparse_attention(
            q, kv, indices, sm_scale, num_kv_splits=splits
        )
        torch.cuda.synchronize()
        out[f"splits={splits}"] = _compare(got, want, atol=2e-2, rtol=2e-2)
    return out


def run_one(root: Path, case: str, sm80_ptx: bool = False, mla_splits: tuple[int, ...] = (1, 4)) -> dict:
    kind, where = case.split(":")
    compiled: list[dict] = []
    if sm80_ptx:
        from sm80_ptx import enable

        enable(compiled)
    mods = load_kernels(root)
    t0 = time.time()
    if kind == "sparse_mla":
        result = case_sparse_mla(mods, where, mla_splits)
    else:
        result = {"paged_decode": case_paged_decode, "prefill": case_prefill}[kind](mods, where)
    checks = [v for v in result.values() if isinstance(v, dict)]
    outcome = "pass" if all(c["ok"] for c in checks) else "mismatch"
    return {"outcome": outcome, "seconds": time.time() - t0, "sm80_ptx": sm80_ptx, "compiled": compiled, **result}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tree", action="append", type=Path, required=True, help="a tree root holding vllm/ (repeat)")
    ap.add_argument("--case", choices=CASES, action="append", help="default: all")
    ap.add_argument(
        "--sm80-ptx", action="store_true", help="compile for sm_80 and assemble that PTX (lab/device/sm80_ptx.py)"
    )
    ap.add_argument("--mla-splits", default="1,4", help="split counts of the sparse_mla cases, e.g. 1,16,64")
    ap.add_argument("--one", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    try:
        mla_splits = tuple(int(s) for s in args.mla_splits.split(","))
    except ValueError:
        ap.error(f"--mla-splits {args.mla_splits!r}: want split counts, e.g. 1,16,64")
    if args.one:
        print("RESULT " + json.dumps(run_one(args.tree[0], args.case[0], args.sm80_ptx, mla_splits)), flush=True)
        return 0
    results = []
    for root in args.tree:
        for case in args.case or CASES:
            cmd = [sys.executable, __file__, "--one", "--tree", str(root), "--case", case]
            cmd += ["--sm80-ptx"] if args.sm80_ptx else []
            cmd += ["--mla-splits", args.mla_splits]
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
            lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
            if proc.returncode == 0 and lines:
                row = json.loads(lines[-1][7:])
            else:
                tail = (proc.stdout + proc.stderr).strip().splitlines()[-6:]
                row = {"outcome": "fault", "returncode": proc.returncode, "tail": tail}
            row.update(tree=str(root), case=case)
            results.append(row)
            print(f"{root} {case}: {row['outcome']}", flush=True)
    if args.out:
        args.out.write_text(json.dumps({"results": results}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
