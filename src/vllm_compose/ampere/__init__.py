"""The Ampere gate: will a release's DSA path run on sm_80/86? Answered on a CPU, from the release's code.

Why this ships inside the tool's package: the compose refuses to build an artifact unless the gate passes, and the
status table shows its verdict, so the commands import it. The gate's modules, from the facts up:

* `facts`: what "Ampere" means, written once (the GPUs and compile targets, what vLLM's CUDA platform answers on
  them, the launch contract); every module below and the GPU harness read it;
* the static DSA-path analysis: `release_source` reads a release's Python from its tree (never importing it),
  `dsa_path` (`ampere-path`) finds the DSA path per release and its sm_89+ kernels, scanned by `dsa_blockers`, its
  conditions decided by `partial_eval`; `impl_contract` holds the methods the path calls on its attention impl
  against each sparse-MLA backend's impl; `int32_offsets` finds the kernels' pointer offsets that multiply 32-bit
  values;
* the launches: `kernel_launches` derives a release's DSA-path Triton launches on a CPU with the `fake_platform`;
  `kernel_gate` (`kernel-gate`) compiles recorded or derived kernels for sm_80/86;
* the gate (`gate`: `ampere-gate`, the gate before `wheel`, `editable`, `image-overlay`, the status table's gate
  column) runs the derivation and the compile in the environment `gate_env` builds and keeps (pinned torch and
  Triton, nothing of the serving environment), through its subprocess entry `gate_worker`, and holds the result to
  the launch counts `coverage_record` keeps per release (`gate_coverage.json`) and to a GPU recording
  (`recordings/`, package data).

The gate imports nothing of the GPU proof (`proof/`) nor of the pipeline-parallel room (`pp/`): the PP top-k relay
it reports beside its verdict is read by its caller.
"""
