"""Run one job of untrusted code in a fresh, limited child process.

Children are forked from a multiprocessing *forkserver* that has already imported torch,
numpy and, on CPU builds where jobs compile (``start_forkserver``), torch's compiler: its
front end, ``torch._dynamo`` (which ``torch.compile`` and the meta device's
decompositions import at first use: some 800 modules, 1.5 s on a small host), and
Inductor (600 more, 2.8 s), so a fresh process per job costs milliseconds rather than
seconds, and no candidate ever shares a process with another candidate or with the
parent. What those imports derived from the forkserver's process (worker pools,
directories) is derived again in each job.

In the child, before the job runs: its own session (the whole process group is killed
afterwards), no core dumps, CPU-time, file-size and address-space limits, stdout and
stderr captured to a capped file, a private working directory holding only the files
staged for the job, an environment scrubbed of credentials, then the isolation steps
(:mod:`._isolation`): a private network namespace and a read-only view of every file
system but the working directory (as root, or in a user namespace of the job's own),
the unprivileged user ``nobody`` with a cap on processes (as root, when the installed
code is world-readable), no capabilities, Landlock (reads of the system, the Python and
the job's directory only; writes to the job's directory only; no TCP) and a seccomp
filter that forbids new processes and non-Unix sockets (where libseccomp is present).
Each step says whether it took effect; the child sends what they add up to
(:class:`~swarmfab.sandbox.Isolation`) before the job runs, and every outcome carries it.
A job marked ``strict`` (untrusted code) is not run where a guarantee it needs is
missing: :class:`~swarmfab.sandbox.WeakSandboxError`.
A job that hangs is killed at its wall-clock limit; one that dies by a signal is
reported with the signal's name and the tail of its output. The parent goes on.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import multiprocessing
import multiprocessing.connection
import multiprocessing.forkserver
import os
import re
import resource
import shutil
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any, NoReturn

from swarmfab.errors import SandboxError
from swarmfab.sandbox import _wire
from swarmfab.sandbox._isolation import can_read, job_user
from swarmfab.sandbox._landlock import code_paths
from swarmfab.sandbox._report import Isolation
from swarmfab.sandbox._steps import ISOLATION, isolate, read_isolation, refuse_weak

__all__ = ["JobOutcome", "JobStatus", "Limits", "job_user", "run_job", "scrubbed_environment",
           "start_forkserver", "with_reads"]

_SECRET = re.compile(r"KEY|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL|DATABASE_URL|DSN|AUTH", re.I)
_PRELOAD = ["numpy", "torch", "swarmfab.evaluation._worker"]
# torch's compiler too, on CPU builds (not yet tried in a forkserver beside CUDA): its
# front end, and Inductor's (2.8 s of imports saved on every job that compiles), unless
# the process said its jobs will not compile (start_forkserver)
_PRELOAD_CPU = ["torch._dynamo", "torch._inductor.compile_fx"]
_preload: list[str] | None = None  # what this process's forkserver imports, once chosen
_preload_lock = threading.Lock()
OUTPUT_FILE = "output.log"
_TAIL_BYTES = 2000


class JobStatus(StrEnum):
    OK = "ok"
    ERROR = "error"  # the job raised a Python exception
    CRASHED = "crashed"  # the process died (signal or exit) without answering
    TIMED_OUT = "timed_out"
    CANCELLED = "cancelled"  # the parent gave up on the job (the run is stopping)


@dataclass(frozen=True, slots=True)
class Limits:
    """Resource limits of one job. ``None`` leaves a limit unset."""

    wall_s: float = 120.0
    cpu_s: float | None = None
    memory_bytes: int | None = 16 * 2**30
    file_bytes: int = 64 * 2**20  # any file the job writes, its captured output included
    max_processes: int = 256  # threads count too; binds once privileges are dropped
    isolate: bool = True  # no network, unprivileged user (where the OS allows)
    # compilers that work through subprocesses (torch.compile's inductor) need to start
    # processes; every other isolation stays, and the whole group is killed at the end
    allow_processes: bool = False
    cores: tuple[int, ...] | None = None  # run only on these cores (a lease), if given
    # for trusted code only (a baseline's compiler cache shared across jobs): directories
    # the job may write besides its own, and variables set in its environment
    writable: tuple[str, ...] = ()
    environment: tuple[tuple[str, str], ...] = ()
    # what the job reads besides the system, its Python and its own directory (Landlock
    # refuses the rest); run_job adds the files it links and where its code lies
    readable: tuple[str, ...] = ()
    # a job that drives a GPU: /proc stays writable, its kernel tunables read-only (the
    # driver fails to start under a read-only /proc; see confine_filesystem)
    device_driver: bool = False
    # untrusted code: not run unless every guarantee it needs holds (WeakSandboxError)
    strict: bool = False
    # the user lets untrusted code run where the sandbox holds only in part
    # (--allow-weak-sandbox): whoever marks jobs strict (the evaluator) marks none
    allow_weak: bool = False

    def for_device(self, device: str) -> Limits:
        """These limits for a job that drives ``device``: on CUDA no address-space limit
        (the driver reserves far more virtual memory than it uses) and the driver's /proc."""
        if device != "cuda":
            return self
        return dataclasses.replace(self, memory_bytes=None, device_driver=True)


