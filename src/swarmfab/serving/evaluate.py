"""Evaluating an engine recipe: start it, verify its tokens, load it beside the incumbent.

A candidate engine is ``swarmfab serve MODEL --recipe FILE`` in a child process of its
own session on a loopback port: the engine's own code with settings and kernels that the
kernel factory verified, so it needs no syscall filter, but everything it does is
bounded: startup by ``startup_timeout``, every request by the load's timeout, and a
process that dies or hangs becomes a verdict (crashed, timed out), never a stuck run.

Verification first: greedy tokens of a fixed prompt set (sent together, so they batch)
must equal the reference engine's, the default recipe's. Then one unmeasured wave of the
traffic warms the newcomer up, and ``loadgen`` drives the
incumbent and the candidate alternately with the goal's traffic, one load run each per
round, until the 95% interval of the paired ratio of the goal's metric is narrow enough
(or the rounds run out). The verdict's timing is a time ratio, as for kernels: the
incumbent's metric over the candidate's (below 1: the candidate serves more), so the
kernel gate judges engines unchanged; it counts as faster only when the whole interval of
the gain lies above ``1 + min_gain`` (5% by default: serving figures on a shared host
drift more than kernel timings do). A candidate whose median p99 latency breaks the
objective is rejected, however fast.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import dataclasses
import itertools
import math
import os
import signal
import socket
import statistics
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from swarmfab.engine.loadgen import LoadSpec, random_prompts, run_load
from swarmfab.errors import import_extra
from swarmfab.measure.stats import median_ci, paired_ratio
from swarmfab.records import CheckResult, Estimate, ShapeTiming, Status, Verdict
from swarmfab.serving.engines import EngineAdapter, get_engine
from swarmfab.serving.goal import EngineGoal, Traffic
from swarmfab.serving.max_rate import sustained_rate

__all__ = ["EngineProcess", "EngineStartError", "LoadRound", "compare", "greedy_tokens",
           "load_once", "measured", "metric_of", "objective_check", "objective_gate",
           "verify_tokens",
           "warm_up"]


class EngineStartError(RuntimeError):
    """The engine process exited or did not answer /health in time (``log``: its tail)."""

    def __init__(self, message: str, log: str, timed_out: bool = False):
        super().__init__(message)
        self.log = log
        self.timed_out = timed_out


def _die_with_parent() -> None:
    """In the child: SIGTERM when the factory dies, even by SIGKILL (Linux), so a killed
    run leaves no engine serving on."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


_PR_SET_PDEATHSIG = 1


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class EngineProcess:
    """A server of one recipe (``engine``'s launch of it; swarmfab's own engine by
    default), in its own session on a free loopback port; a context manager."""

    def __init__(self, model_dir: Path, recipe_file: Path, log_file: Path, *,
                 engine: EngineAdapter | None = None, goal: EngineGoal | None = None):
        self.model_dir = model_dir
        self.recipe_file = recipe_file
        self.log_file = log_file
        self.engine = engine or get_engine("swarmfab")
        self.goal = goal
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self._process: subprocess.Popen[bytes] | None = None

    def start(self, timeout_s: float) -> EngineProcess:
        launch = self.engine.launch(self.model_dir, self.recipe_file, self.port, self.goal)
        env = {**os.environ, **launch.env}
        with self.log_file.open("wb") as log:
            log.write(f"$ {launch.shell()}\n".encode())  # the log says what ran
            log.flush()
            self._process = subprocess.Popen(launch.argv, stdout=log, stderr=subprocess.STDOUT,
                                             env=env, start_new_session=True,
                                             preexec_fn=_die_with_parent)
        httpx = import_extra("httpx", "engine", 'an engine goal (kind = "engine")')
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                raise EngineStartError(
                    f"the {self.engine.name} engine exited with status "
                    f"{self._process.returncode} before serving", self.log_tail())
            try:
                if httpx.get(f"{self.url}{launch.health}", timeout=2).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        self.stop()
        raise EngineStartError(f"the {self.engine.name} engine did not answer "
                               f"{launch.health} within {timeout_s:.0f} s",
                               self.log_tail(), timed_out=True)

    def alive(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def ended_within(self, seconds: float) -> bool:
        """Whether the engine has exited or does within ``seconds``. A killed engine's
        sockets close before its exit can be seen (a large address space takes a while
        to tear down), so a request that just failed may find it still "alive"."""
        if self._process is None:
            return True
        try:
            self._process.wait(timeout=seconds)
        except subprocess.TimeoutExpired:
            return False
        return True

    def log_tail(self, lines: int = 15) -> str:
        try:
            text = self.log_file.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def stop(self) -> None:
        """SIGTERM to the server's process group, SIGKILL to what is left after 15 s; it
        returns once every process of the group has exited (an engine's workers outlive
        its API server by a moment, holding their memory and cores)."""
        process, self._process = self._process, None
        if process is None:
            return
        for sent in (signal.SIGTERM, signal.SIGKILL):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, sent)
            if _ended(process, 15.0):
                return

    def __enter__(self) -> EngineProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _ended(process: subprocess.Popen[bytes], within_s: float) -> bool:
    """Whether ``process`` and every live member of its process group exit within
    ``within_s`` (zombies left to init count as ended)."""
    deadline = time.monotonic() + within_s
    with contextlib.suppress(subprocess.TimeoutExpired):
        process.wait(timeout=within_s)
    while _group_members(process.pid):
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.1)
    return process.poll() is not None


