"""Sandboxed execution of untrusted candidate code in fresh, limited processes."""

from swarmfab.sandbox._process import (
    JobOutcome,
    JobStatus,
    Limits,
    job_user,
    run_job,
    scrubbed_environment,
    start_forkserver,
)
from swarmfab.sandbox._report import GUARANTEES, STEPS, Isolation, WeakSandboxError
from swarmfab.sandbox._session import Channel, Session, SessionEnded, start_session

__all__ = ["GUARANTEES", "STEPS", "Channel", "Isolation", "JobOutcome", "JobStatus", "Limits",
           "Session", "SessionEnded", "WeakSandboxError", "job_user", "run_job",
           "scrubbed_environment", "start_forkserver", "start_session"]
