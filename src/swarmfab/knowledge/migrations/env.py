"""Alembic environment of the knowledge store.

swarmfab runs its migrations itself when a store is opened (``Store`` passes an open
connection in ``config.attributes``); contributors generate new revisions with
``alembic -c src/swarmfab/knowledge/migrations/alembic.ini revision -m "..."``.
"""

from __future__ import annotations

from alembic import context
from sqlalchemy import Connection, create_engine

from swarmfab.knowledge._schema import Base

config = context.config


def _run(connection: Connection) -> None:
    context.configure(connection=connection, target_metadata=Base.metadata,
                      render_as_batch=True)  # SQLite alters tables by copying them
    with context.begin_transaction():
        context.run_migrations()


given = config.attributes.get("connection")
if given is not None:
    _run(given)
else:  # the alembic command line, on the URL named in alembic.ini or -x url=...
    url = context.get_x_argument(as_dictionary=True).get("url") or config.get_main_option(
        "sqlalchemy.url")
    with create_engine(str(url)).connect() as connection:
        _run(connection)
