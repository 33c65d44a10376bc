"""The isolation steps of a job's process, in order, and the message that tells the
parent what they added up to (:class:`~swarmfab.sandbox.Isolation`), sent before any of
the job's code runs."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from swarmfab.sandbox import _report, _wire
from swarmfab.sandbox._isolation import (
    can_drop_privileges,
    confine_filesystem,
    drop_capabilities,
    drop_privileges,
    enter_user_namespace,
    forbid_processes_and_sockets,
    isolate_network,
)
from swarmfab.sandbox._landlock import job_ruleset
from swarmfab.sandbox._report import Isolation, WeakSandboxError

if TYPE_CHECKING:
    from swarmfab.sandbox._process import Limits

__all__ = ["ISOLATION", "isolate", "read_isolation", "refuse_weak"]

ISOLATION = "isolation"  # the first message a job's process sends: what held


def isolate(limits: Limits, workdir: Path) -> Isolation:
    """The isolation steps, in order, each recorded as held or not (one that raises did
    not hold): a user namespace (any user but root), the network namespace, read-only
    mounts, the drop to ``nobody`` (root), no capabilities, Landlock, seccomp. Landlock's
    rules are gathered while the process may still open every path they name."""
    steps: dict[str, bool] = {}

    def step(name: str, action: Callable[[], object]) -> bool:
        try:
            steps[name] = bool(action())
        except Exception:
            steps[name] = False
        return steps[name]

    writable = tuple(Path(p) for p in limits.writable)
    root = os.geteuid() == 0
    reach = tuple(Path(p) for p in limits.readable) if root and can_drop_privileges() else None
    if not root:
        step(_report.USER_NAMESPACE, enter_user_namespace)
    step(_report.NETWORK_NAMESPACE, isolate_network)
    mounted = step(_report.READ_ONLY_MOUNTS, lambda: confine_filesystem(
        workdir, writable=writable, device_driver=limits.device_driver, reach=reach))
    ruleset = job_ruleset(workdir, writable, limits.readable, shared_memory=mounted,
                          device_driver=limits.device_driver)
    if root:
        step(_report.USER_NOBODY, lambda: drop_privileges(workdir, limits.max_processes))
    step(_report.NO_CAPABILITIES, drop_capabilities)
    step(_report.LANDLOCK, ruleset.enforce)
    step(_report.SECCOMP, lambda: forbid_processes_and_sockets(
        allow_processes=limits.allow_processes))
    return Isolation.derive(steps, allow_processes=limits.allow_processes)


def read_isolation(data: bytes) -> Isolation | None:
    """What held, from a job's first message; None where it is not that message (the
    child failed before it could send it)."""
    try:
        message = _wire.loads(data, (Isolation,))
    except _wire.AnswerError:
        return None
    if isinstance(message, tuple) and len(message) == 2 and message[0] == ISOLATION \
            and isinstance(message[1], Isolation):
        return message[1]
    return None


def refuse_weak(isolation: Isolation, limits: Limits) -> None:
    """Raise :class:`WeakSandboxError` where a strict job's isolation is not full (its
    child does not run the job either)."""
    if limits.strict and isolation.level != "full":
        raise WeakSandboxError(isolation.refusal())
