"""The blockers on a release's DSA path: every kernel or op in the path's modules that needs more than sm_80/86,
each with its guard, as `dsa_path` reports and classifies them.

`scan_blockers(tree, modules)` finds arch-limited Triton features in `@triton.jit` functions (directly or through
jit helpers, pruned where an Ampere run's constexpr values switch the branch off) and calls into native libraries
that need sm_89+/sm_90+ (DeepGEMM, FlashMLA, FlashInfer sparse, CuTeDSL/CUTLASS, the GLM-5.2 GEMM, fp8 torch ops).
Each one's guard is found in its own code: a condition around it or an `if ...: return` before it (its function's
own early returns included), a callee's early return, its callers' conditions; each is evaluated by
`partial_eval.AmperePartialEvaluator` as a sm_80/86 CUDA process sees it, and apart from that under the Ampere
launch contract (`facts.LAUNCH_CONTRACT`: e.g. decode context parallel off, so code after
`if dcp_world_size <= 1: return` never runs).
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field

from ..trees import FileTree
from .facts import AMPERE_CONSTEXPR, LAUNCH_CONTRACT
from .partial_eval import UNKNOWN, AmperePartialEvaluator, evaluate
from .release_source import (
    ReleaseSource,
    cond_text,
    conditions,
    dotted_of,
    enclosing,
    imports_of,
    node_text,
    qualname,
    release_source,
)

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


# --------------------------------------------------------------------------------------------------------- results


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


# ------------------------------------------------------------------------------------------------------- guards


def _aliases(src: ReleaseSource, text: str, where: ast.AST, test: ast.expr) -> list[str]:
    """What the names in `test` stand for: local assignments in the enclosing function (and the condition they sit
    under), `self.x` assignments in the enclosing class."""
    fn = enclosing(src, where, (ast.FunctionDef, ast.AsyncFunctionDef))
    cls = enclosing(src, where, ast.ClassDef)
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
                    note = f"{name} = {node_text(text, a.value, 120)}"
                    under = next(iter(conditions(src, a)), None)
                    if under is not None and under[0] is not test:
                        note += f" under {cond_text(text, under[0], under[1])}"
                    if note not in out:
                        out.append(note)
    return out


@dataclass(frozen=True)
class _Reach:
    """Whether code runs on Ampere: "off" (a condition over it is false there), "off-contract" (false there only by
    a `LAUNCH_CONTRACT` value), "on", "unknown" (an arch guard the evaluator cannot decide), "off-cuda" (a platform
    condition keeps it off CUDA); the condition that says so."""

    status: str
    guard: str


def _reach(src: ReleaseSource, amp: AmperePartialEvaluator, node: ast.AST, stop: ast.AST | None = None) -> _Reach:
    """Whether `node` runs on sm_80/86 by the conditions over it in its function (`conditions`: the `if`s around it
    and the earlier `if ...: return` of its blocks, the function's own early returns included). A condition the GPU
    and the platform decide wins over one only the launch contract decides ("off-contract")."""
    _, text = src.file_of(node)
    nearest: _Reach | None = None
    by_contract: _Reach | None = None
    for test, negated in conditions(src, node, stop):
        aliases = _aliases(src, text, node, test)
        whole = " ".join([ast.unparse(test), *aliases])
        shown = _shown(text, test, negated, aliases)
        value = amp.plain.value(test, node)
        if value is not UNKNOWN and bool(value) == negated:
            arch = any(w in whole for w in ARCH_WORDS)
            return _Reach("off" if arch or "is_cuda" in whole else "off-cuda", shown)
        if value is UNKNOWN and by_contract is None:
            under = amp.value(test, node)
            if under is not UNKNOWN and bool(under) == negated:
                by_contract = _Reach("off-contract", _contract_guard(src, text, node, test, whole, shown))
        if nearest is None and any(w in whole for w in GUARD_WORDS):
            unknown = value is UNKNOWN and any(w in whole for w in ARCH_WORDS)
            nearest = _Reach("unknown" if unknown else "on", shown)
    return by_contract or nearest or _Reach("on", "unguarded")


def _contract_reason(condition: str) -> str:
    """Why the `LAUNCH_CONTRACT` names in `condition` (source text) have their values on Ampere."""
    used = [name for name in LAUNCH_CONTRACT if re.search(rf"\b{name}\b", condition)]
    return "; ".join(dict.fromkeys(LAUNCH_CONTRACT[name][1] for name in used)) or "the Ampere launch contract"


def _contract_guard(src: ReleaseSource, text: str, node: ast.AST, test: ast.expr, whole: str, shown: str) -> str:
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
        return f"{reason} (`{node_text(text, test, 120)}` {exit_})"
    return f"{reason}: runs only where {shown}"


def _shown(text: str, test: ast.expr, negated: bool, aliases: list[str]) -> str:
    shown = cond_text(text, test, negated, 120)
    return shown + (" [" + "; ".join(aliases) + "]" if aliases else "")


# ---------------------------------------------------------------------------------------------------- the scan


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
        v = evaluate(test, env)
        if v is not UNKNOWN and bool(v) == negated:
            flags = [n.id for n in ast.walk(test) if isinstance(n, ast.Name) and n.id in AMPERE_CONSTEXPR]
            return "; ".join(AMPERE_CONSTEXPR[f][1] for f in flags)
    return None


def _fp8_feature(src: ReleaseSource, node: ast.AST) -> str:
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
    src: ReleaseSource, path: str, fn: ast.FunctionDef, params: frozenset[str] = frozenset(), depth: int = 0
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
            for t, neg in conditions(src, node, stop=fn, exits=False)  # Triton traces past an early return
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
                prefix = tuple(cond_text(text, t, neg) for t, neg in reversed(tests))
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
                    tuple(cond_text(text, t, neg) for t, neg in reversed(tests)),
                    pruned=_pruned(tests),
                )
            )
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            calls.append((node.func.id, cond_stack(node)))
    return uses, calls


def _passed_to_jit(src: ReleaseSource, path: str, node: ast.AST) -> tuple[str, ast.FunctionDef, str] | None:
    """When `node` is an argument of a call to a jit function of the tree: (its path, the function, the parameter)."""
    call = src.parents.get(node)
    if isinstance(call, ast.keyword):
        kw, call = call, src.parents.get(call)
    else:
        kw = None
    if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Name)):
        return None
    callee = AmperePartialEvaluator(src).function_at(call.func.id, call)
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


def _launchers(src: ReleaseSource, modules: list[str], name: str, kernel: bool) -> list[tuple[str, ast.AST]]:
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
    src: ReleaseSource,
    amp: AmperePartialEvaluator,
    modules: list[str],
    sites: list[tuple[str, ast.AST]],
    depth: int = 0,
    seen=None,
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
        fn = enclosing(src, call, (ast.FunctionDef, ast.AsyncFunctionDef))
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
    src = release_source(tree)
    amp = AmperePartialEvaluator(src)
    out: list[Blocker] = []
    for path in modules:
        mod, text = src.module(path)
        jits = {
            n.name: n
            for n in ast.walk(mod)
            if isinstance(n, ast.FunctionDef) and _is_jit(n) and enclosing(src, n, ast.ClassDef) is None
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
        if not _library_kind(dotted_of(path), "entry"):  # a library's own module: its callers are the blockers
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
            conds = tuple(cond_text(text, t, n) for t, n in reversed(tests))
            for u in _transitive_uses(direct, text, callee, depth + 1):
                got.append(TritonUse(u.feature, u.line, conds + u.constexpr, u.via or callee, pruned or u.pruned))
    return got


def _native_calls(
    src: ReleaseSource, amp: AmperePartialEvaluator, modules: list[str], path: str, mod: ast.Module, jits: dict
) -> list[Blocker]:
    """The calls into native libraries in module `path` (outside its jit functions), each with whether it runs on
    sm_8x: by the conditions over it (its function's own early returns included), by an early return of the callee
    (a wrapper in the tree that gates itself), or by the callers of its function; each by the GPU first, then by
    the launch contract ("off-contract")."""
    imports = imports_of(src, path)
    out: list[Blocker] = []
    seen: set[tuple] = set()
    for node in ast.walk(mod):
        if not isinstance(node, ast.Call):
            continue
        if enclosing(src, node, ast.FunctionDef) in jits.values():
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
        function = qualname(src, node)
        key = (function, what, node.lineno)
        if key in seen:
            continue
        seen.add(key)
        reach = _reach(src, amp, node)
        callee = amp.function_at(f.id, node) if isinstance(f, ast.Name) else None
        if callee is not None and _is_probe(callee):
            continue
        if reach.status == "on" and callee is not None:
            for evaluator, status in ((amp.plain, "off"), (amp, "off-contract")):
                _, early = evaluator.returns(callee, evaluator.bind_call(callee, node, node, {}, 0))
                if early is not None:
                    why = f" ({_contract_reason(early)})" if status == "off-contract" else ""
                    reach = _Reach(status, f"{f.id}() returns early: {early}{why}")
                    break
        if reach.status == "on":
            fn = enclosing(src, node, (ast.FunctionDef, ast.AsyncFunctionDef))
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


def _local_alias(src: ReleaseSource, node: ast.AST, name: str, imports: dict) -> tuple[str, str] | None:
    """`kernel = fused_q_cutedsl` earlier in the same function: the import `name` stands for."""
    fn = enclosing(src, node, (ast.FunctionDef, ast.AsyncFunctionDef))
    if fn is None:
        return None
    for a in ast.walk(fn):
        if isinstance(a, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in a.targets):
            if isinstance(a.value, ast.Name) and a.value.id in imports:
                return imports[a.value.id]
    return None
