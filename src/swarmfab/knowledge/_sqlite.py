"""A SQLite store's connection settings: WAL, a busy timeout, foreign keys."""

from __future__ import annotations

import sqlite3
import time
from typing import Any

from sqlalchemy import Engine, event

__all__ = ["SQLITE_BUSY_S", "sqlite_pragmas"]

SQLITE_BUSY_S = 30.0


def sqlite_pragmas(engine: Engine) -> None:
    @event.listens_for(engine, "connect")
    def _on_connect(connection: Any, _record: Any) -> None:
        cursor = connection.cursor()
        cursor.execute(f"PRAGMA busy_timeout={int(SQLITE_BUSY_S * 1000)}")
        _write_ahead_log(cursor)
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.close()


def _write_ahead_log(cursor: Any) -> None:
    """Switch the file to WAL (it stays so). Processes that open a new store at the same
    instant race for that switch, and SQLite answers the losers "database is locked" at
    once, without waiting out the busy timeout: they try again until it has passed."""
    deadline = time.monotonic() + SQLITE_BUSY_S
    while True:
        try:
            cursor.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() > deadline:
                raise
            time.sleep(0.05)
