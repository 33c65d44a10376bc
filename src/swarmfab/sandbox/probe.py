"""Which isolation steps hold on this host, and whether CUDA and Triton still work under
each: ``python -m swarmfab.sandbox.probe [--json]``.

Each configuration runs in a child forked from this process, which has imported torch
without initialising CUDA (as the sandbox's forkserver has). The child applies the
configuration's steps, then tries: a kernel on the CUDA device; a Triton kernel, compiled
there (Triton runs ptxas in a subprocess); writing outside its directory; POSIX shared
memory; a TCP connection to this process; starting a process. The last four
configurations are the sandbox itself, as a job gets it (``_confine``), with processes
forbidden and allowed (what a Triton job gets), as a CPU job and as a CUDA job (whose
/proc stays writable). A step that breaks CUDA is the single step whose row reads
``cuda`` refused.

``--mounts`` narrows a read-only file system that stops CUDA down to the mounts: each
mount point is made read-only alone, in a child of its own, and CUDA tried; then the
sandbox's file-system step is tried with the mounts found left writable.

:func:`isolation_here` (``swarmfab doctor``) confines a child exactly as a job is
confined, as this user or, from root, as an ordinary one, and tries what a hostile
candidate would: write outside its directory, read the user's home, open a socket,
start a process.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import functools
import json
import os
import pwd
import re
import runpy
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from swarmfab.sandbox._isolation import (
    confine_filesystem,
    drop_privileges,
    forbid_processes_and_sockets,
    isolate_network,
    read_only_alone,
)

__all__ = ["ATTEMPTS", "CHECKS", "configurations", "isolation_here", "main", "means",
           "mount_points", "probe"]

CHECKS = ("cuda", "triton", "write outside", "shared memory", "network", "processes")
CHILD_TIMEOUT_S = 180.0  # a first Triton compilation takes seconds; a hang ends here
_TRITON_KERNEL = '''import torch, triton, triton.language as tl


@triton.jit
def double(x, y, n: tl.constexpr):
    r = tl.arange(0, n)
    tl.store(y + r, tl.load(x + r) * 2)


def run():
    x = torch.ones(64, device="cuda")
    y = torch.empty_like(x)
    double[(1,)](x, y, n=64)
    return float(y.sum())
'''

Step = Callable[[Path], object]


def configurations() -> dict[str, list[Step]]:
    """Name -> the steps a child applies, in the sandbox's order."""
    from swarmfab.sandbox._process import Limits, _confine, with_reads

    def sandbox(allow: bool, device: str = "cpu") -> Step:
        limits = with_reads(Limits(isolate=True, allow_processes=allow,
                                   wall_s=CHILD_TIMEOUT_S).for_device(device), None)
        return lambda workdir: _confine(limits, workdir, dict(os.environ))

    return {
        "no isolation": [],
        "network namespace": [lambda _: isolate_network()],
        "read-only file systems": [confine_filesystem],
        "read-only file systems, /dev/shm too": [
            functools.partial(confine_filesystem, shared_memory=False)],
        "read-only file systems, a GPU driver's /proc": [
            functools.partial(confine_filesystem, device_driver=True)],
        "user nobody": [lambda workdir: drop_privileges(workdir, 64)],
        "seccomp": [lambda _: forbid_processes_and_sockets()],
        "seccomp, processes allowed": [
            lambda _: forbid_processes_and_sockets(allow_processes=True)],
        "sandbox": [sandbox(False)],
        "sandbox, processes allowed": [sandbox(True)],
        "sandbox, a CUDA job": [sandbox(False, "cuda")],
        "sandbox, a CUDA job, processes allowed (Triton)": [sandbox(True, "cuda")],
    }


def mount_points() -> list[str]:
    """This process's mount points, from /proc/self/mountinfo (octal escapes undone)."""
    points = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        point = line.split()[4]
        points.append(re.sub(r"\\(\d{3})", lambda m: chr(int(m[1], 8)), point))
    return list(dict.fromkeys(points))


def _mounts(port: int) -> list[dict[str, object]]:
    """Which mount, made read-only alone, stops CUDA; then the file-system step with
    those left writable."""
    rows = [probe("no isolation", [], port, only_cuda=True)]
    if not str(rows[0]["cuda"]).startswith("ok"):
        return rows  # nothing to narrow down: CUDA does not work here at all
    rows.append(probe("a private mount namespace, nothing read-only",
                      [lambda _: read_only_alone(None)], port, only_cuda=True))
    stopping = []
    for point in mount_points():
        row = probe(f"read-only {point} alone", [functools.partial(_read_only, point)], port,
                    only_cuda=True)
        rows.append(row)
        if not str(row.get("cuda", "")).startswith("ok"):
            stopping.append(point)
    kept = tuple(Path(point) for point in stopping)
    rows.append(probe(f"read-only file systems, {', '.join(stopping) or 'nothing'} writable",
                      [functools.partial(confine_filesystem, writable=kept)], port))
    return rows


