"""Sandboxed execution of untrusted candidate code in fresh, limited processes."""

from swarmfab.sandbox._process import JobOutcome, JobStatus, Limits, run_job, scrubbed_environment

__all__ = ["JobOutcome", "JobStatus", "Limits", "run_job", "scrubbed_environment"]
