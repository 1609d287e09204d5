"""The IndexCache top-k under pipeline parallelism, on each release's own model code (series entries
fix-deepseek-v2-indexcache-pp-topk-relay, fix-deepseek-v32-indexcache-pp-topk-relay-v0.29 and
fix-deepseek-v32-indexcache-pp-topk-relay up to v0.33.0; from v0.34.0 vLLM relays the top-k itself and no entry
applies).

GLM-5.x builds an indexer on layers 0, 1, 2, 6, 10, ... only; the other layers attend with the rows the last full
layer left in the rank's top-k buffer. Here the release's model class (`DeepseekV2Model` of deepseek_v2.py up to
v0.28.0, `DeepseekV32Model` of deepseek_v32/nvidia/model.py from v0.29.0; from the PyPI sdist) and the same class
after the series' relay entry run as pipeline stages on a CPU, each with its own buffer as each rank has:

- the class body, `__init__` and `forward` included, is the release's, executed in a namespace whose vLLM pieces are
  stand-ins: `get_pp_group` answers the stage's rank, `make_layers` builds the stage's layers, and each layer is a
  recorder. A full layer writes a selection that names its layer, the request and the step; a shared layer records
  the rows it reads. `IntermediateTensors` and `make_empty_intermediate_tensors_factory` are the release's own;
- between stages the hand-over is the V2 runner's (vllm/v1/worker/gpu/model_runner.py, non-first PP ranks): the
  receiver holds persistent tensors made by its model's `make_empty_intermediate_tensors` and copies into them only
  the keys they have;
- a shared layer is right when it reads exactly the rows the last full layer before it wrote for this batch, in this
  batch's row order. Stock must read others (garbage, then stale rows); the compose must read those.

From v0.34.0 stock reads them: the model maps the key `topk_indices` to its buffer (`pp_topk_buffers` of
vllm/model_executor/models/utils.py, when a later stage starts on a shared layer), sends the buffer's rows with the
hidden states, declares the key to the receive buffers and copies what it receives into its buffer before its first
layer (`copy_pp_buffers`). Those functions, `compute_skip_topk_layers` and `pp_splits_layer_sharing` run as the
release has them, with the release's `get_pp_indices` (vllm/distributed/utils.py) choosing the split; without the
copy-in the same stages read stale rows again, which shows these tests can tell the two apart.
"""

from __future__ import annotations

import ast
import re
import sys
import types
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from itertools import islice, pairwise
from pathlib import Path

import pytest
from release_trees import release_files, release_functions

torch = pytest.importorskip("torch", reason="the release's model code runs on CPU torch (installed by .ci/run)")

from vllm_compose.apply import apply_patches  # noqa: E402
from vllm_compose.patchfile import parse_patch  # noqa: E402
from vllm_compose.pp.topk_relay import called_module_functions  # noqa: E402
from vllm_compose.series import load_series  # noqa: E402

