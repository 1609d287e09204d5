"""`vllm-compose pp-plan`: the IndexCache rule against the releases' own code, partitions, byte counts by hand, bad
inputs, the rendered plan (golden file) and the device comparison script's arithmetic.

Fixtures in tests/cases/pp-plan/: `glm5-config.json` and `dsv32-config.json` (shapes from docs/CONTEXT.md; each
file's `_comment` says which values are assumptions), `expected-glm5-pp8.txt` (the golden text; `VC_UPDATE_GOLDEN=1`
rewrites it). The tiny config below is small enough to count every byte by hand.
"""

from __future__ import annotations

import ast
import json
import logging
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path
from types import SimpleNamespace

import pytest
from release_trees import release_files, release_functions

from vllm_compose.cli import main
from vllm_compose.errors import ExitCode
from vllm_compose.pp import plan as pp_plan
from vllm_compose.pp.plan import Settings, computes_topk, default_partition, plan, shape_from_config

ROOT = Path(__file__).resolve().parents[2]
CASES = ROOT / "tests" / "cases" / "pp-plan"
GLM5 = CASES / "glm5-config.json"
DSV32 = CASES / "dsv32-config.json"

#: four layers, every dimension tiny: layer 0 dense, 1-3 MoE; IndexCache freq 2 offset 1 makes 0 and 2 full
TINY = {
    "model_type": "glm_moe_dsa",
    "num_hidden_layers": 4,
    "hidden_size": 8,
    "vocab_size": 100,
    "num_attention_heads": 2,
    "q_lora_rank": 4,
    "kv_lora_rank": 4,
    "qk_nope_head_dim": 2,
    "qk_rope_head_dim": 2,
    "v_head_dim": 2,
    "intermediate_size": 6,
    "moe_intermediate_size": 2,
    "n_routed_experts": 2,
    "n_shared_experts": 1,
    "num_experts_per_tok": 1,
    "first_k_dense_replace": 1,
    "topk_method": "noaux_tc",
    "index_topk": 16,
    "index_n_heads": 2,
    "index_head_dim": 128,
    "index_topk_freq": 2,
    "index_skip_topk_offset": 1,
    "num_nextn_predict_layers": 1,
    "max_position_embeddings": 256,
}


def glm5():
    return pp_plan.read_config(GLM5)


# --- the rule, against the releases' own code ---------------------------------------------------------------------

#: where each model path computes skip_topk: (file, class whose __init__ holds the rule)
RULE_SITES = {
    "v0.26.0": ("vllm/model_executor/models/deepseek_v2.py", "DeepseekV2MLAAttention"),
    "v0.33.0": ("vllm/models/deepseek_v32/attention.py", "DeepseekV32Attention"),
}


def release_skip_topk(source: str, filename: str, cls: str):
    """The release's skip_topk rule, executed alone: from `cls.__init__`, the three `getattr(config, ...)` reads
    (`index_topk_freq`, `index_topk_pattern`, `index_skip_topk_offset`, with or without a leading underscore) and
    the `if ...pattern is None:` statement that sets `skip_topk` / `_skip_topk`, wrapped as rule(config, layer_id)."""
    tree = ast.parse(source)
    klass = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == cls)
    init = next(n for n in klass.body if isinstance(n, ast.FunctionDef) and n.name == "__init__")
    names = {"index_topk_freq", "index_topk_pattern", "index_skip_topk_offset"}
    keep = []
    for node in ast.walk(init):
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id.lstrip("_") in names for t in node.targets
        ):
            keep.append(node)
        elif (
            isinstance(node, ast.If)
            and isinstance(node.test, ast.Compare)
            and isinstance(node.test.left, ast.Name)
            and node.test.left.id.lstrip("_") == "index_topk_pattern"
        ):
            keep.append(node)
    assert len(keep) == 4, f"{filename}: the rule's shape changed ({[ast.unparse(n)[:60] for n in keep]})"
    body = "\n".join(ast.unparse(n) for n in sorted(keep, key=lambda n: n.lineno))
    text = (
        "def rule(config, layer_id):\n    _skip_topk = skip_topk = False\n"
        + textwrap.indent(body, "    ")
        + "\n    return _skip_topk or skip_topk\n"
    )
    namespace: dict = {}
    exec(compile(text, filename, "exec"), namespace)  # noqa: S102 - the release's own statements
    return namespace["rule"]


