#!/usr/bin/env bash
# The sparse-MLA candidate on one GPU in one call (lab/candidates/README.md says what each phase decides):
#
#   OUT=/some/folder bash lab/candidates/mla_gpu_run.sh        # on the device: run(command="bash lab/...")
#
# Phases, in order, each under a timeout cut to what is left of DEADLINE seconds, so the call ends inside the device's
# 10-minute limit with what it measured (every script writes its rows as they finish):
#   trees    the kernel before (v0260) and the candidate (mla) from the patch's own images (no composed tree needed);
#            with BASE_PATCH (a candidate on top of a series entry: PATCH's pre-image is BASE_PATCH's post-image), the
#            kernel before the series' entries (v0260, BASE_PATCH's pre-image) and the entry PATCH changes (prev, at
#            its own defaults: --mla-fixed-tree), both timed beside the candidate
#   sweep    benchmarks/dsa_kernels.py, both kernels on the same inputs, sm_80 PTX: heads a program x most splits x
#            least indices a split x SM fill (MLA_BH, MLA_SPLITS, MLA_MIN_SPLIT, MLA_FILL: comma lists; with a candidate
#            that has them, MLA_WIDE and MLA_WIDE_FROM: heads a program once rows x heads reach MLA_WIDE_FROM), at
#            1/8/32/64 rows of GLM-5 TP1, DeepSeek-V3.2 TP1 and their TP8 shapes
#   decide   lab/candidates/mla_decide.py: the rule; writes the winner's tree (win) and the split counts to check
#   oracle   lab/device/oracle_kernels.py on the winner and on the kernel before (same inputs): 8 tokens x 64 and
#            x 128 heads, top-k 2048, at 1, every split count the winner launched and its own choice; the fault
#   offsets  lab/device/kernel_offsets.py on the winner past 2**31 elements, at 1 and those split counts
#   floor    (after the sweep) with FLOOR=1: benchmarks/mla_decode_floor.py, the launches, gathers and partial-row reads alone
# With BASE_PATCH the decision judges the guard and agreement against prev (--before) and the 3x target against v0260
# (--target-base).
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:?set OUT to the folder the results go to}
DEADLINE=${DEADLINE:-570}
T=.devkern
KERNEL=vllm/v1/attention/ops/triton_mla_sparse_kernel.py
PATCH=${PATCH:-series/patches/0044-perf-triton-mla-sparse-one-gather-tile.patch}
BASE_PATCH=${BASE_PATCH:-}
export PYTHONPATH=$PWD/src${PYTHONPATH:+:$PYTHONPATH}

source lab/candidates/phases.sh  # run NAME CAP CMD...

nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv >"$OUT/gpu.txt" 2>&1
python3 -c "import torch, triton; print(torch.__version__, triton.__version__)" >>"$OUT/gpu.txt" 2>&1

rm -rf "$T/v0260" "$T/prev" "$T/base-after" "$T/mla" "$T/win"
TREES=(--tree "$T/v0260" --tree "$T/mla")
DECIDE=()
if [ -n "$BASE_PATCH" ]; then
  run trees 30 bash -c "python3 lab/candidates/candidate_patch.py trees '$BASE_PATCH' --before '$T/v0260' \
    --after '$T/base-after' && python3 lab/candidates/candidate_patch.py trees '$PATCH' --before '$T/prev' \
    --after '$T/mla' && cmp '$T/base-after/$KERNEL' '$T/prev/$KERNEL'" || exit 1
  TREES=(--tree "$T/v0260" --tree "$T/prev" --tree "$T/mla" --mla-fixed-tree prev)
  DECIDE=(--before prev --target-base v0260)
else
  run trees 30 python3 lab/candidates/candidate_patch.py trees "$PATCH" --before "$T/v0260" --after "$T/mla" || exit 1
fi

run sweep 320 python3 benchmarks/dsa_kernels.py "${TREES[@]}" --mla-only --sm80-ptx \
  --mla-max-block-h "${MLA_BH:-16,32,64}" --mla-max-splits "${MLA_SPLITS:-16,32,64}" \
  --mla-min-split "${MLA_MIN_SPLIT:-32,64,128}" --mla-split-fill "${MLA_FILL:-0.75,1.5}" \
  --mla-wide-block-h "${MLA_WIDE:-}" --mla-wide-from "${MLA_WIDE_FROM:-}" \
  --out "$OUT/mla_sweep_sm80.json"

if [ "${FLOOR:-0}" = 1 ]; then
  run floor 60 python3 benchmarks/mla_decode_floor.py --sm80-ptx --out "$OUT/mla_floor_sm80.json"
fi

run decide 30 python3 lab/candidates/mla_decide.py "$OUT/mla_sweep_sm80.json" --tree "$T/mla" --write "$T/win" \
  --out "$OUT/mla_decision.json" "${DECIDE[@]}" || exit 1
[ -d "$T/win" ] || { echo "no winner: no oracle or offset run" | tee -a "$OUT/phases.txt"; exit 0; }
SPLITS=$(python3 -c "import json,sys; print(','.join(map(str, json.load(open(sys.argv[1]))['check_splits'])))" \
  "$OUT/mla_decision.json")

for tree in win v0260; do
  run "oracle_$tree" 90 python3 lab/device/oracle_kernels.py --tree "$T/$tree" --sparse-mla-only --mla-heads 64,128 \
    --mla-splits "$SPLITS,auto" --sm80-ptx --out "$OUT/oracle_mla_${tree}_sm80.json"
done

run offsets 150 python3 lab/device/kernel_offsets.py --tree "$T/win" --case sparse_mla:low --case sparse_mla:high \
  --mla-splits "$SPLITS" --sm80-ptx --out "$OUT/kernel_offsets_mla_win_sm80.json"
cp "$T/win/$KERNEL" "$OUT/winner_triton_mla_sparse_kernel.py"
echo "done in ${SECONDS}s" | tee -a "$OUT/phases.txt"
