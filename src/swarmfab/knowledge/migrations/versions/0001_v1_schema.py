"""Schema v1: runs, candidates, verdicts, cases, host peaks, events.

The tables exactly as swarmfab created them before it used Alembic: a store made then is
stamped with this revision when first opened (no DDL runs) and upgraded from here.

Revision ID: 0001
Revises:
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "swarmfab_meta",
        sa.Column("key", sa.String(64), primary_key=True),
        sa.Column("value", sa.Text(), nullable=False),
    )
    op.create_table(
        "runs",
        sa.Column("id", sa.String(32), primary_key=True),
        sa.Column("workload", sa.String(128), nullable=False),
        sa.Column("goal", sa.JSON(), nullable=False),
        sa.Column("host", sa.JSON(), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("started_at", sa.DateTime(), nullable=False),
        sa.Column("finished_at", sa.DateTime(), nullable=True),
        sa.Column("champion_id", sa.String(64), nullable=True),
        sa.Column("summary", sa.JSON(), nullable=True),
    )
    op.create_table(
        "candidates",
        sa.Column("id", sa.String(64), primary_key=True),
        sa.Column("workload", sa.String(128), nullable=False),
        sa.Column("backend", sa.String(32), nullable=False),
        sa.Column("body", sa.JSON(), nullable=False),
        sa.Column("agent", sa.String(128), nullable=False),
        sa.Column("created_at", sa.DateTime(), nullable=False),
    )
    op.create_table(
        "verdicts",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("run_id", sa.String(32), sa.ForeignKey("runs.id"), nullable=False),
        sa.Column("candidate_id", sa.String(64), sa.ForeignKey("candidates.id"),
                  nullable=False),
        sa.Column("agent", sa.String(128), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("speedup", sa.Float(), nullable=True),
        sa.Column("became_champion", sa.Boolean(), nullable=False),
        sa.Column("demoted", sa.Text(), nullable=True),
        sa.Column("body", sa.JSON(), nullable=False),
        sa.Column("created_at", sa.DateTime(), nullable=False),
    )
    op.create_index("ix_verdicts_run_candidate", "verdicts", ["run_id", "candidate_id"],
                    unique=True)
    op.create_table(
        "host_peaks",
        sa.Column("fingerprint", sa.String(512), primary_key=True),
        sa.Column("flops_per_s", sa.Float(), nullable=False),
        sa.Column("bytes_per_s", sa.Float(), nullable=False),
        sa.Column("measured_at", sa.DateTime(), nullable=False),
    )
    op.create_table(
        "cases",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("workload", sa.String(128), nullable=False),
        sa.Column("name", sa.String(256), nullable=False),
        sa.Column("origin", sa.Text(), nullable=False),
        sa.Column("body", sa.JSON(), nullable=False),
        sa.Column("run_id", sa.String(32), nullable=True),
        sa.Column("created_at", sa.DateTime(), nullable=False),
    )
    op.create_index("ix_cases_workload_name", "cases", ["workload", "name"], unique=True)
    op.create_table(
        "events",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("run_id", sa.String(32), sa.ForeignKey("runs.id"), nullable=False),
        sa.Column("kind", sa.String(64), nullable=False),
        sa.Column("detail", sa.Text(), nullable=False),
        sa.Column("created_at", sa.DateTime(), nullable=False),
    )
    op.bulk_insert(sa.table("swarmfab_meta", sa.column("key"), sa.column("value")),
                   [{"key": "schema_version", "value": "1"}])


def downgrade() -> None:
    for table in ("events", "cases", "host_peaks", "verdicts", "candidates", "runs",
                  "swarmfab_meta"):
        op.drop_table(table)
