"""Problem files: a PyTorch module in the KernelBench convention, as a :class:`Workload`.

A problem file defines ``class Model(nn.Module)``, ``get_inputs()`` (the forward's
arguments) and ``get_init_inputs()`` (the constructor's), with its sizes as module-level
integer literals (``batch_size = 64``). A candidate answers with ``class ModelNew``.

- **Sizes.** Every module-level ``name = <int>`` of at least :data:`MIN_SIZE` is a size
  (smaller integers are axes, kernel sizes, strides: never changed). A shape is a
  :class:`Dims` of those names; the file is executed again with the literals replaced,
  so expressions derived from them follow. Halving every size together keeps their
  ratios and any divisibility between them (:func:`halved`).
- **Weights.** ``Model(*get_init_inputs())`` is built under a seed drawn from the case
  (:meth:`Case.family_seed`: a case and its twins share it, so fresh inputs in the same
  buffers meet the same weights); ``ModelNew`` is built under another seed and given
  those weights by name. A candidate must declare every parameter and buffer of
  ``Model`` under the same name; it cannot learn the weights from its own
  initialisation, and a candidate that hard-codes them fails the next case's.
- **Reference.** The eager ``Model`` in float64 (weights and floating inputs converted),
  or in float32 when one of its operators has no float64 kernel (then the goal's
  tolerance is what holds it).
- **Calls.** The forward of a candidate or baseline is a module *class*; the first call
  with a case's state builds the instance (outside any timing: the worker makes an
  untimed call first), later calls reuse it.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from swarmfab.errors import CandidateError, WorkloadError
from swarmfab.workloads._base import (
    AnyShape,
    Case,
    Dims,
    Distribution,
    Forward,
    Inputs,
    Outputs,
    Workload,
)
from swarmfab.workloads.problem.cost import meta_cost
from swarmfab.workloads.problem.sizes import MIN_SIZE, problem_sizes, resized_source
from swarmfab.workloads.problem.sizes import validation_cases as _validation_cases

if TYPE_CHECKING:
    from swarmfab.kernels import DesignSpace

__all__ = ["ModuleState", "ProblemWorkload", "build_module", "is_problem_source"]

STATE = "module"  # the input entry that carries a case's weights and constructor args
CANDIDATE_SEED_OFFSET = 104729  # ModelNew is built under another seed than Model

_RNG_LOCK = threading.Lock()  # get_inputs() draws from torch's global generator


def is_problem_source(module: object) -> bool:
    """A module in the problem convention: Model, get_inputs and get_init_inputs."""
    return all(callable(getattr(module, name, None))
               for name in ("Model", "get_inputs", "get_init_inputs"))


@dataclass(eq=False)
class ModuleState:
    """What one case's module is built from: the problem's namespace at the case's
    sizes, the constructor's arguments and the reference weights (by name)."""

    namespace: dict[str, Any]
    init_inputs: tuple[Any, ...]
    weights: dict[str, torch.Tensor]
    key: tuple[str, int, float]  # (sizes, weight seed, noise): equal keys, equal modules

    @property
    def model_class(self) -> type[torch.nn.Module]:
        return self.namespace["Model"]


@dataclass(frozen=True, slots=True)
class _Baseline:
    """A baseline resolved against the case's own namespace (its ``Model`` class)."""

    name: str

    def __call__(self, *arguments: Any) -> Any:
        raise WorkloadError(f"baseline {self.name} is a module: call it through the workload")

    def resolve(self, state: ModuleState) -> type[torch.nn.Module]:
        model = state.model_class
        if self.name == "torch-eager":
            return model
        compiled = _compiled_classes.get(model)
        if compiled is None:
            compiled = _compiled_classes[model] = _torch_compile_class(model)
        return compiled


_compiled_classes: dict[type, type[torch.nn.Module]] = {}


def _torch_compile_class(model: type[torch.nn.Module]) -> type[torch.nn.Module]:
    """``Model`` whose forward runs through ``torch.compile`` with its defaults: the one
    line a user tries first."""

    class TorchCompile(model):  # type: ignore[valid-type, misc]
        def forward(self, *inputs: Any) -> Any:
            compiled = self.__dict__.get("_swarmfab_compiled")
            if compiled is None:
                compiled = self.__dict__["_swarmfab_compiled"] = torch.compile(
                    model.forward.__get__(self))
            return compiled(*inputs)

    return TorchCompile


