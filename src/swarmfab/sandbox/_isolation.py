"""Process isolation steps applied in a job's child before any candidate code runs.

Each step is best effort where the OS may refuse it (not root, no namespaces), and says
whether it took effect, so the outcome can report how strong the sandbox really was
(:mod:`._report` derives what the steps add up to). Root gets a network namespace, a
read-only view of the file systems and the user ``nobody``; any other user first enters
a user namespace of its own (where the kernel allows unprivileged ones), in which the
same network and mount steps need no privilege. Then every user: no capabilities left,
Landlock (:mod:`._landlock`) and the seccomp filter.
"""

from __future__ import annotations

import ctypes
import functools
import os
import pwd
import stat
from pathlib import Path

__all__ = [
    "PROC_TUNABLES",
    "UNPRIVILEGED",
    "can_drop_privileges",
    "can_read",
    "confine_filesystem",
    "drop_capabilities",
    "drop_privileges",
    "enter_user_namespace",
    "forbid_processes_and_sockets",
    "isolate_network",
    "job_user",
    "mount_namespaces",
    "read_only_alone",
    "unprivileged",
]

_CLONE_NEWNET = 0x40000000
_CLONE_THREAD = 0x00010000
_AF_UNIX = 1
_EPERM, _ENOSYS = 1, 38
_SCMP_ACT_ALLOW = 0x7FFF0000
_SCMP_CMP_NE, _SCMP_CMP_MASKED_EQ = 1, 7


_ISOLATION_UNDOERS = (
    "mount", "umount2", "mount_setattr", "move_mount", "open_tree", "fsopen", "fsmount",
    "fsconfig", "pivot_root", "chroot", "unshare", "setns", "ptrace", "process_vm_writev",
    "setuid", "setgid", "setreuid", "setresuid", "setregid", "setresgid", "setgroups",
    "capset", "bpf", "kexec_load", "init_module", "finit_module", "reboot", "swapon",
)


def _scmp_errno(code: int) -> int:
    return 0x00050000 | (code & 0xFFFF)


class _ArgCmp(ctypes.Structure):
    _fields_ = [("arg", ctypes.c_uint), ("op", ctypes.c_int),
                ("datum_a", ctypes.c_uint64), ("datum_b", ctypes.c_uint64)]


def forbid_processes_and_sockets(allow_processes: bool = False) -> bool:
    """A seccomp filter: no new processes (threads allowed), no sockets but Unix ones,
    and none of the calls that could undo the isolation (mounts, namespaces, ptrace,
    identity changes, kernel modules).

    fork, vfork and clone without CLONE_THREAD fail with EPERM; clone3 answers ENOSYS so
    the C library falls back to clone for threads. A fork storm then cannot start, and a
    candidate cannot leave processes behind or reach the network even where namespaces
    are unavailable. Needs libseccomp; returns False when it cannot be applied.
    """
    try:
        lib = ctypes.CDLL("libseccomp.so.2")
    except OSError:
        return False
    lib.seccomp_init.restype = ctypes.c_void_p
    lib.seccomp_init.argtypes = [ctypes.c_uint32]
    lib.seccomp_syscall_resolve_name.argtypes = [ctypes.c_char_p]
    lib.seccomp_rule_add_array.argtypes = [ctypes.c_void_p, ctypes.c_uint32, ctypes.c_int,
                                           ctypes.c_uint, ctypes.POINTER(_ArgCmp)]
    lib.seccomp_load.argtypes = [ctypes.c_void_p]
    lib.seccomp_release.argtypes = [ctypes.c_void_p]
    context = lib.seccomp_init(_SCMP_ACT_ALLOW)
    if not context:
        return False
    process_rules = [
        ("fork", _scmp_errno(_EPERM), []),
        ("vfork", _scmp_errno(_EPERM), []),
        ("clone", _scmp_errno(_EPERM), [_ArgCmp(0, _SCMP_CMP_MASKED_EQ, _CLONE_THREAD, 0)]),
        ("clone3", _scmp_errno(_ENOSYS), []),
    ]
    rules = [
        *([] if allow_processes else process_rules),
        ("socket", _scmp_errno(_EPERM), [_ArgCmp(0, _SCMP_CMP_NE, _AF_UNIX, 0)]),
        # nothing may undo the isolation set up before the filter
        *[(name, _scmp_errno(_EPERM), []) for name in _ISOLATION_UNDOERS],
    ]
    try:
        for name, action, comparisons in rules:
            number = lib.seccomp_syscall_resolve_name(name.encode())
            if number < 0:
                continue
            array = (_ArgCmp * max(1, len(comparisons)))(*comparisons)
            if lib.seccomp_rule_add_array(context, action, number, len(comparisons), array):
                return False
        return bool(lib.seccomp_load(context) == 0)
    finally:
        lib.seccomp_release(context)
