"""A problem file's sizes: which integers they are (module-level constant integer
expressions), the file at other sizes, the sizes a validation case or this host runs it
at, counting time and memory (see ``workload.py``)."""

from __future__ import annotations

import ast
import operator
import os
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

__all__ = ["MEMORY_ENV", "MIN_SIZE", "Fitted", "HostMemory", "data_bytes", "fit_to_host",
           "halved", "host_memory", "memory_needed", "problem_sizes", "require_memory",
           "resized_source", "too_large", "validation_cases"]

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
    compiled candidate compiles again for each. The second seed's inputs are views into
    wider buffers (a candidate assuming contiguity reads other numbers)."""
    base = _small(problem)
    cases = [Case("small", base, seed=1),
             Case("small, other seed, inputs strided", base, seed=2, layout="strided")]
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



# -- memory ----------------------------------------------------------------------------
MEMORY_ENV = "SWARMFAB_MEMORY_LIMIT"  # bytes (4G, 512M, 1000000) counted on instead
MEMORY_SHARE = 0.5  # of the memory available, what one problem's data may take
# the data (inputs, weights, outputs) in float32, and again in float64 for the reference
COPIES = 3
TEMPORARIES = 2.0  # room for the forward's intermediates and the baselines' own
_UNITS = {"": 1, "k": 2**10, "m": 2**20, "g": 2**30, "t": 2**40}
_NO_LIMIT = 2**60  # a cgroup v1 "limit" this large is none


@dataclass(frozen=True, slots=True)
class HostMemory:
    """The memory a run can count on here, and where the figure comes from."""

    available: int  # bytes
    source: str

    @property
    def budget(self) -> int:
        """What one problem's data, copies and temporaries may take."""
        return int(self.available * MEMORY_SHARE)


def host_memory() -> HostMemory | None:
    """SWARMFAB_MEMORY_LIMIT when set; else the least of /proc/meminfo's MemAvailable
    and what the cgroup's memory limit leaves (``memory.max`` less what the group uses,
    its inactive page cache aside); None where neither can be read."""
    given = os.environ.get(MEMORY_ENV, "").strip()
    if given:
        return HostMemory(_parse_bytes(given), MEMORY_ENV)
    found = [HostMemory(n, src) for n, src in ((_meminfo_available(), "MemAvailable"),
                                               (_cgroup_available(), "the cgroup's limit"))
             if n is not None]
    return min(found, key=lambda memory: memory.available) if found else None


def _parse_bytes(text: str) -> int:
    number = text.lower().removesuffix("b").removesuffix("i")
    unit = number[-1:] if number[-1:] in _UNITS else ""
    try:
        value = float(number.removesuffix(unit)) * _UNITS[unit]
    except ValueError:
        value = -1.0
    if value <= 0:
        raise WorkloadError(f"{MEMORY_ENV}={text!r}: give bytes, e.g. 8G, 512M or 1000000")
    return int(value)


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="ascii") as file:
            return file.read()
    except (OSError, UnicodeDecodeError):
        return None


def _meminfo_available() -> int | None:
    for line in (_read("/proc/meminfo") or "").splitlines():
        name, _, value = line.partition(":")
        if name == "MemAvailable" and value.split()[0].isdigit():
            return int(value.split()[0]) * 1024
    return None


def _cgroup_available() -> int | None:
    """What the memory cgroup's limit leaves (v2, else v1); None without a limit."""
    for limit_file, usage_file, stat_file, inactive in (
            ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory.current",
             "/sys/fs/cgroup/memory.stat", "inactive_file"),
            ("/sys/fs/cgroup/memory/memory.limit_in_bytes",
             "/sys/fs/cgroup/memory/memory.usage_in_bytes",
             "/sys/fs/cgroup/memory/memory.stat", "total_inactive_file")):
        limit = (_read(limit_file) or "").strip()
        if not limit.isdigit():  # "max", or no such file
            continue
        if int(limit) >= _NO_LIMIT:
            return None
        usage = (_read(usage_file) or "0").strip()
        stats = dict(line.split(maxsplit=1) for line in (_read(stat_file) or "").splitlines()
                     if len(line.split()) == 2)
        cache = int(stats.get(inactive, "0")) if stats.get(inactive, "").isdigit() else 0
        used = max(0, int(usage) - cache) if usage.isdigit() else 0
        return max(0, int(limit) - used)
    return None


