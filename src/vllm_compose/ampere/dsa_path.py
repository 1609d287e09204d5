"""The DSA path of a vLLM release on CUDA, read from its code: which classes serve GLM-5.x and DeepSeek-V3.2 (MTP
drafts included), which modules their forward pass runs through, and every kernel or op there that needs more than
sm_80/86 — with how the compose handles it, by comparing the composed tree with the stock tree of the same release.

Pure static analysis with `ast` over a `FileTree` (a directory or a git tree): nothing of vLLM is imported, no torch.
The tree is read through `release_source` (each module parsed once), and what "Ampere" means (capabilities,
platform answers, launch contract) comes from `facts`.

The steps, each a public function:

* `dsa_model_classes(tree)`: `vllm/model_executor/models/registry.py` maps `GlmMoeDsaForCausalLM` and
  `DeepseekV32ForCausalLM` to (module, class); a package `__init__` that imports per platform is resolved along its
  CUDA branch (`current_platform.is_cuda()` true, ROCm/XPU/CPU/TPU false).
* `mtp_drafts(tree)`: `vllm/config/speculative.py` rewrites the config of `glm_moe_dsa` / `deepseek_v32` to
  `deepseek_mtp` and picks an architecture, maybe by a condition (`use_v32_mtp`); the condition is evaluated for the
  model's own `model_type` and the class of the chosen architecture resolved like the models'.
* `sparse_backends(tree)`: the sparse-MLA backends `vllm/platforms/cuda.py` lists for compute capability 8.x, and
  whether each one's `supports_compute_capability` admits sm_80 and sm_86.
* `path_modules(tree, ...)`: the forward closure (see `BOUND`).
* `scan_blockers(tree, modules)` (`dsa_blockers`): arch-limited Triton features in `@triton.jit` functions and
  calls into native libraries that need sm_89+/sm_90+, each with its guard: a condition around it or an
  `if ...: return` before it (its function's own early returns included), a callee's early return, its callers'
  conditions — evaluated as a sm_80/86 CUDA process sees them (`partial_eval`), and apart from that under the
  Ampere launch contract (`facts.LAUNCH_CONTRACT`: e.g. decode context parallel off, so code after
  `if dcp_world_size <= 1: return` never runs).
* `ampere_path(composed, stock, tag)`: all of the above for both trees, and each composed-tree blocker classified by
  `classify` (the rules are in its docstring; what no rule covers is `Handling.UNCLASSIFIED`, never dropped).

The bound (why not all of vLLM): the forward pass of these models touches hundreds of modules (config, distributed,
loaders), but the kernels that can need a newer GPU sit in a few. The closure starts at the serving classes' modules,
the DSA modules named in `SEEDS`, and the sparse-MLA backends that admit sm_8x, and follows `from vllm...
import` edges (module level and inside functions; not under `if TYPE_CHECKING:`) only into modules under `BOUND`.
Module granularity over-approximates: a module on the path counts whole (e.g. all of `deepseek_v2.py`).
Left out on purpose: the fused-MoE expert backends other than the Triton kernels (`fused_moe/fused_moe.py`) — the
expert oracle chooses DeepGEMM / CUTLASS / FlashInfer experts for fp8/fp4 checkpoints, which need sm_89+ by their
quantization whatever the compose does — and the backends the SM8x list names but whose capability check rejects 8.x
(reported as such, never crawled: they are never selected there).
"""

from __future__ import annotations

import ast
import enum
import re
from collections.abc import Callable
from dataclasses import dataclass, field

from ..trees import FileTree
from .dsa_blockers import Blocker, TritonUse, scan_blockers
from .facts import CAPABILITIES
from .partial_eval import UNKNOWN, evaluate
from .release_source import (
    DsaPathError,
    ReleaseSource,
    absolute_module,
    cuda_statements,
    dotted_of,
    imports_of,
    is_type_checking,
    module_path,
    node_text,
    release_source,
)

REGISTRY = "vllm/model_executor/models/registry.py"
SPECULATIVE = "vllm/config/speculative.py"
CUDA_PLATFORM = "vllm/platforms/cuda.py"
BACKEND_REGISTRY = "vllm/v1/attention/backends/registry.py"

#: the DSA architectures and the `model_type` their checkpoints declare (the MTP rewrite keys on it)
DSA_ARCHITECTURES: dict[str, str] = {
    "GlmMoeDsaForCausalLM": "glm_moe_dsa",  # GLM-5.x
    "DeepseekV32ForCausalLM": "deepseek_v32",  # DeepSeek-V3.2
}

