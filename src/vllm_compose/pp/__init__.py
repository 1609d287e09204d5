"""Pipeline parallelism for a DSA model: where to cut the layers, and whether a release carries what a cut needs.

* `plan`: a `VLLM_PP_LAYER_PARTITION` for GLM-5.x / DeepSeek-V3.2 from the model's `config.json` (the release's
  IndexCache rule, bytes and KV tokens per stage, the search); pure functions, no torch;
* `report`: that plan as a person reads it (`vllm-compose pp-plan`), and whether MTP pays on a link;
* `step`: one decode step under PP with and without MTP (compute, hand-offs with the relayed top-k, the draft
  round, expected tokens), tok/s, the speed-up and the break-even acceptance; `link`: the link between two GPUs
  (PCIe from its generation and width, NVLink from a spec sheet, or measured); `card`: the GPUs known by name;
* `topk_relay`: whether a release's model relays the IndexCache top-k rows to the next stage, read by syntax from
  the release's tree with the DSA path's reader (`ampere.release_source`, `ampere.dsa_path`): the per-release
  property the status table and `ampere-path` print.

The Ampere gate and the DSA-path page carry the relay their callers read here (`relay=topk_crossing`): the
`ampere` room never imports this one (tests/tool/test_layering.py).
"""
