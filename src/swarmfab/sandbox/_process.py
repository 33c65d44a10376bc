"""Run one job of untrusted code in a fresh, limited child process.

Children are forked from a multiprocessing *forkserver* that has already imported torch
and numpy, so a fresh process per job costs milliseconds rather than seconds, and no
candidate ever shares a process with another candidate or with the parent.

In the child, before the job runs: its own session (so the whole process group can be
killed), no core dumps, a CPU-time limit, a file-size limit, an address-space cap, a
private temporary working directory, and an environment scrubbed of credentials. A job
that hangs is killed at its wall-clock limit; a job that dies by a signal is reported
with the signal's name. Either way the parent goes on.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import multiprocessing.connection
import os
import pickle
import re
import resource
import signal
import tempfile
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

__all__ = ["JobOutcome", "JobStatus", "Limits", "run_job", "scrubbed_environment"]

_SECRET = re.compile(r"KEY|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL|DATABASE_URL|DSN|AUTH", re.I)
_PRELOAD = ["numpy", "torch", "swarmfab.evaluation._worker"]


class JobStatus(StrEnum):
    OK = "ok"
    ERROR = "error"  # the job raised a Python exception
    CRASHED = "crashed"  # the process died (signal or exit) without answering
    TIMED_OUT = "timed_out"


@dataclass(frozen=True, slots=True)
class Limits:
    """Resource limits of one job. ``None`` leaves a limit unset."""

    wall_s: float = 120.0
    cpu_s: float | None = None
    memory_bytes: int | None = 16 * 2**30
    file_bytes: int = 256 * 2**20


@dataclass(frozen=True, slots=True)
class JobOutcome:
    status: JobStatus
    value: Any = None
    detail: str = ""


def scrubbed_environment(environ: dict[str, str]) -> dict[str, str]:
    """The environment without anything that looks like a credential."""
    return {key: value for key, value in environ.items() if not _SECRET.search(key)}


def _context() -> multiprocessing.context.ForkServerContext:
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(_PRELOAD)
    return context


def _apply_limits(limits: Limits) -> None:
    os.setsid()
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    resource.setrlimit(resource.RLIMIT_FSIZE, (limits.file_bytes, limits.file_bytes))
    if limits.cpu_s is not None:
        cpu = int(limits.cpu_s) + 1
        resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu))
    if limits.memory_bytes is not None:
        resource.setrlimit(resource.RLIMIT_AS, (limits.memory_bytes, limits.memory_bytes))
    os.environ.clear()
    os.environ.update(scrubbed_environment(_PARENT_ENV))


_PARENT_ENV: dict[str, str] = dict(os.environ)


def _child(
    conn: multiprocessing.connection.Connection,
    job: Callable[..., Any],
    args: tuple[Any, ...],
    limits: Limits,
    environ: dict[str, str],
) -> None:
    global _PARENT_ENV
    _PARENT_ENV = environ
    _apply_limits(limits)
    with tempfile.TemporaryDirectory(prefix="swarmfab-job-") as workdir:
        os.chdir(workdir)
        try:
            message = pickle.dumps((JobStatus.OK, job(*args)))
        except BaseException as exc:  # the job's failure becomes a reported outcome
            detail = "".join(traceback.format_exception_only(exc)).strip()
            message = pickle.dumps((JobStatus.ERROR, detail))
        # plain pickle, not multiprocessing's: torch's reducers would share tensors through
        # file descriptors that vanish when this process exits
        conn.send_bytes(message)
        conn.close()


def run_job(job: Callable[..., Any], *args: Any, limits: Limits | None = None) -> JobOutcome:
    """Run ``job(*args)`` in a fresh sandboxed process and return how it ended.

    ``job`` must be a module-level function; arguments and result cross a pipe (pickled).
    """
    limits = limits or Limits()
    context = _context()
    receiver, sender = context.Pipe(duplex=False)
    process = context.Process(
        target=_child, args=(sender, job, args, limits, dict(os.environ)), daemon=True
    )
    process.start()
    sender.close()
    try:
        if receiver.poll(limits.wall_s):
            try:
                status, value = pickle.loads(receiver.recv_bytes())
            except (EOFError, OSError, pickle.UnpicklingError):
                process.join(5)
                return _died(process)
            process.join(10)
            if status is JobStatus.OK:
                return JobOutcome(JobStatus.OK, value)
            return JobOutcome(JobStatus.ERROR, detail=str(value))
        if not process.is_alive() or _exited_quietly(process):
            return _died(process)
        return JobOutcome(JobStatus.TIMED_OUT, detail=f"no answer within {limits.wall_s:.0f} s")
    finally:
        _kill_group(process)
        receiver.close()


def _exited_quietly(process: multiprocessing.process.BaseProcess) -> bool:
    process.join(0.05)
    return process.exitcode is not None


def _died(process: multiprocessing.process.BaseProcess) -> JobOutcome:
    code = process.exitcode
    if code is not None and code < 0:
        name = signal.Signals(-code).name
        return JobOutcome(JobStatus.CRASHED, detail=f"killed by {name}")
    return JobOutcome(JobStatus.CRASHED, detail=f"exited with status {code} without answering")


def _kill_group(process: multiprocessing.process.BaseProcess) -> None:
    """Kill the job's whole process group (it may have forked) and reap the child."""
    if process.pid is not None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(process.pid, signal.SIGKILL)
    process.join(5)
