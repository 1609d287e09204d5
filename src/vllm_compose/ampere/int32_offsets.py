"""Which Triton kernel arguments become int32 offsets: products of 32-bit integers added to a pointer, from the
kernel's own source and the argument types a launch passes.

Triton computes an offset in the type of its operands: an `i32` stride times an `i32` index stays 32-bit and wraps
past 2**31, and the load or store then reads or writes outside the tensor (the faults series entries 0036 and 0038
fix). A Python int argument below 2**31 specializes as `i32`, a tensor of int32 loads as `i32`, `tl.program_id` and
`tl.arange` are `i32`; `.to(tl.int64)` (or an `i64` operand) widens. This module follows that through a kernel's
assignments and reports every pointer offset that contains a product of two 32-bit values of which at least one is
an argument or a value loaded from an argument (a stride times an index, say), with the arguments it involves.

It is a report, not a verdict: an int32 offset is safe while the tensor it indexes stays below 2**31 elements, which
depends on the pool and the model. The analysis is syntactic and sequential (control flow is not merged; a name's
last assignment counts), which is how these kernels are written; what it cannot type it leaves out rather than
guessing, so the list can miss an offset but does not invent one.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field

#: the type of a value: "i32", "i64", "ptr" (with its element type), or None (float, constexpr, unknown)


@dataclass(frozen=True)
class Int32Offset:
    """One pointer offset that multiplies 32-bit values: the pointer argument, the source line, the arguments."""

    #: "module:qualname" of the launched kernel, then " > helper" for an offset inside a helper it calls
    kernel: str
    pointer: str
    line: int
    arguments: tuple[str, ...]
    expression: str

    def to_json(self) -> dict:
        return {
            "kernel": self.kernel,
            "pointer": self.pointer,
            "line": self.line,
            "arguments": list(self.arguments),
            "expression": self.expression,
        }


@dataclass
class _Val:
    kind: str | None  # "i32", "i64", "ptr", None
    #: for integers: the arguments (or loads "load(ARG)") this value derives from
    sources: frozenset[str] = frozenset()
    #: for integers: whether a product of two 32-bit non-constant values is part of it (and which sources)
    products: frozenset[str] = frozenset()
    #: for pointers: the base pointer argument and its element type
    base: str = ""
    elem: str = ""


_NONE = _Val(None)


@dataclass
class _Scan:
    kernel: str
    env: dict[str, _Val] = field(default_factory=dict)
    found: list[Int32Offset] = field(default_factory=list)
    #: the module's functions by name: a call to one (a @triton.jit helper) is scanned with the caller's values
    functions: dict[str, ast.FunctionDef] = field(default_factory=dict)
    depth: int = 0

    def value(self, node: ast.AST) -> _Val:
        if isinstance(node, ast.Name):
            return self.env.get(node.id, _NONE)
        if isinstance(node, ast.Constant):
            return _Val("const") if isinstance(node.value, int) and not isinstance(node.value, bool) else _NONE
        if isinstance(node, ast.Subscript):
            return self.value(node.value)
        if isinstance(node, ast.UnaryOp):
            return self.value(node.operand)
        if isinstance(node, ast.BinOp):
            return self.binop(node)
        if isinstance(node, ast.Call):
            return self.call(node)
        if isinstance(node, ast.IfExp):
            return _join(self.value(node.body), self.value(node.orelse))
        return _NONE

    def binop(self, node: ast.BinOp) -> _Val:
        a, b = self.value(node.left), self.value(node.right)
        if a.kind == "ptr" or b.kind == "ptr":
            ptr, off, off_node = (a, b, node.right) if a.kind == "ptr" else (b, a, node.left)
            if isinstance(node.op, ast.Add | ast.Sub):
                self.offset(ptr, off, off_node)
            return ptr
        if a.kind is None or b.kind is None:
            return _NONE
        if "i64" in (a.kind, b.kind):
            return _Val("i64")
        if a.kind == "const" and b.kind == "const":
            return _Val("const")
        out = _join(a, b)
        if isinstance(node.op, ast.Mult) and a.kind == "i32" and b.kind == "i32":
            out = _Val("i32", out.sources, out.products | a.sources | b.sources)
        return out

    def call(self, node: ast.Call) -> _Val:
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
        if name == "to" and isinstance(func, ast.Attribute):
            target = ast.unparse(node.args[0]) if node.args else ""
            inner = self.value(func.value)
            if target.endswith(("int64", "uint64")):
                return _Val("i64")
            if target.endswith(("int32", "uint32")) and inner.kind in ("i32", "i64", "const"):
                return _Val("i32", inner.sources, inner.products if inner.kind == "i32" else frozenset())
            return _NONE
        if name in ("program_id", "num_programs", "arange"):
            return _Val("i32", frozenset({f"{name}()"}))
        if name in ("load", "atomic_add") and node.args:
            ptr = self.value(node.args[0])
            if ptr.kind == "ptr" and ptr.elem in ("i32", "u32"):
                return _Val("i32", frozenset({f"load({ptr.base})"}))
            if ptr.kind == "ptr" and ptr.elem in ("i64", "u64"):
                return _Val("i64")
            return _NONE
        if name in ("store",) and node.args:
            self.value(node.args[0])
            return _NONE
        if name in ("where",) and len(node.args) == 3:
            return _join(self.value(node.args[1]), self.value(node.args[2]))
        if name in ("minimum", "maximum", "multiple_of", "max_contiguous", "cdiv"):
            vals = [self.value(a) for a in node.args]
            if name in ("multiple_of", "max_contiguous"):
                return vals[0] if vals else _NONE
            out = vals[0] if vals else _NONE
            for v in vals[1:]:
                out = _join(out, v)
            return out
        if name == "full" and len(node.args) >= 2:
            dtype = ast.unparse(node.args[2]) if len(node.args) > 2 else ""
            dtype = dtype or next((ast.unparse(k.value) for k in node.keywords if k.arg == "dtype"), "")
            return _Val("i64") if dtype.endswith("int64") else _Val("i32") if dtype.endswith("int32") else _NONE
        vals = [self.value(a) for a in node.args]  # pointer arithmetic inside any call's arguments counts
        callee = self.functions.get(name) if isinstance(func, ast.Name) else None
        if callee is not None and self.depth < 4:
            self.helper(callee, vals, {k.arg: self.value(k.value) for k in node.keywords if k.arg})
        return _NONE

    def helper(self, fn: ast.FunctionDef, args: list[_Val], kwargs: dict[str, _Val]) -> None:
        """Scan a helper the kernel calls with the values it passes (its return value is not followed)."""
        inner = _Scan(f"{self.kernel} > {fn.name}", functions=self.functions, depth=self.depth + 1)
        for i, a in enumerate(fn.args.args):
            inner.env[a.arg] = args[i] if i < len(args) else kwargs.get(a.arg, _NONE)
        inner.block(fn.body)
        for hit in inner.found:
            if hit not in self.found:
                self.found.append(hit)

    def offset(self, ptr: _Val, off: _Val, node: ast.AST) -> None:
        if off.kind != "i32" or not off.products:
            return
        args = tuple(sorted(s for s in off.products if not s.endswith("()")))
        if not args:
            return
        hit = Int32Offset(self.kernel, ptr.base, getattr(node, "lineno", 0), args, ast.unparse(node))
        if hit not in self.found:
            self.found.append(hit)

    def assign(self, target: ast.AST, val: _Val) -> None:
        if isinstance(target, ast.Name):
            self.env[target.id] = val
        elif isinstance(target, ast.Tuple):
            for t in target.elts:
                self.assign(t, _NONE)

    def block(self, body: list[ast.stmt]) -> None:
        for stmt in body:
            if isinstance(stmt, ast.Assign):
                val = self.value(stmt.value)
                for t in stmt.targets:
                    self.assign(t, val)
            elif isinstance(stmt, ast.AnnAssign) and stmt.value is not None:
                self.assign(stmt.target, self.value(stmt.value))
            elif isinstance(stmt, ast.AugAssign):
                val = self.value(ast.BinOp(left=stmt.target, op=stmt.op, right=stmt.value, lineno=stmt.lineno))
                self.assign(stmt.target, val)
            elif isinstance(stmt, ast.For):
                self.assign(stmt.target, _Val("i32", frozenset({"range()"})))
                self.value(stmt.iter)
                self.block(stmt.body)
                self.block(stmt.orelse)
            elif isinstance(stmt, ast.If | ast.While):
                self.value(stmt.test)
                self.block(stmt.body)
                self.block(stmt.orelse)
            elif isinstance(stmt, ast.With):
                self.block(stmt.body)
            elif isinstance(stmt, ast.Expr | ast.Return) and stmt.value is not None:
                self.value(stmt.value)


def _join(a: _Val, b: _Val) -> _Val:
    if a.kind is None:
        return b
    if b.kind is None:
        return a
    if "i64" in (a.kind, b.kind):
        return _Val("i64")
    if a.kind == "const":
        return b
    if b.kind == "const":
        return a
    return _Val("i32", a.sources | b.sources, a.products | b.products)


def _arg_value(name: str, typ: str) -> _Val:
    if typ.startswith("*"):
        return _Val("ptr", base=name, elem=typ.lstrip("*k"))
    if typ in ("i32", "u32", "i1", "i8", "i16"):
        return _Val("i32", frozenset({name}))
    if typ in ("i64", "u64"):
        return _Val("i64")
    if typ == "constexpr":
        return _Val("const")
    return _NONE


def scan_kernel(
    fn: ast.FunctionDef, signature: dict[str, str], kernel: str, module: ast.Module | None = None
) -> list[Int32Offset]:
    """The int32 pointer offsets of the Triton kernel `fn` launched with argument types `signature` (Triton's
    specialization signature: "*bf16", "i32", "i64", "constexpr", ...), helpers of `module` it calls included."""
    functions = {n.name: n for n in module.body if isinstance(n, ast.FunctionDef)} if module is not None else {}
    scan = _Scan(kernel, functions=functions)
    for a in fn.args.args:
        scan.env[a.arg] = _arg_value(a.arg, signature.get(a.arg, ""))
    scan.block(fn.body)
    return scan.found


def _find_function(module: ast.Module, qualname: str) -> ast.FunctionDef | None:
    scope: list[ast.stmt] = module.body
    node = None
    for part in qualname.split("."):
        node = next((n for n in scope if isinstance(n, ast.FunctionDef | ast.ClassDef) and n.name == part), None)
        if node is None:
            return None
        scope = node.body
    return node if isinstance(node, ast.FunctionDef) else None


def scan_tree(tree, kernels: dict[str, dict[str, str]]) -> list[Int32Offset]:
    """The int32 offsets of each kernel of `kernels` ("module.qualname" -> signature) in `tree` (a FileTree, or a
    folder holding vllm/); a kernel whose source is not found is left out."""
    from pathlib import Path

    from ..trees import DirTree

    if isinstance(tree, str | Path):
        tree = DirTree(Path(tree))
    out: list[Int32Offset] = []
    for name, signature in sorted(kernels.items()):
        parts = name.split(".")
        for cut in range(len(parts) - 1, 0, -1):
            raw = tree.read("/".join(parts[:cut]) + ".py")
            if raw is None:
                continue
            text = raw.decode("utf-8", "replace")
            module = ast.parse(text)
            fn = _find_function(module, ".".join(parts[cut:]))
            if fn is not None:
                out += scan_kernel(fn, signature, ".".join(parts[:cut]) + ":" + ".".join(parts[cut:]), module)
            break
    return out


__all__ = ["Int32Offset", "scan_kernel", "scan_tree"]
