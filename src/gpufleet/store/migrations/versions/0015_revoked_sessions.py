"""revoked_sessions: web sessions signed out before they expire

Signing out ends a session on the server: its nonce is kept until the session would have
expired, and every replica refuses its cookie (services/sessions.py).

Revision ID: 0015
Revises: 0014
Create Date: 2026-11-26 23:30:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from gpufleet.store.tables import UTCDateTime

revision: str = "0015"
down_revision: str | None = "0014"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "revoked_sessions",
        sa.Column("nonce", sa.String(32), primary_key=True),
        sa.Column("key_id", sa.String(32), nullable=False),
        sa.Column("expires_at", UTCDateTime, nullable=False),
        sa.Column("revoked_at", UTCDateTime, nullable=False),
    )
    op.create_index("ix_revoked_sessions_expires_at", "revoked_sessions", ["expires_at"])


def downgrade() -> None:
    op.drop_index("ix_revoked_sessions_expires_at", table_name="revoked_sessions")
    op.drop_table("revoked_sessions")
