"""Run a composed tree's DSA Triton kernels on seeded inputs and save inputs and outputs
(tests/tool/test_dsa_oracle.py).

Started by the test in a subprocess with TRITON_INTERPRET=1, so that the kernels run in Triton's interpreter on a
CPU (the interpreter must be on before the kernels are decorated, and must not leak into other tests' Triton use):

    TRITON_INTERPRET=1 python tests/dsa_kernels_interpreted.py --tree ROOT --out FILE.pt

ROOT holds vllm/v1/attention/ops/{mqa_logits_triton,triton_mla_sparse_kernel}.py; they are loaded without vLLM
through lab/device/kernel_offsets.py's `install_vllm_shim`. This script computes no reference: the test does, with
`vllm_compose.proof.dsa_oracle`, in its own process. Each autotuned kernel runs with its first config only (the
interpreter would otherwise run every config to time it, for the same result); the config is saved with the run.

Two limits of Triton 3.6's interpreter are corrected in the interpreter (never in the kernels), each function
saying why: bf16 `tl.dot` operands (multiplied as bit patterns) and 1-element loop bounds (refused by `range`).

The planted faults run the same kernels on wrong inputs, as a release bug would feed them: the paged logits with
two block-table entries swapped, the sparse MLA with every index shifted by one slot.

The fp8 codes case feeds the paged logits every E4M3FN code, once in the keys and once in the queries, on inputs
built so that each logit is one decoded code exactly (a +1 and a -1 head weighted +1 and -1: relu(x) - relu(-x) = x);
the test holds them against the lookup table PR #38476's kernel decodes through (0x7f / 0xff read as +-480).
`--paged-only` runs only the paged-logits cases, for a tree holding mqa_logits_triton.py alone. `--sparse-heads 8,20,64`
runs only the sparse-MLA cases of `SPARSE_BY_HEADS`, at each head count, for a tree holding
triton_mla_sparse_kernel.py alone (the candidate kernel of lab/candidates/, tests/lab/test_candidate_sparse_mla.py);
`--sparse-many-splits` only the case `SPARSE_MANY_SPLITS` (the real top-k in 32 and 64 splits).
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parent.parent

#: paged decode: 2 requests x next_n 2, 8 heads x 64 (BLOCK_H pads to 16), blocks of 16 tokens on a padded page;
#: context lengths not multiples of the block size, blocks scattered and out of order in the pool
DECODE = dict(heads=8, dim=64, block_size=16, next_n=2, context_lens=(37, 50), page_bytes=1280, num_blocks=12)
DECODE_BLOCKS = ((7, 2, 9, 0), (4, 11, 1, 6))
#: prefill: two requests' rows over one flat key array (keys 0-19 request A, 20-43 request B), causal [ks, ke)
PREFILL = dict(heads=8, dim=64, ks=(0, 0, 0, 20, 20, 20, 20), ke=(18, 19, 20, 41, 42, 43, 44), n=44)
#: sparse MLA: 3 tokens x 20 heads (two head groups of 16, the second partly masked) over 300 slots, top-k 32,
#: token 1 with its last 7 indices -1, token 2 with none valid but one (so its second split-KV half is empty). The
#: single-pass kernel and split-KV with 2 splits (split kernel + merge kernel); an error of the latter is saved for
#: the test's skip reason rather than ending the run
SPARSE = dict(tokens=3, heads=20, slots=300, topk=32, sm_scale=0.0416)

#: sparse MLA at one head count (`--sparse-heads`): 4 tokens over 300 slots, top-k 64, so that the first autotune
#: config's BLOCK_N of 32 or 16 takes several tiles and 4 splits cut a tile. Token 0 selects the last slot and one
#: slot twice; token 1 has its last 23 indices -1 (its fourth split of 16 is all -1); token 2 has none valid (out 0);
#: token 3 has one valid index, at top-k slot 40 (out is that slot's value row exactly). Single-pass, 2, 3 and 4
#: splits, the wrapper's own split choice at `sm_count`, and the planted fault: every index one slot on, mod 300
SPARSE_BY_HEADS = dict(tokens=4, slots=300, topk=64, sm_scale=0.0416, sm_count=132)
#: sparse MLA split many ways (`--sparse-many-splits`): 3 tokens x 8 heads (one program of 16, 8 heads masked) at the
#: real top-k, 2,048 over 3,000 slots. Token 0 selects the last slot and one slot twice, and its last 700 indices are
#: -1 (at 64 splits of 32, splits 43-63 hold none); token 1 has none valid (out 0); token 2 one valid index, at top-k
#: position 2,000 (split 62 of 64: out is that slot's value row exactly). 64 splits (32 indices a split: the most the
#: candidate's policy makes of top-k 2048) and the policy's own choice with `MANY_SPLITS_POLICY` set at an A100's 108
#: SMs (3 programs, 32 splits: 3 x 32 covers 3/4 of 108); the planted fault at 64 splits
SPARSE_MANY_SPLITS = dict(tokens=3, heads=8, slots=3000, topk=2048, sm_scale=0.0416, sm_count=108, slot=1234)
#: the split policy `--sparse-many-splits` sets on a kernel module that has its attributes (the candidate)
MANY_SPLITS_POLICY = {"_MAX_KV_SPLITS": 64, "_MIN_TOPK_PER_SPLIT": 32, "_SPLIT_MIN_FILL": 0.75}
#: (tokens, head groups, top-k, SMs) the split heuristic of a tree with `_choose_num_kv_splits` is asked about
SPLIT_QUESTIONS = (
    (64, 1, 2048, 132),
    (64, 2, 2048, 132),
    (32, 1, 2048, 132),
    (8, 1, 2048, 132),
    (1, 1, 2048, 132),
    (64, 1, 2048, 108),
    (1, 1, 256, 132),
    (200, 1, 2048, 132),
)


def kernel_tree(root: Path, **modules: str) -> Path:
    """A tree under `root` holding vllm/v1/attention/ops/<name>.py for each keyword (its text), and the other of the
    two DSA kernel modules empty (the loader wants both; a run that never calls a module needs nothing in it)."""
    ops = root / "vllm" / "v1" / "attention" / "ops"
    ops.mkdir(parents=True)
    for name in ("mqa_logits_triton", "triton_mla_sparse_kernel"):
        (ops / f"{name}.py").write_text(modules.get(name, ""))
    return root


def run_interpreted(tree: Path, out: Path, *flags: str, timeout: int = 600) -> dict:
    """For the tests: this script on `tree` in a subprocess under TRITON_INTERPRET=1 (with `flags`, e.g.
    `--paged-only`); returns the run it saved to `out`. Fails with the end of its stderr when it exits non-zero."""
    import os
    import subprocess

    env = {**os.environ, "TRITON_INTERPRET": "1"}
    cmd = [sys.executable, str(Path(__file__).resolve()), "--tree", str(tree), "--out", str(out), *flags]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, f"the interpreted kernels of {tree} {list(flags)} failed:\n{proc.stderr[-3000:]}"
    return torch.load(out, weights_only=False)


def _kernels(tree: Path) -> dict:
    spec = importlib.util.spec_from_file_location("kernel_offsets", REPO / "lab" / "device" / "kernel_offsets.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.install_vllm_shim(tree)


def _widen_bf16_dot_operands() -> str:
    """Make the interpreter's `tl.dot` multiply bf16 operands by value; returns what was changed, for the record.

    Triton 3.6's interpreter keeps bf16 as uint16 bit patterns and its `create_dot` hands those to `np.matmul`
    unconverted (only 8-bit floats are widened), so a bf16 `tl.dot` returns products of the raw bits (seen: errors
    of 2.6e10 on a 16 x 16 product of unit-scale values). A GPU's bf16 MMA multiplies exactly and accumulates in
    fp32; widening both operands to fp32 before the product does the same, up to summation order. The kernels
    under test are not touched: this corrects the simulator."""
    import numpy as np
    import triton.language as tl
    from triton.runtime import interpreter

    original = interpreter.InterpreterBuilder.create_dot

    def create_dot(self, a, b, d, input_precision, max_num_imprecise_acc):
        def widen(x):
            if x.dtype.scalar == tl.bfloat16:
                data = interpreter._convert_float(x.data, tl.bfloat16, tl.float32, None).view(np.float32)
                return interpreter.TensorHandle(data, tl.float32)
            return x

        return original(self, widen(a), widen(b), d, input_precision, max_num_imprecise_acc)

    interpreter.InterpreterBuilder.create_dot = create_dot
    return "bf16 tl.dot operands widened to fp32 (Triton interpreter create_dot multiplies bf16 bit patterns)"


def _scalar_loop_bounds() -> str:
    """Let the interpreter take a 1-element tensor as a loop bound; returns what was changed, for the record.

    In compiled Triton `tl.minimum` of two scalars is a scalar; Triton 3.6's interpreter keeps it as a 1-element
    array, and its `tensor.__index__` (`int(array)`) refuses that, so `range(split_start, split_end, BLOCK_N)` in the
    split-KV sparse-MLA kernel cannot run ("only 0-dimensional arrays can be converted to Python scalars"). Reading
    the array's one element is what the compiled kernel does. The kernels under test are not touched."""
    from triton.runtime import interpreter

    original = interpreter._patch_lang_tensor

    def patch_lang_tensor(tensor, scope):
        original(tensor, scope)

        def index(self):
            data = self.handle.data
            return int(data.reshape(())) if data.size == 1 else int(data)

        scope.set_attr(tensor, "__index__", index)

    interpreter._patch_lang_tensor = patch_lang_tensor
    return "a 1-element tensor taken as a scalar loop bound (Triton interpreter tensor.__index__)"