pytestmark = [pytest.mark.sdist, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
SERIES = REPO / "series"
SEQUENCE, UTILS = "vllm/sequence.py", "vllm/model_executor/models/utils.py"
DIST_UTILS = "vllm/distributed/utils.py"


@dataclass(frozen=True)
class ModelPath:
    """Where a release defines the model GLM-5.x runs from on CUDA, and the attention that decides a shared layer."""

    model_file: str
    model_class: str
    layer_class: str
    attention_file: str


V2 = ModelPath(
    "vllm/model_executor/models/deepseek_v2.py",
    "DeepseekV2Model",
    "DeepseekV2DecoderLayer",
    "vllm/model_executor/models/deepseek_v2.py",
)
V32 = ModelPath(
    "vllm/models/deepseek_v32/nvidia/model.py",
    "DeepseekV32Model",
    "DeepseekV32DecoderLayer",
    "vllm/models/deepseek_v32/attention.py",
)
#: both ends of each path's range, and v0.30.0, where the buffer moved onto the model
RELEASES = {"v0.26.0": V2, "v0.28.0": V2, "v0.29.0": V32, "v0.30.0": V32, "v0.33.0": V32}
#: releases that relay the top-k themselves (pp_topk_buffers / copy_pp_buffers), where no relay entry applies
RELAYED_UPSTREAM = {"v0.34.0": V32}
#: the functions of models/utils.py the model runs (those a release has)
UTILS_FUNCTIONS = [
    "make_empty_intermediate_tensors_factory",
    "compute_skip_topk_layers",
    "pp_splits_layer_sharing",
    "pp_topk_buffers",
    "copy_pp_buffers",
]

#: GLM-5.x's IndexCache settings (its config.json) at its real depth, small everywhere else
NUM_LAYERS, HIDDEN, TOPK, MAX_TOKENS = 78, 8, 16, 32
GLM5 = {"index_topk_freq": 4, "index_skip_topk_offset": 3}


def skips_topk(layer: int, freq: int = 4, offset: int = 3) -> bool:
    """The release's rule for a layer that builds no indexer (pinned to the release's text by
    test_the_stub_layers_follow_the_release_rule)."""
    return max(layer - offset + 1, 0) % freq != 0


def selection(layer: int, token: int, step: int) -> list[int]:
    """The top-k row a full layer writes: it names the layer, the request (its token) and the step."""
    return [layer * 1_000_000 + token * 1_000 + step * 10 + j % 10 for j in range(TOPK)]


class Recorder:
    """What every shared layer of every stage read, in order: (layer, rows as lists)."""

    def __init__(self):
        self.reads: list[tuple[int, list[list[int]]]] = []


class RecordingLayer(torch.nn.Module):
    """A decoder layer: a full one writes `selection` rows into the top-k buffer it was built with, a shared one
    records the rows it reads there. Hidden states pass through; column 0 carries the request's token, column 1 the
    step."""

    def __init__(self, *, prefix: str, topk_indices_buffer, recorder: Recorder, **_):
        super().__init__()
        self.layer = int(prefix.rsplit(".", 1)[1])
        self.buffer = topk_indices_buffer
        self.recorder = recorder
        self.use_sequence_parallel_moe = False

    def forward(self, positions, hidden_states, residual, *_):
        n = hidden_states.shape[0]
        if skips_topk(self.layer):
            self.recorder.reads.append((self.layer, self.buffer[:n].tolist()))
        else:
            rows = [selection(self.layer, int(t), int(s)) for t, s in hidden_states[:, :2].tolist()]
            self.buffer[:n] = torch.tensor(rows, dtype=torch.int32)
        # a zero residual: v0.34.0 sends `residual + hidden_states`, which keeps the request and step columns
        return hidden_states, torch.zeros_like(hidden_states) if residual is None else residual


class PPGroup:
    def __init__(self, rank: int, size: int):
        self.is_first_rank, self.is_last_rank = rank == 0, rank == size - 1
        self.world_size = size


class Embed(torch.nn.Module):
    """The first stage's embedding: a request's hidden state carries its token (column 0) and the step (column 1)."""

    def __init__(self, *args, **kwargs):
        super().__init__()
        self.step = 0

    def forward(self, input_ids):
        hidden = torch.zeros(input_ids.shape[0], HIDDEN)
        hidden[:, 0] = input_ids.to(torch.float32)
        hidden[:, 1] = self.step
        return hidden


class Passthrough(torch.nn.Module):
    """A missing layer, the final norm: hidden states pass through."""

    def __init__(self, *args, **kwargs):
        super().__init__()
        self.weight = None

    def forward(self, x, residual=None):
        if residual is not None:
            return x, residual
        return x


def stage_class(source: str, path: ModelPath, namespace: dict):
    """The release's model class (and the module functions it uses) executed in `namespace`, decorators off."""
    module = ast.parse(source)
    cls = next(n for n in module.body if isinstance(n, ast.ClassDef) and n.name == path.model_class)
    cls.decorator_list = []
    body = [*called_module_functions(module, cls), cls]
    exec(compile(ast.Module(body, []), path.model_file, "exec"), namespace)  # noqa: S102 - the release's own code
    return namespace[path.model_class]


@dataclass
class Release:
    """One release's texts: the model file as the sdist has it and after the series' relay entry (None where the
    release relays by itself)."""

    tag: str
    path: ModelPath
    stock: str
    composed: str | None
    sequence: str
    utils: str
    attention: str
    dist_utils: str


@pytest.fixture(scope="module", params=sorted(RELEASES))
def release(request, tmp_path_factory) -> Release:
    tag, path = request.param, RELEASES[request.param]
    files = release_files(tmp_path_factory, tag, [path.model_file, SEQUENCE, UTILS, path.attention_file, DIST_UTILS])
    entries = [
        e for e in load_series(SERIES).entries_for(tag) if e.file is not None and "indexcache-pp-topk-relay" in e.id
    ]
    assert len(entries) == 1, (tag, [e.id for e in entries])  # the series relays in every release
    target = tmp_path_factory.mktemp(f"relay-{tag}")
    (target / path.model_file).parent.mkdir(parents=True)
    (target / path.model_file).write_text(files[path.model_file])
    result = apply_patches(target, [parse_patch(entries[0].file.read_bytes(), name=entries[0].file.name)])
    assert result.ok, [h.to_json() for h in result.hunks]
    return Release(
        tag,
        path,
        files[path.model_file],
        (target / path.model_file).read_text(),
        files[SEQUENCE],
        files[UTILS],
        files[path.attention_file],
        files[DIST_UTILS],
    )


@pytest.fixture(scope="module", params=sorted(RELAYED_UPSTREAM))
def upstream(request, tmp_path_factory) -> Release:
    """A release that relays the top-k itself: its stock texts."""
    tag, path = request.param, RELAYED_UPSTREAM[request.param]
    files = release_files(tmp_path_factory, tag, [path.model_file, SEQUENCE, UTILS, path.attention_file, DIST_UTILS])
    return Release(
        tag,
        path,
        files[path.model_file],
        None,
        files[SEQUENCE],
        files[UTILS],
        files[path.attention_file],
        files[DIST_UTILS],
    )


def pp_indices(rel: Release, bounds: list[int]):
    """The release's own `get_pp_indices`, answering `bounds`: vLLM's default split where `bounds` is it, else
    `VLLM_PP_LAYER_PARTITION` set to `bounds` (as pp-plan's partitions are launched)."""
    envs = types.SimpleNamespace(VLLM_PP_LAYER_PARTITION=None)
    logger = types.SimpleNamespace(info=lambda *args, **kwargs: None)
    fn = release_functions(rel.dist_utils, DIST_UTILS, ["get_pp_indices"], {"envs": envs, "logger": logger})
    get_pp_indices = fn["get_pp_indices"]
    size = len(bounds) - 1
    if [get_pp_indices(NUM_LAYERS, r, size)[0] for r in range(size)] + [NUM_LAYERS] != bounds:
        envs.VLLM_PP_LAYER_PARTITION = ",".join(str(b - a) for a, b in pairwise(bounds))
    assert [get_pp_indices(NUM_LAYERS, r, size) for r in range(size)] == list(pairwise(bounds))
    return get_pp_indices


def build_stage(rel: Release, source: str, rank: int, bounds: list[int], recorder: Recorder, monkeypatch):
    """Pipeline stage `rank` of `len(bounds) - 1`, layers bounds[rank]:bounds[rank + 1], from the release's class."""
    seq_ns: dict = {"dataclass": dataclass, "torch": torch}
    seq_module = ast.parse(rel.sequence)
    it_cls = next(n for n in seq_module.body if isinstance(n, ast.ClassDef) and n.name == "IntermediateTensors")
    exec(compile(ast.Module([it_cls], []), SEQUENCE, "exec"), seq_ns)  # noqa: S102 - the release's own code
    intermediate = seq_ns["IntermediateTensors"]
    pp_group = PPGroup(rank, len(bounds) - 1)
    utils = release_functions(
        rel.utils,
        UTILS,
        UTILS_FUNCTIONS,
        {"torch": torch, "IntermediateTensors": intermediate, "Iterable": Iterable, "Mapping": Mapping},
    )
    start, end = bounds[rank], bounds[rank + 1]

    def make_layers(num_hidden_layers, layer_fn, prefix):
        assert num_hidden_layers == NUM_LAYERS
        layers = [layer_fn(prefix=f"{prefix}.{i}") if start <= i < end else Passthrough() for i in range(NUM_LAYERS)]
        return start, end, torch.nn.ModuleList(layers)

    def layer_cls(vllm_config=None, prefix="", topk_indices_buffer=None, **kwargs):
        return RecordingLayer(prefix=prefix, topk_indices_buffer=topk_indices_buffer, recorder=recorder)

    platform = types.SimpleNamespace(device_type="cpu", is_cuda=lambda: False)
    platforms = types.ModuleType("vllm.platforms")
    platforms.current_platform = platform  # type: ignore[attr-defined]
    # what pp_splits_layer_sharing imports when it runs
    parallel_state = types.ModuleType("vllm.distributed.parallel_state")
    parallel_state.get_pp_group = lambda: pp_group  # type: ignore[attr-defined]
    dist_utils = types.ModuleType("vllm.distributed.utils")
    dist_utils.get_pp_indices = pp_indices(rel, bounds)  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "vllm", types.ModuleType("vllm"))
    monkeypatch.setitem(sys.modules, "vllm.platforms", platforms)
    monkeypatch.setitem(sys.modules, "vllm.distributed", types.ModuleType("vllm.distributed"))
    monkeypatch.setitem(sys.modules, "vllm.distributed.parallel_state", parallel_state)
    monkeypatch.setitem(sys.modules, "vllm.distributed.utils", dist_utils)
    namespace = {
        "torch": torch,
        "nn": torch.nn,
        "islice": islice,
        "IntermediateTensors": intermediate,
        **utils,
        "get_pp_group": lambda: pp_group,
        "tensor_model_parallel_all_reduce": lambda hidden_states: hidden_states,
        "make_layers": make_layers,
        rel.path.layer_class: layer_cls,
        "current_platform": platform,
        "VocabParallelEmbedding": Embed,
        "make_input_embedding": Embed,
        "has_full_vocab_on_rank": lambda embed: False,
        "PPMissingLayer": Passthrough,
        "RMSNorm": Passthrough,
        "fused_allreduce_rms_norm": lambda hidden_states, residual, norm: (hidden_states, residual),
        "SparseMLAIndexGroupBuilder": lambda *args, **kwargs: None,
        "get_sparse_mla_index_group_max_rows": lambda vllm_config: 0,
    }
    cls = stage_class(source, rel.path, namespace)
    config = types.SimpleNamespace(
        num_hidden_layers=NUM_LAYERS,
        hidden_size=HIDDEN,
        vocab_size=1000,
        index_topk=TOPK,
        rms_norm_eps=1e-6,
        model_type="glm_moe_dsa",
        qk_nope_head_dim=192,
        qk_rope_head_dim=64,
        llama_4_scaling=None,
        **GLM5,
    )
    parallel = types.SimpleNamespace(
        use_sequence_parallel_moe=False,
        pipeline_parallel_size=len(bounds) - 1,
        eplb_config=types.SimpleNamespace(num_redundant_experts=0),
    )
    vllm_config = types.SimpleNamespace(
        model_config=types.SimpleNamespace(hf_config=config),
        quant_config=None,
        scheduler_config=types.SimpleNamespace(max_num_batched_tokens=MAX_TOKENS),
        parallel_config=parallel,
    )
    return cls(vllm_config=vllm_config, prefix="model"), intermediate


