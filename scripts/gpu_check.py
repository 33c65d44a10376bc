#!/usr/bin/env python3
"""The GPU check for a lent H200 (scripts/gpu_check.sh installs the wheels, then runs this).

Phases, each printed with the time elapsed before it starts and its own limit:

  environment    the device, the driver and the versions
  (fla warm-up   from here on, in the background: fla's kernels compile and autotune once
                 for every shape and dtype the check times, into the Triton cache fla's
                 sessions share; chunk_kda takes about 80 s per head count and dtype on an
                 H200, so no timed step may be the first to call it)
  sandbox        python -m swarmfab.sandbox.probe: each isolation step with CUDA and Triton
                 (--mounts, run by hand, finds a mount whose read-only view stops CUDA)
  smoke verify   the space's default Triton candidate and its CUDA kernel, verified on the
                 device in the sandbox
  tests          the GPU test files (beside the warm-up: they time nothing that is quoted)
  (then the warm-up is waited for: from here the device times what the check reports)
  smoke bench    the Triton candidate timed beside fla's fused_recurrent_kda on one shape
  (--smoke: environment, sandbox, smoke verify and smoke bench, about a minute)
  swarm          a short run with device = "cuda" (fla's fused recurrent as its baseline)
  fla ...        its champion against fla: bfloat16 inputs, as fla's users pass them, at
                 B1 T8192 H96 against chunk_kda and fused_recurrent_kda, and at decode
                 against fused_recurrent_kda; --all-shapes adds float32 and the rest of
                 fla's benchmark shapes (longer than five minutes on a fresh host)

The whole check has a limit too (--total, 300 s by default): a phase gets what is left
of it when its own limit is longer, and one that would get nothing is not run ("no time
left"). A phase past its limit is a hang: every process it started gets SIGABRT, on which
Python prints every thread's stack (PYTHONFAULTHANDLER), so the log names the line it hung
on; then SIGKILL. Each phase's output goes to --out/<phase>.log, the tables' JSON beside
it, and a summary to --out/gpu_check.json. Exit 0 when every phase passed, 1 when one
failed, 2 when there is no GPU.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from swarmfab.evaluation import TRUSTED_TRITON_CACHE

PYTHON = sys.executable
DUMP_GRACE_S = 5.0  # after SIGABRT, time for the stacks to be written
CHUNK, FUSED = "fla-chunk", "fla-fused-recurrent"  # fla's two kernels, as baselines
HEADLINE, DECODE = "1,8192,96,128,128", "64,1,16,128,128+h0"
# (name, dtype, shapes, fla baselines): the champion against fla. fla autotunes chunk_kda
# at its first call for each head count and dtype (about 80 s each on an H200), and for
# decode too, so the five-minute check times bfloat16 inputs, as fla's users pass them, at
# the headline shape against both kernels and at decode against the fused recurrent one;
# --all-shapes adds float32 and the rest of fla's benchmark shapes
TABLES = (("fla bfloat16", "bfloat16", (HEADLINE,), (CHUNK, FUSED)),
          ("fla decode", "bfloat16", (DECODE,), (FUSED,)))
ALL_TABLES = (("fla float32", "float32", (HEADLINE, "2,16384,16,128,128", "4,2048,16,128,128",
                                          "4,4096,64,128,128", "8,1024,8,64,64"),
               (CHUNK, FUSED)),
              ("fla bfloat16", "bfloat16", (HEADLINE, "4,2048,16,128,128"), (CHUNK, FUSED)),
              ("fla decode", "float32", (DECODE,), (FUSED,)),
              ("fla decode bfloat16", "bfloat16", (DECODE,), (FUSED,)))
SMOKE_SHAPE = "2,1024,16,128,128"
MIN_PHASE_S = 10.0  # a phase that would get less of the check's limit is not run
GOAL = """workload = "kda"
device = "cuda"
budget = "{budget}"
threads = 4
eval_timeout = "120s"
{baselines}shapes = [
  {{B = 2, T = 1024, H = 16, K = 128, V = 128}},
  {{B = 64, T = 1, H = 16, K = 128, V = 128, initial_state = true}},
]
"""


@dataclass
class Phase:
    name: str
    status: str  # passed, failed, timed out, no time left
    seconds: float
    limit_s: float
    returncode: int | None
    log: str  # the log's last lines

    @property
    def passed(self) -> bool:
        return self.status == "passed"


def phase_limit(limit_s: float, total_s: float, started: float) -> float | None:
    """A phase's limit within what is left of the check's (``started`` on the monotonic
    clock); None where less than :data:`MIN_PHASE_S` is left: the phase is not run."""
    left = total_s - (time.monotonic() - started)
    return None if left < MIN_PHASE_S else min(limit_s, left)


def descendants(pid: int) -> list[int]:
    """Every live process descended from ``pid`` (a new session included), from /proc."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        parent = int(stat[stat.rindex(")") + 2:].split()[1])
        children.setdefault(parent, []).append(int(entry.name))
    found, queue = [], [pid]
    while queue:
        for child in children.get(queue.pop(), []):
            found.append(child)
            queue.append(child)
    return found


