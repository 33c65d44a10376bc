"""The sandbox holds for every user, for real: hostile candidates run by an unprivileged
user (one made for the test, as root) stay in their directory, off the network and
without processes; jobs run by root on an interpreter every user reaches drop to
``nobody`` and still read what their root parent wrote and write where they are told.

``make test-integration`` (SWARMFAB_INTEGRATION=1) also runs the whole sandbox suite
as root on such an interpreter, where every job drops.
"""

from __future__ import annotations

import json
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from every_user import HERE, make_test_user, reachable_python, run_as

from swarmfab.sandbox._landlock import abi_version

ROOT = os.geteuid() == 0
# a second OS user made for the test, and an interpreter copied where every user reaches
# it: make test-integration runs this module, make test leaves it out
pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def python() -> Iterator[Path]:
    """An interpreter every user can reach, with this one's packages."""
    where = Path(tempfile.mkdtemp(prefix="swarmfab-python-"))
    try:
        found = reachable_python(where)
        if found is None:
            pytest.skip("no interpreter every user can reach: this environment's packages "
                        "lie beneath a directory closed to others, or no system Python of "
                        "this version is installed")
        yield found
    finally:
        shutil.rmtree(where, ignore_errors=True)


@pytest.fixture
def server() -> Iterator[tuple[int, list[object]]]:
    """A loopback server that records every connection it accepts."""
    listening = socket.create_server(("127.0.0.1", 0))
    accepted: list[object] = []

    def accept() -> None:
        while True:
            try:
                accepted.append(listening.accept())
            except OSError:
                return

    threading.Thread(target=accept, daemon=True).start()
    yield listening.getsockname()[1], accepted
    listening.close()


def test_a_hostile_candidate_run_by_an_unprivileged_user_stays_in_its_directory(
        python: Path, server: tuple[int, list[object]]) -> None:
    """Made for the test as root (runuser), else the user running the tests: writing
    /tmp, /var/tmp or the user's home, reading the home, opening a socket or starting a
    process is refused, and the isolation is full (Landlock and seccomp need no
    privilege; the namespaces need unprivileged user namespaces)."""
    user = make_test_user() if ROOT else None
    if ROOT and user is None:
        pytest.skip("running as root, but no unprivileged user could be made (useradd)")
    owner = pwd.getpwnam(user) if user else pwd.getpwuid(os.geteuid())
    home = Path(tempfile.mkdtemp(prefix="swarmfab-home-"))
    marker = f"swarmfab-escaped-{os.getpid()}"
    planted = [Path("/tmp") / marker, Path("/var/tmp") / marker, home / marker]
    try:
        (home / "secret").write_text("the user's own")
        os.chmod(home / "secret", 0o600)
        for path in (home, home / "secret"):
            os.chown(path, owner.pw_uid, owner.pw_gid)
        port, accepted = server
        done = run_as(user, python, "as_user.py", str(home), marker, str(port),
                      env={"PATH": "/usr/bin:/bin", "HOME": str(home), "LANG": "C.UTF-8"})
        assert done.returncode == 0, done.stderr[-3000:]
        found = json.loads(done.stdout.strip().splitlines()[-1])
    finally:
        escaped = [str(path) for path in planted if path.exists()]
        for path in planted:
            path.unlink(missing_ok=True)
        shutil.rmtree(home, ignore_errors=True)
    isolation = found.pop("isolation")
    strict = found.pop("strict")
    assert "user nobody" not in isolation["held"] + isolation["failed"], isolation
    if abi_version() == 0 and isolation["level"] != "full":  # a kernel without Landlock
        assert str(strict).startswith("refused") and "--allow-weak-sandbox" in strict
        pytest.skip(f"this kernel has no Landlock: {isolation}")
    assert isolation["level"] == "full", isolation
    assert {"landlock", "seccomp", "no capabilities"} <= set(isolation["held"]), isolation
    assert strict == [3, 1]
    assert escaped == [] and accepted == []
    for name, got in found.items():
        refused = got["status"] == "error" or str(got["value"]).startswith("refused after 0")
        assert refused, (name, got)
    assert found["read home"]["value"] is None


@pytest.mark.skipif(not ROOT, reason="dropping to nobody is root's")
def test_a_job_dropped_to_nobody_reads_what_root_wrote_and_writes_where_told(
        python: Path, tmp_path: Path) -> None:
    """As root on an interpreter every user reaches, a job runs as nobody: it reads a
    staged copy and a linked file its root parent wrote beneath a directory closed to
    others (mode 700), writes the directory it was given beneath it, and nothing else."""
    closed = Path(tempfile.mkdtemp(prefix="swarmfab-closed-"))  # mode 700, root's
    try:
        done = run_as(None, python, "as_root.py", str(closed),
                      env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "LANG": "C.UTF-8"})
        assert done.returncode == 0, done.stderr[-3000:]
        found = json.loads(done.stdout.strip().splitlines()[-1])
    finally:
        shutil.rmtree(closed, ignore_errors=True)
    assert found["can drop"] and found["user"] == "nobody", found
    assert found["uid"] == pwd.getpwnam("nobody").pw_uid
    assert found["isolation"].startswith("full") and "user nobody" in found["isolation"]
    assert "did not hold" not in found["isolation"], found["isolation"]
    assert found["staged"] == "staged by root"
    assert found["linked"] == "linked by root" and found["link kept"] is True
    assert found["writable"][0] == "written", found["writable"]
    assert found["written"] == pwd.getpwnam("nobody").pw_uid and not found["planted"]


@pytest.mark.skipif(os.environ.get("SWARMFAB_INTEGRATION") != "1",
                    reason="make test-integration runs it (SWARMFAB_INTEGRATION=1)")
@pytest.mark.skipif(not ROOT, reason="dropping to nobody is root's")
def test_the_sandbox_suite_passes_as_root_on_an_interpreter_every_user_reaches(
        python: Path) -> None:
    """Every job of the sandbox's own tests and the host-peaks tests drops to nobody
    there (CI's interpreter lies under a /root closed to others, so its jobs do not)."""
    suite = [str(HERE), str(HERE.parent / "swarm" / "test_hosts.py")]
    done = subprocess.run(
        [str(python), "-m", "pytest", "-q", "-p", "no:cacheprovider", *suite,
         "--deselect", f"{HERE / 'test_every_user.py'}"],
        capture_output=True, text=True, timeout=1200, check=False, cwd=HERE.parents[1],
        env={**os.environ, "SWARMFAB_INTEGRATION": "0"})
    assert done.returncode == 0, done.stdout[-5000:] + done.stderr[-2000:]
