"""sweeps (#38): `sweeps`, the parameters a sweep's jobs are the points of, and
`jobs.sweep_id`, the sweep a job is one point of

Revision ID: 0030
Revises: 0029
Create Date: 2026-11-27 23:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from gpufleet.store.tables import JSON, UTCDateTime

revision: str = "0030"
down_revision: str | None = "0029"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "sweeps",
        sa.Column("id", sa.String(32), primary_key=True),
        sa.Column("params", JSON, nullable=False),
        sa.Column("samples", sa.Integer),
        sa.Column("max_parallel", sa.Integer),
        sa.Column("size", sa.Integer, nullable=False),
        sa.Column("user_id", sa.String(32)),
        sa.Column("team_id", sa.String(32)),
        sa.Column("submitted_by", sa.String(64)),
        sa.Column("created_at", UTCDateTime, nullable=False),
    )
    op.create_index("ix_sweeps_created", "sweeps", ["created_at"])
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("sweep_id", sa.String(32)))
    op.create_index("ix_jobs_sweep", "jobs", ["sweep_id", "status"])


def downgrade() -> None:
    op.drop_index("ix_jobs_sweep", table_name="jobs")
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("sweep_id")
    op.drop_index("ix_sweeps_created", table_name="sweeps")
    op.drop_table("sweeps")
