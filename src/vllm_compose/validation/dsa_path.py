"""The DSA path of a vLLM release on CUDA, read from its code: which classes serve GLM-5.x and DeepSeek-V3.2 (MTP
drafts included), which modules their forward pass runs through, and every kernel or op there that needs more than
sm_80/86 — with how the compose handles it, by comparing the composed tree with the stock tree of the same release.

Pure static analysis with `ast` over a `FileTree` (a directory or a git tree): nothing of vLLM is imported, no torch.

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
* `scan_blockers(tree, modules)`: arch-limited Triton features in `@triton.jit` functions and calls into native
  libraries that need sm_89+/sm_90+, each with its guard: a condition around it or an `if ...: return` before it
  (its function's own early returns included), a callee's early return, its callers' conditions — evaluated as a
  sm_80/86 CUDA process sees them, and apart from that under the Ampere launch contract (`LAUNCH_CONTRACT`: e.g.
  decode context parallel off, so code after `if dcp_world_size <= 1: return` never runs).
* `ampere_path(composed, stock, tag)`: all of the above for both trees, and each composed-tree blocker classified by
  `classify` (the rules are in its docstring; what no rule covers is `Handling.UNCLASSIFIED`, never dropped).

The bound (why not all of vLLM): the forward pass of these models touches hundreds of modules (config, distributed,
loaders), but the kernels that can need a newer GPU sit in a few. The closure starts at the serving classes' modules,
the modules the brief of the DSA path names, and the sparse-MLA backends that admit sm_8x, and follows `from vllm...
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
import operator
import re
import weakref
from dataclasses import dataclass, field

from ..errors import ComposeError
from ..trees import FileTree

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

#: seeds beyond the serving classes: the brief's named modules, entered where present
SEEDS: tuple[str, ...] = (
    "vllm/model_executor/layers/sparse_attn_indexer.py",
    "vllm/v1/attention/backends/mla/indexer.py",
    "vllm/v1/attention/ops/mqa_logits_triton.py",
    "vllm/v1/attention/ops/triton_mla_sparse_kernel.py",
    "vllm/model_executor/layers/fused_moe/fused_moe.py",
)

#: the capabilities the table is for
AMPERE: tuple[tuple[int, int], ...] = ((8, 0), (8, 6))

#: constexpr values a sm_80/86 run has, so Triton prunes the branches they switch off before it compiles anything
#: (a use of fp8e4nv in a pruned branch is never compiled). Only the branch of the `if` is pruned: what follows a
#: constexpr early return (`if not QUANTIZE_MQA: return`) is still traced and compiled. Why each value holds on Ampere:
AMPERE_CONSTEXPR: dict[str, tuple[bool, str]] = {
    # the lead's series fix (vllm/models/deepseek_v32/common/e4m3.py): true on CUDA below sm_89
    "SOFTWARE_E4M3": (True, "software E4M3 on sm_8x (SOFTWARE_E4M3)"),
    # the MLA KV-cache layouts: all off with the Ampere launch contract's bf16 KV cache (`--kv-cache-dtype auto`)
    "MLA_CACHE_FP8": (False, "off with a bf16 KV cache (MLA_CACHE_FP8)"),
    "MLA_CACHE_DS_MLA": (False, "off with a bf16 KV cache (MLA_CACHE_DS_MLA)"),
    "MLA_CACHE_NVFP4": (False, "off with a bf16 KV cache (MLA_CACHE_NVFP4)"),
    # fp8 query packing: attention.py's `_fp8_query` needs fp8 attention, i.e. a quantized KV cache
    "QUANTIZE_MQA": (False, "off with a bf16 KV cache (QUANTIZE_MQA)"),
    # tensor-descriptor gather in the Triton MoE: `resolve_moe_use_td()` is false on CUDA unless VLLM_TRITON_USE_TD=1
    "USE_TD": (False, "off on CUDA unless VLLM_TRITON_USE_TD=1 (USE_TD)"),
}

#: values the Ampere launch contract (PP/TP only, a bf16 KV cache) fixes outside jit code, for the conditions of
#: ordinary Python: a name here counts with its value as a plain name (a parameter, a local), `self.name` or a
#: config field `x.name`, unless a caller binds it to a known value. What a condition on these keeps off is off by
#: how Ampere runs are launched, not by the GPU: "off under the launch contract" (`classify`), never "by the
#: compose". Why each value holds on Ampere:
LAUNCH_CONTRACT: dict[str, tuple[object, str]] = {
    # `--decode-context-parallel-size` is never given: `ParallelConfig.decode_context_parallel_size` stays 1
    "decode_context_parallel_size": (1, "decode context parallel off (DCP size 1, the Ampere launch contract)"),
    # the indexer's DCP size, set from that field (`self.dcp_world_size`) and passed on as a parameter
    "dcp_world_size": (1, "decode context parallel off (DCP size 1, the Ampere launch contract)"),
}

#: words that make an `if` a guard worth naming (its source text, aliases expanded, contains one)
GUARD_WORDS = ("capability", "has_deep_gemm", "is_deep_gemm_supported", "is_cuda", "SOFTWARE_E4M3", "_supported(")
#: of those, the ones that test the GPU generation; `is_cuda` alone lets sm_8x through, `has_deep_gemm` only says the
#: library is installed
ARCH_WORDS = ("capability", "is_deep_gemm_supported", "SOFTWARE_E4M3", "_supported(")

#: Triton features below sm_89/sm_90: (pattern on the attribute or name, what it is)
_TRITON_FEATURES: tuple[tuple[str, str], ...] = (
    ("dot_scaled", "tl.dot_scaled"),
    ("make_tensor_descriptor", "TMA descriptor"),
    ("_experimental_make_tensor_descriptor", "TMA descriptor"),
    ("load_tensor_descriptor", "TMA descriptor"),
    ("experimental_descriptor_load", "TMA descriptor"),
    ("TensorDescriptor", "TMA descriptor"),
)

#: torch.ops names that are fp8/fp4 or vendor-library kernels
_TORCH_OP = re.compile(r"fp8|fp4|cutlass|deep_gemm|flash_mla|flashmla|sparse_mla")
#: a probe, not a kernel: the names the libraries use to say whether they can run
_PROBE = re.compile(r"^(is_|has_|should_|supports_|get_num_sms)|_supported$|_available$")


class DsaPathError(ComposeError):
    """A release whose code lacks what the DSA path needs (the registry entries, a parsable module)."""


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
    #: True / False from `supports_compute_capability` for every `AMPERE` capability; None: not evaluable
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


@dataclass(frozen=True)
class TritonUse:
    """One use of an arch-limited Triton feature inside a jit function."""

    feature: str
    line: int
    #: the constexpr conditions around it (innermost last), as written with their polarity
    constexpr: tuple[str, ...] = ()
    #: a jit helper the feature sits in (the use is in the helper, reached from this function)
    via: str | None = None
    #: why an Ampere run never compiles it (a constexpr it has there), or None when it does
    pruned: str | None = None


@dataclass
class Blocker:
    """A kernel or op on the path that needs more than sm_80/86."""

    #: triton | deep_gemm | flash_mla | flashinfer | cutedsl | glm52_gemm | torch_op | backend
    kind: str
    path: str
    #: enclosing function (qualified: `Class.method`), or the jit function itself
    function: str
    line: int
    #: the feature or the callee
    what: str
    #: the condition that keeps it off sm_8x, else the nearest guarding condition (aliases in brackets), or
    #: "unguarded"; for a jit kernel, of its launches (followed to their callers)
    guard: str = "unguarded"
    #: "off": it does not run on sm_80/86 (the guard says why); "off-contract": it does not run there under the
    #: Ampere launch contract (`LAUNCH_CONTRACT`, e.g. DCP size 1), whatever the GPU; "on": it does; "unknown": an
    #: arch guard the evaluator cannot decide
    reach: str = "on"
    uses: list[TritonUse] = field(default_factory=list)
    #: for a jit helper: the jit functions that call it
    called_from: tuple[str, ...] = ()

    @property
    def key(self) -> tuple[str, str, str, str]:
        """What identifies the same blocker in the stock and the composed tree (lines move)."""
        return (self.kind, self.path, self.function, self.what)

    def to_json(self) -> dict:
        return {
            "kind": self.kind,
            "path": self.path,
            "function": self.function,
            "line": self.line,
            "what": self.what,
            "guard": self.guard,
            "reach": self.reach,
            "called_from": list(self.called_from),
            "uses": [
                {"feature": u.feature, "line": u.line, "constexpr": list(u.constexpr), "via": u.via, "pruned": u.pruned}
                for u in self.uses
            ],
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
    source: _Source = field(repr=False, compare=False, default=None)


@dataclass
class AmperePath:
    """The DSA path of one release, composed and stock, with the composed tree's blockers classified."""

    tag: str
    composed: TreePath
    stock: TreePath
    classified: list[ClassifiedBlocker]
    #: how the IndexCache top-k crosses a PP stage boundary, composed and stock (topk_relay.TopkCrossing)
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


