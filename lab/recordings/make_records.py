"""Write the kernel recordings from the records.json files that lab/device/collect.py brought back from validation
runs.

    python lab/recordings/make_records.py RECORDS_JSON...

Records accumulate: the kernels and runs already in the two files are kept, and new specializations are added
(validation sessions record different shapes, e.g. the cycle model's vocabulary of 512).

composed-v0.26.0-sm80.json   every Triton compilation of the composed tree's runs under the sm_80 override; package
                             data (src/vllm_compose/ampere/recordings/), as the Ampere gate reads it
stock-v0.26.0-sm80.json      derived (see its "derivation"): stock 0.26.0 on sm_80 stops at start-up (the indexer
                             refuses to run without DeepGEMM) before any kernel launches; the kernel its Indexer
                             launches on every CUDA GPU, and that the compose gates to sm_89+, is the fused
                             indexer-q kernel, recorded from the composed tree run at the real sm_90 capability.
"""

import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
#: where each recording lives: the composed one is package data, the stock one stays here
PLACES = {
    "composed-v0.26.0-sm80.json": HERE.parents[1] / "src" / "vllm_compose" / "ampere" / "recordings",
    "stock-v0.26.0-sm80.json": HERE,
}
PORTABLE = ("num_warps", "num_ctas", "num_stages", "enable_fp_fusion", "launch_cooperative_grid", "maxnreg")
FUSED = ("vllm.model_executor.layers.sparse_attn_indexer", "_fused_indexer_q_rope_quant_kernel")


def key(k):
    s = dict(k["specialization"])
    s["options"] = {o: s["options"].get(o) for o in PORTABLE}
    return json.dumps([k["module"], k["qualname"], s], sort_keys=True)


def main():
    composed, fused = {}, {}
    sources, migrations = [], []
    for name, into in (("composed-v0.26.0-sm80.json", composed), ("stock-v0.26.0-sm80.json", fused)):
        old = PLACES[name] / name
        if old.exists():
            data = json.loads(old.read_text())
            for k in data["kernels"]:
                into.setdefault(key(k), k)
            sources += [r for r in data.get("runs", []) if r not in sources]
            migrations += data.get("migrations", [])
    rerecorded = set()
    for path in sys.argv[1:]:
        data = json.loads(Path(path).read_text())
        for label, rec in data.items():
            sm80 = not label.endswith("_sm90") and not label.startswith("stock")
            for k in rec["triton_kernels"]:
                if sm80 and label not in sources:
                    sources.append(label)
                if sm80:
                    composed.setdefault(key(k), k)
                    rerecorded.add((k["module"], k["qualname"]))
                elif (k["module"], k["qualname"]) == FUSED:
                    fused.setdefault(key(k), k)
    # a kernel recorded again on a GPU no longer needs the records lab/recordings/migrate.py carried over
    composed = {
        kk: k for kk, k in composed.items() if "migrated" not in k or (k["module"], k["qualname"]) not in rerecorded
    }
    migrations = [m for m in migrations if tuple(m["kernel"].split(":", 1)) not in rerecorded]

    def by_name(d):
        return sorted(d.values(), key=lambda k: (k["module"], k["qualname"], key(k)))

    common = {
        "schema": 1,
        "vllm": "0.26.0",
        "recorded_on": "2026-11-29 (two sessions), 2x NVIDIA H200 (sm_90) with the sm_80 override",
        "recorder": "lab/device/sitecustomize/sitecustomize.py (Triton jit_cache_hook)",
    }
    (PLACES["composed-v0.26.0-sm80.json"] / "composed-v0.26.0-sm80.json").write_text(
        json.dumps(
            {
                **common,
                "tree": "composed (series v0.26.0)",
                "runs": sources,
                **({"migrations": migrations} if migrations else {}),
                "kernels": by_name(composed),
            },
            indent=1,
        )
    )
    (PLACES["stock-v0.26.0-sm80.json"] / "stock-v0.26.0-sm80.json").write_text(
        json.dumps(
            {
                **common,
                "tree": "stock 0.26.0",
                "derivation": __doc__.split("stock-v0.26.0-sm80.json")[1].strip(),
                "kernels": by_name(fused),
            },
            indent=1,
        )
    )
    print(len(composed), "composed records;", len(fused), "stock records")


if __name__ == "__main__":
    main()
