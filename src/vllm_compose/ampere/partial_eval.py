"""A partial evaluator of Python conditions as a CUDA process on sm_80/86 sees them: True, False, or `UNKNOWN`.

The static path (`dsa_path`, `dsa_blockers`) asks it whether the `if` over a kernel call, a launch or a Triton
branch holds on Ampere without running anything: what it knows comes from `facts` (the capabilities, the
platform's answers, the launch contract and the constexpr values of an sm_8x run) and from the release's own code
(assignments, early returns of called functions). What it cannot decide stays `UNKNOWN`, never a guess, except the
one rule `AmperePartialEvaluator` states (a `*_supported()` probe the tree cannot answer is false).

Two evaluators: `evaluate(node, env)` for small config conditions over given names (the MTP rewrite, a
`supports_compute_capability` return, the constexpr pruning), and `AmperePartialEvaluator` for ordinary Python in
the release's functions.
"""

from __future__ import annotations

import ast
import operator

from .facts import (
    AMPERE_CONSTEXPR,
    CAPABILITIES,
    LAUNCH_CONTRACT,
    has_device_capability,
    is_device_capability,
    is_device_capability_family,
)
from .release_source import ReleaseSource, conditions, enclosing, imports_of, module_path, platform_value

#: what no rule decides: the evaluators return it instead of a guess
UNKNOWN = object()
_ORDER = {ast.Lt: operator.lt, ast.LtE: operator.le, ast.Gt: operator.gt, ast.GtE: operator.ge}

#: vLLM's capability probes (`current_platform.has_device_capability(89)`, ...), answered as on each Ampere GPU
_CAPABILITY_PROBES = {
    "has_device_capability": has_device_capability,
    "is_device_capability": is_device_capability,
    "is_device_capability_family": is_device_capability_family,
}


def evaluate(node: ast.expr, env: dict[str, object]) -> object:
    """A small evaluator for config conditions: constants, tuples, one comparison (`in`, `==`, `<`, ...),
    `and`/`or`/`not`, the names and dotted attributes of `env`, and platform calls (for CUDA). Returns `UNKNOWN` for
    anything else."""
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.Tuple | ast.List | ast.Set):
        vals = [evaluate(e, env) for e in node.elts]
        return UNKNOWN if UNKNOWN in vals else tuple(vals)
    if isinstance(node, ast.Name | ast.Attribute):
        return env.get(ast.unparse(node), UNKNOWN)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
        v = evaluate(node.operand, env)
        return UNKNOWN if v is UNKNOWN else not v
    if isinstance(node, ast.BoolOp):
        vals = [evaluate(v, env) for v in node.values]
        if isinstance(node.op, ast.And):
            return False if any(v is not UNKNOWN and not v for v in vals) else (UNKNOWN if UNKNOWN in vals else True)
        return True if any(v is not UNKNOWN and v for v in vals) else (UNKNOWN if UNKNOWN in vals else False)
    if isinstance(node, ast.Compare) and len(node.ops) == 1:
        left, right = evaluate(node.left, env), evaluate(node.comparators[0], env)
        if UNKNOWN in (left, right):
            return UNKNOWN
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
            return UNKNOWN
    if isinstance(node, ast.Call):
        v = platform_value(node)
        if v is not None:
            return v
    return UNKNOWN


