"""progress_series, progress_points: a job's progress history for the charts, bounded

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-23 08:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from gpufleet.store.tables import UTCDateTime

revision: str = "0008"
down_revision: str | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def _job_id() -> sa.Column[str]:
    return sa.Column(
        "job_id", sa.String(32), sa.ForeignKey("jobs.id", ondelete="CASCADE"), primary_key=True
    )


def upgrade() -> None:
    op.create_table(
        "progress_series",
        _job_id(),
        sa.Column("series", sa.String(64), primary_key=True),
        sa.Column("received", sa.BigInteger, nullable=False),
    )
    op.create_table(
        "progress_points",
        _job_id(),
        sa.Column("series", sa.String(64), primary_key=True),
        sa.Column("ordinal", sa.BigInteger, primary_key=True, autoincrement=False),
        sa.Column("attempt", sa.Integer, nullable=False),
        sa.Column("step", sa.BigInteger, nullable=False),
        sa.Column("value", sa.Float, nullable=False),
        sa.Column("ts", UTCDateTime, nullable=False),
    )


def downgrade() -> None:
    op.drop_table("progress_points")
    op.drop_table("progress_series")
