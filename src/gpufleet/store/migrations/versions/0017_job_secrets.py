"""secrets for jobs (#31): a user's or a team's named secret, sealed under the server's key

A config's env refers to one (`{"secret": "hf"}`); the worker fetches its value for the
job's live attempt. docs/security.md ("Secrets for jobs") says how.

Revision ID: 0017
Revises: 0016
Create Date: 2026-11-26 23:30:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from gpufleet.store.tables import UTCDateTime

revision: str = "0017"
down_revision: str | None = "0016"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "job_secrets",
        sa.Column("scope", sa.String(8), primary_key=True),
        sa.Column("owner_id", sa.String(32), primary_key=True),
        sa.Column("name", sa.String(64), primary_key=True),
        sa.Column("value_sealed", sa.Text, nullable=False),
        sa.Column("created_at", UTCDateTime, nullable=False),
        sa.Column("updated_at", UTCDateTime, nullable=False),
        sa.Column("written_by", sa.String(64), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("job_secrets")
