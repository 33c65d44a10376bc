"""Shared fixtures: the KDA workload, its design space, the host's vector targets and small
file helpers.

Tests never touch the user's ``.swarmfab`` directory: every cache, store and champion goes
under pytest's ``tmp_path``. The host's peaks are measured once per session, by its first
run, into a file all of the session's workers share (``SWARMFAB_HOST_PEAKS``), not the
user's own: figures measured while the suite keeps the cores busy are low. Compiled
candidates are likewise shared through one build cache for the session
(``SWARMFAB_BUILD_CACHE``); tests of a first build ask for ``no_shared_builds``. Torch in the
test process runs on one thread: the tensors here are tiny, and on a busy machine OpenMP
threads spinning against other processes make them tens of times slower. (Sandboxed jobs
set their own thread count.)

Each test process's forkserver imports torch's compiler, whatever workload its first
evaluator is for: tests of several workloads share a process, and those whose jobs compile
are timed as a user's run of them is. (A command of a workload whose jobs do not compile,
run as a subprocess, starts without it.)

A suite started in the background by a non-interactive shell inherits SIGINT ignored, and
Python keeps an ignored SIGINT ignored, in the test process and in every process it starts:
the Ctrl-C tests would then see no Ctrl-C at all. Here it is restored to Python's default.

Tests time what they time at a test's size: ``SWARMFAB_TIMING_PROTOCOL=test`` (see
:func:`swarmfab.measure.timer.sized`: a minimum of 5 rounds at most and 1 s of rounds per
timing, the precision targets unchanged) is set here, at import, so the
forkserver and every run a test starts inherit it. The tests of the protocol itself are
marked ``full_timing_protocol`` and time as a user's run does;
``SWARMFAB_TIMING_PROTOCOL=full make test`` times every test so.

Under pytest-xdist the jobs of one worker share the cores with another's, and an OpenMP
thread that spins at a barrier while its sibling is descheduled burns the core the
sibling needs: the red-team module took three times the CPU so (398 CPU-seconds against
118 on 2 cores). ``OMP_WAIT_POLICY=PASSIVE`` is set here, in each worker, so its
forkserver, its jobs and every run it starts wait asleep; a run started without workers
keeps OpenMP's default (the exclusive tests, which time spinning kernels, among them).

Likewise ``SWARMFAB_BATTERY=test`` runs the delta rule's battery with its costly cases at
a test's size (its long sequences at 130 tokens, its decode batch at 96 pairs), every
property they test kept (see
:mod:`swarmfab.workloads.delta.battery`). The tests of the verifier itself (those under
``tests/redteam``, ``tests/verify`` and ``tests/evaluation``, and any marked
``full_battery``) meet the whole battery; ``SWARMFAB_BATTERY=full make test`` gives it to
every test.

The work starts in descending order of its time in the last recorded run
(``tests/durations.json``, each test's seconds; ``--store-durations`` records them again),
and ``make test`` hands each pytest-xdist worker one unit at a time: a module, or, for a
module longer than :data:`SPLIT_SHARE` of the whole, each of its tests alone (its
module-scoped fixtures are then made again where a worker takes up one of them).

Nothing here assumes the host's instruction set: the ``isa`` fixture offers every value
the design space's vector knob can take on some CPU, and skips, saying why, the ones this
CPU cannot run (an AVX2-only host skips ``avx512``; an AVX-512 host runs them all).
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import signal
import sqlite3
import statistics
import subprocess
import sys
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch

from swarmfab.backends._base import SHARED_BUILDS_ENV
from swarmfab.kernels import DesignSpace
from swarmfab.kernels._host import all_isa_names, isa_targets
from swarmfab.knowledge import Store
from swarmfab.measure.timer import PROTOCOL_ENV
from swarmfab.records import Candidate
from swarmfab.workloads import design_space
from swarmfab.workloads.delta.battery import BATTERY_ENV
from swarmfab.workloads.delta.kda import KDA

torch.set_num_threads(1)
os.environ.setdefault(PROTOCOL_ENV, "test")  # before any forkserver or run starts
os.environ.setdefault(BATTERY_ENV, "test")
if os.environ.get("PYTEST_XDIST_WORKER"):  # each worker's jobs share the cores with another's
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:  # started in the background
    signal.signal(signal.SIGINT, signal.default_int_handler)

@pytest.fixture(autouse=True, scope="session")
def _forkserver_with_the_compiler() -> None:
    """The forkserver of every process that runs tests imports torch's compiler (the
    module's doc)."""
    from swarmfab.sandbox import start_forkserver

    start_forkserver(compiler=True)