class Pipeline:
    """The stages of one model, chained as the V2 runner hands over between ranks."""

    def __init__(self, rel: Release, source: str, bounds: list[int], monkeypatch):
        self.recorder = Recorder()
        built = [build_stage(rel, source, r, bounds, self.recorder, monkeypatch) for r in range(len(bounds) - 1)]
        self.stages = [model for model, _ in built]
        self.intermediate = built[0][1]
        # model_runner.py: a non-first rank's persistent receive tensors, from its model's factory
        self.receive = [
            None,
            *(
                s.make_empty_intermediate_tensors(batch_size=MAX_TOKENS, dtype=torch.float32, device="cpu")
                for s in self.stages[1:]
            ),
        ]
        self.sent_keys: list[list[str]] = []

    def step(self, tokens: list[int], step: int) -> None:
        n = len(tokens)
        positions = torch.arange(n)
        self.stages[0].embed_tokens.step = step
        out = self.stages[0](input_ids=torch.tensor(tokens), positions=positions, intermediate_tensors=None)
        for rank in range(1, len(self.stages)):
            self.sent_keys.append(sorted(out.tensors))
            # model_runner.py: only the keys of the persistent tensors are copied (v[:n].copy_(received[k][:n]))
            received = self.intermediate(
                {k: v[:n].copy_(out.tensors[k][:n]) for k, v in self.receive[rank].tensors.items()}
            )
            out = self.stages[rank](input_ids=None, positions=positions, intermediate_tensors=received)

    def scribble_last_stage(self, value: int) -> None:
        """What the MTP drafter does on the last stage between two target steps: it shares the target's buffer
        (the V2 runner's eagle/utils.py and the V1 llm_base_proposer point it there) and its draft step 0 writes
        its own selection into it."""
        last = self.stages[-1]
        buffer = next(layer.buffer for layer in last.layers if isinstance(layer, RecordingLayer))
        buffer.fill_(value)


