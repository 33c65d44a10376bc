"""ggml's fused gated delta rule (``ggml_gated_delta_net``) on the CPU, through ctypes:
the operator llama.cpp runs for Kimi Linear and Qwen3-Next, the strongest CPU peer. It
is the ``ggml`` baseline (opt-in) where the libraries are found, never required.

The libraries are looked for in ``$SWARMFAB_GGML_LIB``, then in the build directory of
``scripts/build_ggml.sh`` (``.swarmfab/peers/ggml/lib``, under the working directory or
this checkout), then in the ``libggml-python`` wheel (prebuilt, AVX2). libggml-base and
libggml-cpu are loaded once per process; ggml >= 0.15 is needed (the op's 8-argument
form, with an explicit count of state snapshots).

Layouts: a row-major torch shape is ggml's ``ne`` reversed, so fla's q ``[B,T,H,K]`` is
ggml's ``[K,H,T,B]`` as it lies, and the gate (``[B,T,HV,K]`` or ``[B,T,HV]``) and beta
need no copy either. ggml keeps a state with the key index fastest, the transpose of
fla's ``[K,V]``; states are transposed where they cross between the two. The op needs
K == V, always scales o by 1/sqrt(K) (another scale prescales q) and gives value head h
the q/k head ``h % H`` where fla uses ``h // (HV/H)`` (q and k are repeated per value
head when H < HV). Its result is one tensor: o, then the final states.

Two ways to call it: :meth:`GatedDeltaNet.forward`, fla's signature (pools gathered and
scattered around it by ``swarmfab.workloads.delta.pool``), and :class:`NativeStep`, the
op as llama.cpp runs it: the state pool in ggml's layout, gathered (``ggml_get_rows``)
and written back (``ggml_set_rows``) within the one graph a step computes.
"""

from __future__ import annotations

import ctypes
import functools
import importlib.util
import math
import os
import re
import weakref
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from swarmfab.workloads.delta.pool import checked_indices

__all__ = ["ENV_VAR", "GatedDeltaNet", "GgmlUnavailable", "NativeStep", "available",
           "check_version", "describe"]

ENV_VAR = "SWARMFAB_GGML_LIB"
BUILD_DIR = Path(".swarmfab") / "peers" / "ggml" / "lib"
MIN_VERSION = (0, 15)
_F32, _I32 = 0, 26
_OBJECT_SIZE = 32  # sizeof(struct ggml_object): ggml_tensor_overhead() minus the tensor
_ALIGN = 16  # GGML_MEM_ALIGN
_FEATURES = ("sse3", "ssse3", "avx", "avx2", "avx_vnni", "f16c", "fma", "bmi2", "avx512",
             "avx512_vbmi", "avx512_vnni", "avx512_bf16", "amx_int8", "neon", "sve")
P = ctypes.c_void_p
I64 = ctypes.c_int64


class GgmlUnavailable(RuntimeError):
    """ggml cannot be used here; the message says why and what to do."""


class _InitParams(ctypes.Structure):
    _fields_ = [("mem_size", ctypes.c_size_t), ("mem_buffer", P), ("no_alloc", ctypes.c_bool)]


class _CPlan(ctypes.Structure):
    _fields_ = [("work_size", ctypes.c_size_t), ("work_data", P), ("n_threads", ctypes.c_int),
                ("threadpool", P), ("abort_callback", P), ("abort_callback_data", P),
                ("use_ref", ctypes.c_bool)]


class _ThreadpoolParams(ctypes.Structure):
    _fields_ = [("cpumask", ctypes.c_bool * 512), ("n_threads", ctypes.c_int),
                ("prio", ctypes.c_int), ("poll", ctypes.c_uint32),
                ("strict_cpu", ctypes.c_bool), ("paused", ctypes.c_bool)]


class _Tensor(ctypes.Structure):
    """``struct ggml_tensor`` of ggml 0.15 to 0.25 (checked at load: :func:`_layout_ok`)."""

    _fields_ = [("type", ctypes.c_int), ("buffer", P), ("ne", I64 * 4),
                ("nb", ctypes.c_size_t * 4), ("op", ctypes.c_int),
                ("op_params", ctypes.c_int32 * 16), ("flags", ctypes.c_int32), ("src", P * 10),
                ("view_src", P), ("view_offs", ctypes.c_size_t), ("data", P),
                ("name", ctypes.c_char * 64), ("extra", P), ("padding", ctypes.c_char * 8)]


