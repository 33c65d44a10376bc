"""Red-team suite: dishonest and subtly wrong candidates against the verifier.

Every file in ``candidates/`` is one exploit or one classic bug, written as a real
candidate a reader can open; its docstring or header comment says what it does and what
should catch it. Each is run through the public command line exactly as a user would::

    swarmfab verify kda FILE --json --db <tmp>/x.db --workdir <tmp>

and the verdict must be a rejection (exit 1) that names the check which caught it. The
tables below are the catalogue (tests/redteam/README.md renders it). Rows marked as holes
are exploits the current verifier does *not* catch: they are strict xfails, so the day a
fix lands they turn into failures and the row moves to the caught side.

Timing exploits cannot be seen by ``verify`` (it does not time); they are run through
``swarmfab bench`` and through :meth:`Evaluator.evaluate`, which decides champions.

All verifications share one module-scoped store and build cache. Python candidates do
their math in torch inside the sandbox, seconds to tens of seconds each, and the timing
checks time real kernels: those are marked slow (``make test-fast`` leaves them out), as
is every verification that meets the whole battery (an accepted candidate, a row only
the battery rejects: tens of seconds); the other C rows run there too.
"""

from __future__ import annotations

import ctypes
import json
import shutil
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner, Result

from swarmfab.backends import backend_for_file
from swarmfab.cli import app
from swarmfab.evaluation import Evaluator, Implementation
from swarmfab.knowledge import Store
from swarmfab.measure import TimingPolicy
from swarmfab.records import Candidate, Status
from swarmfab.sandbox import Limits
from swarmfab.swarm.hosts import host_peaks
from swarmfab.workloads import Shape, design_space, get_workload

CANDIDATES = Path(__file__).parent / "candidates"
needs_cc = pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc")


def _seccomp_available() -> bool:
    try:
        ctypes.CDLL("libseccomp.so.2")
    except OSError:
        return False
    return True


SECCOMP = _seccomp_available()


@dataclass(frozen=True)
class Row:
    """One catalogue entry: a candidate and how the verifier must judge it."""

    file: str
    expect: tuple[str, ...]  # every fragment must appear in the verdict's reason
    why: str  # the exploit or bug, in a few words
    status: str = "rejected"
    also: tuple[str, ...] = ()  # checks that must be among the failed ones too
    # fragments the reason may name in place of ``expect``'s: two checks catch the exploit,
    # and the host's scheduling decides which fails first
    instead: tuple[str, ...] = ()
    hole: str = ""  # non-empty: the current verifier accepts it (strict xfail), and why