def expected_reads(bounds: list[int], tokens: list[int], step: int) -> list[tuple[int, list[list[int]]]]:
    """What each shared layer reads in a PP1 run: the rows of the last full layer before it, this batch, this step."""
    out = []
    for layer in range(bounds[0], bounds[-1]):
        if skips_topk(layer):
            full = max(k for k in range(layer) if not skips_topk(k))
            out.append((layer, [selection(full, t, step) for t in tokens]))
    return out


#: vLLM's default split of 78 layers over 8 stages (get_pp_indices): 9,10,10,10,10,10,10,9
DEFAULT_PP8 = [0, 9, 19, 29, 39, 49, 59, 69, 78]
DEFAULT_PP2 = [0, 39, 78]
FULL_START_PP2 = [0, 42, 78]  # stage 2 starts on layer 42, a full one
#: the batches of two steps: a request finished, another joined, and the rows were reordered
STEPS = [[10, 11, 12, 13], [13, 10, 14, 11]]


def _run(rel: Release, source: str, bounds: list[int], monkeypatch, drafter: bool = False) -> Pipeline:
    pipe = Pipeline(rel, source, bounds, monkeypatch)
    for step, tokens in enumerate(STEPS, start=1):
        if drafter and step > 1:
            pipe.scribble_last_stage(-7)
        pipe.recorder.reads.clear()
        pipe.step(tokens, step)
    return pipe