#: modules the closure may enter (a path, or a folder ending in "/"); why each is on the DSA forward path
BOUND: tuple[str, ...] = (
    "vllm/models/deepseek_v32/",  # the DSA package from v0.29.0: model, attention, MTP, common/nvidia kernels and ops
    "vllm/model_executor/models/deepseek_v2.py",  # the DSA model up to v0.28.0; shared layers later
    "vllm/model_executor/models/deepseek_mtp.py",  # the MTP draft up to v0.28.0; SharedHead later
    "vllm/model_executor/layers/sparse_attn_indexer.py",  # the lightning indexer's op (logits, top-k)
    "vllm/model_executor/layers/attention/mla_attention.py",  # the MLA layer the sparse attention runs in
    "vllm/v1/attention/backends/mla/indexer.py",  # the indexer's metadata and KV cache
    "vllm/v1/attention/ops/mqa_logits_triton.py",  # the Triton MQA logits of PR #38476 (composed trees)
    "vllm/v1/attention/ops/triton_mla_sparse_kernel.py",  # the Triton sparse-MLA kernel of PR #38476
    "vllm/model_executor/layers/fused_moe/fused_moe.py",  # the Triton MoE kernels (bf16 / int4 / int8 experts)
    "vllm/models/common/ops/",  # the fused all-reduce + RMSNorm the deepseek_v32 models call
)

#: seeds beyond the serving classes: the indexer's and the sparse MLA's own modules, entered where present
SEEDS: tuple[str, ...] = (
    "vllm/model_executor/layers/sparse_attn_indexer.py",
    "vllm/v1/attention/backends/mla/indexer.py",
    "vllm/v1/attention/ops/mqa_logits_triton.py",
    "vllm/v1/attention/ops/triton_mla_sparse_kernel.py",
    "vllm/model_executor/layers/fused_moe/fused_moe.py",
)


# --------------------------------------------------------------------------------------------------------- results


@dataclass(frozen=True)
class ServingClass:
    """One class that serves a DSA architecture on CUDA."""

    #: the architecture name in the HF config (`GlmMoeDsaForCausalLM`, `DeepseekV32MTPModel`)
    arch: str
    #: "model" or "mtp"
    role: str
    #: module and class as the registry names them (`vllm.models.deepseek_v32`, `GlmMoeDsaForCausalLM`)
    registry_module: str
    registry_class: str
    #: where the class is defined after the CUDA branch and re-exports are followed
    module: str
    path: str
    cls: str
    #: the class statement's bases as written
    bases: tuple[str, ...] = ()
    #: whether SupportsPP is among its bases or theirs (followed through the tree)
    supports_pp: bool = False
    #: how the name was reached (re-exports, CUDA branch), for the reader
    via: tuple[str, ...] = ()

    def to_json(self) -> dict:
        return {
            "arch": self.arch,
            "role": self.role,
            "registry": [self.registry_module, self.registry_class],
            "module": self.module,
            "path": self.path,
            "class": self.cls,
            "bases": list(self.bases),
            "supports_pp": self.supports_pp,
            "via": list(self.via),
        }


@dataclass(frozen=True)
class MtpDraft:
    """The MTP draft a DSA checkpoint gets from `vllm/config/speculative.py`."""

    model_type: str
    arch: str
    #: the condition that chose it, as written (e.g. `use_v32_mtp = hf_config.model_type in (...)`), or None
    condition: str | None
    serving: ServingClass

    def to_json(self) -> dict:
        return {"model_type": self.model_type, "arch": self.arch, "condition": self.condition, **self.serving.to_json()}


@dataclass(frozen=True)
class SparseBackend:
    """A sparse-MLA backend the CUDA platform lists for compute capability 8.x."""

    name: str
    path: str | None
    cls: str | None
    #: True / False from `supports_compute_capability` for every Ampere capability (`facts.CAPABILITIES`);
    #: None: not evaluable
    admits_ampere: bool | None
    reason: str

    def to_json(self) -> dict:
        return {
            "name": self.name,
            "path": self.path,
            "class": self.cls,
            "admits_ampere": self.admits_ampere,
            "reason": self.reason,
        }


class Handling(enum.Enum):
    """How a blocker stands on Ampere in the composed tree (the rules: `classify`)."""

    PRUNED = "pruned on sm_8x"  # every use sits in a constexpr branch an Ampere run switches off
    SOFTWARE_E4M3 = "software E4M3"  # the hardware fp8 branch is under SOFTWARE_E4M3, off on sm_8x
    DEEP_GEMM_FALLBACK = "DeepGEMM behind is_deep_gemm_supported(), Triton fallback"  # PR #38476's fallback
    GATED_BY_COMPOSE = "gated by the compose"  # an arch guard the stock tree lacks (e.g. 0007's sm_89 gate)
    GATED_UPSTREAM = "gated upstream"  # the release's own arch guard
    OFF_BY_CONTRACT = "off under the launch contract"  # the release's own condition on a LAUNCH_CONTRACT value
    REMOVED_BY_COMPOSE = "removed by the compose"  # in the stock tree only
    NOT_HANDLED = "NOT HANDLED"
    UNCLASSIFIED = "unclassified"

    @property
    def handled(self) -> bool:
        return self not in (Handling.NOT_HANDLED, Handling.UNCLASSIFIED)

    @property
    def by_compose(self) -> bool:
        return self in (
            Handling.SOFTWARE_E4M3,
            Handling.DEEP_GEMM_FALLBACK,
            Handling.GATED_BY_COMPOSE,
            Handling.REMOVED_BY_COMPOSE,
        )


