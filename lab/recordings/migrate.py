"""Carry a GPU recording's records of one kernel over to a tree whose kernel's parameters changed.

    python lab/recordings/migrate.py --tree DIR --kernel MODULE:QUALNAME [--set NAME=VALUE ...] --because TEXT
                                     [--where NAME=VALUE ...] [--num-warps N] [--recording FILE]

A series entry that rewrites a recorded kernel's parameters (0040 dropped the paged decode-logits kernel's
`fp8_lut_ptr` and added the constexpr `BLOCKS_PER_PROG`) makes its recorded specializations stale: the compile gate
reports them as such (`kernel_gate.stale_record`) instead of compiling them. Until the next GPU session records the
kernel again, this carries each stale record over (`kernel_gate.migrate_specialization`): every parameter the record
has keeps its recorded type, value and alignment, a new constexpr takes the value `--set` gives (the one the tree's
launcher passes), a dropped parameter is dropped. Where the new value depends on a recorded one (0045's merge
takes `BLOCK_SPLITS`, the recorded `NUM_KV_SPLITS` rounded up to a power of two), `--where NAME=VALUE` carries over
only the records whose constexpr NAME was VALUE, one run per value; `--num-warps` sets the launch's warps where the
launcher changed them. The records it rewrites say so: `"migrated"` holds the recorded
parameter list, the values set and `--because`; the recording's `"migrations"` lists each run. Records that already
fit the tree are left alone, so running it twice changes nothing. The file is replaced atomically, and only after
every stale record of the kernel was carried over and compiled for sm_80 from the tree.
"""

from __future__ import annotations

import argparse
import ast
import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
DEFAULT = HERE.parents[1] / "src" / "vllm_compose" / "ampere" / "recordings" / "composed-v0.26.0-sm80.json"


class MigrateError(Exception):
    """A migration that cannot be made; nothing was written."""


def parse_value(text: str, option: str = "--set"):
    """`--set` values are Python literals (2, True, 'fp32'); anything else is an error, not a string."""
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError) as exc:
        raise MigrateError(f"{option} value {text!r} is not a Python literal (e.g. 2, True, 'x')") from exc


def recorded_constant(spec: dict, name: str):
    """The value a record's constexpr `name` had, or a MigrateError naming the record's constexprs."""
    names = list(spec["signature"])
    const = {names[k[0]]: v for k, v in zip(spec["constant_keys"], spec["constant_vals"], strict=True)}
    if name not in const:
        raise MigrateError(f"--where {name}: the records' constexprs are {sorted(const)}")
    return const[name]


def parse_pairs(option: str, items: list[str]) -> dict:
    """NAME=VALUE items (values Python literals) as a dict; a malformed one is a MigrateError naming the option."""
    out = {}
    for item in items:
        name, sep, text = item.partition("=")
        if not sep or not name:
            raise MigrateError(f"{option} {item!r} is not NAME=VALUE")
        out[name] = parse_value(text, option)
    return out


def migrate(
    recording: Path,
    tree: Path,
    module: str,
    qualname: str,
    values: dict,
    because: str,
    where: dict | None = None,
    num_warps: int | None = None,
) -> int:
    """Rewrite `recording` in place; return how many records were carried over. `where` limits it to the records
    whose recorded constexprs have those values; `num_warps` replaces the records' launch warps."""
    from vllm_compose.ampere.kernel_gate import ReleaseLoader, migrate_specialization, run_gate, stale_record
    from vllm_compose.atomicfile import write_atomically

    data = json.loads(recording.read_text())
    mine = [k for k in data["kernels"] if (k["module"], k["qualname"]) == (module, qualname)]
    if not mine:
        raise MigrateError(f"{recording} holds no record of {module}:{qualname}")
    loader = ReleaseLoader(tree)
    fn = loader.kernel(module, qualname)
    moved = []
    where = where or {}
    for rec in mine:
        if stale_record(fn, rec["specialization"]) is None:
            continue
        if any(recorded_constant(rec["specialization"], k) != v for k, v in where.items()):
            continue
        old = list(rec["specialization"]["signature"])
        rec["specialization"] = migrate_specialization(fn, rec["specialization"], values)
        rec["migrated"] = {"recorded_parameters": old, "set": values, "because": because}
        if where:
            rec["migrated"]["where"] = where
        if num_warps is not None:
            rec["migrated"]["recorded_num_warps"] = rec["specialization"]["options"]["num_warps"]
            rec["specialization"]["options"] = {**rec["specialization"]["options"], "num_warps": num_warps}
        moved.append(rec)
    if not moved:
        return 0
    failed = [r for r in run_gate(moved, tree, targets=((80, 32),), loader=loader) if not r.ok]
    if failed:
        raise MigrateError(
            f"{len(failed)} carried-over record(s) of {qualname} do not compile for sm_80 from {tree}: "
            f"{failed[0].error}; nothing was written"
        )
    run = {"kernel": f"{module}:{qualname}", "records": len(moved), "set": values, "because": because}
    if where:
        run["where"] = where
    if num_warps is not None:
        run["num_warps"] = num_warps
    data.setdefault("migrations", []).append(run)
    write_atomically(recording, json.dumps(data, indent=1))
    return len(moved)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tree", type=Path, required=True, help="folder holding the vllm/ of the changed kernel")
    ap.add_argument("--kernel", required=True, help="MODULE:QUALNAME, as the recording names it")
    ap.add_argument("--set", action="append", default=[], metavar="NAME=VALUE", help="a new constexpr's value")
    ap.add_argument("--because", required=True, help="what changed the kernel (e.g. the series entry)")
    ap.add_argument(
        "--where", action="append", default=[], metavar="NAME=VALUE", help="only records whose constexpr NAME was VALUE"
    )
    ap.add_argument("--num-warps", type=int, help="the launch's warps, where the tree's launcher changed them")
    ap.add_argument("--recording", type=Path, default=DEFAULT)
    args = ap.parse_args(argv)
    from vllm_compose.errors import ComposeError

    try:
        module, sep, qualname = args.kernel.partition(":")
        if not sep or not module or not qualname:
            raise MigrateError(f"--kernel {args.kernel!r} is not MODULE:QUALNAME")
        values, where = parse_pairs("--set", args.set), parse_pairs("--where", args.where)
        if args.num_warps is not None and args.num_warps not in (1, 2, 4, 8, 16, 32):
            raise MigrateError(f"--num-warps {args.num_warps}: a power of two from 1 to 32")
        if not (args.tree / "vllm").is_dir():
            raise MigrateError(f"--tree {args.tree} holds no vllm/ folder")
        n = migrate(args.recording, args.tree, module, qualname, values, args.because, where, args.num_warps)
    except (MigrateError, ComposeError, OSError, ValueError) as exc:
        print(f"migrate: {exc}", file=sys.stderr)
        return 2
    if n:
        print(f"{n} record(s) of {qualname} carried over")
    elif args.where:
        print(f"no stale record of {qualname} where {', '.join(args.where)}")
    else:
        print(f"every record of {qualname} already fits the tree")
    return 0


if __name__ == "__main__":
    sys.exit(main())
