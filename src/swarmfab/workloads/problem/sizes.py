"""A problem file's sizes: which integers they are, the file at other sizes, the sizes a
validation case or this host runs it at (see ``_problem.py``)."""

from __future__ import annotations

import ast
import operator
import statistics
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from swarmfab.errors import WorkloadError
from swarmfab.workloads._base import Case, Dims

if TYPE_CHECKING:
    from swarmfab.workloads.problem.workload import ProblemWorkload

__all__ = ["MIN_SIZE", "Fitted", "fit_to_host", "halved", "problem_sizes", "resized_source",
           "validation_cases"]

MIN_SIZE = 8  # module-level integers below this are axes, kernel sizes, strides


@dataclass(frozen=True, slots=True)
class _SizeSite:
    name: str
    value: int
    line: int  # 1-based, where the value's expression starts
    start: int  # its column (UTF-8 bytes)
    end_line: int  # where it ends
    end: int


# the operators a size's constant expression may use (``N = 2048 * 2``, ``M = 2**12 + 1``)
_OPERATORS: dict[type[ast.operator], Callable[[int, int], int]] = {
    ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
    ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod, ast.Pow: operator.pow,
    ast.LShift: operator.lshift,
}
_MAX_EXPONENT = 64  # of ** and <<: a size, not a number that takes a while to compute
_MAX_INT = 2**63


def _constant_int(node: ast.expr) -> int | None:
    """The value of an integer expression made of literals and + - * // % ** <<, or None
    (a name, a call, a float, a division by zero...): evaluated on the tree, never run."""
    if isinstance(node, ast.Constant):
        return node.value if type(node.value) is int else None
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.UAdd | ast.USub):
        value = _constant_int(node.operand)
        return None if value is None else (-value if isinstance(node.op, ast.USub) else value)
    if not (isinstance(node, ast.BinOp) and type(node.op) in _OPERATORS):
        return None
    left, right = _constant_int(node.left), _constant_int(node.right)
    if left is None or right is None:
        return None
    if isinstance(node.op, ast.Pow | ast.LShift) and not 0 <= right <= _MAX_EXPONENT:
        return None
    if isinstance(node.op, ast.FloorDiv | ast.Mod) and right == 0:
        return None
    if isinstance(node.op, ast.Pow) and abs(left) > _MAX_INT:
        return None
    value = _OPERATORS[type(node.op)](left, right)
    return value if abs(value) <= _MAX_INT else None


def _size_sites(source: str) -> list[_SizeSite]:
    """Module-level ``name = <constant integer expression>`` assignments of at least
    MIN_SIZE: a literal (``N = 4096``) or literals combined (``N = 2048 * 2``); an
    expression naming another size (``out = 2 * N``) is derived from it, not a size."""
    sites = []
    for node in ast.parse(source).body:
        target: ast.expr | None = None
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target = node.targets[0]
        elif isinstance(node, ast.AnnAssign):
            target = node.target
        value = getattr(node, "value", None)
        if not (isinstance(target, ast.Name) and isinstance(value, ast.expr)):
            continue
        number = _constant_int(value)
        if number is None or number < MIN_SIZE:
            continue
        if value.end_lineno is None or value.end_col_offset is None:
            continue
        sites.append(_SizeSite(target.id, number, value.lineno, value.col_offset,
                               value.end_lineno, value.end_col_offset))
    return sites


def problem_sizes(source: str) -> dict[str, int]:
    """The sizes a problem file exposes, in the order it declares them."""
    return {site.name: site.value for site in _size_sites(source)}


def resized_source(source: str, sizes: Mapping[str, int]) -> str:
    """``source`` with its sizes replaced by ``sizes``, each site's whole expression by
    the new literal (names it does not have are an error; names left out keep their
    value and their expression)."""
    sites = {site.name: site for site in _size_sites(source)}
    unknown = sorted(set(sizes) - set(sites))
    if unknown:
        raise WorkloadError(f"unknown size(s) {', '.join(unknown)}; the file's sizes are "
                            f"{', '.join(sites) or 'none'}")
    encoded = source.encode()  # ast columns are UTF-8 byte offsets
    starts = [0]  # each line's first byte
    for line in source.splitlines(keepends=True):
        starts.append(starts[-1] + len(line.encode()))
    spans = sorted(((starts[site.line - 1] + site.start, starts[site.end_line - 1] + site.end,
                     int(size)) for name, size in sizes.items() for site in (sites[name],)),
                   reverse=True)  # from the end, so earlier offsets stay valid
    for begin, end, size in spans:
        encoded = encoded[:begin] + str(size).encode() + encoded[end:]
    return encoded.decode()


