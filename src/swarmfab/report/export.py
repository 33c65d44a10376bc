"""Export a run's champion: its sources, how to build it, and the evidence behind it."""

from __future__ import annotations

import json
from pathlib import Path

from swarmfab.knowledge import Store
from swarmfab.records import Candidate

__all__ = ["export_champion"]


def _lineage(store: Store, candidate: Candidate) -> list[dict[str, object]]:
    chain: list[dict[str, object]] = []
    current: Candidate | None = candidate
    while current is not None and len(chain) < 1000:
        chain.append({"id": current.id, "agent": current.agent, "rationale": current.rationale,
                      "knobs": current.knobs})
        current = store.candidate(current.parents[0]) if current.parents else None
    return chain


def export_champion(store: Store, run_id: str | None, out: Path) -> Path:
    """Write the champion of ``run_id`` (latest run if None) into ``out``; returns ``out``."""
    run = store.run(run_id)
    if run.champion_id is None:
        from swarmfab.errors import StoreError

        raise StoreError(f"run {run.id} has no champion to export (status: {run.status})")
    champion = store.candidate(run.champion_id)
    verdict = next(v for row, v in store.verdicts(run.id) if row.candidate_id == champion.id)
    out.mkdir(parents=True, exist_ok=True)
    for rel, text in champion.sources.items():
        (out / rel).write_text(text)
    provenance = {
        "run": run.id, "workload": run.workload, "goal": run.goal, "host": run.host,
        "candidate": champion.id, "backend": champion.backend, "entry": champion.entry,
        "flags": list(champion.flags), "knobs": champion.knobs,
        "build": _build_command(champion), "verdict": verdict.to_dict(),
        "final_measurement": run.summary, "lineage": _lineage(store, champion),
    }
    (out / "provenance.json").write_text(json.dumps(provenance, indent=2, default=str))
    return out


def _build_command(candidate: Candidate) -> str:
    if candidate.backend != "c":
        return ""
    flags = " ".join(candidate.flags)
    return f"cc {flags} -fPIC -shared -fopenmp -std=gnu11 -o kernel.so {candidate.entry} -lm"