def _signal_all(pids: list[int], sig: int) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)


def run_phase(name: str, commands: list[list[str]], limit_s: float, out: Path,
              env: dict[str, str] | None = None, started: float | None = None) -> Phase:
    """Run ``commands`` in turn within ``limit_s`` seconds, their output shown and kept
    in ``out/<name>.log``; past the limit, the watchdog (see the module's docstring)."""
    started = time.monotonic() if started is None else started
    print(f"\n== {name} ({time.monotonic() - started:.0f} s elapsed, limit {limit_s:.0f} s)",
          flush=True)
    log_path = out / f"{name.replace(' ', '_')}.log"
    began = time.monotonic()
    deadline = began + limit_s
    status, code = "passed", 0
    environment = {**os.environ, **(env or {}), "PYTHONFAULTHANDLER": "1",
                   "PYTHONUNBUFFERED": "1"}
    with log_path.open("w") as log:
        for command in commands:
            process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                       env=environment, start_new_session=True)
            echo = threading.Thread(target=_tee, args=(process, log), daemon=True)
            echo.start()
            try:
                code = process.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                _hang(process)
                status, code = "timed out", None
            echo.join(timeout=DUMP_GRACE_S)
            if code != 0 and status == "passed":
                status = "failed"
            if status != "passed":
                break
    seconds = time.monotonic() - began
    tail = "\n".join(log_path.read_text(errors="replace").splitlines()[-40:])
    print(f"-- {name}: {status} in {seconds:.0f} s", flush=True)
    return Phase(name, status, round(seconds, 1), limit_s, code, tail)


def _tee(process: subprocess.Popen[bytes], log: object) -> None:
    assert process.stdout is not None
    for line in iter(process.stdout.readline, b""):
        text = line.decode(errors="replace")
        sys.stdout.write(text)
        log.write(text)  # type: ignore[attr-defined]
    sys.stdout.flush()


def _hang(process: subprocess.Popen[bytes]) -> None:
    """Every process of the phase prints its stacks (SIGABRT), one at a time, so that
    their stacks do not interleave in the log (all at once, two dumps once read "Fatal
    Python error: AbortedFatal Python error"); then all are killed."""
    everyone = [process.pid, *descendants(process.pid)]
    print(f"watchdog: the limit has passed; {len(everyone)} process(es) print their stacks "
          "and are killed", flush=True)
    for pid in everyone:
        _signal_all([pid], signal.SIGABRT)
        _wait_gone(pid, DUMP_GRACE_S / len(everyone))
    with contextlib.suppress(subprocess.TimeoutExpired):
        process.wait(timeout=DUMP_GRACE_S)
    _signal_all([*everyone, *descendants(process.pid)], signal.SIGKILL)
    process.wait()


def _wait_gone(pid: int, limit_s: float) -> None:
    """Until ``pid`` has exited (gone, or a zombie) or ``limit_s`` has passed."""
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            return
        if stat[stat.rindex(")") + 2:].split()[0] in ("Z", "X"):
            return
        time.sleep(0.02)


def _swarmfab(*args: str) -> list[str]:
    return [PYTHON, "-m", "swarmfab", *args]


def _render(work: Path) -> tuple[Path, Path]:
    """The GPU space's default Triton candidate and its CUDA kernel, as files."""
    from swarmfab.kernels.delta_gpu import gpu_space

    space = gpu_space()
    paths = []
    for kernel in ("triton-chunked", "cuda-recurrent"):
        candidate = space.instantiate({**space.default(), "kernel": kernel}, threads=1)
        path = work / candidate.entry
        path.write_text(candidate.sources[candidate.entry])
        paths.append(path)
    return paths[0], paths[1]