def data_bytes(problem: ProblemWorkload, dims: Dims) -> int | None:
    """Bytes of the inputs, weights and outputs at ``dims``, as the file makes them
    (on the meta device: shapes only); None where the file does not run there."""
    try:
        namespace = problem.namespace(dims)
        with torch.device("meta"), torch.no_grad():
            model = namespace["Model"](*namespace["get_init_inputs"]())
            inputs = namespace["get_inputs"]()
            outputs = model(*inputs)
    except Exception:
        return None
    tensors = [*model.state_dict().values(), *_tensors(inputs), *_tensors(outputs)]
    return sum(t.numel() * t.element_size() for t in tensors)


def _tensors(value: object) -> list[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, list | tuple):
        return [t for item in value for t in _tensors(item)]
    if isinstance(value, dict):
        return [t for item in value.values() for t in _tensors(item)]
    return []


def memory_needed(problem: ProblemWorkload, dims: Dims) -> int | None:
    """About how much memory a run at ``dims`` takes: the data in float32 and in float64
    for the reference, times room for temporaries."""
    data = data_bytes(problem, dims)
    return None if data is None else int(data * COPIES * TEMPORARIES)


def _amount(size: float) -> str:
    return f"{size / 1e9:.1f} GB" if size >= 1e9 else f"{size / 1e6:.1f} MB"


def too_large(problem: ProblemWorkload, dims: Dims, needed: int, memory: HostMemory,
              hint: str) -> WorkloadError:
    """The error of a problem that cannot fit this host's memory at ``dims``."""
    return WorkloadError(
        f"{problem.path.name} at {dims.label} needs about {_amount(needed)} (inputs, "
        f"weights and outputs in float32 and float64, with room for temporaries), this "
        f"host has {_amount(memory.available)} ({memory.source}; a problem may take "
        f"{MEMORY_SHARE:.0%} of it); {hint}")


def require_memory(problem: ProblemWorkload, dims: Dims,
                   memory: HostMemory | None = None) -> None:
    """A WorkloadError, before anything is allocated, when the problem at ``dims`` would
    need more memory than this host can give it."""
    memory = memory or host_memory()
    needed = memory_needed(problem, dims)
    if memory is not None and needed is not None and needed > memory.budget:
        raise too_large(problem, dims, needed, memory,
                        "--sizes auto halves the sizes until they fit, or give smaller "
                        "[[sizes]] in a goal file")


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
                max_bytes: int = MAX_BYTES, memory: HostMemory | None = None) -> Fitted:
    """Halve every size together until the problem's memory fits this host's share
    (:func:`memory_needed` against ``memory``, by default :func:`host_memory`), its
    inputs and weights fit in ``max_bytes`` (both judged on the meta device, before any
    allocation) and the eager float32 Model takes at most ``max_eager_s`` per call here
    (median of three after one warm-up). Sizes that cannot be halved far enough to fit
    in memory are a WorkloadError saying how much they need."""
    memory = memory or host_memory()
    fitted: Fitted | None = None
    smallest: tuple[Dims, int, int] | None = None  # the least sizes tried: too large
    for halvings in range(0, 16):
        sizes = halved(problem.sizes, halvings)
        if sizes is None:
            break
        dims = Dims.of(**sizes)
        if halvings and not problem.runs_at(dims):
            break
        needed = memory_needed(problem, dims)
        if memory is not None and needed is not None and needed > memory.budget:
            smallest = (dims, needed, halvings)
            continue
        fitted = Fitted(dims, None, halvings)
        size = problem.meta_bytes(dims)
        if size is not None and size > max_bytes:
            continue
        fitted = Fitted(dims, _eager_seconds(problem, dims, threads), halvings)
        if fitted.eager_s is not None and fitted.eager_s <= max_eager_s:
            return fitted
    if fitted is not None:
        return fitted
    if smallest is None or memory is None:  # not even the file's own sizes run
        return Fitted(Dims.of(**problem.sizes), None, 0)
    dims, needed, halvings = smallest
    done = f"halved {halvings}x, " if halvings else ""
    raise too_large(problem, dims, needed, memory,
                    f"{done}its sizes cannot shrink further (a size would fall under "
                    f"{MIN_SIZE} or the file would not run at them)")


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