class AmperePartialEvaluator:
    """Conditions as a CUDA process on sm_80/86 sees them: True, False, or `UNKNOWN`.

    Known: constants; `AMPERE_CONSTEXPR`; `current_platform.is_cuda()` (true) and the other platforms (false);
    `has_device_capability(N)` / `is_device_capability(N or (M, m))` / `is_device_capability_family(N)` for every
    Ampere capability (`facts.CAPABILITIES`: a probe the two answer differently is unknown);
    `is_deep_gemm_supported()` (false: DeepGEMM's arch check); `and` / `or` / `not` / `==` / `in` / `is None`;
    ternaries; a local name or `self.x` whose assignments all give one value; a call of a function of the tree, by
    its early `if ...: return ...` statements and final `return` (arguments bound). Last resort, a call named
    `*_supported(...)` that the tree cannot answer is taken as false (a probe for a kernel of a newer GPU).
    With `contract`, also the `LAUNCH_CONTRACT` values (`dcp_world_size` is 1); `plain` is the same evaluator
    without them, to tell what the GPU decides from what the launch contract decides.
    """

    #: a value known not to be None whose content is not known (an imported function, a tensor)
    SOMETHING = object()

    def __init__(self, src: ReleaseSource, contract: bool = True) -> None:
        self.src = src
        #: whether `LAUNCH_CONTRACT` values count
        self.contract = contract
        #: the evaluator without them (made on first use)
        self._plain: AmperePartialEvaluator | None = None if contract else self

    @property
    def plain(self) -> AmperePartialEvaluator:
        """The same evaluator without the launch contract: what the GPU and the platform decide alone."""
        if self._plain is None:
            self._plain = AmperePartialEvaluator(self.src, contract=False)
        return self._plain

    def _contract(self, name: str) -> object:
        """The launch-contract value of `name` (the last part of a dotted name), or `UNKNOWN`."""
        if not self.contract or name not in LAUNCH_CONTRACT:
            return UNKNOWN
        return LAUNCH_CONTRACT[name][0]

    def value(self, expr: ast.expr, where: ast.AST, bindings: dict | None = None, depth: int = 0) -> object:
        if depth > 24:
            return UNKNOWN
        bindings = bindings or {}
        v = lambda e: self.value(e, where, bindings, depth + 1)  # noqa: E731 - the recursion, short
        if isinstance(expr, ast.Constant):
            return expr.value
        if isinstance(expr, ast.Name):
            if expr.id in bindings and (bindings[expr.id] is not UNKNOWN or self._contract(expr.id) is UNKNOWN):
                return bindings[expr.id]  # a known argument wins over the contract; an unknown one does not
            if expr.id in AMPERE_CONSTEXPR:
                return AMPERE_CONSTEXPR[expr.id][0]
            if self._contract(expr.id) is not UNKNOWN:
                return self._contract(expr.id)
            return self._assigned(expr.id, where, depth)
        if isinstance(expr, ast.Attribute):
            if self._contract(expr.attr) is not UNKNOWN:
                return self._contract(expr.attr)
            if isinstance(expr.value, ast.Name) and expr.value.id == "self":
                return self._assigned(f"self.{expr.attr}", where, depth)
            return UNKNOWN
        if isinstance(expr, ast.UnaryOp) and isinstance(expr.op, ast.Not):
            x = v(expr.operand)
            return UNKNOWN if x is UNKNOWN else not x if x is not self.SOMETHING else False
        if isinstance(expr, ast.BoolOp):
            vals = [v(x) for x in expr.values]
            truth = [UNKNOWN if x is UNKNOWN else bool(x) for x in vals]
            if isinstance(expr.op, ast.And):
                return False if False in truth else (UNKNOWN if UNKNOWN in truth else True)
            return True if True in truth else (UNKNOWN if UNKNOWN in truth else False)
        if isinstance(expr, ast.IfExp):
            t = v(expr.test)
            if t is UNKNOWN:
                a, b = v(expr.body), v(expr.orelse)
                return a if a is b or (a is not UNKNOWN and a is not self.SOMETHING and a == b) else UNKNOWN
            return v(expr.body) if t else v(expr.orelse)
        if isinstance(expr, ast.Compare) and len(expr.ops) == 1:
            left, right, op = v(expr.left), v(expr.comparators[0]), expr.ops[0]
            if isinstance(op, ast.Is | ast.IsNot) and right is None and left is not UNKNOWN:
                return (left is None) == isinstance(op, ast.Is)
            if UNKNOWN in (left, right) or self.SOMETHING in (left, right):
                return UNKNOWN
            return evaluate(ast.Compare(ast.Constant(left), [op], [ast.Constant(right)]), {})
        if isinstance(expr, ast.Tuple):
            vals = [v(e) for e in expr.elts]
            return UNKNOWN if UNKNOWN in vals else tuple(vals)
        if isinstance(expr, ast.Call):
            return self._call(expr, where, bindings, depth)
        return UNKNOWN

    def _call(self, call: ast.Call, where: ast.AST, bindings: dict, depth: int) -> object:
        func = ast.unparse(call.func)
        name = func.rsplit(".", 1)[-1]
        platform = platform_value(call) if func.startswith("current_platform.") else None
        if platform is not None:
            return platform
        if name in _CAPABILITY_PROBES and call.args:
            asked = self.value(call.args[0], where, bindings, depth + 1)
            pair = isinstance(asked, tuple) and len(asked) == 2 and all(isinstance(x, int) for x in asked)
            if not (isinstance(asked, int) or (pair and name != "is_device_capability_family")):
                return UNKNOWN
            answers = {_CAPABILITY_PROBES[name](cap, asked) for cap in CAPABILITIES}
            return answers.pop() if len(answers) == 1 else UNKNOWN
        if name == "is_deep_gemm_supported":
            return False
        fn = self.function_at(name, where)
        if fn is not None:
            got = self.returns(fn, self.bind_call(fn, call, where, bindings, depth), depth + 1)
            if got[0] is not UNKNOWN:
                return got[0]
        if name.endswith("_supported"):
            return False
        return UNKNOWN

    def returns(self, fn: ast.FunctionDef, bindings: dict, depth: int = 0) -> tuple[object, str | None]:
        """What `fn` returns on Ampere by its leading statements (early `if ...: return`, plain assignments, the
        final `return`): (value, the condition of the early return that is certainly taken, or None). An early
        return whose condition is unknown may or may not be taken; the value is known only when all agree."""
        seen: list[object] = []

        def result(value: object, cond: str | None) -> tuple[object, str | None]:
            values = [*seen, value]
            first = values[0]
            same = all(v is first or (v is not UNKNOWN and v is not self.SOMETHING and v == first) for v in values)
            return (first if same else UNKNOWN), cond

        for stmt in fn.body:
            if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant):
                continue  # the docstring
            if isinstance(stmt, ast.If) and not stmt.orelse and isinstance(stmt.body[-1], ast.Return):
                taken = self.value(stmt.test, stmt, bindings, depth + 1)
                ret = stmt.body[-1].value
                value = None if ret is None else self.value(ret, stmt, bindings, depth + 1)
                if taken is UNKNOWN:
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
            return UNKNOWN, None
        return result(None, None)

    def bind_call(self, fn: ast.FunctionDef, call: ast.Call, where: ast.AST, bindings: dict, depth: int) -> dict:
        params = [a.arg for a in fn.args.args if a.arg not in ("self", "cls")]
        out = {}
        for p, a in zip(params, call.args, strict=False):
            out[p] = self.value(a, where, bindings, depth + 1)
        for k in call.keywords:
            if k.arg:
                out[k.arg] = self.value(k.value, where, bindings, depth + 1)
        for p in params + [a.arg for a in fn.args.kwonlyargs]:
            out.setdefault(p, UNKNOWN)
        return out

    def _skipped(self, stmt: ast.AST, depth: int) -> bool:
        """Whether a condition over `stmt` in its function is false on Ampere (the assignment never happens)."""
        for test, negated in conditions(self.src, stmt):
            value = self.value(test, stmt, None, depth + 1)
            if value is not UNKNOWN and value is not self.SOMETHING and bool(value) == negated:
                return True
        return False

    def function_at(self, name: str, where: ast.AST) -> ast.FunctionDef | None:
        """The function `name` refers to at `where`: defined in the same module, or imported from the tree."""
        path, _ = self.src.file_of(where)
        mod, _ = self.src.module(path)
        for stmt in mod.body:
            if isinstance(stmt, ast.FunctionDef) and stmt.name == name:
                return stmt
        origin = imports_of(self.src, path).get(name)
        if origin and origin[1]:
            target = module_path(self.src, origin[0])
            if target is not None:
                for stmt in self.src.module(target)[0].body:
                    if isinstance(stmt, ast.FunctionDef) and stmt.name == origin[1]:
                        return stmt
        return None

    def _assigned(self, name: str, where: ast.AST, depth: int) -> object:
        """The one value every assignment of `name` (local, or `self.x` in the class) gives, else `UNKNOWN`."""
        if name.startswith("self."):
            scope = enclosing(self.src, where, ast.ClassDef)
        else:
            scope = enclosing(self.src, where, (ast.FunctionDef, ast.AsyncFunctionDef))
        if scope is None:
            return UNKNOWN
        values = []
        for a in ast.walk(scope):
            if isinstance(a, ast.Assign | ast.AnnAssign) and a.value is not None:
                targets = a.targets if isinstance(a, ast.Assign) else [a.target]
                if any(ast.unparse(t) == name for t in targets) and not self._skipped(a, depth):
                    values.append(self.value(a.value, a, None, depth + 1))
        if isinstance(scope, ast.FunctionDef | ast.AsyncFunctionDef) and name in {a.arg for a in scope.args.args}:
            return UNKNOWN
        if not values:
            path, _ = self.src.file_of(where)
            if imports_of(self.src, path).get(name) or self.function_at(name, where):
                return self.SOMETHING
            return UNKNOWN
        first = values[0]
        if all(x is first or (x is not UNKNOWN and x is not self.SOMETHING and x == first) for x in values):
            return first
        return UNKNOWN
