"""Jobs, their attempts, logs and progress history."""

from __future__ import annotations

import sqlalchemy as sa

from gpufleet.store.tables.base import JSON, UTCDateTime, metadata

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
    sa.Column("rejected_by", sa.String(64)),  # the actor who rejected it (its error says why)
    # the stored config's version it ran, its digest and who wrote it (a user id) (0016)
    sa.Column("config_version", sa.Integer),
    sa.Column("config_digest", sa.String(64)),
    sa.Column("config_written_by", sa.String(32)),
    # the sha256 hex of the workdir snapshot its config names, kept while it is not ended (0020)
    sa.Column("workdir", sa.String(64)),
    # the machines it runs on: 1, or a gang of N workers (domain/gang.py) (0022)
    sa.Column("nodes", sa.Integer, nullable=False, server_default="1"),
    # Dependencies (0029, domain/dependencies.py): the dependency it waits on (null: none, it
    # may be offered), whether any job depends on it, and the artifacts it takes from them.
    sa.Column("waits_on", sa.String(32)),
    sa.Column("has_dependents", sa.Boolean, nullable=False, server_default=sa.false()),
    sa.Column("inputs", JSON),
    sa.Column("sweep_id", sa.String(32)),  # the sweep it is a point of (0030)
    sa.Index("ix_jobs_match", "status", "match_key", "priority", "created_at"),
    sa.Index("ix_jobs_created", "created_at"),
    sa.Index("ix_jobs_rerun_of", "rerun_of"),
    sa.Index("ix_jobs_worker", "worker_id", "created_at"),
    sa.Index("ix_jobs_config", "config_name", "created_at"),
    sa.Index("ix_jobs_workdir", "workdir"),
    sa.Index("ix_jobs_nodes", "status", "nodes"),  # whether a gang waits, in one read (0022)
    sa.Index("ix_jobs_sweep", "sweep_id", "status"),  # a sweep's jobs, its running ones (0030)
)

# A sweep (domain/sweeps.py): the parameters its jobs are the points of, who made it (0030).
sweeps = sa.Table(
    "sweeps",
    metadata,
    sa.Column("id", sa.String(32), primary_key=True),
    sa.Column("params", JSON, nullable=False),  # name -> its values, in the order given
    sa.Column("samples", sa.Integer),  # drawn at random: how many; null: the whole grid
    sa.Column("max_parallel", sa.Integer),  # its jobs on workers at once, at most
    sa.Column("size", sa.Integer, nullable=False),  # the points it ran
    sa.Column("user_id", sa.String(32)),
    sa.Column("team_id", sa.String(32)),
    sa.Column("submitted_by", sa.String(64)),
    sa.Column("created_at", UTCDateTime, nullable=False),
    sa.Index("ix_sweeps_created", "created_at"),
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
    sa.Index("ix_attempts_started", "started_at"),  # the jobs that started since a sample (0018)
)

# One row a node of a gang's attempt (0022): its rank and worker, where it stands in the
# two-phase start (offered, acknowledged, ...), its worker's address and, on rank 0, the port
# chosen for MASTER_PORT. A one-node attempt has none: it is its own one node.
attempt_nodes = sa.Table(
    "attempt_nodes",
    metadata,
    sa.Column(
        "attempt_id",
        sa.String(32),
        sa.ForeignKey("job_attempts.id", ondelete="CASCADE"),
        primary_key=True,
    ),
    sa.Column("rank", sa.Integer, primary_key=True, autoincrement=False),
    sa.Column(
        "job_id", sa.String(32), sa.ForeignKey("jobs.id", ondelete="CASCADE"), nullable=False
    ),
    sa.Column("number", sa.Integer, nullable=False),  # the attempt's number
    sa.Column("worker_id", sa.String(32), nullable=False),
    sa.Column("state", sa.String(16), nullable=False),  # domain.states.NodeState
    sa.Column("offered_at", UTCDateTime, nullable=False),
    sa.Column("acknowledged_at", UTCDateTime),
    sa.Column("address", sa.String(256)),
    sa.Column("port", sa.Integer),
    sa.Column("ended_at", UTCDateTime),
    sa.Column("error", sa.Text),
    sa.Index("ix_attempt_nodes_worker", "worker_id", "offered_at"),
    sa.Index("ix_attempt_nodes_job", "job_id", "number"),
)

job_logs = sa.Table(
    "job_logs",
    metadata,
    sa.Column("seq", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column(
        "job_id", sa.String(32), sa.ForeignKey("jobs.id", ondelete="CASCADE"), nullable=False
    ),
    sa.Column("attempt_id", sa.String(32), nullable=False),
    # The rank of the node that printed it (0023): 0 for a one-node job.
    sa.Column("node", sa.Integer, nullable=False, server_default="0"),
    sa.Column("stream", sa.String(8), nullable=False),
    sa.Column("text", sa.Text, nullable=False),
    sa.Column("ts", UTCDateTime, nullable=False),
    sa.Index("ix_job_logs_job", "job_id", "seq"),
    sa.Index("ix_job_logs_attempt", "attempt_id", "seq"),
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

# A job's dependencies (0029): it runs after `upstream_id` ended as `condition` says
# (domain/dependencies.py `On`), in the submit's order (`position`).
job_dependencies = sa.Table(
    "job_dependencies",
    metadata,
    sa.Column(
        "job_id", sa.String(32), sa.ForeignKey("jobs.id", ondelete="CASCADE"), primary_key=True
    ),
    sa.Column(
        "upstream_id",
        sa.String(32),
        sa.ForeignKey("jobs.id", ondelete="CASCADE"),
        primary_key=True,
    ),
    sa.Column("condition", sa.String(16), nullable=False),
    sa.Column("position", sa.Integer, nullable=False),
    sa.Index("ix_job_dependencies_upstream", "upstream_id"),
)

# Idempotent submit (0028, domain/idempotency.py): a user's key names the job its first submit
# made, for 24 hours from `created_at`. Written first in the submit's transaction, so the
# primary key decides a race between replicas; the job's row follows in that transaction
# (the foreign key is checked at commit).
submit_keys = sa.Table(
    "submit_keys",
    metadata,
    sa.Column("user_id", sa.String(32), primary_key=True),
    sa.Column("key", sa.String(256), primary_key=True),
    sa.Column(
        "job_id",
        sa.String(32),
        sa.ForeignKey("jobs.id", ondelete="CASCADE", deferrable=True, initially="DEFERRED"),
        nullable=False,
    ),
    sa.Column("created_at", UTCDateTime, nullable=False),
    sa.Index("ix_submit_keys_job", "job_id"),
)
