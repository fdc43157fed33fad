"""workers.token_issued_at: when a worker's live token was made

The Workers page tells a worker whose token was rotated since it last spoke ("token
rotated, waiting for the worker") from one whose process merely exited. Workers stored
before take the time of their live token.

Revision ID: 0012
Revises: 0011
Create Date: 2026-11-23 08:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

import gpufleet.store.tables

revision: str = "0012"
down_revision: str | None = "0011"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("workers") as batch:
        batch.add_column(
            sa.Column(
                "token_issued_at", gpufleet.store.tables.UTCDateTime(timezone=True), nullable=True
            )
        )
    op.execute(
        "UPDATE workers SET token_issued_at = (SELECT max(t.created_at) FROM worker_tokens t "
        "WHERE t.worker_id = workers.id AND t.revoked_at IS NULL)"
    )


def downgrade() -> None:
    with op.batch_alter_table("workers") as batch:
        batch.drop_column("token_issued_at")
