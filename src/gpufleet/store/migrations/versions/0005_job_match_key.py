"""jobs.match_key: a freed worker finds the queued jobs it may run through an index, however
many queued jobs it cannot run are ahead of them

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-22 15:30:00
"""

import json
from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0005"
down_revision: str | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def _key(labels: dict[str, str]) -> str:
    """gpufleet.domain.matching.match_key as of this revision (frozen here)."""
    if any(ch in str(value) for value in labels.values() for ch in "*?["):
        return "*"
    key = json.dumps(sorted(labels.items()), separators=(",", ":"))
    return key if len(key) <= 500 else "*"


def upgrade() -> None:
    op.add_column("jobs", sa.Column("match_key", sa.String(512)))
    jobs = sa.table(
        "jobs",
        sa.column("id", sa.String),
        sa.column("worker_labels", sa.JSON),
        sa.column("match_key", sa.String),
    )
    conn = op.get_bind()
    rows = conn.execute(sa.select(jobs.c.id, jobs.c.worker_labels)).all()
    for job_id, labels in rows:
        conn.execute(
            sa.update(jobs).where(jobs.c.id == job_id).values(match_key=_key(labels or {}))
        )
    op.create_index("ix_jobs_match", "jobs", ["status", "match_key", "priority", "created_at"])


def downgrade() -> None:
    op.drop_index("ix_jobs_match", table_name="jobs")
    op.drop_column("jobs", "match_key")