class ProblemWorkload(Workload):
    """The workload of one problem file (see the module's documentation)."""

    compiling_baselines = frozenset({"torch-compile"})
    python_backend = "torch-module"

    def __init__(self, path: Path, source: str, namespace: dict[str, Any]):
        self.path = path
        self.source = source
        self.name = path.stem
        self.family = "torch-module"
        doc = (namespace.get("__doc__") or "").strip().splitlines()
        self.description = doc[0] if doc else f"the Model of {path.name}"
        self.sizes = problem_sizes(source)
        if not self.sizes:
            raise WorkloadError(f"{path}: no module-level size (an integer literal of at "
                                f"least {MIN_SIZE}, e.g. `batch_size = 64`) to vary")
        self.default_shapes = (Dims.of(**self.sizes),)
        self._namespaces: dict[tuple[tuple[str, int], ...], dict[str, Any]] = {
            tuple(self.sizes.items()): namespace}
        self._lock = threading.Lock()
        self._costs: dict[tuple[tuple[str, int], ...], tuple[float, float] | None] = {}
        self.output_names = self._outputs_on_meta(namespace)

    # -- sizes -----------------------------------------------------------------------
    def dims_of(self, sizes: Mapping[str, int]) -> Dims:
        """The shape with ``sizes`` (the file's own value for any size left out)."""
        unknown = sorted(set(sizes) - set(self.sizes))
        if unknown:
            raise WorkloadError(f"{self.path.name} has no size {', '.join(unknown)}; its "
                                f"sizes are {', '.join(self.sizes) or 'none'}")
        return Dims.of(**{**self.sizes, **{k: int(v) for k, v in sizes.items()}})

    def namespace(self, dims: Dims) -> dict[str, Any]:
        """The problem executed at ``dims`` (cached)."""
        key = dims.sizes
        with self._lock:
            known = self._namespaces.get(key)
        if known is not None:
            return known
        text = resized_source(self.source, dict(key))
        namespace: dict[str, Any] = {"__name__": f"swarmfab_problem_{self.name}",
                                     "__file__": str(self.path)}
        try:
            exec(compile(text, str(self.path), "exec"), namespace)
        except Exception as exc:
            raise WorkloadError(f"{self.path} failed at sizes {dims.label}: {exc!r}") from exc
        with self._lock:
            return self._namespaces.setdefault(key, namespace)

    def runs_at(self, dims: Dims) -> bool:
        """Whether the problem builds and runs at ``dims`` (checked on the meta device:
        shapes only, no memory, no arithmetic)."""
        try:
            namespace = self.namespace(dims)
            with torch.device("meta"), torch.no_grad():
                model = namespace["Model"](*namespace["get_init_inputs"]())
                model(*namespace["get_inputs"]())
        except Exception:
            return False
        return True

    def meta_bytes(self, dims: Dims) -> int | None:
        """Bytes of the inputs and weights at ``dims`` (from the meta device)."""
        try:
            namespace = self.namespace(dims)
            with torch.device("meta"):
                model = namespace["Model"](*namespace["get_init_inputs"]())
                inputs = namespace["get_inputs"]()
        except Exception:
            return None
        tensors = [*model.state_dict().values(), *(x for x in inputs
                                                   if isinstance(x, torch.Tensor))]
        return sum(t.numel() * t.element_size() for t in tensors)

    def _outputs_on_meta(self, namespace: dict[str, Any]) -> tuple[str, ...]:
        try:
            with torch.device("meta"), torch.no_grad():
                model = namespace["Model"](*namespace["get_init_inputs"]())
                result = model(*namespace["get_inputs"]())
        except Exception:
            return ("out",)  # the first real call will tell
        return _output_names(result)

    # -- the contract ----------------------------------------------------------------
    def make_inputs(self, case: Case, dtype: torch.dtype | None = None) -> Inputs:
        dtype = dtype or case.torch_dtype
        if not isinstance(case.shape, Dims):
            raise WorkloadError(f"{self.name} takes named sizes, not {case.shape}")
        namespace = self.namespace(case.shape)
        weight_seed = case.family_seed
        with _RNG_LOCK, torch.random.fork_rng(devices=[]), torch.no_grad():
            torch.manual_seed(weight_seed)
            init_inputs = tuple(namespace["get_init_inputs"]())
            model = namespace["Model"](*init_inputs)
            weights = {name: value.detach().clone()
                       for name, value in model.state_dict(keep_vars=False).items()}
            if case.distribution.weight_noise > 0:
                weights = _trained(weights, case.distribution.weight_noise, weight_seed)
            torch.manual_seed(case.seed)
            arguments = list(namespace["get_inputs"]())
        state = ModuleState(namespace, init_inputs, weights,
                            (case.shape.label, weight_seed, case.distribution.weight_noise))
        inputs: dict[str, Any] = {STATE: state}
        values = torch.Generator().manual_seed(case.seed)
        for index, value in enumerate(arguments):
            if isinstance(value, torch.Tensor) and value.is_floating_point():
                value = _extreme(value, case.distribution, values).to(dtype)
            inputs[f"arg{index}"] = value
        return inputs

    def reference(self, inputs: Inputs) -> Outputs:
        state = _state_of(inputs)
        arguments = _arguments(inputs)
        try:
            return self._reference_in(state, arguments, torch.float64)
        except (RuntimeError, NotImplementedError, TypeError):
            return self._reference_in(state, arguments, torch.float32)

    def _reference_in(self, state: ModuleState, arguments: list[Any],
                      dtype: torch.dtype) -> Outputs:
        with _RNG_LOCK, torch.random.fork_rng(devices=[]):
            model = state.model_class(*state.init_inputs)
        model.load_state_dict(state.weights)
        model = model.to(dtype).eval()
        converted = [x.to(dtype) if isinstance(x, torch.Tensor) and x.is_floating_point()
                     else x for x in arguments]
        with torch.no_grad():
            return _named(model(*converted), self.output_names)

    def call(self, forward: Forward, inputs: Inputs) -> Outputs:
        state = _state_of(inputs)
        module = self.instance(forward, state, device=_device_of(inputs))
        return _named(module(*_arguments(inputs)), self.output_names)

    def instance(self, forward: Forward, state: ModuleState,
                 device: torch.device | None = None) -> torch.nn.Module:
        """The module of ``forward`` (a class, or a baseline) with the case's weights.

        One instance per class and sizes: a case with other weights (another family
        seed) gets them loaded into the live module, as a user loading a checkpoint
        would, so a module that prepared something from its first weights and kept it
        after a reload is caught."""
        cls = forward.resolve(state) if isinstance(forward, _Baseline) else forward
        sizes = state.key[0]
        cache = _instances.pop(sizes, {})
        _instances[sizes] = cache  # most recently used last
        while len(_instances) > MAX_STATES:
            del _instances[next(iter(_instances))]
        known = cache.get(id(cls))
        if known is None:
            module = build_module(cls, state, device)
        else:
            module, loaded = known
            if loaded != state.key:
                with torch.no_grad():
                    module.load_state_dict(_on(state.weights, device), strict=False)
        cache[id(cls)] = (module, state.key)
        return module

    def changed_state(self, forward: Forward, inputs: Inputs) -> tuple[str, ...]:
        """Parameters and buffers of the module that no longer equal the weights it was
        given (a module may not fold anything into them)."""
        state = _state_of(inputs)
        cls = forward.resolve(state) if isinstance(forward, _Baseline) else forward
        known = _instances.get(state.key[0], {}).get(id(cls))
        if known is None:
            return ()
        own = known[0].state_dict()
        return tuple(name for name, value in state.weights.items()
                     if name in own and not torch.equal(own[name].detach().cpu(), value))

    def baselines(self) -> dict[str, Forward]:
        return {"torch-eager": _Baseline("torch-eager"),
                "torch-compile": _Baseline("torch-compile")}

    def validation_cases(self) -> list[Case]:
        return _validation_cases(self)

    def battery_cases(self, threads: int) -> list[Case]:
        from swarmfab.workloads.problem.battery import battery_cases

        return battery_cases(self, threads)

    def domain_baseline(self, case: Case) -> str | None:
        """Inputs far from what ``get_inputs()`` draws are inside the problem only where
        the file's own eager Model still answers them."""
        dist = case.distribution
        return "torch-eager" if dist.input_scale != 1.0 or dist.zero_prob > 0 else None

    def flops(self, shape: AnyShape) -> float | None:
        cost = self._cost(shape)
        return None if cost is None else cost[0]

    def min_bytes(self, shape: AnyShape) -> float | None:
        cost = self._cost(shape)
        return None if cost is None else cost[1]

    def _cost(self, shape: AnyShape) -> tuple[float, float] | None:
        if not isinstance(shape, Dims):
            return None
        with self._lock:
            if shape.sizes in self._costs:
                return self._costs[shape.sizes]
        cost = meta_cost(self.namespace(shape))
        with self._lock:
            return self._costs.setdefault(shape.sizes, cost)

    def design_space(self) -> DesignSpace:
        from swarmfab.kernels.module import module_space

        return module_space(self.name, self.source)