@pytest.fixture(scope="module", params=sorted(RULE_SITES))
def release_rule(request, tmp_path_factory):
    path, cls = RULE_SITES[request.param]
    source = release_files(tmp_path_factory, request.param, [path])[path]
    return release_skip_topk(source, path, cls)


CONFIGS = {
    "glm5": {"index_topk_freq": 4, "index_skip_topk_offset": 3},
    "dsv32 (no IndexCache keys)": {},
    "freq 2 default offset": {"index_topk_freq": 2},
    "freq 3 offset 0": {"index_topk_freq": 3, "index_skip_topk_offset": 0},
    "freq 4 offset 5": {"index_topk_freq": 4, "index_skip_topk_offset": 5},
    "pattern shorter than the model": {"index_topk_pattern": "FFSFSS"},
}


@pytest.mark.sdist  # reads the release's own code from its PyPI sdist
@pytest.mark.parametrize("keys", CONFIGS.values(), ids=CONFIGS.keys())
def test_computes_topk_is_the_releases_rule(release_rule, keys):
    cfg = {**TINY, "num_hidden_layers": 12, "index_topk_freq": None, "index_skip_topk_offset": None, **keys}
    shape = shape_from_config({k: v for k, v in cfg.items() if v is not None})
    config = SimpleNamespace(**{k: v for k, v in keys.items()})
    for layer in range(12):
        assert computes_topk(shape, layer) is (not release_rule(config, layer)), (keys, layer)


def test_glm5_full_layers_are_0_1_2_then_every_fourth_from_6():
    assert [x for x in range(78) if computes_topk(glm5(), x)] == [0, 1, 2, *range(6, 78, 4)]
    assert all(computes_topk(pp_plan.read_config(DSV32), x) for x in range(61))


@pytest.fixture(scope="module")
def release_pp_indices(tmp_path_factory):
    path = "vllm/distributed/utils.py"
    source = release_files(tmp_path_factory, "v0.26.0", [path])[path]

    def run(num_layers: int, pp: int, env: str | None) -> list[int]:
        ns = {"envs": SimpleNamespace(VLLM_PP_LAYER_PARTITION=env), "logger": logging.getLogger("release")}
        fn = release_functions(source, path, ["get_pp_indices"], ns)["get_pp_indices"]
        return [fn(num_layers, rank, pp) for rank in range(pp)]

    return run


@pytest.mark.sdist  # reads the release's own code from its PyPI sdist
@pytest.mark.parametrize("num_layers,pp", [(78, 8), (78, 2), (61, 8), (78, 4), (10, 3), (5, 5), (78, 7)])
def test_default_partition_is_get_pp_indices(release_pp_indices, num_layers, pp):
    sizes = default_partition(num_layers, pp)
    assert [(e - s) for s, e in release_pp_indices(num_layers, pp, None)] == sizes


@pytest.mark.sdist  # reads the release's own code from its PyPI sdist
@pytest.mark.parametrize("pp", [2, 4, 8])
def test_the_plans_partition_is_accepted_by_get_pp_indices(release_pp_indices, pp):
    p = plan(glm5(), Settings(pp=pp, gpu_memory_gib=400 if pp == 2 else 139.8, mtp=1, bits=4))
    ranges = release_pp_indices(78, pp, p.chosen.env)
    assert [s.start for s in p.chosen.stages] == [s for s, _ in ranges]
    assert [s.end for s in p.chosen.stages] == [e for _, e in ranges]


# --- partitions ---------------------------------------------------------------------------------------------------


def test_the_default_split_starts_7_of_8_glm5_stages_on_shared_layers_at_pp8_and_1_of_2_at_pp2():
    p8 = plan(glm5(), Settings(pp=8, gpu_memory_gib=79.2, mtp=1, bits=4))
    assert p8.default.env == "9,10,10,10,10,10,10,9"
    assert [s.start for s in p8.default.shared_starts] == [9, 19, 29, 39, 49, 59, 69]
    p2 = plan(glm5(), Settings(pp=2, gpu_memory_gib=400, mtp=1, bits=4))
    assert p2.default.env == "39,39" and [s.start for s in p2.default.shared_starts] == [39]


