"""stored configs have owners, a team they are shared with, and versions (#31)

Every stored config belongs to the user who created it; those from before belong to the
built-in `admin` user. Each write keeps a version (its body, digest and writer) in
config_versions; a config from before becomes its version 1, written by no one known. A job
records the version of the stored config it ran. docs/security.md says who may change what.

Revision ID: 0016
Revises: 0015
Create Date: 2026-11-26 23:30:00
"""

import hashlib
import json
from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from alembic import op

from gpufleet.store.tables import JSON, UTCDateTime

revision: str = "0016"
down_revision: str | None = "0015"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

ADMIN_USER_ID = "u_admin"  # domain.levels.ADMIN_USER_ID, as it was when this ran


def _digest(body: Any) -> str:
    """domain.jobspec.config_digest, as it was when this ran."""
    text = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return hashlib.sha256(text.encode("ascii")).hexdigest()


def upgrade() -> None:
    versions = op.create_table(
        "config_versions",
        sa.Column("name", sa.String(128), primary_key=True),
        sa.Column("version", sa.Integer, primary_key=True),
        sa.Column("body", JSON, nullable=False),
        sa.Column("digest", sa.String(64), nullable=False),
        sa.Column("written_by", sa.String(32)),
        sa.Column("written_at", UTCDateTime, nullable=False),
    )
    for column in (
        sa.Column("owner_id", sa.String(32)),
        sa.Column("team_id", sa.String(32)),
        sa.Column("version", sa.Integer),
        sa.Column("digest", sa.String(64)),
        sa.Column("written_by", sa.String(32)),
    ):
        op.add_column("configs", column)
    # Plain ADD COLUMN, on SQLite too: a batch would copy `jobs` and lose ix_jobs_queue's
    # `priority DESC` (0006).
    for column in (
        sa.Column("config_version", sa.Integer),
        sa.Column("config_digest", sa.String(64)),
        sa.Column("config_written_by", sa.String(32)),
    ):
        op.add_column("jobs", column)

    conn = op.get_bind()
    configs = sa.table(
        "configs",
        sa.column("name", sa.String),
        sa.column("body", JSON),
        sa.column("updated_at", UTCDateTime),
        sa.column("owner_id", sa.String),
        sa.column("version", sa.Integer),
        sa.column("digest", sa.String),
    )
    old = conn.execute(sa.select(configs.c.name, configs.c.body, configs.c.updated_at)).all()
    for name, body, updated_at in old:
        digest = _digest(body)
        conn.execute(
            sa.update(configs)
            .where(configs.c.name == name)
            .values(owner_id=ADMIN_USER_ID, version=1, digest=digest)
        )
        conn.execute(
            sa.insert(versions).values(
                name=name, version=1, body=body, digest=digest, written_at=updated_at
            )
        )
    with op.batch_alter_table("configs") as batch:
        for name in ("owner_id", "version", "digest"):
            batch.alter_column(name, nullable=False)


def downgrade() -> None:
    # SQLite's batch copies `jobs` and loses the `priority DESC` of these (0006, 0014): they
    # go first and are made again as they were.
    ordered = {
        "ix_jobs_queue": ["status"],
        "ix_jobs_team_queue": ["status", "team_id"],
        "ix_jobs_team_match": ["status", "team_id", "match_key"],
    }
    for index in ordered:
        op.drop_index(index, table_name="jobs")
    with op.batch_alter_table("jobs") as batch:
        for name in ("config_written_by", "config_digest", "config_version"):
            batch.drop_column(name)
    for index, head in ordered.items():
        op.create_index(index, "jobs", [*head, sa.text("priority DESC"), "created_at", "id"])
    with op.batch_alter_table("configs") as batch:
        for name in ("written_by", "digest", "version", "team_id", "owner_id"):
            batch.drop_column(name)
    op.drop_table("config_versions")