@dataclass
class ClassifiedBlocker:
    """A blocker of the composed tree (or one the compose removed) with its handling and the rule's reason."""

    blocker: Blocker
    handling: Handling
    detail: str
    #: the same blocker in the stock tree, or None when the compose introduced it
    stock: Blocker | None = None

    def to_json(self) -> dict:
        return {
            **self.blocker.to_json(),
            "handling": self.handling.name.lower(),
            "detail": self.detail,
            "in_stock": self.stock is not None,
            "stock_guard": self.stock.guard if self.stock else None,
        }


@dataclass
class TreePath:
    """The DSA path of one tree."""

    models: list[ServingClass]
    drafts: list[MtpDraft]
    backends: list[SparseBackend]
    modules: list[str]
    blockers: list[Blocker]
    #: the parsed tree, for rules that read the source again
    source: ReleaseSource = field(repr=False, compare=False, default=None)


@dataclass
class AmperePath:
    """The DSA path of one release, composed and stock, with the composed tree's blockers classified."""

    tag: str
    composed: TreePath
    stock: TreePath
    classified: list[ClassifiedBlocker]
    #: how the IndexCache top-k crosses a PP stage boundary, composed and stock (`pp.topk_relay.TopkCrossing`, read
    #: by the caller's `relay`: see `ampere_path`)
    topk_relay: object = None
    stock_topk_relay: object = None

    def counts(self) -> dict[str, int]:
        """Blockers in all, handled by the compose, handled upstream (pruned, gated), not handled, unclassified."""
        return {
            "blockers": len(self.classified),
            "by_compose": sum(c.handling.by_compose for c in self.classified),
            "upstream": sum(c.handling.handled and not c.handling.by_compose for c in self.classified),
            "not_handled": sum(c.handling is Handling.NOT_HANDLED for c in self.classified),
            "unclassified": sum(c.handling is Handling.UNCLASSIFIED for c in self.classified),
        }

    def to_json(self) -> dict:
        return {
            "tag": self.tag,
            "models": [m.to_json() for m in self.composed.models],
            "drafts": [d.to_json() for d in self.composed.drafts],
            "stock_drafts": [d.to_json() for d in self.stock.drafts],
            "backends": [b.to_json() for b in self.composed.backends],
            "stock_backends": [b.to_json() for b in self.stock.backends],
            "modules": self.composed.modules,
            "blockers": [c.to_json() for c in self.classified],
            "counts": self.counts(),
            "topk_relay": self.topk_relay.to_json() if self.topk_relay is not None else None,
            "stock_topk_relay": self.stock_topk_relay.to_json() if self.stock_topk_relay is not None else None,
        }


# ---------------------------------------------------------------------------------------------- the serving classes


def registry_entries(tree: FileTree) -> dict[str, tuple[str, str]]:
    """Every architecture of the model registry: arch -> (absolute module, class), as `_resolve_module_name` does
    (a relative name `deepseek_v2` lies under `vllm.model_executor.models`; `vllm.models.x` is absolute)."""
    src = release_source(tree)
    got = src.module(REGISTRY)
    if got is None:
        raise DsaPathError("the model registry is missing", file=REGISTRY, hint="is this a vLLM source tree?")
    mod, _ = got
    dicts: dict[str, dict[str, tuple[str, str]]] = {}
    merged_order: list[str] = []
    for stmt in mod.body:
        target, value = None, None
        if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name):
            target, value = stmt.targets[0].id, stmt.value
        elif isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
            target, value = stmt.target.id, stmt.value
        if target is None or not isinstance(value, ast.Dict):
            continue
        entries: dict[str, tuple[str, str]] = {}
        for k, v in zip(value.keys, value.values, strict=True):
            if k is None:
                if target == "_VLLM_MODELS" and isinstance(v, ast.Name):
                    merged_order.append(v.id)
                continue
            if (
                isinstance(k, ast.Constant)
                and isinstance(k.value, str)
                and isinstance(v, ast.Tuple)
                and len(v.elts) == 2
                and all(isinstance(e, ast.Constant) and isinstance(e.value, str) for e in v.elts)
            ):
                entries[k.value] = (v.elts[0].value, v.elts[1].value)
        dicts[target] = entries
    result: dict[str, tuple[str, str]] = {}
    for name in merged_order or list(dicts):
        for arch, (mod_name, cls) in dicts.get(name, {}).items():
            result[arch] = (mod_name if mod_name.startswith("vllm.") else f"vllm.model_executor.models.{mod_name}", cls)
    return result


