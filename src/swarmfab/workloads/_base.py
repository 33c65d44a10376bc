"""The Workload contract: what an operator must declare so swarmfab can optimise it.

A workload owns the mathematics of one operator: how to make inputs, the float64
reference, the validation cases, the PyTorch baselines a user would otherwise run, the C
ABI of compiled candidates and a cost model for the roofline. Everything above it
(verifier, measurement, agents, swarm) is written against this class alone.
"""

from __future__ import annotations

import random
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field, replace
from typing import TYPE_CHECKING, Any, Literal

import torch

from swarmfab.errors import CandidateError

if TYPE_CHECKING:
    from swarmfab.kernels import DesignSpace

__all__ = [
    "LAYOUTS",
    "AnyShape",
    "Case",
    "Dims",
    "Distribution",
    "Forward",
    "Inputs",
    "KernelRefusedError",
    "Outputs",
    "Shape",
    "Workload",
]

Inputs = Mapping[str, torch.Tensor | float | None]
"""Named input tensors (and scalars) of one call, as the workload's forward expects them."""

Outputs = Mapping[str, torch.Tensor]
"""Named outputs of one call, compared one by one against the reference."""

CFunction = Any
"""A symbol of a ctypes.CDLL (ctypes' function-pointer class is private)."""

Forward = Callable[..., Any]
"""A candidate or baseline entry point with the workload's Python signature."""


class KernelRefusedError(CandidateError):
    """A compiled kernel returned a non-zero status: it does not support these arguments."""


@dataclass(frozen=True, slots=True)
class Shape:
    """Sizes of one linear-attention call: q, k ``[B,T,H,K]``, v ``[B,T,HV,V]``.

    ``pool`` N > 0: the call updates states in place in a pool of N (>= B) states, each
    sequence in a slot of its own, as serving engines decode (implies an initial state).
    ``lengths``: packed sequences of these lengths (fla's ``cu_seqlens``: B = 1, T their
    sum), each with an initial and a final state of its own.
    """

    B: int
    T: int
    H: int
    HV: int
    K: int
    V: int
    initial_state: bool = False
    pool: int = 0
    lengths: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        if self.pool and (self.pool < self.B or not self.initial_state):
            raise ValueError(f"a pool of {self.pool} states needs initial_state and at "
                             f"least one state per sequence (B = {self.B})")
        if self.lengths and (self.B != 1 or self.pool or sum(self.lengths) != self.T
                             or min(self.lengths) < 1):
            raise ValueError(f"packed sequences need B = 1, no pool and T = the sum of their "
                             f"lengths (each at least 1): B = {self.B}, T = {self.T}, "
                             f"lengths {self.lengths}")

    @property
    def sequences(self) -> int:
        """Sequences with a state of their own: B, or the packed sequences."""
        return len(self.lengths) or self.B

    @property
    def label(self) -> str:
        heads = f"H{self.H}" if self.HV == self.H else f"H{self.H}/HV{self.HV}"
        state = f" +pool{self.pool}" if self.pool else " +h0" if self.initial_state else ""
        batch = f"varlen{len(self.lengths)}" if self.lengths else f"B{self.B}"
        return f"{batch} T{self.T} {heads} K{self.K} V{self.V}{state}"


@dataclass(frozen=True, slots=True)
class Dims:
    """Named sizes of a user workload's call, e.g. ``Dims.of(rows=4096, cols=4096)``."""

    sizes: tuple[tuple[str, int], ...]

    @staticmethod
    def of(**sizes: int) -> Dims:
        return Dims(tuple(sizes.items()))

    def __getitem__(self, name: str) -> int:
        return dict(self.sizes)[name]

    @property
    def label(self) -> str:
        return " ".join(f"{name}={size}" for name, size in self.sizes)


AnyShape = Shape | Dims
"""The delta family's :class:`Shape`, or the named :class:`Dims` of any other workload."""


