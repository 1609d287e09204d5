"""The Ampere compile gate: compile recorded Triton kernel launches for sm_80 / sm_86 without a GPU.

An H200 cannot run sm_80 code, but Triton compiles for any target on a CPU-only machine. The validation run on the
device (lab/device/sitecustomize) records every Triton compilation of a run that took vLLM's sm_80 code paths: the
kernel's module and name and Triton's own specialization record (signature, constexpr values, pointer alignment
attributes, launch options). `lab/recordings/*.json` keep those records; this module compiles each again from a
given vLLM source tree for `GPUTarget("cuda", 80, 32)` and `("cuda", 86, 32)`.

Kernels are loaded from the tree without importing vLLM (which needs torch, pydantic, ...): the kernel's module is
executed statement by statement in a fresh namespace, statements that fail (imports of absent packages, platform
probes) are skipped, `vllm.triton_utils` is replaced by the real `triton` / `triton.language`, and names a kernel
uses that came from other vLLM modules are resolved by loading those modules the same way. Only `triton` is needed.
"""

from __future__ import annotations
import __future__

import ast
import collections
import json
import sys
import types
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import ComposeError
from .facts import COMPILE_TARGETS

#: times a module-level statement is retried after binding a name it lacked (executing Python only)
_RETRIES = 8

