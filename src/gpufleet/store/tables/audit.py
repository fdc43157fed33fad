"""The audit log, hash-chained (domain/audit_chain.py)."""

from __future__ import annotations

import sqlalchemy as sa

from gpufleet.store.tables.base import JSON, UTCDateTime, metadata

audit_events = sa.Table(
    "audit_events",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("ts", UTCDateTime, nullable=False),
    sa.Column("event_type", sa.String(64), nullable=False),
    sa.Column("actor", sa.String(128), nullable=False),
    sa.Column("target", sa.String(128)),
    sa.Column("client_addr", sa.String(64)),
    sa.Column("detail", JSON, nullable=False),
    sa.Column("chain_seq", sa.Integer),  # place in the HMAC chain, once sealed
    sa.Column("mac", sa.String(64)),
    sa.Index("ix_audit_ts", "ts"),
    sa.Index("ix_audit_chain_seq", "chain_seq", unique=True),
    sa.Index("ix_audit_type", "event_type", "ts"),
)