@pytest.mark.parametrize(
    "pp,memory,bits,mtp", [(8, 79.2, 4, 1), (8, 139.8, 8, 1), (4, 139.8, 4, 0), (2, 400, 4, 1), (16, 39.5, 4, 1)]
)
def test_a_plan_splits_every_layer_once_and_beats_or_matches_the_default(pp, memory, bits, mtp):
    p = plan(glm5(), Settings(pp=pp, gpu_memory_gib=memory, bits=bits, mtp=mtp))
    c = p.chosen
    assert sum(c.sizes) == 78 and len(c.sizes) == pp and min(c.sizes) >= 1
    assert [s.start for s in c.stages] == [sum(c.sizes[:i]) for i in range(pp)]
    # the search covers the default: the plan never has more shared starts within the tolerance of the best
    assert c.kv_blocks >= (1 - 0.05) * p.balanced.kv_blocks
    assert p.balanced.kv_blocks >= p.default.kv_blocks
    assert len(c.shared_starts) <= len(p.default.shared_starts)
    assert c.kv_tokens >= p.required_blocks * 64


def test_with_a_wide_tolerance_every_glm5_stage_starts_on_a_full_layer():
    for pp, memory in ((2, 400), (4, 139.8), (8, 79.2)):
        p = plan(glm5(), Settings(pp=pp, gpu_memory_gib=memory, mtp=1, bits=4, tolerance=0.9))
        assert p.chosen.shared_starts == [], (pp, p.chosen.env)
        assert all(computes_topk(p.shape, s.start) for s in p.chosen.stages)
        assert p.all_full is None


def test_pp2_glm5_prefers_42_36_when_every_stage_must_start_on_a_full_layer():
    # what a public port chose by hand: stage 2 starts on layer 42 (full), the MTP stage is the shorter one
    p = plan(glm5(), Settings(pp=2, gpu_memory_gib=400, mtp=1, bits=4, tolerance=0.0))
    assert p.chosen.shared_starts and p.all_full is not None
    assert p.all_full.env == "42,36"
    wide = plan(glm5(), Settings(pp=2, gpu_memory_gib=400, mtp=1, bits=4, tolerance=0.10))
    assert wide.chosen.env == "42,36" and wide.chosen.shared_starts == []


def test_the_last_stage_carries_the_mtp_share_and_gets_fewer_layers():
    p = plan(glm5(), Settings(pp=8, gpu_memory_gib=139.8, mtp=1, bits=4))
    last = p.chosen.stages[-1]
    assert last.mtp is not None and all(s.mtp is None for s in p.chosen.stages[:-1])
    assert last.layers < max(p.chosen.sizes)
    no_mtp = plan(glm5(), Settings(pp=8, gpu_memory_gib=139.8, mtp=0, bits=4))
    assert no_mtp.chosen.stages[-1].mtp is None
    # under PP the MTP keeps its own embedding; at PP1 it shares the target's
    vocab = 154880 * 6144 * 2
    assert last.mtp.embedding == vocab
    pp1 = pp_plan.stage(glm5(), Settings(pp=1, gpu_memory_gib=1000, mtp=1, bits=4), 0, 0, 78)
    assert pp1.mtp.embedding == 0 and pp1.mtp.load_transient == 2 * vocab


def test_deepseek_v32_has_no_shared_layers_so_every_split_is_safe():
    p = plan(pp_plan.read_config(DSV32), Settings(pp=8, gpu_memory_gib=139.8, mtp=1, bits=4))
    assert p.default.shared_starts == [] and p.chosen.shared_starts == [] and p.all_full is None


# --- bytes, by hand -------------------------------------------------------------------------------------------------


def test_layer_bytes_of_the_tiny_config_by_hand():
    s = shape_from_config(TINY)
    assert [computes_topk(s, x) for x in range(4)] == [True, False, True, False]
    # layer 0, bf16: fused_qkv_a (4+4+2)x8=80, q_b 8x4=32, kv_b 8x4=32, o_proj 8x4=32 elements = 176 x 2 B,
    # plus q_a and kv_a norms 2 x 4 x 2 B = 368; indexer wq_b 256x4 x 2 B = 2048, wk_weights_proj 130x8 x 2 B
    # = 2080, k_norm 2 x 128 x 4 B = 1024 -> 5152; dense MLP (12x8 + 8x6) x 2 B = 288; two norms 32
    w0 = pp_plan.layer_weights(s, 0, 16, 128)
    assert (w0.attention, w0.mla_absorbed, w0.indexer, w0.mlp, w0.norms, w0.total) == (368, 0, 5152, 288, 32, 5840)
    # layer 1, bf16, MoE and shared: 2 experts x (4x8 + 8x2) x 2 B = 192, gate 2x8 x 2 B = 32, bias 2 x 4 B = 8,
    # shared expert (4x8 + 8x2) x 2 B = 96 -> 328
    w1 = pp_plan.layer_weights(s, 1, 16, 128)
    assert (w1.attention, w1.indexer, w1.mlp, w1.total) == (368, 0, 328, 728)
    # layer 1 at 4 bits, group 4: each matrix ceil(rows*cols/2) + rows*ceil(cols/4)*2 bytes of scales
    # fused_qkv_a 40+40=80, q_b 16+16=32, kv_b 32, o_proj 32, norms 16 -> 192; W_UK/W_UV bf16 32 x 2 B = 64;
    # expert gate_up 16+16=32, down 8+16=24 -> 56 x 2 = 112, gate 32, bias 8, shared 56 -> 208; norms 32
    w1q = pp_plan.layer_weights(s, 1, 4, 4)
    assert (w1q.attention, w1q.mla_absorbed, w1q.mlp, w1q.total) == (192, 64, 208, 496)