#: packages vLLM imports that the standard library stands in for when they are absent (executing Python only)
_STDLIB_STAND_INS = {"regex": "re"}

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
class ReleaseLoader:
    """The release loader of the gates: executes vLLM modules from a source tree without importing vLLM (see the
    module docstring); `kernel_launches.release_loader` makes the one that executes the release's Python."""

    tree: Path
    modules: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: per module: name -> (source module, attribute) for `from vllm.x import y` bindings not executed yet
    pending: dict[str, dict[str, tuple[str, str]]] = field(default_factory=dict)
    #: (source module, attribute) -> value bound the moment a module imports it, before its next statement runs
    #: (kernel_launches binds `vllm.platforms.current_platform` to a fake platform so that module-level probes
    #: evaluate as on the GPU being gated); empty for the compile gate, which executes no Python of vLLM
    bindings: dict[tuple[str, str], Any] = field(default_factory=dict)
    #: exceptions a module-level statement may not swallow (a platform probe the fake platform does not know must
    #: stop the derivation, not silently take a branch)
    strict: tuple[type[BaseException], ...] = ()
    #: run vLLM's Python, not only its kernels: names a function reads are resolved when it reads them, and
    #: `import vllm...` inside a function body loads the module through this loader (see `_ModuleNamespace`)
    executes_python: bool = False
    #: names this loader put into sys.modules (executing Python only), removed by `close()`
    registered: list[str] = field(default_factory=list)

    def close(self) -> None:
        """Remove the modules this loader registered in sys.modules."""
        for name in self.registered:
            if isinstance(sys.modules.get(name), _ModuleEntry):
                del sys.modules[name]
        self.registered.clear()

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
        ns = _ModuleNamespace(self if self.executes_python else None, name)
        ns.update({"__name__": name, "__file__": str(path), "__builtins__": self._builtins()})
        self.modules[name] = ns
        if self.executes_python and name not in sys.modules:
            # dataclasses look string annotations up in sys.modules[cls.__module__]; `close()` removes these
            sys.modules[name] = _ModuleEntry(ns)
            self.registered.append(name)
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
                    if (stmt.module, alias.name) in self.bindings:
                        ns[alias.asname or alias.name] = self.bindings[(stmt.module, alias.name)]
                    else:
                        self.pending[name][alias.asname or alias.name] = (stmt.module, alias.name)
                continue
            if isinstance(stmt, ast.Import) and any(a.name.startswith("vllm") for a in stmt.names):
                if self.executes_python:  # `import vllm.envs as envs`: a view the functions read through
                    for a in stmt.names:
                        ns[a.asname or a.name.split(".")[0]] = _ModuleView(self, a.name if a.asname else "vllm")
                continue
            # executing Python, annotations stay strings (PEP 563) so that a signature naming an unloaded vLLM
            # type (`vllm_config: VllmConfig`) does not stop a class from being defined; Triton reads
            # `tl.constexpr` from either form
            flags = __future__.annotations.compiler_flag if self.executes_python else 0
            code = compile(ast.Module(body=[stmt], type_ignores=[]), str(path), "exec", flags=flags)
            for _ in range(_RETRIES if self.executes_python else 1):
                try:
                    exec(code, ns)
                except self.strict:
                    raise
                except NameError as exc:
                    # executing Python: a class whose base (or a value whose input) another vLLM module defines
                    if exc.name in self.pending[name] and exc.name not in ns:
                        try:
                            self.resolve(name, {exc.name})
                        except self.strict:
                            raise
                        except BaseException:  # the other module does not load either: skip, as below
                            break
                        if exc.name in ns:
                            continue
                    break
                except BaseException:  # absent packages, platform probes: not needed to compile a kernel
                    break
                break
        ns.loaded = True
        return ns

    def _builtins(self):
        """The builtins of a loaded module: Python's, with `__import__` sending `vllm...` to this loader when it
        executes vLLM's Python (function bodies import lazily: `from vllm.x import y` inside `fused_q`)."""
        import builtins

        if not self.executes_python:
            return builtins
        real_import = builtins.__import__

        def vllm_import(name, globals=None, locals=None, fromlist=(), level=0):
            if level == 0 and (name == "vllm" or name.startswith("vllm.")):
                target = name if fromlist else "vllm"
                return _ModuleView(self, target)
            try:
                return real_import(name, globals, locals, fromlist, level)
            except ImportError:
                if name in _STDLIB_STAND_INS:  # `import regex as re` where only the standard library's is here
                    return real_import(_STDLIB_STAND_INS[name], globals, locals, fromlist, level)
                raise

        return {**vars(builtins), "__import__": vllm_import}

    def value(self, module: str, name: str):
        """`module`'s binding `name` (resolved from the module it was imported from when needed), or raise."""
        ns = self.namespace(module)
        if name not in ns:
            self.resolve(module, {name})
        if name not in ns:
            raise KernelGateError(
                f"{name} is not defined in {module} of the tree (or its definition failed to execute)",
                file=str(self.module_file(module)),
                key=name,
                hint="the release moved or renamed it: update the driver in kernel_launches.py",
            )
        return ns[name]

    def resolve(self, module: str, names: set[str]) -> None:
        """Bind `names` in `module`'s namespace from the vLLM modules they were imported from."""
        ns = self.namespace(module)
        for n in names:
            if n in ns or n not in self.pending.get(module, {}):
                continue
            src_mod, attr = self.pending[module][n]
            try:
                src_ns = self.namespace(src_mod)
            except self.strict:
                raise
            except KernelGateError:
                # `from vllm.pkg import submodule`
                try:
                    self.namespace(f"{src_mod}.{attr}")
                    ns[n] = types.SimpleNamespace(**{k: v for k, v in self.modules[f"{src_mod}.{attr}"].items()})
                except self.strict:
                    raise
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
            elif self.executes_python and self._is_module(f"{src_mod}.{attr}"):
                # `from vllm import envs`: the package's `__init__` loads but binds no such name, as Python's
                # import system binds the submodule (a view: `vllm.envs` answers through its `__getattr__`)
                ns[n] = _ModuleView(self, f"{src_mod}.{attr}")

    def _is_module(self, name: str) -> bool:
        try:
            self.module_file(name)
        except KernelGateError:
            return False
        return True

    def resolve_kernel_globals(self, module: str, jit_fn) -> None:
        names = {node.id for node in ast.walk(ast.parse(_dedent(jit_fn.src))) if isinstance(node, ast.Name)}
        self.resolve(module, names)
        for n in names:
            dep = _unwrap(self.modules[module].get(n))
            if dep is not None and dep is not jit_fn:
                self.resolve_kernel_globals(module, dep)

    def kernel(self, module: str, qualname: str):
        ns = self.namespace(module)
        head, *rest = qualname.split(".")  # a kernel defined in a class: `Owner.kernel`
        if head not in ns:
            self.resolve(module, {head})
        obj = ns.get(head)
        for part in rest:
            obj = getattr(obj, part, None)
        fn = _unwrap(obj)
        if fn is None:
            raise KernelGateError(
                f"kernel {qualname} not defined in {module} of the tree",
                key=qualname,
                hint="the tree differs from the one the record was made from",
            )
        self.resolve_kernel_globals(module, fn)
        return fn


