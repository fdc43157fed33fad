"""webhook payload formats and approval outcomes (#33): a webhook's `format` (gpufleet, slack,
discord), and who rejected a held job (`jobs.rejected_by`, beside `approved_by`)

Revision ID: 0019
Revises: 0018
Create Date: 2026-11-27 03:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0019"
down_revision: str | None = "0018"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column(
        "webhooks", sa.Column("format", sa.String(16), nullable=False, server_default="gpufleet")
    )
    op.add_column("jobs", sa.Column("rejected_by", sa.String(64)))


def downgrade() -> None:
    # plain DROP COLUMN (SQLite 3.35+): a batch would copy `jobs` and lose its indexes' order
    op.drop_column("jobs", "rejected_by")
    op.drop_column("webhooks", "format")
