#!/usr/bin/env bash
# On the device machine, after device/stage.py receive 1..N and install: run validation phases, then collect results into $OUT.
#   device/run_all.sh PHASE...      phases: p1 p2 p3 p4 p5 p6 (see below); each run is time-boxed
# Results accumulate in /tmp/vc/res (kept while the machine is warm), so a later call can add phases and collect all.
set -uo pipefail
REPO=$(cd "$(dirname "$0")/.." && pwd)
S=/tmp/vc; mkdir -p "$S/res" "$S/rec" "$S/log"
START=$(date +%s); BUDGET=${VC_BUDGET_S:-540}
# the run numbers of the loop phases (r5l, r5al): VC_LOOPS (4) of them from VC_LOOP_FROM (1)
LOOP_IDS=$(seq "${VC_LOOP_FROM:-1}" $(( ${VC_LOOP_FROM:-1} + ${VC_LOOPS:-4} - 1 )))
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
# On a one-GPU machine (nvidia-smi lists one GPU, or VC_ONE_GPU=1) the two-engine phases (p1 p2 p6 f1 c1 c2) run
# their engines one after another on GPU 0 instead of side by side on GPUs 0 and 1, and a run that needs more GPUs
# than the machine has (PP2, PP4) is not started: its result says so. G1 is the second engine's GPU; "bg run ..." is
# "run ... &" on two GPUs and a plain run on one.
NGPU=${VC_NGPU:-$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')}
[ "${VC_ONE_GPU:-0}" = 1 ] && NGPU=1
G1=1; [ "$NGPU" -lt 2 ] && G1=0
bg() { if [ "$G1" = 0 ]; then "$@"; else "$@" & fi; }

# run LABEL TREE GPUS CAPABILITY [validate.py args...]; CAPABILITY "-" = the real one
run() {
  local label=$1 tree=$2 gpus=$3 cap=$4; shift 4
  local need; need=$(( $(echo "$gpus" | tr -cd ',' | wc -c) + 1 ))
  if [ "$need" -gt "$NGPU" ]; then
    echo "SKIP $label (needs $need GPUs, this machine has $NGPU)"
    echo "{\"label\":\"$label\",\"ok\":false,\"error\":\"not run: needs $need GPUs, the machine has $NGPU\"}" > "$S/res/$label.json"
    return
  fi
  local left=$(( BUDGET - ($(date +%s) - START) ))
  if [ "$left" -lt 60 ]; then echo "SKIP $label (time)"; echo "{\"label\":\"$label\",\"ok\":false,\"error\":\"not run: time\"}" > "$S/res/$label.json"; return; fi
  local lim=$(( left - 10 < 300 ? left - 10 : 300 ))
  rm -rf "$S/rec/$label"
  ( export CUDA_VISIBLE_DEVICES=$gpus PYTHONPATH="$S/$tree:$S/site:$REPO/device/sitecustomize" VC_SITE_DIRS="$S/site" VC_RECORD_DIR="$S/rec/$label"
    [ "$cap" != "-" ] && export VC_FAKE_CAPABILITY=$cap
    timeout -s INT -k 20 "$lim" python3 "$REPO/device/validate.py" --model "$S/${VC_MODEL:-tiny}" --label "$label" \
      --out "$S/res/$label.json" "$@" > "$S/log/$label.log" 2>&1
    echo "rc=$? $label $(tail -c 300 "$S/log/$label.log" | tail -1)" )
}

for phase in "$@"; do
  echo "== $phase at $(( $(date +%s) - START ))s"
  case $phase in
    p1) bg run composed_pp1 composed 0 8.0 --pp 1 --logprobs 2 --bench-tokens 256
        run stock_pp1 stock $G1 8.0 --pp 1 --backend auto ; run composed_pp1_sm90 composed $G1 - --pp 1 --max-tokens 64; wait ;;
    p2) bg run composed_pp1_mtp1 composed 0 8.0 --pp 1 --mtp 1 --bench-tokens 256
        run composed_pp1_mtp2 composed $G1 8.0 --pp 1 --mtp 2 --bench-tokens 256; wait ;;
    p3) run composed_pp2 composed 0,1 8.0 --pp 2 --bench-tokens 256 ;;
    p4) run composed_pp2_mtp1 composed 0,1 8.0 --pp 2 --mtp 1 --bench-tokens 256 ;;
    p5) run composed_pp2_mtp2 composed 0,1 8.0 --pp 2 --mtp 2 --bench-tokens 256 ;;
    p6) bg run stock_pp1_forced stock 0 8.0 --pp 1; run stock_pp1_sm90 stock $G1 - --pp 1 --backend auto; wait ;;
    p4x) run composed_pp4 composed 0,1,2,3 8.0 --pp 4 --bench-tokens 256 ;;
    p5x) run composed_pp4_mtp1 composed 0,1,2,3 8.0 --pp 4 --mtp 1 --bench-tokens 256 &&
         run composed_pp4_mtp2 composed 0,1,2,3 8.0 --pp 4 --mtp 2 --bench-tokens 256 ;;
    # fixed-routing model (TinyGlmSpec.fixed_routing): baseline with margins, MTP, PP2, PP2+MTP; the last one with
    # CUDA_LAUNCH_BLOCKING=1 to name the kernel behind the device-side assert seen at PP2 + MTP 2
    f1) VC_MODEL=tiny_fixed bg run fixed_pp1 composed 0 8.0 --pp 1 --logprobs 2
        VC_MODEL=tiny_fixed run fixed_pp1_mtp1 composed $G1 8.0 --pp 1 --mtp 1; wait ;;
    f2) VC_MODEL=tiny_fixed run fixed_pp2 composed 0,1 8.0 --pp 2 --logprobs 2 ;;
    f3) VC_MODEL=tiny_fixed run fixed_pp2_mtp1 composed 0,1 8.0 --pp 2 --mtp 1 ;;
    f4) VC_MODEL=tiny_fixed CUDA_LAUNCH_BLOCKING=1 run fixed_pp2_mtp2 composed 0,1 8.0 --pp 2 --mtp 2 ;;
    # cycle model (TokenCycle): greedy tokens and spec-decode counters predicted in advance; PP1/PP2 with top-5
    # log-probs; c2 also runs stock 0.26.0 on it (negative control)
    c1) VC_MODEL=tiny_cycle bg run cycle_pp1 composed 0 8.0 --pp 1 --logprobs 5 --bench-tokens 256
        VC_MODEL=tiny_cycle run cycle_pp1_mtp1 composed $G1 8.0 --pp 1 --mtp 1 --bench-tokens 256; wait ;;
    c2) VC_MODEL=tiny_cycle bg run cycle_pp1_mtp2 composed 0 8.0 --pp 1 --mtp 2 --bench-tokens 256
        VC_MODEL=tiny_cycle run stock_cycle_pp1 stock $G1 8.0 --pp 1 --backend auto; wait ;;
    c3) VC_MODEL=tiny_cycle run cycle_pp2 composed 0,1 8.0 --pp 2 --logprobs 5 --bench-tokens 256 ;;
    c4) VC_MODEL=tiny_cycle run cycle_pp2_mtp1 composed 0,1 8.0 --pp 2 --mtp 1 --bench-tokens 256 ;;
    c5) VC_MODEL=tiny_cycle run cycle_pp2_mtp2 composed 0,1 8.0 --pp 2 --mtp 2 --bench-tokens 256 ;;
    # the random-routing model at PP2 + MTP 2 again (a device-side assert once), launches synchronous, full log kept
    r5) CUDA_LAUNCH_BLOCKING=1 run composed_pp2_mtp2_sync composed 0,1 8.0 --pp 2 --mtp 2 ;;
    r5n) run composed_pp2_mtp2_again composed 0,1 8.0 --pp 2 --mtp 2 ;;
    # what triggers it: every draft rejected (cycle model with wrong drafts), and async scheduling on/off
    w1) VC_MODEL=tiny_cycle_wrong run cyclewrong_pp2_mtp2 composed 0,1 8.0 --pp 2 --mtp 2 ;;
    w2) VC_MODEL=tiny_cycle_wrong run cyclewrong_pp2_mtp2_sync_sched composed 0,1 8.0 --pp 2 --mtp 2 --sync-scheduling ;;
    w3) run composed_pp2_mtp2_sync_sched composed 0,1 8.0 --pp 2 --mtp 2 --sync-scheduling ;;
    w4) VC_MODEL=tiny_cycle_wrong run cyclewrong_pp1_mtp2 composed 0 8.0 --pp 1 --mtp 2 ;;
    # w2 again: launches synchronous (names the kernel), and with the synchronizing id checks of d5
    w2b) VC_MODEL=tiny_cycle_wrong CUDA_LAUNCH_BLOCKING=1 run cyclewrong_pp2_mtp2_sync_sched_blocking composed 0,1 8.0 \
           --pp 2 --mtp 2 --sync-scheduling ;;
    w2t) VC_MODEL=tiny_cycle_wrong VC_CHECK_TOKEN_IDS=1 \
           run cyclewrong_pp2_mtp2_sync_sched_tally composed 0,1 8.0 --pp 2 --mtp 2 --sync-scheduling ;;
    c5s) VC_MODEL=tiny_cycle run cycle_pp2_mtp2_sync_sched composed 0,1 8.0 --pp 2 --mtp 2 --sync-scheduling ;;
    w5) VC_MODEL=tiny_cycle_wrong run cyclewrong_pp1_mtp2_sync_sched composed 0 8.0 --pp 1 --mtp 2 --sync-scheduling ;;
    # open finding 2 (docs/validation.md): where the out-of-range index comes from (device/sitecustomize):
    # d5 checks ids at every embedding and synchronizes; d6 counts bad ids, draft tokens and gather indices on the
    # GPU without synchronizing (and clamps them, so the run goes on); d7 runs the PP broadcasts on the main stream
    d5) VC_CHECK_TOKEN_IDS=1 run composed_pp2_mtp2_checked composed 0,1 8.0 --pp 2 --mtp 2 ;;
    d6) VC_CHECK_TOKEN_IDS=async VLLM_ALLOW_INSECURE_SERIALIZATION=1 run composed_pp2_mtp2_tally composed 0,1 8.0 --pp 2 --mtp 2 ;;
    d7) VC_PP_SAME_STREAM=1 run composed_pp2_mtp2_same_stream composed 0,1 8.0 --pp 2 --mtp 2 ;;
    # the same, VC_REPEAT (8) generations of VC_PROMPTS (4) prompts per engine, finishes spread out (session 3: the
    # failure is intermittent)
    d6r) VC_CHECK_TOKEN_IDS=async VLLM_ALLOW_INSECURE_SERIALIZATION=1 run composed_pp2_mtp2_tally_x${VC_REPEAT:-8} composed 0,1 8.0 \
           --pp 2 --mtp 2 --repeat ${VC_REPEAT:-8} --stagger 24 --prompts ${VC_PROMPTS:-4} ;;
    c5r) VC_MODEL=tiny_cycle run cycle_pp2_mtp2_x4 composed 0,1 8.0 --pp 2 --mtp 2 --repeat 4 ;;
    r5r) run composed_pp2_mtp2_x${VC_REPEAT:-8} composed 0,1 8.0 --pp 2 --mtp 2 --repeat ${VC_REPEAT:-8} --stagger 24 \
           --prompts ${VC_PROMPTS:-4} ;;
    # fresh engines, one generation each, until VC_LOOPS (4) runs or the time is up: the failures of sessions 1-2
    # were all in a fresh engine's single generation (one 1 s after start-up)
    # the last prompt added after VC_LATE (1) engine outputs: its prefill shares a batch with the others' draft
    # decodes, as in the scheduler dump of the session-2 failure before 0022 (session 4)
    r5a) run composed_pp2_mtp2_late composed 0,1 8.0 --pp 2 --mtp 2 --late ${VC_LATE:-1} ;;
    c5a) VC_MODEL=tiny_cycle run cycle_pp2_mtp2_late composed 0,1 8.0 --pp 2 --mtp 2 --late ${VC_LATE:-1} ;;
    # fresh engines, one generation each, VC_LOOPS times; labels numbered from VC_LOOP_FROM (1) so a second call on
    # a warm machine adds runs instead of replacing them
    r5l) for i in $LOOP_IDS; do run composed_pp2_mtp2_start$i composed 0,1 8.0 --pp 2 --mtp 2; done ;;
    # the same with the last prompt joining late (r5a), for the late-prompt candidate of Findings 2
    r5al) for i in $LOOP_IDS; do
            run composed_pp2_mtp2_late_start$i composed 0,1 8.0 --pp 2 --mtp 2 --late ${VC_LATE:-1}; done ;;
    *) echo "unknown phase $phase" ;;
  esac
done
python3 "$REPO/device/collect.py" "$S" "${OUT:-/tmp/vc/out}"
