"""The knowledge store: every run, candidate and verdict, behind one repository object.

SQLAlchemy 2 over SQLite by default (WAL journal, so readers never block the writer and
several processes can share one file); any SQLAlchemy URL works. Every write commits
immediately: a run killed at any moment loses nothing already recorded.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, create_engine, event, func, select
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session, sessionmaker

from swarmfab.errors import StoreError
from swarmfab.knowledge._schema import (
    SCHEMA_VERSION,
    Base,
    CandidateRow,
    CaseRow,
    EventRow,
    HostPeaksRow,
    MetaRow,
    RunRow,
    VerdictRow,
)
from swarmfab.measure.roofline import HostPeaks
from swarmfab.records import Candidate, Status, Verdict
from swarmfab.workloads import Case

__all__ = ["DEFAULT_DB", "LATEST", "Store", "database_url"]

DEFAULT_DB = Path(".swarmfab") / "swarmfab.db"
LATEST = "latest"  # every command that takes a run id takes this too


def database_url(path_or_url: str | Path) -> str:
    """A SQLAlchemy URL from ``--db``: a URL as given, anything else as a SQLite path."""
    text = str(path_or_url)
    if "://" in text:
        return text
    path = Path(text).expanduser()
    path.parent.mkdir(parents=True, exist_ok=True)
    return f"sqlite:///{path}"


def _sqlite_pragmas(engine: Engine) -> None:
    @event.listens_for(engine, "connect")
    def _on_connect(connection: Any, _record: Any) -> None:
        cursor = connection.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA busy_timeout=30000")
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.close()


class Store:
    """Repository over the knowledge database. Methods are safe to call from one thread."""

    def __init__(self, path_or_url: str | Path = DEFAULT_DB):
        self.url = database_url(path_or_url)
        try:
            self.engine = create_engine(self.url)
            if self.engine.dialect.name == "sqlite":
                _sqlite_pragmas(self.engine)
            Base.metadata.create_all(self.engine)
        except SQLAlchemyError as exc:
            raise StoreError(f"cannot open the store at {self.url}: {exc}") from exc
        self._sessions = sessionmaker(self.engine, expire_on_commit=False)
        self._check_version()

    @contextlib.contextmanager
    def session(self) -> Iterator[Session]:
        """One transaction: commits on success, rolls back and translates errors otherwise."""
        session = self._sessions()
        try:
            yield session
            session.commit()
        except SQLAlchemyError as exc:
            session.rollback()
            raise StoreError(f"store operation failed ({self.url}): {exc}") from exc
        finally:
            session.close()

    def _check_version(self) -> None:
        with self.session() as s:
            row = s.get(MetaRow, "schema_version")
            if row is None:
                s.add(MetaRow(key="schema_version", value=str(SCHEMA_VERSION)))
            elif int(row.value) != SCHEMA_VERSION:
                raise StoreError(
                    f"the store at {self.url} has schema version {row.value}, this swarmfab "
                    f"expects {SCHEMA_VERSION}; use a new --db path or a matching swarmfab"
                )

    # -- runs ----------------------------------------------------------------------
    def start_run(self, workload: str, goal: dict[str, Any], host: dict[str, Any]) -> str:
        run_id = datetime.now(UTC).strftime("%Y%m%d-%H%M%S-") + uuid.uuid4().hex[:6]
        with self.session() as s:
            s.add(RunRow(id=run_id, workload=workload, goal=goal, host=host, status="running"))
        return run_id

    def finish_run(self, run_id: str, status: str, summary: dict[str, Any] | None) -> None:
        with self.session() as s:
            run = s.get(RunRow, run_id)
            if run is None:
                raise StoreError(f"no run {run_id!r}")
            run.status, run.summary, run.finished_at = status, summary, datetime.now(UTC)

    @staticmethod
    def _judged(s: Session, run_id: str, candidate_id: str, action: str
                ) -> tuple[RunRow, VerdictRow]:
        """A run and a candidate's verdict in it, or a StoreError naming ``action``."""
        run = s.get(RunRow, run_id)
        verdict = s.scalar(select(VerdictRow).where(
            VerdictRow.run_id == run_id, VerdictRow.candidate_id == candidate_id))
        if run is None or verdict is None:
            raise StoreError(f"cannot {action} {candidate_id}: no verdict in run {run_id}")
        return run, verdict

    def set_champion(self, run_id: str, candidate_id: str) -> None:
        with self.session() as s:
            run, verdict = self._judged(s, run_id, candidate_id, "crown")
            run.champion_id = candidate_id
            verdict.became_champion = True

    def demote(self, run_id: str, candidate_id: str, reason: str) -> None:
        """A champion failed a newer check: record why, and leave the run without one."""
        with self.session() as s:
            run, verdict = self._judged(s, run_id, candidate_id, "demote")
            verdict.demoted = reason
            if run.champion_id == candidate_id:
                run.champion_id = None

    def reopen_run(self, run_id: str) -> None:
        """Mark a stopped (interrupted or killed) run as running again, for resume."""
        with self.session() as s:
            run = s.get(RunRow, run_id)
            if run is None:
                raise StoreError(f"no run {run_id!r} in the store at {self.url}")
            run.status, run.finished_at = "running", None

    def record_event(self, run_id: str, kind: str, detail: str) -> None:
        with self.session() as s:
            s.add(EventRow(run_id=run_id, kind=kind, detail=detail))

    def events(self, run_id: str, kind: str | None = None) -> list[tuple[str, str]]:
        """(kind, detail) of a run's events in order, optionally of one kind only."""
        with self.session() as s:
            query = select(EventRow).where(EventRow.run_id == run_id)
            if kind is not None:
                query = query.where(EventRow.kind == kind)
            return [(row.kind, row.detail) for row in s.scalars(query.order_by(EventRow.id))]

    def timed_events(self, run_id: str) -> list[tuple[str, str, datetime]]:
        """(kind, detail, when) of a run's events in order: for timelines."""
        with self.session() as s:
            query = select(EventRow).where(EventRow.run_id == run_id).order_by(EventRow.id)
            return [(row.kind, row.detail, row.created_at) for row in s.scalars(query)]

    def run(self, run_id: str | None = None) -> RunRow:
        """A run by id, or the latest run when ``run_id`` is None or ``"latest"``."""
        with self.session() as s:
            if run_id is None or run_id == LATEST:
                row = s.scalar(select(RunRow).order_by(RunRow.started_at.desc()).limit(1))
                if row is None:
                    raise StoreError(f"the store at {self.url} has no runs yet")
                return row
            row = s.get(RunRow, run_id)
            if row is None:
                raise StoreError(f"no run {run_id!r} in the store at {self.url}")
            return row

    def runs(self) -> list[RunRow]:
        with self.session() as s:
            return list(s.scalars(select(RunRow).order_by(RunRow.started_at)))

    # -- candidates and verdicts ---------------------------------------------------
    def record(self, run_id: str, candidate: Candidate, verdict: Verdict) -> None:
        """Store a candidate (once) and its verdict in this run, in one transaction."""
        speedups = [t.ratio.inverted().median for t in verdict.timings]
        speedup = min(speedups) if speedups else None
        with self.session() as s:
            if s.get(CandidateRow, candidate.id) is None:
                s.add(CandidateRow(
                    id=candidate.id, workload=candidate.workload, backend=candidate.backend,
                    body=candidate.to_dict(), agent=candidate.agent,
                ))
            s.add(VerdictRow(
                run_id=run_id, candidate_id=candidate.id, agent=candidate.agent,
                status=verdict.status.value, reason=verdict.reason, speedup=speedup,
                body=verdict.to_dict(),
            ))

    def candidate(self, candidate_id: str) -> Candidate:
        with self.session() as s:
            row = s.get(CandidateRow, candidate_id)
            if row is None:
                raise StoreError(f"no candidate {candidate_id!r}")
            body = dict(row.body)
        body.pop("id", None)
        body["flags"], body["parents"] = tuple(body["flags"]), tuple(body["parents"])
        return Candidate(**body)

    def verdicts(self, run_id: str) -> list[tuple[VerdictRow, Verdict]]:
        with self.session() as s:
            rows = list(s.scalars(
                select(VerdictRow).where(VerdictRow.run_id == run_id).order_by(VerdictRow.id)))
        return [(row, Verdict.from_dict(row.body)) for row in rows]

    def evaluated_ids(self, run_id: str) -> set[str]:
        with self.session() as s:
            query = select(VerdictRow.candidate_id).where(VerdictRow.run_id == run_id)
            return set(s.scalars(query))

    def status_counts(self, run_id: str) -> dict[str, int]:
        with self.session() as s:
            rows = s.execute(select(VerdictRow.status, func.count()).where(
                VerdictRow.run_id == run_id).group_by(VerdictRow.status))
            return {status: count for status, count in rows}

    def accepted(self, run_id: str) -> list[str]:
        with self.session() as s:
            return list(s.scalars(select(VerdictRow.candidate_id).where(
                VerdictRow.run_id == run_id, VerdictRow.status == Status.ACCEPTED.value)))

    # -- host peaks ----------------------------------------------------------------
    def host_peaks(self, fingerprint: str) -> HostPeaks | None:
        with self.session() as s:
            row = s.get(HostPeaksRow, fingerprint)
            return None if row is None else HostPeaks(fingerprint, row.flops_per_s, row.bytes_per_s)

    def known_host_peaks(self) -> list[HostPeaks]:
        """Every stored fingerprint's peaks: a report may be read on another host."""
        with self.session() as s:
            return [HostPeaks(row.fingerprint, row.flops_per_s, row.bytes_per_s)
                    for row in s.scalars(select(HostPeaksRow))]

    def save_host_peaks(self, peaks: HostPeaks) -> None:
        with self.session() as s:
            s.merge(HostPeaksRow(fingerprint=peaks.fingerprint, flops_per_s=peaks.flops_per_s,
                                 bytes_per_s=peaks.bytes_per_s))

    # -- the validation corpus -----------------------------------------------------
    def add_case(self, workload: str, case: Case, run_id: str | None = None) -> bool:
        """Add a case to a workload's corpus; False if one of that name is already there."""
        with self.session() as s:
            exists = s.scalar(select(CaseRow.id).where(
                CaseRow.workload == workload, CaseRow.name == case.name))
            if exists is not None:
                return False
            s.add(CaseRow(workload=workload, name=case.name, origin=case.origin,
                          body=case.to_dict(), run_id=run_id))
            return True

    def case_history(self, workload: str) -> list[tuple[str, str, datetime, str | None]]:
        """(name, origin, added at, run that found it) of a workload's stored cases, oldest
        first: how the corpus grew."""
        with self.session() as s:
            rows = s.scalars(
                select(CaseRow).where(CaseRow.workload == workload).order_by(CaseRow.id))
            return [(row.name, row.origin, row.created_at, row.run_id) for row in rows]

    def cases(self, workload: str) -> list[Case]:
        """Stored cases of a workload, oldest first."""
        with self.session() as s:
            rows = list(s.scalars(
                select(CaseRow).where(CaseRow.workload == workload).order_by(CaseRow.id)))
        try:
            return [Case.from_dict(row.body) for row in rows]
        except (KeyError, TypeError) as exc:
            raise StoreError(f"a stored case of {workload} is malformed: {exc}") from exc
