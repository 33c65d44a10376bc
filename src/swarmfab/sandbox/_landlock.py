"""Landlock: the kernel's file-system (and TCP) confinement that needs no privilege.

A process that restricts itself can afterwards read only beneath the directories a
ruleset names, write only beneath those it names writable, bind and connect no TCP
socket (ABI 4), reach no abstract Unix socket and signal no process outside its domain
(ABI 6), and none of it can be undone, by any user, root included. The system calls go
through ``ctypes`` (Linux >= 5.13; no wrapper in the C library); on a kernel without
Landlock every call answers False and the other isolation steps stand alone.

A job reads the system's directories (:data:`SYSTEM`: programs, libraries, settings, the
kernel's views; not the secrets in ``/etc``), the Python it runs on and its own
directory, and what the caller declares: no home, no temporary directory but its own,
no data directory, whoever it runs as (root too, which no file mode stops). It writes its
own directory, the directories the caller declares and the harmless devices.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import stat
import sys
from collections.abc import Iterable
from pathlib import Path

__all__ = ["DEVICES", "READ", "SECRETS", "SYSTEM", "WRITE", "Ruleset", "abi_version", "around",
           "code_paths", "job_reads", "job_ruleset", "system_reads"]

_SYSCALLS = {"x86_64": (444, 445, 446), "aarch64": (444, 445, 446)}
_CREATE_RULESET_VERSION = 1
_RULE_PATH_BENEATH = 1
_PR_SET_NO_NEW_PRIVS = 38

_EXECUTE, _WRITE_FILE, _READ_FILE, _READ_DIR = 1 << 0, 1 << 1, 1 << 2, 1 << 3
_MAKE_AND_REMOVE = sum(1 << bit for bit in range(4, 13))  # remove dir/file, make *
_REFER, _TRUNCATE = 1 << 13, 1 << 14
READ = _EXECUTE | _READ_FILE | _READ_DIR
WRITE = _WRITE_FILE | _MAKE_AND_REMOVE | _REFER | _TRUNCATE
_FILE_RIGHTS = _EXECUTE | _WRITE_FILE | _READ_FILE | _TRUNCATE  # what a rule on a file may hold
_NET_BIND_TCP, _NET_CONNECT_TCP = 1 << 0, 1 << 1
_SCOPE_ABSTRACT_UNIX_SOCKET, _SCOPE_SIGNAL = 1 << 0, 1 << 1


class _RulesetAttr(ctypes.Structure):
    _fields_ = [("handled_access_fs", ctypes.c_uint64), ("handled_access_net", ctypes.c_uint64),
                ("scoped", ctypes.c_uint64)]


class _PathBeneath(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


def _libc() -> ctypes.CDLL:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    return libc


def abi_version() -> int:
    """The kernel's Landlock ABI version; 0 where it has none (or refuses it)."""
    numbers = _SYSCALLS.get(os.uname().machine)
    if numbers is None:
        return 0
    try:
        version = _libc().syscall(numbers[0], None, ctypes.c_size_t(0),
                                  ctypes.c_uint32(_CREATE_RULESET_VERSION))
    except (OSError, AttributeError):
        return 0
    return max(0, int(version))


def _handled_fs(abi: int) -> int:
    rights = READ | _WRITE_FILE | _MAKE_AND_REMOVE
    if abi >= 2:
        rights |= _REFER
    if abi >= 3:
        rights |= _TRUNCATE
    return rights


SYSTEM = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/opt", "/etc",
          "/proc", "/sys", "/nix", "/snap")
"""What every job may read: the system's programs, libraries and settings, and the
kernel's views (reading another process's files there is Landlock's to refuse: a
process outside the job's domain is out of its reach)."""
SECRETS = ("/etc/shadow", "/etc/shadow-", "/etc/gshadow", "/etc/gshadow-", "/etc/ssh",
           "/etc/ssl/private", "/etc/sudoers", "/etc/sudoers.d", "/etc/security/opasswd")
"""What stays unread under :data:`SYSTEM` (a job that runs as root could read it)."""
DEVICES = ("/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom")
GPU_DEVICES = ("/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools",
               "/dev/nvidia-modeset", "/dev/nvidia-caps", "/dev/dri", "/dev/kfd")


def system_reads() -> list[str]:
    """:data:`SYSTEM` less :data:`SECRETS`, as the fewest paths (:func:`around`)."""
    return [*(p for p in SYSTEM if p != "/etc"), *around(SECRETS, "/etc")]


def job_reads(workdir: Path, extra: Iterable[Path | str] = ()) -> list[str]:
    """What a job reads besides :func:`system_reads`: its own directory, the Python it
    runs on (its prefixes, the interpreter's directory) and ``extra`` (the parent adds
    where its code was imported from: :func:`code_paths`)."""
    python = {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix,
              os.path.dirname(os.path.realpath(sys.executable))}
    return [p for p in {str(workdir), *python, *map(str, extra)} if p and os.path.exists(p)]


_NEVER_CODE = ("/", "/root", "/home", "/tmp", "/var/tmp")
_code_paths: tuple[int, tuple[str, ...]] = (0, ())


def code_paths() -> tuple[str, ...]:
    """Where this process's top-level modules and packages were imported from (the
    ``sys.path`` entries it used, and the directories an import hook maps packages to):
    what its jobs, forked from a server that imported the same, import the rest of their
    code from. Not its main script's directory, nor a home or a temporary directory as a
    whole: not a working directory that merely lies on ``sys.path``, as ``python -m``
    puts it there. Kept until the process imports another module. (Computed in the
    parent: in a forked child, touching every module copies the pages they lie on.)"""
    global _code_paths
    if _code_paths[0] == len(sys.modules):
        return _code_paths[1]
    found = set()
    for name, module in list(sys.modules.items()):
        file = getattr(module, "__file__", None)
        if "." in name or name in ("__main__", "__mp_main__") or not isinstance(file, str):
            continue
        where = os.path.dirname(file)
        if os.path.basename(file).startswith("__init__."):
            where = os.path.dirname(where)
        found.add(os.path.abspath(where))
    found -= {os.path.abspath(p) for p in (*_NEVER_CODE, os.path.expanduser("~"))}
    _code_paths = (len(sys.modules), tuple(sorted(found)))
    return _code_paths[1]