# ------------------------------------------------------------------------------------------------- source helpers


class _Source:
    """The parsed modules of one tree, each parsed once; parent links for climbing from a node to its guards."""

    def __init__(self, tree: FileTree) -> None:
        self.tree = tree
        self._mods: dict[str, tuple[ast.Module, str] | None] = {}
        self.parents: dict[ast.AST, ast.AST] = {}
        #: id of a parsed module -> its path (to find the file a node belongs to)
        self.path_of: dict[int, str] = {}

    def module(self, path: str) -> tuple[ast.Module, str] | None:
        """(syntax tree, text) of `path`, or None when absent; `DsaPathError` when it does not parse."""
        if path not in self._mods:
            data = self.tree.read(path)
            if data is None:
                self._mods[path] = None
            else:
                text = data.decode("utf-8", "replace")
                try:
                    mod = ast.parse(text, filename=path)
                except SyntaxError as exc:
                    raise DsaPathError(f"cannot parse: {exc.msg} (line {exc.lineno})", file=path) from None
                for node in ast.walk(mod):
                    for child in ast.iter_child_nodes(node):
                        self.parents[child] = node
                self._mods[path] = (mod, text)
                self.path_of[id(mod)] = path
        return self._mods[path]

    def file_of(self, node: ast.AST) -> tuple[str, str]:
        """(path, text) of the module `node` is in."""
        while not isinstance(node, ast.Module):
            node = self.parents[node]
        path = self.path_of[id(node)]
        return path, self._mods[path][1]

    def exists(self, path: str) -> bool:
        return self.module(path) is not None


_SOURCES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _source(tree) -> _Source:
    """The one `_Source` of `tree` (each module parsed once however many steps read it)."""
    if isinstance(tree, _Source):
        return tree
    try:
        got = _SOURCES.get(tree)
        if got is None:
            got = _SOURCES[tree] = _Source(tree)
        return got
    except TypeError:  # not weak-referenceable: parse afresh
        return _Source(tree)


def _text(src: str, node: ast.AST, limit: int = 160) -> str:
    """A node's source, on one line, shortened to `limit` characters."""
    seg = ast.get_source_segment(src, node) or ast.unparse(node)
    seg = re.sub(r"\s+", " ", seg).replace("( ", "(").replace(" )", ")").strip()
    return seg if len(seg) <= limit else seg[: limit - 1] + "…"


def module_path(tree_or_src, dotted: str) -> str | None:
    """The file of dotted module `dotted` in the tree (`a/b.py` or `a/b/__init__.py`), or None."""
    src = _source(tree_or_src)
    base = dotted.replace(".", "/")
    for cand in (base + ".py", base + "/__init__.py"):
        if src.exists(cand):
            return cand
    return None


def _dotted_of(path: str) -> str:
    p = path[: -len(".py")] if path.endswith(".py") else path
    p = p[: -len("/__init__")] if p.endswith("/__init__") else p
    return p.replace("/", ".")


def _absolute(path: str, node: ast.ImportFrom) -> str:
    """The absolute module of a `from ... import` in file `path`."""
    if not node.level:
        return node.module or ""
    package = _dotted_of(path).split(".")
    if not path.endswith("__init__.py"):
        package = package[:-1]
    package = package[: len(package) - (node.level - 1)]
    return ".".join(package + ([node.module] if node.module else []))


_PLATFORM_TRUTH = {"is_cuda": True, "is_cuda_alike": True, "is_rocm": False, "is_xpu": False, "is_cpu": False}
_PLATFORM_TRUTH |= {"is_tpu": False, "is_out_of_tree": False}


def _platform_value(test: ast.expr) -> bool | None:
    """A platform test evaluated for CUDA (`current_platform.is_cuda()` true, the others false); None: not one."""
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        v = _platform_value(test.operand)
        return None if v is None else not v
    if isinstance(test, ast.BoolOp):
        vals = [_platform_value(v) for v in test.values]
        if isinstance(test.op, ast.And):
            return False if False in vals else (None if None in vals else True)
        return True if True in vals else (None if None in vals else False)
    if isinstance(test, ast.Call) and isinstance(test.func, ast.Attribute) and not test.args:
        return _PLATFORM_TRUTH.get(test.func.attr)
    return None


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _cuda_statements(body: list[ast.stmt]):
    """The statements of `body` a CUDA process runs at import: platform `if`s resolved, `try` bodies entered."""
    for stmt in body:
        if isinstance(stmt, ast.If):
            if _is_type_checking(stmt.test):
                continue
            value = _platform_value(stmt.test)
            if value is None:
                yield from _cuda_statements(stmt.body)
                yield from _cuda_statements(stmt.orelse)
            else:
                yield from _cuda_statements(stmt.body if value else stmt.orelse)
        elif isinstance(stmt, ast.Try):
            yield from _cuda_statements(stmt.body)
        else:
            yield stmt


# ---------------------------------------------------------------------------------------------- the serving classes


def registry_entries(tree: FileTree) -> dict[str, tuple[str, str]]:
    """Every architecture of the model registry: arch -> (absolute module, class), as `_resolve_module_name` does
    (a relative name `deepseek_v2` lies under `vllm.model_executor.models`; `vllm.models.x` is absolute)."""
    src = _source(tree)
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


