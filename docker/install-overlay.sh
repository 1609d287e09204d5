#!/usr/bin/env bash
# Run inside the image build (Dockerfile): compose the series onto the installed vLLM, verify, relabel.
# All logic is in `vllm-compose image-overlay` (src/vllm_compose/artifacts/image.py); this only finds the folders.
set -euo pipefail
python="${PYTHON:-python3}"
home="${VLLM_COMPOSE_HOME:-/opt/vllm-compose}"
site_packages="$("$python" -c 'import pathlib, vllm; print(pathlib.Path(vllm.__file__).resolve().parents[1])')"
args=(--site-packages "$site_packages" --series "$home"/series --json "$home"/overlay.json)
# Entry content from the `sources` build context when it holds files, else from the network.
if [ -n "$(ls -A "$home"/sources 2>/dev/null)" ]; then
    args+=(--sources "$home"/sources)
fi
if [ "${VLLM_COMPOSE_OFFLINE:-0}" = "1" ]; then
    args+=(--offline)
fi
if [ "${VLLM_COMPOSE_IMPORT_SMOKE:-1}" = "0" ]; then
    args+=(--no-import-smoke)
fi
# The Ampere gate (DSA kernels compiled for sm_80/86 with the image's Triton) runs unless this says 0.
if [ "${VLLM_COMPOSE_AMPERE_GATE:-1}" = "0" ]; then
    args+=(--no-ampere-gate)
fi
exec "$python" -m vllm_compose.cli image-overlay "${args[@]}" "$@"
