"""the fleet over time (#33): fleet_samples, one row a sample and label group (kept a day)
and one a quarter of an hour (kept a week); domain/fleet_history.py says what each holds

Revision ID: 0018
Revises: 0017
Create Date: 2026-11-28 10:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from gpufleet.store.tables import UTCDateTime

revision: str = "0018"
down_revision: str | None = "0017"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "fleet_samples",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("resolution_s", sa.Integer, nullable=False),
        sa.Column("group", sa.String(200), nullable=False),
        sa.Column("at", UTCDateTime, nullable=False),
        sa.Column("workers_busy", sa.Float, nullable=False),
        sa.Column("workers_idle", sa.Float, nullable=False),
        sa.Column("workers_unavailable", sa.Float, nullable=False),
        sa.Column("gpus", sa.Float, nullable=False),
        sa.Column("gpus_busy", sa.Float, nullable=False),
        sa.Column("gpu_util_pct", sa.Float),
        sa.Column("queue_depth", sa.Float, nullable=False),
        sa.Column("jobs_started", sa.Integer, nullable=False),
        sa.Column("wait_p50_s", sa.Float),
        sa.Column("wait_p90_s", sa.Float),
    )
    op.create_index("ix_fleet_samples_series", "fleet_samples", ["resolution_s", "group", "at"])
    op.create_index("ix_fleet_samples_at", "fleet_samples", ["resolution_s", "at"])
    op.create_index("ix_attempts_started", "job_attempts", ["started_at"])


def downgrade() -> None:
    op.drop_index("ix_attempts_started", "job_attempts")
    op.drop_table("fleet_samples")