def _read_only(point: str, _workdir: Path) -> bool:
    return read_only_alone(Path(point))


def _attempt(check: Callable[[], object]) -> str:
    try:
        result = check()
    except BaseException as exc:  # every failure is a finding
        return f"refused: {type(exc).__name__}: {str(exc).strip()[:160]}"
    return "ok" if result is None else f"ok ({result})"


def _checks(workdir: Path, outside: Path, port: int,
            only_cuda: bool = False) -> dict[str, str]:
    import torch

    def cuda() -> str:
        if not torch.cuda.is_available():
            raise RuntimeError("no CUDA device")
        total = float((torch.ones(1024, device="cuda") * 2).sum())
        assert total == 2048.0, total
        return f"{torch.cuda.device_count()} device(s)"

    def triton() -> object:
        path = workdir / "probe_triton_kernel.py"
        path.write_text(_TRITON_KERNEL)
        assert runpy.run_path(str(path))["run"]() == 128.0
        return None

    def write_outside() -> None:
        (outside / f"written-{os.getpid()}").write_text("escaped")

    def shared_memory() -> None:
        path = Path("/dev/shm") / f"swarmfab-probe-{os.getpid()}"
        path.write_text("shared")
        path.unlink()

    def network() -> None:
        socket.create_connection(("127.0.0.1", port), timeout=2).close()

    def processes() -> None:
        subprocess.run([sys.executable, "-c", "pass"], check=True, timeout=30)

    found = {"cuda": _attempt(cuda)}
    if only_cuda:
        return found
    found["triton"] = (_attempt(triton) if found["cuda"].startswith("ok")
                       else "not tried: no CUDA")
    for name, check in (("write outside", write_outside), ("shared memory", shared_memory),
                        ("network", network), ("processes", processes)):
        found[name] = _attempt(check)
    return found


def _child(steps: list[Step], workdir: Path, outside: Path, port: int, writer: int,
           only_cuda: bool) -> None:
    os.environ.update(HOME=str(workdir), TMPDIR=str(workdir),
                      TRITON_CACHE_DIR=str(workdir / "triton-cache"))
    tempfile.tempdir = None  # the parent's choice (/tmp) may be read-only here
    applied = [_attempt(functools.partial(step, workdir)) for step in steps]
    result = {"steps": applied, **_checks(workdir, outside, port, only_cuda)}
    os.write(writer, json.dumps(result).encode())


def probe(name: str, steps: list[Step], port: int,
          only_cuda: bool = False) -> dict[str, object]:
    """One configuration's findings (a child that hangs or dies says so)."""
    workdir = Path(tempfile.mkdtemp(prefix="swarmfab-probe-"))
    outside = Path(tempfile.mkdtemp(prefix="swarmfab-probe-outside-"))
    os.chmod(workdir, 0o777)
    reader, writer = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns into the caller's code
        code = 0
        try:
            os.close(reader)
            _child(steps, workdir, outside, port, writer, only_cuda)
        except BaseException:
            code = 1
        finally:
            os._exit(code)
    os.close(writer)
    deadline = time.monotonic() + CHILD_TIMEOUT_S
    while os.waitpid(pid, os.WNOHANG) == (0, 0):
        if time.monotonic() >= deadline:  # a hang: the child goes, its findings with it
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            break
        time.sleep(0.05)
    data = b""
    while chunk := os.read(reader, 65536):
        data += chunk
    os.close(reader)
    shutil.rmtree(workdir, ignore_errors=True)
    shutil.rmtree(outside, ignore_errors=True)
    if not data:
        return {"configuration": name, "error": f"the child hung or died within "
                                                 f"{CHILD_TIMEOUT_S:.0f} s"}
    return {"configuration": name, **json.loads(data)}


_PR_SET_DUMPABLE = 4
ATTEMPTS = ("write /tmp", "write /var/tmp", "write home", "read home", "network",
            "processes")
"""What :func:`isolation_here` tries from inside the sandbox: each must be refused."""


