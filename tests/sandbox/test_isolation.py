"""Hostile jobs are contained and reported; the caller goes on."""

from __future__ import annotations

import os
import socket
import tempfile
import threading
from pathlib import Path

import hostile_jobs
import pytest

from swarmfab.sandbox import JobStatus, Limits, _process, run_job
from swarmfab.sandbox._isolation import (
    PROC_TUNABLES,
    can_read,
    forbid_processes_and_sockets,
)


def _has_seccomp() -> bool:
    return Path("/usr/lib/x86_64-linux-gnu/libseccomp.so.2").exists() or Path(
        "/usr/lib/aarch64-linux-gnu/libseccomp.so.2").exists()


@pytest.mark.skipif(not _has_seccomp(), reason="libseccomp is not installed")
def test_a_fork_storm_cannot_start() -> None:
    outcome = run_job(hostile_jobs.fork_storm, limits=Limits(wall_s=20))
    assert outcome.status is JobStatus.OK
    assert outcome.value.startswith("refused after 0 forks")


def test_endless_output_is_capped_and_reported() -> None:
    outcome = run_job(hostile_jobs.endless_output, limits=Limits(wall_s=30, file_bytes=2**20))
    assert outcome.status is JobStatus.ERROR
    assert "File too large" in outcome.detail
    assert outcome.output_tail.endswith("x")


def test_writing_outside_the_job_directory_is_refused(tmp_path: Path) -> None:
    target = tmp_path / "escaped.txt"
    outcome = run_job(hostile_jobs.write_outside, str(target))
    if outcome.status is JobStatus.OK:
        pytest.skip("this host allows neither mount namespaces nor dropping privileges")
    assert outcome.status is JobStatus.ERROR
    # refused, or out of sight (a job dropped to nobody sees nothing beneath a directory
    # closed to others, as pytest's temporary directories are)
    assert any(reason in outcome.detail for reason in (
        "Read-only file system", "Permission denied", "No such file or directory"))
    assert not target.exists()


def test_a_job_has_shared_memory_of_its_own(tmp_path: Path) -> None:
    """A confined job writes /dev/shm (a CUDA driver needs it), in a tmpfs of its own:
    it sees none of the host's shared memory and leaves nothing there."""
    if run_job(hostile_jobs.write_outside, str(tmp_path / "probe")).status is JobStatus.OK:
        pytest.skip("this host allows no mount namespace: /dev/shm is the host's")
    host = Path("/dev/shm") / f"swarmfab-test-host-{os.getpid()}"
    host.write_text("the host's")
    try:
        outcome = run_job(hostile_jobs.share_memory, f"swarmfab-test-job-{os.getpid()}")
        assert outcome.status is JobStatus.OK, outcome.detail
        assert outcome.value == [f"swarmfab-test-job-{os.getpid()}"]
        assert not (Path("/dev/shm") / f"swarmfab-test-job-{os.getpid()}").exists()
    finally:
        host.unlink()


def test_a_cuda_job_keeps_proc_writable_and_the_kernel_settings_read_only(
        tmp_path: Path) -> None:
    """A GPU driver writes /proc (on an H200 a read-only /proc alone stopped CUDA): a
    CUDA job's /proc is writable, the kernel's settings in it are not, and the rest of
    the file system stays read-only; a CPU job's /proc is read-only like the rest."""
    if run_job(hostile_jobs.write_outside, str(tmp_path / "probe")).status is JobStatus.OK:
        pytest.skip("this host allows no mount namespace")
    tunables = [path for path in PROC_TUNABLES if Path(path).exists()]
    elsewhere = tempfile.gettempdir()  # a directory a job dropped to nobody can reach
    paths = ("/proc", *tunables, elsewhere)
    cuda = run_job(hostile_jobs.read_only, *paths, limits=Limits(wall_s=30).for_device("cuda"))
    assert cuda.status is JobStatus.OK, cuda.detail
    assert cuda.value == {"/proc": False, **dict.fromkeys(tunables, True), elsewhere: True}
    cpu = run_job(hostile_jobs.read_only, *paths, limits=Limits(wall_s=30))
    assert cpu.value == dict.fromkeys(paths, True)
    escaped = run_job(hostile_jobs.write_outside, str(tmp_path / "escaped"),
                      limits=Limits(wall_s=30).for_device("cuda"))
    assert escaped.status is JobStatus.ERROR and not (tmp_path / "escaped").exists()


