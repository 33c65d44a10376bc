"""The command line, driven in-process through typer's CliRunner.

Every command gets ``--workdir``/``--db`` under ``tmp_path`` so nothing is written to the
user's ``.swarmfab``.
"""

from __future__ import annotations

import json
import mmap
import shutil
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner, Result

from swarmfab.backends import cuda_device_available
from swarmfab.cli import app
from swarmfab.kernels import DesignSpace
from swarmfab.kernels.allocator import glibc_malloc
from swarmfab.workloads.delta.kda import KDA

needs_cc = pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc")
CASE_NAMES = {case.name for case in KDA().validation_cases()}

ZERO_KERNEL = """
#include <stdint.h>
int kda_forward(const float *q, const float *k, const float *v, const float *g,
                const float *beta, const float *h0, float *o, float *ht, float scale,
                int64_t B, int64_t T, int64_t H, int64_t HV, int64_t K, int64_t V)
{
    for (int64_t i = 0; i < B * T * HV * V; i++) o[i] = 0.0f;
    if (ht) for (int64_t i = 0; i < B * HV * K * V; i++) ht[i] = 0.0f;
    return 0;
}
"""

SEGFAULT_KERNEL = """
#include <stdint.h>
int kda_forward(const float *q, const float *k, const float *v, const float *g,
                const float *beta, const float *h0, float *o, float *ht, float scale,
                int64_t B, int64_t T, int64_t H, int64_t HV, int64_t K, int64_t V)
{
    *(volatile float *)0 = 1.0f;
    return 0;
}
"""

PYTHON_CANDIDATE = """
from swarmfab.workloads.delta import math as delta_math


def forward(q, k, v, g, beta, scale=None, initial_state=None, output_final_state=False):
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    o, state = delta_math.recurrent(q, k, v, g, beta, scale, initial_state)
    return o, state if output_final_state else None
"""

READOUT = "for (int j = 0; j < bv; j++) ot[j] = out[j];"


@pytest.fixture
def template_source(space: DesignSpace) -> str:
    """The recurrent template (whose readout line the corruptions below edit), one thread,
    token by token, outputs stored through the cache (so every output passes that line):
    its groups of tokens take several times longer to compile, and these tests are about
    verify's verdicts, not the template's."""
    rendered = space.instantiate({**space.default(), "algorithm": "recurrent",
                                  "token_group": 1, "output_stores": "cached"}, threads=1)
    return rendered.sources[rendered.entry]


def invoke(*args: str | Path) -> Result:
    return CliRunner().invoke(app, [str(a) for a in args])


def verify_json(file: Path, workdir: Path, *extra: str) -> tuple[Result, dict]:
    result = invoke("verify", "kda", file, "--json", "--workdir", workdir, *extra)
    assert "Traceback" not in result.output
    return result, json.loads(result.stdout)


def _corrupt(source: str, replacement: str) -> str:
    assert source.count(READOUT) == 1, "the template's readout line changed; update the test"
    return source.replace(READOUT, replacement)


@pytest.mark.parametrize("command", [None, "run", "verify", "bench", "export", "report", "runs",
                                     "dashboard"])
def test_help_of_every_command(command: str | None) -> None:
    result = invoke(*([command] if command else []), "--help")
    assert result.exit_code == 0, result.output
    assert "Usage" in result.output
    if command is None:
        for name in ("run", "verify", "bench", "export", "report", "runs", "dashboard"):
            assert name in result.output


@pytest.mark.parametrize(
    ("goal_text", "fragments"),
    [
        ('workload = "kda"\ndevice = "gpu"\nshapes = [{B=1, T=8, H=1, K=8, V=8}]\n',
         ["device", "'cpu'"]),
        ('workload = "kda"\nshapes = [{B=1, T=8, H=4, HV=6, K=8, V=8}]\n', ["multiple of H"]),
        ('workload = "kda"\nshapes = [{B=1,\n', ["not valid TOML"]),
    ],
    ids=["device-gpu", "hv-not-multiple", "malformed"],
)
def test_run_with_a_bad_goal_exits_2_with_one_clear_error(
    tmp_path: Path, goal_text: str, fragments: list[str]
) -> None:
    goal = tmp_path / "goal.toml"
    goal.write_text(goal_text)
    result = invoke("run", goal, "--db", tmp_path / "x.db", "--workdir", tmp_path / "wd")
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    assert "error:" in result.stderr
    for fragment in fragments:
        assert fragment in result.output
    assert not (tmp_path / "wd").exists()  # nothing ran


