"""worker pools (#36): `pools`, what an admin says workers can be launched from, and
`pool_launches`, one row a launch, written before its provider is called (state `launching`)
so that a crash never launches twice and max_workers counts it at once

The providers and the loop that launches come later; the decision
(domain/capacity.py) reads the launches in flight and the failures in a row from here.

Revision ID: 0025
Revises: 0024
Create Date: 2026-11-28 09:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

from gpufleet.store.tables import UTCDateTime

revision: str = "0025"
down_revision: str | None = "0024"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

JSON = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")


def upgrade() -> None:
    op.create_table(
        "pools",
        sa.Column("id", sa.String(32), primary_key=True),
        sa.Column("name", sa.String(128), nullable=False, unique=True),
        sa.Column("provider", JSON, nullable=False),
        sa.Column("labels", JSON, nullable=False),
        sa.Column("gpu_count", sa.Integer, nullable=False),
        sa.Column("gpu_name", sa.String(256)),
        sa.Column("worker_type", sa.String(16), nullable=False),
        sa.Column("min_workers", sa.Integer, nullable=False),
        sa.Column("max_workers", sa.Integer, nullable=False),
        sa.Column("idle_timeout_s", sa.Integer, nullable=False),
        sa.Column("launch_timeout_s", sa.Integer, nullable=False),
        sa.Column("price_per_hour", sa.Float, nullable=False),
        sa.Column("max_cost_per_hour", sa.Float),
        sa.Column("enabled", sa.Boolean, nullable=False),
        sa.Column("created_at", UTCDateTime, nullable=False),
        sa.Column("created_by", sa.String(64)),
        sa.Column("updated_at", UTCDateTime, nullable=False),
    )
    op.create_table(
        "pool_launches",
        sa.Column("id", sa.String(32), primary_key=True),
        sa.Column(
            "pool_id",
            sa.String(32),
            sa.ForeignKey("pools.id", ondelete="CASCADE"),
            nullable=False,
        ),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("instance_id", sa.String(256)),
        sa.Column("worker_id", sa.String(32)),
        sa.Column("created_at", UTCDateTime, nullable=False),
        sa.Column("registered_at", UTCDateTime),
        sa.Column("ended_at", UTCDateTime),
        sa.Column("stderr", sa.Text),
        sa.Column("error", sa.String(512)),
        sa.Column("terminate_tries", sa.Integer, nullable=False, server_default="0"),
        sa.UniqueConstraint("pool_id", "instance_id", name="uq_pool_launch_instance"),
    )
    op.create_index("ix_pool_launches_state", "pool_launches", ["pool_id", "state"])
    op.create_index("ix_pool_launches_newest", "pool_launches", ["pool_id", "created_at"])


def downgrade() -> None:
    op.drop_table("pool_launches")
    op.drop_table("pools")
