"""ix_jobs_queue in dispatch order: priority descending, then age, then id

The head of the queue is read by priority high to low, then oldest first. An index on
(status, priority, created_at) ascending cannot give that mixed order, so SQLite sorted every
queued job to return twenty: 12 ms with 20,000 queued, 60 ms with 100,000, on each freed
worker.

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-22 18:40:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0006"
down_revision: str | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.drop_index("ix_jobs_queue", table_name="jobs")
    op.create_index(
        "ix_jobs_queue", "jobs", ["status", sa.text("priority DESC"), "created_at", "id"]
    )


def downgrade() -> None:
    op.drop_index("ix_jobs_queue", table_name="jobs")
    op.create_index("ix_jobs_queue", "jobs", ["status", "priority", "created_at"])
