"""worker health (#37 A): each worker's faulty GPUs (`gpu_faults`: index and why, kept until
it registers again), its failing preflight's output (`preflight_error`; None while it passes
or has none), why it was drained (`drain_reason`: the circuit breaker says so) and its run of
attempts ended by infrastructure failure (`infra_failures`, the breaker's count)

Revision ID: 0026
Revises: 0025
Create Date: 2026-11-28 20:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0026"
down_revision: str | None = "0025"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

JSON = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")


def upgrade() -> None:
    op.add_column("workers", sa.Column("gpu_faults", JSON))
    op.add_column("workers", sa.Column("preflight_error", sa.Text))
    op.add_column("workers", sa.Column("drain_reason", sa.String(500)))
    op.add_column(
        "workers", sa.Column("infra_failures", sa.Integer, nullable=False, server_default="0")
    )


def downgrade() -> None:
    for column in ("infra_failures", "drain_reason", "preflight_error", "gpu_faults"):
        op.drop_column("workers", column)
