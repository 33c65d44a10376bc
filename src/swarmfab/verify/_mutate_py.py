"""The mutation rules for Python sources (a delta-rule ``forward`` module, a problem
file's ``Model`` and ``ModelNew``), one function per operator of
:data:`swarmfab.verify.mutants.CATALOGUE`, found on the syntax tree.

Rewrites that need a mechanism (a lazy tensor subclass, a buffer kept across calls)
call a helper of :mod:`._mutate_helpers`, appended to the mutant. Statements are put
at the start of a ``forward`` (after its docstring); results are rewritten at its
``return`` statements (not those of functions nested in it).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator

from swarmfab.verify._mutate_helpers import HELPERS
from swarmfab.verify._mutate_text import Edit, typo

__all__ = ["constant", "contiguity", "dropped_clamp", "dropped_term", "in_place_update",
           "index_stride", "lazy_result", "loop_bound", "lower_precision", "missing_max",
           "shared_scratch", "sign_flip", "special_values"]

# a delta-rule forward's arguments that are never tensors
_NOT_TENSORS = frozenset({"self", "scale", "output_final_state"})
_AXIS_REDUCTIONS = frozenset({"softmax", "log_softmax", "logsumexp", "sum", "mean", "cumsum",
                              "amax", "amin", "var", "std", "norm", "prod"})


class _Tree:
    """A parsed source and the character offsets of its nodes."""

    def __init__(self, source: str):
        self.source = source
        self.tree = ast.parse(source)
        self.starts = [0]
        self.lines = source.splitlines(keepends=True)
        for line in self.lines:
            self.starts.append(self.starts[-1] + len(line))

    def offset(self, line: int, byte_col: int) -> int:
        text = self.lines[line - 1] if line - 1 < len(self.lines) else ""
        return self.starts[line - 1] + len(text.encode()[:byte_col].decode(errors="ignore"))

    def span(self, node: ast.AST) -> tuple[int, int]:
        return (self.offset(node.lineno, node.col_offset),  # type: ignore[attr-defined]
                self.offset(node.end_lineno, node.end_col_offset))  # type: ignore[attr-defined]

    def text(self, node: ast.AST) -> str:
        start, end = self.span(node)
        return self.source[start:end]

    def edit(self, node: ast.AST, text: str, rule: str, *helpers: str) -> Edit:
        start, end = self.span(node)
        return Edit(start, end, text, rule, tuple(HELPERS[h] for h in helpers))

    def forwards(self) -> list[ast.FunctionDef]:
        return [node for node in ast.walk(self.tree)
                if isinstance(node, ast.FunctionDef) and node.name == "forward"]

    def calls(self) -> Iterator[ast.Call]:
        for node in ast.walk(self.tree):
            if isinstance(node, ast.Call):
                yield node

    def insert(self, fn: ast.FunctionDef, statement: str, rule: str, *helpers: str) -> Edit:
        """``statement`` as the first of ``fn``'s body (after its docstring)."""
        body = fn.body
        first = body[1] if (len(body) > 1 and isinstance(body[0], ast.Expr)
                            and isinstance(body[0].value, ast.Constant)
                            and isinstance(body[0].value.value, str)) else body[0]
        at = self.starts[first.lineno - 1]
        indent = self.lines[first.lineno - 1][: len(self.lines[first.lineno - 1])
                                              - len(self.lines[first.lineno - 1].lstrip())]
        return Edit(at, at, f"{indent}{statement}\n", rule, tuple(HELPERS[h] for h in helpers))


def _returns(fn: ast.FunctionDef) -> Iterator[ast.Return]:
    """``fn``'s own return statements (with a value)."""
    stack: list[ast.AST] = list(fn.body)
    while stack:
        node = stack.pop()
        if isinstance(node, ast.Return) and node.value is not None:
            yield node
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda | ast.ClassDef):
            continue
        stack.extend(ast.iter_child_nodes(node))


def _tensor_args(fn: ast.FunctionDef) -> list[str]:
    return [arg.arg for arg in fn.args.args if arg.arg not in _NOT_TENSORS]


def _returned(t: _Tree, fn: ast.FunctionDef, wrap: str, rule: str, *helpers: str
              ) -> Iterator[Edit]:
    """Each return of ``fn`` with its value wrapped: ``wrap`` formats ``{value}``."""
    for node in _returns(fn):
        assert node.value is not None
        value = t.text(node.value)
        if isinstance(node.value, ast.Tuple) and not value.startswith("("):
            value = f"({value})"
        yield t.edit(node.value, wrap.format(value=value), rule, *helpers)


