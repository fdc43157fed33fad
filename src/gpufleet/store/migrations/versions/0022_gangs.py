"""multi-node (gang) jobs (#35): a job's node count (`jobs.nodes`), the workers held for the
gang at the head of the queue (`workers.held_for`, `held_since`, `held_note`), and one row a
node of an attempt (`attempt_nodes`)

`attempt_nodes` is what the rendezvous builds on: each node's worker and rank, its state
(offered, then acknowledged; the later steps add ready, running, ended), the address its
worker advertises and, on rank 0, the free port it chose for `MASTER_PORT`. A report is
fenced by attempt and node rank through it. A one-node job has no rows: its attempt is its
one node, as before.

Revision ID: 0022
Revises: 0021
Create Date: 2026-11-27 09:30:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from gpufleet.store.tables import UTCDateTime

revision: str = "0022"
down_revision: str | None = "0021"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("jobs", sa.Column("nodes", sa.Integer, nullable=False, server_default="1"))
    # Whether a gang waits: one indexed read, the one `has_queued_jobs` was (dispatch.py).
    op.create_index("ix_jobs_nodes", "jobs", ["status", "nodes"])
    op.add_column("workers", sa.Column("held_for", sa.String(32)))
    op.add_column("workers", sa.Column("held_since", UTCDateTime))
    op.add_column("workers", sa.Column("held_note", sa.String(200)))
    op.create_index("ix_workers_held", "workers", ["held_for"])
    op.create_table(
        "attempt_nodes",
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
        sa.Column("number", sa.Integer, nullable=False),
        sa.Column("worker_id", sa.String(32), nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("offered_at", UTCDateTime, nullable=False),
        sa.Column("acknowledged_at", UTCDateTime),
        sa.Column("address", sa.String(256)),
        sa.Column("port", sa.Integer),
        sa.Column("ended_at", UTCDateTime),
        sa.Column("error", sa.Text),
        sa.Index("ix_attempt_nodes_worker", "worker_id", "offered_at"),
        sa.Index("ix_attempt_nodes_job", "job_id", "number"),
    )


def downgrade() -> None:
    op.drop_table("attempt_nodes")
    op.drop_index("ix_workers_held", table_name="workers")
    for column in ("held_note", "held_since", "held_for"):
        op.drop_column("workers", column)
    op.drop_index("ix_jobs_nodes", table_name="jobs")
    op.drop_column("jobs", "nodes")
