"""workers in offer order: matching a job reads the first fitting rows, not the whole fleet

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-22 14:40:00
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_index("ix_workers_match", "workers", ["status", "is_local", "gpu_count", "id"])


def downgrade() -> None:
    op.drop_index("ix_workers_match", table_name="workers")