def _name(call: ast.Call) -> str:
    """``torch.softmax`` -> "softmax"; ``x.clamp`` -> "clamp"; ``min`` -> "min"."""
    func = call.func
    return func.attr if isinstance(func, ast.Attribute) else func.id \
        if isinstance(func, ast.Name) else ""


def _is_method(call: ast.Call) -> bool:
    """``x.f(...)`` on a value, not ``torch.f`` / ``F.f`` / ``torch.nn.functional.f``."""
    func = call.func
    if not isinstance(func, ast.Attribute):
        return False
    owner = func.value
    while isinstance(owner, ast.Attribute):
        owner = owner.value
    return not (isinstance(owner, ast.Name) and owner.id in ("torch", "F", "nn"))


def _operand(t: _Tree, call: ast.Call) -> str | None:
    """The tensor a call works on: a method's receiver, else its first argument."""
    if _is_method(call):
        assert isinstance(call.func, ast.Attribute)
        return t.text(call.func.value)
    return t.text(call.args[0]) if call.args else None


def _dim(t: _Tree, call: ast.Call, position: int) -> str | None:
    for keyword in call.keywords:
        if keyword.arg == "dim":
            return t.text(keyword.value)
    args = call.args[position - (1 if _is_method(call) else 0):]
    return t.text(args[0]) if args else None


def loop_bound(source: str) -> Iterator[Edit]:
    t = _Tree(source)
    for call in t.calls():
        if isinstance(call.func, ast.Name) and call.func.id == "range" and call.args \
                and len(call.args) <= 2:
            last = call.args[-1]
            yield t.edit(last, f"{t.text(last)} - 1", "range one short")
        if isinstance(call.func, ast.Name) and call.func.id == "min" and len(call.args) == 2:
            yield t.edit(call, f"({t.text(call.args[0])})", "the last partial tile assumed whole")
    for node in ast.walk(t.tree):
        if isinstance(node, ast.Slice) and isinstance(node.upper, ast.BinOp) \
                and isinstance(node.upper.op, ast.Add) \
                and isinstance(node.upper.right, ast.Constant) and node.upper.right.value == 1:
            yield t.edit(node.upper, t.text(node.upper.left), "slice one short")


def dropped_clamp(source: str) -> Iterator[Edit]:
    t = _Tree(source)
    for call in t.calls():
        name = _name(call)
        if name in ("clamp", "clamp_min", "clamp_max", "clip", "nan_to_num") \
                or (name in ("maximum", "minimum", "fmax", "fmin") and not _is_method(call)):
            operand = _operand(t, call)
            if operand is not None:
                yield t.edit(call, f"({operand})", f"{name} removed")


def missing_max(source: str) -> Iterator[Edit]:
    t = _Tree(source)
    for call in t.calls():
        name, x = _name(call), _operand(t, call)
        if x is None:
            continue
        if name in ("softmax", "log_softmax", "logsumexp"):
            dim = _dim(t, call, 1)
            if dim is None:
                continue
            keep = any(k.arg == "keepdim" and isinstance(k.value, ast.Constant) and k.value.value
                       for k in call.keywords)
            total = f"torch.exp({x}).sum(dim={dim}, keepdim={keep or name != 'logsumexp'})"
            text = {"softmax": f"(torch.exp({x}) / {total})",
                    "log_softmax": f"(({x}) - torch.log({total}))",
                    "logsumexp": f"torch.log({total})"}[name]
            yield t.edit(call, text, f"{name} without the row maximum")
        elif name == "tanh" and (call.args or _is_method(call)):
            twice = f"torch.exp(2 * ({x}))"
            yield t.edit(call, f"(({twice} - 1) / ({twice} + 1))", "tanh through exp(2y)")
        elif name == "sigmoid" and (call.args or _is_method(call)):
            yield t.edit(call, f"(torch.exp({x}) / (1 + torch.exp({x})))", "sigmoid through exp(y)")
        elif name == "exp":
            inner: ast.expr | None = call.args[0] if call.args else None
            if isinstance(call.func, ast.Attribute) and _is_method(call):
                inner = call.func.value
            if isinstance(inner, ast.BinOp) and isinstance(inner.op, ast.Sub):
                a, b = t.text(inner.left), t.text(inner.right)
                yield t.edit(call, f"(torch.exp({a}) / torch.exp({b}))",
                             "exp(a - b) split into exp(a) / exp(b)")


def shared_scratch(source: str) -> Iterator[Edit]:
    t = _Tree(source)
    for number, call in enumerate(t.calls()):
        if _name(call) in ("empty_like", "zeros_like", "empty", "zeros", "new_zeros",
                           "new_empty"):
            yield t.edit(call, f"_mut_kept({number}, {t.text(call)})",
                         "a buffer kept across calls, never cleared", "shared")
    for number, fn in enumerate(t.forwards()):
        yield from _returned(t, fn, f"_mut_shared('out{number}', {{value}})",
                             "the output buffer reused across calls", "shared")


