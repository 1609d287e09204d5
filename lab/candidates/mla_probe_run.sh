#!/usr/bin/env bash
# Entry 0045 probed on one GPU in one call: the configs a server runs, the one-row floors and the hardware counters
# (lab/candidates/README.md says what each decides):
#
#   OUT=/some/folder bash lab/candidates/mla_probe_run.sh        # on the device: run(command="bash lab/...")
#
# Phases, in order, each under a timeout cut to what is left of DEADLINE (570) seconds:
#   trees    entry 0045's kernel (e45, from ENTRY's images) and, as copies of it, the backend as composed (served)
#            and as the warm-up candidate WARM writes it (warm)
#   served   benchmarks/mla_served_tuning.py on served and warm: each decode shape at the configs each warm-up picks,
#            beside configs tuned at the shape (SERVED=0 skips it)
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
export PYTHONPATH=$PWD/src${PYTHONPATH:+:$PYTHONPATH}

source $K/phases.sh  # run NAME CAP CMD...

pack() {
  local archive
  archive=$(mktemp -d)/probe.tgz
  tar czf "$archive" -C "$OUT" . && find "$OUT" -mindepth 1 ! -name phases.txt -delete && mv "$archive" "$OUT/"
}

nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv >"$OUT/gpu.txt" 2>&1
python3 -c "import torch, triton; print(torch.__version__, triton.__version__)" >>"$OUT/gpu.txt" 2>&1

rm -rf "$T/e44" "$T/e45" "$T/served" "$T/warm"
run trees 60 bash -c "python3 $K/candidate_patch.py trees '$ENTRY' --before '$T/e44' --after '$T/e45' && \
  python3 $K/candidate_patch.py trees '$WARM' --on '$T/e45' --before '$T/served' --after '$T/warm'" || { pack; exit 1; }

if [ "${SERVED:-1}" = 1 ]; then
  run served 300 python3 benchmarks/mla_served_tuning.py --tree "$T/served" --tree "$T/warm" --sm80-ptx \
    --out "$OUT/mla_served_tuning_sm80.json"
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
