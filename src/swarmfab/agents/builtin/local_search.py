"""A built-in domain agent: hill climbing over the knobs of its own domain.

Around the current champion (or, one time in five, around an elite of another behaviour
cell drawn from its island of the archive) it tries the one-step neighbours of the knobs
it owns, in random order; once its neighbourhood is exhausted it makes a larger move (two or more of
its knobs at once). When another domain's change becomes champion, the neighbourhood is
recomputed around the new champion: re-basing is automatic.

Lessons of earlier runs act as priors: moves they say help come first (an agent passes
its turn while another domain has such a move untried), moves they say hurt (or change
nothing) only once everything else around the base has been tried.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator

from swarmfab.agents.base import Agent, Context, fresh_candidates
from swarmfab.kernels import Knob, KnobValue
from swarmfab.records import Candidate

__all__ = ["ELITE_SHARE", "LocalSearchAgent", "RestartAgent", "domain_agents"]

ELITE_SHARE = 0.2  # how often an agent steps from an archive elite instead of the champion


class LocalSearchAgent(Agent):
    """Owns the knobs of one domain; proposes neighbours of the champion in that domain."""

    def __init__(self, agent_id: str, role: str, knobs: tuple[Knob, ...]):
        super().__init__(agent_id, role)
        self.knobs = knobs

    def propose(self, context: Context, limit: int = 1) -> list[Candidate]:
        base = context.champion_setting()
        parent = (context.champion.id,) if context.champion else ()
        elite = context.parents[0] if context.parents else None
        if elite is not None and elite.knobs and context.rng.random() < ELITE_SHARE:
            base, parent = dict(elite.knobs), (elite.id,)  # explore from another cell
        if self._yields_to_a_helpful_move(base, context):
            return []  # the run loop asks the next agent
        moves = self._by_lessons(base, self._moves(base, context), context)
        return fresh_candidates(context, moves, agent=self.id, parents=parent, limit=limit)

    def _moves(
        self, base: dict[str, KnobValue], context: Context
    ) -> Iterator[tuple[dict[str, KnobValue], str]]:
        """Settings to try, nearest first: the base itself, single steps, then joint moves."""
        yield dict(base), "starting point of the search"
        steps = [(knob, value) for knob in self.knobs for value in knob.neighbours(base[knob.name])]
        context.rng.shuffle(steps)
        for knob, value in steps:
            yield {**base, knob.name: value}, f"{knob.name}: {base[knob.name]} -> {value}"
        joint = list(itertools.product(*(knob.values for knob in self.knobs)))
        context.rng.shuffle(joint)
        for values in joint:
            setting = {**base, **{k.name: v for k, v in zip(self.knobs, values, strict=True)}}
            changed = [k.name for k in self.knobs if setting[k.name] != base[k.name]]
            yield setting, "joint move in " + self.role + ": " + ", ".join(
                f"{name} -> {setting[name]}" for name in changed
            )


    def _yields_to_a_helpful_move(self, base: dict[str, KnobValue], context: Context) -> bool:
        """Lessons say another domain has an untried move from ``base`` that helps, and
        none of ours does: pass this turn so that move is tried first. (Once no helpful
        move is left untried, every agent proposes as usual.)"""
        mine = {knob.name for knob in self.knobs}
        untried_helpful = [
            lesson for lesson in context.lessons
            if lesson.outcome == "helps" and base.get(lesson.knob) == lesson.from_value
            and lesson.to_value in context.space.knob(lesson.knob).values
            and context.space.instantiate({**base, lesson.knob: lesson.to_value},
                                          threads=context.goal.threads).id
            not in context.evaluated
        ]
        if not untried_helpful or any(lesson.knob in mine for lesson in untried_helpful):
            return False
        start = context.space.instantiate(base, threads=context.goal.threads)
        return start.id in context.evaluated  # the base itself always comes first

    @staticmethod
    def _by_lessons(
        base: dict[str, KnobValue], moves: Iterator[tuple[dict[str, KnobValue], str]],
        context: Context,
    ) -> Iterator[tuple[dict[str, KnobValue], str]]:
        """The moves reordered by the lessons that match them exactly (knob, from, to):
        helpful ones first (most helpful first), unknown ones in their own order, then
        those with no effect, and those that hurt last. Without lessons: unchanged."""
        if not context.lessons:
            yield from moves
            return
        known = {(lesson.knob, lesson.from_value, lesson.to_value): lesson
                 for lesson in context.lessons}
        rank = {"helps": 0, "unclear": 1, "no effect": 2, "hurts": 3}

        def prior(move: tuple[dict[str, KnobValue], str]) -> tuple[int, float]:
            setting = move[0]
            changed = [name for name in setting if setting[name] != base.get(name)]
            lessons = [known.get((name, base[name], setting[name])) for name in changed]
            if not changed:
                return -1, 0.0  # the base itself
            if any(lesson is not None and lesson.outcome == "hurts" for lesson in lessons):
                return rank["hurts"], 0.0
            lesson = lessons[0] if len(lessons) == 1 else None
            if lesson is None:
                return rank["unclear"], 0.0
            return rank[lesson.outcome], lesson.effect.median if lesson.effect else 1.0

        yield from sorted(moves, key=prior)  # stable: ties keep their shuffled order


def domain_agents(knobs: tuple[Knob, ...]) -> list[LocalSearchAgent]:
    """One agent per domain of a design space, each owning that domain's knobs."""
    domains = sorted({knob.domain for knob in knobs})
    return [
        LocalSearchAgent(f"builtin-{domain}", domain,
                         tuple(k for k in knobs if k.domain == domain))
        for domain in domains
    ]


