"""Run by test_every_user.py as root, on an interpreter every user reaches (so jobs drop
to ``nobody``): jobs that must read what their root parent wrote, and write where they
are told, beneath directories closed to others; prints what each got, as JSON.
Argument: a directory closed to others (mode 700) to work in."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import hostile_jobs

from swarmfab.sandbox import Limits, job_user, run_job
from swarmfab.sandbox._isolation import can_drop_privileges


def main(closed: Path) -> dict[str, object]:
    staged, linked, shared = closed / "staged.txt", closed / "linked.txt", closed / "shared"
    staged.write_text("staged by root")
    linked.write_text("linked by root")
    linked.chmod(0o644)
    shared.mkdir()
    shared.chmod(0o777)  # as the evaluator's shared cache for trusted jobs
    found: dict[str, object] = {"can drop": can_drop_privileges(), "user": job_user(True)}
    uid = run_job(os.getuid)
    found["uid"] = uid.value
    found["isolation"] = None if uid.isolation is None else uid.isolation.describe()
    found["staged"] = run_job(hostile_jobs.read_text, "in/staged.txt",
                              stage={"in/staged.txt": staged}).value
    read = run_job(hostile_jobs.read_text, "in/linked.txt", links={"in/linked.txt": linked})
    found["linked"] = read.value or read.detail
    found["link kept"] = run_job(os.path.islink, "in/linked.txt",
                                 links={"in/linked.txt": linked}).value
    wrote = run_job(hostile_jobs.write_where_told, str(shared / "kernel"), str(closed / "x"),
                    limits=Limits(writable=(str(shared),)))
    found["writable"] = wrote.value or wrote.detail
    found["written"] = (shared / "kernel").exists() and (shared / "kernel").stat().st_uid
    found["planted"] = (closed / "x").exists()
    return found


if __name__ == "__main__":
    print(json.dumps(main(Path(sys.argv[1]))))
