"""job_logs by attempt: counting an attempt's lines makes log delivery idempotent

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-22 12:20:00
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_index("ix_job_logs_attempt", "job_logs", ["attempt_id", "seq"])


def downgrade() -> None:
    op.drop_index("ix_job_logs_attempt", table_name="job_logs")