def _find_class(src: _Source, dotted: str, name: str, depth: int = 0) -> tuple[str, ast.ClassDef, tuple[str, ...]]:
    """Where class `name` of module `dotted` is defined on CUDA: (path, class statement, the steps taken)."""
    path = module_path(src, dotted)
    if path is None or depth > 8:
        raise DsaPathError(f"module {dotted} (for class {name}) is not in the tree", file=dotted.replace(".", "/"))
    mod, _ = src.module(path)
    for stmt in _cuda_statements(mod.body):
        if isinstance(stmt, ast.ClassDef) and stmt.name == name:
            return path, stmt, ()
        if isinstance(stmt, ast.ImportFrom):
            for alias in stmt.names:
                if (alias.asname or alias.name) == name:
                    target = _absolute(path, stmt)
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


def _supports_pp(src: _Source, path: str, cls: ast.ClassDef, depth: int = 0) -> bool:
    """Whether `SupportsPP` is among the bases of `cls`, or of the bases it inherits from (followed in the tree)."""
    if depth > 8:
        return False
    mod, text = src.module(path)
    for base in cls.bases:
        written = _text(text, base)
        if written.split(".")[-1] == "SupportsPP":
            return True
        if not isinstance(base, ast.Name):
            continue
        try:
            base_path, base_cls, _ = _find_class(src, _dotted_of(path), base.id)
        except DsaPathError:
            continue
        if _supports_pp(src, base_path, base_cls, depth + 1):
            return True
    return False


def _serving(src: _Source, arch: str, role: str, module: str, cls: str) -> ServingClass:
    path, node, via = _find_class(src, module, cls)
    _, text = src.module(path)
    return ServingClass(
        arch=arch,
        role=role,
        registry_module=module,
        registry_class=cls,
        module=_dotted_of(path),
        path=path,
        cls=node.name,
        bases=tuple(_text(text, b) for b in node.bases),
        supports_pp=_supports_pp(src, path, node),
        via=via,
    )


def dsa_model_classes(tree: FileTree) -> list[ServingClass]:
    """The classes that serve the DSA architectures (`DSA_ARCHITECTURES`) on CUDA, as the registry maps them.

    Raises `DsaPathError` when the registry lacks an architecture or its class cannot be found on CUDA.
    """
    entries = registry_entries(tree)
    src = _source(tree)
    out = []
    for arch in DSA_ARCHITECTURES:
        if arch not in entries:
            raise DsaPathError(f"the model registry has no {arch}", file=REGISTRY)
        module, cls = entries[arch]
        out.append(_serving(src, arch, "model", module, cls))
    return out


# -------------------------------------------------------------------------------------------------- the MTP drafts


def _eval(node: ast.expr, env: dict[str, object]) -> object:
    """A small evaluator for config conditions: constants, tuples, one comparison (`in`, `==`, `<`, ...),
    `and`/`or`/`not`, the names and dotted attributes of `env`, and platform calls (for CUDA). Returns `_UNKNOWN` for
    anything else."""
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.Tuple | ast.List | ast.Set):
        vals = [_eval(e, env) for e in node.elts]
        return _UNKNOWN if _UNKNOWN in vals else tuple(vals)
    if isinstance(node, ast.Name | ast.Attribute):
        return env.get(ast.unparse(node), _UNKNOWN)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
        v = _eval(node.operand, env)
        return _UNKNOWN if v is _UNKNOWN else not v
    if isinstance(node, ast.BoolOp):
        vals = [_eval(v, env) for v in node.values]
        if isinstance(node.op, ast.And):
            return False if any(v is not _UNKNOWN and not v for v in vals) else (_UNKNOWN if _UNKNOWN in vals else True)
        return True if any(v is not _UNKNOWN and v for v in vals) else (_UNKNOWN if _UNKNOWN in vals else False)
    if isinstance(node, ast.Compare) and len(node.ops) == 1:
        left, right = _eval(node.left, env), _eval(node.comparators[0], env)
        if _UNKNOWN in (left, right):
            return _UNKNOWN
        op = node.ops[0]
        try:
            if isinstance(op, ast.In):
                return left in right
            if isinstance(op, ast.NotIn):
                return left not in right
            if isinstance(op, ast.Eq):
                return left == right
            if isinstance(op, ast.NotEq):
                return left != right
            if type(op) in _ORDER:
                return _ORDER[type(op)](left, right)
        except TypeError:
            return _UNKNOWN
    if isinstance(node, ast.Call):
        v = _platform_value(node)
        if v is not None:
            return v
    return _UNKNOWN


_UNKNOWN = object()
_ORDER = {ast.Lt: operator.lt, ast.LtE: operator.le, ast.Gt: operator.gt, ast.GtE: operator.ge}


def _model_type_test(node: ast.expr) -> bool:
    return isinstance(node, ast.Compare) and ast.unparse(node.left).endswith("model_type")


def mtp_drafts(tree: FileTree) -> list[MtpDraft]:
    """For each DSA checkpoint `model_type`: the MTP architecture `speculative.py` gives its draft on CUDA, the
    condition that chose it (source text) and the class it maps to."""
    src = _source(tree)
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
            if _eval(stmt.test, env) is not True:
                continue
            for node in ast.walk(ast.Module(stmt.body, [])):
                if isinstance(node, ast.Assign) and ast.unparse(node.targets[0]).endswith("model_type"):
                    value = _eval(node.value, env)
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
                                taken = _eval(cond_node.value if cond_node else test, cond_env)
                                condition = _text(text, cond_node or test)
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
    v = _eval(node, env)
    return None if v is _UNKNOWN else bool(v)


def _admits_ampere(src: _Source, path: str, cls_name: str) -> tuple[bool | None, str]:
    try:
        cls_path, cls, _ = _find_class(src, _dotted_of(path), cls_name)
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
    values = [_capability_value(returns[0].value, arg, cap) for cap in AMPERE]
    reason = "supports_compute_capability: " + _text(text, returns[0].value)
    if None in values:
        return None, reason + " (not evaluable)"
    return all(values), reason


def _sm8x_branch(fn: ast.FunctionDef) -> list[ast.stmt] | None:
    """The statements of `_get_backend_priorities` for MLA on compute capability 8.x."""

    def pick(body: list[ast.stmt], env: dict) -> list[ast.stmt] | None:
        for stmt in body:
            if isinstance(stmt, ast.If):
                taken = _eval(stmt.test, env)
                if taken is _UNKNOWN:
                    v = _capability_value(stmt.test, "device_capability", AMPERE[0])
                    taken = _UNKNOWN if v is None else v
                if taken is True:
                    return pick(stmt.body, env) or stmt.body
                if taken is False:
                    return pick(stmt.orelse, env) or stmt.orelse
        return None

    return pick(fn.body, {"use_mla": True})


def sparse_backends(tree: FileTree) -> list[SparseBackend]:
    """The sparse-MLA backends (`AttentionBackendEnum.*SPARSE*`) that `vllm/platforms/cuda.py` lists for MLA on
    compute capability 8.x, in order, each with whether its `supports_compute_capability` admits sm_80 and sm_86."""
    src = _source(tree)
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


