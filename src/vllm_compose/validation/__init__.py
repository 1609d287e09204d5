"""Validation of a composed vLLM: the Ampere gates, the GPU evidence, and the tiny GLM-DSA checkpoint.

Why this ships inside the tool's package (and not as a package of its own): most of its modules are part of the
product. The compose refuses to build an artifact unless the Ampere gate passes, and the status table shows what
was proven on GPUs, so the commands import them:

* `ampere_facts`: what "Ampere" means, written once (the GPUs and compile targets, what vLLM's CUDA platform
  answers on them, the launch contract); every module below and the GPU harness read it;
* `ampere_gate` (`ampere-gate`; the gate before `wheel`, `editable`, `image-overlay`; the status table's gate
  column), built on `kernel_launches` (a release's DSA-path Triton launches, derived on a CPU with the
  `fake_platform`), `dsa_path` (`ampere-path`: the DSA path per release and its sm_89+ kernels, read through
  `release_source`, scanned by `dsa_blockers`, its conditions decided by `partial_eval`) and `impl_contract` (the
  methods the DSA path calls on its attention impl, against each sparse-MLA backend's impl), run in the
  environment `gate_env` builds and keeps (pinned torch and Triton, nothing of the serving environment) and held
  to the launch counts `coverage_record` keeps per release (`ampere_gate_coverage.json`);
* `kernel_gate` (`kernel-gate`: recorded kernels compiled for sm_80/86);
* `gpu_evidence` (the status table's "run on a GPU" column, read from device result files).

The GPU harness's modules: `tinyglm` writes a small random-init or cycle-model `glm_moe_dsa` checkpoint (numpy
only, no hub), `expected` predicts its greedy tokens and MTP acceptance, and `dsa_oracle` is the fp32 reference of
DeepSeek Sparse Attention (indexer logits, top-k, sparse MLA) that a release's kernels are held to, with the
thresholds it sets. Only `lab/device/` (run on a GPU
machine from a copy of the working tree, each script putting `src/` on `sys.path`: the package is not installed
there, so these must live under `src/`), `benchmarks/mtp_decode.py` and the tests use them; they import nothing of
the compose pipeline but the error base, and the pipeline imports nothing of them.
"""
