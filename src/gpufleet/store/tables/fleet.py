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
    # held for the gang at the head of the queue (domain/gang.py): its job, since when, and
    # the domain's words for it ("held for job j_... (2 of 4 nodes)") (0022)
    sa.Column("held_for", sa.String(32)),
    sa.Column("held_since", UTCDateTime),
    sa.Column("held_note", sa.String(200)),
    # its health (domain/gpu_health.py, 0026): faulty GPUs ([{index, reason}], kept until it
    # registers again), a failing preflight's output, why it was drained, and its run of
    # attempts ended by infrastructure failure (the circuit breaker's count)
    sa.Column("gpu_faults", JSON),
    sa.Column("preflight_error", sa.Text),
    sa.Column("drain_reason", sa.String(500)),
    sa.Column("infra_failures", sa.Integer, nullable=False, server_default="0"),
    sa.Index("ix_workers_status", "status"),
    sa.Index("ix_workers_held", "held_for"),
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

# The fleet over time (domain.fleet_history): one row a sample and label group
# (resolution_s 0, kept a day) and one a quarter of an hour (900, kept a week).
fleet_samples = sa.Table(
    "fleet_samples",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("resolution_s", sa.Integer, nullable=False),
    sa.Column("group", sa.String(200), nullable=False),  # "": the whole fleet; else key=value
    sa.Column("at", UTCDateTime, nullable=False),
    sa.Column("workers_busy", sa.Float, nullable=False),
    sa.Column("workers_idle", sa.Float, nullable=False),
    sa.Column("workers_unavailable", sa.Float, nullable=False),
    sa.Column("gpus", sa.Float, nullable=False),
    sa.Column("gpus_busy", sa.Float, nullable=False),
    sa.Column("gpu_util_pct", sa.Float),
    sa.Column("queue_depth", sa.Float, nullable=False),
    sa.Column("jobs_started", sa.Integer, nullable=False),
    sa.Column("wait_p50_s", sa.Float),
    sa.Column("wait_p90_s", sa.Float),
    sa.Index("ix_fleet_samples_series", "resolution_s", "group", "at"),
    sa.Index("ix_fleet_samples_at", "resolution_s", "at"),
)
