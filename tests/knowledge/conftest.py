"""A real, throw-away PostgreSQL server for the store's tests.

One cluster per test session: ``initdb`` in a temporary directory owned by an
unprivileged user (PostgreSQL refuses to run as root), started on a free port of
127.0.0.1; every test that asks for ``postgres_url`` gets a fresh database in it.
Without PostgreSQL binaries the tests that need it are skipped (``.ci/run`` installs them).
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest


def _server_binaries() -> Path | None:
    """The directory holding initdb, pg_ctl and postgres, if PostgreSQL is installed."""
    found = shutil.which("initdb")
    if found is not None and shutil.which("pg_ctl") is not None:
        return Path(found).resolve().parent  # a link on PATH: its real directory has postgres
    candidates = sorted(glob.glob("/usr/lib/postgresql/*/bin"), reverse=True)
    return next((Path(d) for d in candidates if (Path(d) / "initdb").exists()), None)


def _as_server_user() -> tuple[list[str], int, int]:
    """A command prefix that drops root to an unprivileged user, with its uid and gid."""
    if os.geteuid() != 0:
        return [], os.getuid(), os.getgid()
    for name in ("postgres", "nobody"):
        try:
            user = pwd.getpwnam(name)
        except KeyError:
            continue
        prefix = ["setpriv", f"--reuid={user.pw_uid}", f"--regid={user.pw_gid}",
                  "--clear-groups", "--"]
        return prefix, user.pw_uid, user.pw_gid
    pytest.skip("running as root and no unprivileged user (postgres, nobody) to run PostgreSQL")


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[str]:
    """The base URL (no database) of a PostgreSQL cluster that lives for the session."""
    binaries = _server_binaries()
    if binaries is None:
        pytest.skip("no PostgreSQL server binaries (initdb, pg_ctl) on PATH or under "
                    "/usr/lib/postgresql/*/bin; `.ci/run` installs the postgresql package")
    prefix, uid, gid = _as_server_user()
    home = Path(tempfile.mkdtemp(prefix="swarmfab-pg-"))
    os.chown(home, uid, gid)
    data, port = home / "data", _free_port()

    def server(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([*prefix, *args], capture_output=True, text=True, timeout=120,
                              check=False, cwd=home)

    done = server(str(binaries / "initdb"), "-D", str(data), "-A", "trust", "-U", "swarmfab",
                  "-E", "UTF8", "--locale=C", "--no-sync")
    assert done.returncode == 0, done.stdout + done.stderr
    options = f"-p {port} -c listen_addresses=127.0.0.1 -k {home} -c fsync=off"
    done = server(str(binaries / "pg_ctl"), "-D", str(data), "-l", str(home / "server.log"),
                  "-o", options, "-w", "-t", "60", "start")
    assert done.returncode == 0, done.stdout + done.stderr + _read(home / "server.log")
    try:
        yield f"postgresql://swarmfab@127.0.0.1:{port}"
    finally:
        server(str(binaries / "pg_ctl"), "-D", str(data), "-m", "immediate", "-w", "stop")
        shutil.rmtree(home, ignore_errors=True)


def _read(path: Path) -> str:
    return path.read_text() if path.exists() else ""


@pytest.fixture
def postgres_url(postgres_server: str) -> Iterator[str]:
    """A fresh, empty database of the session's cluster, dropped after the test."""
    name = f"test_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(f"{postgres_server}/postgres", autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    yield f"{postgres_server}/{name}"
    with psycopg.connect(f"{postgres_server}/postgres", autocommit=True) as admin:
        admin.execute(f'DROP DATABASE "{name}" WITH (FORCE)')