CATALOGUE: list[Row] = [
    # -- exploits ------------------------------------------------------------------
    Row("c_output_unwritten.c", ("o matches reference", "non-finite"),
        "o never written: returns whatever the buffer held (NaN pre-fill)"),
    Row("c_half_columns.c", ("o matches reference", "non-finite"),
        "partial output: only the first half of the value columns written"),
    Row("py_half_tokens.py", ("'tail-not-chunk-multiple'", "o matches reference"),
        "partial output: only the first half of the tokens computed"),
    Row("py_memo_by_shape.py", ("(fresh inputs, same buffers)", "o matches reference"),
        "caching by shape: the first result for a shape is replayed"),
    Row("c_memo_by_pointer.c", ("deterministic",),
        "caching by pointer: same q pointer and shape -> memcpy of the last outputs"),
    Row("c_exp_gate_in_place.c", ("inputs unchanged", "g modified"),
        "modifies an input: exp(g) written into g"),
    Row("py_fold_beta_into_v.py", ("inputs unchanged", "v modified"),
        "modifies an input: beta folded into v in place"),
    # a verifying process preempted for 8 ms after a call returns copies the outputs after
    # the thread filled them: the settled check passes there, and the next call's
    # outputs, read at return, are zeros
    Row("py_lazy_thread.py", ("outputs settled at return",),
        "asynchronous output: zeros returned, filled by a thread 8 ms later",
        instead=("(fresh inputs, same buffers)': o matches reference",)),
    Row("py_lazy_first_call.py", ("outputs settled at return",),
        "asynchronous output on the first call of each shape only"),
    Row("py_state_in_place.py", ("inputs unchanged", "initial_state modified"),
        "output aliases an input: final_state is the caller's initial_state, updated",
        also=("outputs do not alias inputs",)),
    Row("py_noise.py", ("deterministic",),
        "non-deterministic: 1e-6 relative noise, inside the tolerance"),
    Row("py_bfloat16.py", ("o matches reference", "rms ratio"),
        "precision silently lowered to bfloat16, cast back to float32"),
    Row("c_fork_child.c",
        ("runs without error", "returned 3") if SECCOMP else ("no processes left running",),
        "forks a helper process that outlives the call"),
    Row("c_assumes_initial_state.c", ("killed by SIGSEGV",),
        "segfault: reads h0 when it is NULL", status="crashed"),
    Row("c_assert_no_gva.c", ("killed by SIGABRT",),
        "abort: assert(HV == H) on a grouped-heads case", status="crashed"),
    # -- classic bugs ---------------------------------------------------------------
    Row("py_dropped_tail.py", ("'tail-not-chunk-multiple'", "o matches reference"),
        "dropped chunk tail: the last T % 16 tokens ignored"),
    Row("c_ignores_initial_state.c", ("'decode-with-state'", "o matches reference"),
        "initial state ignored"),
    Row("py_scalar_decay.py", ("o matches reference",),
        "scalar decay (mean of g over K) instead of per-channel"),
    Row("py_chunked_overflow.py", ("'strong-decay'", "non-finite"),
        "chunked float32 with exp(G_i) * exp(-G_j): overflows under strong decay"),
    Row("c_stale_final_state.c", ("final_state matches reference",),
        "final state taken before the last token's update"),
    Row("py_transposed_state.py", ("final_state matches reference",),
        "final state returned transposed ([V, K])"),
    Row("c_gva_modulo.c", ("'gva-2x-k-ne-v'", "o matches reference"),
        "GVA head mapping hv % H instead of hv // (HV // H)"),
    Row("c_readout_before_update.c", ("o matches reference",),
        "readout before the update: o_t = S_{t-1}^T q_t"),
    # -- once holes, closed since ----------------------------------------------------
    Row("c_ignores_scale.c", ("'gva-4x-scale-1'", "o matches reference"),
        "ignores `scale`, hard-codes K**-0.5 (cases now draw scale 1 and 0.1 too)"),
    Row("c_null_ht_crash.c", ("killed by SIGSEGV",),
        "writes ht even when it is NULL (every case is also called without a final state)",
        status="crashed"),
    Row("c_lingering_thread.c", ("no work after return",),
        "starts a CPU-burning thread that outlives the call (CPU use in an idle pause)"),
    # caught only because they do not also tamper with the no-final-state call: the class
    # of hole (code in the worker's process rewriting the harness) stays open
    Row("c_disarms_probes.c", ("(optional outputs not requested)", "o matches reference"),
        "C kernel runs Python in the worker: torch.equal -> True, then zeroes v"),
    Row("py_swaps_verified_function.py", ("(optional outputs not requested)",),
        "forward returns zeros; the worker's _call is patched to run honest math instead"),
    Row("c_sampled_memo.c", ("(one element of each input nudged)", "o matches reference"),
        "cache keyed by pointers + a dozen sampled input values (one element of every "
        "input is now nudged in the same buffers)"),
    Row("py_varlen_carries_state.py", ("'varlen-", "matches reference"),
        "packed sequences run as one: each sequence's state carried into the next"),
    Row("py_lazy_output.py", ("outputs are plain tensors", "Deferred"),
        "lazy output: a tensor subclass that computes when read (every check reads it)"),
    # -- what only the battery reaches (the fast corpus accepts each: see below) -----
    Row("c_tile_edge_64.c", ("'battery: ", "o matches reference"),
        "key channels in tiles of 64, the tail tile never visited (K = 128)"),
    # a wrong answer or two answers to the same inputs: whichever the race shows first
    Row("c_race_past_16_pairs.c", ("'battery: ",),
        "pairs share one scratch state, on several threads only past 16 pairs"),
    Row("py_segments_forget_state.py", ("1024 tokens", "o matches reference"),
        "segments of 512 tokens, each from the initial state (T = 1024)"),
    Row("py_gate_floor_too_low.py", ("'battery: a tenth of the gates -inf'",
                                     "matches reference"),
        "gates clamped at -1e30: cumulative sums after an -inf gate lose every digit"),
    Row("py_assumes_contiguous.py", ("'gva-2x-k-ne-v", "o matches reference"),
        "reads each input's storage as contiguous (views of a fused projection)"),
    Row("py_beta_below_one.py", ("'battery: beta exactly", "matches reference"),
        "a beta of exactly 0 or 1 replaced by 0.001 or 0.999 \"for stability\""),
]