_PROTOTYPES: dict[str, tuple[list[Any], Any]] = {
    "ggml_init": ([_InitParams], P), "ggml_free": ([P], None),
    "ggml_new_tensor_4d": ([P, ctypes.c_int, I64, I64, I64, I64], P),
    "ggml_gated_delta_net": ([P] * 7 + [I64], P),
    "ggml_get_rows": ([P, P, P], P), "ggml_set_rows": ([P, P, P, P], P),
    "ggml_reshape_4d": ([P, P, I64, I64, I64, I64], P),
    "ggml_view_2d": ([P, P, I64, I64, ctypes.c_size_t, ctypes.c_size_t], P),
    "ggml_new_graph": ([P], P), "ggml_build_forward_expand": ([P, P], None),
    "ggml_get_data": ([P], P), "ggml_set_name": ([P, ctypes.c_char_p], P),
    "ggml_tensor_overhead": ([], ctypes.c_size_t), "ggml_graph_overhead": ([], ctypes.c_size_t),
    "ggml_version": ([], ctypes.c_char_p), "ggml_commit": ([], ctypes.c_char_p),
    "ggml_threadpool_params_default": ([ctypes.c_int], _ThreadpoolParams),
    "ggml_threadpool_new": ([ctypes.POINTER(_ThreadpoolParams)], P),
    "ggml_threadpool_free": ([P], None), "ggml_cpu_init": ([], None),
    "ggml_graph_plan": ([P, ctypes.c_int, P], _CPlan),
    "ggml_graph_compute": ([P, ctypes.POINTER(_CPlan)], ctypes.c_int),
}


@dataclass(frozen=True)
class _Library:
    fn: Any  # the functions, by name without the ggml_ prefix
    path: Path
    origin: str
    version: str
    commit: str
    zero_copy: bool  # the struct above matches: tensors can point at torch's memory


def _places() -> list[tuple[str, Path]]:
    """Where to look, in order: ($SWARMFAB_GGML_LIB alone where it is set)."""
    if os.environ.get(ENV_VAR):
        return [(ENV_VAR, Path(os.environ[ENV_VAR]))]
    roots = dict.fromkeys([Path.cwd(), Path(__file__).resolve().parents[3]])
    places = [("scripts/build_ggml.sh", root / BUILD_DIR) for root in roots]
    spec = importlib.util.find_spec("libggml")
    for location in (spec.submodule_search_locations or []) if spec else []:
        places += [("libggml-python", Path(location) / sub) for sub in ("lib64", "lib")]
    return places


class _Functions:
    def __init__(self, cpu: ctypes.CDLL):
        self._cpu = cpu  # its handle resolves libggml-base's symbols too (a dependency)

    def __getattr__(self, name: str) -> Any:
        function = getattr(self._cpu, f"ggml_{name}")
        argtypes, restype = _PROTOTYPES.get(f"ggml_{name}", ([], ctypes.c_int))
        function.argtypes, function.restype = argtypes, restype
        setattr(self, name, function)
        return function


@functools.cache
def _load() -> _Library:
    places = _places()
    found = next(((o, p) for o, p in places if all(
        (p / f"libggml-{n}.so").exists() for n in ("base", "cpu"))), None)
    if found is None:
        looked = ", ".join(str(p) for _, p in places)
        raise GgmlUnavailable(f"no ggml libraries (libggml-base.so, libggml-cpu.so) in {looked}; "
                              "run scripts/build_ggml.sh or pip install libggml-python")
    origin, path = found
    try:
        ctypes.CDLL(str(path / "libggml-base.so"), mode=ctypes.RTLD_GLOBAL)
        fn = _Functions(ctypes.CDLL(str(path / "libggml-cpu.so"), mode=ctypes.RTLD_GLOBAL))
        version = fn.version().decode()
        commit = fn.commit().decode()
    except (OSError, AttributeError) as exc:
        raise GgmlUnavailable(f"ggml in {path} cannot be loaded: {exc}") from exc
    check_version(version, path)
    try:
        fn.gated_delta_net  # noqa: B018 (the lookup is the check)
    except AttributeError:
        raise GgmlUnavailable(f"ggml {version} in {path} has no ggml_gated_delta_net") from None
    fn.cpu_init()
    return _Library(fn, path, origin, version, commit, _layout_ok(fn))