def _first_config_only(module) -> dict:
    """Cut each autotuner in `module` to its first config; returns {kernel: config text}."""
    from triton.runtime.autotuner import Autotuner

    chosen = {}
    for name, obj in vars(module).items():
        if isinstance(obj, Autotuner):
            obj.configs = obj.configs[:1]
            chosen[name] = str(obj.configs[0])
    return chosen


def _paged_decode(mods: dict, g: torch.Generator) -> dict:
    p = DECODE
    bs, d, h, nn = p["block_size"], p["dim"], p["heads"], p["next_n"]
    pool = torch.zeros(p["num_blocks"], p["page_bytes"], dtype=torch.uint8)
    for ctx, blocks in zip(p["context_lens"], DECODE_BLOCKS, strict=True):
        k = (torch.randn(ctx, d, generator=g) * 0.7).to(torch.float8_e4m3fn)
        scale = torch.rand(ctx, generator=g) + 0.25
        for i, b in enumerate(blocks):
            rows = slice(i * bs, min(ctx, (i + 1) * bs))
            n = rows.stop - rows.start
            if n <= 0:
                break
            pool[b, : n * d] = k[rows].view(torch.uint8).reshape(-1)
            pool[b, bs * d : bs * d + n * 4] = scale[rows].view(torch.uint8).reshape(-1)
    kv_cache = pool[:, : bs * (d + 4)].view(p["num_blocks"], bs, 1, d + 4)  # the padded page, as entry 0009 has it
    b = len(p["context_lens"])
    q = (torch.randn(b, nn, h, d, generator=g) * 0.7).to(torch.float8_e4m3fn)
    w = torch.rand(b * nn, h, generator=g) - 0.3  # some heads weigh negatively, as trained weights do
    lens = torch.tensor(p["context_lens"], dtype=torch.int32)
    table = torch.tensor(DECODE_BLOCKS, dtype=torch.int32)
    width = max(p["context_lens"])
    run = mods["mqa_logits_triton"].fp8_paged_mqa_logits_triton
    logits = run(q, kv_cache, w, lens, table, max_model_len=width)
    swapped = table.clone()
    swapped[1, [0, 1]] = swapped[1, [1, 0]]  # fault: request 1 reads its first two blocks in the wrong order
    faulty = run(q, kv_cache, w, lens, swapped, max_model_len=width)
    return dict(q=q, pool=pool, weights=w, context_lens=lens, block_table=table, logits=logits, faulty=faulty)