def halved(sizes: Mapping[str, int], times: int = 1) -> dict[str, int] | None:
    """Every size divided by 2**times, rounded to the nearest integer (4095 halves to
    2048: exact where a size divides, so ratios and divisibility hold as far as the file's
    sizes had them), or None when one would fall under MIN_SIZE."""
    divisor = 2 ** times
    smaller = {name: (size + divisor // 2) // divisor for name, size in sizes.items()}
    if any(size < MIN_SIZE for size in smaller.values()):
        return None
    return smaller


# -- validation cases ------------------------------------------------------------------
SMALL_BYTES = 2 * 2**20  # validation cases shrink until inputs and weights fit in this


def validation_cases(problem: ProblemWorkload) -> list[Case]:
    """Seeds and sizes that catch a candidate tuned to one shape: the problem halved
    until small, with two seeds; the same with every size changed at once (else each
    size alone, where the file allows it); and smaller still. Few distinct shapes: a
    compiled candidate compiles again for each."""
    base = _small(problem)
    cases = [Case("small", base, seed=1), Case("small, other seed", base, seed=2)]
    sizes = dict(base.sizes)
    changed = {name: size + size // 2 for name, size in sizes.items()}
    if problem.runs_at(Dims.of(**changed)):
        label = ", ".join(f"{name}={size}" for name, size in changed.items())
        cases.append(Case(f"small, every size changed ({label})", Dims.of(**changed), seed=3))
    else:
        for name, size in sizes.items():
            for other in (size + size // 2, size + MIN_SIZE, size - MIN_SIZE // 2):
                dims = problem.dims_of({**sizes, name: other})
                if other >= 1 and problem.runs_at(dims):
                    cases.append(Case(f"small, {name}={other}", dims, seed=len(cases) + 1))
                    break
    smaller = halved(sizes)
    if smaller is not None and problem.runs_at(Dims.of(**smaller)):
        cases.append(Case("smaller", Dims.of(**smaller), seed=len(cases) + 1))
    return cases


def _small(problem: ProblemWorkload) -> Dims:
    dims = problem.default_shapes[0]
    assert isinstance(dims, Dims)
    for times in range(1, 12):
        size = problem.meta_bytes(dims)
        if size is not None and size <= SMALL_BYTES:
            break
        smaller = halved(dict(problem.sizes), times)
        if smaller is None or not problem.runs_at(Dims.of(**smaller)):
            break
        dims = Dims.of(**smaller)
    return dims



# -- sizes for this host ---------------------------------------------------------------
MAX_EAGER_S = 0.1  # the eager Model's time per call a problem is shrunk to (auto sizes)
MAX_BYTES = 256 * 2**20  # inputs and weights, before anything is allocated


@dataclass(frozen=True, slots=True)
class Fitted:
    """The sizes a problem runs at on this host, and why."""

    dims: Dims
    eager_s: float | None  # the eager Model's median time per call at ``dims``
    halvings: int  # how many times every size was halved

    def describe(self, original: Mapping[str, int]) -> str:
        if not self.halvings:
            return f"sizes as in the file ({self.dims.label})"
        changed = ", ".join(f"{name} {original[name]}->{size}"
                            for name, size in self.dims.sizes if original[name] != size)
        timed = "" if self.eager_s is None else f", eager {self.eager_s * 1e3:.1f} ms"
        return f"sizes halved {self.halvings}x for this host: {changed}{timed}"


def fit_to_host(problem: ProblemWorkload, threads: int, max_eager_s: float = MAX_EAGER_S,
                max_bytes: int = MAX_BYTES) -> Fitted:
    """Halve every size together until the inputs and weights fit in ``max_bytes``
    (judged on the meta device, before any allocation) and the eager float32 Model takes
    at most ``max_eager_s`` per call here (median of three after one warm-up)."""
    eager_s = None
    for halvings in range(0, 16):
        sizes = halved(problem.sizes, halvings) if halvings else dict(problem.sizes)
        if sizes is None:
            break
        dims = Dims.of(**sizes)
        if halvings and not problem.runs_at(dims):
            break
        fitted = Fitted(dims, eager_s, halvings)
        size = problem.meta_bytes(dims)
        if size is not None and size > max_bytes:
            continue
        eager_s = _eager_seconds(problem, dims, threads)
        fitted = Fitted(dims, eager_s, halvings)
        if eager_s <= max_eager_s:
            return fitted
    return fitted


def _eager_seconds(problem: ProblemWorkload, dims: Dims, threads: int) -> float:
    inputs = problem.make_inputs(Case("sizing", dims, seed=1))
    forward = problem.baselines()["torch-eager"]
    previous = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        with torch.no_grad():
            problem.call(forward, inputs)
            times = []
            for _ in range(3):
                begin = time.perf_counter()
                problem.call(forward, inputs)
                times.append(time.perf_counter() - begin)
    finally:
        torch.set_num_threads(previous)
    return statistics.median(times)
