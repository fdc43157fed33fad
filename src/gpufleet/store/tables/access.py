"""API keys, web sessions signed out before they expire, and single sign-on identities."""

from __future__ import annotations

import sqlalchemy as sa

from gpufleet.store.tables.base import JSON, UTCDateTime, metadata

api_keys = sa.Table(
    "api_keys",
    metadata,
    sa.Column("id", sa.String(32), primary_key=True),
    sa.Column("name", sa.String(128), nullable=False),
    sa.Column("key_hash", sa.String(64), nullable=False, unique=True),
    sa.Column("permissions", JSON, nullable=False),
    sa.Column("created_at", UTCDateTime, nullable=False),
    sa.Column("created_by", sa.String(64)),
    sa.Column("revoked_at", UTCDateTime),
    sa.Column("last_used_at", UTCDateTime),  # to the minute (auth.note_use)
    sa.Column("user_id", sa.String(32)),  # whose key it is (0014); null only before 0014
)

# Web sessions signed out before they expire (services/sessions.py): every replica refuses
# their cookies. A row is kept until the session would have expired, then swept.
revoked_sessions = sa.Table(
    "revoked_sessions",
    metadata,
    sa.Column("nonce", sa.String(32), primary_key=True),  # the cookie's random part
    sa.Column("key_id", sa.String(32), nullable=False),
    sa.Column("expires_at", UTCDateTime, nullable=False),
    sa.Column("revoked_at", UTCDateTime, nullable=False),
    sa.Index("ix_revoked_sessions_expires_at", "expires_at"),  # the sweep's
)

# Single sign-on (0027): who a provider's issuer and subject are here. The identity, never a
# name, says which user signs in (domain/sso.py).
identities = sa.Table(
    "identities",
    metadata,
    sa.Column("issuer", sa.String(255), primary_key=True),
    sa.Column("subject", sa.String(255), primary_key=True),
    sa.Column(
        "user_id", sa.String(32), sa.ForeignKey("users.id", ondelete="CASCADE"), nullable=False
    ),
    sa.Column("created_at", UTCDateTime, nullable=False),
    sa.Column("signed_in_at", UTCDateTime, nullable=False),
    sa.Index("ix_identities_user", "user_id"),
)
