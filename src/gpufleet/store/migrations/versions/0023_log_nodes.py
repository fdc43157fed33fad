"""a log line's node (#35): `job_logs.node`, the rank of the node of a multi-node (gang)
attempt that printed it, so a gang's log is read whole or one node at a time

Every line before it, and every line of a one-node job (the SimpleTuner agent's included:
it knows no ranks), is node 0's.

Revision ID: 0023
Revises: 0022
Create Date: 2026-11-27 12:40:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0023"
down_revision: str | None = "0022"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("job_logs", sa.Column("node", sa.Integer, nullable=False, server_default="0"))


def downgrade() -> None:
    op.drop_column("job_logs", "node")
