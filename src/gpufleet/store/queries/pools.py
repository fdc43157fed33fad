"""Worker pools and their launches (domain/pools.py)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy.exc import IntegrityError

from gpufleet.domain.pool_costs import Run
from gpufleet.domain.pools import LIVE_LAUNCH, Launch, Pool
from gpufleet.store.queries import rows
from gpufleet.store.queries.base import QueryBase
from gpufleet.store.tables import attempt_nodes, job_attempts, jobs, pool_launches, pools

_LIVE = [state.value for state in LIVE_LAUNCH]


class PoolQueries(QueryBase):
    async def insert_pool(self, values: Mapping[str, Any]) -> bool:
        """False when a pool of its name exists: the unique name decides, a race included
        (PostgreSQL, under a savepoint; SQLite has one writer at a time)."""
        insert = sa.insert(pools).values(**values)
        if not self._pg:
            await self.conn.execute(insert)
            return True
        try:
            async with self.conn.begin_nested():
                await self.conn.execute(insert)
        except IntegrityError:
            return False
        return True

    async def list_pools(self) -> list[Pool]:
        stmt = sa.select(pools).order_by(pools.c.name)
        return [rows.pool(m) for m in await self._mapped(stmt)]

    async def get_pool(self, name: str, *, lock: bool = False) -> Pool | None:
        stmt = sa.select(pools).where(pools.c.name == name)
        row = await self._first(self._locked(stmt) if lock else stmt)
        return rows.pool(row) if row else None

    async def update_pool(self, pool_id: str, **values: Any) -> None:
        await self.conn.execute(sa.update(pools).where(pools.c.id == pool_id).values(**values))

    async def delete_pool(self, pool_id: str) -> None:
        """The pool and its launches' records (none of them live: the caller checked)."""
        await self.conn.execute(sa.delete(pool_launches).where(pool_launches.c.pool_id == pool_id))
        await self.conn.execute(sa.delete(pools).where(pools.c.id == pool_id))

    async def live_launch_counts(self) -> dict[str, int]:
        """Launches whose instance may be up (`LIVE_LAUNCH`), by pool id."""
        c = pool_launches.c
        stmt = sa.select(c.pool_id, sa.func.count()).where(c.state.in_(_LIVE)).group_by(c.pool_id)
        return {pool_id: int(n) for pool_id, n in await self.conn.execute(stmt)}

    async def insert_launch(self, values: Mapping[str, Any]) -> None:
        await self.conn.execute(sa.insert(pool_launches).values(**values))

    async def recent_launches(self, pool_id: str, limit: int) -> list[Launch]:
        c = pool_launches.c
        stmt = (
            sa.select(pool_launches)
            .where(c.pool_id == pool_id)
            .order_by(c.created_at.desc(), c.id.desc())
            .limit(limit)
        )
        return [rows.launch(m) for m in await self._mapped(stmt)]

    async def live_launches(self) -> list[Launch]:
        """Every launch whose instance may be up, oldest first."""
        c = pool_launches.c
        stmt = sa.select(pool_launches).where(c.state.in_(_LIVE)).order_by(c.created_at, c.id)
        return [rows.launch(m) for m in await self._mapped(stmt)]

    async def get_launch(self, launch_id: str, *, lock: bool = False) -> Launch | None:
        stmt = sa.select(pool_launches).where(pool_launches.c.id == launch_id)
        row = await self._first(self._locked(stmt) if lock else stmt)
        return rows.launch(row) if row else None

    async def update_launch(self, launch_id: str, **values: Any) -> None:
        c = pool_launches.c
        await self.conn.execute(sa.update(pool_launches).where(c.id == launch_id).values(**values))

    async def costed_launches(self) -> list[Launch]:
        """The launches the pools' cost counts: each whose worker registered, and the live."""
        c = pool_launches.c
        stmt = sa.select(pool_launches).where(c.registered_at.is_not(None) | c.state.in_(_LIVE))
        return [rows.launch(m) for m in await self._mapped(stmt)]

    async def pool_runs(self, job_id: str | None = None) -> list[Run]:
        """The jobs' time on pool workers (one job's, given `job_id`): each attempt that
        started on a launched worker, and each further node of a multi-node one (rank 0's
        worker is its attempt's)."""
        a, n, j = job_attempts.c, attempt_nodes.c, jobs.c
        launched = sa.select(pool_launches.c.worker_id).where(
            pool_launches.c.registered_at.is_not(None)
        )
        attempts = (
            sa.select(a.job_id, j.user_id, j.team_id, a.worker_id, a.started_at, a.ended_at)
            .join(jobs, j.id == a.job_id)
            .where(a.started_at.is_not(None), a.worker_id.in_(launched))
        )
        nodes = (
            sa.select(
                n.job_id,
                j.user_id,
                j.team_id,
                n.worker_id,
                a.started_at,
                sa.func.coalesce(n.ended_at, a.ended_at),
            )
            .join(job_attempts, a.id == n.attempt_id)
            .join(jobs, j.id == n.job_id)
            .where(n.rank > 0, a.started_at.is_not(None), n.worker_id.in_(launched))
        )
        if job_id is not None:
            attempts = attempts.where(a.job_id == job_id)
            nodes = nodes.where(n.job_id == job_id)
        found = await self.conn.execute(sa.union_all(attempts, nodes))
        return [Run(*row) for row in found]

    async def launches_named(
        self, instance_ids: Sequence[str], pool_id: str | None = None
    ) -> list[Launch]:
        """The launches (of `pool_id`, or of every pool) whose provider named one of
        `instance_ids`."""
        if not instance_ids:
            return []
        c = pool_launches.c
        stmt = sa.select(pool_launches).where(c.instance_id.in_(list(instance_ids)))
        if pool_id is not None:
            stmt = stmt.where(c.pool_id == pool_id)
        return [rows.launch(m) for m in await self._mapped(stmt)]
