"""dependencies (#38): `job_dependencies`, a job's dependencies in the submit's order, and
on `jobs` the dependency it waits on (`waits_on`), whether any job depends on it
(`has_dependents`) and the artifacts it takes from its dependencies (`inputs`)

Revision ID: 0029
Revises: 0028
Create Date: 2026-11-27 23:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from gpufleet.store.tables import JSON

revision: str = "0029"
down_revision: str | None = "0028"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # plain ADD COLUMN: a batch would copy `jobs` and lose its indexes' order
    op.add_column("jobs", sa.Column("waits_on", sa.String(32)))
    op.add_column(
        "jobs", sa.Column("has_dependents", sa.Boolean, nullable=False, server_default=sa.false())
    )
    op.add_column("jobs", sa.Column("inputs", JSON))
    op.create_table(
        "job_dependencies",
        sa.Column(
            "job_id",
            sa.String(32),
            sa.ForeignKey("jobs.id", ondelete="CASCADE"),
            primary_key=True,
        ),
        sa.Column(
            "upstream_id",
            sa.String(32),
            sa.ForeignKey("jobs.id", ondelete="CASCADE"),
            primary_key=True,
        ),
        sa.Column("condition", sa.String(16), nullable=False),
        sa.Column("position", sa.Integer, nullable=False),
    )
    op.create_index("ix_job_dependencies_upstream", "job_dependencies", ["upstream_id"])


def downgrade() -> None:
    op.drop_index("ix_job_dependencies_upstream", table_name="job_dependencies")
    op.drop_table("job_dependencies")
    # plain DROP COLUMN (SQLite 3.35+), as above
    for column in ("inputs", "has_dependents", "waits_on"):
        op.drop_column("jobs", column)
