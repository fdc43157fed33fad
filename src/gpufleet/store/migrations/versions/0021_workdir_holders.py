"""who holds a workdir snapshot (#34): the users who uploaded its bytes and the teams they
shared it with (domain/workdir_access.py); only they, and admins, may name it in a job

The submitters of the jobs that named a snapshot before hold it, and share it with those
jobs' teams, so their re-runs go on.

Revision ID: 0021
Revises: 0020
Create Date: 2026-11-27 07:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from gpufleet.store.tables import UTCDateTime

revision: str = "0021"
down_revision: str | None = "0020"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_ADMIN_USER_ID = "u_admin"  # domain.levels.ADMIN_USER_ID when this was written


def upgrade() -> None:
    op.create_table(
        "workdir_holders",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("digest", sa.String(64), nullable=False),
        sa.Column("user_id", sa.String(32), nullable=False),
        sa.Column("team_id", sa.String(32)),
        sa.Column("held_at", UTCDateTime, nullable=False),
    )
    op.create_index("ix_workdir_holders_digest", "workdir_holders", ["digest", "user_id"])
    jobs = _table("jobs", "workdir", "user_id", "team_id", "created_at")
    holders = _table("workdir_holders", "digest", "user_id", "team_id", "held_at")
    user = sa.func.coalesce(jobs.c.user_id, _ADMIN_USER_ID)
    first = sa.func.min(jobs.c.created_at)
    named = jobs.c.workdir.is_not(None)
    held = sa.select(jobs.c.workdir, user, sa.null(), first).where(named)
    shared = sa.select(jobs.c.workdir, user, jobs.c.team_id, first).where(
        named, jobs.c.team_id.is_not(None)
    )
    columns = ["digest", "user_id", "team_id", "held_at"]
    op.execute(sa.insert(holders).from_select(columns, held.group_by(jobs.c.workdir, user)))
    op.execute(
        sa.insert(holders).from_select(
            columns, shared.group_by(jobs.c.workdir, user, jobs.c.team_id)
        )
    )


def _table(name: str, *columns: str) -> sa.TableClause:
    """The table as this migration reads or writes it (the last column a time)."""
    *texts, at = columns
    return sa.table(name, *(sa.column(c, sa.String) for c in texts), sa.column(at, UTCDateTime))


def downgrade() -> None:
    op.drop_index("ix_workdir_holders_digest", table_name="workdir_holders")
    op.drop_table("workdir_holders")
