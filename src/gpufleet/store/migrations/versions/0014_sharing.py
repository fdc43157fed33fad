"""sharing a fleet (#18): users, teams, their members, the queue policy, usage samples

Every API key belongs to a user; the built-in `admin` user (level admin) takes every key
made before, and the jobs those keys submitted. Jobs record their user and team, whether
they may be preempted and who approved them; an attempt records the job it is being
preempted for. docs/scheduling.md says what each is for.

Revision ID: 0014
Revises: 0013
Create Date: 2026-11-23 22:00:00
"""

from collections.abc import Sequence
from datetime import UTC, datetime

import sqlalchemy as sa
from alembic import op

from gpufleet.store.tables import JSON, UTCDateTime

revision: str = "0014"
down_revision: str | None = "0013"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

ADMIN_USER_ID = "u_admin"  # domain.levels.ADMIN_USER_ID, as it was when this ran


def _usage() -> list[sa.Column[object]]:
    """Decayed GPU-seconds, and when they were last decayed to."""
    return [
        sa.Column("usage", sa.Float, nullable=False, server_default="0"),
        sa.Column("usage_at", UTCDateTime),
    ]


def upgrade() -> None:
    op.create_table(
        "users",
        sa.Column("id", sa.String(32), primary_key=True),
        sa.Column("name", sa.String(64), nullable=False, unique=True),
        sa.Column("level", sa.String(16), nullable=False),
        sa.Column("default_team_id", sa.String(32)),
        sa.Column("max_gpus", sa.Integer),
        sa.Column("max_jobs", sa.Integer),
        sa.Column("max_queued", sa.Integer),
        *_usage(),
        sa.Column("created_at", UTCDateTime, nullable=False),
    )
    op.create_table(
        "teams",
        sa.Column("id", sa.String(32), primary_key=True),
        sa.Column("name", sa.String(64), nullable=False, unique=True),
        sa.Column("weight", sa.Float, nullable=False, server_default="1"),
        sa.Column("max_gpus", sa.Integer),
        sa.Column("max_jobs", sa.Integer),
        sa.Column("preemptible", sa.Boolean, nullable=False, server_default=sa.false()),
        sa.Column("can_preempt", sa.Boolean, nullable=False, server_default=sa.false()),
        *_usage(),
        sa.Column("created_at", UTCDateTime, nullable=False),
    )
    op.create_table(
        "team_members",
        sa.Column(
            "team_id",
            sa.String(32),
            sa.ForeignKey("teams.id", ondelete="CASCADE"),
            primary_key=True,
        ),
        sa.Column(
            "user_id",
            sa.String(32),
            sa.ForeignKey("users.id", ondelete="CASCADE"),
            primary_key=True,
        ),
        *_usage(),
    )
    op.create_index("ix_team_members_user", "team_members", ["user_id"])
    policy = op.create_table(
        "queue_policy",
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
    op.create_table(
        "usage_samples",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("team_id", sa.String(32), nullable=False),
        sa.Column("at", UTCDateTime, nullable=False),
        sa.Column("running_gpus", sa.Integer, nullable=False),
        sa.Column("usage", sa.Float, nullable=False),
    )
    op.create_index("ix_usage_samples_team", "usage_samples", ["team_id", "at"])
    # Plain ADD COLUMN, on SQLite too: a batch would copy `jobs` and lose ix_jobs_queue's
    # `priority DESC` (0006).
    for column in (
        sa.Column("user_id", sa.String(32)),
        sa.Column("team_id", sa.String(32)),
        sa.Column("preemptible", sa.Boolean),
        sa.Column("approved_by", sa.String(64)),
    ):
        op.add_column("jobs", column)
    op.create_index(
        "ix_jobs_team_queue",
        "jobs",
        ["status", "team_id", sa.text("priority DESC"), "created_at", "id"],
    )
    op.create_index(
        "ix_jobs_team_match",
        "jobs",
        ["status", "team_id", "match_key", sa.text("priority DESC"), "created_at", "id"],
    )
    op.add_column("job_attempts", sa.Column("preempted_by", sa.String(32)))
    op.add_column("job_attempts", sa.Column("preempt_at", UTCDateTime))
    op.add_column("api_keys", sa.Column("user_id", sa.String(32)))

    users = sa.table(
        "users",
        sa.column("id", sa.String),
        sa.column("name", sa.String),
        sa.column("level", sa.String),
        sa.column("usage", sa.Float),
        sa.column("created_at", UTCDateTime),
    )
    op.bulk_insert(
        users,
        [
            {
                "id": ADMIN_USER_ID,
                "name": "admin",
                "level": "admin",
                "usage": 0.0,
                "created_at": datetime.now(UTC),
            }
        ],
    )
    op.bulk_insert(policy, [{"id": 1, "approve_levels": ["viewer"]}])
    op.execute(f"UPDATE api_keys SET user_id = '{ADMIN_USER_ID}'")
    op.execute(f"UPDATE jobs SET user_id = '{ADMIN_USER_ID}' WHERE submitted_by LIKE 'key:%'")


def downgrade() -> None:
    with op.batch_alter_table("api_keys") as batch:
        batch.drop_column("user_id")
    with op.batch_alter_table("job_attempts") as batch:
        batch.drop_column("preempt_at")
        batch.drop_column("preempted_by")
    op.drop_index("ix_jobs_team_match", table_name="jobs")
    op.drop_index("ix_jobs_team_queue", table_name="jobs")
    with op.batch_alter_table("jobs") as batch:
        for name in ("approved_by", "preemptible", "team_id", "user_id"):
            batch.drop_column(name)
    # SQLite's batch copied the table, and ix_jobs_queue lost its order: made again as 0006.
    op.drop_index("ix_jobs_queue", table_name="jobs")
    op.create_index(
        "ix_jobs_queue", "jobs", ["status", sa.text("priority DESC"), "created_at", "id"]
    )
    for table in ("usage_samples", "queue_policy", "team_members", "teams", "users"):
        op.drop_table(table)