UNPRIVILEGED = "nobody"


def isolate_network() -> bool:
    """Move this process into a new network namespace with no interfaces (needs root, or
    a user namespace of its own: :func:`enter_user_namespace`)."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return bool(libc.unshare(_CLONE_NEWNET) == 0)
    except (OSError, AttributeError):
        return False


_CLONE_NEWUSER = 0x10000000


def enter_user_namespace() -> bool:
    """Move this (single-threaded, unprivileged) process into a user namespace of its
    own, its user and group mapped to themselves, so that the network and mount steps
    need no privilege: what it can do there reaches only namespaces it owns. Where the
    kernel allows no unprivileged user namespaces, False."""
    uid, gid = os.geteuid(), os.getegid()
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.unshare(_CLONE_NEWUSER) != 0:
            return False
        for name, text in (("setgroups", "deny"), ("uid_map", f"{uid} {uid} 1"),
                           ("gid_map", f"{gid} {gid} 1")):
            with open(f"/proc/self/{name}", "w") as handle:
                handle.write(text)
    except (OSError, AttributeError):
        return False
    return True


_PR_CAPBSET_DROP, _PR_CAP_AMBIENT, _PR_CAP_AMBIENT_CLEAR_ALL = 24, 47, 4
_PR_SET_NO_NEW_PRIVS = 38
_CAPABILITY_VERSION_3 = 0x20080522


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32),
                ("inheritable", ctypes.c_uint32)]


def drop_capabilities() -> bool:
    """Give up every capability (bounding, ambient, permitted, effective, inheritable)
    and the means to gain new ones (no_new_privs: no set-user-ID program, no capability
    regained by executing as root). True when none is left (:func:`unprivileged`)."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
        libc.prctl(_PR_CAP_AMBIENT, _PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)
        for capability in range(64):
            if libc.prctl(_PR_CAPBSET_DROP, capability, 0, 0, 0) != 0 and \
                    ctypes.get_errno() == 22:  # EINVAL: past the last capability
                break
        libc.capset(ctypes.byref(_CapHeader(_CAPABILITY_VERSION_3, 0)), (_CapData * 2)())
    except (OSError, AttributeError):
        return False
    return unprivileged()


def unprivileged() -> bool:
    """Whether this process holds no capability, in any namespace (/proc/self/status)."""
    try:
        status = Path("/proc/self/status").read_text()
    except OSError:
        return False
    fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
    return all(int(fields.get(name, "1").strip(), 16) == 0 for name in ("CapEff", "CapPrm"))


