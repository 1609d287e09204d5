"""A pipeline-parallel plan (`plan.Plan`) as a person reads it: the partition, each stage's layers, bytes and KV
tokens, which stages start on a shared layer, and the all-full alternative with its cost (`vllm-compose pp-plan`);
and, with a link, whether MTP pays on it (`step.MtpEstimate`, `render_link`).
"""

from __future__ import annotations

from .plan import GIB, Partition, Plan, Stage
from .step import MtpEstimate


def _layers(stage_: Stage) -> str:
    return f"{stage_.start}-{stage_.end - 1}" if stage_.layers > 1 else str(stage_.start)


def _gib(n: int) -> str:
    return f"{n / GIB:.2f}"


def _ranges(layers: list[int]) -> str:
    """0, 1, 2, 6, 10, ..., 74 as "0-2, 6, 10, ..., 74" (an arithmetic run of 4+ is elided)."""
    out: list[str] = []
    i = 0
    while i < len(layers):
        j = i
        while j + 1 < len(layers) and layers[j + 1] == layers[j] + 1:
            j += 1
        if j > i:
            out.append(f"{layers[i]}-{layers[j]}")
            i = j + 1
            continue
        step = layers[i + 1] - layers[i] if i + 1 < len(layers) else 0
        j = i
        while step > 1 and j + 1 < len(layers) and layers[j + 1] - layers[j] == step:
            j += 1
        if j - i >= 3:
            out.append(f"{layers[i]}, {layers[i + 1]}, ..., {layers[j]}")
            i = j + 1
        else:
            out.append(str(layers[i]))
            i += 1
    return ", ".join(out)


def _plural(items: list, word: str) -> str:
    return word if len(items) == 1 else word + "s"


def _starts(p: Partition) -> str:
    return ", ".join(f"{s.start}{'' if s.first_full else '*'}" for s in p.stages[1:]) or "-"


def _loss(p: Partition, reference: Partition) -> str:
    if reference.kv_blocks <= 0:
        return ""
    pct = (p.kv_blocks - reference.kv_blocks) / reference.kv_blocks * 100
    return f"{pct:+.1f}% KV tokens vs the balanced split"