def _warm_fla(cache: Path, tasks: list[tuple[str, str, list[str]]]) -> list[str]:
    """A command that calls fla's baselines once for each (dtype, shape, baselines) of
    ``tasks``, with the Triton cache and autotuning results of fla's sessions."""
    return [PYTHON, __file__, "--warm-fla", str(cache), json.dumps(tasks)]


def _warm_fla_here(cache: Path, tasks: list[tuple[str, str, list[str]]]) -> int:
    """The warm-up itself (``--warm-fla``), each call printed with its time."""
    os.environ.update(TRITON_CACHE_DIR=str(cache), TRITON_CACHE_AUTOTUNING="1")
    os.umask(0)  # sandboxed sessions run as an unprivileged user where they can, and
    cache.mkdir(parents=True, exist_ok=True)  # add their own kernels to the cache
    import torch

    from swarmfab.evaluation import on_device
    from swarmfab.goal import parse_shape
    from swarmfab.workloads import Case, get_workload

    workload = get_workload("kda")
    baselines = workload.baselines()
    for dtype, text, names in tasks:
        case = Case(f"warm-up {text}", parse_shape(text), dtype=dtype)
        inputs = on_device(workload.make_inputs(case), "cuda")
        for name in names:
            began = time.monotonic()
            workload.call(baselines[name], inputs)
            torch.cuda.synchronize()
            print(f"{name} {text} {dtype}: {time.monotonic() - began:.1f} s", flush=True)
    return 0


def _has_fla() -> bool:
    try:
        import fla.ops.kda  # noqa: F401
    except ImportError:
        return False
    return True