def _import_targets(src: _Source, path: str) -> list[str]:
    """The `vllm` modules file `path` imports (module level and in functions; not under `TYPE_CHECKING`; a package
    `__init__` along its CUDA branch), as file paths in the tree."""
    mod, _ = src.module(path)
    skip: set[int] = set()
    for node in ast.walk(mod):
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            skip |= {id(n) for s in node.body for n in ast.walk(s)}
    if path.endswith("__init__.py"):
        top = {id(s) for s in _cuda_statements(mod.body)}
        skip |= {id(n) for s in mod.body for n in ast.walk(s) if id(s) not in top and not isinstance(s, ast.If)}
        cuda = {id(n) for s in _cuda_statements(mod.body) for n in ast.walk(s)}
        skip |= {id(n) for s in mod.body if isinstance(s, ast.If) for n in ast.walk(s) if id(n) not in cuda}
    out: list[str] = []
    for node in ast.walk(mod):
        if id(node) in skip:
            continue
        dotted: list[str] = []
        if isinstance(node, ast.ImportFrom):
            base = _absolute(path, node)
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
    src = _source(tree)
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


# ------------------------------------------------------------------------------------------------------ blockers


def _qualname(src: _Source, node: ast.AST) -> str:
    names = []
    cur = src.parents.get(node)
    while cur is not None:
        if isinstance(cur, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.append(cur.name)
        cur = src.parents.get(cur)
    return ".".join(reversed(names)) or "<module>"


def _enclosing(src: _Source, node: ast.AST, kinds) -> ast.AST | None:
    cur = src.parents.get(node)
    while cur is not None and not isinstance(cur, kinds):
        cur = src.parents.get(cur)
    return cur


def _conditions(src: _Source, node: ast.AST, stop: ast.AST | None = None, exits: bool = True):
    """The conditions that hold where `node` runs, innermost first, as (test, negated): enclosing `if`s and ternaries,
    and (with `exits`) earlier `if ...: return/raise/continue` statements of the same blocks (their test negated).

    `exits=False` is for what Triton compiles in a `@triton.jit` body: it prunes only the branch of a constexpr `if`
    that is not taken, and still traces (so compiles) the statements after a constexpr early return — with the
    flag off, `if not QUANTIZE_MQA: return` does not keep the fp8e4nv stores after it from failing on sm_80
    ("type fp8e4nv not supported in this architecture"; Triton 3.6, nested in `if pid == 2:` as well)."""
    child = node
    cur = src.parents.get(node)
    while cur is not None and cur is not stop:
        for fieldname in ("body", "orelse"):
            block = getattr(cur, fieldname, None)
            if isinstance(block, list) and child in block:
                for earlier in reversed(block[: block.index(child)] if exits else []):
                    if isinstance(earlier, ast.If) and not earlier.orelse and earlier.body:
                        if isinstance(earlier.body[-1], ast.Return | ast.Raise | ast.Continue | ast.Break):
                            yield earlier.test, True
                if isinstance(cur, ast.If) and fieldname == "body":
                    yield cur.test, False
                elif isinstance(cur, ast.If):
                    yield cur.test, True
        if isinstance(cur, ast.IfExp) and child is not cur.test:
            yield cur.test, child is cur.orelse
        if isinstance(cur, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) and stop is None:
            break
        child, cur = cur, src.parents.get(cur)


def _aliases(src: _Source, text: str, where: ast.AST, test: ast.expr) -> list[str]:
    """What the names in `test` stand for: local assignments in the enclosing function (and the condition they sit
    under), `self.x` assignments in the enclosing class."""
    fn = _enclosing(src, where, (ast.FunctionDef, ast.AsyncFunctionDef))
    cls = _enclosing(src, where, ast.ClassDef)
    out = []
    for n in ast.walk(test):
        scope, name = None, None
        if isinstance(n, ast.Name) and fn is not None:
            scope, name = fn, n.id
        elif isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id == "self" and cls:
            scope, name = cls, f"self.{n.attr}"
        if scope is None:
            continue
        for a in ast.walk(scope):
            if isinstance(a, ast.Assign | ast.AnnAssign) and a.value is not None:
                targets = a.targets if isinstance(a, ast.Assign) else [a.target]
                if any(ast.unparse(t) == name for t in targets):
                    if isinstance(a.value, ast.Constant) and a.value.value is None:
                        continue
                    note = f"{name} = {_text(text, a.value, 120)}"
                    under = next(iter(_conditions(src, a)), None)
                    if under is not None and under[0] is not test:
                        note += f" under {_cond_text(text, under[0], under[1])}"
                    if note not in out:
                        out.append(note)
    return out


class _Ampere:
    """Conditions as a CUDA process on sm_80/86 sees them: True, False, or `_UNKNOWN`.

    Known: constants; `AMPERE_CONSTEXPR`; `current_platform.is_cuda()` (true) and the other platforms (false);
    `has_device_capability(N)` / `is_device_capability(N or (M, m))` for every `AMPERE` capability;
    `is_deep_gemm_supported()` (false: DeepGEMM's arch check); `and` / `or` / `not` / `==` / `in` / `is None`;
    ternaries; a local name or `self.x` whose assignments all give one value; a call of a function of the tree, by
    its early `if ...: return ...` statements and final `return` (arguments bound). Last resort, a call named
    `*_supported(...)` that the tree cannot answer is taken as false (a probe for a kernel of a newer GPU).
    With `contract`, also the `LAUNCH_CONTRACT` values (`dcp_world_size` is 1); `plain` is the same evaluator
    without them, to tell what the GPU decides from what the launch contract decides.
    """

    #: a value known not to be None whose content is not known (an imported function, a tensor)
    SOMETHING = object()

    def __init__(self, src: _Source, contract: bool = True) -> None:
        self.src = src
        #: whether `LAUNCH_CONTRACT` values count
        self.contract = contract
        #: the evaluator without them (made on first use)
        self._plain: _Ampere | None = None if contract else self

    @property
    def plain(self) -> _Ampere:
        """The same evaluator without the launch contract: what the GPU and the platform decide alone."""
        if self._plain is None:
            self._plain = _Ampere(self.src, contract=False)
        return self._plain

    def _contract(self, name: str) -> object:
        """The launch-contract value of `name` (the last part of a dotted name), or `_UNKNOWN`."""
        if not self.contract or name not in LAUNCH_CONTRACT:
            return _UNKNOWN
        return LAUNCH_CONTRACT[name][0]

    def value(self, expr: ast.expr, where: ast.AST, bindings: dict | None = None, depth: int = 0) -> object:
        if depth > 24:
            return _UNKNOWN
        bindings = bindings or {}
        v = lambda e: self.value(e, where, bindings, depth + 1)  # noqa: E731 - the recursion, short
        if isinstance(expr, ast.Constant):
            return expr.value
        if isinstance(expr, ast.Name):
            if expr.id in bindings and (bindings[expr.id] is not _UNKNOWN or self._contract(expr.id) is _UNKNOWN):
                return bindings[expr.id]  # a known argument wins over the contract; an unknown one does not
            if expr.id in AMPERE_CONSTEXPR:
                return AMPERE_CONSTEXPR[expr.id][0]
            if self._contract(expr.id) is not _UNKNOWN:
                return self._contract(expr.id)
            return self._assigned(expr.id, where, depth)
        if isinstance(expr, ast.Attribute):
            if self._contract(expr.attr) is not _UNKNOWN:
                return self._contract(expr.attr)
            if isinstance(expr.value, ast.Name) and expr.value.id == "self":
                return self._assigned(f"self.{expr.attr}", where, depth)
            return _UNKNOWN
        if isinstance(expr, ast.UnaryOp) and isinstance(expr.op, ast.Not):
            x = v(expr.operand)
            return _UNKNOWN if x is _UNKNOWN else not x if x is not self.SOMETHING else False
        if isinstance(expr, ast.BoolOp):
            vals = [v(x) for x in expr.values]
            truth = [_UNKNOWN if x is _UNKNOWN else bool(x) for x in vals]
            if isinstance(expr.op, ast.And):
                return False if False in truth else (_UNKNOWN if _UNKNOWN in truth else True)
            return True if True in truth else (_UNKNOWN if _UNKNOWN in truth else False)
        if isinstance(expr, ast.IfExp):
            t = v(expr.test)
            if t is _UNKNOWN:
                a, b = v(expr.body), v(expr.orelse)
                return a if a is b or (a is not _UNKNOWN and a is not self.SOMETHING and a == b) else _UNKNOWN
            return v(expr.body) if t else v(expr.orelse)
        if isinstance(expr, ast.Compare) and len(expr.ops) == 1:
            left, right, op = v(expr.left), v(expr.comparators[0]), expr.ops[0]
            if isinstance(op, ast.Is | ast.IsNot) and right is None and left is not _UNKNOWN:
                return (left is None) == isinstance(op, ast.Is)
            if _UNKNOWN in (left, right) or self.SOMETHING in (left, right):
                return _UNKNOWN
            return _eval(ast.Compare(ast.Constant(left), [op], [ast.Constant(right)]), {})
        if isinstance(expr, ast.Tuple):
            vals = [v(e) for e in expr.elts]
            return _UNKNOWN if _UNKNOWN in vals else tuple(vals)
        if isinstance(expr, ast.Call):
            return self._call(expr, where, bindings, depth)
        return _UNKNOWN

    def _call(self, call: ast.Call, where: ast.AST, bindings: dict, depth: int) -> object:
        func = ast.unparse(call.func)
        name = func.rsplit(".", 1)[-1]
        platform = _platform_value(call) if func.startswith("current_platform.") else None
        if platform is not None:
            return platform
        if name in ("has_device_capability", "is_device_capability") and call.args:
            want = self.value(call.args[0], where, bindings, depth + 1)
            if isinstance(want, int):
                want = divmod(want, 10)
            if not (isinstance(want, tuple) and len(want) == 2):
                return _UNKNOWN
            answers = {cap >= want if name == "has_device_capability" else cap == want for cap in AMPERE}
            return answers.pop() if len(answers) == 1 else _UNKNOWN
        if name == "is_device_capability_family" and call.args:
            family = self.value(call.args[0], where, bindings, depth + 1)
            if not isinstance(family, int):
                return _UNKNOWN
            answers = {cap[0] == family // 10 for cap in AMPERE}
            return answers.pop() if len(answers) == 1 else _UNKNOWN
        if name == "is_deep_gemm_supported":
            return False
        fn = self._function(name, where)
        if fn is not None:
            got = self.returns(fn, self._bind(fn, call, where, bindings, depth), depth + 1)
            if got[0] is not _UNKNOWN:
                return got[0]
        if name.endswith("_supported"):
            return False
        return _UNKNOWN

    def returns(self, fn: ast.FunctionDef, bindings: dict, depth: int = 0) -> tuple[object, str | None]:
        """What `fn` returns on Ampere by its leading statements (early `if ...: return`, plain assignments, the
        final `return`): (value, the condition of the early return that is certainly taken, or None). An early
        return whose condition is unknown may or may not be taken; the value is known only when all agree."""
        seen: list[object] = []

        def result(value: object, cond: str | None) -> tuple[object, str | None]:
            values = [*seen, value]
            first = values[0]
            same = all(v is first or (v is not _UNKNOWN and v is not self.SOMETHING and v == first) for v in values)
            return (first if same else _UNKNOWN), cond

        for stmt in fn.body:
            if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant):
                continue  # the docstring
            if isinstance(stmt, ast.If) and not stmt.orelse and isinstance(stmt.body[-1], ast.Return):
                taken = self.value(stmt.test, stmt, bindings, depth + 1)
                ret = stmt.body[-1].value
                value = None if ret is None else self.value(ret, stmt, bindings, depth + 1)
                if taken is _UNKNOWN:
                    seen.append(value)
                    continue
                if taken:
                    return result(value, ast.unparse(stmt.test))
                continue
            if isinstance(stmt, ast.Return):
                return result(None if stmt.value is None else self.value(stmt.value, stmt, bindings, depth + 1), None)
            if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name):
                bindings = {**bindings, stmt.targets[0].id: self.value(stmt.value, stmt, bindings, depth + 1)}
                continue
            return _UNKNOWN, None
        return result(None, None)

    def _bind(self, fn: ast.FunctionDef, call: ast.Call, where: ast.AST, bindings: dict, depth: int) -> dict:
        params = [a.arg for a in fn.args.args if a.arg not in ("self", "cls")]
        out = {}
        for p, a in zip(params, call.args, strict=False):
            out[p] = self.value(a, where, bindings, depth + 1)
        for k in call.keywords:
            if k.arg:
                out[k.arg] = self.value(k.value, where, bindings, depth + 1)
        for p in params + [a.arg for a in fn.args.kwonlyargs]:
            out.setdefault(p, _UNKNOWN)
        return out

    def _skipped(self, stmt: ast.AST, depth: int) -> bool:
        """Whether a condition over `stmt` in its function is false on Ampere (the assignment never happens)."""
        for test, negated in _conditions(self.src, stmt):
            value = self.value(test, stmt, None, depth + 1)
            if value is not _UNKNOWN and value is not self.SOMETHING and bool(value) == negated:
                return True
        return False

    def _function(self, name: str, where: ast.AST) -> ast.FunctionDef | None:
        """The function `name` refers to at `where`: defined in the same module, or imported from the tree."""
        path, _ = self.src.file_of(where)
        mod, _ = self.src.module(path)
        for stmt in mod.body:
            if isinstance(stmt, ast.FunctionDef) and stmt.name == name:
                return stmt
        origin = _imports(self.src, path).get(name)
        if origin and origin[1]:
            target = module_path(self.src, origin[0])
            if target is not None:
                for stmt in self.src.module(target)[0].body:
                    if isinstance(stmt, ast.FunctionDef) and stmt.name == origin[1]:
                        return stmt
        return None

    def _assigned(self, name: str, where: ast.AST, depth: int) -> object:
        """The one value every assignment of `name` (local, or `self.x` in the class) gives, else `_UNKNOWN`."""
        if name.startswith("self."):
            scope = _enclosing(self.src, where, ast.ClassDef)
        else:
            scope = _enclosing(self.src, where, (ast.FunctionDef, ast.AsyncFunctionDef))
        if scope is None:
            return _UNKNOWN
        values = []
        for a in ast.walk(scope):
            if isinstance(a, ast.Assign | ast.AnnAssign) and a.value is not None:
                targets = a.targets if isinstance(a, ast.Assign) else [a.target]
                if any(ast.unparse(t) == name for t in targets) and not self._skipped(a, depth):
                    values.append(self.value(a.value, a, None, depth + 1))
        if isinstance(scope, ast.FunctionDef | ast.AsyncFunctionDef) and name in {a.arg for a in scope.args.args}:
            return _UNKNOWN
        if not values:
            path, _ = self.src.file_of(where)
            if _imports(self.src, path).get(name) or self._function(name, where):
                return self.SOMETHING
            return _UNKNOWN
        first = values[0]
        if all(x is first or (x is not _UNKNOWN and x is not self.SOMETHING and x == first) for x in values):
            return first
        return _UNKNOWN


