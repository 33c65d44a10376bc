"""The LLM agent and its context: what the model is shown, the repair loop, budgets.

The model is the scripted server on loopback; verdicts are written by hand, as the run
loop would put them in the context, so every turn of the loop is checked quickly.
"""

from __future__ import annotations

import json
import random

import pytest
from fake_llm import FakeLLM, Reply, Status

from swarmfab.agents.base import Context
from swarmfab.agents.llm import LLMAgent, OpenAIProvider, Pricing, Spend
from swarmfab.agents.llm.packer import Section, build_sections, pack
from swarmfab.goal import Goal, default_goal
from swarmfab.records import Candidate, CheckResult, Estimate, Lesson, ShapeTiming, Verdict
from swarmfab.records import Status as Verdicts
from swarmfab.workloads import design_space

MARK = "/* knobs chosen by swarmfab */\n"
# a correct edit of the design space's starting point (the chunked template)
GOOD_EDIT = ("RATIONALE: unroll the micro-kernel twice\n<<<<<<< SEARCH\n"
             "#define CH_RB 4\n#define CH_UNROLL 1\n=======\n"
             "#define CH_RB 4\n#define CH_UNROLL 2\n>>>>>>> REPLACE\n")


def edit(old: str, new: str, why: str = "an edit") -> str:
    return f"RATIONALE: {why}\n<<<<<<< SEARCH\n{old}=======\n{new}>>>>>>> REPLACE\n"


@pytest.fixture
def goal() -> Goal:
    return default_goal("kda").with_overrides(
        threads=1, shapes=[{"B": 1, "T": 64, "H": 2, "K": 16, "V": 16}], agents=["llm"],
        llm={"model": "fake-coder", "base_url": "http://127.0.0.1:9/v1", "repair_turns": 2})


def context(goal: Goal, recent: tuple[Verdict, ...] = (), champion: Candidate | None = None,
            evaluated: frozenset[str] = frozenset(), **extra: object) -> Context:
    return Context(goal, design_space("kda"), champion, evaluated, recent,
                   rng=random.Random(0), **extra)  # type: ignore[arg-type]


def agent_for(llm: FakeLLM, goal: Goal, spend: Spend | None = None) -> LLMAgent:
    provider = OpenAIProvider("fake-coder", "sk-x", llm.base_url, timeout_s=5, max_retries=0)
    spend = spend or Spend(Pricing(1.0, 2.0), budget_usd=10.0)
    return LLMAgent("llm-vectorisation", "vectorisation", provider, spend, goal.llm)


def kinds(agent: LLMAgent) -> list[str]:
    return [kind for kind, _ in agent.take_events()]


def failed(candidate: Candidate, status: Verdicts, reason: str, **fields: object) -> Verdict:
    return Verdict(candidate.id, status, reason, **fields)  # type: ignore[arg-type]


def test_a_fresh_proposal_shows_goal_role_source_and_format(goal: Goal) -> None:
    with FakeLLM([Reply(GOOD_EDIT)]) as llm:
        agent = agent_for(llm, goal)
        [candidate] = agent.propose(context(goal))
    prompt = llm.requests[0].prompt
    start = design_space("kda").instantiate(design_space("kda").default(), threads=1)
    assert start.sources[start.entry] in prompt  # the whole file being improved
    assert "B1 T64 H2 K16 V16" in prompt and "1 thread(s)" in prompt
    assert "vectorisation" in prompt and "SIMD" in prompt
    assert "_forward(const float *q" in prompt  # the ABI, from the workload's own documentation
    assert "<<<<<<< SEARCH" in prompt and "no champion yet" in prompt
    assert candidate.sources[candidate.entry] == start.sources[start.entry].replace(
        "#define CH_RB 4\n#define CH_UNROLL 1\n", "#define CH_RB 4\n#define CH_UNROLL 2\n")
    assert (candidate.agent, candidate.knobs, candidate.parents) == ("llm-vectorisation", {}, ())
    assert candidate.flags == start.flags and candidate.entry == start.entry
    assert candidate.rationale == "vectorisation: unroll the micro-kernel twice"
    call = json.loads(dict(agent.take_events())["llm-call"])
    assert (call["input_tokens"], call["output_tokens"]) == (1200, 300)
    assert call["cost_usd"] == pytest.approx((1200 * 1.0 + 300 * 2.0) / 1e6)