def contiguity(source: str) -> Iterator[Edit]:
    t = _Tree(source)
    for fn in t.forwards():
        for name in _tensor_args(fn):
            yield t.insert(fn, f"{name} = _mut_assume_contiguous({name})",
                           f"{name} assumed contiguous", "contiguous")
        if fn.args.vararg is not None:
            rest = fn.args.vararg.arg
            yield t.insert(fn, f"{rest} = tuple(_mut_assume_contiguous(x) for x in {rest})",
                           "inputs assumed contiguous", "contiguous")
    for call in t.calls():
        if _name(call) == "reshape" and _is_method(call):
            assert isinstance(call.func, ast.Attribute)
            start = t.offset(call.func.end_lineno or 0, call.func.end_col_offset or 0)
            yield Edit(start - len("reshape"), start, "view", "reshape as view")


def _has_parameters(t: _Tree) -> bool:
    """Whether a module class of the source creates parameters or submodules."""
    for node in ast.walk(t.tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) \
                and node.value.id == "nn" and node.attr[:1].isupper() \
                and node.attr not in ("Module", "ModuleList", "Identity"):
            return True
    return False


def _arguments(fn: ast.FunctionDef) -> list[str]:
    names = _tensor_args(fn)
    if fn.args.vararg is not None:
        names.append(f"{fn.args.vararg.arg}[0]")
    return names


def in_place_update(source: str) -> Iterator[Edit]:
    t = _Tree(source)
    methods = [fn for fn in t.forwards() if fn.args.args and fn.args.args[0].arg == "self"]
    if _has_parameters(t):
        for fn in methods:
            yield t.insert(fn, "_mut_nudge_parameters(self)", "parameters nudged every call",
                           "nudge")
            yield t.insert(fn, "_mut_round_parameters_once(self)",
                           "parameters rounded in place once", "round_once")
    for fn in t.forwards():
        for name in _arguments(fn):
            yield from _returned(t, fn, f"_mut_scratch_input({name}, {{value}})",
                                 f"{name} used as scratch", "scratch")


_TENSOR_OPS = frozenset({"exp", "log", "cumsum", "einsum", "solve_triangular", "matmul",
                         "linear", "softmax", "log_softmax", "logsumexp", "layer_norm", "tanh",
                         "sigmoid", "diag_embed", "sum", "mean", "rsqrt", "sqrt", "norm"})
_ARITHMETIC = (ast.Add, ast.Sub, ast.Mult, ast.Div, ast.MatMult, ast.Pow)


def _arithmetic(node: ast.AST) -> bool:
    """Whether an expression computes on values (an arithmetic operator or a tensor
    operation in it), as opposed to building objects or reading settings."""
    for inner in ast.walk(node):
        if isinstance(inner, ast.BinOp) and isinstance(inner.op, _ARITHMETIC):
            return True
        if isinstance(inner, ast.Call) and _name(inner) in _TENSOR_OPS:
            return True
    return False


def lower_precision(source: str) -> Iterator[Edit]:
    t = _Tree(source)
    functions = [node for node in ast.walk(t.tree) if isinstance(node, ast.FunctionDef)]
    for fn in functions:
        for node in ast.walk(fn):
            if not (isinstance(node, ast.Assign) and len(node.targets) == 1
                    and isinstance(node.targets[0], ast.Name | ast.Subscript)):
                continue
            value = t.text(node.value)
            if not _arithmetic(node.value) or ".shape" in value or "//" in value \
                    or " % " in value:
                continue
            yield t.edit(node.value, f"_mut_bfloat16({value})", "an intermediate in bfloat16",
                         "bfloat16")
    for fn in t.forwards():
        yield from _returned(t, fn, "_mut_bfloat16({value})", "the result in bfloat16",
                             "bfloat16")


def lazy_result(source: str) -> Iterator[Edit]:
    t = _Tree(source)
    for fn in t.forwards():
        yield from _returned(t, fn, "_mut_lazy({value})", "computed on first read", "lazy")
        yield from _returned(t, fn, "_mut_tagged({value})", "a tensor subclass", "tagged")
        yield from _returned(t, fn, "_mut_later({value})", "filled in after return", "later")