def _bench(store: list[str], dtype: str, shapes: tuple[str, ...], baselines: list[str],
           candidate: str, table: Path) -> list[list[str]]:
    """The bench as JSON into ``table``, then shown short (the JSON is for the record)."""
    shape_args = [arg for shape in shapes for arg in ("--shape", shape)]
    bench = _swarmfab("bench", "kda", "--device", "cuda", "--candidate", candidate,
                      "--dtype", dtype, "--threads", "4", *store, *baselines, *shape_args,
                      "--json")
    return [["bash", "-c", f"{shlex.join(bench)} > {shlex.quote(str(table))}"],
            [PYTHON, __file__, "--show-table", str(table)]]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="stop after the smoke phase")
    parser.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", "gpu-check")))
    parser.add_argument("--work", type=Path, default=Path("/tmp/swarmfab-gpu-check"))
    parser.add_argument("--swarm-budget", default="90s")
    parser.add_argument("--all-shapes", action="store_true",
                        help="time all of fla's benchmark shapes (longer than 5 minutes on "
                             "a fresh host: fla autotunes each head count and dtype)")
    parser.add_argument("--total", type=float, default=300.0,
                        help="the whole check's limit in seconds")
    parser.add_argument("--show-table", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--warm-fla", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.show_table is not None:
        return _show_table(args.show_table)
    if args.warm_fla:
        return _warm_fla_here(Path(args.warm_fla[0]), json.loads(args.warm_fla[1]))
    started = time.monotonic()
    args.out.mkdir(parents=True, exist_ok=True)
    args.work.mkdir(parents=True, exist_ok=True)
    phases: list[Phase] = []

    def phase(name: str, commands: list[list[str]], limit_s: float) -> bool:
        limit = phase_limit(limit_s, args.total, started)
        if limit is None:
            print(f"\n== {name}: not run, too little of the check's {args.total:.0f} s limit "
                  "left", flush=True)
            phases.append(Phase(name, "no time left", 0.0, 0.0, None, ""))
        else:
            phases.append(run_phase(name, commands, limit, args.out, started=started))
        _write_summary(args.out, phases, started)
        return phases[-1].passed

    if shutil.which("nvidia-smi") is None:
        phases.append(Phase("environment", "failed", 0.0, 0.0, None,
                            "no nvidia-smi: this check is for a host with an NVIDIA GPU"))
        _write_summary(args.out, phases, started)
        print("no NVIDIA GPU visible: this check is for a GPU host", file=sys.stderr)
        return 2
    versions = ("import torch, triton; print('torch', torch.__version__, 'triton', "
                "triton.__version__, 'device', torch.cuda.get_device_name())\n"
                "try:\n import fla; print('fla', getattr(fla, '__version__', '?'))\n"
                "except ImportError: print('fla: not installed')\nimport swarmfab")
    if not phase("environment", [["nvidia-smi", "--query-gpu=name,memory.total,driver_version",
                                  "--format=csv,noheader"], [PYTHON, "-c", versions]], 60):
        return 2
    store = ["--db", str(args.work / "runs.db"), "--workdir", str(args.work / "wd")]
    fla = _has_fla()
    warm_up = None
    tables = [] if args.smoke or not fla else list(ALL_TABLES if args.all_shapes else TABLES)
    if fla:  # in the background from here, so no timed step compiles or autotunes fla
        cache = args.work / "wd" / "cache" / TRUSTED_TRITON_CACHE
        tasks = [("float32", SMOKE_SHAPE, [FUSED]), *(
            (dtype, shape, list(names)) for _, dtype, shapes, names in tables
            for shape in shapes)]
        warm_up = threading.Thread(target=lambda: phases.append(run_phase(
            "fla warm-up", [_warm_fla(cache, tasks)], args.total, args.out,
            started=started)), daemon=True)
        warm_up.start()
    phase("sandbox", [[PYTHON, "-m", "swarmfab.sandbox.probe"]], 90)
    triton_file, cuda_file = _render(args.work)
    phase("smoke verify", [_swarmfab("verify", "kda", str(triton_file), "--backend", "triton",
                                     "--fuzz", "2", *store),
                           _swarmfab("verify", "kda", str(cuda_file), "--fuzz", "2", *store)],
          90)
    if not args.smoke:  # nothing it times is quoted: it runs beside the warm-up
        phase("tests", [[PYTHON, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                         "tests/kernels/test_delta_gpu.py", "tests/backends/test_gpu.py",
                         "tests/measure/test_gpu_timing.py", "tests/verify/test_gpu_probes.py"]],
              120)
    if warm_up is not None:  # from here on everything is timed: the device is the check's
        print(f"\n(waiting for the fla warm-up: {time.monotonic() - started:.0f} s elapsed)",
              flush=True)
        warm_up.join(timeout=max(0.0, args.total - (time.monotonic() - started)))
    peer = ["--baseline", FUSED] if fla else []
    phase("smoke bench", _bench(store, "float32", (SMOKE_SHAPE,), peer, "default",
                                args.out / "smoke_table.json"), 90)
    if not args.smoke:
        goal = args.work / "goal.toml"
        goal.write_text(GOAL.format(budget=args.swarm_budget,
                                    baselines=f'baselines = ["{FUSED}"]\n' if fla else ""))
        phase("swarm", [_swarmfab("run", str(goal), *store)], 150)
        for name, dtype, shapes, names in tables:
            baselines = [arg for baseline in names for arg in ("--baseline", baseline)]
            phase(name, _bench(store, dtype, shapes, baselines, "champion",
                               args.out / f"{name.replace(' ', '_')}.json"), 120)
    _write_summary(args.out, phases, started)
    print(f"\n{sum(p.passed for p in phases)}/{len(phases)} phases passed in "
          f"{time.monotonic() - started:.0f} s; summary: {args.out / 'gpu_check.json'}")
    return 0 if all(p.passed for p in phases) else 1


def _show_table(path: Path) -> int:
    """A bench's JSON, kept at ``path``, shown as a short table."""
    for table in json.loads(path.read_text()):
        times = "  ".join(f"{name} {est['median'] * 1e3:.3f} ms"
                          for name, est in table["seconds"].items())
        print(f"{table['shape']} ({table['dtype']}): {times}")
    return 0


def _write_summary(out: Path, phases: list[Phase], started: float) -> None:
    summary = {"seconds": round(time.monotonic() - started, 1),
               "passed": bool(phases) and all(p.passed for p in phases),
               "phases": [asdict(p) for p in phases]}
    (out / "gpu_check.json").write_text(json.dumps(summary, indent=2))


if __name__ == "__main__":
    sys.exit(main())
