"""The sandbox: every way a job can end, resource limits and the scrubbed environment.

Jobs must be importable by the forkserver, so they are standard-library functions.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import hostile_jobs
import pytest

from swarmfab.sandbox import JobStatus, Limits, job_user, run_job, scrubbed_environment


def test_a_job_returns_its_value() -> None:
    outcome = run_job(divmod, 17, 5)
    assert outcome.status is JobStatus.OK
    assert outcome.value == (3, 2)


def test_a_hang_ends_as_timed_out_within_the_wall_limit() -> None:
    started = time.monotonic()
    run_job(divmod, 1, 1)  # what starting and collecting a job costs on this host, now
    overhead = time.monotonic() - started
    started = time.monotonic()
    outcome = run_job(time.sleep, 60, limits=Limits(wall_s=1.5))
    elapsed = time.monotonic() - started
    assert outcome.status is JobStatus.TIMED_OUT
    assert "no answer within" in outcome.detail
    assert elapsed < 1.5 + 5 + 2 * overhead, (elapsed, overhead)  # not the 60 s it asked for


def _processes_with(marker: str) -> list[int]:
    """Live (not zombie) processes whose command line contains ``marker``."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            state = (proc / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if marker in cmdline and state not in ("Z", "X"):
            found.append(int(proc.name))
    return found


def test_a_job_leaves_no_process_running() -> None:
    """Whether the sandbox forbids new processes or kills them afterwards, none survive."""
    marker = f"{100 + os.getpid() % 1000}.{time.time_ns() % 10**6:06d}"  # unique sleep time
    outcome = run_job(os.system, f"sleep {marker} & sleep {marker}; wait",
                      limits=Limits(wall_s=1.5))
    assert outcome.status in (JobStatus.TIMED_OUT, JobStatus.OK)
    deadline = time.monotonic() + 5
    while _processes_with(f"sleep {marker}") and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _processes_with(f"sleep {marker}") == [], "a process started by the job survived"


def test_abort_ends_as_crashed_naming_the_signal() -> None:
    outcome = run_job(os.abort)
    assert outcome.status is JobStatus.CRASHED
    assert "SIGABRT" in outcome.detail


def test_exit_without_answer_ends_as_crashed() -> None:
    outcome = run_job(os._exit, 3)
    assert outcome.status is JobStatus.CRASHED
    assert "status 3" in outcome.detail


def test_an_answer_is_read_without_running_what_it_names(tmp_path: Path) -> None:
    """A job that writes its own pickle as the answer gets it refused, unexecuted."""
    marker = tmp_path / "ran-in-parent.txt"
    outcome = run_job(hostile_jobs.answer_with_a_payload, str(marker))
    assert outcome.status is JobStatus.ERROR
    assert "its answer was refused" in outcome.detail and "builtins.exec" in outcome.detail
    assert not marker.exists()


def test_an_answer_of_the_wrong_kind_is_refused() -> None:
    assert run_job(hostile_jobs.Unsendable).status is JobStatus.ERROR
    outcome = run_job(divmod, 17, 5, expect=lambda value: isinstance(value, list))
    assert outcome.status is JobStatus.ERROR and "not what the job returns" in outcome.detail


def test_a_raised_exception_ends_as_error_with_its_message() -> None:
    outcome = run_job(int, "not a number")
    assert outcome.status is JobStatus.ERROR
    assert "ValueError" in outcome.detail
    assert "not a number" in outcome.detail


def test_cpu_limit_stops_a_busy_loop() -> None:
    outcome = run_job(sum, range(10**12), limits=Limits(wall_s=30, cpu_s=1))
    assert outcome.status is JobStatus.CRASHED
    assert "SIGXCPU" in outcome.detail or "SIGKILL" in outcome.detail