def _find_class(
    src: ReleaseSource, dotted: str, name: str, depth: int = 0
) -> tuple[str, ast.ClassDef, tuple[str, ...]]:
    """Where class `name` of module `dotted` is defined on CUDA: (path, class statement, the steps taken)."""
    path = module_path(src, dotted)
    if path is None or depth > 8:
        raise DsaPathError(f"module {dotted} (for class {name}) is not in the tree", file=dotted.replace(".", "/"))
    mod, _ = src.module(path)
    for stmt in cuda_statements(mod.body):
        if isinstance(stmt, ast.ClassDef) and stmt.name == name:
            return path, stmt, ()
        if isinstance(stmt, ast.ImportFrom):
            for alias in stmt.names:
                if (alias.asname or alias.name) == name:
                    target = absolute_module(path, stmt)
                    sub = module_path(src, f"{target}.{alias.name}")
                    if sub is not None and module_path(src, target) is None:
                        continue
                    found = _find_class(src, target, alias.name, depth + 1)
                    step = f"{path}: from {target} import {alias.name}" + (f" as {name}" if alias.asname else "")
                    return found[0], found[1], (step, *found[2])
        if isinstance(stmt, ast.Assign) and isinstance(stmt.value, ast.Name):
            if any(isinstance(t, ast.Name) and t.id == name for t in stmt.targets):
                found = _find_class(src, dotted, stmt.value.id, depth + 1)
                return found[0], found[1], (f"{path}: {name} = {stmt.value.id}", *found[2])
    raise DsaPathError(f"class {name} is not defined or imported on CUDA in {dotted}", file=path)


def _supports_pp(src: ReleaseSource, path: str, cls: ast.ClassDef, depth: int = 0) -> bool:
    """Whether `SupportsPP` is among the bases of `cls`, or of the bases it inherits from (followed in the tree)."""
    if depth > 8:
        return False
    mod, text = src.module(path)
    for base in cls.bases:
        written = node_text(text, base)
        if written.split(".")[-1] == "SupportsPP":
            return True
        if not isinstance(base, ast.Name):
            continue
        try:
            base_path, base_cls, _ = _find_class(src, dotted_of(path), base.id)
        except DsaPathError:
            continue
        if _supports_pp(src, base_path, base_cls, depth + 1):
            return True
    return False


def _serving(src: ReleaseSource, arch: str, role: str, module: str, cls: str) -> ServingClass:
    path, node, via = _find_class(src, module, cls)
    _, text = src.module(path)
    return ServingClass(
        arch=arch,
        role=role,
        registry_module=module,
        registry_class=cls,
        module=dotted_of(path),
        path=path,
        cls=node.name,
        bases=tuple(node_text(text, b) for b in node.bases),
        supports_pp=_supports_pp(src, path, node),
        via=via,
    )


def dsa_model_classes(tree: FileTree) -> list[ServingClass]:
    """The classes that serve the DSA architectures (`DSA_ARCHITECTURES`) on CUDA, as the registry maps them.

    Raises `DsaPathError` when the registry lacks an architecture or its class cannot be found on CUDA.
    """
    entries = registry_entries(tree)
    src = release_source(tree)
    out = []
    for arch in DSA_ARCHITECTURES:
        if arch not in entries:
            raise DsaPathError(f"the model registry has no {arch}", file=REGISTRY)
        module, cls = entries[arch]
        out.append(_serving(src, arch, "model", module, cls))
    return out


# -------------------------------------------------------------------------------------------------- the MTP drafts


def _model_type_test(node: ast.expr) -> bool:
    return isinstance(node, ast.Compare) and ast.unparse(node.left).endswith("model_type")


def mtp_drafts(tree: FileTree) -> list[MtpDraft]:
    """For each DSA checkpoint `model_type`: the MTP architecture `speculative.py` gives its draft on CUDA, the
    condition that chose it (source text) and the class it maps to."""
    src = release_source(tree)
    got = src.module(SPECULATIVE)
    if got is None:
        raise DsaPathError("the speculative config is missing", file=SPECULATIVE)
    mod, text = got
    entries = registry_entries(tree)
    fn = next(
        (n for n in ast.walk(mod) if isinstance(n, ast.FunctionDef) and n.name == "hf_config_override"),
        None,
    )
    if fn is None:
        raise DsaPathError("no hf_config_override in the speculative config", file=SPECULATIVE)
    assigns = {
        s.targets[0].id: s
        for s in ast.walk(fn)
        if isinstance(s, ast.Assign) and len(s.targets) == 1 and isinstance(s.targets[0], ast.Name)
    }
    out = []
    for model_type in dict.fromkeys(DSA_ARCHITECTURES.values()):
        env: dict[str, object] = {"hf_config.model_type": model_type}
        # the rewrites run in order; each `if model_type ...:` block that matches may change model_type
        arch, condition = None, None
        for stmt in fn.body:
            if not (isinstance(stmt, ast.If) and _model_type_test(stmt.test)):
                continue
            if evaluate(stmt.test, env) is not True:
                continue
            for node in ast.walk(ast.Module(stmt.body, [])):
                if isinstance(node, ast.Assign) and ast.unparse(node.targets[0]).endswith("model_type"):
                    value = evaluate(node.value, env)
                    if isinstance(value, str):
                        env["hf_config.model_type"] = value
                if isinstance(node, ast.Dict):
                    for k, v in zip(node.keys, node.values, strict=True):
                        if isinstance(k, ast.Constant) and k.value == "architectures" and isinstance(v, ast.List):
                            choice = v.elts[0] if v.elts else None
                            if isinstance(choice, ast.IfExp):
                                test = choice.test
                                cond_node = assigns.get(test.id) if isinstance(test, ast.Name) else None
                                cond_env = {"hf_config.model_type": model_type}
                                taken = evaluate(cond_node.value if cond_node else test, cond_env)
                                condition = node_text(text, cond_node or test)
                                choice = choice.body if taken is True else choice.orelse if taken is False else None
                                if choice is None:
                                    condition += " (not evaluable)"
                            if isinstance(choice, ast.Constant) and isinstance(choice.value, str):
                                arch = choice.value
        if arch is None:
            continue
        if arch not in entries:
            raise DsaPathError(f"the MTP architecture {arch} is not in the model registry", file=REGISTRY)
        module, cls = entries[arch]
        out.append(MtpDraft(model_type, arch, condition, _serving(src, arch, "mtp", module, cls)))
    return out


