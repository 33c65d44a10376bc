"""The design space of any PyTorch module: how its ``Model`` is compiled and run.

Every setting renders to one plain file: the problem's own source followed by a
``class ModelNew(Model)`` whose first call prepares the fast path (compiled, traced and
frozen, converted) and whose later calls take it. A user can read the file and keep it.

- algorithm, ``engine``: eager PyTorch, Inductor (``torch.compile``), or TorchScript
  trace + freeze;
- compiler, ``autotune``, ``freezing``, ``cpp_wrapper``, ``dynamic``: Inductor's
  GEMM/conv autotuning; weights folded in as (prepacked) constants; the wrapper in C++
  instead of Python; dynamic shapes or one graph per shape;
- tiling, ``coordinate_descent``: Inductor's tuning of its kernels' block sizes;
- layout, ``layout``: channels-last activations and weights (problems with convolutions);
- library, ``gemm`` (not read under bfloat16): the float32 GEMMs (``F.linear``,
  matmuls by a 2-D matrix) through ATen's BLAS (MKL) or oneDNN, one opaque operator
  that Inductor fuses around (under bfloat16 autocast it would keep them in float32,
  so there autocast's bfloat16 GEMMs run instead). Which is
  faster depends on the CPU (:mod:`~swarmfab.kernels.gemm`): the default is the one a
  probe found clearly faster here, and the search may try the other (problems with
  GEMMs, where torch has oneDNN);
- numerics, ``precision``: bfloat16 autocast, only where the CPU has bfloat16
  instructions (the verifier holds it to the goal's tolerance), for calls of at least
  :data:`BF16_MIN_ROWS` rows (the first input's elements over its last axis): a GEMM of
  a row or two (a decode step) is memory-bound, and there float32 is faster, so such a
  call runs the Model's own forward (figures in ``docs/benchmarks.md``);
- parallelism, ``threads``: the benchmark's threads, or one (a small problem pays for
  waking a pool);
- runtime, ``grad_mode``: ``no_grad`` or ``inference_mode`` around the call;
- runtime, ``allocator``: glibc's malloc as the system sets it, or told to keep freed
  memory (``retain``: no mmap for large blocks, no trimming), so large tensors land on
  pages already mapped. It is process-wide, says so in the file, and is offered where
  the C library is glibc; its default is ``retain`` where a probe finds fresh pages
  costly here (:mod:`~swarmfab.kernels.allocator`). Each implementation is timed in a
  process of its own, so the setting is measured on the candidate alone.

A template reads only the knobs of its engine; the others are not rendered, so settings
that differ only there are the same candidate and are judged once.
"""

from __future__ import annotations

import re
import textwrap

from swarmfab.kernels._host import BF16_FLAGS, host_cpu_flags
from swarmfab.kernels._space import DesignSpace, Knob, Setting
from swarmfab.kernels.allocator import RETAIN_SOURCE, faults_are_costly, glibc_malloc
from swarmfab.kernels.gemm import onednn_available, onednn_gemm_faster

__all__ = ["module_space", "render_module"]

ENTRY = "model_new.py"
BF16_MIN_ROWS = 8  # fewer rows than this run in float32 under precision = bfloat16
_CONVOLUTION = re.compile(r"\bconv[123]d\b|\bConv[123]d\b|\bconv_transpose[123]d\b"
                          r"|\bConvTranspose[123]d\b")
_GEMM = re.compile(r"\bmatmul\b|\bmm\b|\blinear\b|\bLinear\b|\w\s*@\s*\w")