@dataclass(frozen=True)
class _Reach:
    """Whether code runs on Ampere: "off" (a condition over it is false there), "off-contract" (false there only by
    a `LAUNCH_CONTRACT` value), "on", "unknown" (an arch guard the evaluator cannot decide), "off-cuda" (a platform
    condition keeps it off CUDA); the condition that says so."""

    status: str
    guard: str


def _reach(src: _Source, amp: _Ampere, node: ast.AST, stop: ast.AST | None = None) -> _Reach:
    """Whether `node` runs on sm_80/86 by the conditions over it in its function (`_conditions`: the `if`s around it
    and the earlier `if ...: return` of its blocks, the function's own early returns included). A condition the GPU
    and the platform decide wins over one only the launch contract decides ("off-contract")."""
    _, text = src.file_of(node)
    nearest: _Reach | None = None
    by_contract: _Reach | None = None
    for test, negated in _conditions(src, node, stop):
        aliases = _aliases(src, text, node, test)
        whole = " ".join([ast.unparse(test), *aliases])
        shown = _shown(text, test, negated, aliases)
        value = amp.plain.value(test, node)
        if value is not _UNKNOWN and bool(value) == negated:
            arch = any(w in whole for w in ARCH_WORDS)
            return _Reach("off" if arch or "is_cuda" in whole else "off-cuda", shown)
        if value is _UNKNOWN and by_contract is None:
            under = amp.value(test, node)
            if under is not _UNKNOWN and bool(under) == negated:
                by_contract = _Reach("off-contract", _contract_guard(src, text, node, test, whole, shown))
        if nearest is None and any(w in whole for w in GUARD_WORDS):
            unknown = value is _UNKNOWN and any(w in whole for w in ARCH_WORDS)
            nearest = _Reach("unknown" if unknown else "on", shown)
    return by_contract or nearest or _Reach("on", "unguarded")


