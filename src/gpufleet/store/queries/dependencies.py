"""A job's dependencies (domain/dependencies.py): written at its submit, read when one of
them ends (by whoever ends it, in that transaction), on its page and at its offer."""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa

from gpufleet.domain.dependencies import Dependency, On, Upstream
from gpufleet.domain.records import Job
from gpufleet.domain.states import JobStatus
from gpufleet.store.queries import rows
from gpufleet.store.queries.base import QueryBase
from gpufleet.store.tables import job_dependencies, jobs

_D = job_dependencies.c


class DependencyQueries(QueryBase):
    async def jobs_named(self, ids: Sequence[str]) -> list[Job]:
        """The jobs of these ids that exist."""
        stmt = sa.select(jobs).where(jobs.c.id.in_(list(ids)))
        return [rows.job(m) for m in await self._mapped(stmt)]

    async def add_dependencies(self, job_id: str, deps: Sequence[Dependency]) -> None:
        if deps:
            rows = [
                {"job_id": job_id, "upstream_id": d.job_id, "condition": d.on.value, "position": n}
                for n, d in enumerate(deps)
            ]
            await self.conn.execute(sa.insert(job_dependencies), rows)

    async def mark_upstream(self, job_id: str) -> JobStatus | None:
        """Say that a job depends on `job_id`, and read its status as it is now. The write
        locks its row (PostgreSQL) until commit: a replica ending it meanwhile waits for this
        submit, then finds its new dependent (`has_dependents`, read back as it ends)."""
        stmt = (
            sa.update(jobs)
            .where(jobs.c.id == job_id)
            .values(has_dependents=True)
            .returning(jobs.c.status)
        )
        status = (await self.conn.execute(stmt)).scalar_one_or_none()
        return None if status is None else JobStatus(status)

    async def upstreams(self, job_id: str) -> list[Upstream]:
        """The job's dependencies in the submit's order, each with its status now."""
        stmt = (
            sa.select(_D.upstream_id, _D.condition, jobs.c.status)
            .join(jobs, jobs.c.id == _D.upstream_id)
            .where(_D.job_id == job_id)
            .order_by(_D.position)
        )
        return [
            Upstream(m["upstream_id"], On(m["condition"]), JobStatus(m["status"]))
            for m in await self._mapped(stmt)
        ]

    async def dependents(self, job_id: str) -> list[tuple[str, JobStatus]]:
        """The jobs that depend on `job_id` (id, status), oldest first: the order in which
        their rows are locked (a dependency is always older than its dependents)."""
        stmt = (
            sa.select(jobs.c.id, jobs.c.status)
            .join(job_dependencies, _D.job_id == jobs.c.id)
            .where(_D.upstream_id == job_id)
            .order_by(jobs.c.created_at, jobs.c.id)
        )
        return [(m["id"], JobStatus(m["status"])) for m in await self._mapped(stmt)]