def test_stage_bytes_and_kv_of_the_tiny_config_by_hand():
    s = shape_from_config(TINY)
    st = Settings(pp=1, gpu_memory_gib=1, max_num_batched_tokens=32, max_model_len=256)
    one = pp_plan.stage(s, st, 0, 0, 4)
    # layers 5840 + 728 + (728 + 5152) + 728; embedding and LM head 128 (padded vocab) x 8 x 2 B each, final norm 16;
    # top-k buffer 32 x 16 x 4 B = 2048; rope caches 256 rows x 2 x 2 B, MLA's and the indexer's = 2048
    assert one.layer_weights == 13176
    assert (one.embedding, one.lm_head, one.buffers) == (2048, 2064, 4096)
    assert one.weights == 13176 + 2048 + 2064 + 4096
    # KV per token: full layers (4+2) x 2 + 128 + 4 = 144, shared 12
    assert one.kv_bytes_per_token == 144 + 12 + 144 + 12 and one.kv_block_bytes == 312 * 64
    assert one.kv_bytes == st.budget_bytes - one.weights - one.activation - one.non_torch
    assert one.kv_blocks == one.kv_bytes // (312 * 64)


def test_the_mtp_share_of_the_tiny_config_by_hand():
    s = shape_from_config(TINY)
    st = Settings(pp=2, gpu_memory_gib=1, mtp=1, max_num_batched_tokens=32, max_model_len=256)
    last = pp_plan.stage(s, st, 1, 2, 4)
    # MTP layer 4: MoE with an indexer 728 + 5152, eh_proj 16x8 x 2 B = 256, enorm/hnorm/head norm 48, its
    # top-k buffer 2048; its own embedding 2048 (PP > 1); its shared head 2048 is loaded then dropped
    assert (last.mtp.weights, last.mtp.embedding, last.mtp.load_transient) == (8232, 2048, 2048)
    assert last.mtp.kv_bytes_per_token == 144 and last.kv_bytes_per_token == 144 + 12 + 144
    assert last.load_peak == last.weights + 2048


def test_glm5_kv_per_token_is_one_mla_page_plus_the_indexers_on_full_layers():
    s = glm5()
    assert pp_plan.kv_bytes_per_token(s, True, "bfloat16") == 576 * 2 + 132
    assert pp_plan.kv_bytes_per_token(s, False, "bfloat16") == 576 * 2
    assert pp_plan.kv_bytes_per_token(s, False, "fp8_ds_mla") == 656


# --- bad inputs -------------------------------------------------------------------------------------------------


def run_cli(*argv: str) -> int:
    return main(["pp-plan", *argv])


def test_a_missing_key_is_named(tmp_path, capsys):
    cfg = {k: v for k, v in json.loads(GLM5.read_text()).items() if k != "kv_lora_rank"}
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    out = tmp_path / "plan.json"
    assert run_cli(str(tmp_path), "--pp", "8", "--gpu-memory", "80", "--json", str(out)) == ExitCode.BAD_INPUT == 3
    err = capsys.readouterr().err
    assert "no 'kv_lora_rank'" in err and str(tmp_path / "config.json") in err and "hint:" in err
    assert not out.exists()