def check_version(version: str, path: Path | str) -> None:
    """GgmlUnavailable for a ggml before the op's current form (its state snapshot count
    became an argument in 0.15; older forms take other state shapes)."""
    numbers = tuple(int(x) for x in re.findall(r"\d+", version)[:2])
    if numbers < MIN_VERSION:
        raise GgmlUnavailable(
            f"ggml {version} in {path} is too old: ggml_gated_delta_net's current form "
            f"(8 arguments) needs ggml >= {'.'.join(map(str, MIN_VERSION))}; run "
            "scripts/build_ggml.sh for a newer one")


def _layout_ok(fn: Any) -> bool:
    """Whether ``_Tensor`` is the loaded ggml's struct: sizes, ne, nb, name and data."""
    if fn.tensor_overhead() - _OBJECT_SIZE != ctypes.sizeof(_Tensor):
        return False
    ctx = fn.init(_InitParams(1 << 16, None, False))
    try:
        t = fn.new_tensor_4d(ctx, _F32, 3, 5, 7, 11)
        fn.set_name(t, b"swarmfab-probe")
        view = _Tensor.from_address(t)
        if (tuple(view.ne) != (3, 5, 7, 11) or tuple(view.nb) != (4, 12, 60, 420)
                or view.name != b"swarmfab-probe" or view.data != fn.get_data(t)):
            return False
        scratch = ctypes.c_float()
        view.data = ctypes.addressof(scratch)  # what ggml reads once it is re-pointed
        return bool(fn.get_data(t) == ctypes.addressof(scratch))
    finally:
        fn.free(ctx)


@functools.cache
def available() -> str | None:
    """None when ggml can be used here, else why not (looked up once per process: every
    workload's list of baselines asks)."""
    try:
        _load()
    except GgmlUnavailable as exc:
        return str(exc)
    return None


def describe() -> dict[str, Any]:
    """Version, commit, where the libraries are, the CPU features ggml was built for,
    and the build's own record (``BUILD_INFO`` of scripts/build_ggml.sh) where present."""
    lib = _load()
    features = [name for name in _FEATURES if hasattr(lib.fn._cpu, f"ggml_cpu_has_{name}")
                and getattr(lib.fn, f"cpu_has_{name}")()]
    info = lib.path.parent / "BUILD_INFO"
    build = dict(line.split("=", 1) for line in info.read_text().splitlines() if "=" in line) \
        if lib.origin != "libggml-python" and info.exists() else {}
    return {"version": lib.version, "commit": lib.commit, "path": str(lib.path),
            "origin": lib.origin, "features": features, "zero_copy": lib.zero_copy,
            "openmp": b"libgomp" in (lib.path / "libggml-cpu.so").read_bytes(), "build": build}


