"""Battery verdicts kept: a candidate that passed the battery is not put through the same
battery again on the same host with the same toolchain.

The battery is the expensive tier (real sizes, many cases); the same code meets it again
when a run crowns a candidate an earlier run crowned, when ``swarmfab verify`` is asked
twice, or when several runs share a work directory. What decides a battery verdict is in
the key: the candidate's content hash (sources, flags, backend), the battery's cases as
defined (names, sizes, values, layouts, thread counts; not their secret seeds), the dtype,
thread count, device and tolerances, the host (CPU model and ISA), the backend's
toolchain, torch, and swarmfab's own code (its installed files' sizes and times). A
change in any of them is another key, so `refresh` after a compiler or torch upgrade
checks again. Only accepted verdicts are kept: a rejection, or a flaky race that might be
caught the next time, is always judged afresh.

Verdicts live in ``<work dir>/battery/`` and, where ``SWARMFAB_BUILD_CACHE`` names a
directory, there too (shared by every work directory, as builds are). Like builds, only
the user should write those directories: a verdict found there is believed. Two
processes about to put the same code through the same battery (two runs sharing a cache
crown the same starting point) take turns: the second waits for the first's verdict, and
judges afresh only if it was not an acceptance or took longer than ``CLAIM_WAIT_S``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import functools
import hashlib
import json
import os
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict
from pathlib import Path

import torch

from swarmfab.backends import SHARED_BUILDS_ENV, get_backend
from swarmfab.measure.roofline import host_fingerprint
from swarmfab.records import Candidate, Status, Verdict
from swarmfab.workloads import Case, Tolerances, Workload

__all__ = ["KeptVerdicts"]

KEPT_NOTE = "kept: this code passed the same battery here before"
# the longest wait for another process's battery of the same code: a battery takes 8-25 s
# on a 2-core host, a minute under load; a holder slower than that is stuck or starved,
# and judging afresh costs less than waiting on it (a run's budget is wall time)
CLAIM_WAIT_S = 60.0


@functools.cache
def _code_stamp() -> str:
    """swarmfab's own code as installed: every module's path, size and modification time."""
    root = Path(__file__).resolve().parents[1]
    digest = hashlib.sha256()
    for path in sorted(root.rglob("*.py")):
        stat = path.stat()
        digest.update(f"{path.relative_to(root)} {stat.st_size} {stat.st_mtime_ns}\n".encode())
    return digest.hexdigest()


def _definition(case: Case) -> dict[str, object]:
    """What a case tests, without its seed (salted by each evaluator)."""
    fields = asdict(case)
    fields.pop("seed", None)
    return fields


class KeptVerdicts:
    """Accepted battery verdicts of one evaluator's setting, on disk."""

    def __init__(self, work_dir: Path, workload: Workload, *, threads: int, dtype: str,
                 device: str, tolerances: Tolerances):
        self.dirs = [work_dir / "battery"]
        shared = os.environ.get(SHARED_BUILDS_ENV)
        if shared:
            self.dirs.append(Path(shared).resolve() / "battery")
        self.setting = {
            "workload": workload.name, "source": getattr(workload, "source", ""),
            "threads": threads, "dtype": dtype, "device": device,
            "tolerances": repr(tolerances), "host": host_fingerprint(threads),
            "torch": torch.__version__, "swarmfab": _code_stamp(),
        }

    def key(self, candidate: Candidate, cases: Sequence[Case]) -> str:
        described = {**self.setting, "candidate": candidate.id,
                     "toolchain": get_backend(candidate.backend).describe(),
                     "cases": [_definition(case) for case in cases]}
        text = json.dumps(described, sort_keys=True, default=repr)
        return hashlib.sha256(text.encode()).hexdigest()[:32]

    def judged(self, candidate: Candidate, cases: Sequence[Case],
               judge: Callable[[], Verdict]) -> Verdict:
        """The kept verdict of ``candidate`` on the battery ``cases`` define, else
        ``judge()``'s (kept where accepted)."""
        key = self.key(candidate, cases)
        with self._claim(key):  # another process judging this code: its verdict first
            kept = self.get(key)
            if kept is not None:
                return dataclasses.replace(kept, candidate_id=candidate.id,
                                           reason=f"{kept.reason}; {KEPT_NOTE}")
            verdict = judge()
            self.put(key, verdict)
        return verdict

    @contextlib.contextmanager
    def _claim(self, key: str) -> Iterator[None]:
        """Hold ``key``'s lock (in the shared directory where there is one) while judging;
        wait for another holder up to ``CLAIM_WAIT_S``. A lock that cannot be taken
        (a read-only directory, a holder that hangs) is passed over: waiting is an
        optimisation, as keeping is."""
        try:
            self.dirs[-1].mkdir(parents=True, exist_ok=True)
            handle = open(self.dirs[-1] / f".{key}.lock", "a")  # noqa: SIM115
        except OSError:
            yield
            return
        with handle:
            deadline = time.monotonic() + CLAIM_WAIT_S
            while True:
                try:
                    fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except OSError:
                    if time.monotonic() > deadline:
                        break
                    time.sleep(0.1)
            yield  # the lock goes with the file's closing

    def get(self, key: str) -> Verdict | None:
        for directory in self.dirs:
            try:
                verdict = Verdict.from_dict(json.loads((directory / f"{key}.json").read_text()))
            except (OSError, ValueError, KeyError, TypeError):
                continue
            if verdict.status is Status.ACCEPTED:
                return verdict
        return None

    def put(self, key: str, verdict: Verdict) -> None:
        """Keep an accepted verdict (atomically; a directory that cannot be written is
        passed over: keeping is an optimisation, never a reason to fail)."""
        if verdict.status is not Status.ACCEPTED:
            return
        text = json.dumps(verdict.to_dict())
        for directory in self.dirs:
            partial = directory / f".{key}.{uuid.uuid4().hex}"
            try:
                directory.mkdir(parents=True, exist_ok=True)
                partial.write_text(text)
                os.replace(partial, directory / f"{key}.json")
            except OSError:
                with contextlib.suppress(OSError):
                    partial.unlink(missing_ok=True)