@dataclass(frozen=True, slots=True)
class Distribution:
    """How input values are drawn (the families real models and fla's tests use).

    ``gate_divisor`` n gives g = logsigmoid(randn) / n: n = 0.1 is strong decay (about -7
    per token), n = 10 is weak. ``gate_zero_prob`` masks gates to exactly zero.
    ``beta`` picks sigmoid(randn) or values pinned near 0 or 1; ``magnitude`` scales v and
    the initial state; ``scale`` is passed to the kernel (fla tests 1 and 0.1 too).

    Extreme values, as the verification battery draws them: ``gate_fill`` sets a share
    ``gate_fill_prob`` of the gates to exactly that value (written as text, so "-inf"
    survives JSON: "0", "-100", "-inf"); ``beta_fill`` sets every beta. For any other
    workload, ``input_scale`` multiplies every floating-point input and ``zero_prob``
    sets that share of their elements to exactly zero; ``weight_noise`` moves a module's
    weights off their initial values, as training does (a constant tensor, LayerNorm's
    ones and zeros, gets noise of that size; any other is scaled by 1 +- that share).
    """

    gate_divisor: float = 1.0
    gate_zero_prob: float = 0.0
    beta: Literal["sigmoid", "near0", "near1"] = "sigmoid"
    magnitude: float = 1.0
    scale: float | None = None  # the attention scale; None: the default K ** -0.5
    gate_fill: str | None = None
    gate_fill_prob: float = 1.0
    beta_fill: float | None = None
    input_scale: float = 1.0
    zero_prob: float = 0.0
    weight_noise: float = 0.0


TWIN_SEED_OFFSET = 7919
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}
"""The dtypes a goal may give its inputs in, by name."""
LAYOUTS = ("contiguous", "strided", "transposed")
"""How a case's inputs lie in memory (:attr:`Case.layout`)."""


@dataclass(frozen=True, slots=True)
class Case:
    """A reproducible validation input: shape, distribution, seed and the dtype its
    floating-point inputs are given in (a goal's ``dtype``: every case an evaluator runs
    carries it, :meth:`in_dtype`).

    ``layout``: the inputs as the call receives them: ``contiguous``, ``strided`` (each
    a view into a wider buffer at an offset, as q, k and v split from one fused
    projection) or ``transposed`` (the last two dimensions in column-major order); the
    values are the same. ``threads``: the threads the case runs on (0: the evaluator's).
    """

    name: str
    shape: AnyShape
    distribution: Distribution = field(default_factory=Distribution)
    seed: int = 0
    origin: str = "builtin"
    dtype: str = "float32"
    layout: str = "contiguous"
    threads: int = 0

    def __post_init__(self) -> None:
        if self.layout not in LAYOUTS:
            raise ValueError(f"layout {self.layout!r} is not one of {', '.join(LAYOUTS)}")

    def twin(self) -> Case:
        """Same shape and distribution, other values: the verifier writes them into the
        very buffers of this case's call (fresh inputs, same buffers)."""
        return replace(self, name=f"{self.name} (fresh inputs, same buffers)",
                       seed=self.seed + TWIN_SEED_OFFSET)

    def in_dtype(self, dtype: str) -> Case:
        return self if dtype == self.dtype else replace(self, dtype=dtype)

    @property
    def torch_dtype(self) -> torch.dtype:
        return DTYPES[self.dtype]

    @property
    def family_seed(self) -> int:
        """The seed a case shares with its twins: state that is not an input (a module's
        weights) is drawn from it, so a twin's fresh inputs meet the same state."""
        return self.seed % TWIN_SEED_OFFSET

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["shape_kind"] = "dims" if isinstance(self.shape, Dims) else "delta"
        if data["shape"].get("pool") == 0:
            del data["shape"]["pool"]  # records from before pools read the same
        if data["shape"].get("lengths") == ():
            del data["shape"]["lengths"]  # and from before packed sequences
        return data

    @staticmethod
    def from_dict(data: dict[str, Any]) -> Case:
        """Inverse of :meth:`to_dict`; raises TypeError/KeyError on a malformed record."""
        shape: AnyShape
        if data.get("shape_kind") == "dims":
            shape = Dims(tuple((str(n), int(v)) for n, v in data["shape"]["sizes"]))
        else:
            shape = Shape(**{**data["shape"],
                             "lengths": tuple(data["shape"].get("lengths", ()))})
        return Case(
            name=data["name"], shape=shape,
            distribution=Distribution(**data["distribution"]), seed=int(data["seed"]),
            origin=data.get("origin", "stored"), dtype=_dtype_name(data.get("dtype", "float32")),
            layout=str(data.get("layout", "contiguous")), threads=int(data.get("threads", 0)),
        )