def shared_stage_heads(bounds: list[int]) -> list[int]:
    """The shared layers between a later stage's start and its first full layer: those that read no top-k of this
    step unless it is relayed (PP8 default: 9, 19-21, 29, 39-41, 49, 59-61, 69)."""
    heads = []
    for start, end in zip(bounds[1:-1], bounds[2:], strict=True):
        layer = start
        while layer < end and skips_topk(layer):
            heads.append(layer)
            layer += 1
    return heads


def _wrong_layers(pipe: Pipeline, bounds: list[int]) -> list[int]:
    want = dict(expected_reads(bounds, STEPS[-1], len(STEPS)))
    got = dict(pipe.recorder.reads)
    assert got.keys() == want.keys()
    return sorted(layer for layer in want if got[layer] != want[layer])


@pytest.mark.parametrize("bounds", [DEFAULT_PP2, DEFAULT_PP8], ids=["pp2-39-39", "pp8-default"])
def test_stock_stages_that_start_on_a_shared_layer_read_stale_rows(release, bounds, monkeypatch):
    pipe = _run(release, release.stock, bounds, monkeypatch)
    assert _wrong_layers(pipe, bounds) == shared_stage_heads(bounds)
    assert all(keys == ["hidden_states", "residual"] for keys in pipe.sent_keys)
    # at step 2 they read the rows their own stage's last full layer wrote at step 1, in step 1's order
    reads = dict(pipe.recorder.reads)
    for start in bounds[1:-1]:
        if skips_topk(start):
            own_last_full = max(k for k in range(start, bounds[bounds.index(start) + 1]) if not skips_topk(k))
            assert reads[start] == [selection(own_last_full, t, 1) for t in STEPS[0]]


@pytest.mark.parametrize("drafter", [False, True], ids=["target-only", "mtp-drafter-shares-the-last-buffer"])
@pytest.mark.parametrize("bounds", [DEFAULT_PP2, DEFAULT_PP8], ids=["pp2-39-39", "pp8-default"])
def test_the_compose_relays_the_previous_stage_rows_for_this_batch(release, bounds, drafter, monkeypatch):
    pipe = _run(release, release.composed, bounds, monkeypatch, drafter=drafter)
    assert _wrong_layers(pipe, bounds) == []
    # the relay crosses exactly the boundaries whose next layer is shared
    hops = len(bounds) - 2
    sent = pipe.sent_keys[-hops:]
    for start, keys in zip(bounds[1:-1], sent, strict=True):
        assert ("topk_indices" in keys) == skips_topk(start), (start, keys)


