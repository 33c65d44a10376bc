"""Sandboxed execution of untrusted candidate code in fresh, limited processes."""

from swarmfab.sandbox._process import (
    JobOutcome,
    JobStatus,
    Limits,
    job_user,
    run_job,
    scrubbed_environment,
)

__all__ = ["JobOutcome", "JobStatus", "Limits", "job_user", "run_job", "scrubbed_environment"]