def _group_members(group: int) -> list[int]:
    """The live (not zombie) processes of process group ``group`` (Linux's /proc)."""
    members = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rpartition(")")[2].split()
        except OSError:  # it ended while we looked
            continue
        if len(fields) > 2 and fields[2] == str(group) and fields[0] != "Z":
            members.append(int(stat.parent.name))
    return members


# -- verification ------------------------------------------------------------------------
def verify_prompts(goal: EngineGoal, vocab: int) -> list[list[int]]:
    """The fixed verification prompts: lengths spread from 1 to twice the traffic's."""
    count = goal.verify_prompts
    longest = max(2, math.ceil(2 * goal.traffic.input_len * (1 + goal.traffic.range_ratio)))
    lengths = [1 + (longest - 1) * i // max(1, count - 1) for i in range(count)]
    prompts = random_prompts(count, max(lengths), vocab, goal.seed + 7919)
    return [prompt[:length] for prompt, length in zip(prompts, lengths, strict=True)]


async def _greedy(url: str, prompts: list[list[int]], max_tokens: int, timeout_s: float
                  ) -> list[list[int]]:
    httpx = import_extra("httpx", "engine", 'an engine goal (kind = "engine")')
    async with httpx.AsyncClient(base_url=url, timeout=timeout_s) as client:
        async def one(prompt: list[int]) -> list[int]:
            response = await client.post("/v1/completions", json={
                "prompt": prompt, "max_tokens": max_tokens, "temperature": 0.0,
                "ignore_eos": True, "return_token_ids": True})
            response.raise_for_status()
            return list(response.json()["choices"][0]["token_ids"])

        return list(await asyncio.gather(*(one(p) for p in prompts)))


def greedy_tokens(url: str, prompts: list[list[int]], max_tokens: int,
                  timeout_s: float = 120.0) -> list[list[int]]:
    """Greedy output ids of every prompt, all sent at once (so they share steps)."""
    return asyncio.run(_greedy(url, prompts, max_tokens, timeout_s))


def verify_tokens(reference: list[list[int]], got: list[list[int]]) -> list[CheckResult]:
    """One check per prompt: the same greedy tokens as the reference engine."""
    checks = []
    for index, (want, have) in enumerate(zip(reference, got, strict=True)):
        first = next((i for i, (a, b) in enumerate(zip(want, have, strict=False)) if a != b),
                     None if len(want) == len(have) else min(len(want), len(have)))
        detail = ("same greedy tokens" if first is None else
                  f"token {first} differs: reference {want[first:first + 3]}, "
                  f"candidate {have[first:first + 3]}")
        checks.append(CheckResult(f"prompt {index} ({len(want)} tokens)", "greedy-tokens",
                                  first is None, detail))
    return checks


# -- measurement -------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class LoadRound:
    """One load run's figures that the factory keeps."""

    metric: float
    p99_ttft_ms: float
    p99_tpot_ms: float
    output_throughput: float
    request_goodput: float
    failed: int


def metric_of(result: dict[str, Any], goal: EngineGoal) -> LoadRound:
    """Goodput (requests/s meeting the objective) or output tokens/s when the run's p99
    meets it (else 0: throughput out of objective is worth nothing); for ``max_rate``,
    :func:`load_once` puts the rate found in its place."""
    goodput = float(result["request_goodput"] or 0.0)
    ttft, tpot = float(result["p99_ttft_ms"]), float(result["p99_tpot_ms"])
    if goal.metric == "output_throughput":
        limits = goal.objective
        within = ((limits.p99_ttft_ms is None or ttft <= limits.p99_ttft_ms)
                  and (limits.p99_tpot_ms is None or tpot <= limits.p99_tpot_ms))
        metric = float(result["output_throughput"]) if within else 0.0
    else:
        metric = goodput
    return LoadRound(metric, ttft, tpot, float(result["output_throughput"]), goodput,
                     int(result["failed"]))


def warm_up(url: str, goal: EngineGoal) -> None:
    """One unmeasured wave of the goal's traffic: a freshly started engine meets its batch
    sizes for the first time (allocator, BLAS and kernel set-up), a serving incumbent
    has met them already, and the comparison should not charge that to the newcomer."""
    _load(url, goal.traffic, goal, goal.seed + 104_729,
          min(goal.traffic.num_prompts, goal.traffic.concurrency or 8))


def load_once(url: str, goal: EngineGoal, seed: int) -> LoadRound:
    """One measurement of the goal's metric: a load run of its traffic (with one warm-up
    request), or for ``max_rate`` a search of open-loop rates (:mod:`.max_rate`), the
    round's latencies being those at the rate found."""
    if goal.metric != "max_rate":
        return metric_of(_load(url, goal.traffic, goal, seed), goal)
    traffic = goal.traffic
    start = traffic.request_rate if math.isfinite(traffic.request_rate) else 1.0
    at_rate: dict[float, dict[str, Any]] = {}

    def attainment(rate: float) -> float:
        probe = traffic.model_copy(update={"request_rate": rate, "concurrency": None})
        # every probe's prompts new to the server (its prefix cache): a block per round
        at_rate[rate] = _load(url, probe, goal, seed * 64 + len(at_rate))
        return float(at_rate[rate]["attainment"])

    search = sustained_rate(attainment, start, goal.objective.attainment)
    found = at_rate.get(search.rate) or at_rate[search.probes[-1][0]]
    return dataclasses.replace(metric_of(found, goal), metric=search.rate)


def _load(url: str, traffic: Traffic, goal: EngineGoal, seed: int,
          num_prompts: int | None = None) -> dict[str, Any]:
    spec = LoadSpec(base_url=url, num_prompts=num_prompts or traffic.num_prompts,
                    input_len=traffic.input_len, output_len=traffic.output_len,
                    range_ratio=traffic.range_ratio, dataset=traffic.dataset(),
                    request_rate=traffic.request_rate, burstiness=traffic.burstiness,
                    max_concurrency=traffic.concurrency, num_warmups=1, seed=seed,
                    goodput=goal.objective.slos(), timeout_s=120.0)
    return asyncio.run(run_load(spec))


@dataclass(slots=True)
class Comparison:
    """Paired load rounds of an incumbent and a candidate."""

    incumbent: list[LoadRound] = field(default_factory=list)
    candidate: list[LoadRound] = field(default_factory=list)

    def ratio(self) -> Estimate:
        """Incumbent metric / candidate metric per round (a time ratio: < 1 is better)."""
        floor = 1e-9  # a round where nothing met the objective
        return paired_ratio([max(r.metric, floor) for r in self.incumbent],
                            [max(r.metric, floor) for r in self.candidate])


def compare(incumbent_url: str, candidate_url: str, goal: EngineGoal,
            deadline: float, seeds: Iterator[int] | None = None) -> Comparison:
    """Alternate load runs (candidate first on odd rounds) until the interval is narrow,
    or wholly on the slower side (more rounds could not crown the candidate, so stopping
    early cannot make a false champion), ``max_rounds`` are done, or the next round
    would pass ``deadline`` (monotonic).

    Each round's prompts come from the next of ``seeds``, the same for both sides and
    new to both: an engine with a prefix cache (vLLM's is on by default) serves prompts
    it has seen from the cache, so a server that met a round's prompts before (an
    incumbent measured earlier on them) would be timed on a lighter load. The factory
    passes one stream for its whole run."""
    seeds = seeds if seeds is not None else itertools.count(goal.seed)
    pair = Comparison()
    round_s = 0.0
    for index in range(goal.max_rounds):
        if index >= goal.min_rounds:
            ratio = pair.ratio()
            if ratio.low > 1 or (ratio.median > 0 and
                                 (ratio.high - ratio.low) / ratio.median < goal.ci_width):
                break
        if index >= 2 and time.monotonic() + round_s > deadline:
            break
        started = time.monotonic()
        seed = next(seeds)
        order = [(incumbent_url, pair.incumbent), (candidate_url, pair.candidate)]
        for url, rounds in order if index % 2 == 0 else reversed(order):
            rounds.append(load_once(url, goal, seed))
        round_s = time.monotonic() - started
    return pair


def measured(candidate_id: str, role: str, rounds: list[LoadRound]) -> dict[str, Any]:
    """What one engine served in its load runs, medians over rounds: the ``measured``
    event the report draws its settings table and Pareto front from."""
    def median(name: str) -> float:
        return statistics.median(getattr(r, name) for r in rounds)

    return {"candidate": candidate_id, "role": role, "rounds": len(rounds),
            "metric": median("metric"), "output_throughput": median("output_throughput"),
            "request_goodput": median("request_goodput"), "p99_ttft_ms": median("p99_ttft_ms"),
            "p99_tpot_ms": median("p99_tpot_ms"), "failed": sum(r.failed for r in rounds)}


def objective_check(rounds: list[LoadRound], goal: EngineGoal) -> CheckResult:
    """The median over rounds of each p99 against the objective."""
    broken = _broken(rounds, goal)
    ttft, tpot = _p99s(rounds)
    detail = "; ".join(broken.values()) or f"p99 TTFT {ttft:.1f} ms, p99 TPOT {tpot:.1f} ms"
    return CheckResult("traffic", "objective", not broken, detail)


def _p99s(rounds: list[LoadRound]) -> tuple[float, float]:
    """The medians over rounds of p99 TTFT and p99 TPOT."""
    return (statistics.median(r.p99_ttft_ms for r in rounds),
            statistics.median(r.p99_tpot_ms for r in rounds))


def _broken(rounds: list[LoadRound], goal: EngineGoal) -> dict[str, str]:
    """What of the objective ``rounds`` break: limit name -> how. For ``max_rate`` the
    objective is in the metric (requests dropped or late count against the attainment):
    only a round that sustained no rate at all breaks it."""
    if goal.metric == "max_rate":
        share = f"{goal.objective.attainment:.0%}"
        return {"rate": f"no rate tried kept {share} of requests within the objective"} \
            if statistics.median(r.metric for r in rounds) <= 0 else {}
    ttft, tpot = _p99s(rounds)
    limits = goal.objective
    broken = {name: f"p99 {name} {value:.1f} ms > {limit:g} ms"
              for name, value, limit in (("TTFT", ttft, limits.p99_ttft_ms),
                                         ("TPOT", tpot, limits.p99_tpot_ms))
              if limit is not None and value > limit}
    failed = sum(r.failed for r in rounds)
    if failed:
        broken["failed"] = f"{failed} request(s) failed"
    return broken


def objective_gate(pair: Comparison, goal: EngineGoal) -> CheckResult:
    """The candidate's rounds against the objective. Where the incumbent breaks it too
    (a host slower than the one the goal was written for), a candidate passes when it is
    no further from it: it breaks no limit the incumbent meets and none by more, and fails
    no more requests; its detail still says what is not met."""
    check = objective_check(pair.candidate, goal)
    theirs = _broken(pair.incumbent, goal)
    if check.passed or not theirs:
        return check
    mine, incumbent = _p99s(pair.candidate), _p99s(pair.incumbent)

    def further(name: str) -> bool:
        if name not in theirs:
            return True
        if name == "failed":
            return sum(r.failed for r in pair.candidate) > sum(r.failed for r in pair.incumbent)
        index = 0 if name == "TTFT" else 1
        return mine[index] > incumbent[index]

    if any(further(name) for name in _broken(pair.candidate, goal)):
        return check
    return CheckResult("traffic", "objective", True,
                       f"{check.detail}, as the incumbent's ({'; '.join(theirs.values())}); "
                       "no further from the objective")


def comparison_verdict(candidate_id: str, incumbent_id: str, pair: Comparison,
                       checks: list[CheckResult], goal: EngineGoal, elapsed_s: float,
                       label: str) -> Verdict:
    """The verdict of a verified candidate measured against the incumbent; its timing
    is labelled ``label`` (:meth:`EngineGoal.run_label`)."""
    objective = objective_gate(pair, goal)
    ratio = pair.ratio()
    per_unit = [1 / r.metric if r.metric > 0 else math.inf for r in pair.candidate]
    per_unit_incumbent = [1 / r.metric if r.metric > 0 else math.inf for r in pair.incumbent]
    timing = ShapeTiming(
        shape=label, incumbent=incumbent_id,
        candidate_s=_estimate(per_unit), incumbent_s=_estimate(per_unit_incumbent),
        ratio=ratio, comparison=_compared(ratio, goal.min_gain), samples=len(pair.candidate))
    status = Status.ACCEPTED if objective.passed else Status.REJECTED
    reason = (f"{goal.metric} x{1 / ratio.median:.2f} "
              f"[{1 / ratio.high:.2f}, {1 / ratio.low:.2f}] over {incumbent_id}"
              if objective.passed else f"objective not met: {objective.detail}")
    if objective.passed and not objective_check(pair.candidate, goal).passed:
        reason += "; neither meets the objective, the candidate no further from it"
    return Verdict(candidate_id, status, reason, tuple([*checks, objective]), (timing,),
                   elapsed_s)


def _compared(ratio: Estimate, min_gain: float) -> str:
    """"faster" only when the whole interval of the gain lies above 1 + ``min_gain``."""
    if ratio.high < 1 / (1 + min_gain):
        return "faster"
    return "slower" if ratio.low > 1 else "indistinguishable"


def _estimate(values: list[float]) -> Estimate:
    finite = [v for v in values if math.isfinite(v)]
    if len(finite) < len(values) or not finite:
        return Estimate(math.inf, math.inf, math.inf)
    return median_ci(finite)