def _dtype_name(name: object) -> str:
    if name not in DTYPES:
        raise KeyError(f"dtype {name!r} is not one of {', '.join(DTYPES)}")
    return str(name)


@dataclass(frozen=True, slots=True)
class Tolerances:
    """Acceptance thresholds for one output: RMS error ratio and max-abs error.

    ``max_abs_ratio`` bounds max |out - ref| relative to max |ref| (a localised error that
    the RMS would dilute still fails).
    """

    rms_ratio: float
    max_abs_ratio: float


class Workload(ABC):
    """An operator swarmfab can optimise: the public contract of built-in and user workloads.

    Subclasses are stateless and cheap to create. The abstract methods are required; the
    others have defaults that switch a feature off (no C ABI, no roofline, no fuzzing,
    no design space).
    """

    name: str
    # workloads whose lessons transfer to each other (same math, same knobs); "" = the name
    family: str = ""
    description: str = ""
    c_symbol: str = ""
    # further entry points a compiled candidate may export, as ``<c_symbol>_<suffix>``:
    # the C backend hands those present to wrap_c as keyword arguments named by suffix
    c_optional_symbols: tuple[str, ...] = ()
    default_shapes: tuple[AnyShape, ...] = ()
    output_names: tuple[str, ...] = ()
    source_file: str | None = None  # set by swarmfab when loaded from a user's file
    dtypes: tuple[str, ...] = ("float32",)  # what a goal's ``dtype`` may be (DTYPES)
    opt_in_baselines: frozenset[str] = frozenset()  # timed only when asked for by name
    compiling_baselines: frozenset[str] = frozenset()  # start a compiler when first called
    # compile just in time in subprocesses (Triton's ptxas), so their jobs may start
    # processes; unlike the compiling ones, they may be a run's first incumbent
    jit_baselines: frozenset[str] = frozenset()
    cuda_baselines: frozenset[str] = frozenset()  # run on a CUDA device only (fla's kernels)
    python_backend: str = "python"  # the backend of a .py candidate file
    # whether its jobs use torch's compiler beyond the compiling baselines (a candidate
    # compiled by torch.compile, a model traced on the meta device): the sandbox then
    # imports it once, before any job, instead of in every job that needs it
    jobs_compile: bool = True

    def dims_of(self, sizes: Mapping[str, int]) -> AnyShape:
        """The shape with these named sizes (a goal's ``[[sizes]]``); ValueError where the
        workload takes no named sizes or not these."""
        raise ValueError(f"workload {self.name} takes no named sizes; give [[shapes]]")

    def default_baselines(self, device: str = "cpu") -> list[str]:
        """The baselines timed unless the user names others: on a CUDA device the GPU
        ones where there are some, elsewhere every standard one that runs on the CPU."""
        names = [name for name in self.baselines() if name not in self.opt_in_baselines]
        on_gpu = [name for name in names if name in self.cuda_baselines]
        if device == "cuda" and on_gpu:
            return on_gpu
        return [name for name in names if name not in self.cuda_baselines]

    @abstractmethod
    def make_inputs(self, case: Case, dtype: torch.dtype | None = None) -> Inputs:
        """Draw the inputs of ``case`` deterministically from its seed, in ``dtype``
        (None: the case's own)."""

    def output_dtype(self, case: Case, name: str) -> torch.dtype:
        """The dtype output ``name`` must come back in for ``case``: the case's own."""
        return case.torch_dtype

    @abstractmethod
    def reference(self, inputs: Inputs) -> Outputs:
        """The float64 reference outputs. Slow and obviously correct."""

    @abstractmethod
    def call(self, forward: Forward, inputs: Inputs) -> Outputs:
        """Call a candidate or baseline with the workload's signature; name its outputs."""

    @abstractmethod
    def baselines(self) -> dict[str, Forward]:
        """PyTorch implementations a user could pick today, by name."""

    @abstractmethod
    def validation_cases(self) -> list[Case]:
        """The built-in validation corpus: small cases that cover the edge conditions."""

    def written_in_place(self, inputs: Inputs) -> Mapping[str, str]:
        """Outputs a call writes into one of its inputs by design (output name -> input
        name), as a state pool decoded in place: the probes let exactly that input change
        and that output share its memory. None by default."""
        return {}

    def call_lean(self, forward: Forward, inputs: Inputs) -> Outputs | None:
        """Call without the optional outputs (e.g. no final state); None: no such call.

        Verification runs it too, so a kernel that breaks when an optional output is not
        requested (a NULL pointer it writes anyway) is caught."""
        return None

    def wrap_c(
        self, function: CFunction, *, fill_outputs: bool = True, device: str = "cpu"
    ) -> Forward:
        """Adapt a compiled ``c_symbol`` to the Python signature (sets argtypes).

        With ``fill_outputs`` the output buffers start as NaN, so an element the kernel
        never writes fails verification instead of passing by luck. With ``device`` =
        "cuda" the pointers are device pointers (a CUDA kernel with the same ABI).
        """
        raise CandidateError(f"workload {self.name} declares no C ABI; give a Python file")

    def flops(self, shape: AnyShape) -> float | None:
        """Floating-point operations of one call (documented formula); None: unknown."""
        return None

    def min_bytes(self, shape: AnyShape) -> float | None:
        """Bytes an ideal fused kernel must move, inputs in float32; None: unknown (no
        roofline). A workload that lists other :attr:`dtypes` also takes ``dtype=`` (a
        name in DTYPES) here: :func:`compulsory_bytes` passes it for those only."""
        return None

    def fuzz_cases(self, rng: random.Random, count: int) -> list[Case]:
        """Random small cases for fuzzing; none by default."""
        return []

    def battery_cases(self, threads: int) -> list[Case]:
        """The verification battery: what a candidate meets before it is crowned,
        exported or refreshed, and in ``swarmfab verify``, beyond the fast corpus. By
        default the corpus's first case with its inputs in other memory layouts and on
        one thread and on ``threads``; workloads add real sizes and extreme values."""
        cases = self.validation_cases()[:1]
        if not cases:
            return []
        first = cases[0]
        return [replace(first, name=f"battery: {first.name}, inputs {layout}", layout=layout,
                        seed=first.seed + 101 + index)
                for index, layout in enumerate(LAYOUTS[1:])] + [
                replace(first, name=f"battery: {first.name}, {n} thread(s)", threads=n,
                        seed=first.seed + 201 + n) for n in sorted({1, max(1, threads)})]

    def domain_baseline(self, case: Case) -> str | None:
        """The baseline whose answer on ``case`` says whether the case lies inside what
        the operator is defined for (the battery leaves out a case that baseline fails,
        saying why); None: every case is inside (the default)."""
        return None

    def changed_state(self, forward: Forward, inputs: Inputs) -> tuple[str, ...]:
        """State an implementation was given besides its inputs (a module's parameters
        and buffers) that its calls changed; none by default."""
        return ()

    def probe_shape(self, shape: AnyShape) -> tuple[AnyShape, float] | None:
        """A cheaper shape whose reference and baseline times, multiplied by the factor,
        estimate those of ``shape``: a run times it to tell, before its setup, whether the
        setup fits the budget. None: no such shape (no estimate is made)."""
        return None

    def design_space(self) -> DesignSpace | None:
        """The space built-in agents search for ``swarmfab run``; None: nothing to search."""
        return None

    def gpu_design_space(self) -> DesignSpace | None:
        """The space searched for a goal with ``device = "cuda"``; None: nothing to search."""
        return None

    def tolerances(self, dtype: torch.dtype) -> Tolerances:
        """Default thresholds per input dtype (see docs/verification.md for the measurements)."""
        if dtype == torch.float32:
            return Tolerances(rms_ratio=1e-4, max_abs_ratio=1e-3)
        return Tolerances(rms_ratio=5e-3, max_abs_ratio=5e-2)


def compulsory_bytes(workload: Workload, shape: AnyShape, dtype: str = "float32"
                     ) -> float | None:
    """What a call of ``shape`` must move with inputs in ``dtype`` (a workload's
    ``min_bytes`` takes ``dtype=`` only where it lists other dtypes)."""
    if dtype == "float32":
        return workload.min_bytes(shape)
    return workload.min_bytes(shape, dtype=dtype)  # type: ignore[call-arg]
