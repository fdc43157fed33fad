"""The fleet's samples over time (domain.fleet_history), and what a sample reads: the
queued jobs by their label requirement, and the jobs that first started in a span."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import asdict
from datetime import datetime

import sqlalchemy as sa

from gpufleet.domain.fleet_history import FleetSample, GpuLoads, WorkerKind, worker_kind
from gpufleet.domain.records import effective_labels
from gpufleet.domain.states import JobStatus
from gpufleet.store.queries import rows
from gpufleet.store.queries.base import QueryBase
from gpufleet.store.tables import fleet_samples, job_attempts, jobs, workers

_S = fleet_samples.c
_W = workers.c
_OFFLINE = _W.offline_since.is_not(None)
# What a sample tells workers apart by: counted in SQL, a row a kind (domain.WorkerKind).
_KIND = (_W.status, _W.reported_labels, _W.admin_labels, _W.gpu_count, _OFFLINE)
_CENSUS = sa.select(*_KIND, sa.func.count()).group_by(*_KIND)
_LOADS = sa.select(_W.reported_labels, _W.admin_labels, _W.gpu_stats).where(
    _W.offline_since.is_(None), _W.gpu_stats.is_not(None)
)


class FleetHistoryQueries(QueryBase):
    async def add_fleet_samples(self, samples: Sequence[FleetSample]) -> None:
        if samples:
            await self.conn.execute(sa.insert(fleet_samples), [asdict(s) for s in samples])

    async def replace_fleet_samples(
        self, resolution_s: int, at: datetime, samples: Sequence[FleetSample]
    ) -> None:
        """The rows of one bucket (a quarter being rolled up), written again whole."""
        await self.conn.execute(
            sa.delete(fleet_samples).where(_S.resolution_s == resolution_s, _S.at == at)
        )
        await self.add_fleet_samples(samples)

    async def fleet_samples_since(self, resolution_s: int, since: datetime) -> list[FleetSample]:
        """Every group's rows of a tier from `since` on, oldest first."""
        stmt = (
            sa.select(fleet_samples)
            .where(_S.resolution_s == resolution_s, _S.at >= since)
            .order_by(_S.at, _S.id)
        )
        return [rows.fleet_sample(m) for m in await self._mapped(stmt)]

    async def fleet_series(
        self, resolution_s: int, group: str, since: datetime, limit: int
    ) -> list[FleetSample]:
        """One group's newest `limit` rows of a tier since `since`, oldest first."""
        stmt = (
            sa.select(fleet_samples)
            .where(_S.resolution_s == resolution_s, _S.group == group, _S.at >= since)
            .order_by(_S.at.desc(), _S.id.desc())
            .limit(limit)
        )
        return [rows.fleet_sample(m) for m in await self._mapped(stmt)][::-1]

    async def fleet_groups(self, resolution_s: int, since: datetime) -> list[str]:
        stmt = (
            sa.select(_S.group)
            .where(_S.resolution_s == resolution_s, _S.at >= since)
            .distinct()
            .order_by(_S.group)
        )
        return [r.group for r in await self.conn.execute(stmt)]

    async def latest_fleet_samples(self) -> list[FleetSample]:
        """Every group's row of the newest sample (the Prometheus gauges)."""
        newest = sa.select(sa.func.max(_S.at)).where(_S.resolution_s == 0).scalar_subquery()
        stmt = sa.select(fleet_samples).where(_S.resolution_s == 0, _S.at == newest)
        return [rows.fleet_sample(m) for m in await self._mapped(stmt)]

    async def prune_fleet_samples(self, resolution_s: int, before: datetime) -> int:
        return await self._rowcount(
            sa.delete(fleet_samples).where(_S.resolution_s == resolution_s, _S.at < before)
        )

    async def count_fleet_samples(self, resolution_s: int, groups: Collection[str] = ()) -> int:
        stmt = sa.select(sa.func.count()).where(_S.resolution_s == resolution_s)
        if groups:
            stmt = stmt.where(_S.group.in_(list(groups)))
        return int((await self.conn.execute(stmt)).scalar_one())

    async def worker_census(self) -> list[WorkerKind]:
        """The workers counted by kind: a fleet sample reads no worker's record."""
        return [worker_kind(*row) for row in await self.conn.execute(_CENSUS)]

    async def online_gpu_loads(self) -> list[GpuLoads]:
        """The load of each GPU of each online worker whose last sample reports one."""
        found = []
        for reported, admin, stats in await self.conn.execute(_LOADS):
            pcts = [u for s in stats or () if (u := s.get("utilization_pct")) is not None]
            if pcts:
                found.append(GpuLoads(effective_labels(reported, admin), pcts))
        return found

    async def worker_labels(self, worker_ids: Collection[str]) -> dict[str, dict[str, str]]:
        """The labels of these workers (those that still exist)."""
        if not worker_ids:
            return {}
        stmt = sa.select(_W.id, _W.reported_labels, _W.admin_labels).where(
            _W.id.in_(list(worker_ids))
        )
        return {w: effective_labels(r, a) for w, r, a in await self.conn.execute(stmt)}

    async def queued_by_match_key(self) -> list[tuple[str | None, int]]:
        """Queued jobs counted by their label requirement (`jobs.match_key`)."""
        stmt = (
            sa.select(jobs.c.match_key, sa.func.count())
            .where(jobs.c.status == JobStatus.QUEUED.value)
            .group_by(jobs.c.match_key)
        )
        return [(key, int(n)) for key, n in await self.conn.execute(stmt)]

    async def first_starts(
        self, since: datetime, until: datetime
    ) -> list[tuple[datetime, datetime, str]]:
        """(submitted, started, worker) of each job whose first started attempt started in
        (since, until]: its wait from submit to start."""
        earlier = job_attempts.alias("earlier")
        stmt = (
            sa.select(jobs.c.created_at, job_attempts.c.started_at, job_attempts.c.worker_id)
            .join(jobs, jobs.c.id == job_attempts.c.job_id)
            .where(
                job_attempts.c.started_at > since,
                job_attempts.c.started_at <= until,
                ~sa.exists().where(
                    earlier.c.job_id == job_attempts.c.job_id,
                    earlier.c.started_at < job_attempts.c.started_at,
                ),
            )
        )
        return [(c, s, w) for c, s, w in await self.conn.execute(stmt)]
