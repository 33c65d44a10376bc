"""GPU design space of KDA: Triton chunked and per-token kernels, a CUDA per-token kernel.

One space, three kernels, so the same built-in agents (one per knob domain) search it:
the ``kernel`` knob picks the template and with it the backend (``triton`` or ``cuda``);
the other knobs are rendered only into the template that reads them, so settings that
differ in an unused knob give the same code, hence the same candidate, and are not
evaluated twice.
"""

from __future__ import annotations

from importlib import resources

from swarmfab.kernels._space import DesignSpace, Knob, Setting

__all__ = [
    "CUDA_TEMPLATE",
    "KERNELS",
    "TRITON_TEMPLATE",
    "gpu_space",
    "render_cuda",
    "render_triton",
]

TRITON_TEMPLATE = "kda_triton.py.tmpl"
CUDA_TEMPLATE = "kda_recurrent.cu"
KERNELS = {  # kernel knob value -> (backend, template)
    "triton-chunked": ("triton", TRITON_TEMPLATE),
    "triton-chunked-parallel": ("triton", TRITON_TEMPLATE),
    "triton-recurrent": ("triton", TRITON_TEMPLATE),
    "cuda-recurrent": ("cuda", CUDA_TEMPLATE),
}
_CUDA_FLAGS = ("-O3", "--use_fast_math")


def template(name: str) -> str:
    return resources.files(__package__).joinpath(name).read_text()


def render_triton(setting: Setting) -> str:
    """The Triton template with its knob header (only the knobs its kernel reads)."""
    algorithm = {"triton-chunked": "chunked", "triton-chunked-parallel": "chunked-parallel"
                 }.get(str(setting["kernel"]), "recurrent")
    chunked = algorithm != "recurrent"
    header = [
        "# knobs chosen by swarmfab",
        f"ALGORITHM = {algorithm!r}",
        f"CHUNK = {setting['chunk'] if chunked else 0}",
        f"BLOCK_V = {setting['block_v']}",
        f"DOT_PRECISION = {setting['dot_precision'] if chunked else 'ieee'!r}",
        f"NUM_WARPS = {setting['warps']}",
        f"NUM_STAGES = {setting['stages']}",
    ]
    return "\n".join(header) + "\n\n" + template(TRITON_TEMPLATE)


def render_cuda(setting: Setting, symbol: str = "kda_forward") -> str:
    """The CUDA template with its knob #defines."""
    defines = [
        "/* knobs chosen by swarmfab */",
        f"#define KDA_SYMBOL {symbol}",
        f"#define KDA_BV {setting['block_v']}",
        f"#define KDA_KSPLIT {setting['k_split']}",
        f"#define KDA_STATE_SHARED {1 if setting['state'] == 'shared' else 0}",
    ]
    return "\n".join(defines) + "\n\n" + template(CUDA_TEMPLATE)


def _backend(setting: Setting) -> str:
    return KERNELS[str(setting["kernel"])][0]


def _render(setting: Setting, threads: int) -> tuple[dict[str, str], str, tuple[str, ...]]:
    if _backend(setting) == "cuda":
        return {"kda_recurrent.cu": render_cuda(setting)}, "kda_recurrent.cu", _CUDA_FLAGS
    return {"kda_triton.py": render_triton(setting)}, "kda_triton.py", ()


def gpu_space(workload: str = "kda") -> DesignSpace:
    """KDA on one CUDA device. The default is the chunked kernel with tensor-core products
    (tl.dot) at full float32 precision and chunk 16, the chunk ptxas spills least for at
    K = 128 (``make gpu-compile-check`` prints the report); agents search around it."""
    if workload != "kda":
        raise ValueError(f"the GPU design space covers kda only, not {workload!r}")
    return DesignSpace(
        name="kda-gpu",
        workload=workload,
        backend="triton",
        backend_for=_backend,
        knobs=(
            Knob("kernel", "algorithm", tuple(KERNELS), "triton-chunked",
                 help="chunked WY/UT (tensor-core products), one program walking the chunks "
                      "or fla's three kernels (every chunk's intra-chunk work at once, the "
                      "state pass, every chunk's outputs at once); per-token recurrence"),
            Knob("chunk", "tiling", (16, 32, 64), 16, ordered=True,
                 help="tokens per chunk of the chunked kernel"),
            Knob("block_v", "tiling", (16, 32, 64, 128), 32, ordered=True,
                 help="state columns per program/block (each keeps its tile on chip)"),
            Knob("dot_precision", "tensor-cores", ("ieee", "tf32x3", "tf32", "bf16"), "ieee",
                 help="tl.dot inputs: exact float32, three TF32 passes, one TF32 pass, or "
                      "rounded to bfloat16 (float32 accumulation; for bfloat16 goals)"),
            Knob("warps", "parallelism", (2, 4, 8), 4, ordered=True,
                 help="warps per Triton program"),
            Knob("stages", "memory", (1, 2, 3), 3, ordered=True,
                 help="Triton's software pipelining of the kernels' loops (num_stages): "
                      "deeper hides more load latency and takes more shared memory"),
            Knob("k_split", "parallelism", (1, 2, 4, 8), 4, ordered=True,
                 help="CUDA: lanes sharing one state column (rows split, shuffle-reduced)"),
            Knob("state", "memory", ("registers", "shared"), "registers",
                 help="CUDA: where a block keeps its state tile"),
        ),
        render=_render,
        # measured on an H200 at B1 T8192 H96 K=V=128, float32 products (scripts/
        # gpu_kernels.py, docs/benchmarks.md): 16.2 ms against 53 ms for the default and
        # 153 ms at chunk 64, whose tiles spill; two stages (three take 280 KB of shared
        # memory at chunk 64, and an H200 gives a block 227 KB)
        starting=(({"kernel": "triton-chunked-parallel", "chunk": 16, "stages": 2},
                   "fla's structure: only the state pass walks the chunks, at chunk 16"),),
    )
