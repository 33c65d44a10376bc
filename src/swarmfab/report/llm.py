"""What a run's LLM agents did, summed from its stored events (``llm-call`` and the other
``llm-`` kinds, written by :class:`~swarmfab.agents.llm.LLMAgent`, and the reviewer's
``llm-review``). Reading them needs neither the agents nor torch: ``swarmfab show``
answers without either."""

from __future__ import annotations

import json

__all__ = ["summarise_events"]


def summarise_events(events: list[tuple[str, str]]) -> dict[str, object] | None:
    """What the LLM agents of a run did, from its recorded events; None if they did nothing.

    Calls, tokens and cost add up the agents' ``llm-call`` events and the reviewer's
    ``llm-review`` ones; the cost is None when any call had no known price, so a partial
    sum is never shown as the total.
    """
    counts: dict[str, int] = {}
    for kind, _ in events:
        if kind.startswith("llm-"):
            counts[kind] = counts.get(kind, 0) + 1
    if not counts:
        return None
    reviews = [json.loads(detail) for kind, detail in events if kind == "llm-review"]
    calls = [json.loads(detail) for kind, detail in events if kind == "llm-call"]
    calls += [review for review in reviews if review.get("input_tokens")]
    costs = [call.get("cost_usd") for call in calls]
    return {
        "calls": len(calls),
        "input_tokens": sum(int(call.get("input_tokens", 0)) for call in calls),
        "output_tokens": sum(int(call.get("output_tokens", 0)) for call in calls),
        "estimated_calls": sum(bool(call.get("estimated")) for call in calls),
        "cost_usd": (round(sum(c for c in costs if c is not None), 6)
                     if all(c is not None for c in costs) else None),
        "events": counts,
        "reviews": [{"candidate": r.get("candidate"), "opinion": r.get("opinion")}
                    for r in reviews],
    }
