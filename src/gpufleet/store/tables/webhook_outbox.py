"""Webhooks and their outbox."""

from __future__ import annotations

import sqlalchemy as sa

from gpufleet.store.tables.base import JSON, UTCDateTime, metadata

webhooks = sa.Table(
    "webhooks",
    metadata,
    sa.Column("id", sa.String(32), primary_key=True),
    sa.Column("url", sa.String(2048), nullable=False),
    sa.Column("secret_sealed", sa.Text),  # domain.secrets.seal_secret; never returned
    sa.Column("events", JSON, nullable=False),  # domain.webhooks.Subscription values
    sa.Column("created_at", UTCDateTime, nullable=False),
    sa.Column("created_by", sa.String(64)),
    # domain.webhooks.PayloadFormat: the body's shape (gpufleet's own, Slack's, Discord's)
    sa.Column("format", sa.String(16), nullable=False, server_default="gpufleet"),
)

# The outbox: a row is written in the transaction whose change it reports, then sent (and
# retried) by the `webhooks` loop of whichever replica claims it first.
webhook_deliveries = sa.Table(
    "webhook_deliveries",
    metadata,
    sa.Column("id", sa.String(32), primary_key=True),
    sa.Column(
        "webhook_id",
        sa.String(32),
        sa.ForeignKey("webhooks.id", ondelete="CASCADE"),
        nullable=False,
    ),
    sa.Column("event", sa.String(32), nullable=False),
    # gpufleet's JSON, sent as is on every try (another format: made from it at each send)
    sa.Column("body", sa.Text, nullable=False),
    sa.Column("status", sa.String(16), nullable=False),
    sa.Column("attempts", sa.Integer, nullable=False),
    sa.Column("created_at", UTCDateTime, nullable=False),
    sa.Column("next_at", UTCDateTime),  # when pending: the next try is due then
    sa.Column("claimed_until", UTCDateTime),  # a replica is sending it until then
    sa.Column("last_attempt_at", UTCDateTime),
    sa.Column("status_code", sa.Integer),
    sa.Column("error", sa.String(512)),
    sa.Index("ix_webhook_deliveries_due", "status", "next_at"),
    sa.Index("ix_webhook_deliveries_log", "webhook_id", "created_at"),
)