@dataclass(frozen=True, slots=True)
class JobOutcome:
    status: JobStatus
    value: Any = None
    detail: str = ""
    output_tail: str = ""
    isolation: Isolation | None = None  # what held in the job's process (None: unknown)


def scrubbed_environment(environ: Mapping[str, str]) -> dict[str, str]:
    """The environment without anything that looks like a credential."""
    return {key: value for key, value in environ.items() if not _SECRET.search(key)}


def start_forkserver(*, compiler: bool = True) -> None:
    """Start this process's forkserver now, unless it runs: it imports what every job
    needs in the background while the caller goes on. ``compiler``: whether it imports
    torch's compiler too (CPU builds), worth it where jobs compile (``torch.compile``, a
    problem's model on the meta device), 4-5 s of a core for nothing at the start of a
    command on a 2-core EPYC VM where they run C kernels; a job that compiles without it
    imports the compiler itself. The first call decides for the process (a job started
    before any call: with the compiler)."""
    _context(compiler)


def _context(compiler: bool = True) -> multiprocessing.context.ForkServerContext:
    """The forkserver context; the server itself starts from a scrubbed environment.

    A forked job inherits the server's initial environment block (what
    /proc/self/environ shows), which clearing ``os.environ`` later does not erase.
    """
    global _preload
    with _preload_lock:
        if _preload is None:  # the first call decides (start_forkserver)
            _preload = _PRELOAD + (_PRELOAD_CPU if compiler and _cpu_build() else [])
        preload = _preload
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(preload)
    secrets = {key: os.environ.pop(key) for key in list(os.environ) if _SECRET.search(key)}
    try:
        multiprocessing.forkserver.ensure_running()
    finally:
        os.environ.update(secrets)
    return context


def _cpu_build() -> bool:
    import torch

    return torch.version.cuda is None and torch.version.hip is None


