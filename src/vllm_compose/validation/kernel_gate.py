"""The Ampere compile gate: compile recorded Triton kernel launches for sm_80 / sm_86 without a GPU.

An H200 cannot run sm_80 code, but Triton compiles for any target on a CPU-only machine. The validation run on the
device (device/sitecustomize) records every Triton compilation of a run that took vLLM's sm_80 code paths: the
kernel's module and name and Triton's own specialization record (signature, constexpr values, pointer alignment
attributes, launch options). `kernels/*.json` keeps those records; this module compiles each of them again from a
given vLLM source tree for `GPUTarget("cuda", 80, 32)` and `("cuda", 86, 32)`.

Kernels are loaded from the tree without importing vLLM (which needs torch, pydantic, ...): the kernel's module is
executed statement by statement in a fresh namespace, statements that fail (imports of absent packages, platform
probes) are skipped, `vllm.triton_utils` is replaced by the real `triton` / `triton.language`, and names a kernel
uses that came from other vLLM modules are resolved by loading those modules the same way. Only `triton` is needed.
"""

from __future__ import annotations

import ast
import json
import sys
import types
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import ComposeError

#: the targets every recorded kernel must compile for: (compute capability, warp size)
AMPERE_TARGETS: tuple[tuple[int, int], ...] = ((80, 32), (86, 32))

#: launch options carried from the record into the sm_8x compile; the rest (fp8 dtype lists, PTX version) belong to
#: the recording GPU and are re-derived by Triton for the target.
_PORTABLE_OPTIONS = ("num_warps", "num_ctas", "num_stages", "enable_fp_fusion", "launch_cooperative_grid", "maxnreg")


class KernelGateError(ComposeError):
    """A kernel record could not be read or its kernel could not be loaded from the tree."""


@dataclass
class GateResult:
    """The outcome of compiling one recorded kernel for one target."""

    module: str
    qualname: str
    target: int
    ok: bool
    error: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "module": self.module,
            "qualname": self.qualname,
            "target": f"sm_{self.target}",
            "ok": self.ok,
            "error": self.error,
        }


@dataclass
class _TolerantLoader:
    """Executes vLLM modules from a source tree without importing vLLM; see the module docstring."""

    tree: Path
    modules: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: per module: name -> (source module, attribute) for `from vllm.x import y` bindings not executed yet
    pending: dict[str, dict[str, tuple[str, str]]] = field(default_factory=dict)

    def module_file(self, name: str) -> Path:
        base = self.tree.joinpath(*name.split("."))
        for candidate in (base.with_suffix(".py"), base / "__init__.py"):
            if candidate.is_file():
                return candidate
        raise KernelGateError(
            f"module {name} not found in the tree",
            file=str(base),
            hint="record and gate kernels against the same vLLM tree",
        )

    def namespace(self, name: str) -> dict[str, Any]:
        if name in self.modules:
            return self.modules[name]
        if name == "vllm.triton_utils":
            import triton
            import triton.language as tl

            try:
                import triton.language.extra.libdevice as tldevice
            except ImportError:  # older Triton
                tldevice = None
            ns = {
                "triton": triton,
                "tl": tl,
                "tldevice": tldevice,
                "HAS_TRITON": True,
                "LOG2E": 1.4426950408889634,
                "LOGE2": 0.6931471805599453,
            }
            self.modules[name] = ns
            return ns
        path = self.module_file(name)
        ns: dict[str, Any] = {"__name__": name, "__file__": str(path), "__builtins__": __builtins__}
        self.modules[name] = ns
        self.pending[name] = {}
        tree = ast.parse(path.read_text(), filename=str(path))
        for stmt in tree.body:
            if isinstance(stmt, ast.ImportFrom) and stmt.module == "vllm.triton_utils":
                stub = self.namespace("vllm.triton_utils")  # decorators need `triton` while the module executes
                for alias in stmt.names:
                    if alias.name in stub:
                        ns[alias.asname or alias.name] = stub[alias.name]
                continue
            if isinstance(stmt, ast.ImportFrom) and stmt.module and stmt.module.startswith("vllm") and stmt.level == 0:
                for alias in stmt.names:
                    self.pending[name][alias.asname or alias.name] = (stmt.module, alias.name)
                continue
            if isinstance(stmt, ast.Import) and any(a.name.startswith("vllm") for a in stmt.names):
                continue
            code = compile(ast.Module(body=[stmt], type_ignores=[]), str(path), "exec")
            try:
                exec(code, ns)
            except BaseException:  # absent packages, platform probes: not needed to compile a kernel
                continue
        return ns

    def resolve(self, module: str, names: set[str]) -> None:
        """Bind `names` in `module`'s namespace from the vLLM modules they were imported from."""
        ns = self.namespace(module)
        for n in names:
            if n in ns or n not in self.pending.get(module, {}):
                continue
            src_mod, attr = self.pending[module][n]
            try:
                src_ns = self.namespace(src_mod)
            except KernelGateError:
                # `from vllm.pkg import submodule`
                try:
                    self.namespace(f"{src_mod}.{attr}")
                    ns[n] = types.SimpleNamespace(**{k: v for k, v in self.modules[f"{src_mod}.{attr}"].items()})
                except KernelGateError:
                    pass
                continue
            self.resolve(src_mod, {attr})
            if attr in src_ns:
                ns[n] = src_ns[attr]
                value = src_ns[attr]
                fn = _unwrap(value)
                if fn is not None:
                    self.resolve_kernel_globals(src_mod, fn)

    def resolve_kernel_globals(self, module: str, jit_fn) -> None:
        names = {node.id for node in ast.walk(ast.parse(_dedent(jit_fn.src))) if isinstance(node, ast.Name)}
        self.resolve(module, names)
        for n in names:
            dep = _unwrap(self.modules[module].get(n))
            if dep is not None and dep is not jit_fn:
                self.resolve_kernel_globals(module, dep)

    def kernel(self, module: str, qualname: str):
        ns = self.namespace(module)
        fn = _unwrap(ns.get(qualname))
        if fn is None:
            self.resolve(module, {qualname})
            fn = _unwrap(ns.get(qualname))
        if fn is None:
            raise KernelGateError(
                f"kernel {qualname} not defined in {module} of the tree",
                key=qualname,
                hint="the tree differs from the one the record was made from",
            )
        self.resolve_kernel_globals(module, fn)
        return fn