# the rows above that the fast corpus alone accepts: the battery is what rejects them
BATTERY_ONLY = ("c_tile_edge_64.c", "c_race_past_16_pairs.c", "py_segments_forget_state.py",
                "py_gate_floor_too_low.py", "py_beta_below_one.py")


def _param(row: Row) -> object:
    c_row = row.file.endswith(".c")
    marks = [needs_cc] if c_row else []
    if not c_row or row.file in BATTERY_ONLY:  # Python math, or the whole battery
        marks.append(pytest.mark.slow)
    if row.hole:
        marks.append(pytest.mark.xfail(strict=True, reason=f"hole: {row.hole}"))
    return pytest.param(row, id=Path(row.file).stem, marks=marks)


# -- helpers -----------------------------------------------------------------------


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One store and build cache for the whole module (builds are cached by content)."""
    return tmp_path_factory.mktemp("redteam")


def invoke(*args: str | Path, env: dict[str, str] | None = None) -> Result:
    result = CliRunner().invoke(app, [str(a) for a in args], env=env)
    assert "Traceback" not in result.output, result.output
    return result


def verify(file: Path, workdir: Path, *extra: str, workload: str = "kda",
           db: Path | None = None, env: dict[str, str] | None = None) -> tuple[int, dict]:
    result = invoke("verify", workload, file, "--json", "--db", db or workdir / "x.db",
                    "--workdir", workdir, *extra, env=env)
    return result.exit_code, json.loads(result.stdout)


def failed_checks(verdict: dict) -> list[str]:
    return [f"{c['case']}: {c['check']}: {c['detail']}" for c in verdict["checks"]
            if not c["passed"]]


def assert_rejected(code: int, verdict: dict, expect: Sequence[str], status: str = "rejected",
                    also: Sequence[str] = (), instead: Sequence[str] = ()) -> None:
    summary = f"{verdict['status']}: {verdict['reason']}"
    assert verdict["status"] != "accepted", f"accepted: {summary}"
    assert code == 1, summary
    assert verdict["status"] == status, summary
    if instead and all(fragment in verdict["reason"] for fragment in instead):
        expect = instead
    for fragment in expect:
        assert fragment in verdict["reason"], f"{fragment!r} not in {summary}"
    failed = failed_checks(verdict)
    for check in also:
        assert any(f": {check}: " in line for line in failed), f"{check!r} did not fail: {failed}"


def candidate(path: Path) -> Candidate:
    """What ``swarmfab verify`` builds from a file, for the Evaluator API."""
    flags = ("-O3", "-march=native") if path.suffix == ".c" else ()
    return Candidate("kda", backend_for_file(path), {path.name: path.read_text()}, path.name,
                     flags=flags)


# -- the catalogue -----------------------------------------------------------------


@pytest.mark.parametrize("row", [_param(row) for row in CATALOGUE])
def test_verify_rejects_and_names_the_check(row: Row, workdir: Path) -> None:
    code, verdict = verify(CANDIDATES / row.file, workdir)
    assert_rejected(code, verdict, row.expect, row.status, row.also, row.instead)


@pytest.mark.parametrize("row", [_param(row) for row in CATALOGUE if row.file in BATTERY_ONLY])
def test_the_fast_corpus_alone_accepts_what_only_the_battery_rejects(
    row: Row, tmp_path: Path
) -> None:
    """Each battery row is a real gap of the fast tier (a fresh store: no battery case
    has joined its corpus yet); the full verdict above rejects it."""
    code, verdict = verify(CANDIDATES / row.file, tmp_path, "--fast")
    assert (code, verdict["status"]) == (0, "accepted"), verdict["reason"]


@needs_cc
@pytest.mark.slow  # the whole battery
def test_a_battery_case_that_breaks_a_candidate_joins_the_corpus(tmp_path: Path) -> None:
    """After the battery rejects a candidate, the fast tier of the same store rejects it
    too, with the case the battery found."""
    file = CANDIDATES / "c_tile_edge_64.c"
    code, verdict = verify(file, tmp_path)
    assert_rejected(code, verdict, ("'battery: ",))
    code, verdict = verify(file, tmp_path, "--fast")
    assert_rejected(code, verdict, ("'battery: ",))
    origins = [origin for _, origin, _, _ in Store(tmp_path / "x.db").case_history("kda")]
    assert origins == ["battery: broke c_tile_edge_64.c"], origins


@pytest.fixture(scope="module")
def templates(workdir: Path) -> dict[str, Path]:
    """The built-in C template of each workload at its default knobs, one thread."""
    written = {}
    for workload in ("kda", "gdn"):
        space = design_space(workload)
        rendered = space.instantiate(space.default(), threads=1)
        path = workdir / "templates" / rendered.entry
        path.parent.mkdir(exist_ok=True)
        path.write_text(rendered.sources[rendered.entry])
        written[workload] = path
    return written


@needs_cc
@pytest.mark.slow  # the whole battery
@pytest.mark.parametrize("workload", ["kda", "gdn"])
def test_the_rendered_template_is_accepted(
    workload: str, templates: dict[str, Path], workdir: Path
) -> None:
    code, verdict = verify(templates[workload], workdir, workload=workload)
    assert (code, verdict["status"]) == (0, "accepted"), verdict["reason"]
    assert all(check["passed"] for check in verdict["checks"])


@pytest.mark.parametrize("file", [
    pytest.param("honest_plain.c", marks=[needs_cc, pytest.mark.slow], id="honest_plain"),
    pytest.param("honest_chunked.py", marks=pytest.mark.slow, id="honest_chunked"),
])
def test_honest_controls_are_accepted(file: str, workdir: Path) -> None:
    code, verdict = verify(CANDIDATES / file, workdir)
    assert (code, verdict["status"]) == (0, "accepted"), verdict["reason"]


# -- holes that need more than one verification ------------------------------------


@pytest.mark.slow
def test_a_candidate_that_recognises_the_verification_inputs(workdir: Path) -> None:
    """Every seed is salted with a secret per verification: nothing is recognisable."""
    code, verdict = verify(CANDIDATES / "py_recognises_inputs.py", workdir,
                           db=workdir / "recognise-default.db")
    assert_rejected(code, verdict, ())


@pytest.mark.slow
def test_the_input_recogniser_is_wrong_on_inputs_it_has_not_seen(workdir: Path) -> None:
    """With another fuzzing seed too, the shortcut fails."""
    code, verdict = verify(CANDIDATES / "py_recognises_inputs.py", workdir, "--seed", "1",
                           db=workdir / "recognise-seed1.db")
    assert_rejected(code, verdict, ("o matches reference",))


@pytest.mark.slow
def test_a_candidate_cannot_write_outside_its_job_directory(workdir: Path) -> None:
    """Even as root, seccomp refuses mount_setattr and friends, so the read-only view of
    the file systems cannot be undone. (The fast tier: every job it runs tries; the
    battery's jobs are the same sandbox.)"""
    marker = workdir / "escaped.txt"
    code, verdict = verify(CANDIDATES / "py_escapes_sandbox.py", workdir, "--fast",
                           env={"SWARMFAB_REDTEAM_MARKER": str(marker)})
    assert (code, verdict["status"]) == (0, "accepted"), verdict["reason"]  # honest math
    assert not marker.exists(), f"the candidate wrote outside its job: {marker.read_text()}"


def test_a_candidate_cannot_run_code_in_the_parent_through_its_answer(workdir: Path) -> None:
    """The job's answer is read with a closed vocabulary: a pickle of its own, written to
    the job's pipe, is refused unexecuted."""
    marker = workdir / "answered.txt"
    code, verdict = verify(CANDIDATES / "py_answers_for_the_worker.py", workdir,
                           env={"SWARMFAB_REDTEAM_MARKER": str(marker)})
    assert not marker.exists(), f"the parent ran the candidate's code: {marker.read_text()}"
    assert_rejected(code, verdict, ("its answer was refused", "builtins.exec"))


# -- timing: `swarmfab bench` --------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("file", [
    pytest.param("py_patched_perf_counter.py", id="patched_perf_counter"),
    pytest.param("py_fake_clock.py", id="fake_clock"),
    pytest.param("py_fake_clock_blatant.py", id="fake_clock_blatant"),
    pytest.param("py_slows_the_baseline.py", id="slows_the_baseline"),
])
def test_bench_times_a_clock_patching_candidate_for_real(file: str, workdir: Path) -> None:
    """Every candidate runs the torch-chunked baseline's own math; each patches a clock,
    or the baseline's math, at import. Timed from outside its process, the bench must
    still report about the baseline's time for them. (The bench verifies a candidate
    before it times it, and exits 1 if it is not accepted.)"""
    path = CANDIDATES / file
    result = invoke("bench", "kda", "--candidate", path, "--shape", "1,64,2,32,32", "--json",
                    "--threads", "1", "--baseline", "torch-chunked", "--db", workdir / "x.db",
                    "--workdir", workdir)
    assert result.exit_code == 0, result.output
    (table,) = json.loads(result.stdout)
    seconds = {name: estimate["median"] for name, estimate in table["seconds"].items()}
    assert seconds["candidate"] > 0
    ratio = seconds["candidate"] / seconds["torch-chunked"]
    # each exploit, had it worked, would read 0.1x or less; honest noise on a loaded
    # 2-core host with the test-sized protocol has read as low as 0.49x
    assert 0.3 < ratio < 4, f"candidate timed at {ratio:.2f}x torch-chunked: {seconds}"