@pytest.mark.parametrize(
    "text,expect",
    [("{not json", "is not JSON"), ("[1, 2]", "not an object"), ('{"num_hidden_layers": "78"}', "'num_hidden_layers'")],
)
def test_a_malformed_config_is_refused(tmp_path, capsys, text, expect):
    (tmp_path / "config.json").write_text(text)
    assert run_cli(str(tmp_path / "config.json"), "--pp", "2", "--gpu-memory", "80") == 3
    assert expect in capsys.readouterr().err


def test_a_config_that_is_not_there_is_named(tmp_path, capsys):
    assert run_cli(str(tmp_path / "nope.json"), "--pp", "2", "--gpu-memory", "80") == 3
    assert "cannot read" in capsys.readouterr().err


def test_more_stages_than_layers_is_refused(capsys):
    assert run_cli(str(GLM5), "--pp", "79", "--gpu-memory", "80") == 3
    err = capsys.readouterr().err
    assert "--pp" in err and "79" in err and "78" in err and "at most 78 stages" in err


@pytest.mark.parametrize(
    "args,expect",
    [
        (["--pp", "0"], "--pp"),
        (["--gpu-memory-utilization", "1.5"], "--gpu-memory-utilization"),
        (["--bits", "5"], "--bits"),
        (["--kv-cache-dtype", "int4"], "--kv-cache-dtype"),
        (["--tolerance", "100"], "--tolerance"),
        (["--max-model-len", "0"], "--max-model-len"),
    ],
)
def test_bad_settings_are_named(capsys, args, expect):
    base = {"--pp": "8", "--gpu-memory": "139.8"}
    for k, v in zip(args[::2], args[1::2], strict=True):
        base[k] = v
    argv = [x for kv in base.items() for x in kv]
    assert run_cli(str(GLM5), *argv) == 3
    assert expect in capsys.readouterr().err


def test_mtp_on_a_model_without_an_mtp_layer_is_refused(tmp_path, capsys):
    cfg = {**json.loads(GLM5.read_text()), "num_nextn_predict_layers": 0}
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    assert run_cli(str(tmp_path), "--pp", "8", "--gpu-memory", "139.8", "--mtp", "1") == 3
    assert "no MTP layer" in capsys.readouterr().err


def test_too_little_memory_names_the_stage_and_the_shortfall(tmp_path, capsys):
    out = tmp_path / "plan.json"
    assert run_cli(str(GLM5), "--pp", "2", "--gpu-memory", "139.8", "--bits", "4", "--json", str(out)) == 3
    err = capsys.readouterr().err
    assert re.search(r"stage [12] of 2 \(layers \d+-\d+\) is [\d.]+ GiB short", err), err
    assert "hint:" in err and "--pp" in err
    assert not out.exists()


def test_kv_too_small_for_one_request_names_the_stage(capsys):
    # the weights fit, but one 202,752-token request does not
    p = plan(glm5(), Settings(pp=8, gpu_memory_gib=79.2, mtp=1, bits=4))
    needed = p.chosen.tightest.weights + p.chosen.tightest.activation + p.chosen.tightest.non_torch
    memory = (needed + 2 * 1024**3) / 0.9 / 1024**3
    assert run_cli(str(GLM5), "--pp", "8", "--gpu-memory", f"{memory:.2f}", "--bits", "4", "--mtp", "1") == 3
    err = capsys.readouterr().err
    assert "GiB short" in err and "tokens of KV" in err and "202,752" in err


# --- output -------------------------------------------------------------------------------------------------------


def test_the_text_plan_matches_the_golden_file(capsys):
    argv = [str(GLM5.relative_to(ROOT)), "--pp", "8", "--gpu-memory", "79.2", "--mtp", "1", "--bits", "4"]
    cwd = os.getcwd()
    os.chdir(ROOT)
    try:
        assert run_cli(*argv) == 0
    finally:
        os.chdir(cwd)
    got = capsys.readouterr().out
    golden = CASES / "expected-glm5-pp8.txt"
    if os.environ.get("VC_UPDATE_GOLDEN") == "1":
        golden.write_text(got)
    assert got == golden.read_text()
    assert "VLLM_PP_LAYER_PARTITION=" in got and "7 of 7 later stages start on a shared layer" in got


