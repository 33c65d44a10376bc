"""Measurements: setup figures a later run may reuse (baseline timings per shape and host).

One row per key; the key names what was measured and everything it depends on (workload,
shape, host fingerprint, thread count, library versions), so a changed host or library
simply misses.

Revision ID: 0003
Revises: 0002
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "measurements",
        sa.Column("key", sa.String(512), primary_key=True),
        sa.Column("value", sa.JSON(), nullable=False),
        sa.Column("measured_at", sa.DateTime(), nullable=False),
    )
    op.execute("UPDATE swarmfab_meta SET value = '3' WHERE key = 'schema_version'")


def downgrade() -> None:
    op.drop_table("measurements")
    op.execute("UPDATE swarmfab_meta SET value = '2' WHERE key = 'schema_version'")