def render_plan(p: Plan) -> str:
    """The plan as text: the variable to set, the per-stage table, the comparisons, the assumptions."""
    shape, st, c = p.shape, p.settings, p.chosen
    bits = f"{st.bits}-bit weights (group {st.group_size})" if st.bits < 16 else "bf16 weights"
    mtp_bits = st.mtp_bits if st.mtp_bits is not None else st.bits
    mtp = f", MTP {st.mtp} ({shape.mtp_layers} MTP layer, {mtp_bits}-bit)" if st.mtp else ", no MTP"
    full = p.full_layers
    lines = [
        f"pp-plan: {shape.model_type}, {shape.num_layers} layers, PP {st.pp}, {st.gpu_memory_gib:g} GiB per GPU at "
        f"{st.gpu_memory_utilization:g}{mtp}, {bits}",
        f"full layers (compute their top-k): {len(full)} of {shape.num_layers}: {_ranges(full)}",
        "",
        f"VLLM_PP_LAYER_PARTITION={c.env}",
        "",
        f"{'stage':>5}  {'layers':>7}  {'n':>3}  {'first':>6}  {'weights':>8}  {'act+nt':>7}  {'KV':>7}  "
        f"{'KV B/tok':>8}  {'KV tokens':>11}",
    ]
    for s in c.stages:
        mark = "  <- tightest" if s is c.tightest and st.pp > 1 else ""
        lines.append(
            f"{s.index + 1:>5}  {_layers(s):>7}  {s.layers:>3}  {'full' if s.first_full else 'shared':>6}  "
            f"{_gib(s.weights):>8}  {_gib(s.activation + s.non_torch):>7}  {_gib(max(s.kv_bytes, 0)):>7}  "
            f"{s.kv_bytes_per_token:>8,}  {s.kv_tokens(st.block_size):>11,}{mark}"
        )
    lines += [
        "(GiB; weights = what vLLM reports as model loading; act+nt = estimated activation peak + non-torch; KV = "
        f"{st.gpu_memory_utilization:g} x total less both)",
        "",
        f"pipeline KV: {c.kv_tokens:,} tokens ({c.kv_blocks:,} blocks of {st.block_size}: vLLM gives every stage "
        f"the tightest stage's count); one {st.model_len(shape):,}-token request needs {p.required_blocks:,} blocks",
    ]
    relay = c.shared_starts
    lines.append(
        f"this plan: {len(relay)} of {st.pp - 1} later stages start on a shared layer"
        + (
            f" ({_plural(relay, 'stage')} {', '.join(str(s.index + 1) for s in relay)} at "
            f"{_plural(relay, 'layer')} {', '.join(str(s.start) for s in relay)}: "
            f"{'it needs' if len(relay) == 1 else 'they need'} the top-k relay (the compose's up to v0.33.0, vLLM's own "
            "from v0.34.0); stock vLLM before v0.34.0 reads a stale selection there)"
            if relay
            else " (no top-k relay needed, on stock vLLM too)"
        )
        + (f"; {_loss(c, p.balanced)}" if c.sizes != p.balanced.sizes else "")
    )
    d = p.default
    fits = f"{d.kv_tokens:,} KV tokens"
    if d.kv_blocks < p.required_blocks:
        t = d.tightest
        short = p.required_blocks * t.kv_block_bytes - t.kv_bytes
        fits = (
            f"does not fit: stage {t.index + 1} is {_gib(short)} GiB short of one {st.model_len(shape):,}-token request"
        )
    lines.append(
        f"vLLM's default split {d.env}: {len(d.shared_starts)} of {st.pp - 1} later stages start on a shared layer "
        f"(starts {_starts(d)}; * = shared), {fits}"
    )
    if p.balanced.sizes != c.sizes:
        b = p.balanced
        lines.append(
            f"the balanced split {b.env}: {len(b.shared_starts)} of {st.pp - 1} later stages start on a shared layer "
            f"(starts {_starts(b)}), "
            f"{b.kv_tokens:,} KV tokens"
        )
    if relay:
        if p.all_full is not None:
            a = p.all_full
            lines.append(
                f"every stage on a full layer: {a.env} (starts {_starts(a)}), {a.kv_tokens:,} KV tokens, "
                f"{_loss(a, p.balanced)}, longest stage {max(a.sizes)} layers vs {max(c.sizes)}: outside the "
                f"{st.tolerance * 100:g}% tolerance (--tolerance)"
            )
        else:
            lines.append("no partition starts every stage on a full layer and fits")
    last = c.stages[-1]
    if last.mtp:
        m = last.mtp
        lines.append(
            f"MTP on stage {last.index + 1}: {_gib(m.resident)} GiB resident ({_gib(m.weights)} MTP layer, eh_proj, "
            f"norms, top-k buffer; {_gib(m.embedding)} its embedding), {m.kv_bytes_per_token:,} KV B/token; "
            f"loading peaks {_gib(m.load_transient)} GiB higher (its shared head"
            f"{' is' if st.pp > 1 else ' and embedding are'} loaded, then replaced by the target's)"
        )
    lines += [
        "",
        "estimates: activation = the profile run's torch peak (hidden states, the indexer's prefill workspace for "
        f"max_model_len {st.model_len(shape):,}, the largest layer transient at {st.max_num_batched_tokens:,} "
        f"batched tokens, the sampler): a floor, measured 4.5-4.9 GB low at 8,192 batched tokens on an H200 (lab/notebook/validation.md), so keep 5 GB of slack on the tightest stage; non-torch {_gib(st.non_torch_bytes)} GiB assumed. Quantized: "
        "attention projections, indexer wq_b, MLPs and experts; bf16: embeddings, LM head, norms, router gate, "
        "indexer wk, MTP eh_proj.",
    ]
    return "\n".join(lines) + "\n"


def _kib(n: float) -> str:
    return f"{n / 1024:,.1f}"