def _contract_reason(condition: str) -> str:
    """Why the `LAUNCH_CONTRACT` names in `condition` (source text) have their values on Ampere."""
    used = [name for name in LAUNCH_CONTRACT if re.search(rf"\b{name}\b", condition)]
    return "; ".join(dict.fromkeys(LAUNCH_CONTRACT[name][1] for name in used)) or "the Ampere launch contract"


def _contract_guard(src: _Source, text: str, node: ast.AST, test: ast.expr, whole: str, shown: str) -> str:
    """The guard of a condition only the launch contract decides: the contract's reasons, then the condition —
    "`X` returns early" for an earlier `if X: return` (or raise, continue, break), else the condition `node` needs
    (`shown`, aliases included)."""
    reason = _contract_reason(whole)
    owner = src.parents.get(test)
    cur = src.parents.get(node)
    while cur is not None and cur is not owner:
        cur = src.parents.get(cur)
    if isinstance(owner, ast.If) and cur is None:  # an earlier statement, not one around `node`
        exit_ = {ast.Return: "returns early", ast.Raise: "raises"}.get(type(owner.body[-1]), "leaves the block")
        return f"{reason} (`{_text(text, test, 120)}` {exit_})"
    return f"{reason}: runs only where {shown}"


def _cond_text(text: str, test: ast.expr, negated: bool, limit: int = 80) -> str:
    """A condition as it holds: `not X` negated reads `X`."""
    if negated and isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        return _text(text, test.operand, limit)
    return ("not " if negated else "") + _text(text, test, limit)


def _shown(text: str, test: ast.expr, negated: bool, aliases: list[str]) -> str:
    shown = _cond_text(text, test, negated, 120)
    return shown + (" [" + "; ".join(aliases) + "]" if aliases else "")


def _imports(src: _Source, path: str) -> dict[str, tuple[str, str]]:
    """Every name file `path` imports anywhere: local name -> (absolute module, original name)."""
    mod, _ = src.module(path)
    out: dict[str, tuple[str, str]] = {}
    for node in ast.walk(mod):
        if isinstance(node, ast.ImportFrom):
            base = _absolute(path, node)
            for a in node.names:
                out[a.asname or a.name] = (base, a.name)
        elif isinstance(node, ast.Import):
            for a in node.names:
                out[a.asname or a.name.split(".")[0]] = (a.name if a.asname else a.name.split(".")[0], "")
    return out


def _library_kind(module: str, name: str) -> str | None:
    """Which native library a callee imported as `from module import name` belongs to (None: none of them)."""
    if _PROBE.search(name):
        return None
    full = f"{module}.{name}".lower()
    if "deep_gemm" in module:
        return "deep_gemm"
    if "flashmla" in full or "flash_mla" in full:
        return "flash_mla"
    if "flashinfer" in module and "sparse" in full:
        return "flashinfer"
    if "cutedsl" in full or module.split(".")[0] == "cutlass":
        return "cutedsl"
    if "glm52_low_latency_gemm" in full:
        return "glm52_gemm"
    return None


def _is_jit(fn: ast.FunctionDef) -> bool:
    return any(
        re.search(r"(^|\.)jit\b", ast.unparse(d.func if isinstance(d, ast.Call) else d)) for d in fn.decorator_list
    )


def _constexpr_names(mod: ast.Module, fn: ast.FunctionDef) -> set[str]:
    params = fn.args.args + fn.args.kwonlyargs
    names = {a.arg for a in params if a.annotation is not None and "constexpr" in ast.unparse(a.annotation)}
    for stmt in mod.body:
        if isinstance(stmt, ast.Assign | ast.AnnAssign) and stmt.value is not None:
            targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
            annotation = getattr(stmt, "annotation", None)
            if "constexpr" in ast.unparse(stmt.value) or (annotation and "constexpr" in ast.unparse(annotation)):
                names |= {t.id for t in targets if isinstance(t, ast.Name)}
    return names | set(AMPERE_CONSTEXPR)


def _pruned(tests: list[tuple[ast.expr, bool]]) -> str | None:
    """Why a branch under these constexpr conditions is never compiled on sm_8x (an `AMPERE_CONSTEXPR` value makes
    one of them false), or None."""
    env = {name: value for name, (value, _) in AMPERE_CONSTEXPR.items()}
    for test, negated in tests:
        v = _eval(test, env)
        if v is not _UNKNOWN and bool(v) == negated:
            flags = [n.id for n in ast.walk(test) if isinstance(n, ast.Name) and n.id in AMPERE_CONSTEXPR]
            return "; ".join(AMPERE_CONSTEXPR[f][1] for f in flags)
    return None


def _fp8_feature(src: _Source, node: ast.AST) -> str:
    parent = src.parents.get(node)
    if isinstance(parent, ast.Call):
        func = ast.unparse(parent.func)
        if func.endswith(".to") or func == "to":
            bitcast = any(k.arg == "bitcast" and ast.unparse(k.value) == "True" for k in parent.keywords)
            return "fp8e4nv bitcast" if bitcast else "fp8e4nv conversion"
        if "pointer_type" in func:
            return "fp8e4nv pointer"
    return "fp8e4nv dtype"