def test_json_carries_the_partition_and_every_stages_figures(tmp_path, capsys):
    out = tmp_path / "plan.json"
    assert (
        run_cli(str(GLM5), "--pp", "8", "--gpu-memory", "139.8", "--mtp", "1", "--bits", "4", "--json", str(out)) == 0
    )
    data = json.loads(out.read_text())
    text = capsys.readouterr().out
    assert f"VLLM_PP_LAYER_PARTITION={data['VLLM_PP_LAYER_PARTITION']}" in text
    stages = data["plan"]["stages"]
    assert len(stages) == 8 and sum(s["num_layers"] for s in stages) == 78
    assert stages[-1]["mtp"]["layers"] == 1 and "mtp" not in stages[0]
    assert data["default"]["shared_starts"] == [2, 3, 4, 5, 6, 7, 8]
    assert min(s["kv_blocks"] for s in stages) == data["plan"]["kv_blocks"]
    assert run_cli(str(GLM5), "--pp", "8", "--gpu-memory", "139.8", "--bits", "4", "--json", "-") == 0
    assert json.loads(capsys.readouterr().out)["settings"]["pp"] == 8


def test_the_user_guides_example_is_what_pp_plan_prints():
    guide = (ROOT / "docs" / "user-guide.md").read_text()
    p = plan(glm5(), Settings(pp=8, gpu_memory_gib=79.2, mtp=1, bits=4, mtp_bits=16, gpu_memory_utilization=0.85))
    assert f"VLLM_PP_LAYER_PARTITION={p.chosen.env}" in guide and f"`{p.chosen.env}`" in guide
    assert len(p.chosen.shared_starts) == 4 and "with 4 stages starting on shared layers" in guide
    assert p.default.kv_blocks < p.required_blocks and "the default split does not fit" in guide
    assert round(p.chosen.kv_tokens / 1e6, 1) == 1.4 and "1.4 M KV tokens" in guide
    assert p.all_full is not None and round((1 - p.all_full.kv_blocks / p.balanced.kv_blocks) * 100) == 62


# --- the device comparison (lab/device/pp_memory.py) ------------------------------------------------------------------


def _pp_memory():
    sys.path.insert(0, str(ROOT / "lab" / "device"))
    try:
        import pp_memory
    finally:
        sys.path.remove(str(ROOT / "lab" / "device"))
    return pp_memory


def test_the_device_scripts_prediction_is_pp_plans_stage(tmp_path):
    pm = _pp_memory()
    total = int(139.8 * 1024**3)
    got = pm.predict(5, 1, 0.9, total)
    shape = pp_plan.read_config(pm.write_config(tmp_path, 5))
    assert [computes_topk(shape, x) for x in range(5)] == [True, True, True, False, False]
    assert [pp_plan.is_moe_layer(shape, x) for x in range(5)] == [False, False, False, True, True]
    st = Settings(pp=1, gpu_memory_gib=total / 1024**3, mtp=1, max_model_len=32768)
    assert got["weights"] == pp_plan.stage(shape, st, 0, 0, 5).weights
    assert got["mtp_resident"] > 0


def test_the_comparison_passes_within_10_percent_and_names_what_is_outside(tmp_path):
    pm = _pp_memory()
    predicted = {"weights": 100, "activation": 10, "non_torch": 1, "kv_bytes": 1000, "kv_tokens": 640}
    measured = {"weights": 95, "activation": 14, "non_torch": 1, "kv_bytes": 1040, "num_blocks": 10}
    c = pm.compare(measured, predicted, 64)
    assert c["ok"] and c["weights"]["within"] and c["kv_tokens"]["ratio"] == 1.0
    assert c["activation"]["within"] and abs(c["activation"]["ratio"] - 10 / 14) < 1e-3
    bad = pm.compare({**measured, "weights": 80}, predicted, 64)
    assert not bad["ok"] and not bad["weights"]["within"]
    result = tmp_path / "r.json"
    run = {"layers": 5, "mtp": 0, "ok": True, "block_size": 64, "measured": measured, "predicted": predicted}
    result.write_text(json.dumps({"runs": [run]}))
    ok = subprocess.run([sys.executable, str(ROOT / "lab/device/pp_memory.py"), "--check", str(result)], text=True,
                        capture_output=True)  # fmt: skip
    assert ok.returncode == 0 and "weights" in ok.stdout and "within 10%" in ok.stdout
    result.write_text(json.dumps({"runs": [{**run, "measured": {**measured, "weights": 80}}]}))
    bad_run = subprocess.run([sys.executable, str(ROOT / "lab/device/pp_memory.py"), "--check", str(result)],
                             text=True, capture_output=True)  # fmt: skip
    assert bad_run.returncode == 1 and "OUTSIDE" in bad_run.stdout
