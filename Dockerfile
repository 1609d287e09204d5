# vLLM with the dsa-mtp-sm80 series composed onto the image's own installed vLLM (docs/install.md).
#
# Build (the entries' content comes from a build context, or from the network when that folder is empty):
#   docker build --build-context sources=/path/to/sources -t vllm-compose:v0.26.0 .
#   docker build --build-context sources=empty-dir --build-arg VLLM_TAG=v0.26.0 -t vllm-compose:v0.26.0 .
# `--build-context` is a BuildKit feature: Docker 23.0+ (BuildKit is the default builder there) or `docker buildx
# build`; the legacy builder (DOCKER_BUILDKIT=0) refuses the option. The base image is named with its registry, so
# builders without a default registry (podman) find it too.
# The build fails when the compose conflicts or is refused, or when the audit of site-packages before/after or the
# checks (compile, new undefined names, and the import smoke with the image's torch where the build sees a CUDA
# driver; without one it is skipped, and overlay.json says why) fail. No secret is needed.
#
# Serve (sm_80/86, GLM-5.x / DeepSeek-V3.2 DSA models, MTP under pipeline parallelism):
#   docker run --gpus all --ipc=host -p 8000:8000 -v ~/.cache/huggingface:/root/.cache/huggingface \
#     vllm-compose:v0.26.0 <model> \
#     --pipeline-parallel-size 2 --tensor-parallel-size 1 \
#     --block-size 64 --kv-cache-dtype auto \
#     --speculative-config '{"method":"mtp","num_speculative_tokens":1}' \
#     --gpu-memory-utilization 0.85 --enforce-eager
# (--enforce-eager and a lower --gpu-memory-utilization are the first knobs to turn when start-up runs out of memory.)

ARG VLLM_TAG=v0.26.0
FROM docker.io/vllm/vllm-openai:${VLLM_TAG}

# What the sm_80 recipe needs: the V2 model runner (MTP under PP lives there), spawned workers (CUDA is already
# initialised in the parent), and the PyTorch sampler (FlashInfer's sampler kernels are not built for sm_80).
ENV VLLM_USE_V2_MODEL_RUNNER=1 \
    VLLM_WORKER_MULTIPROC_METHOD=spawn \
    VLLM_USE_FLASHINFER_SAMPLER=0

WORKDIR /opt/vllm-compose
COPY pyproject.toml README.md ./
COPY src/ src/
COPY series/ series/
COPY docker/install-overlay.sh docker/
# `sources` is a named build context (--build-context sources=DIR), not a build stage: hadolint cannot know that
# hadolint ignore=DL3022
COPY --from=sources . sources/

# setuptools-scm has no .git here, hence the pretend version. pip adds only the tool's own small dependencies
# (pygit2, pyflakes, rich, platformdirs, GitPython); torch and vllm are already satisfied and are not touched.
RUN SETUPTOOLS_SCM_PRETEND_VERSION=0.0.0+image python3 -m pip install --no-cache-dir /opt/vllm-compose \
    && docker/install-overlay.sh \
    && python3 -c "import vllm; print('vllm', vllm.__version__)"

LABEL org.opencontainers.image.title="vLLM + dsa-mtp-sm80 compose" \
      org.opencontainers.image.description="vLLM with PR #46994 and PR #38476 composed (report: /opt/vllm-compose/overlay.json)"

WORKDIR /