def test_memory_limit_turns_a_huge_allocation_into_an_error() -> None:
    outcome = run_job(bytearray, 8 * 2**30, limits=Limits(wall_s=30, memory_bytes=4 * 2**30))
    assert outcome.status is JobStatus.ERROR
    assert "MemoryError" in outcome.detail


def test_jobs_run_in_a_private_temporary_directory() -> None:
    outcome = run_job(os.getcwd)
    assert outcome.status is JobStatus.OK
    assert outcome.value != os.getcwd()
    assert "swarmfab-job-" in outcome.value
    assert not Path(outcome.value).exists()  # removed once the job is done


def test_credentials_are_scrubbed_but_harmless_variables_pass(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-should-not-leak")
    monkeypatch.setenv("HF_TOKEN", "hf-should-not-leak")
    monkeypatch.setenv("SWARMFAB_TEST_HARMLESS", "visible")
    assert run_job(os.getenv, "OPENAI_API_KEY").value is None
    assert run_job(os.getenv, "HF_TOKEN").value is None
    harmless = run_job(os.getenv, "SWARMFAB_TEST_HARMLESS")
    assert harmless.status is JobStatus.OK
    assert harmless.value == "visible"


def test_scrubbed_environment_drops_secret_looking_names() -> None:
    env = {"PATH": "/bin", "HOME": "/root", "AWS_SECRET_ACCESS_KEY": "x", "GITHUB_TOKEN": "x",
           "DB_PASSWORD": "x", "DATABASE_URL": "x", "LANG": "C"}
    assert scrubbed_environment(env) == {"PATH": "/bin", "HOME": "/root", "LANG": "C"}


def test_credentials_in_the_initial_environment_do_not_reach_jobs(tmp_path: Path) -> None:
    """A secret the user exported before starting swarmfab must not be readable by a job,
    not even through /proc/self/environ (the environment block the process started with)."""
    script = textwrap.dedent("""
        import os, pathlib, sys
        from swarmfab.sandbox import run_job
        if __name__ == "__main__":
            seen = run_job(os.getenv, "OPENAI_API_KEY").value
            # a job dropped to nobody may not read it at all (its process is not
            # dumpable): nothing to see either
            block = run_job(pathlib.Path.read_bytes,
                            pathlib.Path("/proc/self/environ")).value or b""
            print("getenv", seen)
            print("environ", b"sk-initial-secret" in block)
    """)
    path = tmp_path / "probe.py"
    path.write_text(script)
    env = {**os.environ, "OPENAI_API_KEY": "sk-initial-secret"}
    done = subprocess.run([sys.executable, str(path)], capture_output=True, text=True,
                          env=env, cwd=tmp_path, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    assert "getenv None" in done.stdout
    assert "environ False" in done.stdout, "the job read the secret from /proc/self/environ"


# what a job's compiler derived: compile workers, debug directory, precompiled headers
_COMPILER_PROBE = ("(__import__('torch._inductor.config', fromlist=['_']).compile_threads, "
                   "__import__('torch._dynamo.config', fromlist=['_']).debug_dir_root, "
                   "__import__('torch._inductor.codecache', fromlist=['_'])._HEADER_LOCK_DIR, "
                   "__import__('os').getcwd())")


def _assert_sized_for_the_job(threads: int, debug_dir: str, header_locks: str,
                              workdir: str) -> None:
    assert threads == 1
    assert Path(debug_dir).parent == Path(workdir)
    user = job_user(isolate=True)
    assert Path(header_locks) == (Path(workdir) / f"torchinductor_{user}" / "precompiled_headers"
                                  / "locks")


def test_the_preloaded_compiler_is_sized_for_the_job_not_the_forkserver() -> None:
    """torch's compiler is imported before the job is pinned; its pool of compile workers,
    its debug directory and Inductor's precompiled headers must still follow the job's
    cores, working directory and user (elsewhere the job may not write)."""
    core = min(os.sched_getaffinity(0))
    outcome = run_job(eval, _COMPILER_PROBE, limits=Limits(cores=(core,)))
    assert outcome.status is JobStatus.OK, outcome.detail
    _assert_sized_for_the_job(*outcome.value)


def test_jobs_of_c_kernels_start_without_the_compiler_and_one_that_needs_it_imports_it(
        tmp_path: Path) -> None:
    """An evaluator of a workload whose jobs run C kernels starts its process's forkserver
    without torch's compiler (seconds of imports at every command's start); a job that
    compiles all the same imports it, sized for the job as the preloaded one is."""
    script = textwrap.dedent("""
        import json, os, sys
        from pathlib import Path
        import torch
        from swarmfab.evaluation import Evaluator
        from swarmfab.sandbox import Limits, run_job
        from swarmfab.workloads import Shape, get_workload
        if __name__ == "__main__":
            kda = get_workload("kda")
            Evaluator(kda, [Shape(1, 16, 2, 2, 16, 16)], Path("cache"), threads=1,
                      tolerances=kda.tolerances(torch.float32), limits=Limits(wall_s=60))
            modules = "__import__('sys').modules"
            loaded = f"[m for m in ('torch._dynamo', 'torch._inductor') if m in {modules}]"
            core = min(os.sched_getaffinity(0))
            print(json.dumps([run_job(eval, loaded).value,
                              run_job(eval, sys.argv[1], limits=Limits(cores=(core,))).value]))
    """)
    path = tmp_path / "probe.py"
    path.write_text(script)
    done = subprocess.run([sys.executable, str(path), _COMPILER_PROBE], capture_output=True,
                          text=True, cwd=tmp_path, timeout=180, check=False)
    assert done.returncode == 0, done.stderr
    preloaded, sized = json.loads(done.stdout.splitlines()[-1])
    assert preloaded == []
    _assert_sized_for_the_job(*sized)


def test_a_job_is_told_the_user_it_runs_as() -> None:
    """Libraries name per-user directories after USER/LOGNAME (Inductor's precompiled
    headers among them): a job's must name the user it runs as, whatever the parent's."""
    probe = "(__import__('os').environ['USER'], __import__('getpass').getuser())"
    outcome = run_job(eval, probe)
    assert outcome.status is JobStatus.OK, outcome.detail
    assert outcome.value == (job_user(isolate=True), job_user(isolate=True))


def test_ctrl_c_while_a_job_is_handed_over_waits_for_it_then_kills_it(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """An interrupt between the fork request and the job's hand-over would leave a child
    reading an empty pipe (an EOFError traceback on the user's terminal)."""
    import multiprocessing.context
    import multiprocessing.forkserver
    import signal

    connect = multiprocessing.forkserver.connect_to_new_process
    started = multiprocessing.context.ForkServerProcess.start
    processes: list[multiprocessing.context.ForkServerProcess] = []

    def interrupted_connect(fds: list[int]) -> tuple[int, int]:
        ends = connect(fds)
        signal.raise_signal(signal.SIGINT)  # Ctrl-C: the child waits for its job now
        return ends

    def recorded_start(self: multiprocessing.context.ForkServerProcess) -> None:
        processes.append(self)
        started(self)

    run_job(divmod, 1, 1)  # the forkserver is up before the hand-over is interrupted
    monkeypatch.setattr(multiprocessing.forkserver, "connect_to_new_process",
                        interrupted_connect)
    monkeypatch.setattr(multiprocessing.context.ForkServerProcess, "start", recorded_start)
    with pytest.raises(KeyboardInterrupt):
        run_job(time.sleep, 60)
    [process] = processes
    assert process.pid is not None, "the job was never handed to its child"
    assert process.exitcode == -9  # killed at once, not left to sleep


def test_a_lock_a_job_makes_is_not_left_to_the_parents_tracker() -> None:
    outcome = run_job(hostile_jobs.makes_a_lock)
    assert outcome.status is JobStatus.OK, outcome
    assert outcome.value is True