class RestartAgent(Agent):
    """Explores when the domain agents are stuck: larger moves, then the whole space.

    Consulted when every domain agent has run out of proposals around the champion, or
    when the supervisor asks for larger moves after a stretch without a new champion.
    It first kicks the champion (``KICK_KNOBS`` knobs of any domains, among those its
    template reads, changed at random at once: iterated local search, which keeps what
    was learned), then draws uniformly from the whole space, so the run never stalls
    while unexplored settings remain.
    """

    def __init__(self, agent_id: str = "builtin-restart", *, kick: bool = True):
        super().__init__(agent_id, "exploration")
        self.kick = kick  # False: uniform draws only (the random-search baseline)

    def propose(self, context: Context, limit: int = 1) -> list[Candidate]:
        parent = (context.champion.id,) if context.champion else ()
        settings = (({k.name: v for k, v in zip(context.space.knobs, values, strict=True)}, why)
                    for values, why in _random_settings(context, self.kick))
        return fresh_candidates(context, settings, agent=self.id, parents=parent, limit=limit)


KICK_KNOBS = 3  # knobs a kick changes at once
KICK_TRIES = 200  # kicks drawn per proposal before drawing from the whole space
ENUMERATE_LIMIT = 20_000  # larger spaces are sampled, not listed
SAMPLE_TRIES = 2_000  # random draws per proposal before a large space counts as dry

Values = tuple[KnobValue, ...]


def _random_settings(context: Context, kick: bool = True) -> Iterator[tuple[Values, str]]:
    """Kicks of the champion (when ``kick``), then every setting in random order (small
    spaces) or uniform random draws (large)."""
    knobs = context.space.knobs
    champion = context.champion.knobs if context.champion and context.champion.knobs else None
    if kick and champion is not None and set(champion) == {knob.name for knob in knobs}:
        live = [k.name for k in context.space.live_knobs(champion, threads=context.goal.threads)]
        for _ in range(KICK_TRIES if live else 0):
            kicked = set(context.rng.sample(live, min(KICK_KNOBS, len(live))))
            values = tuple(
                context.rng.choice([v for v in k.values if v != champion[k.name]])
                if k.name in kicked else champion[k.name] for k in knobs)
            yield values, "kick: " + ", ".join(
                f"{k.name} -> {v}" for k, v in zip(knobs, values, strict=True) if k.name in kicked)
    why = "restart: random point of the whole space"
    if context.space.size() <= ENUMERATE_LIMIT:
        settings = list(itertools.product(*(knob.values for knob in knobs)))
        context.rng.shuffle(settings)
        for values in settings:
            yield values, why
        return
    for _ in range(SAMPLE_TRIES):
        yield tuple(context.rng.choice(knob.values) for knob in knobs), why