def _confine(limits: Limits, workdir: Path, environ: Mapping[str, str]) -> Isolation:
    """Everything the child does to itself before the job's code runs; what held."""
    # locks the job makes (tqdm's, through torch.fx) are unlinked at once under "fork";
    # under the forkserver's method they were registered with the parent's resource
    # tracker, never released (the job ends with os._exit), and warned about at exit
    multiprocessing.set_start_method("fork", force=True)
    os.setsid()
    if limits.cores:
        os.sched_setaffinity(0, limits.cores)
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    resource.setrlimit(resource.RLIMIT_FSIZE, (limits.file_bytes, limits.file_bytes))
    if limits.cpu_s is not None:
        cpu = int(limits.cpu_s) + 1
        resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu))
    if limits.memory_bytes is not None:
        resource.setrlimit(resource.RLIMIT_AS, (limits.memory_bytes, limits.memory_bytes))
    output = os.open(workdir / OUTPUT_FILE, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.dup2(output, 1)
    os.dup2(output, 2)
    os.close(output)
    os.chdir(workdir)
    os.environ.clear()
    os.environ.update(scrubbed_environment(environ))
    # every cache a library might write goes into the job's own (writable) directory; the
    # user's name is the one the job runs as (libraries name per-user directories by it)
    user = job_user(limits.isolate)
    os.environ.update(
        USER=user, LOGNAME=user, HOME=str(workdir), TMPDIR=str(workdir),
        XDG_CACHE_HOME=str(workdir / ".cache"),
        TORCHINDUCTOR_CACHE_DIR=str(workdir / ".cache" / "inductor"),
        TRITON_CACHE_DIR=str(workdir / ".cache" / "triton"),
        NUMBA_CACHE_DIR=str(workdir / ".cache" / "numba"),
    )
    os.environ.update(dict(limits.environment))
    tempfile.tempdir = None  # forget a temporary directory chosen before the job
    _rederive_compiler_config(workdir)
    if not limits.isolate:
        return Isolation.off()
    return isolate(limits, workdir)


def _rederive_compiler_config(workdir: Path) -> None:
    """What the preloaded compiler derived from the forkserver's process when imported,
    derived again from the job's: the pool of compile workers from the CPUs the job may
    use, the debug directory from its working directory, and Inductor's precompiled
    headers from its temporary directory and user (``$TMPDIR/torchinductor_<user>``)."""
    inductor = sys.modules.get("torch._inductor.config")
    if inductor is not None and "TORCHINDUCTOR_COMPILE_THREADS" not in os.environ:
        inductor.compile_threads = inductor.decide_compile_threads()  # type: ignore[attr-defined]
    dynamo = sys.modules.get("torch._dynamo.config")
    if dynamo is not None and "TORCH_COMPILE_DEBUG_DIR" not in os.environ:
        dynamo.debug_dir_root = str(workdir / "torch_compile_debug")  # type: ignore[attr-defined]
    codecache = sys.modules.get("torch._inductor.codecache")
    if codecache is not None and hasattr(codecache, "_HEADER_DIR"):
        from torch._inductor.runtime.cache_dir_utils import default_cache_dir

        headers = os.path.join(default_cache_dir(), "precompiled_headers")
        codecache._HEADER_DIR = headers  # type: ignore[attr-defined]
        codecache._HEADER_LOCK_DIR = os.path.join(headers, "locks")  # type: ignore[attr-defined]


def _child(
    conn: multiprocessing.connection.Connection,
    job: Callable[..., Any],
    args: tuple[Any, ...],
    limits: Limits,
    workdir: Path,
    environ: dict[str, str],
) -> None:
    _confined(conn, limits, workdir, environ)
    try:
        message: tuple[JobStatus, Any] = (JobStatus.OK, job(*args))
    except BaseException as exc:  # the job's failure becomes a reported outcome
        message = (JobStatus.ERROR, f"{type(exc).__name__}: {exc}")
    _answer(conn, message)


def _confined(conn: multiprocessing.connection.Connection, limits: Limits, workdir: Path,
              environ: dict[str, str]) -> None:
    """Confine this child and tell the parent what held, before any of the job's code
    runs; a child that cannot, or that is ``strict`` where isolation is weak, answers at
    once and exits (the job never runs)."""
    try:
        isolation = _confine(limits, workdir, environ)
    except BaseException as exc:  # e.g. the parent gave up and removed the directory
        _answer(conn, (JobStatus.ERROR, f"the sandbox could not be set up: {exc!r}"))
    with contextlib.suppress(BaseException):
        conn.send_bytes(_wire.dumps((ISOLATION, isolation)))
    if limits.strict and isolation.level != "full":
        _answer(conn, (JobStatus.ERROR, isolation.refusal()))


def _answer(conn: multiprocessing.connection.Connection,
            message: tuple[JobStatus, Any]) -> NoReturn:
    """Send the outcome and exit at once: no interpreter teardown, so nothing the
    candidate registered runs; a parent that is gone is no reason for a traceback."""
    status, value = message
    with contextlib.suppress(BaseException):
        # the wire's pickling, not multiprocessing's: torch's reducers would share
        # tensors through file descriptors that vanish when this process exits, and the
        # parent reads answers with the wire's closed vocabulary only
        try:
            data = _wire.dumps((status.value, value))
        except Exception as exc:  # e.g. the job returned something that cannot cross
            data = _wire.dumps((JobStatus.ERROR.value, f"its answer cannot be sent: {exc!r}"))
        conn.send_bytes(data)
        conn.close()
    os._exit(0)


def run_job(
    job: Callable[..., Any],
    *args: Any,
    limits: Limits | None = None,
    stage: Mapping[str, Path] | None = None,
    cancel: threading.Event | None = None,
    links: Mapping[str, Path] | None = None,
    records: tuple[type, ...] = (),
    expect: Callable[[Any], bool] | None = None,
) -> JobOutcome:
    """Run ``job(*args)`` in a fresh sandboxed process and return how it ended.

    ``job`` must be a module-level function; its arguments cross a pipe pickled, and its
    result comes back read with :mod:`~swarmfab.sandbox._wire`'s closed vocabulary:
    builtin containers, tensors, and the dataclasses named in ``records``. A result that
    holds anything else, or that ``expect`` (given the value) finds malformed, ends the
    job as an error: the job ran candidate code, so its answer is not trusted.
    ``stage`` copies files into the job's working directory (relative name -> source),
    so the job can read them whatever the permissions of their original location.
    ``links`` does the same for large files the job only reads, as symbolic links (no
    copy; what they point to lies on the read-only part of the job's file system), or
    as copies where the job's user could not read them in place.
    Setting ``cancel`` kills the job and ends it as ``cancelled``.
    """
    limits = with_reads(limits or Limits(), links)
    workdir = _job_directory()
    try:
        _stage_files(workdir, stage, links, limits)
        return _supervise(job, args, limits, workdir, cancel, records, expect)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def with_reads(limits: Limits, links: Mapping[str, Path] | None) -> Limits:
    """``limits`` with what the job reads besides the system and its Python made
    readable (Landlock allows no more): what ``links`` point to, and where this process
    imported its code from (the job's server imported the same)."""
    targets = tuple(str(Path(source).resolve()) for source in (links or {}).values())
    return dataclasses.replace(limits, readable=(*limits.readable, *targets, *code_paths()))


def _job_directory() -> Path:
    """A new private directory for one job (its name carries this process's pid)."""
    _sweep_abandoned_job_dirs()
    try:
        return Path(tempfile.mkdtemp(prefix=f"{_JOB_PREFIX}{os.getpid()}-"))
    except OSError as exc:
        raise SandboxError(f"cannot create a job directory in {tempfile.gettempdir()}: "
                           f"{exc.strerror} (is the disk full?)") from exc


def _stage_files(workdir: Path, stage: Mapping[str, Path] | None,
                 links: Mapping[str, Path] | None, limits: Limits) -> None:
    """Copy ``stage`` and link ``links`` into ``workdir`` (see :func:`run_job`)."""
    try:
        for relative, source in (stage or {}).items():
            target = workdir / relative
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target)
        for relative, source in (links or {}).items():
            target = workdir / relative
            target.parent.mkdir(parents=True, exist_ok=True)
            if can_read(source, limits.isolate):
                target.symlink_to(source.resolve())
            else:
                shutil.copy2(source, target)
    except OSError as exc:
        raise SandboxError(f"cannot stage files for a job in {workdir}: {exc}") from exc


