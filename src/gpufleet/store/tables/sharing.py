"""Sharing a fleet (docs/scheduling.md): users, teams, the queue policy, usage samples."""

from __future__ import annotations

import sqlalchemy as sa

from gpufleet.store.tables.base import JSON, UTCDateTime, metadata

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
    # automation's owner (0027): with --oidc-only, only a service user's API keys are taken
    sa.Column("service", sa.Boolean, nullable=False, server_default=sa.false()),
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
