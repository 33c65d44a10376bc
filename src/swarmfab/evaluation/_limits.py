"""What a job may do, from what runs in it.

Every job gets the evaluator's limits. An implementation that compiles at its first call
(torch.compile; Triton kernels, a candidate's or fla's) may also start processes (the
compiler) and write large files; on a CPU such a job starts from the warm Inductor cache.
fla's sessions, trusted code, share one Triton cache across jobs, writable to them alone.
On a CUDA device no address-space limit is set (the driver reserves far more virtual
memory than it uses) and /proc stays writable (the driver writes there; its kernel
tunables stay read-only).

A job that runs untrusted code (a candidate an LLM wrote or a user gave, or a champion
born of one) is strict: it does not run where the sandbox holds only in part, unless the
user allowed that (``Limits.allow_weak``, ``--allow-weak-sandbox``). A candidate rendered
from a built-in template (it carries the knob settings it was rendered from) and the
baselines run with what holds; every verdict records what that was (:func:`held`).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from swarmfab.backends import get_backend
from swarmfab.evaluation._inductor_base import base_cache, linked_headers, staged_base
from swarmfab.evaluation._worker import Implementation
from swarmfab.records import Candidate, Isolation, Verdict
from swarmfab.sandbox import JobOutcome, Limits, job_user
from swarmfab.workloads import Workload

__all__ = ["TRUSTED_TRITON_CACHE", "held", "job_limits", "trusted", "warm_start"]

TRUSTED_TRITON_CACHE = "triton-trusted"  # under the build cache: fla's compiled kernels
COMPILING_WALL_S = 600.0  # a job that compiles at its first call gets at least this
COMPILING_FILE_BYTES = 2**31


def job_limits(base: Limits, device: str, workload: Workload, cache_dir: Path,
               implementations: list[Implementation]) -> Limits:
    """The limits of a job (or session) that runs ``implementations``."""
    limits = dataclasses.replace(base.for_device(device), strict=not base.allow_weak and any(
        impl.artifact is not None and not trusted(impl.source) for impl in implementations))
    compiling = workload.compiling_baselines | workload.jit_baselines
    if not any(impl.baseline in compiling or (
            impl.artifact is not None and get_backend(impl.artifact.backend).needs_processes)
            for impl in implementations):
        return limits
    if all(impl.baseline in workload.jit_baselines for impl in implementations):
        limits = _shared_triton_cache(limits, cache_dir)
    return dataclasses.replace(limits, allow_processes=True,
                               file_bytes=max(base.file_bytes, COMPILING_FILE_BYTES),
                               wall_s=max(base.wall_s, COMPILING_WALL_S))


def _shared_triton_cache(limits: Limits, cache_dir: Path) -> Limits:
    """One Triton cache for trusted just-in-time baselines (fla's kernels), so a kernel is
    compiled, and its autotuning choice made (``TRITON_CACHE_AUTOTUNING``, Triton >=
    3.4), once per host rather than in every session; no candidate can write it (it is
    read-only to every other job)."""
    shared = cache_dir / TRUSTED_TRITON_CACHE
    shared.mkdir(parents=True, exist_ok=True)
    shared.chmod(0o777)  # jobs run as an unprivileged user where they can
    return dataclasses.replace(limits, writable=(str(shared),),
                               environment=(("TRITON_CACHE_DIR", str(shared)),
                                            ("TRITON_CACHE_AUTOTUNING", "1")))


def warm_start(limits: Limits, device: str, cache_dir: Path, cores: tuple[int, ...],
               stage: dict[str, Path]) -> tuple[dict[str, Path], dict[str, Path]]:
    """``stage`` and the links of a job or session: one that may compile (on a CPU)
    starts from the warm base cache and links its precompiled headers."""
    if not (limits.allow_processes and device == "cpu"):
        return stage, {}
    user = job_user(limits.isolate)
    base = base_cache(cache_dir, cores, user)
    return {**staged_base(base), **stage}, linked_headers(base, user)


def trusted(candidate: Candidate | None) -> bool:
    """Whether a candidate's code is ours: rendered from a built-in design space's
    template, it carries the knob settings it was rendered from (an LLM's edit or a
    user's file carries none; an artifact whose candidate is unknown is not trusted)."""
    return candidate is not None and bool(candidate.knobs)


def held(verdict: Verdict, source: JobOutcome | Verdict) -> Verdict:
    """``verdict`` with the isolation its candidate's code ran under: the job's that ran
    it, or the one an earlier verdict on the same code recorded."""
    if isinstance(source, Verdict):
        return dataclasses.replace(verdict, isolation=source.isolation)
    if source.isolation is None:
        return verdict
    found = source.isolation
    return dataclasses.replace(verdict, isolation=Isolation(found.level, found.held,
                                                            found.failed, found.missing))
