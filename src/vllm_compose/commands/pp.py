"""`pp-plan`: a pipeline-parallel layer partition for a DSA model, and whether MTP pays on a link, its options and
its handler (docs/user-guide.md, "Choose the layer partition: `vllm-compose pp-plan`")."""

from __future__ import annotations

import json
from pathlib import Path

from ..errors import ExitCode
from ..pp.card import CARDS
from .shared import options


def add_parsers(sub) -> None:
    """Add this group's commands to `sub`, each with its handler (`handler` in the parsed arguments)."""
    pl = sub.add_parser(
        "pp-plan",
        help="a VLLM_PP_LAYER_PARTITION for a DSA model: stages start on full (top-k) layers, bytes and KV per stage",
        description="Plan a pipeline-parallel layer partition for GLM-5.x / DeepSeek-V3.2 from config.json: each "
        "stage's weight bytes and the KV tokens it leaves, stages starting on layers that compute their own top-k "
        "where that costs at most --tolerance of the KV tokens, the last stage lighter by the MTP layer and heads.",
        parents=[options("json", json="also write the plan as JSON ('-': print only JSON)")],
    )
    pl.add_argument("config", type=Path, help="the model's config.json (or its folder)")
    pl.add_argument("--pp", type=int, required=True, help="pipeline-parallel size")
    pl.add_argument(
        "--gpu-memory",
        type=float,
        required=True,
        metavar="GIB",
        help="each GPU's total memory in GiB as it reports it (nvidia-smi MiB / 1024: 79.2 for an A100 80GB)",
    )
    pl.add_argument("--mtp", type=int, default=0, metavar="K", help="num_speculative_tokens (default 0: no MTP)")
    pl.add_argument("--bits", type=int, default=16, help="bits per weight of the quantized matrices (default 16)")
    pl.add_argument("--mtp-bits", type=int, metavar="BITS", help="the MTP layer's bits (default: --bits)")
    pl.add_argument("--group-size", type=int, default=128, help="quantization group size (default 128)")
    pl.add_argument("--gpu-memory-utilization", type=float, default=0.9, metavar="F", help="default 0.9")
    pl.add_argument("--max-num-batched-tokens", type=int, default=8192, metavar="N", help="default 8192")
    pl.add_argument("--max-num-seqs", type=int, default=256, metavar="N", help="default 256")
    pl.add_argument(
        "--max-model-len", type=int, metavar="N", help="default: the config's max_position_embeddings, as vLLM"
    )
    pl.add_argument("--block-size", type=int, default=64, help="KV block size (default 64, as the indexer needs)")
    pl.add_argument(
        "--kv-cache-dtype", default="bfloat16", help="bfloat16 (default, Ampere), fp8 or fp8_ds_mla (sm_89+)"
    )
    pl.add_argument(
        "--tolerance",
        type=float,
        default=5.0,
        metavar="PCT",
        help="KV tokens a partition may give up to start more stages on full layers (default 5)",
    )
    link = pl.add_argument_group(
        "MTP on a link",
        "with --link, --link-gbps or --card: does MTP (--mtp K) pay on the plan's partition, given the hand-offs' "
        "bytes over the link, the draft round's cost and the acceptance",
    )
    way = link.add_mutually_exclusive_group()
    way.add_argument("--link", metavar="pcieGxW", help="the link between two stages: pcie1x4 ... pcie5x16")
    way.add_argument("--link-gbps", type=float, metavar="GBPS", help="a measured payload bandwidth one way, GB/s")
    link.add_argument(
        "--link-latency-us", type=float, metavar="US", help="fixed cost of one transfer (default 15, an assumption)"
    )
    link.add_argument(
        "--card", metavar="NAME", help=f"a known GPU ({', '.join(CARDS)}): its link, and its peak HBM bandwidth for "
        "the layers' time",
    )  # fmt: skip
    link.add_argument(
        "--layer-ms", type=float, metavar="MS", help="one decoder layer's measured time in a decode step at --batch"
    )
    link.add_argument(
        "--draft-round-ms",
        type=float,
        metavar="MS",
        help="the draft round's fixed cost (default: one transfer's latency per earlier stage)",
    )
    link.add_argument("--mtp-acceptance", type=float, metavar="A", help="a draft's acceptance, 0 to 1 (default 0.7)")
    link.add_argument("--batch", type=int, metavar="N", help="requests in a decode step (default 1)")
    pl.set_defaults(handler=pp_plan)


def pp_plan(args) -> int:

    from ..pp import plan as pp_plan
    from ..pp import step
    from ..pp.report import render_link, render_plan
    from ..report import write_json

    settings = pp_plan.Settings(
        pp=args.pp,
        gpu_memory_gib=args.gpu_memory,
        mtp=args.mtp,
        bits=args.bits,
        mtp_bits=args.mtp_bits,
        group_size=args.group_size,
        gpu_memory_utilization=args.gpu_memory_utilization,
        max_num_batched_tokens=args.max_num_batched_tokens,
        max_num_seqs=args.max_num_seqs,
        max_model_len=args.max_model_len,
        block_size=args.block_size,
        kv_cache_dtype=args.kv_cache_dtype,
        tolerance=args.tolerance / 100,
    )
    result = pp_plan.plan(pp_plan.read_config(args.config), settings)
    link_options = (args.card, args.link, args.link_gbps, args.link_latency_us, args.layer_ms, args.draft_round_ms,
                    args.mtp_acceptance, args.batch)  # fmt: skip
    on_link = None
    if any(value is not None for value in link_options):
        on_link = step.for_plan(
            result,
            card=args.card,
            link=args.link,
            link_gbps=args.link_gbps,
            latency_us=args.link_latency_us,
            layer_ms=args.layer_ms,
            draft_round_ms=args.draft_round_ms,
            acceptance=args.mtp_acceptance,
            batch=args.batch,
        )
    doc = result.to_json() | ({"mtp_on_link": on_link.to_json()} if on_link else {})
    if args.json is not None and str(args.json) == "-":
        print(json.dumps(doc, indent=2))
        return ExitCode.OK
    print(render_plan(result), end="")
    if on_link:
        print("\n" + render_link(on_link), end="")
    if args.json:
        write_json(args.json, doc)
    return ExitCode.OK