_CLONE_NEWNS = 0x00020000
_MS_NOSUID, _MS_NODEV, _MS_NOEXEC = 0x2, 0x4, 0x8
_MS_BIND, _MS_MOVE, _MS_REC, _MS_PRIVATE = 0x1000, 0x2000, 0x4000, 1 << 18
SHARED_MEMORY = "/dev/shm"
SHARED_MEMORY_BYTES = 256 * 2**20  # a job's own POSIX shared memory (RAM-backed)
PROC_TUNABLES = ("/proc/sys", "/proc/sysrq-trigger", "/proc/irq", "/proc/bus")
"""What stays read-only in a CUDA job's writable ``/proc``: the kernel's settings."""
_AT_FDCWD, _AT_RECURSIVE = -100, 0x8000
_MOUNT_ATTR_RDONLY = 1
_SYS_MOUNT_SETATTR = {"x86_64": 442, "aarch64": 442}
_SYS_TREE = {"x86_64": (428, 429), "aarch64": (428, 429)}  # open_tree, move_mount
_OPEN_TREE_CLONE, _MOVE_MOUNT_F_EMPTY_PATH = 1, 0x4


class _MountAttr(ctypes.Structure):
    _fields_ = [("attr_set", ctypes.c_uint64), ("attr_clr", ctypes.c_uint64),
                ("propagation", ctypes.c_uint64), ("userns_fd", ctypes.c_uint64)]


class _Mounts:
    """The mount calls the file-system steps make, through libc (mount_setattr has no
    wrapper, so it goes by its system call number)."""

    def __init__(self, number: int):
        self.number = number
        self.libc = ctypes.CDLL(None, use_errno=True)
        self.libc.syscall.restype = ctypes.c_long

    @classmethod
    def here(cls) -> _Mounts | None:
        """None where this machine's mount_setattr number is not known."""
        number = _SYS_MOUNT_SETATTR.get(os.uname().machine)
        return None if number is None else cls(number)

    def private_namespace(self) -> bool:
        """A mount namespace of this process's own, none of its changes propagating."""
        return bool(self.libc.unshare(_CLONE_NEWNS) == 0
                    and self.libc.mount(None, b"/", None, _MS_REC | _MS_PRIVATE, None) == 0)

    def bind(self, path: bytes, recursive: bool = False, to: bytes | None = None) -> bool:
        """``path`` mounted over itself (or over ``to``): a mount of its own, whose flags
        can differ."""
        flags = _MS_BIND | (_MS_REC if recursive else 0)
        return bool(self.libc.mount(path, to or path, None, flags, None) == 0)

    def read_only(self, path: bytes, on: bool, recursive: bool = True) -> bool:
        """Set (``on``) or clear the read-only flag of the mount at ``path``."""
        attr = _MountAttr(_MOUNT_ATTR_RDONLY, 0, 0, 0) if on else _MountAttr(
            0, _MOUNT_ATTR_RDONLY, 0, 0)
        return bool(self.libc.syscall(self.number, _AT_FDCWD, path,
                                      _AT_RECURSIVE if recursive else 0, ctypes.byref(attr),
                                      ctypes.sizeof(attr)) == 0)

    def tmpfs(self, path: bytes, options: bytes) -> bool:
        return bool(self.libc.mount(b"tmpfs", path, b"tmpfs", _MS_NOSUID | _MS_NODEV,
                                    options) == 0)

    def reachable(self, paths: list[Path]) -> bool:
        """Make each of ``paths`` reachable by any user, in this private namespace, where
        a directory above it is not (a job dropped to ``nobody`` must reach the
        directories it writes and the files it reads): each is cloned to a detached
        mount, an empty traversable tmpfs covers the highest directory above it that
        others may not enter, and the clone is attached at its own path there. What
        else lay in that directory is out of the job's sight; the host sees no change."""
        hidden = {path: top for path in paths if (top := _closed_ancestor(path)) is not None}
        if not hidden:
            return True
        numbers = _SYS_TREE.get(os.uname().machine)
        if numbers is None:
            return False
        open_tree, move_mount = numbers
        tops = set(hidden.values())
        tops = {top for top in tops if not any(other in top.parents for other in tops)}
        clones = []
        try:
            for path in hidden:
                fd = self.libc.syscall(open_tree, _AT_FDCWD, str(path).encode(),
                                       _OPEN_TREE_CLONE | os.O_CLOEXEC | _AT_RECURSIVE)
                if fd < 0:
                    return False
                clones.append((int(fd), path))
            if not all(self.tmpfs(str(top).encode(), b"mode=0755,size=1m") for top in tops):
                return False
            for fd, path in clones:
                if os.path.isdir(f"/proc/self/fd/{fd}"):
                    path.mkdir(parents=True, exist_ok=True)
                else:  # a file is mounted on a file
                    path.parent.mkdir(parents=True, exist_ok=True)
                    path.touch()
                if self.libc.syscall(move_mount, fd, b"", _AT_FDCWD, str(path).encode(),
                                     _MOVE_MOUNT_F_EMPTY_PATH) != 0:
                    return False
            return True
        finally:
            for fd, _ in clones:
                os.close(fd)


