"""audit chain: each sealed entry carries its place in the chain and an HMAC

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-22 12:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("audit_events") as batch:
        batch.add_column(sa.Column("chain_seq", sa.Integer(), nullable=True))
        batch.add_column(sa.Column("mac", sa.String(length=64), nullable=True))
        batch.create_index("ix_audit_chain_seq", ["chain_seq"], unique=True)


def downgrade() -> None:
    with op.batch_alter_table("audit_events") as batch:
        batch.drop_index("ix_audit_chain_seq")
        batch.drop_column("mac")
        batch.drop_column("chain_seq")