# -------------------------------------------------------------------------------------------- sparse-MLA backends


def _capability_value(node: ast.expr, arg: str, cap: tuple[int, int]) -> bool | None:
    """`supports_compute_capability`'s return expression for capability `cap`; None when not evaluable."""
    env = {f"{arg}.major": cap[0], f"{arg}.minor": cap[1], arg: cap}
    v = evaluate(node, env)
    return None if v is UNKNOWN else bool(v)


def _admits_ampere(src: ReleaseSource, path: str, cls_name: str) -> tuple[bool | None, str]:
    try:
        cls_path, cls, _ = _find_class(src, dotted_of(path), cls_name)
    except DsaPathError as exc:
        return None, exc.message
    mod, text = src.module(cls_path)
    fn = next(
        (n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == "supports_compute_capability"),
        None,
    )
    if fn is None:
        for base in cls.bases:
            if isinstance(base, ast.Name):
                got = _admits_ampere(src, cls_path, base.id)
                if got[0] is not None:
                    return got
        return None, "no supports_compute_capability found"
    returns = [n for n in ast.walk(fn) if isinstance(n, ast.Return) and n.value is not None]
    arg = fn.args.args[-1].arg if fn.args.args else "capability"
    if len(returns) != 1:
        return None, "supports_compute_capability is not one return"
    values = [_capability_value(returns[0].value, arg, cap) for cap in CAPABILITIES]
    reason = "supports_compute_capability: " + node_text(text, returns[0].value)
    if None in values:
        return None, reason + " (not evaluable)"
    return all(values), reason


def _sm8x_branch(fn: ast.FunctionDef) -> list[ast.stmt] | None:
    """The statements of `_get_backend_priorities` for MLA on compute capability 8.x."""

    def pick(body: list[ast.stmt], env: dict) -> list[ast.stmt] | None:
        for stmt in body:
            if isinstance(stmt, ast.If):
                taken = evaluate(stmt.test, env)
                if taken is UNKNOWN:
                    v = _capability_value(stmt.test, "device_capability", CAPABILITIES[0])
                    taken = UNKNOWN if v is None else v
                if taken is True:
                    return pick(stmt.body, env) or stmt.body
                if taken is False:
                    return pick(stmt.orelse, env) or stmt.orelse
        return None

    return pick(fn.body, {"use_mla": True})


def sparse_backends(tree: FileTree) -> list[SparseBackend]:
    """The sparse-MLA backends (`AttentionBackendEnum.*SPARSE*`) that `vllm/platforms/cuda.py` lists for MLA on
    compute capability 8.x, in order, each with whether its `supports_compute_capability` admits sm_80 and sm_86."""
    src = release_source(tree)
    got = src.module(CUDA_PLATFORM)
    if got is None:
        raise DsaPathError("the CUDA platform is missing", file=CUDA_PLATFORM)
    mod, _ = got
    fn = next(
        (n for n in ast.walk(mod) if isinstance(n, ast.FunctionDef) and n.name == "_get_backend_priorities"), None
    )
    branch = _sm8x_branch(fn) if fn else None
    if branch is None:
        raise DsaPathError("no MLA priority list for compute capability 8.x", file=CUDA_PLATFORM)
    names: list[str] = []
    for node in ast.walk(ast.Module(branch, [])):
        if isinstance(node, ast.Attribute) and ast.unparse(node.value) == "AttentionBackendEnum":
            if "SPARSE" in node.attr and node.attr not in names:
                names.append(node.attr)
    names.sort(key=lambda n: min(x.lineno for x in ast.walk(ast.Module(branch, [])) if getattr(x, "attr", None) == n))
    enum_paths: dict[str, str] = {}
    reg = src.module(BACKEND_REGISTRY)
    if reg is not None:
        for node in ast.walk(reg[0]):
            if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
                if isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
                    enum_paths[node.targets[0].id] = node.value.value
    out = []
    for name in names:
        dotted = enum_paths.get(name, "")
        mod_name, _, cls = dotted.rpartition(".")
        path = module_path(src, mod_name) if mod_name else None
        if path is None:
            out.append(SparseBackend(name, None, cls or None, None, f"class path {dotted!r} not in the tree"))
            continue
        admits, reason = _admits_ampere(src, path, cls)
        out.append(SparseBackend(name, path, cls, admits, reason))
    return out


