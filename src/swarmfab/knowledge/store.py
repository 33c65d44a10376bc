"""The knowledge store: every run, candidate and verdict, behind one repository object.

SQLAlchemy 2 over SQLite by default (WAL journal, so readers never block the writer and
several processes can share one file) or PostgreSQL (``postgresql://...``, through
psycopg 3). Opening a store runs its schema migrations (``_migrate.py``). Every write
commits immediately: a run killed at any moment loses nothing already recorded.

Several runs may write to one store at once. Rows they can share (a candidate both
proposed, a corpus case, host peaks) are written as upserts, so neither run fails on
the other's row; a write that loses a serialization race or a deadlock (PostgreSQL) or
finds SQLite locked for too long is retried from the start of its transaction.
"""

from __future__ import annotations

import contextlib
import dataclasses
import random
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from sqlalchemy import Engine, create_engine, delete, func, select
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.exc import DBAPIError, SQLAlchemyError
from sqlalchemy.orm import Session, sessionmaker

from swarmfab.errors import OUT_OF_SPACE, MissingExtraError, StoreError
from swarmfab.knowledge import _migrate, lessons
from swarmfab.knowledge._schema import (
    SCHEMA_VERSION,
    CandidateRow,
    CaseRow,
    EventRow,
    HostPeaksRow,
    LessonRow,
    MeasurementRow,
    MetaRow,
    RefreshRow,
    RunRow,
    VerdictRow,
)
from swarmfab.knowledge._sqlite import sqlite_pragmas
from swarmfab.knowledge.recall import Champion, Recalled, recall_champions
from swarmfab.measure.roofline import HostPeaks
from swarmfab.records import Candidate, Lesson, Status, Verdict

if TYPE_CHECKING:  # the workloads import torch, which reading a store never needs
    from swarmfab.workloads import Case

__all__ = ["DEFAULT_DB", "LATEST", "Store", "database_url"]

DEFAULT_DB = Path(".swarmfab") / "swarmfab.db"
LATEST = "latest"  # every command that takes a run id takes this too
T = TypeVar("T")

_DIALECTS = ("sqlite", "postgresql")
_WRITE_ATTEMPTS = 6
# what SQLite (SQLITE_FULL) and PostgreSQL (DiskFull: the C library's words) say when the
# disk is full
_OUT_OF_SPACE = ("database or disk is full", *OUT_OF_SPACE)
_RETRYABLE_SQLSTATES = {"40001", "40P01"}  # serialization failure, deadlock detected


def database_url(path_or_url: str | Path) -> str:
    """A SQLAlchemy URL from ``--db``: a URL as given (plain ``postgresql://`` goes through
    psycopg 3), anything else as a SQLite path."""
    text = str(path_or_url)
    for plain in ("postgresql://", "postgres://"):
        if text.startswith(plain):
            return "postgresql+psycopg://" + text.removeprefix(plain)
    if "://" in text:
        return text
    path = Path(text).expanduser()
    path.parent.mkdir(parents=True, exist_ok=True)
    return f"sqlite:///{path}"


def _engine(url: str) -> Engine:
    dialect = url.split("://", 1)[0].split("+", 1)[0]
    if dialect not in _DIALECTS:
        raise StoreError(f"--db {url}: a store is a SQLite path or a postgresql:// URL "
                         f"(got the {dialect!r} dialect)")
    if dialect == "postgresql":  # timestamps are written and read back in UTC
        try:  # the driver (psycopg 3) is imported here: the postgres extra
            return create_engine(url, pool_pre_ping=True,
                                 connect_args={"options": "-c timezone=UTC"})
        except ImportError as exc:
            raise MissingExtraError(exc.name or "psycopg", "postgres",
                                    "a PostgreSQL store") from exc
    engine = create_engine(url)
    sqlite_pragmas(engine)
    return engine


def _retryable(exc: DBAPIError) -> bool:
    """A conflict with a concurrent writer that goes away when the transaction is redone."""
    if getattr(exc.orig, "sqlstate", None) in _RETRYABLE_SQLSTATES:
        return True
    return "database is locked" in str(exc.orig)