def _jit_uses(
    src: _Source, path: str, fn: ast.FunctionDef, params: frozenset[str] = frozenset(), depth: int = 0
) -> tuple[list[TritonUse], list[tuple[str, list]]]:
    """The arch-limited features used directly in jit function `fn`, and its calls (callee, conditions) for
    following helpers. `tl.float8e4nv` passed as an argument to a jit function of the tree counts where that
    function uses the parameter (e.g. `to_e4m3fn(x, tl.float8e4nv)` converts only where SOFTWARE_E4M3 is false).
    With `params`, only the uses of those parameter names are collected (the callee side of that)."""
    mod, text = src.module(path)
    constexpr = _constexpr_names(mod, fn)
    uses: list[TritonUse] = []
    calls: list[tuple[str, list]] = []

    def cond_stack(node):
        tests = [
            (t, neg)
            for t, neg in _conditions(src, node, stop=fn, exits=False)  # Triton traces past an early return
            if {n.id for n in ast.walk(t) if isinstance(n, ast.Name)} & constexpr
        ]
        return tests

    # `fp8_dtype = tl.float8e4b8 if USE_FNUZ else tl.float8e4nv`: the name is what gets converted to, so its uses
    # count (where they are), not the definition
    aliases: set[str] = set(params)
    definitions: set[int] = set()
    for node in ast.walk(fn):
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            value_nodes = list(ast.walk(node.value))
            is_dtype = not any(isinstance(n, ast.Call) for n in value_nodes)  # a dtype choice, not a converted value
            if is_dtype and any(isinstance(n, ast.Attribute) and n.attr == "float8e4nv" for n in value_nodes):
                aliases.add(node.targets[0].id)
                definitions |= {id(n) for n in ast.walk(node.value)}
    for node in ast.walk(fn):
        feature = None
        if id(node) in definitions:
            continue
        if isinstance(node, ast.Name) and node.id in aliases and isinstance(node.ctx, ast.Load):
            feature = _fp8_feature(src, node)
        elif params:
            pass
        elif isinstance(node, ast.Attribute) and node.attr == "float8e4nv":
            feature = _fp8_feature(src, node)
        elif isinstance(node, ast.Name) and node.id == "float8e4nv":
            feature = _fp8_feature(src, node)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and "fp8e4nv" in node.value:
            feature = "fp8e4nv dtype"
        elif isinstance(node, ast.Attribute | ast.Name):
            name = node.attr if isinstance(node, ast.Attribute) else node.id
            feature = next((what for pat, what in _TRITON_FEATURES if name == pat), None)
        if feature and feature == "fp8e4nv dtype" and depth < 4:
            passed = _passed_to_jit(src, path, node)
            if passed is not None:
                callee_path, callee, param = passed
                tests = cond_stack(node)
                inner, _ = _jit_uses(src, callee_path, callee, frozenset({param}), depth + 1)
                prefix = tuple(_cond_text(text, t, neg) for t, neg in reversed(tests))
                for u in inner:
                    uses.append(
                        TritonUse(
                            u.feature, u.line, prefix + u.constexpr, u.via or callee.name, _pruned(tests) or u.pruned
                        )
                    )
                continue
        if feature:
            tests = cond_stack(node)
            uses.append(
                TritonUse(
                    feature,
                    node.lineno,
                    tuple(_cond_text(text, t, neg) for t, neg in reversed(tests)),
                    pruned=_pruned(tests),
                )
            )
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            calls.append((node.func.id, cond_stack(node)))
    return uses, calls


def _passed_to_jit(src: _Source, path: str, node: ast.AST) -> tuple[str, ast.FunctionDef, str] | None:
    """When `node` is an argument of a call to a jit function of the tree: (its path, the function, the parameter)."""
    call = src.parents.get(node)
    if isinstance(call, ast.keyword):
        kw, call = call, src.parents.get(call)
    else:
        kw = None
    if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Name)):
        return None
    callee = _Ampere(src)._function(call.func.id, call)
    if callee is None or not _is_jit(callee):
        return None
    params = [a.arg for a in callee.args.args]
    if kw is not None:
        param = kw.arg
    elif node in call.args and call.args.index(node) < len(params):
        param = params[call.args.index(node)]
    else:
        return None
    cur = callee
    while not isinstance(cur, ast.Module):
        cur = src.parents[cur]
    return src.path_of[id(cur)], callee, param


def _launchers(src: _Source, modules: list[str], name: str, kernel: bool) -> list[tuple[str, ast.AST]]:
    """Where `name` is launched (`name[grid](...)`, kernel=True) or called (`name(...)`, `x.name(...)`)."""
    out = []
    for path in modules:
        mod, _ = src.module(path)
        for node in ast.walk(mod):
            if not isinstance(node, ast.Call):
                continue
            f = node.func
            if kernel and isinstance(f, ast.Subscript):
                f = f.value
                if isinstance(f, ast.Call) and any(isinstance(a, ast.Name) and a.id == name for a in f.args):
                    f = f.args[0] if isinstance(f.args[0], ast.Name) else f  # a wrapper: fp8_args_as_uint8(k)[grid]
            elif kernel:
                continue
            if (isinstance(f, ast.Name) and f.id == name) or (isinstance(f, ast.Attribute) and f.attr == name):
                out.append((path, node))
    return out


def _reach_through_callers(
    src: _Source, amp: _Ampere, modules: list[str], sites: list[tuple[str, ast.AST]], depth: int = 0, seen=None
) -> _Reach:
    """Whether code reached from `sites` (launches or calls) runs on Ampere: every site off (by its own conditions,
    or, for a site that is on, by the callers of its function, up to three levels) -> off ("off-contract" when some
    site is off only by the launch contract); any site on -> on."""
    seen = set() if seen is None else seen
    if not sites:
        return _Reach("on", "not launched in the closure")
    guards, unknown, by_contract = [], None, False
    for _, call in sites:
        r = _reach(src, amp, call)
        if r.status == "off-cuda":
            continue
        if r.status in ("off", "off-contract"):
            guards.append(r.guard)
            by_contract |= r.status == "off-contract"
            continue
        if r.status == "unknown":
            unknown = unknown or r
            continue
        fn = _enclosing(src, call, (ast.FunctionDef, ast.AsyncFunctionDef))
        if fn is None or fn.name in seen or _is_jit(fn) or depth >= 3:
            return r
        seen.add(fn.name)
        up = _reach_through_callers(src, amp, modules, _launchers(src, modules, fn.name, False), depth + 1, seen)
        if up.status not in ("off", "off-contract"):
            return up if up.status == "unknown" else r
        guards.append(f"{fn.name}() called only where {up.guard}")
        by_contract |= up.status == "off-contract"
    if unknown is not None:
        return unknown
    if not guards:
        return _Reach("off-cuda", "every launch is off CUDA")
    return _Reach("off-contract" if by_contract else "off", "; ".join(dict.fromkeys(guards)))


