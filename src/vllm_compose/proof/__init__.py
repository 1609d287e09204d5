"""The GPU proof: a composed vLLM, run on a GPU, gives the tokens a model was built to give, and every DSA layer
agrees with an fp32 reference.

* the models: `tinyglm` writes a small random-init or cycle-model `glm_moe_dsa` checkpoint (numpy only, no hub) and
  `expected` predicts its greedy tokens and MTP acceptance; `recall_model` writes the GLM-5-shaped checkpoint whose
  next token can only be predicted by reading one planted token, with its predictions;
* the references: `model_reference` computes the recall model's whole forward in fp32; `dsa_oracle` is the fp32
  reference of DeepSeek Sparse Attention (indexer logits, top-k, sparse MLA) that a release's kernels are held to,
  with the thresholds it sets;
* in the engine: `engine_oracle` checks every DSA layer against that reference as it runs, and `engine_faults`
  injects the faults each check must catch;
* the suites: `recall_run` runs one suite in one engine (`python -m vllm_compose.proof.recall_run`), `suites`
  names them and runs each in a fresh interpreter (`vllm-compose prove`); `fingerprint` says which DSA files a run
  imported, so the status table can tell whether a result ran the current compose.

Only `vllm-compose prove`, `lab/device/` (run on a GPU machine from a copy of the working tree, each script putting
`src/` on `sys.path`: the package is not installed there, so these must live under `src/`), the benchmarks and the
tests use them. They import nothing of the compose pipeline but the error base and the IndexCache rule of
`pp.plan`, and nothing of the Ampere gate; the pipeline imports nothing of them but `fingerprint`.
"""
