"""SQLAlchemy tables of the knowledge store.

These classes are what the code reads and writes; the DDL that creates and changes the
tables lives in the Alembic revisions under ``migrations/versions`` (a test checks that
the two agree).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, ClassVar

from sqlalchemy import JSON, Float, ForeignKey, Index, Integer, String, Text
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

__all__ = [
    "Base",
    "CandidateRow",
    "CaseRow",
    "EventRow",
    "HostPeaksRow",
    "LessonRow",
    "MeasurementRow",
    "MetaRow",
    "RefreshRow",
    "RunRow",
    "VerdictRow",
]

SCHEMA_VERSION = 4  # kept in swarmfab_meta by the migrations


def _now() -> datetime:
    return datetime.now(UTC)


class Base(DeclarativeBase):
    type_annotation_map: ClassVar[dict[Any, Any]] = {dict: JSON, list: JSON}


class MetaRow(Base):
    __tablename__ = "swarmfab_meta"
    key: Mapped[str] = mapped_column(String(64), primary_key=True)
    value: Mapped[str] = mapped_column(Text)


class RunRow(Base):
    __tablename__ = "runs"
    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    workload: Mapped[str] = mapped_column(String(128))
    goal: Mapped[dict] = mapped_column(JSON)
    host: Mapped[dict] = mapped_column(JSON)
    status: Mapped[str] = mapped_column(String(16))
    started_at: Mapped[datetime] = mapped_column(default=_now)
    finished_at: Mapped[datetime | None] = mapped_column(default=None)
    champion_id: Mapped[str | None] = mapped_column(String(64), default=None)
    summary: Mapped[dict | None] = mapped_column(JSON, default=None)


class CandidateRow(Base):
    __tablename__ = "candidates"
    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    workload: Mapped[str] = mapped_column(String(128))
    backend: Mapped[str] = mapped_column(String(32))
    body: Mapped[dict] = mapped_column(JSON)  # sources, entry, flags, knobs, parents, ...
    agent: Mapped[str] = mapped_column(String(128))
    created_at: Mapped[datetime] = mapped_column(default=_now)


class VerdictRow(Base):
    __tablename__ = "verdicts"
    __table_args__ = (Index("ix_verdicts_run_candidate", "run_id", "candidate_id", unique=True),)
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    run_id: Mapped[str] = mapped_column(ForeignKey("runs.id"))
    candidate_id: Mapped[str] = mapped_column(ForeignKey("candidates.id"))
    agent: Mapped[str] = mapped_column(String(128))
    status: Mapped[str] = mapped_column(String(16))
    reason: Mapped[str] = mapped_column(Text)
    speedup: Mapped[float | None] = mapped_column(Float, default=None)
    became_champion: Mapped[bool] = mapped_column(default=False)
    demoted: Mapped[str | None] = mapped_column(Text, default=None)  # why it lost the crown
    body: Mapped[dict] = mapped_column(JSON)  # the full Verdict
    created_at: Mapped[datetime] = mapped_column(default=_now)


class HostPeaksRow(Base):
    """Measured peaks of one host fingerprint (CPU model, ISA, thread count)."""

    __tablename__ = "host_peaks"
    fingerprint: Mapped[str] = mapped_column(String(512), primary_key=True)
    flops_per_s: Mapped[float] = mapped_column(Float)
    bytes_per_s: Mapped[float] = mapped_column(Float)
    measured_at: Mapped[datetime] = mapped_column(default=_now)


class MeasurementRow(Base):
    """A setup figure a later run may reuse; ``key`` names everything it depends on."""

    __tablename__ = "measurements"
    key: Mapped[str] = mapped_column(String(512), primary_key=True)
    value: Mapped[dict] = mapped_column(JSON)
    measured_at: Mapped[datetime] = mapped_column(default=_now)


class CaseRow(Base):
    """A validation case added to a workload's corpus (by a user or found by fuzzing)."""

    __tablename__ = "cases"
    __table_args__ = (Index("ix_cases_workload_name", "workload", "name", unique=True),)
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    workload: Mapped[str] = mapped_column(String(128))
    name: Mapped[str] = mapped_column(String(256))
    origin: Mapped[str] = mapped_column(Text)
    body: Mapped[dict] = mapped_column(JSON)  # Case.to_dict()
    run_id: Mapped[str | None] = mapped_column(String(32), default=None)
    created_at: Mapped[datetime] = mapped_column(default=_now)


class EventRow(Base):
    """Something that happened in a run: champion changed, corpus grew, intervention..."""

    __tablename__ = "events"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    run_id: Mapped[str] = mapped_column(ForeignKey("runs.id"))
    kind: Mapped[str] = mapped_column(String(64))
    detail: Mapped[str] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(default=_now)


class LessonRow(Base):
    """One run's evidence about one knob move (``from_value`` -> ``to_value``) in one context.

    ``log_ratio`` is the inverse-variance mean of log(child time / parent time) over the
    run's pairs that differ in this knob alone (None when every such child failed), with
    its standard error ``log_se``; ``evidence`` lists the pairs and failures behind it.
    """

    __tablename__ = "lessons"
    __table_args__ = (
        Index("ix_lessons_run_move", "run_id", "shape_class", "knob", "from_value", "to_value",
              unique=True),
        Index("ix_lessons_family", "family"),
    )
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    run_id: Mapped[str] = mapped_column(ForeignKey("runs.id"))
    workload: Mapped[str] = mapped_column(String(128))
    family: Mapped[str] = mapped_column(String(128))
    device_class: Mapped[str] = mapped_column(String(128))
    shape_class: Mapped[str] = mapped_column(String(64))
    knob: Mapped[str] = mapped_column(String(128))
    from_value: Mapped[str] = mapped_column(String(128))  # JSON of the knob value
    to_value: Mapped[str] = mapped_column(String(128))
    log_ratio: Mapped[float | None] = mapped_column(Float, default=None)
    log_se: Mapped[float | None] = mapped_column(Float, default=None)
    pairs: Mapped[int] = mapped_column(Integer)
    failures: Mapped[int] = mapped_column(Integer)
    evidence: Mapped[list] = mapped_column(JSON)
    created_at: Mapped[datetime] = mapped_column(default=_now)


class RefreshRow(Base):
    """One check of a run's champion on a later host or software (``swarmfab refresh``).

    ``state`` is ``current`` or ``stale``; ``reasons`` say why it is stale (a changed ISA,
    compiler or torch; a failed re-verification; slower than recorded); ``figures`` hold
    the speedups recorded and measured now, per shape. A stale champion's short new run
    is ``successor_run_id``: the lineage across generations follows these links.
    """

    __tablename__ = "refreshes"
    __table_args__ = (Index("ix_refreshes_run", "run_id"),)
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    run_id: Mapped[str] = mapped_column(ForeignKey("runs.id"))
    candidate_id: Mapped[str] = mapped_column(String(64))
    state: Mapped[str] = mapped_column(String(16))
    verifies: Mapped[bool | None] = mapped_column(default=None)
    reasons: Mapped[list] = mapped_column(JSON)
    host: Mapped[dict] = mapped_column(JSON)
    figures: Mapped[list] = mapped_column(JSON)
    successor_run_id: Mapped[str | None] = mapped_column(ForeignKey("runs.id"), default=None)
    checked_at: Mapped[datetime] = mapped_column(default=_now)
