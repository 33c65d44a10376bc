"""The gated delta rule family: KDA (decay per key channel) and GDN (one decay per head).

Layouts follow flash-linear-attention: q, k ``[B,T,H,K]`` (L2-normalised by the caller),
v ``[B,T,HV,V]``, g ``[B,T,HV,K]`` for KDA or ``[B,T,HV]`` for GDN (log decay, <= 0),
beta ``[B,T,HV]``, states ``[B,HV,K,V]`` float32. Compiled candidates export

    int <name>_forward(const float *q, const float *k, const float *v, const float *g,
                       const float *beta, const float *h0, float *o, float *ht,
                       float scale, int64_t B, int64_t T, int64_t H, int64_t HV,
                       int64_t K, int64_t V);

row-major contiguous float32; h0 and ht may be NULL; 0 on success, non-zero to refuse.
A candidate may also export the pooled form engines decode with (``delta.pool``)

    int <name>_forward_indexed(q, k, v, g, beta, const float *h0, float *o, float *ht,
                               const int64_t *state_indices, int64_t slots, float scale,
                               int64_t B, int64_t T, int64_t H, int64_t HV, int64_t K,
                               int64_t V);

where h0 and ht hold ``slots`` states, sequence b's at slot ``state_indices[b]`` (slot b
when NULL), and ht may be h0 (in place). Without it, pooled calls gather and scatter.
"""

from __future__ import annotations

import ctypes
import dataclasses
import functools
import math
import random
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch
import torch.nn.functional as F

from swarmfab.errors import WorkloadError
from swarmfab.kernels import DesignSpace
from swarmfab.workloads._base import (
    DTYPES,
    Case,
    CFunction,
    Distribution,
    Forward,
    Inputs,
    KernelRefusedError,
    Outputs,
    Shape,
    Workload,
)
from swarmfab.workloads.delta import math as delta_math
from swarmfab.workloads.delta import pool as delta_pool
from swarmfab.workloads.delta import reference as delta_reference
from swarmfab.workloads.delta import varlen as delta_varlen
from swarmfab.workloads.delta.fuzz import draw_delta_cases

if TYPE_CHECKING:
    from swarmfab.workloads.delta import ggml

__all__ = ["GatedDeltaRule"]

_PROBE_TOKENS = 128  # tokens of the shape a setup estimate times
_C_ARGTYPES = [ctypes.c_void_p] * 8 + [ctypes.c_float] + [ctypes.c_int64] * 6
_C_VARLEN_ARGTYPES = ([ctypes.c_void_p] * 9 + [ctypes.c_int64] + [ctypes.c_float]
                      + [ctypes.c_int64] * 5)  # ..., cu_seqlens, N, scale, T, H, HV, K, V
_C_INDEXED_ARGTYPES = ([ctypes.c_void_p] * 9 + [ctypes.c_int64] + [ctypes.c_float]
                       + [ctypes.c_int64] * 6)


def _pointer(tensor: torch.Tensor | None) -> int | None:
    return None if tensor is None else tensor.data_ptr()


