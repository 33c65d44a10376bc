"""The archive: the best per behaviour cell, per island; migration; lineage."""

from __future__ import annotations

import random

from swarmfab.records import Candidate
from swarmfab.swarm.archive import Archive, knob_descriptor


def _candidate(name: str, passes: str, tile: int, parent: str | None = None) -> Candidate:
    return Candidate("kda", "c", {"k.c": f"/* {name} */"}, "k.c",
                     knobs={"passes": passes, "tile_v": tile},
                     parents=(parent,) if parent else ())


def test_each_cell_keeps_its_fittest_candidate() -> None:
    archive = Archive(knob_descriptor(("passes",)), islands=1, migrate_every=100)
    slow, fast = _candidate("a", "fused", 16), _candidate("b", "fused", 64)
    other = _candidate("c", "separate", 16)
    assert archive.add(slow, 2.0, 0)
    assert archive.add(fast, 3.0, 0)
    assert not archive.add(_candidate("d", "fused", 32), 2.5, 0)
    assert archive.add(other, 1.0, 0)
    cells = {tuple(e["cell"]): e["candidate"] for e in archive.summary()}
    assert cells == {("c", "fused"): fast.id, ("c", "separate"): other.id}
    champion = archive.champion()
    assert champion is not None and champion.candidate.id == fast.id


def test_islands_evolve_apart_until_migration_shares_their_best() -> None:
    archive = Archive(knob_descriptor(("passes",)), islands=2, migrate_every=3)
    best = _candidate("a", "fused", 64)
    archive.add(best, 5.0, 0)
    archive.add(_candidate("b", "separate", 16), 1.0, 1)
    champion_of_1 = archive.champion(1)
    assert champion_of_1 is not None and champion_of_1.fitness == 1.0
    archive.add(_candidate("c", "separate", 32), 1.5, 1)  # third addition: migration
    champion_of_1 = archive.champion(1)
    assert champion_of_1 is not None and champion_of_1.candidate.id == best.id


def test_parents_are_sampled_from_the_agents_island_and_lineage_is_kept() -> None:
    archive = Archive(knob_descriptor(("passes",)), islands=2, migrate_every=100)
    root = _candidate("root", "fused", 16)
    child = _candidate("child", "separate", 16, parent=root.id)
    archive.add(root, 1.0, 0)
    archive.add(child, 2.0, 0)
    assert archive.sample(1, random.Random(0)) == []
    picks = archive.sample(0, random.Random(0), count=20)
    assert {c.id for c in picks} <= {root.id, child.id}
    assert archive.lineage(child.id) == [child.id, root.id]