@pytest.mark.skipif(cuda_device_available(), reason="a CUDA device is present")
@pytest.mark.parametrize("command", ["run", "bench"])
def test_a_cuda_goal_on_a_host_without_a_device_exits_2_saying_why(
    tmp_path: Path, command: str
) -> None:
    if command == "run":
        goal = tmp_path / "goal.toml"
        goal.write_text('workload = "kda"\ndevice = "cuda"\nshapes = [{B=1, T=8, H=1, K=8, V=8}]\n')
        result = invoke("run", goal, "--db", tmp_path / "x.db", "--workdir", tmp_path / "wd")
    else:
        result = invoke("bench", "kda", "--device", "cuda", "--db", tmp_path / "x.db",
                        "--workdir", tmp_path / "wd")
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    assert "no CUDA device" in result.output and 'device = "cpu"' in result.output
    assert not (tmp_path / "wd").exists()  # nothing ran


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed")
def test_verify_a_cuda_file_that_does_not_compile_names_the_line(tmp_path: Path) -> None:
    kernel = tmp_path / "broken.cu"
    kernel.write_text('extern "C" int kda_forward() {\n    return y;\n}\n')
    result, verdict = verify_json(kernel, tmp_path / "wd")
    assert result.exit_code != 0 and verdict["status"] == "build_failed"
    assert 'broken.cu:2: error: identifier "y" is undefined' in verdict["reason"]


def test_run_with_a_missing_goal_file_exits_2(tmp_path: Path) -> None:
    result = invoke("run", tmp_path / "absent.toml", "--db", tmp_path / "x.db")
    assert result.exit_code == 2
    assert "does not exist" in result.output
    assert "Traceback" not in result.output


def test_run_with_a_bad_budget_option_exits_2(tmp_path: Path) -> None:
    result = invoke("run", "kda", "--budget", "forever", "--db", tmp_path / "x.db")
    assert result.exit_code == 2
    assert "budget" in result.output
    assert "Traceback" not in result.output


# the full verification battery: tens of seconds (make test-fast leaves it out)
@pytest.mark.slow
@needs_cc
def test_verify_accepts_the_rendered_template(
    tmp_path: Path, write_file: Callable[[str, str], Path], template_source: str
) -> None:
    good = write_file("good.c", template_source)
    result, verdict = verify_json(good, tmp_path / "wd")
    assert result.exit_code == 0, result.output
    assert verdict["status"] == "accepted"
    assert {check["case"] for check in verdict["checks"]} >= CASE_NAMES  # every case checked
    assert all(check["passed"] for check in verdict["checks"])

    # the build is cached, and the battery's verdict kept: the same code, setting, host
    # and toolchain are not put through the battery again
    text = invoke("verify", "kda", good, "--workdir", tmp_path / "wd")
    assert text.exit_code == 0
    assert "accepted" in text.output and "kept: this code passed" in text.output


@needs_cc
@pytest.mark.parametrize(
    ("name", "make_source", "detail"),
    [
        ("zeros.c", lambda template: ZERO_KERNEL, "rms ratio"),
        ("scaled.c", lambda template: _corrupt(template, READOUT.replace(
            "out[j];", "out[j] * 1.001f;")), "rms ratio"),
        ("unwritten.c", lambda template: _corrupt(template, READOUT.replace(
            "int j = 0", "int j = 1")), "non-finite"),
    ],
    ids=["zeros", "off-by-0.1-percent", "one-column-unwritten"],
)
def test_verify_rejects_wrong_output_and_names_the_failing_case(
    tmp_path: Path, write_file: Callable[[str, str], Path], template_source: str,
    name: str, make_source: Callable[[str], str], detail: str,
) -> None:
    bad = write_file(name, make_source(template_source))
    result, verdict = verify_json(bad, tmp_path / "wd")
    assert result.exit_code == 1, result.output
    assert verdict["status"] == "rejected"
    failed = [check for check in verdict["checks"] if not check["passed"]]
    assert failed
    assert any(failed[0]["case"].startswith(name) for name in CASE_NAMES)
    assert repr(failed[0]["case"]) in verdict["reason"]
    assert detail in verdict["reason"]

    text = invoke("verify", "kda", bad, "--workdir", tmp_path / "wd")
    assert text.exit_code == 1
    assert "FAIL" in text.output
    assert failed[0]["case"] in text.output


