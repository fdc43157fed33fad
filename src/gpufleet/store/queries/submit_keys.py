"""Idempotent submit's keys (domain/idempotency.py): which job a user's key names."""

from __future__ import annotations

from datetime import datetime

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite

from gpufleet.store.queries.base import QueryBase
from gpufleet.store.tables import submit_keys

_K = submit_keys.c


class SubmitKeyQueries(QueryBase):
    async def job_of_key(self, user_id: str, key: str, since: datetime) -> str | None:
        """The job the user's key names, if it was made at or after `since`."""
        stmt = sa.select(_K.job_id).where(
            _K.user_id == user_id, _K.key == key, _K.created_at >= since
        )
        return (await self.conn.execute(stmt)).scalar_one_or_none()

    async def claim_key(
        self, user_id: str, key: str, job_id: str, now: datetime, since: datetime
    ) -> str | None:
        """Make the key name `job_id` (its row written now; one made before `since` is
        taken over); None when done, else the job it names already. One statement: on
        PostgreSQL a concurrent claim of the same key waits for this one's commit, then finds
        its row (the primary key decides, on every replica); SQLite has one writer at a time."""
        dialect = postgresql if self._pg else sqlite
        insert = dialect.insert(submit_keys).values(
            user_id=user_id, key=key, job_id=job_id, created_at=now
        )
        upsert = insert.on_conflict_do_update(
            index_elements=[_K.user_id, _K.key],
            set_={"job_id": insert.excluded.job_id, "created_at": insert.excluded.created_at},
            where=_K.created_at < since,
        ).returning(_K.job_id)
        if (await self.conn.execute(upsert)).first() is not None:
            return None
        return await self.job_of_key(user_id, key, since)
