"""`lab/device/dsa_modules.py`: the modules a validation run imports, which make_lock.py's import probe and check_env.py
import. Two mistakes it must not make, each of which breaks a run:

- Choosing the model path by whether `vllm/models/deepseek_v32/` exists. v0.26.0-v0.28.0 ship that folder but
  their registry maps the DSA architecture to `deepseek_v2`, so the probe would import the wrong model for them.
- Missing the module `LLM.__init__` imports inside a function (the server's argument parser, which imports the
  tool parsers and so partial_json_parser): an H200 run of composed v0.29.0 fails with
  `ModuleNotFoundError: No module named 'partial_json_parser'` on a payload chosen by the probe.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
from release_trees import release_tree

REPO = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("vc_dsa_modules", REPO / "lab" / "device" / "dsa_modules.py")
dsa = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(dsa)


def _toy(tmp_path: Path, registry_target: str, arg_parser_module: str | None, with_v32_folder: bool) -> Path:
    vllm = tmp_path / "vllm"
    (vllm / "model_executor" / "models").mkdir(parents=True)
    (vllm / "model_executor" / "models" / "registry.py").write_text(
        "_MODELS = {\n"
        '    "DeepseekV3ForCausalLM": ("deepseek_v2", "DeepseekV3ForCausalLM"),\n'
        f'    "DeepseekV32ForCausalLM": (\n        "{registry_target}",\n        "DeepseekV32ForCausalLM",\n    ),\n'
        "}\n"
    )
    if with_v32_folder:
        (vllm / "models" / "deepseek_v32").mkdir(parents=True)
    utils = vllm / "entrypoints" / "serve" / "utils"
    utils.mkdir(parents=True)
    body = "def get_non_default_args(args):\n"
    if arg_parser_module:
        body += f"    from {arg_parser_module} import make_arg_parser\n"
    body += "    return {}\n"
    (utils / "api_utils.py").write_text(body)
    # a make_arg_parser that is not the server's (run_batch's own) is not what LLM.__init__ imports
    (vllm / "entrypoints" / "run_batch_cli.py").write_text(
        "def main():\n    from vllm.entrypoints.launchers.run_batch import make_arg_parser\n"
    )
    return vllm


def test_the_registry_not_the_folder_picks_the_model_path(tmp_path):
    old = _toy(tmp_path / "old", "deepseek_v2", "vllm.entrypoints.openai.cli_args", with_v32_folder=True)
    new = _toy(tmp_path / "new", "vllm.models.deepseek_v32", "vllm.entrypoints.launchers.cli_args", True)
    assert dsa.dsa_modules(old) == [*dsa.COMMON, *dsa.V2_PATH, "vllm.entrypoints.openai.cli_args"]
    assert dsa.dsa_modules(new) == [*dsa.COMMON, *dsa.V32_PATH, "vllm.entrypoints.launchers.cli_args"]


def test_no_lazy_import_found_adds_nothing(tmp_path):
    vllm = _toy(tmp_path, "deepseek_v2", None, with_v32_folder=False)
    assert dsa.lazy_modules(vllm) == []


@pytest.mark.parametrize(
    ("registry", "message"),
    [(None, "cannot read the model registry"), ('_MODELS = {"DeepseekV3ForCausalLM": ("x", "y")}\n', "no DeepseekV32")],
)
def test_a_tree_without_the_dsa_entry_is_refused_by_name(tmp_path, registry, message):
    vllm = tmp_path / "vllm"
    vllm.mkdir()
    if registry is not None:
        (vllm / "model_executor" / "models").mkdir(parents=True)
        (vllm / "model_executor" / "models" / "registry.py").write_text(registry)
    with pytest.raises(ValueError, match=message) as info:
        dsa.dsa_modules(vllm)
    assert str(vllm) in str(info.value)


@pytest.mark.sdist
@pytest.mark.parametrize(
    ("tag", "model", "lazy"),
    [
        ("v0.26.0", "V2_PATH", "vllm.entrypoints.openai.cli_args"),
        ("v0.29.0", "V32_PATH", "vllm.entrypoints.launchers.cli_args"),
        ("v0.33.0", "V32_PATH", "vllm.entrypoints.common.cli_args"),
    ],
)
def test_each_release_names_modules_it_has_and_the_parser_that_reaches_partial_json_parser(
    tmp_path_factory, tag, model, lazy
):
    vllm = release_tree(tmp_path_factory, tag) / "vllm"
    modules = dsa.dsa_modules(vllm)
    assert modules == [*dsa.COMMON, *getattr(dsa, model), lazy]
    root = vllm.parent
    for name in modules:  # every one is a module of the release (none misspelt, none moved away)
        path = root / name.replace(".", "/")
        assert path.with_suffix(".py").is_file() or (path / "__init__.py").is_file(), name
    # the lazily imported parser module imports the tool parsers, whose utils import partial_json_parser
    parser = (root / lazy.replace(".", "/")).with_suffix(".py").read_text()
    assert "vllm.tool_parsers" in parser
    assert "import partial_json_parser" in (vllm / "tool_parsers" / "utils.py").read_text()