class _Graph:
    """One ggml context (its memory a torch tensor), a graph and its plan with a work
    buffer, made once and computed on a shared thread pool as often as wanted.

    Tensors made with :meth:`input` (in the context ``inputs``) have no memory of their
    own where the struct layout was verified: :meth:`bind` points them at torch tensors.
    Elsewhere they live in the arena too (``input_bytes``) and values are copied in."""

    def __init__(self, lib: _Library, threadpool: int, threads: int, tensors: int,
                 alloc_bytes: int, input_bytes: int):
        self.fn = lib.fn
        size = tensors * (self.fn.tensor_overhead() + _ALIGN) + self.fn.graph_overhead()
        size += alloc_bytes + (0 if lib.zero_copy else input_bytes)
        # the memory of the tensors the context allocates (views of it outlive the context)
        self.arena = torch.empty(size, dtype=torch.uint8)
        self.ctx = self.fn.init(_InitParams(size, self.arena.data_ptr(), False))
        self.inputs = self.ctx
        if lib.zero_copy:
            self.inputs = self.fn.init(_InitParams(tensors * self.fn.tensor_overhead(), None,
                                                   True))
        weakref.finalize(self, _free, self.fn, *dict.fromkeys((self.ctx, self.inputs)))
        self.zero_copy, self.threads, self.threadpool = lib.zero_copy, threads, threadpool

    def input(self, dtype: int, *ne: int) -> int:
        """A tensor whose data is bound to torch tensors (:meth:`bind`)."""
        return int(self.fn.new_tensor_4d(self.inputs, dtype, *ne, *[1] * (4 - len(ne))))

    def tensor(self, dtype: int, *ne: int) -> int:
        return int(self.fn.new_tensor_4d(self.ctx, dtype, *ne, *[1] * (4 - len(ne))))

    def view(self, tensor: int, dtype: torch.dtype, *shape: int) -> torch.Tensor:
        """The tensor's data as a torch tensor (no copy)."""
        start = int(self.fn.get_data(tensor)) - self.arena.data_ptr()
        count = math.prod(shape) * torch.empty(0, dtype=dtype).element_size()
        return self.arena[start:start + count].view(dtype).view(shape)

    def bind(self, tensor: int, value: torch.Tensor) -> None:
        """Point ``tensor`` at ``value``'s memory, or copy it in where that is not safe."""
        if self.zero_copy:
            _Tensor.from_address(tensor).data = value.data_ptr()
        else:
            ctypes.memmove(self.fn.get_data(tensor), value.data_ptr(),
                           value.numel() * value.element_size())

    def plan(self, result: int) -> None:
        self.graph = self.fn.new_graph(self.ctx)
        self.fn.build_forward_expand(self.graph, result)
        self.cplan = self.fn.graph_plan(self.graph, self.threads, self.threadpool)
        self.work = torch.empty(max(1, self.cplan.work_size), dtype=torch.uint8)
        self.cplan.work_data = self.work.data_ptr()

    def compute(self) -> None:
        status = self.fn.graph_compute(self.graph, ctypes.byref(self.cplan))
        if status != 0:
            raise RuntimeError(f"ggml_graph_compute returned {status}")


def _free(fn: Any, *contexts: int) -> None:
    for ctx in contexts:
        fn.free(ctx)


def _delta_op(graph: _Graph, ctx: int, shape: tuple[int, int, int, int, int],
              state: int) -> tuple[int, list[int]]:
    """The op, its result in ``ctx``, on input tensors q, k, v, g, beta (fla's layouts,
    ``shape`` = B, T, HV, K, gate size); its result and those inputs."""
    batch, steps, heads, dim, gate = shape
    inputs = [graph.input(_F32, dim, heads, steps, batch) for _ in range(3)]
    inputs += [graph.input(_F32, gate, heads, steps, batch),
               graph.input(_F32, 1, heads, steps, batch)]
    return int(graph.fn.gated_delta_net(ctx, *inputs, state, 1)), inputs


def _input_bytes(shape: tuple[int, int, int, int, int]) -> int:
    """Bytes of q, k, v, g and beta with ``shape`` = B, T, HV, K, gate size."""
    batch, steps, heads, dim, gate = shape
    return 4 * batch * steps * heads * (3 * dim + gate + 1) + 5 * _ALIGN


def _check(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: torch.Tensor,
           beta: torch.Tensor, state: torch.Tensor | None) -> None:
    """ValueError for what the op does not take (ggml aborts the process on a shape it
    refuses, so they are checked first)."""
    if q.dim() != 4 or v.dim() != 4:
        raise ValueError("q, k, v must be [B,T,H,K], [B,T,H,K], [B,T,HV,V]")
    batch, steps, heads, dim = q.shape
    value_heads, value_dim = v.shape[2], v.shape[3]
    if dim != value_dim:
        raise ValueError(f"ggml_gated_delta_net needs K == V; got K={dim}, V={value_dim}")
    if value_heads % heads:
        raise ValueError(f"value heads ({value_heads}) must be a multiple of heads ({heads})")
    tokens = (batch, steps, value_heads)
    wanted = {"k": (k, tuple(q.shape)), "v": (v, (*tokens, dim)), "beta": (beta, tokens),
              "g": (g, (*tokens, dim) if g.dim() == 4 else tokens)}
    if state is not None:
        wanted["initial_state"] = (state, (batch, value_heads, dim, dim))
    for name, (tensor, shape) in wanted.items():
        if tuple(tensor.shape) != shape:
            raise ValueError(f"{name} must be {list(shape)}; got {list(tensor.shape)}")
    if any(x.device.type != "cpu" for x in (q, k, v, g, beta)):
        raise ValueError("ggml's CPU op takes CPU tensors")


