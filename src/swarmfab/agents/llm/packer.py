"""The context an LLM agent is shown, packed within a token budget.

Sections come in order of importance. The goal, the role and the source being edited
always go in whole (without them no edit is possible). The rest (evidence, lessons,
recent failures, the board, the agent's own history) are lists of entries, most relevant
first; each section takes entries while the budget lasts and says how many it left out,
so a model never mistakes a clipped list for a complete one.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from swarmfab.agents.base import Context
from swarmfab.agents.llm.prompts import ROLE_FOCUS, describe_verdict, workload_notes
from swarmfab.agents.llm.providers import estimate_tokens
from swarmfab.goal import Goal
from swarmfab.records import Candidate, Status, Verdict
from swarmfab.workloads import get_workload

__all__ = ["Packed", "Section", "build_sections", "pack"]


@dataclass(frozen=True, slots=True)
class Section:
    title: str
    entries: tuple[str, ...]
    required: bool = False
    empty: str = "(none)"


@dataclass(frozen=True, slots=True)
class Packed:
    text: str
    tokens: int
    omitted: dict[str, int] = field(default_factory=dict)  # section title -> entries left out


def pack(sections: list[Section], budget_tokens: int) -> Packed:
    """Required sections whole, then as many entries of the others as fit, in order."""
    used = sum(_section_tokens(s.title, s.entries) for s in sections if s.required)
    chosen: dict[str, list[str]] = {s.title: list(s.entries) for s in sections if s.required}
    omitted: dict[str, int] = {}
    for section in sections:
        if section.required:
            continue
        used += _section_tokens(section.title, ())
        taken: list[str] = []
        for entry in section.entries:
            cost = estimate_tokens(entry) + 1
            if used + cost > budget_tokens:
                break
            taken.append(entry)
            used += cost
        chosen[section.title] = taken
        if len(taken) < len(section.entries):
            omitted[section.title] = len(section.entries) - len(taken)
    parts = []
    for section in sections:
        entries = chosen[section.title]
        body = "\n".join(entries) if entries else section.empty
        if section.title in omitted:
            body += f"\n({omitted[section.title]} more left out to fit the context budget)"
        parts.append(f"## {section.title}\n{body}")
    text = "\n\n".join(parts)
    return Packed(text, estimate_tokens(text), omitted)


def _section_tokens(title: str, entries: tuple[str, ...]) -> int:
    return estimate_tokens(title) + 4 + sum(estimate_tokens(e) + 1 for e in entries)


def build_sections(context: Context, role: str, base: Candidate,
                   history: tuple[str, ...] = ()) -> list[Section]:
    """The sections of a fresh proposal's prompt, most important first."""
    goal = context.goal
    assert isinstance(goal, Goal), "LLM agents work on kernel goals"
    shapes = ", ".join(shape.label for shape in goal.target_shapes())
    workload = get_workload(goal.workload)
    goal_lines = (
        f"workload: {goal.workload}; metric: {goal.metric} on {goal.device}, {goal.dtype}, "
        f"{goal.threads} thread(s)",
        f"target shapes: {shapes}",
        workload_notes(workload),
    )
    source = base.sources[base.entry]
    where = (f"the current champion {base.id} (by {base.agent})"
             if context.champion is not None and base.id == context.champion.id
             else "the starting point (no champion yet: the PyTorch baselines are the "
                  "incumbents to beat)")
    return [
        Section("Goal", goal_lines, required=True),
        Section("Your role", (f"You own {ROLE_FOCUS.get(role, role)}.",), required=True),
        Section(f"Source to improve: {base.entry}, {where}",
                (f"compiler flags: {' '.join(base.flags) or '(none)'}", "```",
                 source.rstrip(), "```"), required=True),
        Section("Evidence: the champion against the incumbents", _evidence(context),
                empty="no champion yet"),
        Section("Lessons", tuple(lesson.text() for lesson in context.lessons)),
        Section("Recent failures (newest first)", _failures(context.recent)),
        Section("Board: what the swarm is doing", tuple(reversed(context.board))),
        Section("Your earlier attempts (newest first)", tuple(reversed(history))),
    ]


def _evidence(context: Context) -> tuple[str, ...]:
    verdict = context.champion_verdict
    if verdict is None or not verdict.timings:
        return ()
    rows = ["| shape | champion ms [95% CI] | incumbent | incumbent ms | speedup | roofline |",
            "|---|---|---|---|---|---|"]
    for t in verdict.timings:
        roof = f"{t.roofline_fraction:.1%}" if t.roofline_fraction is not None else "n/a"
        rows.append(
            f"| {t.shape} | {t.candidate_s.median * 1e3:.3f} [{t.candidate_s.low * 1e3:.3f}, "
            f"{t.candidate_s.high * 1e3:.3f}] | {t.incumbent} | {t.incumbent_s.median * 1e3:.3f}"
            f" | {t.ratio.inverted().median:.2f}x | {roof} |")
    return tuple(rows)


def _failures(recent: tuple[Verdict, ...]) -> tuple[str, ...]:
    entries = []
    for verdict in reversed(recent):
        if verdict.status is Status.ACCEPTED:
            continue
        lines = describe_verdict(verdict, max_diagnostics=3)
        entries.append(f"- {verdict.candidate_id}: " + "; ".join(lines))
    return tuple(entries)
