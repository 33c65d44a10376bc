"""Schema migrations, run by the store itself whenever it opens a database.

The Alembic revisions ship inside the package (``migrations/versions``), so a store made
by any earlier swarmfab is brought up to date in place, for SQLite files and PostgreSQL
databases alike. A store made before swarmfab used Alembic (schema v1, no
``alembic_version`` table) is stamped as revision 0001 and upgraded from there.

Several processes may open one store at once: the upgrade runs in one transaction that
first takes an exclusive lock (a PostgreSQL advisory lock; SQLite's write lock via
``BEGIN IMMEDIATE``), and whoever gets it second finds the schema current and does nothing.
"""

from __future__ import annotations

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from alembic.util.exc import CommandError
from sqlalchemy import Connection, Engine, inspect, text

from swarmfab.errors import StoreError

__all__ = ["head_revision", "upgrade"]

MIGRATIONS = "swarmfab.knowledge:migrations"
_LOCK_KEY = 0x5357_4D46  # "SWMF": the advisory lock every swarmfab migration takes


def _config(connection: Connection | None = None) -> Config:
    config = Config()
    config.set_main_option("script_location", MIGRATIONS)
    config.attributes["connection"] = connection
    return config


def head_revision() -> str:
    head = ScriptDirectory.from_config(_config()).get_current_head()
    assert head is not None, "the package ships no migrations"
    return head


def _current(connection: Connection) -> str | None:
    return MigrationContext.configure(connection).get_current_revision()


def upgrade(engine: Engine, url: str) -> None:
    """Bring the store at ``url`` to the newest schema; a no-op when it is already there."""
    head = head_revision()
    with engine.connect() as connection:
        if _current(connection) == head:
            return
    with engine.begin() as connection:
        _lock(connection)
        current = _current(connection)
        if current == head:
            return  # another process migrated while we waited for the lock
        if current is None and inspect(connection).has_table("runs"):
            _adopt_v1(connection, url)
        elif current is not None:
            _check_known(current, url)
        command.upgrade(_config(connection), "head")


def _lock(connection: Connection) -> None:
    if connection.dialect.name == "postgresql":
        connection.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": _LOCK_KEY})
    elif connection.dialect.name == "sqlite":
        connection.exec_driver_sql("BEGIN IMMEDIATE")  # waits up to the busy timeout


def _adopt_v1(connection: Connection, url: str) -> None:
    """A store from before Alembic: stamp it as revision 0001 if it really is schema v1."""
    version = connection.execute(text(
        "SELECT value FROM swarmfab_meta WHERE key = 'schema_version'")).scalar()
    if version != "1":
        raise StoreError(
            f"the store at {url} has schema version {version} and no migration history; "
            "this swarmfab can only upgrade version 1: use a new --db path or the swarmfab "
            "that made it")
    command.stamp(_config(connection), "0001")


def _check_known(revision: str, url: str) -> None:
    try:
        ScriptDirectory.from_config(_config()).get_revision(revision)
    except CommandError as exc:
        raise StoreError(
            f"the store at {url} is at schema revision {revision}, which this swarmfab does "
            f"not know (made by a newer version?): upgrade swarmfab or use a new --db path"
        ) from exc
