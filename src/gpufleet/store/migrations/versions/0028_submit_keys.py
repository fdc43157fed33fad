"""idempotent submit (#38): `submit_keys`, a user's idempotency key to the job its first
submit made (for 24 hours from `created_at`; domain/idempotency.py); its primary key decides
a race between replicas

Revision ID: 0028
Revises: 0027
Create Date: 2026-11-27 23:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from gpufleet.store.tables import UTCDateTime

revision: str = "0028"
down_revision: str | None = "0027"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "submit_keys",
        sa.Column("user_id", sa.String(32), primary_key=True),
        sa.Column("key", sa.String(256), primary_key=True),
        sa.Column(
            "job_id",
            sa.String(32),
            sa.ForeignKey("jobs.id", ondelete="CASCADE", deferrable=True, initially="DEFERRED"),
            nullable=False,
        ),
        sa.Column("created_at", UTCDateTime, nullable=False),
    )
    op.create_index("ix_submit_keys_job", "submit_keys", ["job_id"])


def downgrade() -> None:
    op.drop_index("ix_submit_keys_job", table_name="submit_keys")
    op.drop_table("submit_keys")
