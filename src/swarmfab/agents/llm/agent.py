"""An LLM agent: a coding model as a variation operator, with a bounded repair loop.

Each ``propose`` either starts a fresh attempt (the champion's source, or the design
space's starting point, edited in the agent's domain) or continues one: an attempt whose
candidate failed to build or verify goes back to the model with the compiler errors or
the failing case, for at most ``repair_turns`` turns, and is then abandoned. A reply
that cannot be applied as an edit is sent back at once, within the same turn budget.

The agent learns outcomes only from its context (``recent`` verdicts), never from the
loop. Whatever the provider does (errors, hangs, garbage) the agent returns [] and
records why; after a provider failure it sits out a few turns, twice as many each
time it fails again. When the shared spend budget is gone it stops for good; the
built-in agents carry on.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass

from swarmfab.agents.base import Agent, Context
from swarmfab.agents.llm.edits import EditError, parse_reply
from swarmfab.agents.llm.edits import apply_blocks as apply_search_replace
from swarmfab.agents.llm.packer import build_sections, pack
from swarmfab.agents.llm.prompts import describe_verdict, repair_message, system_prompt
from swarmfab.agents.llm.providers import Completion, Message, Provider
from swarmfab.agents.llm.spend import Spend
from swarmfab.errors import ProviderError
from swarmfab.goal import Goal, LLMSettings
from swarmfab.records import Candidate, Status, Verdict

__all__ = ["MAX_COOLDOWN", "LLMAgent"]

MAX_COOLDOWN = 16  # turns an agent sits out after repeated provider failures, at most
MIN_CALL_S = 5.0  # a model call with less of the search left is not started
_REPLY_RESERVE = 0.25  # share of the context budget kept free for repair turns


@dataclass(slots=True)
class _Attempt:
    """One line of work: a base file, the conversation about it, and where it stands."""

    base: Candidate
    messages: list[Message]  # the system prompt and the packed context
    source: str  # the file as the latest edit left it
    parents: tuple[str, ...]  # the champion edited, or the failure being repaired
    turn: int = 0  # repair turns used so far
    reply: str = ""
    pending: str | None = None  # feedback to send next (a repair is due)
    candidate: Candidate | None = None  # proposed, verdict not yet seen

    def conversation(self) -> list[Message]:
        if self.pending is None:
            return list(self.messages)
        return [*self.messages, Message("assistant", self.reply), Message("user", self.pending)]


@dataclass(slots=True)
class _Backoff:
    skip: int = 0
    next_skip: int = 1

    def failed(self) -> int:
        self.skip, self.next_skip = self.next_skip, min(MAX_COOLDOWN, self.next_skip * 2)
        return self.skip

    def succeeded(self) -> None:
        self.next_skip = 1


class LLMAgent(Agent):
    """Owns one domain (``role``); edits source files through a chat model."""

    def __init__(self, agent_id: str, role: str, provider: Provider, spend: Spend,
                 settings: LLMSettings):
        super().__init__(agent_id, role)
        self.provider, self.spend, self.settings = provider, spend, settings
        self._attempt: _Attempt | None = None
        self._history: list[str] = []  # one line per finished attempt, for later prompts
        self._events: list[tuple[str, str]] = []
        self._backoff = _Backoff()
        self._stopped = False

    # -- the Agent protocol ------------------------------------------------------------
    def propose(self, context: Context, limit: int = 1) -> list[Candidate]:
        if self._out_of_budget():
            return []
        if self._awaiting_verdict(context):
            return []  # its last candidate is still being evaluated: a repair may follow
        self._settle(context)
        if self._backoff.skip > 0:
            self._backoff.skip -= 1
            return []
        try:
            candidate = self._work(context)
        except ProviderError as exc:
            self.spend.failures += 1
            skip = self._backoff.failed()
            self._event("llm-error", kind=exc.kind, error=str(exc), sits_out=skip)
            return []
        return [candidate] if candidate is not None else []

    def may_propose_later(self) -> bool:
        """Until its budget is spent: a failed call or an abandoned attempt is not the end."""
        return not self._stopped

    def take_events(self) -> list[tuple[str, str]]:
        events, self._events = self._events, []
        return events

    # -- outcomes -------------------------------------------------------------------------
    def _awaiting_verdict(self, context: Context) -> bool:
        attempt = self._attempt
        return (attempt is not None and attempt.candidate is not None
                and attempt.candidate.id in context.in_flight)

    def _settle(self, context: Context) -> None:
        """Read the verdict of the last proposal from the context; schedule a repair."""
        attempt = self._attempt
        if attempt is None or attempt.candidate is None:
            return
        proposed = attempt.candidate
        verdict = next((v for v in reversed(context.recent) if v.candidate_id == proposed.id),
                       None)
        if verdict is None:  # never evaluated (claimed elsewhere) or out of sight
            self._finish(f"{proposed.id}: no verdict seen; {proposed.rationale}")
        elif verdict.status is Status.ACCEPTED:
            speed = ", ".join(f"{t.shape} {t.ratio.inverted().median:.2f}x ({t.comparison})"
                              for t in verdict.timings)
            self._finish(f"{proposed.id}: verified, {speed}; {proposed.rationale}")
        elif attempt.turn < self.settings.repair_turns:
            attempt.turn += 1
            attempt.candidate, attempt.parents = None, (proposed.id,)  # lineage: the failure
            attempt.pending = repair_message(
                verdict.status.value.replace("_", " "), describe_verdict(verdict),
                attempt.source, attempt.base.entry, attempt.turn, self.settings.repair_turns)
            self._event("llm-repair", candidate=proposed.id, status=verdict.status.value,
                        turn=attempt.turn, reason=verdict.reason[:300])
        else:
            self._abandon(proposed.id, verdict)

    def _abandon(self, candidate_id: str, verdict: Verdict | None, why: str = "") -> None:
        reason = verdict.reason if verdict is not None else why
        status = verdict.status.value if verdict is not None else "edit failed"
        self._event("llm-abandoned", candidate=candidate_id, status=status,
                    reason=reason[:300], turns=self.settings.repair_turns)
        self._finish(f"{candidate_id or '(no candidate)'}: abandoned after "
                     f"{self.settings.repair_turns} repair turn(s): {status}: {reason[:200]}")

    def _finish(self, line: str) -> None:
        self._history.append(line)
        self._attempt = None

    # -- asking the model ----------------------------------------------------------------
    def _work(self, context: Context) -> Candidate | None:
        """Ask the model until it gives an applicable edit or the repair turns run out."""
        attempt = self._attempt = self._attempt or self._start(context)
        while True:
            left = context.seconds_left()
            if left < MIN_CALL_S:  # no reply could be evaluated within the budget
                return None
            completion = self._call(attempt.conversation(), attempt.turn,
                                    None if math.isinf(left) else left)
            attempt.reply = completion.text
            try:
                candidate = self._candidate(context, attempt, completion.text)
            except EditError as exc:
                self._event("llm-edit-failed", turn=attempt.turn, error=str(exc)[:500])
                if attempt.turn >= self.settings.repair_turns:
                    self._abandon("", None, f"no applicable edit: {exc}")
                    return None
                attempt.turn += 1
                attempt.pending = repair_message(
                    "the edit could not be applied", [str(exc)], attempt.source,
                    attempt.base.entry, attempt.turn, self.settings.repair_turns)
                if self._out_of_budget():
                    return None
                continue
            attempt.candidate, attempt.pending = candidate, None
            return candidate

    def _start(self, context: Context) -> _Attempt:
        champion = context.champion
        parents: tuple[str, ...] = ()
        if champion is not None and champion.backend == context.space.backend:
            base, parents = champion, (champion.id,)
        else:  # the design space's starting point: not itself a candidate of this run
            base = context.space.instantiate(context.space.default(),
                                             threads=context.goal.threads)
        budget = int(self.settings.context_tokens * (1 - _REPLY_RESERVE))
        packed = pack(build_sections(context, self.role, base, tuple(self._history)), budget)
        if packed.omitted:
            self._event("llm-context-clipped", omitted=packed.omitted, tokens=packed.tokens)
        messages = [Message("system", system_prompt(self.role, base.backend)),
                    Message("user", packed.text)]
        return _Attempt(base, messages, base.sources[base.entry], parents)

    def _call(self, messages: list[Message], turn: int, timeout_s: float | None) -> Completion:
        completion = self.provider.complete(messages, self.settings.max_output_tokens,
                                            self.settings.temperature, timeout_s)
        cost = self.spend.charge(self.id, completion)
        self._backoff.succeeded()
        self._event("llm-call", provider=self.provider.name, model=self.provider.model,
                    turn=turn, input_tokens=completion.input_tokens,
                    output_tokens=completion.output_tokens, estimated=completion.estimated,
                    cost_usd=cost, latency_s=round(completion.latency_s, 3),
                    finish_reason=completion.finish_reason)
        return completion

    def _candidate(self, context: Context, attempt: _Attempt, reply: str) -> Candidate:
        parsed = parse_reply(reply)
        if parsed.whole_file is not None:
            source = parsed.whole_file
        else:
            source = apply_search_replace(attempt.source, parsed.blocks)
        if source.strip() == attempt.source.strip():
            raise EditError("the edit leaves the file unchanged: propose an actual change")
        base = attempt.base
        note = f" (repair {attempt.turn})" if attempt.turn else ""
        assert isinstance(context.goal, Goal), "LLM agents work on kernel goals"
        candidate = Candidate(
            workload=context.goal.workload, backend=base.backend,
            sources={**base.sources, base.entry: source}, entry=base.entry, flags=base.flags,
            knobs={}, parents=attempt.parents, agent=self.id,
            rationale=f"{self.role}{note}: {parsed.rationale or 'no rationale given'}",
        )
        if candidate.id in context.evaluated:
            raise EditError(f"this exact file was already evaluated (candidate {candidate.id}): "
                            "propose a different change")
        attempt.source = source
        return candidate

    # -- budget and records ----------------------------------------------------------------
    def _out_of_budget(self) -> bool:
        if self._stopped:
            return True
        why = self.spend.exhausted()
        if why is None:
            return False
        self._stopped = True
        self._event("llm-budget", reason=why, **self.spend.summary())
        return True

    def _event(self, event: str, **detail: object) -> None:
        self._events.append((event, json.dumps({"agent": self.id, **detail}, default=str)))