def test_a_trusted_job_may_write_a_shared_cache_and_nowhere_else(tmp_path: Path) -> None:
    """What a trusted baseline's job gets (a compiler cache shared across jobs): that
    directory writable and a variable set; everything else stays read-only."""
    if run_job(hostile_jobs.write_outside, str(tmp_path / "probe")).status is JobStatus.OK:
        pytest.skip("this host allows no mount namespace")
    shared, other = tmp_path / "shared", tmp_path / "other"
    shared.mkdir(mode=0o777)
    shared.chmod(0o777)
    other.mkdir()
    limits = Limits(wall_s=30, writable=(str(shared),),
                    environment=(("SWARMFAB_TEST_MARK", "trusted"),))
    outcome = run_job(hostile_jobs.write_where_told, str(shared / "kernel"),
                      str(other / "kernel"), limits=limits)
    assert outcome.status is JobStatus.OK, outcome.detail
    # refused, or out of sight (a job dropped to nobody sees only the directories it
    # may use beneath a directory closed to others)
    assert outcome.value[0] == "written"
    assert outcome.value[1] in ("OSError", "PermissionError", "FileNotFoundError")
    assert outcome.value[2] == "trusted"
    assert (shared / "kernel").read_text() == "written" and not (other / "kernel").exists()
    plain = run_job(hostile_jobs.write_where_told, str(shared / "again"), limits=Limits())
    # without it, the cache is read-only (or closed to a job dropped to nobody)
    assert plain.value[0] in ("OSError", "PermissionError", "FileNotFoundError")
    assert plain.value[1] == "unset"


def test_the_network_is_out_of_reach() -> None:
    server = socket.create_server(("127.0.0.1", 0))
    port = server.getsockname()[1]
    accepted: list[object] = []
    thread = threading.Thread(target=lambda: accepted.append(server.accept()), daemon=True)
    thread.start()
    try:
        outcome = run_job(hostile_jobs.connect_loopback, port, limits=Limits(wall_s=20))
    finally:
        server.close()
    assert outcome.status is JobStatus.ERROR
    assert not accepted


def test_a_segfault_ends_as_crashed_and_the_next_job_runs() -> None:
    crashed = run_job(hostile_jobs.segfault)
    assert crashed.status is JobStatus.CRASHED
    assert "SIGSEGV" in crashed.detail
    assert run_job(divmod, 7, 2).value == (3, 1)


def test_the_seccomp_filter_reports_when_it_cannot_load(monkeypatch: pytest.MonkeyPatch) -> None:
    import ctypes

    def missing(name: str, *args: object, **kwargs: object) -> ctypes.CDLL:
        raise OSError(f"{name}: not found")

    monkeypatch.setattr(ctypes, "CDLL", missing)
    assert forbid_processes_and_sockets() is False


def test_job_directories_of_dead_processes_are_swept(tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    import tempfile

    from swarmfab.sandbox import _process

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    dead = tmp_path / "swarmfab-job-999999999-abc"  # no such pid
    alive = tmp_path / f"swarmfab-job-{__import__('os').getpid()}-def"
    dead.mkdir()
    alive.mkdir()
    _process._sweep_abandoned_job_dirs.cache_clear()
    _process._sweep_abandoned_job_dirs()
    assert not dead.exists() and alive.exists()


def test_a_linked_file_is_read_in_place_and_never_changed(tmp_path: Path) -> None:
    """Large read-only inputs (Inductor's precompiled headers) reach a job as links: it
    reads them, and neither writing through the link nor taking over the working
    directory's files (dropping privileges) changes what they point to."""
    source = tmp_path / "header.h.gch"
    source.write_text("trusted")
    owner = source.stat().st_uid
    outcome = run_job(hostile_jobs.read_then_overwrite, "linked/header.h.gch",
                      links={"linked/header.h.gch": source})
    assert source.read_text() == "trusted"
    assert source.stat().st_uid == owner
    if outcome.status is JobStatus.OK:  # a copy it may change (see the next test), or
        assert outcome.value == "trusted"  # a host that confines nothing
        return
    assert outcome.status is JobStatus.ERROR
    assert "Read-only file system" in outcome.detail or "Permission denied" in outcome.detail


def test_a_linked_file_the_job_could_not_read_in_place_is_copied(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    source = tmp_path / "private.h.gch"
    source.write_text("trusted")
    monkeypatch.setattr(_process, "can_read", lambda path, isolate: False)
    outcome = run_job(os.path.islink, "linked/private.h.gch",
                      links={"linked/private.h.gch": source})
    assert outcome.status is JobStatus.OK, outcome.detail
    assert outcome.value is False
    monkeypatch.undo()
    outcome = run_job(os.path.islink, "linked/private.h.gch",
                      links={"linked/private.h.gch": source})
    assert outcome.value is can_read(source, isolate=True)