def render_link(e: MtpEstimate) -> str:
    """Whether MTP pays on the link: per stage the compute and the hand-off into it, the step's parts with and
    without MTP, tok/s, the speed-up, the break-even acceptance and a one-line verdict."""
    k, p, m = e.k, e.plain, e.mtp
    mtp = f"MTP {k}"
    start = 0
    lines = [
        f"{mtp} on this link: {e.link.describe()}",
        f"compute: {e.clock}",
        f"batch {e.batch} (a step: {p.rows} row{'s' if p.rows > 1 else ''} without MTP, {m.rows} with {mtp}), "
        f"partition {','.join(map(str, e.sizes))}, acceptance {e.acceptance:.2f} a draft",
        "",
        f"{'stage':>5}  {'layers':>7}  {'compute ms':>15}  {'hand-off in':>11}  {'KiB':>17}  {'ms':>15}",
        f"{'':>5}  {'':>7}  {'no MTP / ' + mtp:>15}  {'':>11}  {'no MTP / ' + mtp:>17}  {'no MTP / ' + mtp:>15}",
    ]
    into = {b.into: i for i, b in enumerate(e.boundaries)}
    for s, n in enumerate(e.sizes):
        layers = f"{start}-{start + n - 1}" if n > 1 else str(start)
        start += n
        row = f"{s + 1:>5}  {layers:>7}  {f'{p.stage_ms[s]:.2f} / {m.stage_ms[s]:.2f}':>15}"
        if s in into:
            i = into[s]
            what = "h+r, top-k" if e.boundaries[i].relays_topk else "h+r"
            sent = f"{_kib(p.handoff_bytes[i])} / {_kib(m.handoff_bytes[i])}"
            ms = f"{p.handoff_ms[i]:.3f} / {m.handoff_ms[i]:.3f}"
            row += f"  {what:>11}  {sent:>17}  {ms:>15}"
        lines.append(row)
    draft = sum(m.draft_ms)
    steps = f"{k} draft step{'s' if k > 1 else ''}"
    fixed = "measured" if e.round_measured else "assumed: the accepted counts' broadcast to the earlier stages"
    lines += [
        "(the last stage's compute includes the final norm and the LM head; h+r = hidden states and residual, top-k "
        "= the relayed indices: the stage starts on a layer that reuses the top-k)",
        "",
        f"{'':<16}  {'no MTP':>9}  {mtp:>9}",
        f"{'compute ms':<16}  {p.compute_ms:>9.2f}  {m.compute_ms:>9.2f}",
        f"{'hand-offs ms':<16}  {p.link_ms:>9.3f}  {m.link_ms:>9.3f}",
        f"{'draft round ms':<16}  {'-':>9}  {draft + m.round_ms:>9.2f}   ({steps} {draft:.2f} + fixed {m.round_ms:.2f}, "
        f"{fixed})",
        f"{'step ms':<16}  {p.total_ms:>9.2f}  {m.total_ms:>9.2f}",
        f"{'tokens a step':<16}  {1:>9.2f}  {e.tokens_per_step:>9.2f}   (a request: "
        f"{' + '.join(['1'] + [f'{e.acceptance:.2f}' + (f'^{i}' if i > 1 else '') for i in range(1, k + 1)])}, "
        "drafts accepted independently)",
        f"{'tok/s':<16}  {e.tok_s_plain:>9.1f}  {e.tok_s_mtp:>9.1f}",
        "",
    ]
    even = e.break_even
    if even is None:
        where = f"no acceptance makes {mtp} pay here (the step costs more than {k + 1}x the plain one)"
    elif even == 0:
        where = f"{mtp} pays here at any acceptance"
    else:
        where = f"{mtp} pays above acceptance {even:.2f}"
    budget = (
        f"at {e.acceptance:.2f} the draft round's fixed cost may reach {e.max_round_ms:.2f} ms before it stops paying"
        if e.max_round_ms > 0
        else f"at {e.acceptance:.2f} it does not pay even with a free draft round"
    )
    lines += [
        f"speed-up {e.speedup:.2f}x; {where}; {budget}",
        e.verdict(),
    ]
    return "\n".join(lines) + "\n"
