"""single sign-on (#37 B): `identities`, a provider's issuer and subject to the user they
sign in as, and `users.service`, the owners of automation's keys (with --oidc-only, the only
keys taken); the built-in admin is one (admin.token stays the operator's key)

Revision ID: 0027
Revises: 0026
Create Date: 2026-11-27 20:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from gpufleet.store.tables import UTCDateTime

revision: str = "0027"
down_revision: str | None = "0026"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "identities",
        sa.Column("issuer", sa.String(255), primary_key=True),
        sa.Column("subject", sa.String(255), primary_key=True),
        sa.Column(
            "user_id",
            sa.String(32),
            sa.ForeignKey("users.id", ondelete="CASCADE"),
            nullable=False,
        ),
        sa.Column("created_at", UTCDateTime, nullable=False),
        sa.Column("signed_in_at", UTCDateTime, nullable=False),
    )
    op.create_index("ix_identities_user", "identities", ["user_id"])
    # Plain ADD and DROP COLUMN (SQLite 3.35+): a batch alter on SQLite copies `users`, and
    # dropping the old copy deletes every row that references a user (team memberships:
    # tests/unit/test_sqlite_store.py's downgrade test).
    op.add_column(
        "users", sa.Column("service", sa.Boolean, nullable=False, server_default=sa.false())
    )
    op.execute("UPDATE users SET service = true WHERE id = 'u_admin'")


def downgrade() -> None:
    op.drop_column("users", "service")
    op.drop_index("ix_identities_user", table_name="identities")
    op.drop_table("identities")