class GatedDeltaRule(Workload):
    """Shared implementation of KDA and GDN; subclasses set names and the gate layout."""

    family = "delta-rule"
    output_names = ("o", "final_state")
    dtypes = ("float32", "bfloat16")
    # the pooled and the packed entry points (see the module's doc)
    c_optional_symbols = ("indexed", "varlen")
    # torch-compile compiles for ~10 s per shape and job; ggml is there only where its
    # libraries are (the peers extra, or scripts/build_ggml.sh)
    opt_in_baselines = frozenset({"torch-compile", "ggml"})
    compiling_baselines = frozenset({"torch-compile"})
    jobs_compile = False  # C kernels; the opt-in torch-compile baseline imports its own
    gate_per_channel: bool
    # the standard CPU goal: prefill at three sequence lengths, small heads, and decode
    # of a batch of 64 as an engine steps it (states updated in place in a pool)
    default_shapes = (
        Shape(B=1, T=4096, H=16, HV=16, K=128, V=128),
        Shape(B=2, T=1024, H=16, HV=16, K=128, V=128),
        Shape(B=1, T=8192, H=8, HV=8, K=128, V=128),
        Shape(B=4, T=2048, H=4, HV=4, K=64, V=64),
        Shape(B=64, T=1, H=16, HV=16, K=128, V=128, initial_state=True, pool=64),
    )

    # -- inputs and reference -------------------------------------------------------
    def gate_shape(self, shape: Shape) -> tuple[int, ...]:
        if self.gate_per_channel:
            return (shape.B, shape.T, shape.HV, shape.K)
        return (shape.B, shape.T, shape.HV)

    def per_channel_gate(self, g: torch.Tensor, key_dim: int) -> torch.Tensor:
        """The gate as ``[B,T,HV,K]`` (a scalar gate repeated over key channels)."""
        if self.gate_per_channel:
            return g
        return g.unsqueeze(-1).expand(*g.shape, key_dim)

    def make_inputs(self, case: Case, dtype: torch.dtype | None = None) -> Inputs:
        """q, k, v and beta in the case's dtype (fla's users pass bfloat16); the gate and
        the state in float32 (fla keeps its state, and computes its gate, in float32)."""
        dtype = dtype or case.torch_dtype
        s, dist = _delta_shape(case), case.distribution
        gen = torch.Generator().manual_seed(case.seed)
        q = F.normalize(torch.rand(s.B, s.T, s.H, s.K, generator=gen, dtype=torch.float64), dim=-1)
        k = F.normalize(torch.rand(s.B, s.T, s.H, s.K, generator=gen, dtype=torch.float64), dim=-1)
        v = torch.rand(s.B, s.T, s.HV, s.V, generator=gen, dtype=torch.float64) * dist.magnitude
        gate_shape = self.gate_shape(s)
        g = F.logsigmoid(torch.randn(gate_shape, generator=gen, dtype=torch.float64))
        g = g / dist.gate_divisor
        if dist.gate_zero_prob > 0:
            keep = torch.rand(gate_shape, generator=gen, dtype=torch.float64) >= dist.gate_zero_prob
            g = g * keep
        if dist.gate_fill is not None:  # extreme gates: 0, -100, -inf
            fill = torch.rand(gate_shape, generator=gen, dtype=torch.float64) < dist.gate_fill_prob
            g = torch.where(fill, float(dist.gate_fill), g)
        beta = _draw_beta(dist, (s.B, s.T, s.HV), gen)
        if dist.beta_fill is not None:
            beta = torch.full_like(beta, dist.beta_fill)
        h0 = None
        if s.initial_state:
            h0 = torch.randn(s.pool or s.sequences, s.HV, s.K, s.V, generator=gen,
                             dtype=torch.float64)
            h0 = (h0 * dist.magnitude).float()
        inputs: dict[str, torch.Tensor | float | None] = {
            "q": q.to(dtype), "k": k.to(dtype), "v": v.to(dtype), "g": g.float(),
            "beta": beta.to(dtype), "initial_state": h0,
            "scale": s.K**-0.5 if dist.scale is None else dist.scale,
        }
        if s.pool:  # decoded in place into a pool, sequences at shuffled slots
            inputs["state_indices"] = delta_pool.draw_indices(s.B, s.pool, gen)
        if s.lengths:  # packed sequences, B = 1
            inputs["cu_seqlens"] = delta_varlen.offsets(s.lengths)
        return inputs

    def reference(self, inputs: Inputs) -> Outputs:
        """The recurrence in float64: compiled (``delta.reference``) where a C compiler
        works, else in PyTorch (:meth:`reference_torch`); tests hold the two equal.
        Packed sequences: each on its own tokens, from its own state."""

        def recurrence(*args: Any) -> tuple[torch.Tensor, torch.Tensor]:
            return delta_reference.recurrent_f64(*args) or delta_math.recurrent(*args)

        return self._computed(inputs, recurrence)

    def reference_torch(self, inputs: Inputs) -> Outputs:
        """The per-token recurrence in float64 PyTorch (the reference's definition)."""
        return self._computed(inputs, delta_math.recurrent)

    def reference_chunked(self, inputs: Inputs, chunk: int = 64) -> Outputs:
        """The independent chunked formulation in float64 (cross-checks :meth:`reference`)."""
        return self._computed(inputs, functools.partial(delta_math.chunked, chunk=chunk))

    def _computed(self, inputs: Inputs, run: Callable[..., tuple[torch.Tensor, torch.Tensor]]
                  ) -> Outputs:
        """``run(q, k, v, g, beta, scale, h0)`` on the inputs in float64: once per packed
        sequence where there are several, else once, a pool's untouched states kept."""
        q, k, v, g, beta, h0 = self._float64(inputs)
        scale = float(inputs["scale"])  # type: ignore[arg-type]
        cu_seqlens = inputs.get("cu_seqlens")
        if isinstance(cu_seqlens, torch.Tensor):

            def one(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: torch.Tensor,
                    beta: torch.Tensor, scale: float | None = None,
                    initial_state: torch.Tensor | None = None,
                    output_final_state: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
                return run(q, k, v, g, beta, scale, initial_state)

            o, state = delta_varlen.per_sequence(one, q, k, v, g, beta, scale, h0, True,  # type: ignore[arg-type]
                                                 cu_seqlens)
            assert state is not None
            return {"o": o, "final_state": state}
        o, state = run(q, k, v, g, beta, scale, h0)
        return self._pooled_outputs(inputs, o, state)

    def _float64(self, inputs: Inputs) -> list[torch.Tensor | None]:
        """q, k, v, g (per channel), beta and each sequence's initial state, in float64."""
        tensors = _tensors(inputs, torch.float64)
        q, g, h0 = tensors[0], tensors[3], tensors[5]
        assert q is not None and g is not None
        tensors[3] = self.per_channel_gate(g, q.shape[-1])
        slots = inputs.get("state_indices")
        if h0 is not None and isinstance(slots, torch.Tensor):
            tensors[5] = h0[slots]
        return tensors

    @staticmethod
    def _pooled_outputs(inputs: Inputs, o: torch.Tensor, state: torch.Tensor) -> Outputs:
        """Outputs as the call leaves them: with a pool, the whole pool, every state not
        decoded unchanged."""
        slots = inputs.get("state_indices")
        pool = inputs["initial_state"]
        if not isinstance(slots, torch.Tensor) or not isinstance(pool, torch.Tensor):
            return {"o": o, "final_state": state}
        after = pool.to(torch.float64).clone()
        after[slots] = state
        return {"o": o, "final_state": after}

    def call(self, forward: Forward, inputs: Inputs) -> Outputs:
        o, state = _invoke(forward, inputs, final_state=True)
        if state is None:
            raise KernelRefusedError("output_final_state=True but no final state was returned")
        if "state_indices" in inputs:  # the pool as the call leaves it is the result
            return {"o": o, "final_state": inputs["initial_state"]}  # type: ignore[dict-item]
        return {"o": o, "final_state": state}

    def call_lean(self, forward: Forward, inputs: Inputs) -> Outputs | None:
        if "state_indices" in inputs:
            return None  # an in-place call always writes its states
        o, _ = _invoke(forward, inputs, final_state=False)
        return {"o": o}

    def output_dtype(self, case: Case, name: str) -> torch.dtype:
        """o in the case's dtype (v's), the state in float32 whatever the inputs."""
        return torch.float32 if name == "final_state" else case.torch_dtype

    def written_in_place(self, inputs: Inputs) -> dict[str, str]:
        return {"final_state": "initial_state"} if "state_indices" in inputs else {}

    # -- compiled candidates --------------------------------------------------------
    def wrap_c(
        self, function: CFunction, *, fill_outputs: bool = True, device: str = "cpu",
        indexed: CFunction | None = None, varlen: CFunction | None = None,
    ) -> Forward:
        """The kernel with fla's signature and the pool keywords; ``indexed``, the
        ``_indexed`` entry point where the library exports it, updates pools in place,
        and without it pooled calls gather and scatter around ``function``."""
        function.argtypes = _C_ARGTYPES
        function.restype = ctypes.c_int
        symbol, packed = self.c_symbol, varlen

        def plain(
            q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: torch.Tensor,
            beta: torch.Tensor, scale: float | None = None,
            initial_state: torch.Tensor | None = None, output_final_state: bool = False,
        ) -> tuple[torch.Tensor, torch.Tensor | None]:
            given = v.dtype
            q, k, v, g, beta = _prepared(device, initial_state, q, k, v, g, beta)
            h0 = None if initial_state is None else initial_state.contiguous().float()
            # when verifying, outputs start as NaN so any element left unwritten is caught
            o = _output(v.shape, fill_outputs, device)
            ht = (_output((q.shape[0], *delta_pool.state_dims(q, v)), fill_outputs, device)
                  if output_final_state else None)
            status = function(*_pointers(q, k, v, g, beta, h0, o, ht),
                              *_scalars(q, v, scale))
            if status != 0:
                raise KernelRefusedError(f"{symbol} returned {status} (arguments refused)")
            return o.to(given), ht

        gathered = delta_pool.pooled(plain)  # pools gathered and scattered around plain
        native = None if packed is None else self._wrap_varlen(packed, fill_outputs, device)
        if indexed is None:
            return delta_varlen.with_varlen(gathered, native)
        indexed.argtypes = _C_INDEXED_ARGTYPES
        indexed.restype = ctypes.c_int

        def in_place(
            q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: torch.Tensor,
            beta: torch.Tensor, scale: float | None = None,
            initial_state: torch.Tensor | None = None, output_final_state: bool = False,
            inplace_final_state: bool = False, state_indices: object = None,
        ) -> tuple[torch.Tensor, torch.Tensor | None]:
            if not inplace_final_state:  # nothing to update in place
                return gathered(q, k, v, g, beta, scale, initial_state, output_final_state,
                                inplace_final_state, state_indices)
            given = v.dtype
            q, k, v, g, beta = _prepared(device, initial_state, q, k, v, g, beta)
            pool, slots = delta_pool.pool_and_slots(q, v, initial_state, state_indices)
            o = _output(v.shape, fill_outputs, device)
            status = indexed(*_pointers(q, k, v, g, beta, pool, o, pool), _pointer(slots),
                             pool.shape[0], *_scalars(q, v, scale))
            if status != 0:
                raise KernelRefusedError(f"{symbol}_indexed returned {status} (arguments "
                                         "refused)")
            return o.to(given), pool

        return delta_varlen.with_varlen(in_place, native)

    def _wrap_varlen(self, function: CFunction, fill_outputs: bool, device: str
                     ) -> Callable[..., tuple[torch.Tensor, torch.Tensor | None]]:
        """The ``_varlen`` entry point: packed sequences in one call."""
        function.argtypes = _C_VARLEN_ARGTYPES
        function.restype = ctypes.c_int
        symbol = self.c_symbol

        def packed(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: torch.Tensor,
                   beta: torch.Tensor, scale: float | None, initial_state: torch.Tensor | None,
                   output_final_state: bool, cu_seqlens: torch.Tensor
                   ) -> tuple[torch.Tensor, torch.Tensor | None]:
            given = v.dtype
            q, k, v, g, beta = _prepared(device, initial_state, q, k, v, g, beta)
            bounds = delta_varlen.checked_offsets(cu_seqlens, q.shape[1])
            if q.shape[0] != 1:
                raise KernelRefusedError(f"packed sequences come with B = 1, not {q.shape[0]}")
            sequences = len(bounds) - 1
            h0 = None if initial_state is None else initial_state.contiguous().float()
            o = _output(v.shape, fill_outputs, device)
            ht = (_output((sequences, *delta_pool.state_dims(q, v)), fill_outputs, device)
                  if output_final_state else None)
            offsets = torch.tensor(bounds, dtype=torch.int64, device=device)
            scale_, _, steps, *sizes = _scalars(q, v, scale)
            status = function(*_pointers(q, k, v, g, beta, h0, o, ht), _pointer(offsets),
                              sequences, scale_, steps, *sizes)
            if status != 0:
                raise KernelRefusedError(f"{symbol}_varlen returned {status} (arguments "
                                         "refused)")
            return o.to(given), ht

        return packed

    # -- baselines, corpus, cost ----------------------------------------------------
    def baselines(self) -> dict[str, Forward]:
        plain: dict[str, Forward] = {
            "torch-recurrent": functools.partial(_baseline, self, delta_math.recurrent),
            "torch-chunked": functools.partial(_baseline, self, delta_math.chunked),
            "torch-compile": functools.partial(_baseline, self, _compiled_recurrent),
            **self.fla_baselines(),
            **_ggml_baselines(),
        }
        pools = {name: delta_pool.with_pools(forward) for name, forward in plain.items()}
        pools["torch-recurrent"] = delta_pool.pooled(  # in a pool: advanced in place
            plain["torch-recurrent"], functools.partial(_advance, self))
        return pools

    def fla_baselines(self) -> dict[str, Forward]:
        """fla's GPU kernels, where fla imports and a CUDA device is present (none here)."""
        return {}

    def validation_cases(self) -> list[Case]:
        strong = Distribution(gate_divisor=0.1)
        return [
            Case("decode-with-state", Shape(1, 1, 2, 2, 16, 16, initial_state=True)),
            Case("tail-not-chunk-multiple", Shape(1, 37, 2, 2, 32, 32), seed=1),
            # q, k, v, g, beta as views split from one fused projection, as engines pass
            # them (a Python candidate that assumes contiguity reads other numbers)
            Case("gva-2x-k-ne-v", Shape(2, 64, 2, 4, 32, 48, initial_state=True), seed=2,
                 layout="strided"),
            Case("gva-4x-scale-1", Shape(1, 20, 1, 4, 16, 16), Distribution(scale=1.0), seed=3),
            Case("strong-decay", Shape(1, 100, 1, 1, 64, 64, initial_state=True), strong, seed=4),
            Case("weak-decay-masked", Shape(1, 70, 2, 2, 16, 16),
                 Distribution(gate_divisor=10.0, gate_zero_prob=0.5), seed=5),
            Case("beta-near-0", Shape(1, 33, 1, 2, 16, 32), Distribution(beta="near0"), seed=6),
            Case("beta-near-1-large", Shape(1, 50, 2, 2, 32, 32, initial_state=True),
                 Distribution(beta="near1", magnitude=100.0), seed=7),
            Case("long-sequence-scale-0.1", Shape(1, 300, 1, 1, 16, 16),
                 Distribution(gate_divisor=10.0, scale=0.1), seed=8),
            # an engine's step: states updated in place at shuffled slots of a larger pool
            # (the slots left out must come back untouched)
            Case("decode-in-place-pool", Shape(3, 1, 2, 2, 32, 16, True, pool=7), seed=9),
            Case("prefill-in-place-pool-gva", Shape(2, 45, 1, 2, 16, 48, True, pool=5),
                 seed=10),
            # one token per sequence, as decode runs it: value columns past a whole vector
            # sweep (128 with AVX-512, 32 with AVX2) and a part one; and from a zero state
            Case("decode-gva-wide-values", Shape(2, 1, 1, 2, 32, 144, initial_state=True),
                 seed=11),
            Case("one-token-no-state", Shape(2, 1, 2, 2, 16, 40), seed=12),
            # packed sequences (cu_seqlens): one token beside a hundred, grouped values,
            # each from its own state; and from zero states
            Case("varlen-short-and-long", Shape(1, 136, 2, 4, 32, 16, True,
                                                lengths=(1, 3, 90, 2, 40)), seed=13),
            Case("varlen-no-state", Shape(1, 70, 1, 1, 16, 24, lengths=(5, 64, 1)),
                 seed=14),
        ]

    def fuzz_cases(self, rng: random.Random, count: int) -> list[Case]:
        return draw_delta_cases(rng, count)

    def battery_cases(self, threads: int) -> list[Case]:
        from swarmfab.workloads.delta.battery import battery_cases

        return battery_cases(threads)

    def probe_shape(self, shape: Shape) -> tuple[Shape, float]:  # type: ignore[override]
        """Every form here costs the same per token: a few tokens stand for the whole."""
        tokens = min(shape.T, _PROBE_TOKENS)
        if shape.lengths:  # each packed sequence shortened alike
            lengths = tuple(max(1, n * tokens // shape.T) for n in shape.lengths)
            return (dataclasses.replace(shape, T=sum(lengths), lengths=lengths),
                    shape.T / sum(lengths))
        return dataclasses.replace(shape, T=tokens), shape.T / tokens

    def design_space(self) -> DesignSpace:
        from swarmfab.kernels.delta import delta_space

        return delta_space(self.name)

    def flops(self, shape: Shape) -> float:  # type: ignore[override]
        """6*K*V per token and value head: S^T k 2KV, update 2KV, readout 2KV. The decay's
        K*V multiplies are not counted: deferring the decay into rescaled keys and queries
        (the recurrent template's ``decay=deferred``) shows they are not needed."""
        return 6.0 * shape.B * shape.T * shape.HV * shape.K * shape.V

    def min_bytes(self, shape: Shape, dtype: str = "float32") -> float:  # type: ignore[override]
        """q, k, v, beta read once and o written, in ``dtype``; g read once and the state
        read (if given) and written, in float32."""
        s = shape
        size = DTYPES[dtype].itemsize
        gate = s.K if self.gate_per_channel else 1
        token_bytes = s.B * s.T * (size * (2 * s.H * s.K + s.HV * (2 * s.V + 1))
                                   + 4 * s.HV * gate)
        state_bytes = 4 * s.B * s.HV * s.K * s.V * (2 if s.initial_state else 1)
        return float(token_bytes + state_bytes)


def _ggml_baselines() -> dict[str, Forward]:
    """ggml's fused operator where its libraries load (none by default)."""
    from swarmfab.workloads.delta import ggml

    return {} if ggml.available() is not None else {"ggml": delta_pool.pooled(_ggml_forward)}


def _ggml_forward(*args: Any, **kwargs: Any) -> tuple[torch.Tensor, torch.Tensor | None]:
    return _ggml_op().forward(*args, **kwargs)


@functools.cache
def _ggml_op() -> ggml.GatedDeltaNet:
    """One per process: it owns a thread pool and its graphs, one per shape."""
    from swarmfab.workloads.delta import ggml

    return ggml.GatedDeltaNet(threads=torch.get_num_threads())


def _invoke(
    forward: Forward, inputs: Inputs, final_state: bool
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Call ``forward`` with fla's keyword arguments, asking for the final state or not;
    a case with a pool updates it in place at its slots (vLLM's ``state_indices``): a
    forward without the pool keywords (fla's own signature) gets them by gathering and
    scattering around it."""
    pool: dict[str, object] = {}
    if "state_indices" in inputs:
        pool = {"inplace_final_state": True, "state_indices": inputs["state_indices"]}
        forward = delta_pool.with_pools(forward)
    if "cu_seqlens" in inputs:  # packed sequences: natively, or one call per sequence
        pool = {"cu_seqlens": inputs["cu_seqlens"]}
        forward = delta_varlen.with_varlen(forward)
    return forward(
        inputs["q"], inputs["k"], inputs["v"], inputs["g"], inputs["beta"],
        scale=inputs["scale"], initial_state=inputs["initial_state"],
        output_final_state=final_state, **pool,
    )


def _delta_shape(case: Case) -> Shape:
    if not isinstance(case.shape, Shape):
        raise WorkloadError(f"case {case.name!r}: the delta rule needs B,T,H,HV,K,V sizes")
    return case.shape


def _prepared(
    device: str, state: torch.Tensor | None, *tensors: torch.Tensor
) -> list[torch.Tensor]:
    """``tensors`` as contiguous float32, once they and the state are where the kernel
    runs (it dereferences raw pointers)."""
    _on(device, state, *tensors)
    return [x.contiguous().float() for x in tensors]


def _pointers(*tensors: torch.Tensor | None) -> list[int | None]:
    return [_pointer(x) for x in tensors]


def _scalars(q: torch.Tensor, v: torch.Tensor, scale: float | None) -> tuple[float | int, ...]:
    """scale, B, T, H, HV, K, V as the C entry points take them."""
    batch, steps, heads, key_dim = q.shape
    return (key_dim**-0.5 if scale is None else scale, batch, steps, heads, v.shape[2],
            key_dim, v.shape[3])


def _output(shape: tuple[int, ...] | torch.Size, fill: bool, device: str = "cpu") -> torch.Tensor:
    if fill:
        return torch.full(shape, math.nan, dtype=torch.float32, device=device)
    return torch.empty(shape, dtype=torch.float32, device=device)


def _on(device: str, *tensors: torch.Tensor | None) -> None:
    """A compiled kernel dereferences raw pointers: every tensor must be where it runs."""
    for tensor in tensors:
        if tensor is not None and tensor.device.type != device:
            raise KernelRefusedError(f"a {device} kernel was given a tensor on {tensor.device}")


def _draw_beta(dist: Distribution, shape: tuple[int, ...], gen: torch.Generator) -> torch.Tensor:
    if dist.beta == "near0":
        return torch.rand(shape, generator=gen, dtype=torch.float64) * 1e-3
    if dist.beta == "near1":
        return 1 - torch.rand(shape, generator=gen, dtype=torch.float64) * 1e-3
    return torch.sigmoid(torch.randn(shape, generator=gen, dtype=torch.float64))


def _tensors(inputs: Inputs, dtype: torch.dtype) -> list[torch.Tensor | None]:
    names = ("q", "k", "v", "g", "beta", "initial_state")
    values = [inputs[name] for name in names]
    return [None if x is None else x.to(dtype) for x in values]  # type: ignore[union-attr]


def _compiled_recurrent(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: torch.Tensor, beta: torch.Tensor,
    scale: float, initial_state: torch.Tensor | None,
) -> tuple[torch.Tensor, torch.Tensor]:
    step = delta_math.compiled_token_step()
    return delta_math.recurrent(q, k, v, g, beta, scale, initial_state, step=step)


def _advance(workload: GatedDeltaRule, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
             g: torch.Tensor, beta: torch.Tensor, scale: float | None,
             states: torch.Tensor) -> torch.Tensor:
    """The per-token recurrence advancing ``states`` in place, computed in their dtype
    (the pool's float32); the output in v's dtype."""
    kind = states.dtype
    o, _ = _baseline(workload, functools.partial(delta_math.recurrent, in_place=True),
                     q.to(kind), k.to(kind), v.to(kind), g.to(kind), beta.to(kind),
                     scale, states)
    return o.to(v.dtype)


def _baseline(
    workload: GatedDeltaRule, algorithm: Callable[..., tuple[torch.Tensor, torch.Tensor]],
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: torch.Tensor, beta: torch.Tensor,
    scale: float | None = None, initial_state: torch.Tensor | None = None,
    output_final_state: bool = False,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """A PyTorch baseline in float32: fla's naive per-token recurrence, or the vectorised
    chunked (WY/UT) form with chunk 64; the output in v's dtype (fla's, for bfloat16
    inputs), the state in float32."""
    given = v.dtype
    q, k, v, g, beta = (x.float() for x in (q, k, v, g, beta))
    o, state = algorithm(
        q, k, v, workload.per_channel_gate(g, q.shape[-1]), beta,
        q.shape[-1] ** -0.5 if scale is None else scale,
        None if initial_state is None else initial_state.float(),
    )
    return o.to(given), state if output_final_state else None
