"""artifacts and checkpoints (#17); jobs.artifacts_pinned; job_attempts.resumed_from

An artifact row is written only once its bytes are in the artifact store and verified
(docs/artifacts.md), unique per attempt and path. A checkpoint row is written when the worker
commits a checkpoint whose every file is stored; only then can an attempt resume from it.

Revision ID: 0013
Revises: 0012
Create Date: 2026-11-23 19:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from gpufleet.store.tables import UTCDateTime

revision: str = "0013"
down_revision: str | None = "0012"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "artifacts",
        sa.Column("id", sa.String(32), primary_key=True),
        sa.Column(
            "job_id", sa.String(32), sa.ForeignKey("jobs.id", ondelete="CASCADE"), nullable=False
        ),
        sa.Column("attempt_id", sa.String(32), nullable=False),
        sa.Column("path", sa.String(1024), nullable=False),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("checkpoint", sa.String(255)),
        sa.Column("size", sa.BigInteger, nullable=False),
        sa.Column("sha256", sa.String(64), nullable=False),
        sa.Column("key", sa.String(1200), nullable=False),
        sa.Column("created_at", UTCDateTime, nullable=False),
        sa.UniqueConstraint("attempt_id", "path", name="uq_artifact_attempt_path"),
    )
    op.create_index("ix_artifacts_job", "artifacts", ["job_id", "created_at"])
    op.create_table(
        "checkpoints",
        sa.Column("id", sa.String(32), primary_key=True),
        sa.Column(
            "job_id", sa.String(32), sa.ForeignKey("jobs.id", ondelete="CASCADE"), nullable=False
        ),
        sa.Column("attempt_id", sa.String(32), nullable=False),
        sa.Column("name", sa.String(255), nullable=False),
        sa.Column("path", sa.String(1024), nullable=False),
        sa.Column("step", sa.BigInteger),
        sa.Column("files", sa.Integer, nullable=False),
        sa.Column("size", sa.BigInteger, nullable=False),
        sa.Column("created_at", UTCDateTime, nullable=False),
        sa.UniqueConstraint("attempt_id", "name", name="uq_checkpoint_attempt_name"),
    )
    op.create_index("ix_checkpoints_job", "checkpoints", ["job_id", "created_at"])
    # Plain ADD COLUMN, on SQLite too: a batch would copy `jobs` into a new table, and the
    # copy's ix_jobs_queue would lose its `priority DESC` (0006).
    op.add_column(
        "jobs",
        sa.Column("artifacts_pinned", sa.Boolean, nullable=False, server_default=sa.false()),
    )
    op.add_column("job_attempts", sa.Column("resumed_from", sa.String(32)))


def downgrade() -> None:
    with op.batch_alter_table("job_attempts") as batch:
        batch.drop_column("resumed_from")
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("artifacts_pinned")
    # SQLite's batch copied the table, and ix_jobs_queue lost its order: made again as 0006.
    op.drop_index("ix_jobs_queue", table_name="jobs")
    op.create_index(
        "ix_jobs_queue", "jobs", ["status", sa.text("priority DESC"), "created_at", "id"]
    )
    op.drop_table("checkpoints")
    op.drop_table("artifacts")