class _ModuleNamespace(dict):
    """The globals of one loaded module. When the loader executes vLLM's Python, a name a function reads that came
    from another vLLM module is loaded when first read (Python looks globals up through `__missing__` for a dict
    subclass): a wrapper's names resolve as its own imports say, without walking its body. Module-level statements
    run before `loaded` is set and see only what is bound, as in the compile gate."""

    def __init__(self, loader: ReleaseLoader | None, name: str) -> None:
        super().__init__()
        self.loader = loader
        self.module = name
        self.loaded = False

    def __missing__(self, key):
        if self.loaded and self.loader is not None and key in self.loader.pending.get(self.module, {}):
            self.loader.resolve(self.module, {key})
            if dict.__contains__(self, key):
                return dict.__getitem__(self, key)
        raise KeyError(key)


class _ModuleEntry:
    """A loaded module's stand-in in sys.modules: its `__dict__` is the loader's namespace."""

    def __init__(self, ns: dict) -> None:
        self.__dict__ = ns


class _ModuleView:
    """`vllm.x.y` as an `import` statement inside a loaded function sees it: attributes come from the loader."""

    def __init__(self, loader: ReleaseLoader, name: str) -> None:
        self._loader = loader
        self._name = name

    def __getattr__(self, attr: str):
        if (self._name, attr) in self._loader.bindings:
            return self._loader.bindings[(self._name, attr)]
        try:
            return self._loader.value(self._name, attr)
        except self._loader.strict:
            raise
        except KernelGateError:
            pass
        module_getattr = self._loader.modules.get(self._name, {}).get("__getattr__")
        if callable(module_getattr):  # a module-level __getattr__ (vllm.envs)
            return module_getattr(attr)
        try:
            self._loader.module_file(f"{self._name}.{attr}")
        except self._loader.strict:
            raise
        except KernelGateError:
            raise AttributeError(f"module {self._name} of the tree has no attribute {attr}") from None
        return _ModuleView(self._loader, f"{self._name}.{attr}")


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


def stale_record(fn, spec: dict[str, Any]) -> str | None:
    """Why a recorded specialization does not fit the tree's kernel `fn` (its parameters changed since the recording,
    e.g. a series entry rewrote the kernel), or None when the parameter names agree."""
    recorded = list(spec["signature"])
    current = list(fn.arg_names)
    if recorded == current:
        return None
    gone = [a for a in recorded if a not in current]
    new = [a for a in current if a not in recorded]
    what = ", ".join(
        part
        for part in (
            f"the record has {gone} the tree's kernel lacks" if gone else "",
            f"the tree's kernel takes {new} the record lacks" if new else "",
        )
        if part
    )
    return (
        f"stale record: the kernel's parameters changed since the recording ({what or 'their order differs'}); "
        "re-record it on a GPU (lab/device/collect.py, lab/recordings/make_records.py) or carry it over with "
        "lab/recordings/migrate.py"
    )


