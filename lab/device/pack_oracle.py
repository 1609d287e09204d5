"""GPU check of series entry 0030: the indexer's ragged-decode Q pack, fp8 as before vs uint8 as the compose does.

On an sm_89+ GPU both compile, so they can be compared: `pack_seq_triton(q_fp8, lens)` (the release's call: fp8
tensor, pad -inf) and `pack_seq_triton(q_fp8.view(torch.uint8), lens, pad_value=0).view(fp8)` (0030). The bytes of
the real tokens must be equal; the padded slots differ by design (pad byte 0 against the fp8 conversion of -inf),
and context_lens masks them downstream. Loads `pack_seq_triton` from a vLLM tree with kernel_gate's loader (no vLLM
import). Writes $OUT/pack-oracle.json; exit 0 when every real-token byte agrees.

    python3 lab/device/pack_oracle.py --tree DIR      # the folder holding vllm/
"""

import argparse
import json
import os
import sys
from pathlib import Path

# the device machine runs this from a copy of the working tree, where vllm_compose is not installed
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "src"))

import torch  # noqa: E402

from vllm_compose.ampere.kernel_gate import ReleaseLoader  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tree", required=True, type=Path)
    args = ap.parse_args()
    loader = ReleaseLoader(args.tree)
    module = "vllm.v1.attention.ops.common"
    ns = loader.namespace(module)
    loader.resolve(module, {"pack_seq_triton", "torch", "triton", "tl"})
    for name in [n for n in ns if n.startswith("_pack") or "PACK" in n]:
        loader.resolve(module, {name})
    pack = ns["pack_seq_triton"]
    gen = torch.Generator(device="cuda").manual_seed(0)
    rows = []
    ok = True
    for heads, lens in ((32, [1, 2, 2, 1, 3, 2]), (64, [2, 3, 1, 3]), (32, [4, 1, 2, 3, 4, 1, 2, 3])):
        lengths = torch.tensor(lens, dtype=torch.int32, device="cuda")
        tokens = sum(lens)
        q = (torch.randn(tokens, heads, 128, device="cuda", generator=gen) * 100).to(torch.float8_e4m3fn)
        before = pack(q, lengths).view(torch.uint8)
        after = pack(q.view(torch.uint8), lengths, pad_value=0).view(torch.float8_e4m3fn).view(torch.uint8)
        real = torch.zeros(before.shape[:2], dtype=torch.bool, device="cuda")
        for b, n in enumerate(lens):
            real[b, :n] = True
        differ_real = int((before[real] != after[real]).sum())
        pad_bytes_before = sorted({int(v) for v in before[~real].unique().tolist()}) if (~real).any() else []
        rows.append(
            {
                "heads": heads,
                "lengths": lens,
                "real_bytes": int(before[real].numel()),
                "real_bytes_differ": differ_real,
                "pad_bytes_before": pad_bytes_before,
                "pad_bytes_after": sorted({int(v) for v in after[~real].unique().tolist()}) if (~real).any() else [],
            }
        )
        ok &= differ_real == 0
        print(rows[-1])
    out = Path(os.environ.get("OUT", "pack-oracle-out"))
    out.mkdir(parents=True, exist_ok=True)
    report = {"gpu": torch.cuda.get_device_name(), "tree": str(args.tree), "cases": rows, "ok": ok}
    (out / "pack-oracle.json").write_text(json.dumps(report, indent=1))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