# --------------------------------------------------------------------------------------------------- the closure


def _in_bound(path: str, extra: set[str]) -> bool:
    return path in extra or any(path == b or (b.endswith("/") and path.startswith(b)) for b in BOUND)


def _import_targets(src: ReleaseSource, path: str) -> list[str]:
    """The `vllm` modules file `path` imports (module level and in functions; not under `TYPE_CHECKING`; a package
    `__init__` along its CUDA branch), as file paths in the tree."""
    mod, _ = src.module(path)
    skip: set[int] = set()
    for node in ast.walk(mod):
        if isinstance(node, ast.If) and is_type_checking(node.test):
            skip |= {id(n) for s in node.body for n in ast.walk(s)}
    if path.endswith("__init__.py"):
        top = {id(s) for s in cuda_statements(mod.body)}
        skip |= {id(n) for s in mod.body for n in ast.walk(s) if id(s) not in top and not isinstance(s, ast.If)}
        cuda = {id(n) for s in cuda_statements(mod.body) for n in ast.walk(s)}
        skip |= {id(n) for s in mod.body if isinstance(s, ast.If) for n in ast.walk(s) if id(n) not in cuda}
    out: list[str] = []
    for node in ast.walk(mod):
        if id(node) in skip:
            continue
        dotted: list[str] = []
        if isinstance(node, ast.ImportFrom):
            base = absolute_module(path, node)
            dotted.append(base)
            dotted += [f"{base}.{a.name}" for a in node.names]
        elif isinstance(node, ast.Import):
            dotted += [a.name for a in node.names]
        for d in dotted:
            if d.startswith("vllm"):
                p = module_path(src, d)
                if p is not None and p not in out:
                    out.append(p)
    return out


def path_modules(tree: FileTree, classes: list[ServingClass], backends: list[SparseBackend]) -> list[str]:
    """The forward closure (module docstring): the serving classes' modules, `SEEDS` present in the tree and the
    backends that admit sm_8x (or cannot be evaluated), closed over imports into `BOUND`. Sorted paths."""
    src = release_source(tree)
    extra = {b.path for b in backends if b.path and b.admits_ampere is not False}
    todo = [c.path for c in classes] + [s for s in SEEDS if src.exists(s)] + sorted(extra)
    seen: set[str] = set()
    while todo:
        path = todo.pop()
        if path in seen:
            continue
        seen.add(path)
        for target in _import_targets(src, path):
            if target not in seen and _in_bound(target, extra):
                todo.append(target)
    return sorted(seen)


# ----------------------------------------------------------------------------------------------- classification


def _missing_backend(backends: list[SparseBackend]) -> Blocker | None:
    """A `backend` blocker when no listed sparse-MLA backend admits sm_8x."""
    if any(b.admits_ampere is not False for b in backends):
        return None
    listed = ", ".join(b.name for b in backends) or "none"
    return Blocker(
        "backend",
        CUDA_PLATFORM,
        "_get_backend_priorities",
        0,
        "no sparse-MLA backend for sm_8x",
        f"listed for 8.x: {listed}",
    )


def tree_path(tree: FileTree) -> TreePath:
    """The DSA path of one tree: serving classes, MTP drafts, sparse backends, modules, blockers."""
    models = dsa_model_classes(tree)
    drafts = mtp_drafts(tree)
    backends = sparse_backends(tree)
    modules = path_modules(tree, models + [d.serving for d in drafts], backends)
    blockers = scan_blockers(tree, modules)
    missing = _missing_backend(backends)
    if missing is not None:
        blockers.insert(0, missing)
    return TreePath(models, drafts, backends, modules, blockers, release_source(tree))


