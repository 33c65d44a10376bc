"""A sandboxed job that answers requests until it is closed: a *session*.

:func:`~swarmfab.sandbox.run_job` runs one function and returns its result. A session
runs ``job(channel, *args)`` in the same kind of fresh, confined child, and the job
serves requests from the parent over ``channel`` until it returns. It lets the parent
keep several implementations loaded, each in a process of its own, and time their
calls from outside: no implementation shares a process, a clock or a global setting
with another, or with whoever reads the clock.

Requests go to the child pickled (the parent is trusted); replies come back read with
:mod:`~swarmfab.sandbox._wire`'s closed vocabulary, as ``run_job``'s answers do. Every
way a session can end early (the job raised, its process died, the wall-clock limit
passed, the caller cancelled, a reply was refused) raises :class:`SessionEnded`, which
carries the :class:`~swarmfab.sandbox.JobOutcome` that ``run_job`` would have returned.
"""

from __future__ import annotations

import dataclasses
import multiprocessing.connection
import os
import shutil
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from types import TracebackType
from typing import Any, NoReturn

from swarmfab.sandbox import _process, _steps, _wire
from swarmfab.sandbox._process import JobOutcome, JobStatus, Limits
from swarmfab.sandbox._report import Isolation

__all__ = ["Channel", "Session", "SessionEnded", "start_session"]


class SessionEnded(Exception):
    """The session's job can no longer answer; ``outcome`` says how it ended."""

    def __init__(self, outcome: JobOutcome):
        super().__init__(outcome.detail)
        self.outcome = outcome


class Channel:
    """The job's end: requests from the parent, replies to it."""

    def __init__(self, conn: multiprocessing.connection.Connection):
        self._conn = conn

    def receive(self) -> Any:
        return self._conn.recv()

    def reply(self, value: Any) -> None:
        self._conn.send_bytes(_wire.dumps((JobStatus.OK.value, value)))


def _session_child(
    conn: multiprocessing.connection.Connection, job: Callable[..., Any],
    args: tuple[Any, ...], limits: Limits, workdir: Path, environ: dict[str, str],
) -> None:
    _process._confined(conn, limits, workdir, environ)
    try:
        message: tuple[JobStatus, Any] = (JobStatus.OK, job(Channel(conn), *args))
    except BaseException as exc:  # the job's failure becomes the session's end
        message = (JobStatus.ERROR, f"{type(exc).__name__}: {exc}")
    _process._answer(conn, message)


class Session:
    """The parent's end of a running session. Use it as a context manager, or call
    :meth:`close`: the job's process group is killed and its directory removed."""

    def __init__(self, job: Callable[..., Any], args: tuple[Any, ...], limits: Limits,
                 workdir: Path, cancel: threading.Event | None, records: tuple[type, ...],
                 name: str):
        self._limits, self._workdir, self._cancel = limits, workdir, cancel
        self._records, self.name = records, name
        self._isolation: Isolation | None = None
        self._deadline = time.monotonic() + limits.wall_s
        context = _process._context()
        self._conn, child_end = context.Pipe(duplex=True)
        self._process = context.Process(
            target=_session_child,
            args=(child_end, job, args, limits, workdir, dict(os.environ)), daemon=True)
        _process.start(self._process)
        child_end.close()

    @property
    def pid(self) -> int | None:
        return self._process.pid

    @property
    def isolation(self) -> Isolation | None:
        """What held in the job's process (None until its first reply is read)."""
        return self._isolation

    def ask(self, request: Any) -> Any:
        """Send ``request`` and return the job's reply."""
        self.send(request)
        return self.reply()

    def send(self, request: Any) -> None:
        """Send ``request`` without waiting (collect the reply with :meth:`reply`)."""
        try:
            self._conn.send(request)
        except OSError:  # the child is gone: say how
            self._end(self._ended())

    def reply(self) -> Any:
        """The job's next reply (to a request already sent). The first read takes the
        isolation message first: a strict session whose isolation is weak is closed and
        raises :class:`~swarmfab.sandbox.WeakSandboxError`."""
        data = self._receive()
        if self._isolation is None and (isolation := _steps.read_isolation(data)):
            self._isolation = isolation
            try:
                _steps.refuse_weak(isolation, self._limits)
            except Exception:
                self.close()
                raise
            data = self._receive()
        try:
            status, value = _process._read_answer(data, self._records)
        except _wire.AnswerError as exc:
            self._end(JobOutcome(JobStatus.ERROR, detail=f"its answer was refused: {exc}",
                                 output_tail=_process._tail(self._workdir)))
        if status is not JobStatus.OK:
            self._end(JobOutcome(JobStatus.ERROR, detail=str(value),
                                 output_tail=_process._tail(self._workdir)))
        return value

    def _receive(self) -> bytes:
        left = self._deadline - time.monotonic()
        if left <= 0 or not _process._answered(self._conn, left, self._cancel):
            self._end(self._ended())
        try:
            return self._conn.recv_bytes(_process._MAX_ANSWER_BYTES)
        except (EOFError, OSError):
            self._process.join(5)
            self._end(_process._died(self._process, self._workdir))

    def _ended(self) -> JobOutcome:
        if self._cancel is not None and self._cancel.is_set():
            return JobOutcome(JobStatus.CANCELLED, detail="cancelled by the parent")
        if _process._exited(self._process):
            return _process._died(self._process, self._workdir)
        return JobOutcome(JobStatus.TIMED_OUT, output_tail=_process._tail(self._workdir),
                          detail=f"no answer within {self._limits.wall_s:.0f} s")

    def _end(self, outcome: JobOutcome) -> NoReturn:
        self.close()
        if self.name:
            outcome = JobOutcome(outcome.status, outcome.value,
                                 f"{self.name}'s process: {outcome.detail}", outcome.output_tail)
        raise SessionEnded(dataclasses.replace(outcome, isolation=self._isolation))

    def close(self) -> None:
        _process._kill_group(self._process)
        self._conn.close()
        shutil.rmtree(self._workdir, ignore_errors=True)

    def __enter__(self) -> Session:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        self.close()


def start_session(
    job: Callable[..., Any], *args: Any, limits: Limits | None = None,
    stage: Mapping[str, Path] | None = None, links: Mapping[str, Path] | None = None,
    cancel: threading.Event | None = None, records: tuple[type, ...] = (), name: str = "",
) -> Session:
    """Start ``job(channel, *args)`` in a fresh sandboxed process; ``stage``, ``links``,
    ``cancel`` and ``records`` as for :func:`~swarmfab.sandbox.run_job`. The wall-clock
    limit bounds the whole session; ``name`` prefixes how it ended ("NAME's process:
    ...")."""
    limits = _process.with_reads(limits or Limits(), links)
    workdir = _process._job_directory()
    try:
        _process._stage_files(workdir, stage, links, limits)
        return Session(job, args, limits, workdir, cancel, records, name)
    except BaseException:
        shutil.rmtree(workdir, ignore_errors=True)
        raise

