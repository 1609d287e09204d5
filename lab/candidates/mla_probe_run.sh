#!/usr/bin/env bash
# Entry 0045 probed on one GPU in one call: the configs a server runs, the one-row floors and the hardware counters
# (lab/candidates/README.md says what each decides):
#
#   OUT=/some/folder bash lab/candidates/mla_probe_run.sh        # on the device: run(command="bash lab/...")
#
# Phases, in order, each under a timeout cut to what is left of DEADLINE (570) seconds:
#   trees    entry 0045's kernel (e45, from ENTRY's images) and, as copies of it, the backend as composed (served)
#            and as the warm-up candidate WARM writes it (warm)
#            with KEY and KEY_WARM (a kernel candidate on e45 and a backend candidate beside it), the tree of both
#            (bucket)
#   served   benchmarks/mla_served_tuning.py on served and warm (and bucket): each decode shape at the configs each
#            warm-up picks, beside configs tuned at the shape (SERVED=0 skips it)
#   oracle   with KEY: lab/device/oracle_kernels.py on bucket's kernel at 64 and 128 heads, 1-16 splits and its own
#            choice, and its planted fault
#   offsets  with KEY: lab/device/kernel_offsets.py on bucket's kernel past 2**31 elements at 1-16 splits
#   floor    benchmarks/mla_decode_floor.py: launches, gathers, partial-row reads, a head group's partials read by one
#            program (FLOOR=0 skips it)
#   profile  lab/candidates/mla_profile.py on e45 under ncu (PROFILE=0 skips it)
#   pack     everything under $OUT into $OUT/probe.tgz, and only it with phases.txt left there (the device returns
#            few files)
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:?set OUT to the folder the results go to}
DEADLINE=${DEADLINE:-570}
T=.devkern
K=lab/candidates
ENTRY=${ENTRY:-series/patches/0045-perf-triton-mla-sparse-merge-one-warp.patch}
WARM=${WARM:-$K/perf-triton-mla-sparse-warmup-decode-shapes.patch}
KEY=${KEY:-}
KEY_WARM=${KEY_WARM:-}
if { [ -n "$KEY" ] && [ -z "$KEY_WARM" ]; } || { [ -z "$KEY" ] && [ -n "$KEY_WARM" ]; }; then
  echo "KEY and KEY_WARM go together (a kernel candidate on entry 0045 and the backend candidate for it); got" \
    "KEY='$KEY' KEY_WARM='$KEY_WARM'" | tee -a "$OUT/phases.txt" >&2
  exit 2
fi
export PYTHONPATH=$PWD/src${PYTHONPATH:+:$PYTHONPATH}

source $K/phases.sh  # run NAME CAP CMD...

pack() {
  local archive
  archive=$(mktemp -d)/probe.tgz
  tar czf "$archive" -C "$OUT" . && find "$OUT" -mindepth 1 ! -name phases.txt -delete && mv "$archive" "$OUT/"
}

nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv >"$OUT/gpu.txt" 2>&1
python3 -c "import torch, triton; print(torch.__version__, triton.__version__)" >>"$OUT/gpu.txt" 2>&1

rm -rf "$T/e44" "$T/e45" "$T/served" "$T/warm" "$T/key" "$T/key-before" "$T/bucket" "$T/bucket-before"
TREES="python3 $K/candidate_patch.py trees '$ENTRY' --before '$T/e44' --after '$T/e45' && \
  python3 $K/candidate_patch.py trees '$WARM' --on '$T/e45' --before '$T/served' --after '$T/warm'"
SERVED_TREES=(--tree "$T/served" --tree "$T/warm")
if [ -n "$KEY" ]; then
  TREES="$TREES && python3 $K/candidate_patch.py trees '$KEY' --on '$T/e45' --before '$T/key-before' --after '$T/key' \
    && python3 $K/candidate_patch.py trees '$KEY_WARM' --on '$T/key' --before '$T/bucket-before' --after '$T/bucket'"
  SERVED_TREES+=(--tree "$T/bucket")
fi
run trees 60 bash -c "$TREES" || { pack; exit 1; }

if [ "${SERVED:-1}" = 1 ]; then
  run served 330 python3 benchmarks/mla_served_tuning.py "${SERVED_TREES[@]}" --sm80-ptx \
    --out "$OUT/mla_served_tuning_sm80.json"
fi
if [ -n "$KEY" ]; then
  run oracle 90 python3 lab/device/oracle_kernels.py --tree "$T/bucket" --sparse-mla-only --mla-heads 64,128 \
    --mla-splits 1,2,4,8,16,auto --sm80-ptx --out "$OUT/oracle_mla_bucket_sm80.json"
  run offsets 150 python3 lab/device/kernel_offsets.py --tree "$T/bucket" --case sparse_mla:low \
    --case sparse_mla:high --mla-splits 1,2,4,8,16 --sm80-ptx --out "$OUT/kernel_offsets_mla_bucket_sm80.json"
fi
if [ "${FLOOR:-1}" = 1 ]; then
  run floor 90 python3 benchmarks/mla_decode_floor.py --sm80-ptx --out "$OUT/mla_floor_sm80.json"
fi
if [ "${PROFILE:-1}" = 1 ]; then
  # the profiled run's own limit inside the phase's, so that a slow run still leaves time to read its report back
  left=$((DEADLINE - SECONDS - 10))
  run profile "$left" python3 $K/mla_profile.py profile --tree "$T/e45" --out "$OUT/profile" --sm80-ptx \
    --timeout-s $((left > 90 ? left - 60 : 30))
fi
echo "done in ${SECONDS}s" | tee -a "$OUT/phases.txt"
pack
