"""API keys and stored configs."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import asdict
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite

from gpufleet.domain.records import ApiKey, ConfigVersion, StoredConfig, User
from gpufleet.store import locks
from gpufleet.store.direct import Direct
from gpufleet.store.queries import rows
from gpufleet.store.queries.base import Prebuilt, QueryBase, by
from gpufleet.store.tables import api_keys, config_versions, configs, revoked_sessions, users

_USER_COLUMNS = [c.label(f"owner_{c.name}") for c in users.c]


def _with_user() -> sa.Select[Any]:
    """A key's row beside its user's (`owner_`-prefixed); a key without a user is no key."""
    return sa.select(api_keys, *_USER_COLUMNS).join(users, users.c.id == api_keys.c.user_id)


def _key_and_user(row: Mapping[Any, Any]) -> tuple[ApiKey, User]:
    user = {c.name: row[f"owner_{c.name}"] for c in users.c}
    return rows.api_key(row), rows.user(user)


# Every request an API key makes: the key and its user.
_BY_HASH = Direct(
    _with_user().where(api_keys.c.key_hash == by("hash"), api_keys.c.revoked_at.is_(None))
)
# Every page and every call of the web UI: the session's key and user, unless the session
# was signed out, in one read (the sign-out is one primary-key probe inside it).
_SESSION = Prebuilt(
    _with_user().where(
        api_keys.c.id == by("key_id"),
        ~sa.exists().where(revoked_sessions.c.nonce == by("nonce")),
    )
)


class KeyQueries(QueryBase):
    async def insert_api_key(self, values: Mapping[str, Any]) -> None:
        await self.conn.execute(sa.insert(api_keys).values(**values))

    async def api_key_for_hash(self, key_hash: str) -> tuple[str, ApiKey, User] | None:
        """The active key with this hash and its user, in one read (every request's)."""
        row = await _BY_HASH.first(self.conn, {"hash": key_hash})
        return (row["key_hash"], *_key_and_user(row)) if row else None

    async def api_key_for_session(self, key_id: str, nonce: str) -> tuple[ApiKey, User] | None:
        """The key (revoked or not) and its user; None if either is gone or the session
        `nonce` names was signed out."""
        row = await self._first(_SESSION.plain, {"key_id": key_id, "nonce": nonce})
        return _key_and_user(row) if row else None

    async def revoke_session(
        self, nonce: str, key_id: str, expires_at: datetime, now: datetime
    ) -> None:
        """Keep a signed-out session until it would have expired (a second sign-out of it
        changes nothing); forget those that have."""
        await self.conn.execute(
            sa.delete(revoked_sessions).where(revoked_sessions.c.expires_at <= now)
        )
        dialect = postgresql if self._pg else sqlite
        values = {"nonce": nonce, "key_id": key_id, "expires_at": expires_at, "revoked_at": now}
        await self.conn.execute(
            dialect.insert(revoked_sessions).values(**values).on_conflict_do_nothing()
        )

    async def get_api_key(self, key_id: str) -> ApiKey | None:
        row = await self._first(sa.select(api_keys).where(api_keys.c.id == key_id))
        return rows.api_key(row) if row else None

    async def list_api_keys(self) -> list[ApiKey]:
        stmt = sa.select(api_keys).order_by(api_keys.c.created_at)
        return [rows.api_key(m) for m in await self._mapped(stmt)]

    async def api_key_names(self, key_ids: Iterable[str]) -> dict[str, str]:
        stmt = sa.select(api_keys.c.id, api_keys.c.name).where(api_keys.c.id.in_(set(key_ids)))
        return {r.id: r.name for r in await self.conn.execute(stmt)}

    async def revoke_api_key(self, key_id: str, now: datetime) -> bool:
        stmt = (
            sa.update(api_keys)
            .where(api_keys.c.id == key_id, api_keys.c.revoked_at.is_(None))
            .values(revoked_at=now)
        )
        return await self._rowcount(stmt) == 1

    async def touch_api_key(self, key_id: str, now: datetime) -> None:
        await self.conn.execute(
            sa.update(api_keys).where(api_keys.c.id == key_id).values(last_used_at=now)
        )

    async def count_api_keys(self) -> int:
        stmt = sa.select(sa.func.count()).select_from(api_keys)
        return int((await self.conn.execute(stmt)).scalar_one())

    async def lock_api_keys(self) -> None:
        """One first-start admin key, however many replicas start at once (PostgreSQL)."""
        if self._pg:
            await locks.hold_until_commit(self.conn, locks.API_KEYS)

    async def get_config(self, name: str, *, lock: bool = False) -> StoredConfig | None:
        stmt = sa.select(configs).where(configs.c.name == name)
        row = await self._first(self._locked(stmt) if lock else stmt)
        return rows.stored_config(row) if row else None

    async def list_configs(self) -> list[StoredConfig]:
        stmt = sa.select(configs).order_by(configs.c.name)
        return [rows.stored_config(m) for m in await self._mapped(stmt)]

    async def insert_config(self, config: StoredConfig) -> bool:
        """A new config and its version 1; False when the name was taken meanwhile."""
        insert = (postgresql.insert if self._pg else sqlite.insert)(configs)
        stmt = insert.values(**asdict(config)).on_conflict_do_nothing(index_elements=["name"])
        inserted = await self._rowcount(stmt)
        if inserted != 1:
            return False
        await self._insert_version(config)
        return True

    async def update_config(self, config: StoredConfig) -> None:
        """The config's latest version (the row, locked by the caller) and its new version."""
        values = asdict(config)
        del values["name"], values["created_at"]
        await self.conn.execute(
            sa.update(configs).where(configs.c.name == config.name).values(**values)
        )
        await self._insert_version(config)

    async def _insert_version(self, config: StoredConfig) -> None:
        await self.conn.execute(
            sa.insert(config_versions).values(
                name=config.name,
                version=config.version,
                body=config.body,
                digest=config.digest,
                written_by=config.written_by,
                written_at=config.updated_at,
            )
        )

    async def config_versions(self, name: str, limit: int, offset: int) -> list[ConfigVersion]:
        """Newest first."""
        stmt = (
            sa.select(config_versions)
            .where(config_versions.c.name == name)
            .order_by(config_versions.c.version.desc())
            .limit(limit)
            .offset(offset)
        )
        return [rows.config_version(m) for m in await self._mapped(stmt)]

    async def config_version(self, name: str, version: int) -> ConfigVersion | None:
        stmt = sa.select(config_versions).where(
            config_versions.c.name == name, config_versions.c.version == version
        )
        row = await self._first(stmt)
        return rows.config_version(row) if row else None

    async def delete_config(self, name: str) -> int:
        """The config and its versions; how many versions it had."""
        await self.conn.execute(sa.delete(configs).where(configs.c.name == name))
        return await self._rowcount(
            sa.delete(config_versions).where(config_versions.c.name == name)
        )
