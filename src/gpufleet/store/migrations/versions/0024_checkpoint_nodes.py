"""a multi-node job's checkpoints from every node (#35): one `checkpoint_nodes` row a node
that committed its part of a checkpoint (its files stored under `node-K/`); a requeued gang
resumes from the newest checkpoint every node completed (domain/node_checkpoints.py)

Revision ID: 0024
Revises: 0023
Create Date: 2026-11-27 12:30:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from gpufleet.store.tables import UTCDateTime

revision: str = "0024"
down_revision: str | None = "0023"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "checkpoint_nodes",
        sa.Column(
            "checkpoint_id",
            sa.String(32),
            sa.ForeignKey("checkpoints.id", ondelete="CASCADE"),
            primary_key=True,
        ),
        sa.Column("rank", sa.Integer, primary_key=True, autoincrement=False),
        sa.Column("files", sa.Integer, nullable=False),
        sa.Column("size", sa.BigInteger, nullable=False),
        sa.Column("created_at", UTCDateTime, nullable=False),
    )


def downgrade() -> None:
    op.drop_table("checkpoint_nodes")
