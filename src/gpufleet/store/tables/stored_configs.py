"""Stored configs and every version each had."""

from __future__ import annotations

import sqlalchemy as sa

from gpufleet.store.tables.base import JSON, UTCDateTime, metadata

configs = sa.Table(
    "configs",
    metadata,
    sa.Column("name", sa.String(128), primary_key=True),
    sa.Column("body", JSON, nullable=False),
    sa.Column("created_at", UTCDateTime, nullable=False),
    sa.Column("updated_at", UTCDateTime, nullable=False),
    # whose it is and the team it is shared with (domain/ownership.py); the latest version's
    # number, digest and writer (a user id), as in config_versions (0016)
    sa.Column("owner_id", sa.String(32), nullable=False),
    sa.Column("team_id", sa.String(32)),
    sa.Column("version", sa.Integer, nullable=False),
    sa.Column("digest", sa.String(64), nullable=False),
    sa.Column("written_by", sa.String(32)),
)

# Every version a stored config had, the latest included; deleted with the config (0016).
config_versions = sa.Table(
    "config_versions",
    metadata,
    sa.Column("name", sa.String(128), primary_key=True),
    sa.Column("version", sa.Integer, primary_key=True),
    sa.Column("body", JSON, nullable=False),
    sa.Column("digest", sa.String(64), nullable=False),  # domain.jobspec.config_digest
    sa.Column("written_by", sa.String(32)),  # the user; null: written before 0016
    sa.Column("written_at", UTCDateTime, nullable=False),
)
