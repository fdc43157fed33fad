"""a job's workdir (#34): the sha256 of the snapshot its config names (`jobs.workdir`), kept
while a job naming it is not ended (services/workdirs.py)

Revision ID: 0020
Revises: 0019
Create Date: 2026-11-27 06:30:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0020"
down_revision: str | None = "0019"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("jobs", sa.Column("workdir", sa.String(64)))
    op.create_index("ix_jobs_workdir", "jobs", ["workdir"])


def downgrade() -> None:
    op.drop_index("ix_jobs_workdir", table_name="jobs")
    # plain DROP COLUMN (SQLite 3.35+): a batch would copy `jobs` and lose its indexes' order
    op.drop_column("jobs", "workdir")
