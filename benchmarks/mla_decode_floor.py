"""What a one-row sparse-MLA decode cannot go below on this GPU: the launches and the gather, timed alone.

A one-row call of the sparse-MLA decode (top-k 2,048 latents of 576 bf16, 2.4 MB) is far from the HBM roofline
(0.5 us on an H200) because it is a chain of latencies: two launches (the split pass and the merge), then, in each
program, the indices, the gather they address, the partial rows written and read back. This script times those
links alone, replayed in CUDA graphs with a cold L2 as `dsa_kernels.py` times the kernel (`graph_ms`):

- `launch xN`: N empty Triton kernels of 64 programs each, back to back (the floor of an N-kernel call);
- `gather P programs`: one kernel of P programs, each loading its share of one row's 2,048 indices and gathering the
  576-lane latents they name (random slots over the benchmark's 600,000-slot cache), reduced to one float a program;
  at 64 / 128 programs as the split pass launches them (16 or 32 splits of the 4 head groups of 64 heads), and at
  16 (a program a split, one head group) and 512;
- `partials P x S`: the merge's read alone, P programs each loading S fp32 rows of 128 lanes that an earlier kernel
  of the same graph wrote (L2-resident), as the merge reads the split pass's partial rows;
- `group partials P x S x H`: the read a merge inside the split pass would make, P programs (one a head group: 4 at
  GLM-5 TP1's 64 heads, 8 at DeepSeek-V3.2's 128) each loading its H (16) heads' S partial rows of 512 lanes, as
  the last split program of a head group to finish (found with an atomic counter) would before writing the output.
  That program reads S - 1 of them (its own stay in registers), through one SM.

    python3 benchmarks/mla_decode_floor.py [--sm80-ptx] --out FILE.json

Each row prints its time; the JSON holds them with the GPU's name. A measurement, not a test: it needs a GPU.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "benchmarks"))
sys.path.insert(0, str(REPO / "lab" / "device"))

SLOTS = 600_000
TOPK = 2048
QK_DIM = 576
GATHER_PROGRAMS = (16, 64, 128, 512)
LAUNCHES = (1, 2)
PARTIALS = ((256, 16), (256, 32), (256, 64))
#: (head groups, splits) of `group partials`, each group's HEADS_A_GROUP heads
GROUP_PARTIALS = ((4, 8), (4, 16), (4, 32), (8, 16))
HEADS_A_GROUP = 16
LANES = 512


def group_partials_sums(programs: int, splits: int, heads: int, lanes: int = LANES) -> list[float]:
    """What `read_group_partials` must give each of its `programs` programs after `write_group_partials` (program j
    of `programs * heads` writes j + 1 into each of its `splits` rows of `lanes`): the probe's check that it read every
    row."""
    return [float(splits * lanes * sum(p * heads + h + 1 for h in range(heads))) for p in range(programs)]


def kernels():
    import triton
    import triton.language as tl

    @triton.jit
    def empty(x_ptr, n):
        if n < 0:  # never: the launch alone
            tl.store(x_ptr, 0.0)

    @triton.jit
    def gather(kv_ptr, idx_ptr, out_ptr, QK: tl.constexpr, PER: tl.constexpr, DC: tl.constexpr):
        pid = tl.program_id(0)
        offs = pid * PER + tl.arange(0, PER)
        idx = tl.load(idx_ptr + offs).to(tl.int64)
        rows = kv_ptr + idx[:, None] * QK  # a latent row of QK lanes: four DC chunks and the 64 rope lanes
        lanes = tl.arange(0, DC)
        acc = tl.zeros([PER], dtype=tl.float32)
        for c in tl.static_range(0, 4):
            acc += tl.sum(tl.load(rows + c * DC + lanes[None, :]).to(tl.float32), 1)
        acc += tl.sum(tl.load(rows + 4 * DC + tl.arange(0, 64)[None, :]).to(tl.float32), 1)
        tl.store(out_ptr + pid, tl.sum(acc, 0))

    @triton.jit
    def write_partials(mid_ptr, S: tl.constexpr, ROW: tl.constexpr):
        pid = tl.program_id(0)
        offs = tl.arange(0, S)[:, None] * ROW + tl.arange(0, 128)[None, :]
        tl.store(mid_ptr + pid * S * ROW + offs, tl.zeros([S, 128], dtype=tl.float32) + pid)

    @triton.jit
    def read_partials(mid_ptr, out_ptr, S: tl.constexpr, ROW: tl.constexpr):
        pid = tl.program_id(0)
        offs = tl.arange(0, S)[:, None] * ROW + tl.arange(0, 128)[None, :]
        tile = tl.load(mid_ptr + pid * S * ROW + offs)
        tl.store(out_ptr + pid * 128 + tl.arange(0, 128), tl.sum(tile, 0))

    @triton.jit
    def write_group_partials(mid_ptr, S: tl.constexpr, ROW: tl.constexpr, LANES: tl.constexpr):
        pid = tl.program_id(0)
        offs = tl.arange(0, S)[:, None] * ROW + tl.arange(0, LANES)[None, :]
        tl.store(mid_ptr + pid * S * ROW + offs, tl.zeros([S, LANES], dtype=tl.float32) + (pid + 1))

    @triton.jit
    def read_group_partials(mid_ptr, out_ptr, S: tl.constexpr, H: tl.constexpr, ROW: tl.constexpr,
                            LANES: tl.constexpr):  # fmt: skip
        pid = tl.program_id(0)
        offs = tl.arange(0, S)[:, None] * ROW + tl.arange(0, LANES)[None, :]
        acc = tl.zeros([LANES], dtype=tl.float32)
        for h in tl.static_range(0, H):  # unrolled: the heads' loads are independent and may all be in flight
            acc += tl.sum(tl.load(mid_ptr + (pid * H + h) * S * ROW + offs), 0)
        tl.store(out_ptr + pid, tl.sum(acc, 0))

    return empty, gather, write_partials, read_partials, write_group_partials, read_group_partials


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sm80-ptx", action="store_true", help="build every kernel as sm_80 PTX (lab/device/sm80_ptx.py)")
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args(argv)
    compiled: list[dict] = []
    if args.sm80_ptx:
        from sm80_ptx import enable

        enable(compiled)
    import functools

    import torch
    from dsa_kernels import graph_ms

    empty, gather, write_partials, read_partials, write_group_partials, read_group_partials = kernels()
    bench = functools.partial(graph_ms, torch=torch)
    rows: list[dict] = []

    def record(name: str, ms: float, **extra) -> None:
        rows.append({"name": name, "us": ms * 1e3, **extra})
        print(f"{name:<28} {ms * 1e3:8.2f} us", flush=True)
        doc = {"gpu": torch.cuda.get_device_name(0), "sm80_ptx": args.sm80_ptx, "rows": rows, "compiled": compiled}
        args.out.write_text(json.dumps(doc, indent=1) + "\n")

    x = torch.empty(1, device="cuda")
    for n in LAUNCHES:

        def launches(n=n):
            for _ in range(n):
                empty[(64,)](x, 1)

        record(f"launch x{n}", bench(launches), launches=n, programs=64)

    kv = (torch.randn(SLOTS, QK_DIM, device="cuda") * 0.5).to(torch.bfloat16)
    idx = torch.randint(0, SLOTS, (TOPK,), dtype=torch.int32, device="cuda")
    out = torch.empty(max(GATHER_PROGRAMS), device="cuda")
    for p in GATHER_PROGRAMS:
        per = TOPK // p
        run = functools.partial(gather[(p,)], kv, idx, out, QK=QK_DIM, PER=per, DC=128, num_warps=4)
        record(f"gather {p} programs", bench(run), programs=p, indices_a_program=per, bytes=TOPK * QK_DIM * 2)
        got, want = out[:p].sum().item(), kv[idx.long()].float().sum().item()
        if abs(got - want) > 1e-3 * max(1.0, abs(want)) + 1.0:
            raise SystemExit(f"gather {p} programs: sum {got} != {want}: the probe is wrong, not timed")

    row = 512 + 16
    for p, s in PARTIALS:
        mid = torch.empty(p * s * row, device="cuda")
        red = torch.empty(p * 128, device="cuda")

        def both(p=p, s=s, mid=mid, red=red):
            write_partials[(p,)](mid, S=s, ROW=row, num_warps=4)
            read_partials[(p,)](mid, red, S=s, ROW=row, num_warps=4)

        def write_only(p=p, s=s, mid=mid):
            write_partials[(p,)](mid, S=s, ROW=row, num_warps=4)

        t_both, t_write = bench(both), bench(write_only)
        record(f"partials {p} x {s} (read)", t_both - t_write, programs=p, splits=s, write_us=t_write * 1e3)

    h = HEADS_A_GROUP
    for p, s in GROUP_PARTIALS:
        mid = torch.empty(p * h * s * row, device="cuda")
        red = torch.empty(p, device="cuda")

        def write(p=p, s=s, mid=mid):
            write_group_partials[(p * h,)](mid, S=s, ROW=row, LANES=LANES, num_warps=4)

        def both(p=p, s=s, mid=mid, red=red, write=write):
            write()
            read_group_partials[(p,)](mid, red, S=s, H=h, ROW=row, LANES=LANES, num_warps=8)

        t_both, t_write = bench(both), bench(write)
        got, want = red.tolist(), group_partials_sums(p, s, h)
        if any(abs(g - w) > 1e-5 * w for g, w in zip(got, want, strict=True)):
            raise SystemExit(f"group partials {p} x {s} x {h}: sums {got} != {want}: the probe is wrong, not timed")
        record(
            f"group partials {p} x {s} x {h} (read)",
            t_both - t_write,
            programs=p,
            splits=s,
            heads=h,
            bytes_a_program=h * s * LANES * 4,
            write_us=t_write * 1e3,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