def confine_filesystem(workdir: Path, shared_memory: bool = True,
                       writable: tuple[Path, ...] = (), device_driver: bool = False,
                       reach: tuple[Path, ...] | None = None) -> bool:
    """Make every mount read-only except ``workdir``, in a private mount namespace, and
    give the job a POSIX shared-memory directory of its own (an empty tmpfs on
    ``/dev/shm``, 256 MiB at most: OpenMP runtimes open shared memory there, and a job
    must neither see nor touch the host's).

    Needs root (or a user namespace) and Linux >= 5.12 for mount_setattr; the host's
    mounts are untouched. Returns False where refused or incomplete.
    ``shared_memory=False`` leaves ``/dev/shm`` read-only like the rest (for
    :mod:`swarmfab.sandbox.probe`). ``writable`` directories stay writable too (trusted
    code's shared caches; never a candidate's). ``device_driver`` (a CUDA job) leaves
    ``/proc`` writable, as a GPU driver needs it (on an H200, a read-only ``/proc`` alone
    made ``cudaGetDeviceCount`` fail with error 304, and every other mount read-only left
    CUDA working: ``python -m swarmfab.sandbox.probe --mounts``), while the kernel's
    tunables in it (:data:`PROC_TUNABLES`) stay read-only, as container runtimes keep them.
    ``reach`` (not None: the job will run as ``nobody``): ``workdir``, ``writable`` and
    these files or directories (what the job reads) are made reachable where a directory
    above them is closed to others (:meth:`_Mounts.reachable`).
    """
    mounts = _Mounts.here()
    if mounts is None:
        return False
    kept = [str(path).encode() for path in (workdir, *writable)]
    confined = (
        mounts.private_namespace()
        and (reach is None or mounts.reachable([workdir, *writable, *reach]))
        and all(mounts.bind(path) for path in kept)
        and mounts.read_only(b"/", True)
        and all(mounts.read_only(path, False) for path in kept)
    )
    if confined and device_driver:
        confined = mounts.read_only(b"/proc", False) and all(
            mounts.bind(path, recursive=True) and mounts.read_only(path, True)
            for path in (p.encode() for p in PROC_TUNABLES if os.path.exists(p)))
    if confined and shared_memory and os.path.isdir(SHARED_MEMORY):  # best effort
        mounts.libc.mount(b"tmpfs", SHARED_MEMORY.encode(), b"tmpfs",
                          _MS_NOSUID | _MS_NODEV | _MS_NOEXEC,
                          f"size={SHARED_MEMORY_BYTES},mode=1777".encode())
    return confined


def _closed_ancestor(path: Path) -> Path | None:
    """The highest directory above ``path`` that users without rights may not enter."""
    for directory in reversed(path.parents):
        try:
            if not directory.stat().st_mode & stat.S_IXOTH:
                return directory
        except OSError:
            return None
    return None