def _dedent(src: str) -> str:
    import textwrap

    return textwrap.dedent(src)


def _unwrap(obj):
    """The JITFunction inside an autotune / heuristics wrapper, or None for anything else."""
    from triton.runtime.jit import JITFunction

    for _ in range(4):
        if isinstance(obj, JITFunction):
            return obj
        obj = getattr(obj, "fn", None)
        if obj is None:
            return None
    return None


def _ast_source(fn, spec: dict[str, Any]):
    import triton.language as tl
    from triton.compiler import ASTSource

    constexprs = {}
    for key, value in zip(spec["constant_keys"], spec["constant_vals"], strict=True):
        # decoded as Triton's own JITFunction.preload decodes its specialization records
        if isinstance(value, str) and tl.dtype.is_dtype(value):
            value = tl.dtype(value)
        elif isinstance(value, dict) and "constexpr" in value:
            value = tl.constexpr(value["constexpr"])
        constexprs[tuple(key)] = value
    attrs = {tuple(k): v for k, v in zip(spec["attrs_keys"], spec["attrs_vals"], strict=True)}
    signature = {k: tuple(v) if isinstance(v, list) else v for k, v in spec["signature"].items()}
    return ASTSource(fn, signature, constexprs, attrs)


def load_records(path: Path) -> list[dict[str, Any]]:
    """The kernel records of one `kernels/*.json` file."""
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError) as exc:
        raise KernelGateError(
            f"cannot read kernel records: {exc}",
            file=str(path),
            hint="re-create the file with device/collect.py and scripts in kernels/",
        ) from exc
    return data["kernels"]


def run_gate(
    records: list[dict[str, Any]], tree: Path, targets: tuple[tuple[int, int], ...] = AMPERE_TARGETS
) -> list[GateResult]:
    """Compile every record for every target from the vLLM source tree `tree` (the folder holding `vllm/`)."""
    from triton.backends.compiler import GPUTarget
    from triton.compiler import compile as triton_compile

    loader = _TolerantLoader(Path(tree))
    sys.setrecursionlimit(max(sys.getrecursionlimit(), 5000))
    results = []
    for rec in records:
        spec = rec["specialization"]
        for cc, warp in targets:
            try:
                fn = loader.kernel(rec["module"], rec["qualname"])
                options = {k: spec["options"][k] for k in _PORTABLE_OPTIONS if k in spec["options"]}
                triton_compile(_ast_source(fn, spec), target=GPUTarget("cuda", cc, warp), options=options)
                results.append(GateResult(rec["module"], rec["qualname"], cc, True))
            except Exception as exc:  # every failure is a gate finding, reported per kernel
                lines = [ln.strip() for ln in f"{type(exc).__name__}: {exc}".splitlines() if ln.strip()]
                reason = next((ln for ln in lines if "not supported" in ln), lines[0] if lines else "")
                results.append(GateResult(rec["module"], rec["qualname"], cc, False, reason))
    return results
