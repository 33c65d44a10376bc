"""Lessons: what each run's evidence says about one knob move in one context.

One row per (run, context, move): the run's child/parent comparisons that differ in that
knob alone, summarised as a log time ratio with its standard error, plus the candidate
pairs behind it. Rows of several runs are merged when lessons are retrieved.

Revision ID: 0002
Revises: 0001
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "lessons",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("run_id", sa.String(32), sa.ForeignKey("runs.id"), nullable=False),
        sa.Column("workload", sa.String(128), nullable=False),
        sa.Column("family", sa.String(128), nullable=False),
        sa.Column("device_class", sa.String(128), nullable=False),
        sa.Column("shape_class", sa.String(64), nullable=False),
        sa.Column("knob", sa.String(128), nullable=False),
        sa.Column("from_value", sa.String(128), nullable=False),
        sa.Column("to_value", sa.String(128), nullable=False),
        sa.Column("log_ratio", sa.Float(), nullable=True),
        sa.Column("log_se", sa.Float(), nullable=True),
        sa.Column("pairs", sa.Integer(), nullable=False),
        sa.Column("failures", sa.Integer(), nullable=False),
        sa.Column("evidence", sa.JSON(), nullable=False),
        sa.Column("created_at", sa.DateTime(), nullable=False),
    )
    op.create_index("ix_lessons_run_move", "lessons",
                    ["run_id", "shape_class", "knob", "from_value", "to_value"], unique=True)
    op.create_index("ix_lessons_family", "lessons", ["family"])
    op.execute("UPDATE swarmfab_meta SET value = '2' WHERE key = 'schema_version'")


def downgrade() -> None:
    op.drop_index("ix_lessons_family", "lessons")
    op.drop_index("ix_lessons_run_move", "lessons")
    op.drop_table("lessons")
    op.execute("UPDATE swarmfab_meta SET value = '1' WHERE key = 'schema_version'")
