"""What held: the isolation steps a job's process tried, whether each took effect, and
the guarantees they add up to.

The steps (:mod:`._isolation`, :mod:`._landlock`) are means; what a reader needs is the
guarantees, each derived from the steps that can give it:

============================  ===============================================================
guarantee                     held when
============================  ===============================================================
``writes confined``           Landlock, or read-only mounts in a process that holds no
                              capability or cannot call ``mount`` (seccomp)
``private files unread``      Landlock (reads only outside homes and temporary directories),
                              or the user ``nobody`` (the caller's private files are closed)
``no network``                seccomp (Unix sockets only), or a network namespace in a
                              process without capabilities (it cannot leave it)
``no new processes``          seccomp; required only where the job may not start processes
============================  ===============================================================

The level is ``full`` when every guarantee the job needs holds, ``none`` when none does,
``partial`` otherwise, and ``off`` for a job that asked for no isolation.
"""

from __future__ import annotations

from dataclasses import dataclass

from swarmfab.errors import SandboxError

__all__ = ["GUARANTEES", "STEPS", "Isolation", "WeakSandboxError"]

USER_NAMESPACE = "user namespace"
NETWORK_NAMESPACE = "network namespace"
READ_ONLY_MOUNTS = "read-only mounts"
USER_NOBODY = "user nobody"
NO_CAPABILITIES = "no capabilities"
LANDLOCK = "landlock"
SECCOMP = "seccomp"
STEPS = (USER_NAMESPACE, NETWORK_NAMESPACE, READ_ONLY_MOUNTS, USER_NOBODY, NO_CAPABILITIES,
         LANDLOCK, SECCOMP)
"""Every step, in the order a job's process applies them (root skips the user namespace,
any other user the drop to ``nobody``)."""

WRITES, READS, NETWORK, PROCESSES = ("writes confined", "private files unread", "no network",
                                     "no new processes")
GUARANTEES = (WRITES, READS, NETWORK, PROCESSES)


class WeakSandboxError(SandboxError):
    """A job that required full isolation (untrusted code) was not run: the sandbox held
    only in part here. The message names what is missing and how to go on anyway."""


@dataclass(frozen=True, slots=True)
class Isolation:
    """The isolation a job ran under: ``steps`` (each tried, and whether it took effect,
    in order) and ``guarantees`` (each the job needs, and whether it holds). ``asked``
    False: the job asked for no isolation."""

    steps: tuple[tuple[str, bool], ...] = ()
    guarantees: tuple[tuple[str, bool], ...] = ()
    asked: bool = True

    @classmethod
    def derive(cls, steps: dict[str, bool], allow_processes: bool = False) -> Isolation:
        """The guarantees ``steps`` give (see the module's table)."""
        def held(step: str) -> bool:
            return steps.get(step, False)

        settled = held(NO_CAPABILITIES) or held(USER_NOBODY)  # cannot undo namespaces
        guarantees = {
            WRITES: held(LANDLOCK) or (held(READ_ONLY_MOUNTS) and (settled or held(SECCOMP))),
            READS: held(LANDLOCK) or held(USER_NOBODY),
            NETWORK: held(SECCOMP) or (held(NETWORK_NAMESPACE) and settled),
        }
        if not allow_processes:
            guarantees[PROCESSES] = held(SECCOMP)
        return cls(tuple(steps.items()), tuple(guarantees.items()))

    @classmethod
    def off(cls) -> Isolation:
        return cls(asked=False)

    @property
    def level(self) -> str:
        if not self.asked:
            return "off"
        holding = [ok for _, ok in self.guarantees]
        return "full" if all(holding) else "partial" if any(holding) else "none"

    @property
    def held(self) -> tuple[str, ...]:
        return tuple(step for step, ok in self.steps if ok)

    @property
    def failed(self) -> tuple[str, ...]:
        return tuple(step for step, ok in self.steps if not ok)

    @property
    def missing(self) -> tuple[str, ...]:
        return tuple(name for name, ok in self.guarantees if not ok)

    def describe(self) -> str:
        """One line: the level, what is missing, the steps that held and those that did
        not."""
        if not self.asked:
            return "off (the job asked for no isolation)"
        parts = [self.level]
        if self.missing:
            parts.append(f"missing: {', '.join(self.missing)}")
        parts.append(f"held: {', '.join(self.held) or 'nothing'}")
        if self.failed:
            parts.append(f"did not hold: {', '.join(self.failed)}")
        return "; ".join(parts)

    def refusal(self) -> str:
        """Why a job that needed full isolation was not run."""
        return (f"untrusted code was not run: the sandbox holds only in part here "
                f"({self.describe()}); see `swarmfab doctor`, or pass --allow-weak-sandbox "
                f"to run it anyway")