_JOB_PREFIX = "swarmfab-job-"


@functools.cache
def _sweep_abandoned_job_dirs() -> None:
    """Remove job directories left by swarmfab processes that died (kill -9) before they
    could clean up; directory names carry the owner's pid. Once per process."""
    for path in Path(tempfile.gettempdir()).glob(f"{_JOB_PREFIX}*-*"):
        owner = path.name.removeprefix(_JOB_PREFIX).split("-", 1)[0]
        if owner.isdigit() and not _alive(int(owner)):
            shutil.rmtree(path, ignore_errors=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _supervise(
    job: Callable[..., Any], args: tuple[Any, ...], limits: Limits, workdir: Path,
    cancel: threading.Event | None, records: tuple[type, ...],
    expect: Callable[[Any], bool] | None,
) -> JobOutcome:
    context = _context()
    receiver, sender = context.Pipe(duplex=False)
    process = context.Process(
        target=_child, args=(sender, job, args, limits, workdir, dict(os.environ)), daemon=True
    )
    start(process)
    sender.close()
    isolation: Isolation | None = None
    try:
        deadline = time.monotonic() + limits.wall_s
        while _answered(receiver, deadline - time.monotonic(), cancel):
            try:
                data = receiver.recv_bytes(_MAX_ANSWER_BYTES)
            except (EOFError, OSError):
                process.join(5)
                return _held(_died(process, workdir), isolation)
            if isolation is None and (isolation := read_isolation(data)) is not None:
                refuse_weak(isolation, limits)
                continue
            process.join(10)
            return _held(_judged(data, records, expect, workdir), isolation)
        if cancel is not None and cancel.is_set():
            return JobOutcome(JobStatus.CANCELLED, detail="cancelled by the parent",
                              isolation=isolation)
        if _exited(process):
            return _held(_died(process, workdir), isolation)
        return JobOutcome(JobStatus.TIMED_OUT, detail=f"no answer within {limits.wall_s:.0f} s",
                          output_tail=_tail(workdir), isolation=isolation)
    finally:
        _kill_group(process)
        receiver.close()


def _judged(data: bytes, records: tuple[type, ...], expect: Callable[[Any], bool] | None,
            workdir: Path) -> JobOutcome:
    """The outcome a job's answer makes."""
    try:
        status, value = _read_answer(data, records)
    except _wire.AnswerError as exc:
        return JobOutcome(JobStatus.ERROR, detail=f"its answer was refused: {exc}",
                          output_tail=_tail(workdir))
    if status is not JobStatus.OK:
        return JobOutcome(JobStatus.ERROR, detail=str(value), output_tail=_tail(workdir))
    if expect is not None and not expect(value):
        return JobOutcome(JobStatus.ERROR, detail="its answer was refused: it is not "
                          "what the job returns", output_tail=_tail(workdir))
    return JobOutcome(JobStatus.OK, value)


def _held(outcome: JobOutcome, isolation: Isolation | None) -> JobOutcome:
    return dataclasses.replace(outcome, isolation=isolation)


# an answer longer than this is refused unread (the parent would hold it whole)
_MAX_ANSWER_BYTES = 4 * 2**30


def _read_answer(data: bytes, records: tuple[type, ...]) -> tuple[JobStatus, Any]:
    message = _wire.loads(data, records)
    if not (isinstance(message, tuple) and len(message) == 2
            and message[0] in {s.value for s in JobStatus}):
        raise _wire.AnswerError("it is not a (status, value) pair")
    return JobStatus(message[0]), message[1]


def _answered(receiver: multiprocessing.connection.Connection, wall_s: float,
              cancel: threading.Event | None) -> bool:
    """Wait for the child's answer until ``wall_s`` has passed or ``cancel`` is set."""
    wall_s = max(0.0, wall_s)
    if cancel is None:
        return receiver.poll(wall_s)
    deadline = time.monotonic() + wall_s
    while not cancel.is_set():
        left = deadline - time.monotonic()
        if left <= 0:
            return False
        if receiver.poll(min(left, 0.2)):
            return True
    return False


def _tail(workdir: Path) -> str:
    try:
        with open(workdir / OUTPUT_FILE, "rb") as output:
            output.seek(0, os.SEEK_END)
            output.seek(max(0, output.tell() - _TAIL_BYTES))
            return output.read().decode(errors="replace")
    except OSError:
        return ""


def _exited(process: multiprocessing.process.BaseProcess) -> bool:
    process.join(0.05)
    return process.exitcode is not None


def _died(process: multiprocessing.process.BaseProcess, workdir: Path) -> JobOutcome:
    code = process.exitcode
    if code is not None and code < 0:
        detail = f"killed by {signal.Signals(-code).name}"
    else:
        detail = f"exited with status {code} without answering"
    return JobOutcome(JobStatus.CRASHED, detail=detail, output_tail=_tail(workdir))


def start(process: multiprocessing.process.BaseProcess) -> None:
    """Start a job's process; a Ctrl-C that comes meanwhile is raised once it has started.

    Starting a forkserver child is a fork request, then the job written to the child: an
    interrupt between the two would leave a child reading an empty pipe, whose ``EOFError``
    traceback lands on the user's terminal. Python raises interrupts on the main thread
    only, so there the interrupt is held until the child has its job; then the child is
    killed and the interrupt raised.
    """
    previous = signal.getsignal(signal.SIGINT)
    if threading.current_thread() is not threading.main_thread() or previous is None:
        process.start()
        return
    held: list[int] = []
    signal.signal(signal.SIGINT, lambda signum, _frame: held.append(signum))
    try:
        process.start()
    finally:
        signal.signal(signal.SIGINT, previous)
    if held:
        _kill_group(process)
        signal.raise_signal(signal.SIGINT)  # to the handler restored above


def _kill_group(process: multiprocessing.process.BaseProcess) -> None:
    """Kill the job's whole process group (it may have forked) and reap the child; the
    child itself too, in case it had not yet started its own session."""
    if process.pid is not None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(process.pid, signal.SIGKILL)
        if process.exitcode is None:  # not reaped yet, so the pid is still its own
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(process.pid, signal.SIGKILL)
    process.join(5)