# per process: the module each (sizes, class) was built as, with the state whose weights
# it holds, so a job's calls share one instance (and one compilation); the sizes used
# last are kept
MAX_STATES = 16
_instances: dict[str, dict[int, tuple[torch.nn.Module, tuple[str, int, float]]]] = {}


def _on(weights: dict[str, torch.Tensor], device: torch.device | None
        ) -> dict[str, torch.Tensor]:
    if device is None or device.type == "cpu":
        return weights
    return {name: value.to(device) for name, value in weights.items()}


def build_module(cls: Any, state: ModuleState, device: torch.device | None) -> torch.nn.Module:
    """``cls`` built under its own seed, given the reference weights by name: every
    parameter and buffer of ``Model`` must be one of the candidate's, same shape."""
    if not (isinstance(cls, type) and issubclass(cls, torch.nn.Module)):
        raise CandidateError(f"expected an nn.Module class, got {cls!r}")
    with _RNG_LOCK, torch.random.fork_rng(devices=[]), torch.no_grad():
        torch.manual_seed(state.key[1] + CANDIDATE_SEED_OFFSET)
        module = cls(*state.init_inputs)
    own = module.state_dict()
    missing = [name for name in state.weights if name not in own]
    if missing:
        raise CandidateError(f"{cls.__name__} has no parameter or buffer named "
                             f"{', '.join(missing[:5])} (Model's weights are given by name)")
    wrong = [f"{name} {tuple(own[name].shape)} (Model: {tuple(value.shape)})"
             for name, value in state.weights.items() if own[name].shape != value.shape]
    if wrong:
        raise CandidateError(f"{cls.__name__}: weights of another shape: {'; '.join(wrong[:3])}")
    module.load_state_dict(state.weights, strict=False)
    if device is not None and device.type != "cpu":
        module = module.to(device)
    return module.eval()