def test_the_stock_drafter_rows_reach_the_last_stage(release, monkeypatch):
    """The drafter's buffer sharing: on stock the last stage's first layers read the drafter's rows."""
    pipe = _run(release, release.stock, DEFAULT_PP2, monkeypatch, drafter=True)
    reads = dict(pipe.recorder.reads)
    assert reads[39] == [[-7] * TOPK for _ in STEPS[-1]]


@pytest.mark.parametrize("source", ["stock", "composed"])
def test_a_stage_that_starts_on_a_full_layer_needs_no_relay(release, source, monkeypatch):
    """The partition pp-plan prefers: stage 2 starts on layer 42, which computes its own top-k."""
    pipe = _run(release, getattr(release, source), FULL_START_PP2, monkeypatch)
    assert _wrong_layers(pipe, FULL_START_PP2) == []
    assert all(keys == ["hidden_states", "residual"] for keys in pipe.sent_keys)


def test_the_stub_layers_follow_the_release_rule(release):
    """The recorder's `skips_topk` is the release's: the attention's defaults and expression, and (compose) the
    relay's own `_layer_skips_topk` executed from the patched file agrees on every layer and on a pattern."""
    text = re.sub(r"\s+", " ", release.attention)
    assert re.search(r'getattr\(config, "index_topk_freq", 1\)', text)
    assert re.search(r'getattr\(config, "index_skip_topk_offset", 2\)', text)
    assert re.search(r"max\(layer_id - _?index_skip_topk_offset \+ 1, 0\) % _?index_topk_freq != 0", text)
    assert re.search(r'_?index_topk_pattern\[layer_id\] == "S"', text)
    rule = release_functions(release.composed, release.path.model_file, ["_layer_skips_topk"], {})["_layer_skips_topk"]
    glm5 = types.SimpleNamespace(index_topk=2048, **GLM5)
    assert [rule(glm5, k) for k in range(NUM_LAYERS)] == [skips_topk(k) for k in range(NUM_LAYERS)]
    assert [k for k in range(NUM_LAYERS) if not rule(glm5, k)][:6] == [0, 1, 2, 6, 10, 14]
    v32 = types.SimpleNamespace(index_topk=2048)  # DeepSeek-V3.2: no IndexCache keys, every layer full
    assert not any(rule(v32, k) for k in range(61))
    pattern = types.SimpleNamespace(index_topk=2048, index_topk_pattern="FFSFS")
    assert [rule(pattern, k) for k in range(7)] == [False, False, True, False, True, False, False]
    assert not rule(types.SimpleNamespace(), 5)  # no index_topk: not a DSA model


@pytest.mark.parametrize("tag", ["v0.26.0", "v0.29.0", "v0.33.0", "v0.34.0"])
def test_the_v2_runner_shares_the_target_buffer_with_the_drafter(tmp_path_factory, tag):
    """What `scribble_last_stage` stands for is the recipe's own runner (VLLM_USE_V2_MODEL_RUNNER=1): its MTP set-up
    points every draft module that has a `topk_indices_buffer` at the target model's, and from v0.29.0 its MTP
    speculator lets draft step 0 compute the top-k there, compacts it and reuses it (index_share_for_mtp_iteration).
    So on the last stage the drafter writes the target's buffer between two target steps."""
    utils, speculator = (
        "vllm/v1/worker/gpu/spec_decode/eagle/utils.py",
        "vllm/v1/worker/gpu/spec_decode/mtp/speculator.py",
    )
    texts = release_files(tmp_path_factory, tag, [utils])
    assert "target_buffer = target_inner.topk_indices_buffer" in texts[utils]
    assert "module.topk_indices_buffer = target_buffer" in texts[utils]
    if tag != "v0.26.0":
        reuse = release_files(tmp_path_factory, tag, [speculator])[speculator]
        assert "self.model.model.set_skip_topk(True)" in reuse
        assert "self.model.model.compact_topk_indices(" in reuse


# --- releases that relay the top-k themselves ---------------------------------------------------------------------

#: the line of v0.34.0's forward that copies the received rows into the stage's buffer
UPSTREAM_COPY_IN = "copy_pp_buffers(intermediate_tensors, self.pp_buffers)"


