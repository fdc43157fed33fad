"""The schema, one module an aggregate. Alembic migrations create it; these tables are what
the queries are written against, all on the one `metadata` (base.py)."""

from __future__ import annotations

from gpufleet.store.tables.access import api_keys, identities, revoked_sessions
from gpufleet.store.tables.audit import audit_events
from gpufleet.store.tables.base import JSON, UTCDateTime, metadata
from gpufleet.store.tables.fleet import fleet_samples, worker_events, worker_tokens, workers
from gpufleet.store.tables.job_files import (
    artifacts,
    checkpoint_nodes,
    checkpoints,
    workdir_holders,
)
from gpufleet.store.tables.pools import pool_launches, pools
from gpufleet.store.tables.queue import (
    attempt_nodes,
    job_attempts,
    job_dependencies,
    job_logs,
    jobs,
    progress_points,
    progress_series,
    submit_keys,
    sweeps,
)
from gpufleet.store.tables.secrets import job_secrets
from gpufleet.store.tables.sharing import queue_policy, team_members, teams, usage_samples, users
from gpufleet.store.tables.stored_configs import config_versions, configs
from gpufleet.store.tables.webhook_outbox import webhook_deliveries, webhooks

__all__ = [
    "JSON",
    "UTCDateTime",
    "api_keys",
    "artifacts",
    "attempt_nodes",
    "audit_events",
    "checkpoint_nodes",
    "checkpoints",
    "config_versions",
    "configs",
    "fleet_samples",
    "identities",
    "job_attempts",
    "job_dependencies",
    "job_logs",
    "job_secrets",
    "jobs",
    "metadata",
    "pool_launches",
    "pools",
    "progress_points",
    "progress_series",
    "queue_policy",
    "revoked_sessions",
    "submit_keys",
    "sweeps",
    "team_members",
    "teams",
    "usage_samples",
    "users",
    "webhook_deliveries",
    "webhooks",
    "workdir_holders",
    "worker_events",
    "worker_tokens",
    "workers",
]