def _extreme(value: torch.Tensor, dist: Distribution, gen: torch.Generator) -> torch.Tensor:
    """An input as the case's distribution asks: scaled, some elements exactly zero."""
    if dist.input_scale != 1.0:
        value = value * dist.input_scale
    if dist.zero_prob > 0:
        keep = torch.rand(value.shape, generator=gen) >= dist.zero_prob
        value = value * keep.to(value.dtype)
    return value


def _trained(weights: dict[str, torch.Tensor], noise: float, seed: int
             ) -> dict[str, torch.Tensor]:
    """``weights`` moved off their initial values (:attr:`Distribution.weight_noise`): a
    constant tensor gets noise of size ``noise``, any other is scaled by 1 +- ``noise``
    (so a positive one, a running variance, stays positive)."""
    gen = torch.Generator().manual_seed(seed + 1)
    moved = {}
    for name, value in weights.items():
        if value.is_floating_point() and value.numel():
            if bool((value == value.flatten()[0]).all()):
                value = value + noise * torch.randn(value.shape, generator=gen).to(value.dtype)
            else:
                scale = 1 + noise * (2 * torch.rand(value.shape, generator=gen) - 1)
                value = value * scale.to(value.dtype)
        moved[name] = value
    return moved


def _state_of(inputs: Inputs) -> ModuleState:
    state = inputs.get(STATE)
    if not isinstance(state, ModuleState):
        raise WorkloadError("problem inputs carry no module state")
    return state


def _arguments(inputs: Inputs) -> list[Any]:
    return [value for name, value in inputs.items() if name != STATE]


def _device_of(inputs: Inputs) -> torch.device | None:
    return next((value.device for value in inputs.values()
                 if isinstance(value, torch.Tensor)), None)


def _output_names(result: Any) -> tuple[str, ...]:
    if isinstance(result, tuple | list):
        return tuple(f"out{index}" for index in range(len(result)))
    return ("out",)


def _named(result: Any, names: tuple[str, ...]) -> Outputs:
    values = list(result) if isinstance(result, tuple | list) else [result]
    if len(values) != len(names):
        raise CandidateError(f"returned {len(values)} output(s); Model returns {len(names)}")
    for name, value in zip(names, values, strict=True):
        if not isinstance(value, torch.Tensor):
            raise CandidateError(f"output {name} is {type(value).__name__}, not a tensor")
    return dict(zip(names, values, strict=True))
