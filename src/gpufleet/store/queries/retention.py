"""What the retention sweep reads: the jobs with something due, and their files."""

from __future__ import annotations

from collections.abc import Collection
from datetime import datetime
from typing import Any

import sqlalchemy as sa

from gpufleet.domain.records import Artifact, Checkpoint
from gpufleet.domain.retention import JobFacts
from gpufleet.domain.states import ACTIVE_ATTEMPT
from gpufleet.store.queries import rows
from gpufleet.store.queries.base import QueryBase
from gpufleet.store.tables import artifacts, checkpoints, job_attempts, jobs


class RetentionQueries(QueryBase):
    async def retention_candidates(
        self, cutoff: datetime | None, keep: int, limit: int
    ) -> list[JobFacts]:
        """Unpinned jobs that ended at or before `cutoff` and still hold artifacts, and
        unpinned jobs holding more than `keep` checkpoints (0: none qualify so); at most
        `limit`, those that ended first first. Each with the checkpoints its active attempts
        resumed from."""
        j = jobs.c
        due: list[sa.Select[Any]] = []
        if cutoff is not None:
            due.append(
                sa.select(artifacts.c.job_id)
                .join(jobs, j.id == artifacts.c.job_id)
                .where(j.ended_at <= cutoff)
                .distinct()
            )
        if keep > 0:
            due.append(
                sa.select(checkpoints.c.job_id)
                .group_by(checkpoints.c.job_id)
                .having(sa.func.count() > keep)
            )
        if not due:
            return []
        stmt = (
            sa.select(j.id, j.ended_at, j.artifacts_pinned, j.nodes)
            .where(j.id.in_(sa.union(*due)), sa.not_(j.artifacts_pinned))
            .order_by(j.ended_at.is_(None), j.ended_at, j.id)
            .limit(limit)
        )
        found = await self._mapped(stmt)
        ids = [m["id"] for m in found]
        resumed: dict[str, set[str]] = {}
        if ids:
            a = job_attempts.c
            active = [s.value for s in ACTIVE_ATTEMPT]
            held = sa.select(a.job_id, a.resumed_from).where(
                a.job_id.in_(ids), a.status.in_(active), a.resumed_from.is_not(None)
            )
            for m in await self._mapped(held):
                resumed.setdefault(m["job_id"], set()).add(m["resumed_from"])
        return [
            JobFacts(
                m["id"],
                m["ended_at"],
                bool(m["artifacts_pinned"]),
                frozenset(resumed.get(m["id"], ())),
                m["nodes"],
            )
            for m in found
        ]

    async def artifacts_of_jobs(self, job_ids: Collection[str]) -> list[Artifact]:
        stmt = _numbered(artifacts).where(artifacts.c.job_id.in_(list(job_ids)))
        return [rows.artifact(m) for m in await self._mapped(stmt)]

    async def checkpoints_of_jobs(self, job_ids: Collection[str]) -> list[Checkpoint]:
        stmt = _numbered(checkpoints).where(checkpoints.c.job_id.in_(list(job_ids)))
        return [rows.checkpoint(m) for m in await self._mapped(stmt)]

    async def artifact_store_bytes(self) -> int:
        """Every listed artifact's bytes together (the store-size gauge)."""
        stmt = sa.select(sa.func.coalesce(sa.func.sum(artifacts.c.size), 0))
        return int((await self.conn.execute(stmt)).scalar_one())

    async def workdirs_held(self, digests: Collection[str], cutoff: datetime | None) -> set[str]:
        """Of the workdir snapshots `digests`, those a job names that has not ended, or ended
        after `cutoff` (None: any job naming one holds it)."""
        if not digests:
            return set()
        j = jobs.c
        holding = sa.true() if cutoff is None else sa.or_(j.ended_at.is_(None), j.ended_at > cutoff)
        stmt = sa.select(j.workdir).where(j.workdir.in_(list(digests)), holding).distinct()
        return {m["workdir"] for m in await self._mapped(stmt)}


def _numbered(table: sa.Table) -> sa.Select[Any]:
    return sa.select(table, job_attempts.c.number.label("attempt_number")).join(
        job_attempts, job_attempts.c.id == table.c.attempt_id
    )