@needs_cc
def test_verify_reports_a_crashing_kernel(
    tmp_path: Path, write_file: Callable[[str, str], Path]
) -> None:
    result, verdict = verify_json(write_file("crash.c", SEGFAULT_KERNEL), tmp_path / "wd")
    assert result.exit_code == 1
    assert verdict["status"] == "crashed"
    assert "SIGSEGV" in verdict["reason"]


@needs_cc
def test_verify_reports_build_failures_with_diagnostics(
    tmp_path: Path, write_file: Callable[[str, str], Path]
) -> None:
    broken = write_file("broken.c", "#include <stdint.h>\nint kda_forward(void) {\n  return 0\n}\n")
    result, verdict = verify_json(broken, tmp_path / "wd")
    assert result.exit_code == 1
    assert verdict["status"] == "build_failed"
    assert verdict["diagnostics"]
    assert verdict["diagnostics"][0].startswith("broken.c:")

    text = invoke("verify", "kda", broken, "--workdir", tmp_path / "wd")
    assert text.exit_code == 1
    assert "verdict: build_failed — compilation failed:" in text.output
    assert text.output.count("broken.c:3:") == 1, text.output  # the diagnostic, once
    assert "┃ case" not in text.output  # no empty table of checks that never ran


# the fast tier: a token-by-token Python loop through the battery's real sizes takes
# minutes on a busy host (the battery of a Python candidate: tests/redteam, honest_chunked)
@pytest.mark.slow
def test_verify_accepts_a_python_candidate(
    tmp_path: Path, write_file: Callable[[str, str], Path]
) -> None:
    result, verdict = verify_json(write_file("cand.py", PYTHON_CANDIDATE), tmp_path / "wd",
                                  "--fast")
    assert result.exit_code == 0, result.output
    assert verdict["status"] == "accepted"


def test_verify_rejects_a_python_candidate_that_raises(
    tmp_path: Path, write_file: Callable[[str, str], Path]
) -> None:
    source = "def forward(*args, **kwargs):\n    raise RuntimeError('not implemented yet')\n"
    result, verdict = verify_json(write_file("todo.py", source), tmp_path / "wd")
    assert result.exit_code == 1
    assert verdict["status"] == "rejected"
    assert "not implemented yet" in verdict["reason"]


def test_verify_unknown_file_kind_and_missing_file_are_usage_errors(tmp_path: Path) -> None:
    fortran = tmp_path / "kernel.f90"
    fortran.write_text("end\n")
    for path, message in ((fortran, "unknown candidate format"),
                          (tmp_path / "gone.c", "does not exist")):
        result = invoke("verify", "kda", path, "--workdir", tmp_path / "wd")
        assert result.exit_code == 2
        assert message in result.output
        assert "Traceback" not in result.output


@pytest.mark.parametrize("command", [["report"], ["report", "--json"], ["export"],
                                     ["report", "latest", "--out", "never.html"]])
def test_report_and_export_on_an_empty_store_exit_1_with_a_clear_message(
    tmp_path: Path, command: list[str]
) -> None:
    args = [*command, "--db", str(tmp_path / "empty.db")]
    if command == ["export"]:
        args += ["--out", str(tmp_path / "out")]
    result = invoke(*args)
    assert result.exit_code == 1
    assert "no runs" in result.output
    assert "Traceback" not in result.output
    assert not (tmp_path / "out").exists()


def test_report_of_an_unknown_run_exits_1(tmp_path: Path) -> None:
    result = invoke("report", "20990101-000000-abcdef", "--db", tmp_path / "x.db")
    assert result.exit_code == 1
    assert "20990101-000000-abcdef" in result.output


def test_runs_on_an_empty_store_lists_nothing(tmp_path: Path) -> None:
    result = invoke("runs", "--db", tmp_path / "x.db")
    assert result.exit_code == 0
    assert result.output.strip() == ""


def test_bench_rejects_a_malformed_shape(tmp_path: Path) -> None:
    result = invoke("bench", "kda", "--shape", "1,2,three", "--db", tmp_path / "x.db",
                    "--workdir", tmp_path / "wd")
    assert result.exit_code == 2
    assert "B,T,H,K,V" in result.output
    assert "Traceback" not in result.output