def test_bench_reports_a_lazy_output_as_rejected_not_as_fast(workdir: Path) -> None:
    """A tensor subclass that computes when read would time as an almost empty call:
    the bench verifies first and names why it will not time it."""
    result = invoke("bench", "kda", "--candidate", CANDIDATES / "py_lazy_output.py",
                    "--shape", "1,64,2,32,32", "--threads", "1", "--baseline",
                    "torch-chunked", "--db", workdir / "x.db", "--workdir", workdir)
    assert result.exit_code == 1, result.output
    assert "not verified" in result.output and "outputs are plain tensors" in result.output


# -- timing: Evaluator.evaluate (what decides champions) -------------------------------

QUICK = TimingPolicy(min_rounds=3, max_rounds=8, max_seconds=1.0, min_sample_s=0.0)


@pytest.fixture(scope="module")
def evaluator(workdir: Path) -> Evaluator:
    """An evaluator like the CLI's, on one mid-sized target shape, with the host's peaks
    (so the roofline's impossible-speed check is on) and a quick timing policy. One thread:
    a single core's multiply-add peak is at most ~0.3 TFLOP/s (AVX-512 on two full-width
    pipes), so this shape's compute bound (~800 MFLOP: ~3 ms) stays far above the
    harness's own work per call, which is all a fake clock reports (it grows with the
    inputs' bytes, so wide heads: many FLOPs per byte)."""
    workload = get_workload("kda")
    return Evaluator(
        workload, [Shape(B=1, T=512, H=4, HV=4, K=256, V=256)], workdir / "cache",
        threads=1, tolerances=workload.tolerances(torch.float32), limits=Limits(),
        policy=QUICK, peaks=host_peaks(Store(str(workdir / "x.db")), 1),
    )