class Store:
    """Repository over the knowledge database. Methods are safe to call from one thread."""

    def __init__(self, path_or_url: str | Path = DEFAULT_DB):
        self.url = database_url(path_or_url)
        try:
            self.engine = _engine(self.url)
            _migrate.upgrade(self.engine, self._shown_url)
        except SQLAlchemyError as exc:
            raise StoreError(f"cannot open the store at {self._shown_url}: {exc}") from exc
        self._sessions = sessionmaker(self.engine, expire_on_commit=False)
        self._check_version()

    @property
    def _shown_url(self) -> str:
        """The URL without its password, for messages."""
        try:
            from sqlalchemy.engine import make_url

            return make_url(self.url).render_as_string(hide_password=True)
        except SQLAlchemyError:
            return self.url

    def _failed(self, exc: SQLAlchemyError) -> StoreError:
        """The error a failed operation raises; a full disk says what to do about it."""
        cause = str(getattr(exc, "orig", None) or exc).strip()
        if any(words in cause for words in _OUT_OF_SPACE):
            return StoreError(f"the store ({self._shown_url}) is out of disk space ({cause}): "
                              "what it holds is intact, as each write is one transaction; "
                              "free some space there and go on")
        return StoreError(f"store operation failed ({self._shown_url}): {exc}")

    @contextlib.contextmanager
    def session(self) -> Iterator[Session]:
        """One transaction: commits on success, rolls back and translates errors otherwise."""
        session = self._sessions()
        try:
            yield session
            session.commit()
        except SQLAlchemyError as exc:
            session.rollback()
            raise self._failed(exc) from exc
        finally:
            session.close()

    def _write(self, work: Callable[[Session], T]) -> T:
        """Run ``work`` in one transaction, redone from the start when a concurrent writer
        made it fail in a way that retrying fixes (serialization, deadlock, SQLite lock)."""
        for attempt in range(_WRITE_ATTEMPTS):
            session = self._sessions()
            try:
                result = work(session)
                session.commit()
                return result
            except DBAPIError as exc:
                session.rollback()
                if not _retryable(exc) or attempt == _WRITE_ATTEMPTS - 1:
                    raise self._failed(exc) from exc
                time.sleep(random.uniform(0.01, 0.05) * 2**attempt)
            except SQLAlchemyError as exc:
                session.rollback()
                raise self._failed(exc) from exc
            finally:
                session.close()
        raise AssertionError("unreachable")

    def _insert_new(self, session: Session, table: Any, keys: list[str],
                    **values: Any) -> bool:
        """INSERT unless a row with the same ``keys`` exists (another run may have written
        it a moment ago); True when this call inserted it."""
        dialect = postgresql if session.bind.dialect.name == "postgresql" else sqlite  # type: ignore[union-attr]
        statement = dialect.insert(table).values(**values).on_conflict_do_nothing(
            index_elements=keys).returning(table.c[keys[0]])
        return session.execute(statement).first() is not None  # rowcount lies on psycopg

    def _check_version(self) -> None:
        with self.session() as s:
            row = s.get(MetaRow, "schema_version")
            if row is None or int(row.value) != SCHEMA_VERSION:
                found = "no" if row is None else row.value
                raise StoreError(
                    f"the store at {self._shown_url} has schema version {found}, this "
                    f"swarmfab expects {SCHEMA_VERSION}; use a new --db path or a matching "
                    "swarmfab"
                )

    # -- runs ----------------------------------------------------------------------
    def start_run(self, workload: str, goal: dict[str, Any], host: dict[str, Any]) -> str:
        run_id = datetime.now(UTC).strftime("%Y%m%d-%H%M%S-") + uuid.uuid4().hex[:6]
        with self.session() as s:
            s.add(RunRow(id=run_id, workload=workload, goal=goal, host=host, status="running"))
        return run_id

    def finish_run(self, run_id: str, status: str, summary: dict[str, Any] | None) -> None:
        """Record how a run ended, and replace its lessons with what its evidence says now
        (a resumed run that finishes again is summarised again, from all its verdicts)."""

        def work(s: Session) -> None:
            run = s.get(RunRow, run_id)
            if run is None:
                raise StoreError(f"no run {run_id!r}")
            run.status, run.summary, run.finished_at = status, summary, datetime.now(UTC)
            s.execute(delete(LessonRow).where(LessonRow.run_id == run_id))
            for evidence in lessons.extract(run_id, run.workload, run.host,
                                            self._judged_in_order(s, run_id)):
                s.add(LessonRow(**dataclasses.asdict(evidence)))

        self._write(work)

    @staticmethod
    def _judged_in_order(s: Session, run_id: str) -> list[tuple[Candidate, Verdict, bool]]:
        rows = list(s.execute(
            select(VerdictRow, CandidateRow).join(CandidateRow).where(
                VerdictRow.run_id == run_id).order_by(VerdictRow.id)))
        return [(_candidate_of(candidate.body), Verdict.from_dict(verdict.body),
                 verdict.became_champion) for verdict, candidate in rows]

    def lesson_evidence(self, family: str | None = None) -> list[lessons.Evidence]:
        """Every run's stored lesson rows, of one workload family or of all."""
        with self.session() as s:
            query = select(LessonRow).order_by(LessonRow.id)
            if family is not None:
                query = query.where(LessonRow.family == family)
            return [lessons.Evidence(
                row.run_id, row.workload, row.family, row.device_class, row.shape_class,
                row.knob, row.from_value, row.to_value, row.log_ratio, row.log_se, row.pairs,
                row.failures, list(row.evidence)) for row in s.scalars(query)]

    def lessons_for(self, context: lessons.LessonContext) -> list[Lesson]:
        """The lessons earlier runs left for a run in ``context``, most useful first."""
        return lessons.merge(self.lesson_evidence(context.family), context)

    def champions(self, family: str) -> list[Champion]:
        """The champion of every run of a workload family that has one, oldest run first.

        Only the champions' knobs and timed shapes are read, not their sources, and only
        for the family's workloads: a run start stays cheap in a large shared store."""
        with self.session() as s:
            rows = s.execute(
                select(RunRow.id, RunRow.workload, RunRow.host, RunRow.started_at,
                       CandidateRow.body["knobs"], VerdictRow.body["timings"])
                .join(CandidateRow, CandidateRow.id == RunRow.champion_id)
                .join(VerdictRow, (VerdictRow.run_id == RunRow.id)
                      & (VerdictRow.candidate_id == RunRow.champion_id))
                .where(RunRow.workload.in_(lessons.family_members(family)))
                .order_by(RunRow.started_at))
            latest: dict[str, bool | None] = {}  # per run: did its latest refresh verify
            for run_id, verifies in s.execute(select(RefreshRow.run_id, RefreshRow.verifies)
                                              .order_by(RefreshRow.id)):
                latest[run_id] = verifies
            return [Champion(
                run_id, workload, dict(host),
                tuple(str(t.get("shape", "")) for t in timings or []),
                dict(knobs or {}), started_at, latest.get(run_id) is False)
                for run_id, workload, host, started_at, knobs, timings in rows]

    def recall(self, context: lessons.LessonContext, limit: int = 3) -> list[Recalled]:
        """Champion settings of earlier runs for a run in ``context``, most similar first."""
        return recall_champions(self.champions(context.family), context, limit)

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

        def work(s: Session) -> None:
            # another run may record the same candidate at the same moment: first one wins
            self._insert_new(s, CandidateRow.__table__, ["id"], id=candidate.id,
                             workload=candidate.workload, backend=candidate.backend,
                             body=candidate.to_dict(), agent=candidate.agent)
            s.add(VerdictRow(
                run_id=run_id, candidate_id=candidate.id, agent=candidate.agent,
                status=verdict.status.value, reason=verdict.reason, speedup=speedup,
                body=verdict.to_dict(),
            ))

        self._write(work)

    def candidate(self, candidate_id: str) -> Candidate:
        with self.session() as s:
            row = s.get(CandidateRow, candidate_id)
            if row is None:
                raise StoreError(f"no candidate {candidate_id!r}")
            return _candidate_of(row.body)

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
        """Insert or replace a fingerprint's peaks (an upsert: runs may save at once)."""

        def work(s: Session) -> None:
            dialect = postgresql if self.engine.dialect.name == "postgresql" else sqlite
            insert = dialect.insert(HostPeaksRow.__table__).values(
                fingerprint=peaks.fingerprint, flops_per_s=peaks.flops_per_s,
                bytes_per_s=peaks.bytes_per_s, measured_at=datetime.now(UTC))
            s.execute(insert.on_conflict_do_update(index_elements=["fingerprint"], set_={
                "flops_per_s": insert.excluded.flops_per_s,
                "bytes_per_s": insert.excluded.bytes_per_s,
                "measured_at": insert.excluded.measured_at}))

        self._write(work)

    # -- reusable setup measurements -----------------------------------------------
    def measurement(self, key: str) -> dict[str, Any] | None:
        """A stored setup measurement (e.g. baseline timings), or None."""
        with self.session() as s:
            row = s.get(MeasurementRow, key)
            return None if row is None else dict(row.value)

    def save_measurement(self, key: str, value: dict[str, Any]) -> None:
        """Insert or replace a measurement (an upsert: runs may save at once)."""

        def work(s: Session) -> None:
            dialect = postgresql if self.engine.dialect.name == "postgresql" else sqlite
            insert = dialect.insert(MeasurementRow.__table__).values(
                key=key, value=value, measured_at=datetime.now(UTC))
            s.execute(insert.on_conflict_do_update(index_elements=["key"], set_={
                "value": insert.excluded.value, "measured_at": insert.excluded.measured_at}))

        self._write(work)

    # -- the validation corpus -----------------------------------------------------
    def add_case(self, workload: str, case: Case, run_id: str | None = None) -> bool:
        """Add a case to a workload's corpus; False if one of that name is already there."""
        return self._write(lambda s: self._insert_new(
            s, CaseRow.__table__, ["workload", "name"], workload=workload, name=case.name,
            origin=case.origin, body=case.to_dict(), run_id=run_id))

    def case_history(self, workload: str) -> list[tuple[str, str, datetime, str | None]]:
        """(name, origin, added at, run that found it) of a workload's stored cases, oldest
        first: how the corpus grew."""
        with self.session() as s:
            rows = s.scalars(
                select(CaseRow).where(CaseRow.workload == workload).order_by(CaseRow.id))
            return [(row.name, row.origin, row.created_at, row.run_id) for row in rows]

    def cases(self, workload: str) -> list[Case]:
        """Stored cases of a workload, oldest first."""
        from swarmfab.workloads import Case

        with self.session() as s:
            rows = list(s.scalars(
                select(CaseRow).where(CaseRow.workload == workload).order_by(CaseRow.id)))
        try:
            return [Case.from_dict(row.body) for row in rows]
        except (KeyError, TypeError) as exc:
            raise StoreError(f"a stored case of {workload} is malformed: {exc}") from exc


    def case_rejections(self, workload: str) -> dict[str, int]:
        """Per case name: how many candidates verified after the case entered the corpus
        failed first on it (a stored case's worth; built-in cases count from the start)."""
        with self.session() as s:
            added = {name: at for name, at in s.execute(select(
                CaseRow.name, CaseRow.created_at).where(CaseRow.workload == workload))}
            bodies = s.execute(select(VerdictRow.body, VerdictRow.created_at).join(
                RunRow, RunRow.id == VerdictRow.run_id).where(
                RunRow.workload == workload, VerdictRow.status != Status.ACCEPTED.value))
            counts: dict[str, int] = {}
            for body, when in bodies:
                failed = next((c for c in body.get("checks", []) if not c.get("passed")), None)
                name = failed and failed.get("case")
                if name and (name not in added or when > added[name]):
                    counts[name] = counts.get(name, 0) + 1
            return counts

    # -- champions across generations ----------------------------------------------
    def record_refresh(self, run_id: str, candidate_id: str, state: str, reasons: list[str],
                       host: dict[str, Any], figures: list[dict[str, Any]],
                       verifies: bool | None) -> int:
        """Record one check of a run's champion here (see :class:`RefreshRow`); its id."""

        def work(s: Session) -> int:
            row = RefreshRow(run_id=run_id, candidate_id=candidate_id, state=state,
                             reasons=reasons, host=host, figures=figures, verifies=verifies)
            s.add(row)
            s.flush()
            return row.id

        return self._write(work)

    def set_successor(self, refresh_id: int, successor_run_id: str) -> None:
        with self.session() as s:
            row = s.get(RefreshRow, refresh_id)
            if row is None:
                raise StoreError(f"no refresh {refresh_id}")
            row.successor_run_id = successor_run_id

    def refreshes(self, run_id: str | None = None) -> list[RefreshRow]:
        """Checks of one run's champion (or of all), oldest first."""
        with self.session() as s:
            query = select(RefreshRow).order_by(RefreshRow.id)
            if run_id is not None:
                query = query.where(RefreshRow.run_id == run_id)
            return list(s.scalars(query))


def _candidate_of(stored: dict[str, Any]) -> Candidate:
    body = dict(stored)
    body.pop("id", None)
    body["flags"], body["parents"] = tuple(body["flags"]), tuple(body["parents"])
    return Candidate(**body)
