#!/usr/bin/env bash
# On the device machine, after `lab/device/stage.py receive 1..N` and `install`: run validation phases from the table
# below, then collect every result so far into $OUT (lab/device/collect.py); keep what comes back in
# lab/results/SESSION/.
#   lab/device/run_all.sh PHASE...        e.g. c1 c2 (the PP1 cycle suite and the stock control), c3 c4 c5 (PP2)
#   lab/device/run_all.sh --list          the table
# Runs are scheduled on however many GPUs the machine has (nvidia-smi; VC_NGPU overrides, VC_ONE_GPU=1 means 1):
# one-GPU runs of a phase go side by side on free GPUs, a multi-GPU run waits for the others and takes GPUs 0..N-1,
# and a run that needs more GPUs than there are is not started (its result says so). Each run is time-boxed within
# VC_BUDGET_S (540) for the whole call. VC_DRY_RUN=1 prints what would run, on which GPUs, and runs nothing.
# Results accumulate in /tmp/vc/res (kept while the machine is warm), so a later call can add phases and collect all.
# Sessions 1-5 ran more phases (random-weight and fixed-routing models, diagnostics of Findings 2 and 3): their
# commands are in lab/notebook/validation.md, and this script as of commit e029137 has them.
set -uo pipefail
REPO=$(cd "$(dirname "$0")/../.." && pwd)
S=${VC_STAGE_DEST:-/tmp/vc}
START=$(date +%s); BUDGET=${VC_BUDGET_S:-540}
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
NGPU=${VC_NGPU:-$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')}
[ "${VC_ONE_GPU:-0}" = 1 ] && NGPU=1
DRY=${VC_DRY_RUN:-0}

# phase  label  tree  GPUs  capability ("-": the GPU's own)  model  env ("-" or K=V,K=V)  validate.py arguments
TABLE='
c1  cycle_pp1                       composed 1 8.0 tiny_cycle       -  --pp 1 --logprobs 5 --bench-tokens 256
c1  cycle_pp1_mtp1                  composed 1 8.0 tiny_cycle       -  --pp 1 --mtp 1 --bench-tokens 256
c2  cycle_pp1_mtp2                  composed 1 8.0 tiny_cycle       -  --pp 1 --mtp 2 --bench-tokens 256
c2  stock_cycle_pp1                 stock    1 8.0 tiny_cycle       -  --pp 1 --backend auto
c3  cycle_pp2                       composed 2 8.0 tiny_cycle       -  --pp 2 --logprobs 5 --bench-tokens 256
c4  cycle_pp2_mtp1                  composed 2 8.0 tiny_cycle       -  --pp 2 --mtp 1 --bench-tokens 256
c5  cycle_pp2_mtp2                  composed 2 8.0 tiny_cycle       -  --pp 2 --mtp 2 --bench-tokens 256
c5s cycle_pp2_mtp2_sync_sched       composed 2 8.0 tiny_cycle       -  --pp 2 --mtp 2 --sync-scheduling
w1  cyclewrong_pp2_mtp2             composed 2 8.0 tiny_cycle_wrong -  --pp 2 --mtp 2
w2  cyclewrong_pp2_mtp2_sync_sched  composed 2 8.0 tiny_cycle_wrong -  --pp 2 --mtp 2 --sync-scheduling
w4  cyclewrong_pp1_mtp2             composed 1 8.0 tiny_cycle_wrong -  --pp 1 --mtp 2
x4  cycle_pp4                       composed 4 8.0 tiny_cycle       -  --pp 4 --bench-tokens 256
x4  cycle_pp4_mtp2                  composed 4 8.0 tiny_cycle       -  --pp 4 --mtp 2 --bench-tokens 256
d6  composed_pp2_mtp2_tally         composed 2 8.0 tiny             VC_CHECK_TOKEN_IDS=async,VLLM_ALLOW_INSECURE_SERIALIZATION=1  --pp 2 --mtp 2
r5l composed_pp2_mtp2_start1        composed 2 8.0 tiny             -  --pp 2 --mtp 2
r5l composed_pp2_mtp2_start2        composed 2 8.0 tiny             -  --pp 2 --mtp 2
'
if [ "${1:-}" = --list ]; then echo "$TABLE" | sed '/^$/d'; exit 0; fi
[ "$DRY" = 1 ] || mkdir -p "$S/res" "$S/rec" "$S/log"

skip() {  # LABEL REASON: a result saying why the run did not start
  echo "SKIP $1 ($2)"
  [ "$DRY" = 1 ] || echo "{\"label\":\"$1\",\"ok\":false,\"error\":\"not run: $2\"}" > "$S/res/$1.json"
}

# start LABEL TREE GPULIST CAPABILITY MODEL ENV ARGS...
start() {
  local label=$1 tree=$2 gpus=$3 cap=$4 model=$5 env=$6; shift 6
  local left=$(( BUDGET - ($(date +%s) - START) ))
  if [ "$left" -lt 60 ]; then skip "$label" "time"; return; fi
  local lim=$(( left - 10 < 300 ? left - 10 : 300 ))
  if [ "$DRY" = 1 ]; then
    echo "RUN $label on GPU $gpus: tree $tree, model $model, capability $cap, env $env, limit ${lim}s: $*"; return
  fi
  rm -rf "$S/rec/$label"
  ( export CUDA_VISIBLE_DEVICES=$gpus PYTHONPATH="$S/$tree:$S/site:$REPO/lab/device/sitecustomize" \
      VC_SITE_DIRS="$S/site" VC_RECORD_DIR="$S/rec/$label"
    [ "$cap" != "-" ] && export VC_FAKE_CAPABILITY=$cap
    if [ "$env" != "-" ]; then IFS=, read -ra kv <<< "$env"; for x in "${kv[@]}"; do export "${x?}"; done; fi
    timeout -s INT -k 20 "$lim" python3 "$REPO/lab/device/validate.py" --model "$S/$model" --label "$label" \
      --out "$S/res/$label.json" "$@" > "$S/log/$label.log" 2>&1
    echo "rc=$? $label $(tail -c 300 "$S/log/$label.log" | tail -1)" ) < /dev/null &
}

for phase in "$@"; do
  rows=$(echo "$TABLE" | awk -v p="$phase" '$1 == p')
  if [ -z "$rows" ]; then echo "unknown phase $phase (lab/device/run_all.sh --list)"; continue; fi
  echo "== $phase at $(( $(date +%s) - START ))s"
  free=0  # the next free GPU for one-GPU runs; multi-GPU runs wait for all
  while read -r _phase label tree need cap model env args; do
    if [ "$need" -gt "$NGPU" ]; then skip "$label" "needs $need GPUs, the machine has $NGPU"; continue; fi
    if [ "$need" -gt 1 ] || [ "$free" -ge "$NGPU" ]; then wait; free=0; fi
    gpus=$(seq -s, "$free" $(( free + need - 1 )))
    # shellcheck disable=SC2086  # args are words
    start "$label" "$tree" "$gpus" "$cap" "$model" "$env" $args
    free=$(( need > 1 ? NGPU : free + 1 ))
  done <<< "$rows"
  wait
done
[ "$DRY" = 1 ] || python3 "$REPO/lab/device/collect.py" "$S" "${OUT:-/tmp/vc/out}"
