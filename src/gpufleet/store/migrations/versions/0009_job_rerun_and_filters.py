"""jobs.rerun_of, and indexes for the Queue's filters

A re-run is a new job that names the job it repeats (`rerun_of`); the old job finds its
re-runs through ix_jobs_rerun_of. The Queue filters by worker and by config, newest first:
ix_jobs_worker and ix_jobs_config serve those lists without reading every job.

Revision ID: 0009
Revises: 0008
Create Date: 2026-11-23 08:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0009"
down_revision: str | None = "0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("rerun_of", sa.String(32)))
    op.create_index("ix_jobs_rerun_of", "jobs", ["rerun_of"])
    op.create_index("ix_jobs_worker", "jobs", ["worker_id", "created_at"])
    op.create_index("ix_jobs_config", "jobs", ["config_name", "created_at"])


def downgrade() -> None:
    op.drop_index("ix_jobs_config", table_name="jobs")
    op.drop_index("ix_jobs_worker", table_name="jobs")
    op.drop_index("ix_jobs_rerun_of", table_name="jobs")
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("rerun_of")