def scan_blockers(tree: FileTree, modules: list[str]) -> list[Blocker]:
    """Every blocker in `modules` (module docstring): jit functions with arch-limited Triton features (directly or
    through jit helpers), and calls into DeepGEMM, FlashMLA, FlashInfer sparse, CuTeDSL/CUTLASS, the GLM-5.2 GEMM
    and fp8 torch ops, each with its guard. In file and line order."""
    src = _source(tree)
    amp = _Ampere(src)
    out: list[Blocker] = []
    for path in modules:
        mod, text = src.module(path)
        jits = {
            n.name: n
            for n in ast.walk(mod)
            if isinstance(n, ast.FunctionDef) and _is_jit(n) and _enclosing(src, n, ast.ClassDef) is None
        }
        direct = {name: _jit_uses(src, path, fn) for name, fn in jits.items()}
        callers: dict[str, list[str]] = {}
        for name, (_, calls) in direct.items():
            for callee, _ in calls:
                if callee in jits and callee != name:
                    callers.setdefault(callee, []).append(name)

        for name, fn in jits.items():
            uses = _transitive_uses(direct, text, name)
            if not uses:
                continue
            features = ", ".join(dict.fromkeys(u.feature for u in uses))
            launches = _launchers(src, modules, name, kernel=True)
            helper = name in callers and not launches
            reach = _Reach("on", "jit helper") if helper else _reach_through_callers(src, amp, modules, launches)
            if reach.status == "off-cuda":
                continue
            out.append(
                Blocker(
                    kind="triton",
                    path=path,
                    function=name,
                    line=fn.lineno,
                    what=features,
                    guard=reach.guard,
                    reach=reach.status,
                    uses=uses,
                    called_from=tuple(sorted(callers.get(name, []))) if helper else (),
                )
            )
        if not _library_kind(_dotted_of(path), "entry"):  # a library's own module: its callers are the blockers
            out += _native_calls(src, amp, modules, path, mod, jits)
    return out


def _transitive_uses(direct: dict, text: str, name: str, depth: int = 0) -> list[TritonUse]:
    """The uses of jit function `name` and of the same-module jit helpers it calls (conditions of the call prefixed;
    pruned when the call or the use is)."""
    uses, calls = direct[name]
    got = list(uses)
    if depth > 4:
        return got
    for callee, tests in calls:
        if callee in direct and callee != name:
            pruned = _pruned(tests)
            conds = tuple(_cond_text(text, t, n) for t, n in reversed(tests))
            for u in _transitive_uses(direct, text, callee, depth + 1):
                got.append(TritonUse(u.feature, u.line, conds + u.constexpr, u.via or callee, pruned or u.pruned))
    return got


def _native_calls(
    src: _Source, amp: _Ampere, modules: list[str], path: str, mod: ast.Module, jits: dict
) -> list[Blocker]:
    """The calls into native libraries in module `path` (outside its jit functions), each with whether it runs on
    sm_8x: by the conditions over it (its function's own early returns included), by an early return of the callee
    (a wrapper in the tree that gates itself), or by the callers of its function; each by the GPU first, then by
    the launch contract ("off-contract")."""
    imports = _imports(src, path)
    out: list[Blocker] = []
    seen: set[tuple] = set()
    for node in ast.walk(mod):
        if not isinstance(node, ast.Call):
            continue
        if _enclosing(src, node, ast.FunctionDef) in jits.values():
            continue
        f = node.func
        kind, what = None, None
        if isinstance(f, ast.Name):
            name = f.id
            origin = imports.get(name)
            if origin is None:
                origin = _local_alias(src, node, name, imports)
            if origin is not None:
                kind = _library_kind(*origin)
                what = origin[1] or name
        elif isinstance(f, ast.Attribute):
            dotted = ast.unparse(f)
            if dotted.startswith("torch.ops.") and _TORCH_OP.search(f.attr):
                kind, what = "torch_op", dotted
            elif isinstance(f.value, ast.Name) and f.value.id in imports:
                origin = imports[f.value.id]
                full = origin[0] + (f".{origin[1]}" if origin[1] else "")
                kind = _library_kind(full, f.attr)
                what = f"{f.value.id}.{f.attr}"
        if kind is None:
            continue
        function = _qualname(src, node)
        key = (function, what, node.lineno)
        if key in seen:
            continue
        seen.add(key)
        reach = _reach(src, amp, node)
        callee = amp._function(f.id, node) if isinstance(f, ast.Name) else None
        if callee is not None and _is_probe(callee):
            continue
        if reach.status == "on" and callee is not None:
            for evaluator, status in ((amp.plain, "off"), (amp, "off-contract")):
                _, early = evaluator.returns(callee, evaluator._bind(callee, node, node, {}, 0))
                if early is not None:
                    why = f" ({_contract_reason(early)})" if status == "off-contract" else ""
                    reach = _Reach(status, f"{f.id}() returns early: {early}{why}")
                    break
        if reach.status == "on":
            fn = _enclosing(src, node, (ast.FunctionDef, ast.AsyncFunctionDef))
            if fn is not None and not fn.name.startswith("__"):
                up = _reach_through_callers(src, amp, modules, _launchers(src, modules, fn.name, False))
                if up.status in ("off", "off-contract", "unknown") and up.guard != "not launched in the closure":
                    reach = _Reach(up.status, f"{fn.name}() called only where {up.guard}")
        if reach.status == "off-cuda":
            continue
        out.append(Blocker(kind, path, function, node.lineno, what, reach.guard, reach.status))
    # the same callee twice in one function: number them so stock and composed pair up in order
    counts: dict[tuple, int] = {}
    for b in out:
        k = (b.function, b.what)
        counts[k] = counts.get(k, 0) + 1
        if counts[k] > 1:
            b.what = f"{b.what} #{counts[k]}"
    return out


def _is_probe(fn: ast.FunctionDef) -> bool:
    """A library function of the tree that only answers a question (its body, docstring aside, is one `return` of
    an expression that calls no other function of the library): not a kernel."""
    body = [s for s in fn.body if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))]
    if len(body) != 1 or not isinstance(body[0], ast.Return) or body[0].value is None:
        return False
    called = {ast.unparse(c.func).rsplit(".", 1)[-1] for c in ast.walk(body[0]) if isinstance(c, ast.Call)}
    return all(_PROBE.search(n) or n.startswith("_is") for n in called)


def _local_alias(src: _Source, node: ast.AST, name: str, imports: dict) -> tuple[str, str] | None:
    """`kernel = fused_q_cutedsl` earlier in the same function: the import `name` stands for."""
    fn = _enclosing(src, node, (ast.FunctionDef, ast.AsyncFunctionDef))
    if fn is None:
        return None
    for a in ast.walk(fn):
        if isinstance(a, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in a.targets):
            if isinstance(a.value, ast.Name) and a.value.id in imports:
                return imports[a.value.id]
    return None


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
    return TreePath(models, drafts, backends, modules, blockers, _source(tree))


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
    imports = _imports(src, blocker.path)
    fallbacks = {n for n, (m, _) in imports.items() if m.endswith("mqa_logits_triton")}
    for node in ast.walk(mod):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name == blocker.function.split(".")[-1]:
            calls = {c.func.id for c in ast.walk(node) if isinstance(c, ast.Call) and isinstance(c.func, ast.Name)}
            if calls & fallbacks:
                return True
    return False


def ampere_path(composed: FileTree, stock: FileTree, tag: str) -> AmperePath:
    """The DSA path of release `tag`: both trees read, the composed tree's blockers classified against the stock
    tree's (`classify`), and the stock-only blockers recorded as removed by the compose."""
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
    from .topk_relay import topk_crossing

    return AmperePath(tag, composed_path, stock_path, classified, topk_crossing(composed), topk_crossing(stock))


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
