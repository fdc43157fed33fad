"""workers.gpu_stats, gpu_stats_at; job_attempts by worker: the worker page

`gpufleet worker` sends each GPU's utilisation and memory in use with its heartbeat; the
newest sample is kept on the worker's row (nothing for agents that send none). A worker's
job history reads its attempts newest first (ix_attempts_worker).

Revision ID: 0010
Revises: 0009
Create Date: 2026-11-23 08:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

import gpufleet.store.tables

revision: str = "0010"
down_revision: str | None = "0009"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("workers") as batch:
        batch.add_column(
            sa.Column(
                "gpu_stats",
                sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql"),
            )
        )
        batch.add_column(
            sa.Column("gpu_stats_at", gpufleet.store.tables.UTCDateTime(timezone=True))
        )
    op.create_index("ix_attempts_worker", "job_attempts", ["worker_id", "offered_at", "id"])


def downgrade() -> None:
    op.drop_index("ix_attempts_worker", table_name="job_attempts")
    with op.batch_alter_table("workers") as batch:
        batch.drop_column("gpu_stats_at")
        batch.drop_column("gpu_stats")
