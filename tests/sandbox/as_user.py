"""Run by test_every_user.py as an unprivileged user (a user made for the test, or the
one running the tests): hostile jobs, each in the sandbox as that user gets it; prints
what each got, as JSON. Arguments: the user's home, a file name to plant, a port."""

from __future__ import annotations

import dataclasses
import json
import sys

import hostile_jobs

from swarmfab.sandbox import Limits, WeakSandboxError, run_job


def main(home: str, marker: str, port: int) -> dict[str, object]:
    attempts = {
        "write /tmp": (hostile_jobs.write_outside, f"/tmp/{marker}"),
        "write /var/tmp": (hostile_jobs.write_outside, f"/var/tmp/{marker}"),
        "write home": (hostile_jobs.write_outside, f"{home}/{marker}"),
        "read home": (hostile_jobs.read_text, f"{home}/secret"),
        "connect": (hostile_jobs.connect_loopback, port),
        "socket": (hostile_jobs.open_socket,),
        "fork": (hostile_jobs.fork_storm,),
        "start a process": (hostile_jobs.start_process,),
    }
    found: dict[str, object] = {}
    isolation = None
    for name, (job, *args) in attempts.items():
        outcome = run_job(job, *args, limits=Limits(wall_s=60))
        found[name] = {"status": outcome.status.value, "value": outcome.value,
                       "detail": outcome.detail}
        isolation = outcome.isolation
    assert isolation is not None
    found["isolation"] = {**dataclasses.asdict(isolation), "level": isolation.level,
                          "held": isolation.held, "failed": isolation.failed,
                          "missing": isolation.missing}
    try:
        found["strict"] = run_job(divmod, 7, 2, limits=Limits(strict=True)).value
    except WeakSandboxError as exc:
        found["strict"] = f"refused: {exc}"
    return found


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1], sys.argv[2], int(sys.argv[3]))))