def test_failures_go_back_to_the_author_then_the_attempt_is_abandoned(goal: Goal) -> None:
    script = [Reply(edit(MARK, "/* edited */\nint oops = undeclared;\n")),
              Reply(edit("int oops = undeclared;\n", "float scale2 = 0;\n")),
              Reply(edit("float scale2 = 0;\n", "/* still wrong */\n")),
              Reply(GOOD_EDIT)]
    with FakeLLM(script) as llm:
        agent = agent_for(llm, goal)
        [first] = agent.propose(context(goal))
        broken = failed(first, Verdicts.BUILD_FAILED, "compilation failed: 'undeclared'",
                        diagnostics=("kda_recurrent.c:10: error: 'undeclared' undeclared",))
        [second] = agent.propose(context(goal, (broken,), evaluated=frozenset({first.id})))
        repair = llm.requests[1].prompt
        assert "Repair turn 1 of 2" in repair
        assert "kda_recurrent.c:10: error: 'undeclared' undeclared" in repair
        assert "int oops = undeclared;" in repair  # the file as the attempt left it
        assert second.parents == (first.id,)
        assert "(repair 1)" in second.rationale
        wrong = failed(second, Verdicts.REJECTED, "case 'tiny': o matches reference failed",
                       checks=(CheckResult("tiny", "o matches reference", False,
                                           "rms ratio too large", 0.5, 2.0),))
        [third] = agent.propose(context(goal, (broken, wrong)))
        repair = llm.requests[2].prompt
        assert "Repair turn 2 of 2" in repair
        assert "failing case: tiny; check: o matches reference" in repair
        assert "rms error ratio 0.5" in repair
        still = failed(third, Verdicts.REJECTED, "case 'tiny': o matches reference failed")
        [fresh] = agent.propose(context(goal, (broken, wrong, still)))
    assert "Repair turn" not in llm.requests[3].prompt  # abandoned: a fresh attempt
    assert "abandoned after 2 repair turn(s)" in llm.requests[3].prompt  # its own history
    assert fresh.parents == ()
    assert kinds(agent).count("llm-repair") == 2


def test_an_edit_that_does_not_apply_is_sent_back_at_once(goal: Goal) -> None:
    script = [Reply("I would vectorise it."),
              Reply(edit("this line is nowhere\n", "x\n")),
              Reply(GOOD_EDIT)]
    with FakeLLM(script) as llm:
        agent = agent_for(llm, goal)
        [candidate] = agent.propose(context(goal))
    assert "holds no edit" in llm.requests[1].prompt
    assert "does not match the file" in llm.requests[2].prompt
    assert "#define CH_UNROLL 2" in candidate.sources[candidate.entry]
    assert kinds(agent).count("llm-edit-failed") == 2


def test_empty_replies_end_in_abandonment_not_a_crash(goal: Goal) -> None:
    with FakeLLM(default=Reply("")) as llm:
        agent = agent_for(llm, goal)
        assert agent.propose(context(goal)) == []
    assert len(llm.requests) == 3  # the first turn and two repair turns
    assert "llm-abandoned" in kinds(agent)


def test_an_already_evaluated_file_is_refused_with_its_id(goal: Goal) -> None:
    with FakeLLM([Reply(GOOD_EDIT), Reply(GOOD_EDIT)]) as llm:
        agent = agent_for(llm, goal)
        [candidate] = agent.propose(context(goal))
        other = agent_for(llm, goal)
        assert other.propose(context(goal, evaluated=frozenset({candidate.id}))) == []
    assert f"already evaluated (candidate {candidate.id})" in llm.requests[2].prompt


def test_a_failing_provider_makes_the_agent_sit_out_longer_each_time(goal: Goal) -> None:
    with FakeLLM(default=Status(503)) as llm:
        agent = agent_for(llm, goal)
        outcomes = [agent.propose(context(goal)) for _ in range(6)]
    assert outcomes == [[]] * 6
    assert len(llm.requests) == 3  # calls at turns 1, 3 and 6: it sits out 1, then 2
    errors = [json.loads(d) for k, d in agent.take_events() if k == "llm-error"]
    assert [e["sits_out"] for e in errors] == [1, 2, 4]
    assert errors[0]["kind"] == "http-503"


