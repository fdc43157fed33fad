"""Workers: their rows, their tokens, and what happened to each."""

from __future__ import annotations

import sqlalchemy as sa

from gpufleet.store.tables.base import JSON, UTCDateTime, metadata

workers = sa.Table(
    "workers",
    metadata,
    sa.Column("id", sa.String(32), primary_key=True),
    sa.Column("name", sa.String(128), nullable=False),
    sa.Column("status", sa.String(16), nullable=False),
    sa.Column("worker_type", sa.String(16), nullable=False),
    sa.Column("type_set_by_admin", sa.Boolean, nullable=False),
    sa.Column("admin_labels", JSON, nullable=False),
    sa.Column("reported_labels", JSON, nullable=False),
    sa.Column("drained", sa.Boolean, nullable=False),
    sa.Column("is_local", sa.Boolean, nullable=False),
    sa.Column("registered", sa.Boolean, nullable=False),
    sa.Column("gpu_count", sa.Integer, nullable=False),
    sa.Column("gpu_name", sa.String(256)),
    sa.Column("gpu_vram_gb", sa.Float),
    sa.Column("accelerator_type", sa.String(32)),
    sa.Column("capabilities", JSON, nullable=False),
    sa.Column("current_job_id", sa.String(32)),
    sa.Column("current_attempt_id", sa.String(32)),
    sa.Column("stream_owner", sa.String(80)),
    sa.Column("jobs_run", sa.Integer, nullable=False),
    sa.Column("created_at", UTCDateTime, nullable=False),
    sa.Column("last_heartbeat", UTCDateTime),
    sa.Column("connected_at", UTCDateTime),
    sa.Column("offline_since", UTCDateTime),
    # The newest GPU sample a heartbeat carried (domain.records.GpuStat, as JSON), and when.
    sa.Column("gpu_stats", JSON),
    sa.Column("gpu_stats_at", UTCDateTime),
    sa.Column("token_issued_at", UTCDateTime),
    sa.Index("ix_workers_status", "status"),
    sa.Index("ix_workers_match", "status", "is_local", "gpu_count", "id"),
)

worker_tokens = sa.Table(
    "worker_tokens",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column(
        "worker_id", sa.String(32), sa.ForeignKey("workers.id", ondelete="CASCADE"), nullable=False
    ),
    sa.Column("token_hash", sa.String(64), nullable=False, unique=True),
    sa.Column("created_at", UTCDateTime, nullable=False),
    sa.Column("revoked_at", UTCDateTime),
)


worker_events = sa.Table(
    "worker_events",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("worker_id", sa.String(32), nullable=False),
    sa.Column("payload", JSON, nullable=False),
    sa.Column("created_at", UTCDateTime, nullable=False),
    sa.Index("ix_worker_events_worker", "worker_id", "id"),
)