def evaluate(evaluator: Evaluator, file: str) -> tuple[Status, str]:
    incumbent = Implementation("torch-chunked", baseline="torch-chunked")
    incumbents = {case.shape.label: incumbent for case in evaluator.targets}
    verdict = evaluator.evaluate(candidate(CANDIDATES / file), incumbents)
    return verdict.status, verdict.reason


@pytest.mark.slow
@pytest.mark.parametrize(("file", "expect", "why"), [
    pytest.param("py_busy_while_others_run.py", "kept running",
                 "a thread that spins while the incumbent is timed", id="busy_while_others_run"),
    pytest.param("c_sentinel_sniffer.c", "(a timed call, fresh inputs)",
                 "computes only when o arrives NaN-filled", id="sentinel_sniffer",
                 marks=needs_cc),
    pytest.param("py_timed_call_sniffer.py", "(optional outputs not requested)",
                 "cheap whenever a call repeats the previous call's inputs: verification "
                 "repeats inputs too now", id="timed_call_sniffer"),
])
def test_evaluate_rejects_a_timing_exploit(
    evaluator: Evaluator, file: str, expect: str, why: str
) -> None:
    status, reason = evaluate(evaluator, file)
    assert status is Status.REJECTED, f"{status}: {reason}"
    assert expect in reason, reason