def test_no_relay_entry_applies_where_upstream_relays(upstream, tmp_path):
    """The series' relay entry is for releases that do not relay: it does not apply on v0.34.0 (its receive and send
    hunks meet upstream's relay), and the series must not select it there."""
    entry = next(e for e in load_series(SERIES).entries if e.id == "fix-deepseek-v32-indexcache-pp-topk-relay")
    (tmp_path / upstream.path.model_file).parent.mkdir(parents=True)
    (tmp_path / upstream.path.model_file).write_text(upstream.stock)
    patch = parse_patch(entry.file.read_bytes(), name=entry.file.name)
    result = apply_patches(tmp_path, [patch], dry_run=True)
    assert not result.ok and [h.hunk for h in result.hunks if h.verdict.value == "conflict"] == [3, 4]
    selected = [e.id for e in load_series(SERIES).entries_for(upstream.tag) if "indexcache-pp-topk-relay" in e.id]
    assert selected == []


@pytest.mark.parametrize("drafter", [False, True], ids=["target-only", "mtp-drafter-shares-the-last-buffer"])
@pytest.mark.parametrize("bounds", [DEFAULT_PP2, DEFAULT_PP8], ids=["pp2-39-39", "pp8-default"])
def test_upstream_relays_the_previous_stage_rows_for_this_batch(upstream, bounds, drafter, monkeypatch):
    """Stock: every shared layer reads the rows of the last full layer before it, for this batch, in its order —
    also on the last stage after the MTP drafter wrote its buffer. vLLM relays across every boundary once one of
    them starts on a shared layer (at PP2 and PP8 by default all do)."""
    pipe = _run(upstream, upstream.stock, bounds, monkeypatch, drafter=drafter)
    assert _wrong_layers(pipe, bounds) == []
    assert all(keys == ["hidden_states", "topk_indices"] for keys in pipe.sent_keys)


@pytest.mark.parametrize("bounds", [DEFAULT_PP2, DEFAULT_PP8], ids=["pp2-39-39", "pp8-default"])
def test_without_upstreams_copy_in_stages_read_stale_rows(upstream, bounds, monkeypatch):
    """The same model with its copy-in taken away: the rows still cross, but the stages that start on a shared layer
    read what their own last full layer wrote at the previous step, as before v0.34.0."""
    assert upstream.stock.count(UPSTREAM_COPY_IN) == 1
    pipe = _run(upstream, upstream.stock.replace(UPSTREAM_COPY_IN, "pass"), bounds, monkeypatch)
    assert _wrong_layers(pipe, bounds) == shared_stage_heads(bounds)
    reads = dict(pipe.recorder.reads)
    for start, end in pairwise(bounds[1:]):
        own_last_full = max(k for k in range(start, end) if not skips_topk(k))
        assert reads[start] == [selection(own_last_full, t, 1) for t in STEPS[0]]


def test_upstream_relays_nothing_where_no_stage_starts_on_a_shared_layer(upstream, monkeypatch):
    """VLLM_PP_LAYER_PARTITION=42,36: stage 2 starts on a full layer, and vLLM's map of buffers is empty."""
    pipe = _run(upstream, upstream.stock, FULL_START_PP2, monkeypatch)
    assert _wrong_layers(pipe, FULL_START_PP2) == []
    assert all(keys == ["hidden_states"] for keys in pipe.sent_keys)


def test_upstreams_rule_is_the_stub_layers_rule(upstream):
    """The attention asks `compute_skip_topk_layers` whether a layer builds an indexer; run as the release has it, it
    names the layers `skips_topk` names for GLM-5.x, none for DeepSeek-V3.2, and follows a pattern."""
    assert "skip_topk = layer_id in compute_skip_topk_layers(config)" in upstream.attention
    rule = release_functions(upstream.utils, UTILS, ["compute_skip_topk_layers"], {})["compute_skip_topk_layers"]
    glm5 = types.SimpleNamespace(index_topk=2048, num_hidden_layers=NUM_LAYERS, **GLM5)
    assert rule(glm5) == {k for k in range(NUM_LAYERS) if skips_topk(k)}
    assert rule(types.SimpleNamespace(index_topk=2048, num_hidden_layers=61)) == set()
    pattern = types.SimpleNamespace(index_topk=2048, num_hidden_layers=7, index_topk_pattern="FFSFS")
    assert rule(pattern) == {2, 4}