def _code_pool(num_blocks: int, block_size: int, dim: int, keys: torch.Tensor, tables: list[list[int]]) -> torch.Tensor:
    """A padded-page cache holding `keys` (uint8 codes, [N, dim], requests one after the other) at scale 1.0."""
    page = block_size * (dim + 4) + 192
    pool = torch.zeros(num_blocks, page, dtype=torch.uint8)
    one = torch.ones(block_size, dtype=torch.float32).view(torch.uint8)
    at = 0
    for blocks, n in tables:
        for i, b in enumerate(blocks[: -(-n // block_size)]):
            rows = keys[at + i * block_size : at + min(n, (i + 1) * block_size)]
            pool[b, : rows.numel()] = rows.reshape(-1)
            pool[b, block_size * dim : block_size * (dim + 4)] = one
        at += n
    return pool[:, : block_size * (dim + 4)].view(num_blocks, block_size, 1, dim + 4)


def _fp8_codes(mods: dict) -> dict:
    """Every E4M3FN code through the paged logits, as keys and as queries; each logit is one code's value."""
    run = mods["mqa_logits_triton"].fp8_paged_mqa_logits_triton
    bs, d = 16, 64
    codes = torch.arange(256, dtype=torch.uint8)
    plus_minus = torch.tensor([0x38, 0xB8], dtype=torch.uint8)  # +1.0, -1.0
    w = torch.tensor([1.0, -1.0])
    # keys: code n at dim 0 of key n; request 0 holds codes 0..229 (15 blocks; its 16th table entry is stale and
    # points far outside the cache, as a freed block's may), request 1 codes 230..255 (2 blocks)
    keys = torch.zeros(256, d, dtype=torch.uint8)
    keys[:, 0] = codes
    table = [[3, 17, 0, 9, 12, 5, 19, 1, 14, 7, 10, 2, 16, 4, 11, 1 << 20], [8, 18] + [0] * 14]
    pool = _code_pool(20, bs, d, keys, [(table[0], 230), (table[1], 26)])
    q = torch.zeros(2, 1, 2, d, dtype=torch.uint8)
    q[:, 0, :, 0] = plus_minus
    lens = torch.tensor([230, 26], dtype=torch.int32)
    by_key = run(q.view(torch.float8_e4m3fn), pool, w.repeat(2, 1), lens, torch.tensor(table, dtype=torch.int32), 230)
    # queries: code 64 r + j at dim j of row r's first head, its negation on the second; key j is the unit vector
    # at dim j (4 requests x next_n 1, 64 keys each, one shared set of 4 blocks)
    unit = torch.zeros(d, d, dtype=torch.uint8)
    unit[torch.arange(d), torch.arange(d)] = 0x38
    upool = _code_pool(6, bs, d, unit, [([5, 2, 0, 3], d)])
    qc = torch.zeros(4, 1, 2, d, dtype=torch.uint8)
    qc[:, 0, 0, :] = codes.view(4, d)
    qc[:, 0, 1, :] = codes.view(4, d) ^ 0x80
    utable = torch.tensor([[5, 2, 0, 3]] * 4, dtype=torch.int32)
    ulens = torch.full((4,), d, dtype=torch.int32)
    by_query = run(qc.view(torch.float8_e4m3fn), upool, w.repeat(4, 1), ulens, utable, d)
    return dict(by_key=torch.cat([by_key[0, :230], by_key[1, :26]]), by_query=by_query.reshape(-1))


#: the tree's decoder while `_decode_table` runs (the interpreter runs a kernel's source with its module's globals,
#: not its closure)
_TREE_DECODE = None


def _decode_table(mods: dict) -> torch.Tensor | None:
    """The tree's bit-placement decoder (`_decode_e4m3fn_fp16_scaled`, series entry 0040) over all 256 codes, as
    the fp16 it returns; None for a tree whose kernel has none (it decodes through the table)."""
    global _TREE_DECODE
    _TREE_DECODE = getattr(mods["mqa_logits_triton"], "_decode_e4m3fn_fp16_scaled", None)
    if _TREE_DECODE is None:
        return None
    import triton
    import triton.language as tl

    @triton.jit
    def table(src, dst):
        offs = tl.arange(0, 256)
        tl.store(dst + offs, _TREE_DECODE(tl.load(src + offs)))

    out = torch.empty(256, dtype=torch.float16)
    table[(1,)](torch.arange(256, dtype=torch.uint8), out)
    return out


def _prefill(mods: dict, g: torch.Generator) -> dict:
    p = PREFILL
    m = len(p["ks"])
    q = (torch.randn(m, p["heads"], p["dim"], generator=g) * 0.7).to(torch.float8_e4m3fn)
    k = (torch.randn(p["n"], p["dim"], generator=g) * 0.7).to(torch.float8_e4m3fn)
    scale = torch.rand(p["n"], generator=g) + 0.25
    w = torch.rand(m, p["heads"], generator=g) - 0.3
    ks, ke = torch.tensor(p["ks"], dtype=torch.int32), torch.tensor(p["ke"], dtype=torch.int32)
    logits = mods["mqa_logits_triton"].fp8_mqa_logits_triton(q, (k, scale), w, ks, ke)
    return dict(q=q, k=k, k_scale=scale, weights=w, ks=ks, ke=ke, logits=logits)


def _sparse_inputs(g: torch.Generator, t: int, h: int, s: int, topk: int, drawn_from: int | None = None):
    """Random bf16 queries [t, h, 576] and latent cache [s, 1, 576], and each token's `topk` distinct slots drawn
    from the first `drawn_from` (default all `s`), int32 [t, topk]; drawn in that order from `g`."""
    q = torch.randn(t, h, 576, generator=g).to(torch.bfloat16)
    kv = torch.randn(s, 1, 576, generator=g).to(torch.bfloat16)
    n = s if drawn_from is None else drawn_from
    idx = torch.stack([torch.randperm(n, generator=g)[:topk] for _ in range(t)]).to(torch.int32)
    return q, kv, idx


def _sparse_mla(mods: dict, g: torch.Generator) -> dict:
    p = SPARSE
    t, h, s, topk = p["tokens"], p["heads"], p["slots"], p["topk"]
    q, kv, idx = _sparse_inputs(g, t, h, s, topk, drawn_from=s - 1)
    idx[1, -7:] = -1
    idx[2, 1:] = -1
    indices = idx[:, None, :].contiguous()
    run = mods["triton_mla_sparse_kernel"].triton_mla_sparse_attention
    out = {"out": run(q, kv, indices, p["sm_scale"], num_kv_splits=1)}
    try:
        out["out_split2"] = run(q, kv, indices, p["sm_scale"], num_kv_splits=2)
    except Exception as exc:  # noqa: BLE001 - the interpreter's limit is recorded for the test's skip reason
        out["split2_error"] = f"{type(exc).__name__}: {exc}"
    shifted = torch.where(indices >= 0, indices + 1, indices)  # fault: every index one slot on (randperm < s - 1)
    out["faulty"] = run(q, kv, shifted, p["sm_scale"], num_kv_splits=1)
    return dict(q=q, kv=kv, indices=indices, sm_scale=p["sm_scale"], **out)


def _sparse_mla_heads(mods: dict, g: torch.Generator, heads: int) -> dict:
    """The `SPARSE_BY_HEADS` case at `heads` query heads: inputs, outputs of each path, the planted fault."""
    p = SPARSE_BY_HEADS
    t, s, topk = p["tokens"], p["slots"], p["topk"]
    q, kv, idx = _sparse_inputs(g, t, heads, s, topk)
    idx[0, 0], idx[0, 9] = s - 1, idx[0, 5]
    idx[1, -23:] = -1
    idx[2, :] = -1
    idx[3, :] = -1
    idx[3, 40] = 123
    indices = idx[:, None, :].contiguous()
    run = mods["triton_mla_sparse_kernel"].triton_mla_sparse_attention
    # 3 splits: not a power of two (22, 22 and 20 indices), which a merge over a power-of-two tile of splits masks
    out = {f"splits_{n}": run(q, kv, indices, p["sm_scale"], num_kv_splits=n) for n in (1, 2, 3, 4)}
    out["splits_auto"] = run(q, kv, indices, p["sm_scale"], sm_count=p["sm_count"])
    shifted = torch.where(indices >= 0, (indices + 1) % s, indices)
    out["faulty"] = run(q, kv, shifted, p["sm_scale"], num_kv_splits=1)
    return dict(q=q, kv=kv, indices=indices, sm_scale=p["sm_scale"], outputs=out)


def _sparse_mla_many_splits(mods: dict, g: torch.Generator) -> dict:
    """The `SPARSE_MANY_SPLITS` case: inputs, the outputs at 64 splits and at the policy's choice, the fault."""
    p = SPARSE_MANY_SPLITS
    t, h, s, topk = p["tokens"], p["heads"], p["slots"], p["topk"]
    q, kv, idx = _sparse_inputs(g, t, h, s, topk)
    idx[0, 0], idx[0, 9] = s - 1, idx[0, 5]
    idx[0, -700:] = -1
    idx[1, :] = -1
    idx[2, :] = -1
    idx[2, 2000] = p["slot"]
    indices = idx[:, None, :].contiguous()
    mod = mods["triton_mla_sparse_kernel"]
    run = mod.triton_mla_sparse_attention
    out = {"splits_64": run(q, kv, indices, p["sm_scale"], num_kv_splits=64)}
    if all(hasattr(mod, name) for name in MANY_SPLITS_POLICY):
        for name, value in MANY_SPLITS_POLICY.items():
            setattr(mod, name, value)
        chosen = mod._choose_num_kv_splits(t, 1, topk, p["sm_count"])
        out["splits_policy"] = run(q, kv, indices, p["sm_scale"], sm_count=p["sm_count"])
    else:
        chosen = None
    shifted = torch.where(indices >= 0, (indices + 1) % s, indices)
    out["faulty"] = run(q, kv, shifted, p["sm_scale"], num_kv_splits=64)
    return dict(q=q, kv=kv, indices=indices, sm_scale=p["sm_scale"], outputs=out, policy_splits=chosen)


def _split_choices(mods: dict) -> dict:
    """The tree's split count for each of SPLIT_QUESTIONS, and heads per program for a few head counts where the
    tree has `_block_h` (the candidate kernel)."""
    mod = mods["triton_mla_sparse_kernel"]
    answers = {"splits": {q: mod._choose_num_kv_splits(*q) for q in SPLIT_QUESTIONS}}
    if hasattr(mod, "_block_h"):
        answers["block_h"] = {h: mod._block_h(h) for h in (1, 8, 16, 20, 64, 100, 128)}
    return answers


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tree", type=Path, required=True)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--paged-only", action="store_true", help="run only the paged decode logits cases")
    ap.add_argument("--sparse-heads", default="", help="e.g. 8,20,64: run only the sparse-MLA cases at these heads")
    ap.add_argument("--sparse-many-splits", action="store_true", help="run only the sparse MLA at 32 and 64 splits")
    args = ap.parse_args(argv)
    patch = [_widen_bf16_dot_operands(), _scalar_loop_bounds()]
    mods = _kernels(args.tree)
    configs = {name: _first_config_only(mod) for name, mod in mods.items()}
    g = torch.Generator().manual_seed(20261202)
    if args.sparse_many_splits:
        case = _sparse_mla_many_splits(mods, g)
        torch.save(dict(configs=configs, interpreter_patch=patch, sparse_many_splits=case), args.out)
        return 0
    if args.sparse_heads:
        heads = [int(h) for h in args.sparse_heads.split(",")]
        cases = {h: _sparse_mla_heads(mods, g, h) for h in heads}
        result = dict(configs=configs, interpreter_patch=patch, sparse_by_heads=cases, **_split_choices(mods))
        torch.save(result, args.out)
        return 0
    result = dict(configs=configs, interpreter_patch=patch, paged_decode=_paged_decode(mods, g))
    if not args.paged_only:
        result.update(prefill=_prefill(mods, g), sparse_mla=_sparse_mla(mods, g))
    result["fp8_codes"] = _fp8_codes(mods)
    result["decode_table"] = _decode_table(mods)
    torch.save(result, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
