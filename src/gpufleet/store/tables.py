"""The schema. Alembic migrations create it; this module is what queries are written against."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql
from sqlalchemy.engine import Dialect

from gpufleet.errors import StoreError


class UTCDateTime(sa.TypeDecorator[datetime]):
    """Timezone-aware UTC datetimes on every engine (SQLite keeps no zone)."""

    impl = sa.DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError("naive datetime given to the store")
        value = value.astimezone(UTC)
        return value.replace(tzinfo=None) if dialect.name == "sqlite" else value

    def process_result_value(self, value: Any, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if not isinstance(value, datetime):
            raise StoreError(f"the database returned {value!r} for a timestamp; check the schema")
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


metadata = sa.MetaData()
JSON = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")

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

api_keys = sa.Table(
    "api_keys",
    metadata,
    sa.Column("id", sa.String(32), primary_key=True),
    sa.Column("name", sa.String(128), nullable=False),
    sa.Column("key_hash", sa.String(64), nullable=False, unique=True),
    sa.Column("permissions", JSON, nullable=False),
    sa.Column("created_at", UTCDateTime, nullable=False),
    sa.Column("created_by", sa.String(64)),
    sa.Column("revoked_at", UTCDateTime),
    sa.Column("last_used_at", UTCDateTime),  # to the minute (auth.note_use)
    sa.Column("user_id", sa.String(32)),  # whose key it is (0014); null only before 0014
)

# Web sessions signed out before they expire (services/sessions.py): every replica refuses
# their cookies. A row is kept until the session would have expired, then swept.
revoked_sessions = sa.Table(
    "revoked_sessions",
    metadata,
    sa.Column("nonce", sa.String(32), primary_key=True),  # the cookie's random part
    sa.Column("key_id", sa.String(32), nullable=False),
    sa.Column("expires_at", UTCDateTime, nullable=False),
    sa.Column("revoked_at", UTCDateTime, nullable=False),
    sa.Index("ix_revoked_sessions_expires_at", "expires_at"),  # the sweep's
)

configs = sa.Table(
    "configs",
    metadata,
    sa.Column("name", sa.String(128), primary_key=True),
    sa.Column("body", JSON, nullable=False),
    sa.Column("created_at", UTCDateTime, nullable=False),
    sa.Column("updated_at", UTCDateTime, nullable=False),
    # whose it is and the team it is shared with (domain/ownership.py); the latest version's
    # number, digest and writer (a user id), as in config_versions (0016)
    sa.Column("owner_id", sa.String(32), nullable=False),
    sa.Column("team_id", sa.String(32)),
    sa.Column("version", sa.Integer, nullable=False),
    sa.Column("digest", sa.String(64), nullable=False),
    sa.Column("written_by", sa.String(32)),
)

# Every version a stored config had, the latest included; deleted with the config (0016).
config_versions = sa.Table(
    "config_versions",
    metadata,
    sa.Column("name", sa.String(128), primary_key=True),
    sa.Column("version", sa.Integer, primary_key=True),
    sa.Column("body", JSON, nullable=False),
    sa.Column("digest", sa.String(64), nullable=False),  # domain.jobspec.config_digest
    sa.Column("written_by", sa.String(32)),  # the user; null: written before 0016
    sa.Column("written_at", UTCDateTime, nullable=False),
)

jobs = sa.Table(
    "jobs",
    metadata,
    sa.Column("id", sa.String(32), primary_key=True),
    sa.Column("status", sa.String(16), nullable=False),
    sa.Column("config_name", sa.String(128)),
    sa.Column("config", JSON, nullable=False),
    sa.Column("target", sa.String(16), nullable=False),
    sa.Column("worker_labels", JSON, nullable=False),
    sa.Column("gpu_count", sa.Integer, nullable=False),
    sa.Column("priority", sa.Integer, nullable=False),
    sa.Column("max_retries", sa.Integer, nullable=False),
    # domain.states.RetryOn values; rows from before 0007 retried failures too
    sa.Column("retry_on", JSON, nullable=False, server_default='["lost", "failed"]'),
    sa.Column("attempts", sa.Integer, nullable=False),
    sa.Column("current_attempt_id", sa.String(32)),
    sa.Column("worker_id", sa.String(32)),
    sa.Column("error", sa.Text),
    sa.Column("exit_code", sa.Integer),
    sa.Column("progress", JSON),
    sa.Column("submitted_by", sa.String(64)),
    sa.Column("created_at", UTCDateTime, nullable=False),
    sa.Column("updated_at", UTCDateTime, nullable=False),
    sa.Column("started_at", UTCDateTime),
    sa.Column("ended_at", UTCDateTime),
    sa.Column("match_key", sa.String(512)),  # domain.matching.match_key(worker_labels)
    sa.Column("rerun_of", sa.String(32)),  # the job this one re-runs (0009)
    # a pinned job's artifacts outlive the retention sweep (0013)
    sa.Column("artifacts_pinned", sa.Boolean, nullable=False, server_default=sa.false()),
    # who submitted it and for which team; null team: the user is in none (0014)
    sa.Column("user_id", sa.String(32)),
    sa.Column("team_id", sa.String(32)),
    sa.Column("preemptible", sa.Boolean),  # null: the team's setting
    sa.Column("approved_by", sa.String(64)),  # the actor who approved it, when a rule held it
    # the stored config's version it ran, its digest and who wrote it (a user id) (0016)
    sa.Column("config_version", sa.Integer),
    sa.Column("config_digest", sa.String(64)),
    sa.Column("config_written_by", sa.String(32)),
    sa.Index("ix_jobs_match", "status", "match_key", "priority", "created_at"),
    sa.Index("ix_jobs_created", "created_at"),
    sa.Index("ix_jobs_rerun_of", "rerun_of"),
    sa.Index("ix_jobs_worker", "worker_id", "created_at"),
    sa.Index("ix_jobs_config", "config_name", "created_at"),
)
# In dispatch order (priority high to low, then oldest, then id), so that reading the head of
# the queue walks the index and stops, instead of sorting every queued job (0006).
sa.Index("ix_jobs_queue", jobs.c.status, jobs.c.priority.desc(), jobs.c.created_at, jobs.c.id)
# A team's queue in dispatch order: fair share reads the head of the teams furthest below
# their share (0014).
sa.Index(
    "ix_jobs_team_queue",
    jobs.c.status,
    jobs.c.team_id,
    jobs.c.priority.desc(),
    jobs.c.created_at,
    jobs.c.id,
)
# A team's jobs a worker's labels can match (domain.matching.match_keys_for): past the head
# of a team's queue, fair share reads only these, however many jobs of the team it cannot run.
sa.Index(
    "ix_jobs_team_match",
    jobs.c.status,
    jobs.c.team_id,
    jobs.c.match_key,
    jobs.c.priority.desc(),
    jobs.c.created_at,
    jobs.c.id,
)

job_attempts = sa.Table(
    "job_attempts",
    metadata,
    sa.Column("id", sa.String(32), primary_key=True),
    sa.Column(
        "job_id", sa.String(32), sa.ForeignKey("jobs.id", ondelete="CASCADE"), nullable=False
    ),
    sa.Column("worker_id", sa.String(32), nullable=False),
    sa.Column("number", sa.Integer, nullable=False),
    sa.Column("status", sa.String(16), nullable=False),
    sa.Column("offered_at", UTCDateTime, nullable=False),
    sa.Column("acknowledged_at", UTCDateTime),
    sa.Column("started_at", UTCDateTime),
    sa.Column("ended_at", UTCDateTime),
    sa.Column("error", sa.Text),
    sa.Column("exit_code", sa.Integer),
    sa.Column("resumed_from", sa.String(32)),  # the checkpoint it was offered to resume (0013)
    # the queued job it is being stopped for (docs/scheduling.md), and when it was asked (0014)
    sa.Column("preempted_by", sa.String(32)),
    sa.Column("preempt_at", UTCDateTime),
    sa.UniqueConstraint("job_id", "number", name="uq_attempt_number"),
    sa.Index("ix_attempts_job", "job_id"),
    sa.Index("ix_attempts_status", "status", "offered_at"),
    sa.Index("ix_attempts_worker", "worker_id", "offered_at", "id"),  # a worker's job history
)

job_logs = sa.Table(
    "job_logs",
    metadata,
    sa.Column("seq", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column(
        "job_id", sa.String(32), sa.ForeignKey("jobs.id", ondelete="CASCADE"), nullable=False
    ),
    sa.Column("attempt_id", sa.String(32), nullable=False),
    sa.Column("stream", sa.String(8), nullable=False),
    sa.Column("text", sa.Text, nullable=False),
    sa.Column("ts", UTCDateTime, nullable=False),
    sa.Index("ix_job_logs_job", "job_id", "seq"),
    sa.Index("ix_job_logs_attempt", "attempt_id", "seq"),
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

audit_events = sa.Table(
    "audit_events",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("ts", UTCDateTime, nullable=False),
    sa.Column("event_type", sa.String(64), nullable=False),
    sa.Column("actor", sa.String(128), nullable=False),
    sa.Column("target", sa.String(128)),
    sa.Column("client_addr", sa.String(64)),
    sa.Column("detail", JSON, nullable=False),
    sa.Column("chain_seq", sa.Integer),  # place in the HMAC chain, once sealed
    sa.Column("mac", sa.String(64)),
    sa.Index("ix_audit_ts", "ts"),
    sa.Index("ix_audit_chain_seq", "chain_seq", unique=True),
    sa.Index("ix_audit_type", "event_type", "ts"),
)

# A job's progress history, thinned by domain.history (0008): per series (a metric, or ""
# for the step itself) how many points it was sent, and the points it keeps.
progress_series = sa.Table(
    "progress_series",
    metadata,
    sa.Column(
        "job_id", sa.String(32), sa.ForeignKey("jobs.id", ondelete="CASCADE"), primary_key=True
    ),
    sa.Column("series", sa.String(64), primary_key=True),
    sa.Column("received", sa.BigInteger, nullable=False),
)

progress_points = sa.Table(
    "progress_points",
    metadata,
    sa.Column(
        "job_id", sa.String(32), sa.ForeignKey("jobs.id", ondelete="CASCADE"), primary_key=True
    ),
    sa.Column("series", sa.String(64), primary_key=True),
    sa.Column("ordinal", sa.BigInteger, primary_key=True, autoincrement=False),
    sa.Column("attempt", sa.Integer, nullable=False),
    sa.Column("step", sa.BigInteger, nullable=False),
    sa.Column("value", sa.Float, nullable=False),
    sa.Column("ts", UTCDateTime, nullable=False),
)

# ---- webhooks ----------------------------------------------------------------------------

webhooks = sa.Table(
    "webhooks",
    metadata,
    sa.Column("id", sa.String(32), primary_key=True),
    sa.Column("url", sa.String(2048), nullable=False),
    sa.Column("secret_sealed", sa.Text),  # domain.secrets.seal_secret; never returned
    sa.Column("events", JSON, nullable=False),  # domain.webhooks.Subscription values
    sa.Column("created_at", UTCDateTime, nullable=False),
    sa.Column("created_by", sa.String(64)),
)

# The outbox: a row is written in the transaction whose change it reports, then sent (and
# retried) by the `webhooks` loop of whichever replica claims it first.
webhook_deliveries = sa.Table(
    "webhook_deliveries",
    metadata,
    sa.Column("id", sa.String(32), primary_key=True),
    sa.Column(
        "webhook_id",
        sa.String(32),
        sa.ForeignKey("webhooks.id", ondelete="CASCADE"),
        nullable=False,
    ),
    sa.Column("event", sa.String(32), nullable=False),
    sa.Column("body", sa.Text, nullable=False),  # the exact bytes sent, on every try
    sa.Column("status", sa.String(16), nullable=False),
    sa.Column("attempts", sa.Integer, nullable=False),
    sa.Column("created_at", UTCDateTime, nullable=False),
    sa.Column("next_at", UTCDateTime),  # when pending: the next try is due then
    sa.Column("claimed_until", UTCDateTime),  # a replica is sending it until then
    sa.Column("last_attempt_at", UTCDateTime),
    sa.Column("status_code", sa.Integer),
    sa.Column("error", sa.String(512)),
    sa.Index("ix_webhook_deliveries_due", "status", "next_at"),
    sa.Index("ix_webhook_deliveries_log", "webhook_id", "created_at"),
)

# ---- artifacts (docs/artifacts.md) -------------------------------------------------------

# A job's files in the artifact store (gpufleet.artifacts). A row is written only once its
# bytes are in place and verified: a partial or corrupt upload is never listed.
artifacts = sa.Table(
    "artifacts",
    metadata,
    sa.Column("id", sa.String(32), primary_key=True),
    sa.Column(
        "job_id", sa.String(32), sa.ForeignKey("jobs.id", ondelete="CASCADE"), nullable=False
    ),
    sa.Column("attempt_id", sa.String(32), nullable=False),
    sa.Column("path", sa.String(1024), nullable=False),  # relative to the job folder
    sa.Column("kind", sa.String(16), nullable=False),  # domain.records.ArtifactKind
    sa.Column("checkpoint", sa.String(255)),  # the checkpoint's name, for a checkpoint file
    sa.Column("size", sa.BigInteger, nullable=False),
    sa.Column("sha256", sa.String(64), nullable=False),
    sa.Column("key", sa.String(1200), nullable=False),  # artifacts.keys.artifact_key
    sa.Column("created_at", UTCDateTime, nullable=False),
    sa.UniqueConstraint("attempt_id", "path", name="uq_artifact_attempt_path"),
    sa.Index("ix_artifacts_job", "job_id", "created_at"),
)

# A checkpoint the worker committed once its every file was stored: what a later attempt of
# the job resumes from.
checkpoints = sa.Table(
    "checkpoints",
    metadata,
    sa.Column("id", sa.String(32), primary_key=True),
    sa.Column(
        "job_id", sa.String(32), sa.ForeignKey("jobs.id", ondelete="CASCADE"), nullable=False
    ),
    sa.Column("attempt_id", sa.String(32), nullable=False),
    sa.Column("name", sa.String(255), nullable=False),  # the folder's name, checkpoint-1200
    sa.Column("path", sa.String(1024), nullable=False),  # the folder, relative to the job's
    sa.Column("step", sa.BigInteger),
    sa.Column("files", sa.Integer, nullable=False),  # how many files it holds
    sa.Column("size", sa.BigInteger, nullable=False),  # their bytes together
    sa.Column("created_at", UTCDateTime, nullable=False),
    sa.UniqueConstraint("attempt_id", "name", name="uq_checkpoint_attempt_name"),
    sa.Index("ix_checkpoints_job", "job_id", "created_at"),
)

# ---- sharing a fleet (docs/scheduling.md) ------------------------------------------------

users = sa.Table(
    "users",
    metadata,
    sa.Column("id", sa.String(32), primary_key=True),
    sa.Column("name", sa.String(64), nullable=False, unique=True),
    sa.Column("level", sa.String(16), nullable=False),  # domain.levels.Level
    sa.Column("default_team_id", sa.String(32)),
    sa.Column("max_gpus", sa.Integer),  # each: this user's own limit, over the policy's
    sa.Column("max_jobs", sa.Integer),
    sa.Column("max_queued", sa.Integer),
    sa.Column("usage", sa.Float, nullable=False, server_default="0"),  # decayed GPU-seconds
    sa.Column("usage_at", UTCDateTime),  # when `usage` was last decayed to
    sa.Column("created_at", UTCDateTime, nullable=False),
)

teams = sa.Table(
    "teams",
    metadata,
    sa.Column("id", sa.String(32), primary_key=True),
    sa.Column("name", sa.String(64), nullable=False, unique=True),
    sa.Column("weight", sa.Float, nullable=False, server_default="1"),  # its share of the fleet
    sa.Column("max_gpus", sa.Integer),
    sa.Column("max_jobs", sa.Integer),
    sa.Column("preemptible", sa.Boolean, nullable=False, server_default=sa.false()),
    sa.Column("can_preempt", sa.Boolean, nullable=False, server_default=sa.false()),
    sa.Column("usage", sa.Float, nullable=False, server_default="0"),
    sa.Column("usage_at", UTCDateTime),
    sa.Column("created_at", UTCDateTime, nullable=False),
)

team_members = sa.Table(
    "team_members",
    metadata,
    sa.Column(
        "team_id", sa.String(32), sa.ForeignKey("teams.id", ondelete="CASCADE"), primary_key=True
    ),
    sa.Column(
        "user_id", sa.String(32), sa.ForeignKey("users.id", ondelete="CASCADE"), primary_key=True
    ),
    # the user's decayed GPU-seconds inside this team: fair share within a team
    sa.Column("usage", sa.Float, nullable=False, server_default="0"),
    sa.Column("usage_at", UTCDateTime),
    sa.Index("ix_team_members_user", "user_id"),
)

# One row (id 1): the limits, fair share, preemption and approval rules (domain.policy.Policy).
queue_policy = sa.Table(
    "queue_policy",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=False),
    sa.Column("max_jobs", sa.Integer),
    sa.Column("max_gpus", sa.Integer),
    sa.Column("team_max_jobs", sa.Integer),
    sa.Column("team_max_gpus", sa.Integer),
    sa.Column("user_max_jobs", sa.Integer),
    sa.Column("user_max_gpus", sa.Integer),
    sa.Column("user_max_queued", sa.Integer),
    sa.Column("fair_share", sa.Boolean, nullable=False, server_default=sa.false()),
    sa.Column("half_life_s", sa.Float, nullable=False, server_default="604800"),
    sa.Column("preemption", sa.Boolean, nullable=False, server_default=sa.false()),
    sa.Column("min_runtime_s", sa.Float, nullable=False, server_default="600"),
    sa.Column("preempt_grace_s", sa.Float, nullable=False, server_default="120"),
    sa.Column("approve_gpus_over", sa.Integer),
    sa.Column("approve_levels", JSON, nullable=False),
    sa.Column("updated_at", UTCDateTime),
    sa.Column("updated_by", sa.String(64)),
)

# A team's running GPUs and decayed usage over time (the Teams page's chart).
usage_samples = sa.Table(
    "usage_samples",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("team_id", sa.String(32), nullable=False),
    sa.Column("at", UTCDateTime, nullable=False),
    sa.Column("running_gpus", sa.Integer, nullable=False),
    sa.Column("usage", sa.Float, nullable=False),
    sa.Index("ix_usage_samples_team", "team_id", "at"),
)

# ---- secrets for jobs (domain/job_secrets.py) ------------------------------------------------

# A user's or a team's secret, sealed under the server's key (never stored in the clear).
job_secrets = sa.Table(
    "job_secrets",
    metadata,
    sa.Column("scope", sa.String(8), primary_key=True),  # domain.job_secrets.Scope
    sa.Column("owner_id", sa.String(32), primary_key=True),  # a user's or a team's id
    sa.Column("name", sa.String(64), primary_key=True),
    sa.Column("value_sealed", sa.Text, nullable=False),
    sa.Column("created_at", UTCDateTime, nullable=False),
    sa.Column("updated_at", UTCDateTime, nullable=False),
    sa.Column("written_by", sa.String(64), nullable=False),  # the actor who last wrote it
)
