# The phase runner of the candidates' GPU calls (sourced by mla_gpu_run.sh and mla_probe_run.sh, which set OUT and
# DEADLINE first):
#
#   run NAME CAP CMD...   CMD under min(CAP, seconds left of DEADLINE), its output in $OUT/NAME.log and on stdout,
#                         its exit status (124: cut by the timeout) in $OUT/phases.txt; a phase with under 20 s left
#                         is skipped and says so. Returns CMD's status.
run() {
  local name=$1 cap=$2 left=$((DEADLINE - SECONDS))
  shift 2
  if ((left < 20)); then
    echo "$name skipped: ${left}s left" | tee -a "$OUT/phases.txt"
    return 1
  fi
  ((cap > left)) && cap=$left
  local start=$SECONDS
  timeout "$cap" "$@" 2>&1 | tee "$OUT/$name.log"
  local rc=${PIPESTATUS[0]}
  echo "$name rc=$rc ${cap}s cap, took $((SECONDS - start))s" | tee -a "$OUT/phases.txt"
  return "$rc"
}
