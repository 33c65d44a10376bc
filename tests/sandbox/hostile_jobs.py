"""Hostile jobs for the sandbox tests (module-level so the forkserver can import them)."""

from __future__ import annotations

import ctypes
import os
import socket
import sys
from pathlib import Path


def fork_storm() -> str:
    """Fork until something stops us; report how far it got."""
    forks = 0
    for _ in range(10_000):
        try:
            pid = os.fork()
        except OSError as exc:
            return f"refused after {forks} forks: {exc.strerror}"
        if pid == 0:
            os._exit(0)
        forks += 1
    return f"forked {forks} times"


def endless_output() -> str:
    chunk = "x" * 65536
    while True:
        sys.stdout.write(chunk)


def write_outside(path: str) -> str:
    with open(path, "w") as handle:
        handle.write("escaped")
    return "written"


def share_memory(name: str) -> list[str]:
    """Write POSIX shared memory (as a CUDA driver does) and list what the job sees."""
    with open(f"/dev/shm/{name}", "w") as handle:
        handle.write("shared")
    return sorted(os.listdir("/dev/shm"))


def write_where_told(*paths: str) -> list[str]:
    """Write each path; what each attempt gave, and the variable SWARMFAB_TEST_MARK."""
    found = []
    for path in paths:
        try:
            with open(path, "w") as handle:
                handle.write("written")
            found.append("written")
        except OSError as exc:
            found.append(type(exc).__name__)
    return [*found, os.environ.get("SWARMFAB_TEST_MARK", "unset")]


def read_only(*paths: str) -> dict[str, bool]:
    """Whether each path lies on a read-only mount, as the job sees it."""
    return {path: bool(os.statvfs(path).f_flag & os.ST_RDONLY) for path in paths}


def connect_loopback(port: int) -> str:
    with socket.create_connection(("127.0.0.1", port), timeout=2):
        return "connected"


def segfault() -> None:
    ctypes.string_at(0)


def read_then_overwrite(relative: str) -> str:
    """Read a file staged by link, then try to write through the link."""
    content = Path(relative).read_text()
    with open(relative, "w") as handle:
        handle.write("planted")
    return content


class _Payload:
    def __init__(self, marker: str):
        self.marker = marker

    def __reduce__(self) -> tuple:
        return exec, (f"open({self.marker!r}, 'w').write('run by the parent')",)


def answer_with_a_payload(marker: str) -> str:
    """Write a pickle of its own to the job's pipe (as the answer) and exit at once."""
    import gc
    import multiprocessing.connection
    import pickle

    for found in gc.get_objects():
        if isinstance(found, multiprocessing.connection.Connection) and found.writable:
            found.send_bytes(pickle.dumps(("ok", _Payload(marker))))
            os._exit(0)
    return "no connection found"


class Unsendable:
    """Something a job may return that cannot cross back (not a record)."""


def read_text(path: str) -> str:
    return Path(path).read_text()


def open_socket() -> str:
    """An Internet socket, which nothing in a job needs."""
    socket.socket(socket.AF_INET, socket.SOCK_STREAM).close()
    return "opened"


def start_process() -> str:
    """Start a program, as a candidate that wants a shell would."""
    import subprocess

    subprocess.run(["/bin/true"], check=True, timeout=30)
    return "started"


def makes_a_lock() -> bool:
    """A multiprocessing lock, as tqdm makes one under torch.fx: unlinked at once (not
    left to the parent's resource tracker, which warns about it at exit)."""
    import multiprocessing

    return multiprocessing.RLock()._semlock.name is None  # type: ignore[attr-defined]
