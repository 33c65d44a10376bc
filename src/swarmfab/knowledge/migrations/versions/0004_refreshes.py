"""Refreshes: champions re-checked on a later host or software, and their successors.

Revision ID: 0004
Revises: 0003
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "refreshes",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("run_id", sa.String(32), sa.ForeignKey("runs.id"), nullable=False),
        sa.Column("candidate_id", sa.String(64), nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("verifies", sa.Boolean(), nullable=True),
        sa.Column("reasons", sa.JSON(), nullable=False),
        sa.Column("host", sa.JSON(), nullable=False),
        sa.Column("figures", sa.JSON(), nullable=False),
        sa.Column("successor_run_id", sa.String(32), sa.ForeignKey("runs.id"), nullable=True),
        sa.Column("checked_at", sa.DateTime(), nullable=False),
    )
    op.create_index("ix_refreshes_run", "refreshes", ["run_id"])
    op.execute("UPDATE swarmfab_meta SET value = '4' WHERE key = 'schema_version'")


def downgrade() -> None:
    op.drop_index("ix_refreshes_run", table_name="refreshes")
    op.drop_table("refreshes")
    op.execute("UPDATE swarmfab_meta SET value = '3' WHERE key = 'schema_version'")
