#!/usr/bin/env bash
# On the device machine: unpack what make_stage.sh built into /tmp/vc (kept while the machine stays warm).
#   device/install.sh 1   part 1: dependency wheels -> /tmp/vc/site; stock Python tree -> /tmp/vc/stock;
#                         stock + composed overlay -> /tmp/vc/composed; cumem and FA3 into both; the tiny models
#   device/install.sh 2   part 2: _moe_C into both trees
#   device/install.sh 3   part 3: _C into both trees
set -euo pipefail
case ${1:-} in 1|2|3) ;; *) echo "usage: device/install.sh 1|2|3 (the part make_stage.sh built)" >&2; exit 2 ;; esac
REPO=$(cd "$(dirname "$0")/.." && pwd)
S=/tmp/vc
mkdir -p "$S/p"
if [ "$1" = 1 ]; then
  tar xf "$REPO/.devstage/p1/part1.tar" -C "$S/p"
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$S/site" "$S"/p/whl/*.whl
  rm -rf "$S/stock" "$S/composed"; mkdir -p "$S/stock"
  tar xJf "$S/p/vllm_py.tar.xz" -C "$S/stock"
  xz -dc "$S/p/cumem_allocator.abi3.so.xz" > "$S/stock/vllm/cumem_allocator.abi3.so"
  xz -dc "$S/p/_vllm_fa3_C.abi3.so.xz" > "$S/stock/vllm/vllm_flash_attn/_vllm_fa3_C.abi3.so"
  cp -a "$S/stock" "$S/composed"
  tar xJf "$S/p/overlay.tar.xz" -C "$S/composed/vllm"
  PYTHONPATH="$REPO/src" python3 -c "
from pathlib import Path
from vllm_compose.validation.tinyglm import TinyGlmSpec, generate
generate(TinyGlmSpec(num_hidden_layers=${VC_LAYERS:-4}), Path('$S/tiny'), max_model_len=1024)
# fixed routing variant: see TinyGlmSpec.fixed_routing
generate(TinyGlmSpec(num_hidden_layers=${VC_LAYERS:-4}, fixed_routing=True), Path('$S/tiny_fixed'), max_model_len=1024)
# cycle model (TokenCycle): greedy tokens and MTP acceptance known in advance
generate(TinyGlmSpec(num_hidden_layers=${VC_LAYERS:-4}, weights='cycle', vocab_size=512), Path('$S/tiny_cycle'), max_model_len=1024)
# the same cycle with every draft wrong by design (acceptance 0, as the random models)
generate(TinyGlmSpec(num_hidden_layers=${VC_LAYERS:-4}, weights='cycle', vocab_size=512, draft_via_embedding=0.0,
                     draft_via_hidden=0.0), Path('$S/tiny_cycle_wrong'), max_model_len=1024)"
else
  n=$1 so=$([ "$1" = 2 ] && echo _moe_C_stable_libtorch.abi3.so || echo _C_stable_libtorch.abi3.so)
  tar xf "$REPO/.devstage/p$n/part$n.tar" -C "$S/p"
  for t in stock composed; do xz -dc "$S/p/$so.xz" > "$S/$t/vllm/$so"; done
fi
(cd "$S/p" && sha256sum -c --quiet --ignore-missing SHA256SUMS)
echo "install part $1: ok"
