#!/usr/bin/env bash
# On the device machine, after `lab/device/stage.py receive 1..N` and `install`: MTP's end-to-end decode speed-up on
# the recall model, explained by its step times (benchmarks/recall_e2e.py run, then explain; docs/benchmarks.md).
#   lab/device/mtp_gain.sh MTP...        e.g. `0`, then `1` in the next call: one engine per MTP setting, one after
#                                        another within VC_BUDGET_S (540); then `explain` over every result so far
#   lab/device/mtp_gain.sh serve MTP...  the same model as users serve it: one `vllm serve` per MTP setting
#                                        (recall_e2e.py serve, VC_SERVE_ARGS: default batches 1,8,32 at 8,192 and 32,768,
#                                        batches 1 and 8 at 131,072-token prompts, 64 tokens, CUDA graphs), streamed, then
#                                        the same prompts from the prefix cache for t(1) and t(64) (--reuse-prompts,
#                                        rows `serve-cached`, three pairs, medians), every pass judged; then `table`
#                                        over every serve result so far (serve-table.md)
#   lab/device/mtp_gain.sh serve-long MTP... the pair `serve` leaves out, one server per MTP setting (batch 32 at
#                                        131,072 tokens, VC_SERVE_LONG_ARGS: 4.2M prompt tokens, a call of its own);
#                                        serve-long-mtpK.json
# The checkpoint is the GLM-5-shaped recall model whose MTP first drafts are right for 80% of the chain, written on
# the GPU first when missing (VC_E2E_MODEL, default $S/models/recall_a80). VC_E2E_ARGS sets the configuration
# (default: batch 8, 8,192-token prompts, 128 tokens, CUDA graphs, 3 warm pairs after the cold one).
# Environment as lab/device/prove.sh: VC_STAGE_DEST (/tmp/vc), VC_TREE (composed), VC_FAKE_CAPABILITY (8.0),
# VC_SM80_PTX. VC_DRY_RUN=1 prints the commands and runs nothing.
# Results: $S/e2e/mtpK.json (kept while the machine is warm), explain.md and explain.json, the logs' tails; all of
# them in one archive in $OUT.
set -uo pipefail
REPO=$(cd "$(dirname "$0")/../.." && pwd)
S=${VC_STAGE_DEST:-/tmp/vc}
START=$(date +%s); BUDGET=${VC_BUDGET_S:-540}
TREE=${VC_TREE:-composed}
DRY=${VC_DRY_RUN:-0}
export PYTHONUNBUFFERED=1 PYTHONPATH="$S/$TREE:$S/site:$REPO/lab/device/sitecustomize:$REPO/src" VC_SITE_DIRS="$S/site"
export VC_FAKE_CAPABILITY=${VC_FAKE_CAPABILITY-8.0}
M=${VC_E2E_MODEL:-$S/models/recall_a80}
ARGS=${VC_E2E_ARGS:---batch 8 --context 8192 --tokens 128 --graphs --repeats 3}
E2E="$REPO/benchmarks/recall_e2e.py"
D="$S/e2e"
OUTDIR=${OUT:-/tmp/vc/out}
mkdir -p "$D" "$OUTDIR"
if [ -n "${VC_SM80_PTX:-}" ]; then export VC_RECORD_DIR="$D/rec"; fi

exec 3>&1  # the script's own output: a dry run prints there, whatever the command's output is redirected to
go() {  # run or, dry, print a command
  if [ "$DRY" = 1 ]; then echo "RUN $*" >&3; return 0; fi
  "$@"
}

if [ ! -f "$M/recall_spec.json" ]; then
  echo "== model $M (acceptance 0.8)"
  go python3 "$E2E" model --out "$M" --acceptance 0.8 > "$D/model.log" 2>&1 || { echo "model: failed"; tail -5 "$D/model.log"; exit 1; }
fi
if [ "${1:-}" = serve ] || [ "${1:-}" = serve-long ]; then
  NAME=serve
  SARGS=${VC_SERVE_ARGS:---batches 1,8,32 --context 8192,32768,131072 --tokens 64 --graphs --reuse-prompts --skip 131072x32}
  if [ "$1" = serve-long ]; then
    NAME=serve-long
    SARGS=${VC_SERVE_LONG_ARGS:---batches 32 --context 131072 --tokens 64 --graphs --reuse-prompts}
  fi
  shift
  for k in "$@"; do
    left=$(( BUDGET - ($(date +%s) - START) ))
    if [ "$left" -lt 150 ]; then echo "SKIP $NAME mtp$k (time)"; continue; fi
    echo "== $NAME mtp$k at $(( $(date +%s) - START ))s (limit $(( left - 15 ))s)"
    # rows are kept in NAME-mtpK.json.partial as they come, so a call cut short keeps what it measured
    # shellcheck disable=SC2086  # SARGS are words
    go timeout -s INT -k 15 $(( left - 15 )) python3 "$E2E" serve --model "$M" --mtp "$k" $SARGS --python python3 \
      --out "$D/$NAME-mtp$k.json" > "$D/$NAME-mtp$k.log" 2>&1
    echo "rc=$? $NAME mtp$k $(tail -1 "$D/$NAME-mtp$k.log" 2>/dev/null | cut -c1-300)"
  done
  results=$(ls "$D"/serve-mtp*.json "$D"/serve-mtp*.json.partial "$D"/serve-long-mtp*.json \
    "$D"/serve-long-mtp*.json.partial 2>/dev/null)
  if [ -n "$results" ]; then
    # shellcheck disable=SC2086  # one word a file
    go python3 "$E2E" table $results > "$D/serve-table.md" 2> "$D/serve-table.err"
    echo "table rc=$?"; cat "$D/serve-table.md" "$D/serve-table.err" 2>/dev/null
  fi
  set --  # the run loop below has nothing left to do
fi
for k in "$@"; do
  left=$(( BUDGET - ($(date +%s) - START) ))
  if [ "$left" -lt 120 ]; then echo "SKIP mtp$k (time)"; continue; fi
  echo "== mtp$k at $(( $(date +%s) - START ))s (limit $(( left - 15 ))s)"
  # shellcheck disable=SC2086  # ARGS are words
  go timeout -s INT -k 15 $(( left - 15 )) python3 "$E2E" run --model "$M" --mtp "$k" $ARGS --out "$D/mtp$k.json" \
    > "$D/mtp$k.log" 2>&1
  echo "rc=$? mtp$k $(tail -1 "$D/mtp$k.log" 2>/dev/null | cut -c1-300)"
done
results=$(ls "$D"/mtp*.json 2>/dev/null)
if [ -n "$results" ] && [ -f "$D/mtp0.json" ] && [ "$(echo "$results" | wc -l)" -gt 1 ]; then
  # shellcheck disable=SC2086  # one word a file
  go python3 "$E2E" explain $results --json "$D/explain.json" > "$D/explain.md" 2> "$D/explain.err"
  echo "explain rc=$?"; cat "$D/explain.md" "$D/explain.err" 2>/dev/null
fi
[ "$DRY" = 1 ] && exit 0
mkdir -p "$D/tails"
for f in "$D"/*.log; do tail -c 20000 "$f" > "$D/tails/$(basename "$f")"; done 2>/dev/null
# shellcheck disable=SC2046  # one word a file
(cd "$D" && tar czf "$OUTDIR/e2e-$(date +%H%M%S).tgz" $(ls ./*.json ./*.partial ./*.md 2>/dev/null) tails) 2>/dev/null
true
