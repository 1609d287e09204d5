#!/usr/bin/env bash
# On the device machine, after `lab/device/stage.py receive 1..N` and `install`: the recall model's proof suites.
#   lab/device/prove.sh SUITE...         run suites of vllm_compose.proof.suites.SUITES, one engine each,
#                                        within VC_BUDGET_S (540), each on its checkpoint under $S/models (written
#                                        on the GPU first when missing; VC_MODELS sets the folder)
# Results: /tmp/vc/prove/LABEL.json (kept while the machine is warm), copied to $OUT.
# VC_SM80_PTX=90: every Triton compile (vLLM's and Inductor's) targets sm_80 and is assembled for the H200
# (lab/device/sitecustomize); the compiles are recorded and summarized into $OUT/sm80_ptx.json.
set -uo pipefail
REPO=$(cd "$(dirname "$0")/../.." && pwd)
S=${VC_STAGE_DEST:-/tmp/vc}
START=$(date +%s); BUDGET=${VC_BUDGET_S:-540}
TREE=${VC_TREE:-composed}
export PYTHONUNBUFFERED=1 PYTHONPATH="$S/$TREE:$S/site:$REPO/lab/device/sitecustomize:$REPO/src" VC_SITE_DIRS="$S/site"
export VC_FAKE_CAPABILITY=${VC_FAKE_CAPABILITY-8.0}
mkdir -p "$S/prove" "${OUT:-/tmp/vc/out}"
if [ -n "${VC_SM80_PTX:-}" ]; then export VC_RECORD_DIR="$S/prove/rec"; fi
M=${VC_MODELS:-$S/models}
for s in "$@"; do
  left=$(( BUDGET - ($(date +%s) - START) ))
  if [ "$left" -lt 90 ]; then echo "SKIP $s (time)"; continue; fi
  echo "== $s at $(( $(date +%s) - START ))s (limit $(( left - 15 ))s)"
  timeout -s INT -k 15 $(( left - 15 )) python3 "$REPO/lab/device/prove.py" suite "$s" --models "$M" --out "$S/prove/$s.json" \
    > "$S/prove/$s.log" 2>&1
  echo "rc=$? at $(( $(date +%s) - START ))s $(tail -1 "$S/prove/$s.log" | cut -c1-1500)"
done
if [ -n "${VC_SM80_PTX:-}" ]; then
  python3 - "$S/prove/rec" > "$S/prove/sm80_ptx.json" <<'PY'
import collections, json, pathlib, sys
recs = [json.loads(x) for f in pathlib.Path(sys.argv[1]).glob("*.jsonl") for x in f.read_text().splitlines()]
ptx = [r for r in recs if r.get("kind") == "sm80-ptx"]
print(json.dumps({"compiles": len(ptx), "targets": collections.Counter(r["ptx_target"] for r in ptx),
                  "hopper_only": sum(r["hopper_only_instructions"] for r in ptx),
                  "kernels": sorted({r["kernel"] for r in ptx})}, indent=1))
PY
fi
# one archive a call (a call brings back at most 8 files): every result so far, each log's last 20,000 bytes
mkdir -p "$S/prove/tails"
for f in "$S"/prove/*.log; do tail -c 20000 "$f" > "$S/prove/tails/$(basename "$f")"; done 2>/dev/null
(cd "$S/prove" && tar czf "${OUT:-/tmp/vc/out}/prove-$(date +%H%M%S).tgz" ./*.json tails) 2>/dev/null
true
