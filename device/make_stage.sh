#!/usr/bin/env bash
# Build the device payload on this machine (no GPU needed) and split it in three parts for three back-to-back calls
# (a call carries at most 64 MiB, the repository's working tree included): .devstage/p1/part1.tar (dependency
# wheels, Python trees, overlay, small objects), .devstage/p2/part2.tar (_moe_C), .devstage/p3/part3.tar (_C). Inputs: the stock wheel, the stock sdist tree, the composed tree, the wheels of
# vLLM's missing Python dependencies (cp312).
#   device/make_stage.sh WHEEL STOCK_SDIST_VLLM_DIR COMPOSED_VLLM_DIR DEPS_WHEEL_DIR
set -euo pipefail
WHEEL=$1 STOCK=$2 COMPOSED=$3 DEPS=$4
ROOT=$(cd "$(dirname "$0")/.." && pwd)
W=$(mktemp -d); trap 'rm -rf "$W"' EXIT
mkdir -p "$W/p/whl"
# Python files of the stock wheel, less what this model never imports: Blackwell-only FMHA sources, CUDA sources,
# the Rust front end, DeepGEMM (the run must take the Triton indexer fallback) and the flash-attention binaries
# (the sparse MLA path on sm_80 uses Triton kernels only).
(cd "$W" && unzip -q "$WHEEL" -x '*.so' 'vllm/vllm-rs' 'vllm/third_party/deep_gemm/*' 'vllm/third_party/fmha_sm100/*')
(cd "$W" && find vllm -name '*.cu' -delete -o -name '*.cuh' -delete && tar cf - vllm vllm-*.dist-info | xz -9 -T2 > p/vllm_py.tar.xz && rm -rf vllm vllm-*.dist-info)
# The compiled ops this model needs: _C (norms, rope, caches, top-k), _moe_C (MoE routing/alignment), cumem.
# xz -9 of the two large objects takes minutes: keep them in a cache keyed by the wheel's sha256.
CACHE=${VC_STAGE_CACHE:-/tmp/vc-stage-cache}/$(sha256sum "$WHEEL" | cut -c1-16)
mkdir -p "$CACHE"
for so in _C_stable_libtorch.abi3.so _moe_C_stable_libtorch.abi3.so cumem_allocator.abi3.so; do
  [ -s "$CACHE/$so.xz" ] || unzip -q -p "$WHEEL" "vllm/$so" | xz -9 -T2 > "$CACHE/$so.xz"
  cp "$CACHE/$so.xz" "$W/p/$so.xz"
done
# vllm.vllm_flash_attn refuses to import without one of its extensions, and deepseek_v2 imports it (through
# layers/attention). FA3 (Hopper-only, 8 MB compressed) satisfies the import; FA2 (the sm_80 one, ~100 MB
# compressed) is left out. Under the sm_80 override any flash-attention call would ask for FA2 and fail loudly, so a
# passing run also shows the sparse path never calls flash attention.
so=_vllm_fa3_C.abi3.so
[ -s "$CACHE/$so.xz" ] || unzip -q -p "$WHEEL" "vllm/vllm_flash_attn/$so" | xz -9 -T2 > "$CACHE/$so.xz"
cp "$CACHE/$so.xz" "$W/p/$so.xz"
# The composed tree as an overlay: only files that differ from (or are new against) the stock sdist.
(cd "$COMPOSED" && find . -name '*.py' -not -path '*/__pycache__/*' | while read -r f; do
   cmp -s "$f" "$STOCK/$f" || echo "$f"; done) > "$W/overlay.list"
(cd "$COMPOSED" && tar cf - -T "$W/overlay.list" | xz -9 > "$W/p/overlay.tar.xz")
cp "$DEPS"/*.whl "$W/p/whl/"
(cd "$W/p" && sha256sum *.xz whl/*.whl > SHA256SUMS)
# Part 1: everything but the two large objects, so the first call can already install the dependencies, unpack the
# trees and write the tiny models; part 2: _moe_C (40 MB compressed); part 3: _C (56 MB compressed). (Two parts of
# ~61 MiB each left under 1 MiB for the repository itself.)
mkdir -p "$ROOT/.devstage/p1" "$ROOT/.devstage/p2" "$ROOT/.devstage/p3"
rm -rf "$ROOT"/.devstage/p1/* "$ROOT"/.devstage/p2/* "$ROOT"/.devstage/p3/*
(cd "$W/p" && tar cf "$ROOT/.devstage/p1/part1.tar" --exclude _C_stable_libtorch.abi3.so.xz \
   --exclude _moe_C_stable_libtorch.abi3.so.xz .)
(cd "$W/p" && tar cf "$ROOT/.devstage/p2/part2.tar" _moe_C_stable_libtorch.abi3.so.xz)
(cd "$W/p" && tar cf "$ROOT/.devstage/p3/part3.tar" _C_stable_libtorch.abi3.so.xz)
wc -l < "$W/overlay.list" | xargs echo "overlay files:"
du -b "$ROOT"/.devstage/p1/* "$ROOT"/.devstage/p2/* "$ROOT"/.devstage/p3/*
