"""webhooks and their delivery outbox; when each API key was last used

Revision ID: 0011
Revises: 0010
Create Date: 2026-11-23 08:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

from gpufleet.store.tables import UTCDateTime

revision: str = "0011"
down_revision: str | None = "0010"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

JSON = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")


def upgrade() -> None:
    with op.batch_alter_table("api_keys") as batch:
        batch.add_column(sa.Column("last_used_at", UTCDateTime))
    op.create_table(
        "webhooks",
        sa.Column("id", sa.String(32), primary_key=True),
        sa.Column("url", sa.String(2048), nullable=False),
        sa.Column("secret_sealed", sa.Text),
        sa.Column("events", JSON, nullable=False),
        sa.Column("created_at", UTCDateTime, nullable=False),
        sa.Column("created_by", sa.String(64)),
    )
    op.create_table(
        "webhook_deliveries",
        sa.Column("id", sa.String(32), primary_key=True),
        sa.Column(
            "webhook_id",
            sa.String(32),
            sa.ForeignKey("webhooks.id", ondelete="CASCADE"),
            nullable=False,
        ),
        sa.Column("event", sa.String(32), nullable=False),
        sa.Column("body", sa.Text, nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("attempts", sa.Integer, nullable=False),
        sa.Column("created_at", UTCDateTime, nullable=False),
        sa.Column("next_at", UTCDateTime),
        sa.Column("claimed_until", UTCDateTime),
        sa.Column("last_attempt_at", UTCDateTime),
        sa.Column("status_code", sa.Integer),
        sa.Column("error", sa.String(512)),
    )
    op.create_index("ix_webhook_deliveries_due", "webhook_deliveries", ["status", "next_at"])
    op.create_index("ix_webhook_deliveries_log", "webhook_deliveries", ["webhook_id", "created_at"])


def downgrade() -> None:
    op.drop_table("webhook_deliveries")
    op.drop_table("webhooks")
    with op.batch_alter_table("api_keys") as batch:
        batch.drop_column("last_used_at")