def classify(blocker: Blocker, stock: Blocker | None, composed_path: TreePath) -> tuple[Handling, str]:
    """How a composed-tree blocker stands on Ampere. The rules, first match wins:

    1. `backend`: still no sparse-MLA backend for sm_8x -> NOT_HANDLED.
    2. `triton`, every use pruned on sm_8x (`AMPERE_CONSTEXPR`): SOFTWARE_E4M3 when a pruning flag is
       SOFTWARE_E4M3, else PRUNED (the release's own constexpr branch, off under the Ampere launch contract).
    3. `triton` helper: handled when every caller's use of it is pruned or the caller is off on sm_8x (PRUNED /
       GATED_* as the caller), else NOT_HANDLED.
    4. any blocker off on sm_8x (`reach`): DEEP_GEMM_FALLBACK for a DeepGEMM call behind `is_deep_gemm_supported`
       in a function that also calls a Triton fallback from `mqa_logits_triton` (PR #38476); GATED_UPSTREAM when
       the stock blocker was off by the same guard; else GATED_BY_COMPOSE (a guard the compose added, e.g. 0007's
       `has_device_capability(89)`).
    5. reach "off-contract" (a condition on a `LAUNCH_CONTRACT` value, e.g. `if dcp_world_size <= 1: return` at the
       top of its function) -> OFF_BY_CONTRACT, with the guard: off under how Ampere runs are launched, whatever
       the compose does (so never counted as the compose's).
    6. reach "unknown" (an arch guard the evaluator cannot decide) -> UNCLASSIFIED, with the guard.
    7. reach "on" -> NOT_HANDLED, with the live uses or "unguarded" / the guard that lets sm_8x through.
    Anything else -> UNCLASSIFIED. Blockers only in the stock tree are REMOVED_BY_COMPOSE (`ampere_path`).
    """
    if blocker.kind == "backend":
        return Handling.NOT_HANDLED, blocker.guard
    live = [u for u in blocker.uses if u.pruned is None]
    if blocker.kind == "triton" and not live:
        reasons = "; ".join(dict.fromkeys(u.pruned for u in blocker.uses))
        return (Handling.SOFTWARE_E4M3 if "SOFTWARE_E4M3" in reasons else Handling.PRUNED), reasons
    if blocker.kind == "triton" and blocker.called_from:
        verdicts = []
        for b in composed_path.blockers:
            if b.path == blocker.path and b.function in blocker.called_from:
                through = [u for u in b.uses if u.via == blocker.function and u.pruned is None]
                if through and b.reach not in ("off", "off-contract"):
                    return Handling.NOT_HANDLED, f"jit helper; live in {b.function}: " + _live(through)
                verdicts.append(b.function)
        return Handling.PRUNED, "jit helper; every caller prunes it or is off on sm_8x: " + ", ".join(verdicts)
    if blocker.reach == "off":
        if blocker.kind == "deep_gemm" and "is_deep_gemm_supported" in blocker.guard:
            if _has_triton_fallback(blocker, composed_path):
                return Handling.DEEP_GEMM_FALLBACK, blocker.guard
        if stock is not None and stock.reach == "off" and _same_guard(stock.guard, blocker.guard):
            return Handling.GATED_UPSTREAM, blocker.guard
        return Handling.GATED_BY_COMPOSE, blocker.guard
    if blocker.reach == "off-contract":
        return Handling.OFF_BY_CONTRACT, blocker.guard
    if blocker.reach == "unknown":
        return Handling.UNCLASSIFIED, f"arch guard not decidable for sm_8x: {blocker.guard}"
    if blocker.reach == "on":
        if blocker.kind == "triton":
            return Handling.NOT_HANDLED, _live(live) + ("" if blocker.guard == "unguarded" else f"; {blocker.guard}")
        return Handling.NOT_HANDLED, "unguarded" if blocker.guard == "unguarded" else f"runs on sm_8x: {blocker.guard}"
    return Handling.UNCLASSIFIED, f"no rule for kind {blocker.kind!r} reach {blocker.reach!r}"


def _live(uses: list[TritonUse]) -> str:
    parts = []
    for u in uses:
        where = f"line {u.line}" + (f" in {u.via}" if u.via else "")
        cond = f" under {' / '.join(u.constexpr)}" if u.constexpr else " unconditional"
        parts.append(f"{u.feature} ({where}){cond}")
    shown = list(dict.fromkeys(parts))
    return "live: " + "; ".join(shown[:4]) + (f" and {len(shown) - 4} more" if len(shown) > 4 else "")


def _same_guard(a: str, b: str) -> bool:
    norm = lambda s: re.sub(r"\s+|\[.*\]", "", s)  # noqa: E731 - aliases may differ in wording
    return norm(a) == norm(b)


def _has_triton_fallback(blocker: Blocker, composed_path: TreePath) -> bool:
    """Whether the function holding a DeepGEMM call also calls a Triton fallback imported from `mqa_logits_triton`."""
    src = composed_path.source
    got = src.module(blocker.path)
    if got is None:
        return False
    mod, _ = got
    imports = imports_of(src, blocker.path)
    fallbacks = {n for n, (m, _) in imports.items() if m.endswith("mqa_logits_triton")}
    for node in ast.walk(mod):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name == blocker.function.split(".")[-1]:
            calls = {c.func.id for c in ast.walk(node) if isinstance(c, ast.Call) and isinstance(c.func, ast.Name)}
            if calls & fallbacks:
                return True
    return False


def ampere_path(
    composed: FileTree, stock: FileTree, tag: str, relay: Callable[[FileTree], object] | None = None
) -> AmperePath:
    """The DSA path of release `tag`: both trees read, the composed tree's blockers classified against the stock
    tree's (`classify`), and the stock-only blockers recorded as removed by the compose. `relay(tree)`, when given,
    reads each tree's PP top-k relay into the path (the `ampere-path` command passes `pp.topk_relay.topk_crossing`, a
    reader of the room above this one, which this one does not import)."""
    composed_path = tree_path(composed)
    stock_path = tree_path(stock)
    by_key = {b.key: b for b in stock_path.blockers}
    classified = []
    for b in composed_path.blockers:
        handling, detail = classify(b, by_key.get(b.key), composed_path)
        classified.append(ClassifiedBlocker(b, handling, detail, by_key.get(b.key)))
    composed_keys = {b.key for b in composed_path.blockers}
    for b in stock_path.blockers:
        if b.key not in composed_keys:
            detail = "not in the composed tree"
            if b.kind == "backend":
                admitted = [x.name for x in composed_path.backends if x.admits_ampere is not False]
                detail = "the composed tree lists " + ", ".join(admitted) + " for 8.x, admitting sm_8x"
            classified.append(ClassifiedBlocker(b, Handling.REMOVED_BY_COMPOSE, detail, b))
    path = AmperePath(tag, composed_path, stock_path, classified)
    if relay is not None:
        path.topk_relay, path.stock_topk_relay = relay(composed), relay(stock)
    return path


