"""Schema migrations: old stores upgrade in place, new ones match the models exactly."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import create_engine, inspect

from swarmfab.errors import StoreError
from swarmfab.knowledge import Store
from swarmfab.knowledge._migrate import head_revision
from swarmfab.knowledge._schema import Base
from swarmfab.records import Status

V1_DUMP = Path(__file__).parent / "data" / "v1_store.sql"  # written by swarmfab 0.1 (no Alembic)
V1_RUN, V1_PARENT, V1_CHILD = "20261129-201550-7b079c", "78eae759df7638d4", "92ab503c73c3bb0e"


def _v1_file(path: Path) -> Path:
    connection = sqlite3.connect(path)
    connection.executescript(V1_DUMP.read_text())
    connection.close()
    return path


def _revision(url: str) -> str | None:
    engine = create_engine(url)
    with engine.connect() as connection:
        revision = MigrationContext.configure(connection).get_current_revision()
    engine.dispose()
    return revision


def test_a_v1_sqlite_store_is_upgraded_in_place_without_losing_anything(tmp_path: Path) -> None:
    path = _v1_file(tmp_path / "old.db")
    assert _revision(f"sqlite:///{path}") is None  # made before swarmfab used Alembic

    store = Store(path)
    assert _revision(f"sqlite:///{path}") == head_revision()
    run = store.run(V1_RUN)
    assert (run.status, run.champion_id, run.workload) == ("finished", V1_CHILD, "kda")
    assert run.host["isa"].startswith("x86_64")
    verdicts = store.verdicts(V1_RUN)
    assert [row.candidate_id for row, _ in verdicts] == [V1_PARENT, V1_CHILD]
    assert all(verdict.status is Status.ACCEPTED for _, verdict in verdicts)
    assert store.candidate(V1_CHILD).parents == (V1_PARENT,)
    assert store.events(V1_RUN) == [("champion-changed", f"{V1_CHILD} by builtin-tiling")]
    assert store.host_peaks("cpu | x86_64 avx | 2 threads") is not None
    assert "lessons" in inspect(store.engine).get_table_names()
    assert store.lesson_evidence() == []  # the old run's lessons appear when a run finishes

    store.finish_run(V1_RUN, "finished", run.summary)  # e.g. resumed and finished again
    [lesson] = store.lesson_evidence("delta-rule")
    assert (lesson.knob, lesson.from_value, lesson.to_value) == ("tile_v", "32", "64")
    assert Store(path).run(V1_RUN).champion_id == V1_CHILD  # reopening is a no-op


def test_a_pre_alembic_store_of_an_unknown_version_is_refused(tmp_path: Path) -> None:
    path = _v1_file(tmp_path / "odd.db")
    with sqlite3.connect(path) as connection:
        connection.execute("UPDATE swarmfab_meta SET value = '7' WHERE key = 'schema_version'")
    connection.close()
    with pytest.raises(StoreError, match="schema version 7 and no migration history"):
        Store(path)
    assert _revision(f"sqlite:///{path}") is None  # left untouched


def test_a_store_from_a_newer_swarmfab_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "new.db"
    Store(path)
    with sqlite3.connect(path) as connection:
        connection.execute("UPDATE alembic_version SET version_num = '9999'")
    connection.close()
    with pytest.raises(StoreError, match="revision 9999, which this swarmfab does not know"):
        Store(path)


@pytest.mark.parametrize("dialect", ["sqlite", "postgresql"])
def test_migrated_schema_matches_the_models(
    dialect: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    url = request.getfixturevalue("postgres_url") if dialect == "postgresql" else (
        tmp_path / "fresh.db")
    store = Store(url)
    with store.engine.connect() as connection:
        differences = compare_metadata(MigrationContext.configure(connection), Base.metadata)
    assert differences == []