def special_values(source: str) -> Iterator[Edit]:
    t = _Tree(source)
    for fn in t.forwards():
        names = _tensor_args(fn)
        if "beta" in names and "g" in names:  # a delta-rule forward
            for statement, rule in (
                    ("beta = beta.clamp(1e-4, 1 - 1e-4)", "beta kept within [1e-4, 1 - 1e-4]"),
                    ("g = g.clamp(max=-1e-4)", "gates kept below -1e-4 (never 0)"),
                    ("g = torch.where(torch.isinf(g), torch.zeros_like(g), g)",
                     "-inf gates read as 0"),
                    ("g = g.clamp(min=-5.0)", "gate floor raised to -5")):
                yield t.insert(fn, statement, rule)
            continue
        for name in _arguments(fn):
            if name.endswith("[0]"):
                rest = name[:-3]
                wrap = "tuple({f}(x) for x in {rest})"
                yield t.insert(fn, f"{rest} = " + wrap.format(f="_mut_randn_range", rest=rest),
                               "inputs clamped to [-100, 100]", "randn_range")
                yield t.insert(fn, f"{rest} = " + wrap.format(f="_mut_no_zeros", rest=rest),
                               "zeros replaced by 1e-6", "no_zeros")
            else:
                yield t.insert(fn, f"{name} = _mut_randn_range({name})",
                               f"{name} clamped to [-100, 100]", "randn_range")
                yield t.insert(fn, f"{name} = _mut_no_zeros({name})",
                               f"zeros of {name} replaced by 1e-6", "no_zeros")
            yield from _returned(t, fn, f"_mut_zero_rows({name}, {{value}})",
                                 "all-zero rows give zeros", "zero_rows")


def index_stride(source: str) -> Iterator[Edit]:
    t = _Tree(source)
    for call in t.calls():
        name = _name(call)
        if name == "repeat_interleave" and _is_method(call) and call.args:
            assert isinstance(call.func, ast.Attribute)
            dim = _dim(t, call, 2) or "0"
            yield t.edit(call, f"torch.cat([{t.text(call.func.value)}] * "
                               f"({t.text(call.args[0])}), dim={dim})",
                         "heads tiled (hv % H) instead of repeated (hv // (HV / H))")
        elif name in ("transpose", "t") and _is_method(call):
            assert isinstance(call.func, ast.Attribute)
            yield t.edit(call, f"({t.text(call.func.value)})", "a transpose dropped")
        if name in _AXIS_REDUCTIONS:
            for keyword in call.keywords:
                if keyword.arg == "dim" and isinstance(keyword.value, ast.Constant | ast.UnaryOp):
                    try:
                        axis = int(ast.literal_eval(keyword.value))
                    except (ValueError, TypeError):
                        continue
                    other = {-1: -2, -2: -1}.get(axis, axis - 1 if axis > 0 else axis + 1)
                    yield t.edit(keyword.value, str(other), "a reduction over the next axis")


def _operator_position(t: _Tree, node: ast.BinOp | ast.UnaryOp, symbol: str) -> int | None:
    """Where ``symbol`` (the node's operator) lies in the source."""
    if isinstance(node, ast.UnaryOp):
        start, _ = t.span(node)
        return start if t.source.startswith(symbol, start) else None
    _, left_end = t.span(node.left)
    right_start, _ = t.span(node.right)
    found = t.source.find(symbol, left_end, right_start)
    return None if found < 0 else found


def sign_flip(source: str) -> Iterator[Edit]:
    t = _Tree(source)
    for node in ast.walk(t.tree):
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Sub):
            at = _operator_position(t, node, "-")
            if at is not None:
                yield Edit(at, at + 1, "+", "a - b -> a + b")
        elif isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub) \
                and not isinstance(node.operand, ast.Constant):
            at = _operator_position(t, node, "-")
            if at is not None:
                yield Edit(at, at + 1, "", "a negation dropped")
        elif isinstance(node, ast.AugAssign) and isinstance(node.op, ast.Sub):
            start, end = t.span(node)
            at = t.source.find("-=", start, end)
            if at >= 0:
                yield Edit(at, at + 2, "+=", "-= -> +=")


def constant(source: str) -> Iterator[Edit]:
    t = _Tree(source)
    for node in ast.walk(t.tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, float):
            text = t.text(node)
            mistyped = typo(text) if text and text[0].isdigit() else None
            if mistyped is not None:
                yield t.edit(node, mistyped, "constant mistyped")


def dropped_term(source: str) -> Iterator[Edit]:
    t = _Tree(source)
    for node in ast.walk(t.tree):
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add) \
                and not isinstance(node.right, ast.Constant):  # i + 1: loop-bound's
            at = _operator_position(t, node, "+")
            start, end = t.span(node)
            if at is not None:
                yield Edit(start, end, t.source[start:at].rstrip(), "the last term dropped")
        elif isinstance(node, ast.AugAssign) and isinstance(node.op, ast.Add):
            yield t.edit(node, "pass", "an accumulation skipped")