# ----------------------------------------------------------------------------------------------------- rendering

#: the markers of the generated section of docs/ampere-path.md
BEGIN = "<!-- ampere-path:begin (generated by `vllm-compose ampere-path`; do not edit) -->"
END = "<!-- ampere-path:end -->"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _pp(drafts: list[MtpDraft]) -> str:
    return "/".join(dict.fromkeys("yes" if d.serving.supports_pp else "**no**" for d in drafts)) or "—"


def _relay(crossing) -> str:
    if crossing is None:
        return "—"
    return "yes" if crossing.relayed else "**no**"


def render_ampere_path(paths: list[AmperePath]) -> str:
    """Markdown: a summary row per release, then per release its serving classes, MTP draft, sparse-MLA backends for
    8.x, the modules on the path and every blocker with its guard and handling."""
    if not paths:
        return "(no releases read)\n"
    out = [
        "| release | GLM-5.x / DeepSeek-V3.2 on CUDA | MTP draft on CUDA | draft SupportsPP (stock → composed) "
        "| PP top-k relay, IndexCache (stock → composed) "
        "| blockers | by the compose | upstream / off on sm_8x | not handled | unclassified |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for p in paths:
        c = p.counts()
        models = ", ".join(dict.fromkeys(f"`{m.module}.{m.cls}`" for m in p.composed.models))
        drafts = ", ".join(dict.fromkeys(f"`{d.serving.module}.{d.serving.cls}`" for d in p.composed.drafts))
        pp = f"{_pp(p.stock.drafts)} → {_pp(p.composed.drafts)}"
        not_handled = f"**{c['not_handled']}**" if c["not_handled"] else "0"
        unclassified = f"**{c['unclassified']}**" if c["unclassified"] else "0"
        relay = f"{_relay(p.stock_topk_relay)} → {_relay(p.topk_relay)}"
        row = [p.tag, models, drafts, pp, relay, str(c["blockers"]), str(c["by_compose"]), str(c["upstream"])]
        out.append("| " + " | ".join([*row, not_handled, unclassified]) + " |")
    for p in paths:
        out += ["", f"### {p.tag}", ""]
        for m in p.composed.models:
            via = f" (via {'; '.join(m.via)})" if m.via else ""
            out.append(f"- `{m.arch}` → `{m.module}.{m.cls}`{via}")
        stock_pp = {d.model_type: d.serving.supports_pp for d in p.stock.drafts}
        for d in p.composed.drafts:
            cond = f", chosen by `{d.condition}`" if d.condition else ""
            pp = "yes" if d.serving.supports_pp else "**no**"
            was = "yes" if stock_pp.get(d.model_type) else "no"
            out.append(
                f"- MTP draft of `{d.model_type}`: `{d.arch}`{cond} → `{d.serving.module}.{d.serving.cls}`; "
                f"SupportsPP: {pp} (stock: {was})"
            )
        backends = []
        for b in p.composed.backends:
            verdict = {True: "admits sm_8x", False: "rejects sm_8x", None: "not evaluable"}[b.admits_ampere]
            backends.append(f"`{b.name}` ({verdict}: `{b.reason.removeprefix('supports_compute_capability: ')}`)")
        out.append("- sparse-MLA backends listed for 8.x: " + (", ".join(backends) or "none"))
        if p.topk_relay is not None:
            r = p.topk_relay
            shares = "shares" if r.drafter_shares else "does not share"
            out.append(
                f"- top-k buffer across PP stages: `{r.path}` `{r.cls}`: {r.summary()} (stock: "
                f"{p.stock_topk_relay.summary() if p.stock_topk_relay is not None else 'not read'}); the V2 "
                f"runner's MTP drafter {shares} the target's buffer on the last stage"
            )
        out.append(
            f"- modules on the path ({len(p.composed.modules)}): " + ", ".join(f"`{m}`" for m in p.composed.modules)
        )
        out += ["", "| blocker | where | needs | guard | handling |", "|---|---|---|---|---|"]
        for cb in p.classified:
            b = cb.blocker
            where = f"`{b.path}`" + (f":{b.line}" if b.line else "") + f" `{b.function}`"
            handling = cb.handling.value
            if not cb.handling.handled:
                handling = f"**{handling}**"
            out.append(
                "| "
                + " | ".join([b.kind, where, _cell(b.what), _cell(b.guard), _cell(f"{handling}: {cb.detail}")])
                + " |"
            )
    return "\n".join(out) + "\n"