@pytest.mark.skipif(cuda_device_available(), reason="a CUDA device would run it")
def test_bench_builds_a_candidate_file_with_the_backend_given(tmp_path: Path) -> None:
    """A Triton kernel is a .py file: --backend triton says so (else it is plain Python).
    Without a CUDA device it cannot be timed: bench says so before it builds anything."""
    from swarmfab.kernels.delta_gpu import gpu_space, render_triton

    kernel = tmp_path / "kda_triton.py"
    kernel.write_text(render_triton(gpu_space().default()))
    result = invoke("bench", "kda", "--candidate", kernel, "--backend", "triton", "--shape",
                    "1,16,2,16,16", "--db", tmp_path / "x.db", "--workdir", tmp_path / "wd")
    assert result.exit_code == 1
    assert "the triton backend is unavailable on this host" in result.output
    assert not (tmp_path / "wd").exists()


def test_an_unwritable_build_cache_is_a_clear_error_not_a_verdict(
    tmp_path: Path, write_file: Callable[[str, str], Path]
) -> None:
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("a file where the work directory should be")
    source = "def forward(*args, **kwargs):\n    return None, None\n"
    result = invoke("verify", "kda", write_file("c.py", source), "--workdir", blocker / "wd",
                    "--db", tmp_path / "x.db")
    assert result.exit_code == 1
    assert "cannot write the build cache" in result.output
    assert "Traceback" not in result.output


@pytest.mark.parametrize("extra", [[], ["--candidate", "default", "--cold"],
                                   ["--candidate", "default", "--baseline", "torch-chunked"]],
                         ids=["no-candidate", "cold", "baseline"])
def test_bench_against_itself_is_a_candidate_timed_as_a_run_would(
        tmp_path: Path, extra: list[str]) -> None:
    result = invoke("bench", "kda", "--against-itself", *extra, "--db", tmp_path / "x.db",
                    "--workdir", tmp_path / "wd")
    assert result.exit_code == 2, result.output
    assert "--candidate" in result.output and "Traceback" not in result.output
    assert not (tmp_path / "wd").exists()  # nothing ran


@pytest.mark.slow
def test_bench_against_itself_times_a_candidate_against_its_copy_as_a_run_would(
    tmp_path: Path, write_file: Callable[[str, str], Path]
) -> None:
    """An A/A check: the gate's reading of a candidate against a copy of itself, with the
    exit code saying whether any shape read a difference (what it reads is the host's)."""
    candidate = write_file("mine.py", PYTHON_CANDIDATE)
    result = invoke("bench", "kda", "--candidate", candidate, "--against-itself",
                    "--shape", "1,32,2,16,16", "--shape", "2,1,2,16,16+h0", "--threads", "1",
                    "--json", "--db", tmp_path / "x.db", "--workdir", tmp_path / "wd")
    assert "Traceback" not in result.output
    assert result.stdout.strip(), result.output  # no answer: the error says why
    answer = json.loads(result.stdout)
    assert result.exit_code == (1 if answer["misread"] else 0), result.output
    misread = {t["shape"] for t in answer["timings"] if t["comparison"] != "indistinguishable"}
    assert {entry.split(" (")[0] for entry in answer["misread"]} == misread
    assert not answer["crowned"] or answer["misread"]  # a crown needs a "faster" shape
    assert [t["shape"] for t in answer["timings"]] == ["B1 T32 H2 K16 V16",
                                                        "B2 T1 H2 K16 V16 +h0"]
    for timing in answer["timings"]:
        assert timing["incumbent"] == "copy" and timing["samples"] >= 3
        ratio = timing["ratio"]
        assert 0 < ratio["low"] <= ratio["median"] <= ratio["high"]
        assert timing["comparison"] in ("faster", "slower", "indistinguishable")
    assert answer["gate"]


FAULT_EVERY_CALL = """
    region = mmap.mmap(-1, FRESH)  # fresh pages touched one by one
    if hasattr(mmap, "MADV_NOHUGEPAGE"):
        region.madvise(mmap.MADV_NOHUGEPAGE)
    for offset in range(0, FRESH, mmap.PAGESIZE):
        region[offset] = 1
    region.close()
"""
FAULTING_CANDIDATE = PYTHON_CANDIDATE.replace(
    "def forward(", "import mmap\n\nFRESH = 16 << 20\n\n\ndef forward(", 1).replace(
    "    scale = q.shape", FAULT_EVERY_CALL.lstrip("\n") + "    scale = q.shape", 1)