# -- the timing protocol ---------------------------------------------------------------
FULL_PROTOCOL = "full_timing_protocol"


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", f"{FULL_PROTOCOL}: tests the timing protocol itself: "
                            f"timed as a user's run is ({PROTOCOL_ENV} unset)")
    config.addinivalue_line("markers", f"{FULL_BATTERY}: tests the verifier: the whole "
                            f"battery, as a user's verification meets it ({BATTERY_ENV} unset)")


@pytest.fixture(autouse=True)
def _timing_protocol(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """The full protocol for a test marked ``full_timing_protocol`` (and whatever it
    starts); every other test keeps the session's (the module's doc)."""
    if request.node.get_closest_marker(FULL_PROTOCOL) is not None:
        monkeypatch.delenv(PROTOCOL_ENV, raising=False)


# -- the battery ---------------------------------------------------------------------
FULL_BATTERY = "full_battery"
VERIFIER_TESTS = ("redteam", "verify", "evaluation")  # directories under tests/


@pytest.fixture(autouse=True)
def _battery(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """The whole battery for the verifier's tests (and whatever they start); every other
    test keeps the session's (the module's doc)."""
    under = Path(str(request.node.path)).relative_to(Path(__file__).parent).parts[0]
    if under in VERIFIER_TESTS or request.node.get_closest_marker(FULL_BATTERY) is not None:
        monkeypatch.delenv(BATTERY_ENV, raising=False)  # unset: the whole battery


# -- the order work starts in --------------------------------------------------------
# `make test` hands each pytest-xdist worker one unit at a time (--dist loadscope, the
# scheduler below), in collection order: the longest units, by their time in the last
# full run recorded here, go first, so the last ones to start are short and no worker
# idles at the end while another finishes a long one. A unit is a module, or each test of
# a module that took more than SPLIT_SHARE of the whole suite's time: one long module
# would otherwise keep a worker busy while the other has finished everything else. A test
# not recorded counts as an average one.
DURATIONS = Path(__file__).with_name("durations.json")
SPLIT_SHARE = 0.03
_measured: Counter[str] = Counter()


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--store-durations", action="store_true",
                     help=f"record each test's time in this run in {DURATIONS.name} (the "
                          "order work starts in); run the whole suite with it")


class _Durations:
    """Each recorded test's seconds, and each module's (the sum of its tests')."""

    def __init__(self) -> None:
        self.tests: dict[str, float] = (json.loads(DURATIONS.read_text())
                                        if DURATIONS.exists() else {})
        self.modules: Counter[str] = Counter()
        for nodeid, seconds in self.tests.items():
            self.modules[_module(nodeid)] += seconds
        self.test_average = statistics.mean(self.tests.values()) if self.tests else 0.0
        self.split_s = SPLIT_SHARE * sum(self.tests.values())
        self.module_average = statistics.mean(self.modules.values()) if self.modules else 0.0

    def unit(self, nodeid: str) -> str:
        module = _module(nodeid)
        return nodeid if self.modules[module] > self.split_s else module

    def seconds(self, unit: str) -> float:
        if "::" in unit:
            return self.tests.get(unit, self.test_average)
        return self.modules.get(unit, self.module_average)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    recorded = _Durations()
    first: dict[str, int] = {}
    for index, item in enumerate(items):
        first.setdefault(recorded.unit(item.nodeid), index)
    items.sort(key=lambda item: (-recorded.seconds(recorded.unit(item.nodeid)),
                                 first[recorded.unit(item.nodeid)]))


@pytest.hookimpl(optionalhook=True)  # pytest-xdist's hook
def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object:
    """--dist loadscope with the units above (a module, or a long module's tests)."""
    if config.getoption("dist", None) != "loadscope":
        return None
    from xdist.scheduler import LoadScopeScheduling

    recorded = _Durations()

    class Units(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return recorded.unit(nodeid)

    return Units(config, log)


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    _measured[report.nodeid] += report.duration


def pytest_sessionfinish(session: pytest.Session) -> None:
    if not session.config.getoption("store_durations") or hasattr(session.config,
                                                                  "workerinput"):
        return  # only the controller of an xdist run, which hears every worker's reports
    recorded = _Durations().tests
    measured = {_module(nodeid) for nodeid in _measured}
    kept = {nodeid: s for nodeid, s in recorded.items() if _module(nodeid) not in measured}
    kept.update({nodeid: round(seconds, 1) for nodeid, seconds in _measured.items()})
    DURATIONS.write_text(json.dumps(dict(sorted(kept.items())), indent=1) + "\n")


def _module(nodeid: str) -> str:
    return nodeid.split("::")[0]


@pytest.fixture(scope="session")
def session_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A directory all of the session's pytest-xdist workers share (the parent of their
    base directories), or the base directory without workers."""
    root = tmp_path_factory.getbasetemp()
    return root.parent if os.environ.get("PYTEST_XDIST_WORKER") else root


# -- one short, real KDA run for the session ---------------------------------------------
RECORDED_GOAL = """
workload = "kda"
budget = "300s"  # not what ends the run: --max-evaluations 10 does
threads = 1
shapes = [{B = 1, T = 128, H = 2, K = 32, V = 32}, {B = 2, T = 32, H = 2, K = 16, V = 16}]
"""


@dataclass(frozen=True)
class RecordedRun:
    """A run of ``python -m swarmfab run`` as a user starts it, in a directory of its own
    (``home``: the goal, the store, the work directory and what the command printed on
    each stream)."""

    home: Path
    run_id: str
    champion_id: str

    @property
    def db(self) -> Path:
        return self.home / "store.db"

    @property
    def workdir(self) -> Path:
        return self.home / "work"

    @property
    def stdout(self) -> str:
        return (self.home / "stdout.log").read_text()

    @property
    def stderr(self) -> str:
        return (self.home / "stderr.log").read_text()

    def copy_store(self, directory: Path) -> Path:
        """A private copy of the store, for tests that write to it."""
        directory.mkdir(parents=True, exist_ok=True)
        target = directory / "copy.db"
        with sqlite3.connect(self.db) as source, sqlite3.connect(target) as copy:
            source.backup(copy)  # consistent with the WAL, unlike a file copy
        return target


@pytest.fixture(scope="session")
def recorded_run(session_root: Path) -> RecordedRun:
    """One short KDA run, made once for the session and read by the end-to-end, report,
    dashboard and export tests: two small shapes, one thread, ten evaluations
    (``--max-evaluations`` ends it; the budget is generous, so a busy host still records
    them all). The first worker to need it runs it, holding a lock the others wait on,
    and leaves what it recorded for them."""
    if shutil.which("gcc") is None:
        pytest.skip("needs gcc to build the run's candidates")
    home = session_root / "recorded-run"
    with open(session_root / "recorded-run.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (home / "recorded.json").exists():
            _record_run(home)
    recorded = json.loads((home / "recorded.json").read_text())
    return RecordedRun(home, recorded["run"], recorded["champion"])


def _record_run(home: Path) -> None:
    shutil.rmtree(home, ignore_errors=True)  # another worker's attempt that failed
    home.mkdir()
    (home / "goal.toml").write_text(RECORDED_GOAL)
    done = subprocess.run(
        [sys.executable, "-m", "swarmfab", "run", "goal.toml", "--db", "store.db",
         "--workdir", "work", "--max-evaluations", "10"],
        # past the budget (and the setup and closing table beside it): on a busy host the
        # budget ends the run, never this timeout
        cwd=home, capture_output=True, text=True, timeout=480, check=False,
        env={**os.environ, "COLUMNS": "160"},
    )
    # kept: the end-to-end test reads them, and the run's own timeline says where a slow
    # session's minutes went
    (home / "stdout.log").write_text(done.stdout)
    (home / "stderr.log").write_text(done.stderr)
    assert done.returncode == 0, done.stdout + done.stderr
    run = Store(home / "store.db").run("latest")
    assert run.champion_id is not None, done.stdout
    (home / "recorded.json").write_text(json.dumps({"run": run.id,
                                                    "champion": run.champion_id}))


@pytest.fixture(scope="session", autouse=True)
def host_peaks_file(session_root: Path) -> Path:
    """The session's host-peaks file, one for all of its workers; runs started as
    subprocesses inherit it."""
    path = session_root / "host-peaks.json"
    os.environ["SWARMFAB_HOST_PEAKS"] = str(path)
    return path


@pytest.fixture(scope="session", autouse=True)
def shared_build_cache(session_root: Path) -> Path:
    """One build cache for the session's compiled candidates (``SWARMFAB_BUILD_CACHE``),
    shared by its workers and the runs they start: the same starting points are built
    by many tests, each in a work directory of its own."""
    path = session_root / "builds"
    os.environ[SHARED_BUILDS_ENV] = str(path)
    return path


@pytest.fixture
def no_shared_builds(monkeypatch: pytest.MonkeyPatch) -> None:
    """For tests of a first build: no build of another test is reused."""
    monkeypatch.delenv(SHARED_BUILDS_ENV, raising=False)


@pytest.fixture(params=all_isa_names())
def isa(request: pytest.FixtureRequest) -> str:
    """A value of the ``isa`` knob this host can run; one it cannot is skipped with the
    reason. Narrow it with ``@pytest.mark.parametrize("isa", [...], indirect=True)``."""
    value = str(request.param)
    here = [name for name, _ in isa_targets()]
    if value not in here:
        pytest.skip(f"this CPU cannot run {value} code (its targets: {', '.join(here)})")
    return value


@pytest.fixture
def kda() -> KDA:
    return KDA()


@pytest.fixture
def space() -> DesignSpace:
    return design_space("kda")


@pytest.fixture
def template(space: DesignSpace) -> Candidate:
    """The C template at its default knobs, rendered for one thread."""
    return space.instantiate(space.default(), threads=1)


@pytest.fixture
def template_source(template: Candidate) -> str:
    return template.sources[template.entry]


@pytest.fixture
def write_file(tmp_path: Path) -> Callable[[str, str], Path]:
    """Write ``text`` to ``tmp_path / name`` and return the path."""

    def write(name: str, text: str) -> Path:
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        return path

    return write


def _small_mounts_possible() -> bool:
    probe = ["unshare", "--mount", "--map-root-user", "sh", "-c",
             "mount -t tmpfs -o size=16k tmpfs /mnt && umount /mnt"]
    try:
        return subprocess.run(probe, capture_output=True, timeout=30).returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False


SmallDisk = Callable[[list[str], str], subprocess.CompletedProcess[str]]


@pytest.fixture
def small_disk(tmp_path: Path) -> tuple[Path, SmallDisk]:
    """A directory and a way to run a command that sees a tmpfs of a given size there (a
    real full disk: the command runs in a mount namespace of its own, as a user
    namespace's root, so nothing outside it is touched). Skips where the host refuses."""
    if not _small_mounts_possible():
        pytest.skip("needs unshare and a tmpfs mount in a user namespace")
    mount = tmp_path / "small"
    mount.mkdir()

    def run(command: list[str], size: str) -> subprocess.CompletedProcess[str]:
        script = f'mount -t tmpfs -o size={size} tmpfs "{mount}" && exec "$@"'
        return subprocess.run(["unshare", "--mount", "--map-root-user", "sh", "-c", script,
                               "sh", *command], capture_output=True, text=True, timeout=120)

    return mount, run