class GatedDeltaNet:
    """ggml's op behind fla's signature; one graph per (B, T, HV, K, gate) on ``threads``
    threads, reused by every call of that shape. Not for concurrent calls."""

    def __init__(self, threads: int | None = None):
        self.lib = _load()
        self.threads = threads or len(os.sched_getaffinity(0))
        params = self.lib.fn.threadpool_params_default(self.threads)
        self.threadpool = int(self.lib.fn.threadpool_new(ctypes.byref(params)))
        weakref.finalize(self, self.lib.fn.threadpool_free, self.threadpool)
        self._graphs: dict[tuple[int, ...], tuple[_Graph, list[int], int]] = {}

    def _graph(self, key: tuple[int, int, int, int, int]) -> tuple[_Graph, list[int], int]:
        """The graph of a shape (B, T, HV, K, gate size), its inputs and result; the
        result has no memory of its own either where inputs have none (bound per call)."""
        if key not in self._graphs:
            batch, steps, heads, dim, _ = key
            states = 4 * batch * heads * dim * dim
            graph = _Graph(self.lib, self.threadpool, self.threads, 8, 0, _input_bytes(key)
                           + 2 * states + 4 * batch * steps * heads * dim + 2 * _ALIGN)
            h0 = graph.input(_F32, dim, dim, heads, batch)
            out, inputs = _delta_op(graph, graph.inputs, key, h0)
            graph.plan(out)
            self._graphs[key] = (graph, [*inputs, h0], out)
        return self._graphs[key]

    def forward(
        self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: torch.Tensor,
        beta: torch.Tensor, scale: float | None = None,
        initial_state: torch.Tensor | None = None, output_final_state: bool = False,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """fla's forward (``pool.pooled`` gives it the pool keywords)."""
        _check(q, k, v, g, beta, initial_state)
        batch, steps, heads, dim = q.shape
        value_heads = v.shape[2]
        q, k, v, g, beta = (x.contiguous().float() for x in (q, k, v, g, beta))
        native_scale = dim**-0.5
        if scale is not None and scale != native_scale:
            q = q * (scale / native_scale)  # the op always scales by 1/sqrt(K)
        if heads != value_heads:  # fla: value head h reads h // (HV/H); ggml: h % H
            q, k = (x.repeat_interleave(value_heads // heads, dim=2) for x in (q, k))
        gate = dim if g.dim() == 4 else 1
        h0 = (torch.zeros(batch, value_heads, dim, dim) if initial_state is None
              else initial_state.float().transpose(-1, -2).contiguous())  # ggml: [B,HV,V,K]
        graph, inputs, out = self._graph((batch, steps, value_heads, dim, gate))
        for tensor, value in zip(inputs, (q, k, v, g, beta, h0), strict=True):
            graph.bind(tensor, value)
        o_size = v.numel()
        result = torch.empty(o_size + h0.numel())
        if graph.zero_copy:  # the op writes straight into the tensor returned
            _Tensor.from_address(out).data = result.data_ptr()
        graph.compute()
        if not graph.zero_copy:
            result.copy_(graph.view(out, torch.float32, result.numel()))
        o = result[:o_size].view(batch, steps, value_heads, dim)
        final = result[o_size:].view(batch, value_heads, dim, dim).transpose(-1, -2)
        return o, final.contiguous() if output_final_state else None

    def native(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: torch.Tensor,
               beta: torch.Tensor, slots: int, state_indices: Any = None) -> NativeStep:
        """A :class:`NativeStep` for these inputs' shape over a pool of ``slots`` states."""
        return NativeStep(self, q, k, v, g, beta, slots, state_indices)


class NativeStep:
    """One step of B sequences over a state pool, as llama.cpp runs the op: the pool
    ``[N,HV,V,K]`` (ggml's layout: :meth:`pool_from`/:meth:`pool_as_fla` convert) lives
    in ggml's memory, and one graph gathers the sequences' states (``ggml_get_rows``),
    runs the op and writes the final states back (llama.cpp ``ggml_cpy``s them into the
    rows its cache keeps contiguous for the batch; ``ggml_set_rows`` writes them at any
    slots). A call is one graph compute; ``o`` is where the op leaves its output.
    q, k, v, g, beta must be
    what the op takes: H == HV and scale 1/sqrt(K) (:meth:`GatedDeltaNet.forward`
    adapts the rest); :meth:`bind` points the step at other tensors of the same shape."""

    def __init__(self, owner: GatedDeltaNet, q: torch.Tensor, k: torch.Tensor,
                 v: torch.Tensor, g: torch.Tensor, beta: torch.Tensor, slots: int,
                 state_indices: Any = None):
        _check(q, k, v, g, beta, None)
        batch, steps, heads, dim = q.shape
        if v.shape[2] != heads:
            raise ValueError(f"the native step needs H == HV; got {heads} and {v.shape[2]}")
        self.owner = owner  # keeps the thread pool alive
        row = heads * dim * dim
        o_size = batch * steps * heads * dim
        shape = (batch, steps, heads, dim, dim if g.dim() == 4 else 1)
        graph = _Graph(owner.lib, owner.threadpool, owner.threads, 16,
                       4 * (slots * row + batch + 2 * batch * row + o_size) + 8 * _ALIGN,
                       _input_bytes(shape))
        pool = graph.tensor(_F32, row, slots)
        indices = graph.tensor(_I32, batch)
        rows = graph.fn.get_rows(graph.ctx, pool, indices)  # [row, B]
        h0 = graph.fn.reshape_4d(graph.ctx, rows, dim, dim, heads, batch)
        out, self._inputs = _delta_op(graph, graph.ctx, shape, h0)
        final = graph.fn.view_2d(graph.ctx, out, row, batch, 4 * row, 4 * o_size)
        graph.plan(graph.fn.set_rows(graph.ctx, pool, final, indices))
        self.graph = graph
        self.pool = graph.view(pool, torch.float32, slots, heads, dim, dim)
        self.indices = graph.view(indices, torch.int32, batch)
        self.indices.copy_(torch.arange(batch) if state_indices is None else
                           checked_indices(state_indices, batch, slots, torch.device("cpu")))
        self.o = graph.view(out, torch.float32, batch, steps, heads, dim)
        self._shapes: list[tuple[int, ...]] = [tuple(x.shape) for x in (q, k, v, g, beta)]
        self.bind(q, k, v, g, beta)

    def bind(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: torch.Tensor,
             beta: torch.Tensor) -> None:
        """Use these inputs (the step's shapes) from the next call."""
        shapes = [tuple(x.shape) for x in (q, k, v, g, beta)]
        if shapes != self._shapes:
            raise ValueError(f"the step was made for shapes {self._shapes}; got {shapes}")
        self._bound = [x.contiguous().float() for x in (q, k, v, g, beta)]
        for tensor, value in zip(self._inputs, self._bound, strict=True):
            self.graph.bind(tensor, value)

    def __call__(self) -> torch.Tensor:
        """One step: o (a view, overwritten by the next call); the pool is updated."""
        self.graph.compute()
        return self.o

    @staticmethod
    def pool_from(states: torch.Tensor) -> torch.Tensor:
        """fla's states ``[N,HV,K,V]`` in ggml's layout ``[N,HV,V,K]``."""
        return states.transpose(-1, -2)

    def pool_as_fla(self) -> torch.Tensor:
        """The pool as fla's states ``[N,HV,K,V]`` (a copy)."""
        return self.pool.transpose(-1, -2).contiguous()