def _faults_a_call(candidate: Path, tmp_path: Path) -> dict[str, float]:
    """``swarmfab bench --json``'s page faults a call: the candidate beside
    torch-recurrent on one small shape, one thread."""
    result = invoke("bench", "kda", "--candidate", candidate, "--shape", "1,16,2,16,16",
                    "--baseline", "torch-recurrent", "--threads", "1", "--json",
                    "--db", tmp_path / "x.db", "--workdir", tmp_path / "wd")
    assert result.exit_code == 0, result.output
    (table,) = json.loads(result.stdout)
    faults: dict[str, float] = table["minor_faults_per_call"]
    return faults


@pytest.mark.slow
def test_bench_reports_the_page_faults_each_implementation_takes_a_call(
    tmp_path: Path, write_file: Callable[[str, str], Path]
) -> None:
    """Read from outside the sessions' processes: a candidate that touches 16 MiB of
    fresh pages every call shows at least 4,096 faults a call at 4 KiB pages."""
    assert "region.madvise" in FAULTING_CANDIDATE
    faults = _faults_a_call(write_file("faulting.py", FAULTING_CANDIDATE), tmp_path)
    assert set(faults) == {"candidate", "torch-recurrent"}, faults
    assert faults["candidate"] >= (16 << 20) // mmap.PAGESIZE, faults
    assert faults["torch-recurrent"] < faults["candidate"] / 4, faults


# three blocks of 8 MiB from malloc each call, touched and freed: as glibc sets itself,
# the first free raises the mmap threshold to 8 MiB and the trim threshold to 16, so the
# 24 MiB the later calls take from the heap's top are given back (and faulted in again)
# on every call
MALLOC_EVERY_CALL = """
    blocks = [LIBC.malloc(FRESH) for _ in range(3)]
    for block in blocks:
        LIBC.madvise((block + 4095) & ~4095, FRESH - 8192, 14)  # MADV_NOHUGEPAGE
        ctypes.memset(block, 1, FRESH)
    for block in blocks:
        LIBC.free(block)
"""
MALLOCING_CANDIDATE = PYTHON_CANDIDATE.replace("def forward(", """import ctypes

FRESH = 8 << 20
LIBC = ctypes.CDLL(None)
LIBC.malloc.restype, LIBC.malloc.argtypes = ctypes.c_void_p, [ctypes.c_size_t]
LIBC.free.argtypes = [ctypes.c_void_p]
LIBC.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]


def forward(""", 1).replace(
    "    scale = q.shape", MALLOC_EVERY_CALL.lstrip("\n") + "    scale = q.shape", 1)


@pytest.mark.slow
@pytest.mark.skipif(not glibc_malloc(), reason="the C library is not glibc")
def test_a_session_keeps_the_heap_a_long_running_process_would(
    tmp_path: Path, write_file: Callable[[str, str], Path]
) -> None:
    """glibc's thresholds are fixed in the sessions where a long-running process's end
    up: what its calls pay in page faults must not follow what it freed before."""
    faults = _faults_a_call(write_file("mallocing.py", MALLOCING_CANDIDATE), tmp_path)
    # under one fault per 64 pages; without fixed thresholds, the 6,144 pages of the
    # three blocks faulted in again every call (at least a quarter of them: a kernel may
    # map several pages a fault)
    assert faults["candidate"] < 3 * (8 << 20) // mmap.PAGESIZE // 64, faults


def test_a_full_disk_during_a_build_is_a_clear_error_not_a_build_failure(
    tmp_path: Path, write_file: Callable[[str, str], Path], small_disk: tuple[Path, Any],
    no_shared_builds: None,
) -> None:
    """The work directory on a 16 KiB file system: the compiler's link fails for want of
    space, which is the platform's problem, so the command stops with an error that says
    so instead of failing the candidate."""
    source = write_file("kernel.c", "#include <stdint.h>\n"
                        "int kda_forward(void) { return 0; }\n")
    mount, run = small_disk
    done = run([sys.executable, "-m", "swarmfab", "verify", "kda", str(source), "--workdir",
                str(mount / "wd"), "--db", str(tmp_path / "x.db")], "16k")
    output = done.stdout + done.stderr
    assert done.returncode == 1, output
    assert "cannot write the build cache" in output and "ran out of disk space" in output
    assert "build_failed" not in output and "Traceback" not in output
