"""Single sign-on: identities (a provider's issuer and subject) and the one-time values of
a sign-in (its state), spent once on every replica."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.exc import IntegrityError

from gpufleet.domain.records import ApiKey, User
from gpufleet.store.queries import rows
from gpufleet.store.queries.base import QueryBase
from gpufleet.store.tables import api_keys, identities, revoked_sessions, users

SPENT_KEY_ID = "sso"  # the `revoked_sessions` rows that are spent sign-in states, not sessions


class IdentityQueries(QueryBase):
    async def user_of_identity(self, issuer: str, subject: str) -> User | None:
        stmt = (
            sa.select(users)
            .join(identities, identities.c.user_id == users.c.id)
            .where(identities.c.issuer == issuer, identities.c.subject == subject)
        )
        row = await self._first(self._locked(stmt))
        return rows.user(row) if row else None

    async def insert_identity(self, issuer: str, subject: str, user_id: str, now: datetime) -> None:
        await self.conn.execute(
            sa.insert(identities).values(
                issuer=issuer, subject=subject, user_id=user_id, created_at=now, signed_in_at=now
            )
        )

    async def provision_user(
        self, values: Mapping[str, Any], issuer: str, subject: str, now: datetime
    ) -> bool:
        """Insert a user and the identity that names it; False when a concurrent first
        sign-in took the identity or the name first (PostgreSQL: under a savepoint, the
        unique indexes decide; SQLite has one writer at a time)."""
        if not self._pg:  # one writer: what it reads now stands until it commits
            taken = await self._first(
                sa.select(identities.c.user_id).where(
                    identities.c.issuer == issuer, identities.c.subject == subject
                )
            )
            if taken is not None:
                return False
            await self.conn.execute(sa.insert(users).values(**values))
            await self.insert_identity(issuer, subject, values["id"], now)
            return True
        try:
            async with self.conn.begin_nested():
                await self.conn.execute(sa.insert(users).values(**values))
                await self.insert_identity(issuer, subject, values["id"], now)
        except IntegrityError:
            return False
        return True

    async def touch_identity(self, issuer: str, subject: str, now: datetime) -> None:
        await self.conn.execute(
            sa.update(identities)
            .where(identities.c.issuer == issuer, identities.c.subject == subject)
            .values(signed_in_at=now)
        )

    async def sign_in_key(self, user_id: str, created_by: str) -> ApiKey | None:
        """The user's active key that sign-ins' sessions name (made by `created_by`)."""
        stmt = (
            sa.select(api_keys)
            .where(
                api_keys.c.user_id == user_id,
                api_keys.c.created_by == created_by,
                api_keys.c.revoked_at.is_(None),
            )
            .order_by(api_keys.c.created_at.desc())
            .limit(1)
        )
        row = await self._first(stmt)
        return rows.api_key(row) if row else None

    async def spend_once(self, value: str, expires_at: datetime, now: datetime) -> bool:
        """Record a one-time value as used; False if it already was (a replay). Kept beside
        signed-out sessions, and swept with them once expired."""
        await self.conn.execute(
            sa.delete(revoked_sessions).where(revoked_sessions.c.expires_at <= now)
        )
        dialect = postgresql if self._pg else sqlite
        values = {"nonce": value, "key_id": SPENT_KEY_ID, "expires_at": expires_at}
        values["revoked_at"] = now
        done = await self.conn.execute(
            dialect.insert(revoked_sessions).values(**values).on_conflict_do_nothing()
        )
        return bool(done.rowcount)