def gpu_devices() -> list[str]:
    """The device files a GPU driver opens: NVIDIA's (``/dev/nvidia0`` and on) and AMD's."""
    numbered = sorted(str(p) for p in Path("/dev").glob("nvidia[0-9]*"))
    return [*numbered, *(p for p in GPU_DEVICES if os.path.exists(p))]


def around(private: Iterable[Path | str], root: str) -> list[str]:
    """Every entry beneath ``root`` but ``private`` (and what lies beneath them), as the
    fewest entries: each private path's siblings, and its ancestors' siblings. Symbolic
    links are left out: what they point to is listed where it lies (a link to a private
    directory would otherwise open it)."""
    hidden = {os.path.realpath(p) for p in private}
    above = {os.path.dirname(p) for p in hidden}  # directories walked into, with theirs
    while any(os.path.dirname(p) not in above for p in above):
        above |= {os.path.dirname(p) for p in above}
    found: list[str] = []

    def walk(directory: str) -> None:
        try:
            entries = sorted(os.scandir(directory), key=lambda e: e.name)
        except OSError:
            return
        for entry in entries:
            if entry.is_symlink() or entry.path in hidden:
                continue
            if entry.path in above:
                walk(entry.path)
            else:
                found.append(entry.path)

    if root not in hidden:
        walk(root)
    return found


def job_ruleset(workdir: Path, writable: Iterable[Path | str] = (),
                readable: Iterable[Path | str] = (), shared_memory: bool = False,
                device_driver: bool = False) -> Ruleset:
    """The rules of a job: it reads :func:`system_reads` and :func:`job_reads`
    (``readable`` among them), writes ``workdir``, ``writable`` and the harmless devices,
    and, where it has POSIX shared memory of its own (``shared_memory``), ``/dev/shm``; a
    GPU job (``device_driver``) opens the GPU's devices and writes ``/proc`` but the
    kernel's tunables, as its driver needs."""
    from swarmfab.sandbox._isolation import PROC_TUNABLES

    ruleset = Ruleset()
    writable = [str(workdir), *map(str, writable)]
    ruleset.allow(system_reads(), READ)
    ruleset.allow(job_reads(workdir, [*writable, *readable]), READ)
    ruleset.allow(writable, READ | WRITE)
    ruleset.allow(DEVICES, READ | WRITE)
    if shared_memory:
        ruleset.allow(["/dev/shm"], READ | WRITE)
    if device_driver:
        ruleset.allow(gpu_devices(), READ | WRITE)
        ruleset.allow(around(PROC_TUNABLES, "/proc"), READ | WRITE)
    return ruleset


class Ruleset:
    """A Landlock ruleset being built (in the trusted parent's code, before privileges
    go), then enforced on this process by :meth:`enforce`."""

    def __init__(self, abi: int | None = None):
        self.abi = abi_version() if abi is None else abi
        self.fd = -1
        self.rules = 0
        numbers = _SYSCALLS.get(os.uname().machine)
        if self.abi <= 0 or numbers is None:
            return
        self._create, self._add, self._restrict = numbers
        self._lib = _libc()
        attr = _RulesetAttr(_handled_fs(self.abi),
                            _NET_BIND_TCP | _NET_CONNECT_TCP if self.abi >= 4 else 0,
                            _SCOPE_ABSTRACT_UNIX_SOCKET | _SCOPE_SIGNAL if self.abi >= 6 else 0)
        self.fd = int(self._lib.syscall(self._create, ctypes.byref(attr),
                                        ctypes.c_size_t(ctypes.sizeof(attr)), ctypes.c_uint32(0)))

    @property
    def usable(self) -> bool:
        return self.fd >= 0

    def allow(self, paths: Iterable[Path | str], rights: int) -> int:
        """Allow ``rights`` beneath each path (a file gets its file rights only); paths
        that do not exist or cannot be opened are left out. Returns how many were added."""
        added = 0
        for path in paths:
            if not self.usable:
                return added
            try:
                fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
            except OSError:
                continue
            try:
                is_dir = stat.S_ISDIR(os.fstat(fd).st_mode)
                access = (rights if is_dir else rights & _FILE_RIGHTS) & _handled_fs(self.abi)
                rule = _PathBeneath(access, fd)
                if access and self._lib.syscall(self._add, ctypes.c_int(self.fd),
                                                ctypes.c_int(_RULE_PATH_BENEATH),
                                                ctypes.byref(rule), ctypes.c_uint32(0)) == 0:
                    added += 1
            finally:
                os.close(fd)
        self.rules += added
        return added

    def enforce(self) -> bool:
        """Restrict this process (and every process it starts) to the ruleset; whether
        it took effect. No new privileges may be gained afterwards (the kernel's
        condition for an unprivileged process)."""
        if not self.usable:
            return False
        try:
            libc = self._lib
            if libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
                return False
            return bool(libc.syscall(self._restrict, ctypes.c_int(self.fd),
                                     ctypes.c_uint32(0)) == 0)
        finally:
            self.close()

    def close(self) -> None:
        if self.fd >= 0:
            with contextlib.suppress(OSError):
                os.close(self.fd)
            self.fd = -1
