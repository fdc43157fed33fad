"""Worker pools and their launches (domain/pools.py; #36)."""

from __future__ import annotations

import sqlalchemy as sa

from gpufleet.store.tables.base import JSON, UTCDateTime, metadata

pools = sa.Table(
    "pools",
    metadata,
    sa.Column("id", sa.String(32), primary_key=True),
    sa.Column("name", sa.String(128), nullable=False, unique=True),
    sa.Column("provider", JSON, nullable=False),  # a tagged object: domain.pools.check_provider
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

# One row a launch, written (state `launching`, no instance yet) before its provider is
# called: a crash between the two leaves a row to find, never a second launch, and every
# replica counts it toward the pool's max at once. Its worker (`worker_id`, with the token the
# launch is given) is created in the same transaction. Ended launches stay, so that the
# decision counts failures in a row; they go with their pool.
pool_launches = sa.Table(
    "pool_launches",
    metadata,
    sa.Column("id", sa.String(32), primary_key=True),
    sa.Column(
        "pool_id", sa.String(32), sa.ForeignKey("pools.id", ondelete="CASCADE"), nullable=False
    ),
    sa.Column("state", sa.String(16), nullable=False),  # domain.pools.LaunchState
    sa.Column("instance_id", sa.String(256)),  # what the provider named it, once it answered
    sa.Column("worker_id", sa.String(32)),  # no foreign key: the record outlives the worker
    sa.Column("created_at", UTCDateTime, nullable=False),
    sa.Column("registered_at", UTCDateTime),
    sa.Column("ended_at", UTCDateTime),
    sa.Column("stderr", sa.Text),  # its end: domain.pools.STDERR_KEPT characters
    sa.Column("error", sa.String(512)),
    sa.Column("terminate_tries", sa.Integer, nullable=False, server_default="0"),
    sa.UniqueConstraint("pool_id", "instance_id", name="uq_pool_launch_instance"),
    sa.Index("ix_pool_launches_state", "pool_id", "state"),
    sa.Index("ix_pool_launches_newest", "pool_id", "created_at"),
)