def read_only_alone(path: Path | None) -> bool:
    """Make the one mount at ``path`` read-only (not those below it), in a private mount
    namespace (``None``: only the namespace): :mod:`swarmfab.sandbox.probe` uses it to
    find the mount a driver writes."""
    mounts = _Mounts.here()
    return bool(mounts is not None and mounts.private_namespace() and (
        path is None or mounts.read_only(str(path).encode(), True, recursive=False)))


def _runs_unprivileged(isolate: bool) -> bool:
    """Whether a job (isolated or not) drops to :data:`UNPRIVILEGED`."""
    return isolate and can_drop_privileges()


def can_read(path: Path, isolate: bool) -> bool:
    """Whether a job (isolated or not) may read ``path`` where it lies: its user may read
    it, and reach it (or the job's mount namespace will make it reachable:
    :meth:`_Mounts.reachable`)."""
    if not _runs_unprivileged(isolate):
        return True
    return _world_reachable(path) or (_open_to_others(path) and mount_namespaces())


def _open_to_others(path: Path) -> bool:
    """Whether users without rights may read ``path`` itself (a directory: and enter it)."""
    try:
        mode = path.stat().st_mode
    except OSError:
        return False
    needed = stat.S_IROTH | (stat.S_IXOTH if stat.S_ISDIR(mode) else 0)
    return mode & needed == needed


@functools.cache
def mount_namespaces() -> bool:
    """Whether this process may make a private mount namespace (tried in a forked child
    that calls nothing but the two functions, resolved before the fork)."""
    mounts = _Mounts.here()
    if mounts is None:
        return False
    unshare, mount = mounts.libc.unshare, mounts.libc.mount
    pid = os.fork()
    if pid == 0:  # the child: two calls, then gone
        made = unshare(_CLONE_NEWNS) == 0 and mount(None, b"/", None,
                                                     _MS_REC | _MS_PRIVATE, None) == 0
        os._exit(0 if made else 1)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status) == 0


def job_user(isolate: bool) -> str:
    """The name of the user a job runs as."""
    if _runs_unprivileged(isolate):
        return UNPRIVILEGED
    try:
        return pwd.getpwuid(os.geteuid()).pw_name
    except KeyError:
        return f"uid_{os.geteuid()}"


def _world_reachable(path: Path) -> bool:
    """Whether a user with no special rights can read ``path`` (and traverse its parents)."""
    try:
        for directory in [path, *path.parents] if path.is_dir() else list(path.parents):
            if not directory.stat().st_mode & stat.S_IXOTH:
                return False
        return path.is_dir() or bool(path.stat().st_mode & stat.S_IROTH)
    except OSError:
        return False


@functools.cache
def can_drop_privileges() -> bool:
    """True when running as root and an unprivileged user could load our code and torch.

    Modules imported lazily inside a job are read after the drop, so the packages must be
    world-readable (they are in a normal install; not in a checkout under a private home).
    """
    if os.geteuid() != 0:
        return False
    try:
        pwd.getpwnam(UNPRIVILEGED)
    except KeyError:
        return False
    import numpy
    import torch

    import swarmfab

    modules = (swarmfab, torch, numpy, os)  # os: the standard library's own directory
    packages = [Path(module.__file__ or "").parent for module in modules]
    return all(_world_reachable(package) for package in packages)


def drop_privileges(workdir: Path, max_processes: int) -> bool:
    """Become ``nobody`` with a cap on processes (the cap binds non-root users only).
    The working directory becomes theirs; a link in it is not followed (what it points
    to stays its owner's)."""
    if not can_drop_privileges():
        return False
    user = pwd.getpwnam(UNPRIVILEGED)
    for entry in [workdir, *workdir.rglob("*")]:
        os.chown(entry, user.pw_uid, user.pw_gid, follow_symlinks=False)
    import resource

    resource.setrlimit(resource.RLIMIT_NPROC, (max_processes, max_processes))
    os.setgroups([])
    os.setgid(user.pw_gid)
    os.setuid(user.pw_uid)
    return True
