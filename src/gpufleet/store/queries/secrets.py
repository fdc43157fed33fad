"""Secrets for jobs, sealed (domain/job_secrets.py): written, listed by name, read to resolve."""

from __future__ import annotations

from collections.abc import Collection
from datetime import datetime

import sqlalchemy as sa

from gpufleet.domain.job_secrets import JobSecret, Scope
from gpufleet.store.queries import rows
from gpufleet.store.queries.base import QueryBase
from gpufleet.store.tables import job_secrets

_S = job_secrets.c


def _row(scope: Scope, owner_id: str, name: str) -> sa.ColumnElement[bool]:
    return sa.and_(_S.scope == scope.value, _S.owner_id == owner_id, _S.name == name)


class SecretQueries(QueryBase):
    async def put_secret(
        self, scope: Scope, owner_id: str, name: str, sealed: str, actor: str, now: datetime
    ) -> bool:
        """Insert or replace; True when it was new."""
        stmt = (
            sa.update(job_secrets)
            .where(_row(scope, owner_id, name))
            .values(value_sealed=sealed, updated_at=now, written_by=actor)
        )
        if await self._rowcount(stmt):
            return False
        await self.conn.execute(
            sa.insert(job_secrets).values(
                scope=scope.value,
                owner_id=owner_id,
                name=name,
                value_sealed=sealed,
                created_at=now,
                updated_at=now,
                written_by=actor,
            )
        )
        return True

    async def delete_secret(self, scope: Scope, owner_id: str, name: str) -> bool:
        return await self._rowcount(sa.delete(job_secrets).where(_row(scope, owner_id, name))) == 1

    async def list_secrets(self) -> list[JobSecret]:
        stmt = sa.select(job_secrets).order_by(_S.scope, _S.owner_id, _S.name)
        return [rows.job_secret(m) for m in await self._mapped(stmt)]

    async def secrets_of(
        self, scope: Scope, owner_id: str, names: Collection[str]
    ) -> list[JobSecret]:
        """The owner's secrets of these names (those it has)."""
        stmt = sa.select(job_secrets).where(
            _S.scope == scope.value, _S.owner_id == owner_id, _S.name.in_(sorted(names))
        )
        return [rows.job_secret(m) for m in await self._mapped(stmt)]