def test_the_spend_budget_stops_the_agents_that_share_it(goal: Goal) -> None:
    spend = Spend(Pricing(1000.0, 1000.0), budget_usd=1.0)  # one call costs $1.50
    with FakeLLM(default=Reply(GOOD_EDIT)) as llm:
        first, second = agent_for(llm, goal, spend), agent_for(llm, goal, spend)
        assert len(first.propose(context(goal))) == 1
        assert second.propose(context(goal)) == []
        assert first.propose(context(goal)) == []
    assert len(llm.requests) == 1
    budget = json.loads(dict(second.take_events())["llm-budget"])
    assert budget["calls"] == 1 and "of the $1.00 budget" in budget["reason"]


def test_the_packer_keeps_required_sections_and_says_what_it_left_out() -> None:
    sections = [Section("Source", ("x" * 4000,), required=True),
                Section("Recent failures", tuple(f"- failure {i} " + "y" * 80 for i in range(50))),
                Section("Board", ("champion-changed: abc",))]
    packed = pack(sections, budget_tokens=1500)
    assert "x" * 4000 in packed.text
    assert "- failure 0 " in packed.text and "- failure 49 " not in packed.text
    assert packed.omitted["Recent failures"] > 0
    assert f"({packed.omitted['Recent failures']} more left out" in packed.text
    assert packed.tokens <= 1500 + 50


def test_the_context_shows_evidence_failures_lessons_and_board(goal: Goal) -> None:
    space = design_space("kda")
    champion = space.instantiate(space.default(), threads=1)
    timing = ShapeTiming("B1 T64 H2 K16 V16", "torch-recurrent", Estimate(1e-3, 0.9e-3, 1.1e-3),
                         Estimate(5e-3, 4.8e-3, 5.2e-3), Estimate(0.2, 0.18, 0.22), "faster", 30,
                         0.125)
    evidence = Verdict(champion.id, Verdicts.ACCEPTED, "verified", timings=(timing,))
    crash = Verdict("deadbeef", Verdicts.CRASHED, "run_cases: killed by SIGSEGV")
    sections = build_sections(
        context(goal, (crash,), champion=champion, champion_verdict=evidence,
                lessons=(Lesson("tile_v", 32, 64, Estimate(0.8, 0.75, 0.85), 3, 0, 1.0),),
                board=("champion-changed: abc by builtin-tiling",)),
        "tiling", champion)
    text = pack(sections, 16_000).text
    row = "| B1 T64 H2 K16 V16 | 1.000 [0.900, 1.100] | torch-recurrent | 5.000 | 5.00x | 12.5% |"
    assert row in text
    assert "deadbeef: status: crashed; reason: run_cases: killed by SIGSEGV" in text
    assert "tile_v: 32 -> 64: helps; time x0.80 (95% CI 0.75-0.85) over 3 pair(s)" in text
    assert "champion-changed: abc by builtin-tiling" in text
    assert f"the current champion {champion.id}" in text


def test_an_agent_waits_for_the_verdict_of_its_candidate_in_flight(goal: Goal) -> None:
    script = [Reply(edit(MARK, "/* edited */\nint oops = undeclared;\n")),
              Reply(edit("int oops = undeclared;\n", "float scale2 = 0;\n"))]
    with FakeLLM(script) as llm:
        agent = agent_for(llm, goal)
        [first] = agent.propose(context(goal))
        waiting = context(goal, evaluated=frozenset({first.id}), in_flight=frozenset({first.id}))
        assert agent.propose(waiting) == [] and agent.may_propose_later()
        assert len(llm.requests) == 1  # no call while the verdict is pending
        broken = failed(first, Verdicts.BUILD_FAILED, "compilation failed: 'undeclared'")
        [repair] = agent.propose(context(goal, (broken,), evaluated=frozenset({first.id})))
    assert repair.parents == (first.id,)


def test_no_model_call_starts_when_the_search_is_about_to_end(goal: Goal) -> None:
    import time

    with FakeLLM([Reply(GOOD_EDIT)]) as llm:
        agent = agent_for(llm, goal)
        assert agent.propose(context(goal, deadline=time.monotonic() + 1.0)) == []
        assert llm.requests == []
        assert agent.may_propose_later()  # a later run or resume may still ask it
        [candidate] = agent.propose(context(goal, deadline=time.monotonic() + 600.0))
    assert candidate.agent == "llm-vectorisation"