def isolation_here(user: str | None = None, timeout_s: float = 60.0) -> dict[str, object]:
    """Which isolation steps hold for a job run by this process's user (``user``: by
    that user instead, for root asking what an ordinary user gets), found by confining a
    forked child exactly as a job is confined (``_confine``, default limits), then
    trying :data:`ATTEMPTS`: the level, the steps that held and did not, the guarantees
    missing, and what each attempt got ("refused: ..." or "done")."""
    import encodings.idna  # noqa: F401 - what the attempts import, before any user change

    from swarmfab.sandbox._process import Limits, _confine, with_reads

    limits = with_reads(Limits(wall_s=timeout_s), None)
    owner = pwd.getpwnam(user) if user is not None else None
    scratch = Path(tempfile.mkdtemp(prefix="swarmfab-doctor-"))
    workdir, home = scratch / "job", scratch / "home"
    workdir.mkdir()
    home.mkdir(mode=0o700)
    (home / "secret").write_text("the user's own")
    os.chmod(scratch, 0o755)
    if owner is not None:
        for path in (workdir, home, home / "secret"):
            os.chown(path, owner.pw_uid, owner.pw_gid)
    marker = f"swarmfab-doctor-{os.getpid()}-{time.monotonic_ns()}"
    outside = [Path("/tmp") / marker, Path("/var/tmp") / marker, home / marker]
    server = socket.create_server(("127.0.0.1", 0))
    reader, writer = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns into the caller's code
        code = 1
        with contextlib.suppress(BaseException):
            os.close(reader)
            if owner is not None:  # as if the user had started it (dumpable, as theirs)
                os.setgroups([])
                os.setgid(owner.pw_gid)
                os.setuid(owner.pw_uid)
                ctypes.CDLL(None).prctl(_PR_SET_DUMPABLE, 1, 0, 0, 0)
            os.environ["HOME"] = str(home)
            isolation = _confine(limits, workdir, dict(os.environ))
            found = _hostile(outside, home, server.getsockname()[1])
            os.write(writer, json.dumps({
                "user": pwd.getpwuid(os.getuid()).pw_name if owner is None else user,
                "level": isolation.level, "held": isolation.held, "failed": isolation.failed,
                "missing": isolation.missing, "attempts": found}).encode())
            code = 0
        os._exit(code)
    os.close(writer)
    data = _collect(pid, reader, timeout_s)
    server.close()
    escaped = [str(path) for path in outside if path.exists()]
    for path in outside:
        with contextlib.suppress(OSError):
            path.unlink()
    shutil.rmtree(scratch, ignore_errors=True)
    if not data:
        return {"user": user, "error": f"the confined child hung or died within "
                                        f"{timeout_s:.0f} s"}
    return {**json.loads(data), "escaped": escaped}


def means() -> dict[str, object]:
    """What the kernel and the system offer the isolation steps: Landlock's ABI version,
    user namespaces (how many; whether unprivileged ones are allowed, where the kernel
    says), libseccomp."""
    from swarmfab.sandbox._landlock import abi_version

    found: dict[str, object] = {"landlock abi": abi_version()}
    with contextlib.suppress(OSError, ValueError):
        found["max user namespaces"] = int(
            Path("/proc/sys/user/max_user_namespaces").read_text())
    with contextlib.suppress(OSError):
        found["unprivileged user namespaces"] = Path(
            "/proc/sys/kernel/unprivileged_userns_clone").read_text().strip() == "1"
    try:
        ctypes.CDLL("libseccomp.so.2")
        found["libseccomp"] = True
    except OSError:
        found["libseccomp"] = False
    return found


def _hostile(outside: list[Path], home: Path, port: int) -> dict[str, str]:
    """What a hostile candidate tries, and what each attempt got."""
    def write(path: Path) -> Callable[[], object]:
        return lambda: path.write_text("escaped")

    tries: dict[str, Callable[[], object]] = dict(zip(ATTEMPTS[:3], map(write, outside),
                                                      strict=True))
    tries["read home"] = lambda: (home / "secret").read_text()
    tries["network"] = lambda: socket.create_connection(("127.0.0.1", port), timeout=2).close()
    tries["processes"] = lambda: subprocess.run(["/bin/true"], check=True, timeout=30)
    return {name: "done" if (got := _attempt(attempt)).startswith("ok") else got
            for name, attempt in tries.items()}


def _collect(pid: int, reader: int, timeout_s: float) -> bytes:
    """What a forked child wrote to ``reader`` before it exited (killed at ``timeout_s``)."""
    deadline = time.monotonic() + timeout_s
    while os.waitpid(pid, os.WNOHANG) == (0, 0):
        if time.monotonic() >= deadline:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            break
        time.sleep(0.02)
    data = b""
    while chunk := os.read(reader, 65536):
        data += chunk
    os.close(reader)
    return data


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="one JSON document")
    parser.add_argument("--mounts", action="store_true",
                        help="which mount, made read-only alone, stops CUDA")
    args = parser.parse_args(argv)
    import torch  # imported before forking, CUDA left uninitialised, as the forkserver

    server = socket.create_server(("127.0.0.1", 0))
    server.listen(16)
    port = server.getsockname()[1]
    try:
        rows = (_mounts(port) if args.mounts else
                [probe(name, steps, port) for name, steps in configurations().items()])
    finally:
        server.close()
    host = {"euid": os.geteuid(), "torch": torch.__version__,
            "cuda build": torch.version.cuda}
    if args.json:
        print(json.dumps({"host": host, "configurations": rows}, indent=2))
        return 0
    print(f"host: {host}")
    for row in rows:
        print(f"\n{row['configuration']}")
        for key in ("error", "steps", *CHECKS):
            if key in row:
                print(f"  {key:<14} {row[key]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
