"""Secrets for jobs (domain/job_secrets.py)."""

from __future__ import annotations

import sqlalchemy as sa

from gpufleet.store.tables.base import UTCDateTime, metadata

# A user's or a team's secret, sealed under the server's key (never stored in the clear).
job_secrets = sa.Table(
    "job_secrets",
    metadata,
    sa.Column("scope", sa.String(8), primary_key=True),  # domain.job_secrets.Scope
    sa.Column("owner_id", sa.String(32), primary_key=True),  # a user's or a team's id
    sa.Column("name", sa.String(64), primary_key=True),
    sa.Column("value_sealed", sa.Text, nullable=False),
    sa.Column("created_at", UTCDateTime, nullable=False),
    sa.Column("updated_at", UTCDateTime, nullable=False),
    sa.Column("written_by", sa.String(64), nullable=False),  # the actor who last wrote it
)