def module_space(workload: str, source: str, flags: frozenset[str] | None = None
                 ) -> DesignSpace:
    """The space of ``workload`` (a problem file whose text is ``source``)."""
    flags = host_cpu_flags() if flags is None else flags
    knobs = [
        Knob("engine", "algorithm", ("inductor", "eager", "jit-freeze"), "inductor",
             help="how the forward runs"),
        Knob("autotune", "compiler", ("off", "on"), "off",
             help="Inductor max_autotune: benchmark GEMM/conv choices at compile time"),
        Knob("freezing", "compiler", ("off", "on"), "on",
             help="Inductor freezing: weights become constants, prepacked for the CPU"),
        Knob("cpp_wrapper", "compiler", ("off", "on"), "off",
             help="Inductor's wrapper code in C++ (less Python per call)"),
        Knob("dynamic", "compiler", ("auto", "static"), "auto",
             help="torch.compile dynamic=None (auto) or False (one graph per shape)"),
        Knob("coordinate_descent", "tiling", ("off", "on"), "off",
             help="Inductor coordinate-descent tuning of block sizes"),
        Knob("threads", "parallelism", ("all", "one"), "all",
             help="intra-op threads: the benchmark's, or one"),
        Knob("grad_mode", "runtime", ("no_grad", "inference_mode"), "no_grad",
             help="autograd bookkeeping switched off, or inference mode"),
    ]
    if _CONVOLUTION.search(source):
        knobs.append(Knob("layout", "layout", ("contiguous", "channels_last"), "contiguous",
                          help="memory format of 4-D activations and weights"))
    if _GEMM.search(source) and onednn_available():
        knobs.append(Knob("gemm", "library", ("aten", "onednn"),
                          "onednn" if onednn_gemm_faster() else "aten",
                          help="float32 GEMMs through ATen's BLAS (MKL) or oneDNN (the "
                               "default: the one clearly faster on this host)"))
    if glibc_malloc():
        knobs.append(Knob("allocator", "runtime", ("system", "retain"),
                          "retain" if faults_are_costly() else "system",
                          help="process-wide: glibc malloc as set, or keeping freed memory "
                               "(the default: retain where fresh pages are costly here)"))
    if flags & BF16_FLAGS:
        knobs.append(Knob("precision", "numerics", ("float32", "bfloat16"), "float32",
                          help="bfloat16 autocast where the CPU has bfloat16 instructions"))

    def render(setting: Setting, threads: int) -> tuple[dict[str, str], str, tuple[str, ...]]:
        return {ENTRY: render_module(source, setting, threads)}, ENTRY, ()

    return DesignSpace(name="torch-module", workload=workload, backend="torch-module",
                       knobs=tuple(knobs), render=render)


def render_module(source: str, setting: Setting, threads: int) -> str:
    """The problem's source plus the ModelNew that ``setting`` describes."""
    engine = str(setting.get("engine", "inductor"))
    shown = {name: value for name, value in sorted(setting.items())
             if name in _read_by(engine, setting)}
    if threads <= 1:
        shown.pop("threads", None)
    settings = ", ".join(f"{k}={v}" for k, v in shown.items()) or "its defaults"
    lines = [
        "", "",
        "# " + "-" * 86,
        *textwrap.wrap(f"ModelNew: the Model above, run with {settings}", width=86,
                       initial_indent="# ", subsequent_indent="#   "),
        "# " + "-" * 86,
        "class ModelNew(Model):",
        '    """The first call prepares the fast path (with the weights already loaded);',
        '    later calls take it. Weights loaded again make it stale: it is prepared',
        '    again (a frozen or compiled path may hold the old weights as constants)."""',
        "",
        "    def __init__(self, *args, **kwargs):",
        "        super().__init__(*args, **kwargs)",
        "        self.register_load_state_dict_post_hook(ModelNew._weights_loaded)",
        "",
        "    @staticmethod",
        "    def _weights_loaded(module, incompatible_keys):",
        '        module.__dict__.pop("_fast", None)',
        "",
        "    def forward(self, *inputs):",
        '        run = self.__dict__.get("_fast")',
        "        if run is None:",
        '            run = self.__dict__["_fast"] = self._prepare(inputs)',
        "        return run(*inputs)",
        "",
        "    def _prepare(self, example):",
    ]
    body = _prepare_body(engine, shown)
    lines += ["        " + line if line else "" for line in body]
    text = source.rstrip("\n") + "\n" + "\n".join(lines) + "\n"
    if shown.get("gemm") == "onednn":
        text += _ONEDNN_GEMMS
    if shown.get("allocator") == "retain":
        text += RETAIN_SOURCE
    if engine == "jit-freeze":
        text += _EAGER_WRAPPER
    if shown.get("precision") == "bfloat16":
        text += _ROWS
    return text


def _read_by(engine: str, setting: Setting) -> set[str]:
    """The knobs a setting's template reads (the others are not rendered)."""
    read = {"engine", "threads", "grad_mode", "layout", "precision", "allocator"}
    if engine == "inductor":
        read |= {"autotune", "freezing", "cpp_wrapper", "dynamic", "coordinate_descent"}
    # a trace would record the oneDNN call with its weights; under bfloat16 autocast the
    # GEMMs are bfloat16 ones (an opaque float32 operator would keep them in float32)
    if engine != "jit-freeze" and setting.get("precision") != "bfloat16":
        read.add("gemm")
    return read & set(setting)