def migrate_specialization(fn, spec: dict[str, Any], values: dict[str, Any]) -> dict[str, Any]:
    """A recorded specialization carried over to the kernel `fn` of a tree whose parameters changed: each parameter
    the record has keeps its recorded type, constexpr value and attributes; a parameter it lacks must be a constexpr
    of `fn` given in `values`; parameters `fn` no longer takes are dropped. Raises KernelGateError when a new
    parameter is not a constexpr or has no value, or when `values` names a parameter `fn` does not take."""
    names = list(fn.arg_names)
    constexpr = {names[i] for i in fn.constexprs}
    unknown = sorted(set(values) - set(names))
    if unknown:
        raise KernelGateError(
            f"values given for {unknown}, which the tree's kernel {fn.__name__} does not take",
            key=fn.__name__,
            hint=f"its parameters are {names}",
        )
    old_index = {a: i for i, a in enumerate(spec["signature"])}
    const = {tuple(k)[0]: v for k, v in zip(spec["constant_keys"], spec["constant_vals"], strict=True)}
    attrs = {tuple(k)[0]: v for k, v in zip(spec["attrs_keys"], spec["attrs_vals"], strict=True)}
    out = {**spec, "signature": {}, "constant_keys": [], "constant_vals": [], "attrs_keys": [], "attrs_vals": []}
    out.pop("key", None)  # Triton's cache key of the old signature; the gate does not read it
    for i, name in enumerate(names):
        if name in old_index and name not in values:
            j = old_index[name]
            out["signature"][name] = spec["signature"][name]
            if j in const:
                out["constant_keys"].append([i])
                out["constant_vals"].append(const[j])
            if j in attrs:
                out["attrs_keys"].append([i])
                out["attrs_vals"].append(attrs[j])
        elif name in values:
            if name not in constexpr:
                raise KernelGateError(
                    f"{name} of {fn.__name__} is not a constexpr: a value alone cannot specialize it",
                    key=name,
                    hint="re-record the kernel on a GPU",
                )
            out["signature"][name] = "constexpr"
            out["constant_keys"].append([i])
            out["constant_vals"].append(values[name])
        else:
            raise KernelGateError(
                f"{fn.__name__} takes {name}, which the record lacks and no value was given for",
                key=name,
                hint=f"give it a value (--set {name}=VALUE, as the tree's launcher passes it) or re-record on a GPU",
            )
    return out


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
    """The kernel records of one recording file (`lab/recordings/*.json`, `recordings/` beside this module)."""
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError) as exc:
        raise KernelGateError(
            f"cannot read kernel records: {exc}",
            file=str(path),
            hint="re-create the file with lab/device/collect.py and lab/recordings/make_records.py",
        ) from exc
    return data["kernels"]


def run_gate(
    records: list[dict[str, Any]],
    tree: Path,
    targets: tuple[tuple[int, int], ...] = COMPILE_TARGETS,
    loader: ReleaseLoader | None = None,
) -> list[GateResult]:
    """Compile every record for every target from the vLLM source tree `tree` (the folder holding `vllm/`).

    `loader`: the loader to take kernels from (kernel_launches passes the one that executes vLLM's Python, so that
    kernels defined inside classes, `VllmTritonJitKernel` owners from v0.29.0, load); a fresh one by default."""
    from triton.backends.compiler import GPUTarget
    from triton.compiler import compile as triton_compile

    loader = loader if loader is not None else ReleaseLoader(Path(tree))
    sys.setrecursionlimit(max(sys.getrecursionlimit(), 5000))
    results = []
    for rec in records:
        spec = rec["specialization"]
        for cc, warp in targets:
            try:
                fn = loader.kernel(rec["module"], rec["qualname"])
                stale = stale_record(fn, spec)
                if stale:
                    results.append(GateResult(rec["module"], rec["qualname"], cc, False, stale))
                    continue
                options = {k: spec["options"][k] for k in _PORTABLE_OPTIONS if k in spec["options"]}
                triton_compile(_ast_source(fn, spec), target=GPUTarget("cuda", cc, warp), options=options)
                results.append(GateResult(rec["module"], rec["qualname"], cc, True))
            except Exception as exc:  # every failure is a gate finding, reported per kernel
                lines = [ln.strip() for ln in f"{type(exc).__name__}: {exc}".splitlines() if ln.strip()]
                reason = next((ln for ln in lines if "not supported" in ln), lines[0] if lines else "")
                results.append(GateResult(rec["module"], rec["qualname"], cc, False, reason))
    return results


def render_results(results: list[GateResult]) -> str:
    """One line per failing kernel, target and error (with how many records failed so), then the totals."""
    failed = [r for r in results if not r.ok]
    by_kernel = collections.Counter((r.qualname, f"sm_{r.target}", r.error) for r in failed)
    lines = [f"FAIL {name} {target} x{n}: {error}" for (name, target, error), n in sorted(by_kernel.items())]
    lines.append(f"{len(results) - len(failed)} passed, {len(failed)} failed")
    return "\n".join(lines) + "\n"
