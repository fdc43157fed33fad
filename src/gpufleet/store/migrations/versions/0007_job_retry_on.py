"""jobs.retry_on: which ended attempts a job is retried after

A job whose process failed used to be retried like one whose worker was lost. Now only lost
attempts are retried unless the submit says `retry_on: ["lost", "failed"]`; jobs stored
before keep the old behaviour.

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-23 05:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0007"
down_revision: str | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(
            sa.Column("retry_on", sa.JSON, nullable=False, server_default='["lost", "failed"]')
        )


def downgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("retry_on")