def _prepare_body(engine: str, shown: Setting) -> list[str]:
    body = []
    if shown.get("allocator") == "retain":
        body.append("_retain_freed_memory()  # process-wide: see its docstring below")
    if shown.get("threads") == "one":
        body.append("torch.set_num_threads(1)")
    channels_last = shown.get("layout") == "channels_last"
    if channels_last:
        body.append("self.to(memory_format=torch.channels_last)")
    forward = ("_onednn_gemms(super().forward)" if shown.get("gemm") == "onednn"
               else "super().forward")
    if engine == "eager":
        body.append(f"fast = {forward}")
    elif engine == "inductor":
        options = {"max_autotune": shown.get("autotune") == "on",
                   "freezing": shown.get("freezing") == "on",
                   "cpp_wrapper": shown.get("cpp_wrapper") == "on",
                   "coordinate_descent_tuning": shown.get("coordinate_descent") == "on"}
        chosen = {name: True for name, on in options.items() if on}
        dynamic = "False" if shown.get("dynamic") == "static" else "None"
        body.append(f"fast = torch.compile({forward}, dynamic={dynamic}"
                    + (f", options={chosen!r})" if chosen else ")"))
    else:  # jit-freeze
        body += ["with torch.no_grad():",
                 "    traced = torch.jit.trace(_Eager(self).eval(), tuple(example))",
                 "fast = torch.jit.optimize_for_inference(torch.jit.freeze(traced))"]
    grad = "torch.inference_mode()" if shown.get("grad_mode") == "inference_mode" \
        else "torch.no_grad()"
    bfloat16 = shown.get("precision") == "bfloat16"
    if bfloat16:
        body.append("plain = super().forward")
    body += ["", "def run(*inputs):"]
    if channels_last:
        body += ["    inputs = [x.contiguous(memory_format=torch.channels_last)",
                 "              if isinstance(x, torch.Tensor) and x.dim() == 4 else x",
                 "              for x in inputs]"]
    if bfloat16:
        body += [f"    if _rows(inputs) < {BF16_MIN_ROWS}:  # memory-bound: float32 is faster",
                 f"        with {grad}:",
                 "            return plain(*inputs)",
                 f"    with {grad}, torch.autocast('cpu', dtype=torch.bfloat16):",
                 "        out = fast(*inputs)",
                 "    if isinstance(out, tuple):",
                 "        return tuple(o.float() for o in out)",
                 "    return out.float()"]
    else:
        body += [f"    with {grad}:", "        return fast(*inputs)"]
    body += ["", "return run"]
    return body


_ROWS = '''

def _rows(inputs):
    """The rows of the first tensor input: its elements over its last axis."""
    for x in inputs:
        if isinstance(x, torch.Tensor):
            return x.numel() // x.shape[-1] if x.dim() >= 2 and x.shape[-1] else x.numel()
    return 0
'''

_EAGER_WRAPPER = '''

class _Eager(torch.nn.Module):
    """Model's own forward on the ModelNew's parameters, for tracing."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, *inputs):
        return Model.forward(self.model, *inputs)
'''


_ONEDNN_GEMMS = '''

# GEMMs through oneDNN: F.linear, and matmuls of a contiguous float32 matrix (or batch of
# rows) by a 2-D matrix, run as one operator that torch.compile treats as opaque
try:
    _onednn_linear = torch.ops.model_new.onednn_linear
except AttributeError:  # the first time this file runs in the process
    @torch.library.custom_op("model_new::onednn_linear", mutates_args=())
    def _onednn_linear(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        return torch.ops.mkldnn._linear_pointwise(x, weight, None, "none", [], "")

    @_onednn_linear.register_fake
    def _(x, weight):
        return x.new_empty(*x.shape[:-1], weight.shape[0])


def _float32(*tensors):
    return all(isinstance(t, torch.Tensor) and t.dtype == torch.float32
               and t.device.type == "cpu" and t.layout == torch.strided for t in tensors)


def _rows_by_matrix(x, weight):
    """x [..., K], contiguous, times a matrix: what oneDNN takes as it is."""
    return _float32(x, weight) and x.dim() >= 2 and x.is_contiguous() and weight.dim() == 2


class _OneDnnGemms(torch.overrides.TorchFunctionMode):
    MATMULS = (torch.matmul, torch.mm, torch.Tensor.matmul, torch.Tensor.mm,
               torch.Tensor.__matmul__)

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is torch.nn.functional.linear and len(args) >= 2:
            bias = args[2] if len(args) > 2 else kwargs.get("bias")
            if _rows_by_matrix(args[0], args[1]) and (bias is None or _float32(bias)):
                out = _onednn_linear(args[0], args[1])
                return out if bias is None else out + bias
        elif func in self.MATMULS and len(args) == 2 and not kwargs \\
                and _rows_by_matrix(args[0], args[1]):
            return _onednn_linear(args[0], args[1].t())
        return func(*args, **kwargs)


def _onednn_gemms(forward):
    def run(*inputs):
        with _OneDnnGemms():
            return forward(*inputs)
    return run
'''
