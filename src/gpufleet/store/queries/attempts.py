"""Attempts: each offer of a job to a worker, and what became of it."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

import sqlalchemy as sa

from gpufleet.domain.records import Attempt, Job, WorkedAttempt
from gpufleet.domain.states import AttemptStatus, JobStatus
from gpufleet.store.direct import Direct
from gpufleet.store.queries import rows
from gpufleet.store.queries.base import ROW, Prebuilt, QueryBase, by, no_status
from gpufleet.store.tables import job_attempts, jobs

_INSERT_ATTEMPT = Direct(sa.insert(job_attempts), by_columns=True)
_UPDATE_ATTEMPT = Direct(
    sa.update(job_attempts).where(job_attempts.c.id == by(ROW)), by_columns=True
)
_ATTEMPT = Prebuilt(sa.select(job_attempts).where(job_attempts.c.id == by("id")))
# The ack sweep's read, every 0.75-1 s at rest (#32).
_UNACKNOWLEDGED = sa.select(job_attempts).where(
    job_attempts.c.status == AttemptStatus.OFFERED.value,
    job_attempts.c.offered_at < by("cutoff"),
)


class AttemptQueries(QueryBase):
    async def insert_attempt(self, status: AttemptStatus, values: Mapping[str, Any]) -> None:
        """A new attempt in `status` (offered): `services/lifecycle.py` alone calls it."""
        await _INSERT_ATTEMPT.rows(self.conn, {**no_status(values), "status": status.value})

    async def get_attempt(self, attempt_id: str) -> Attempt | None:
        row = await self._first(_ATTEMPT.plain, {"id": attempt_id})
        return rows.attempt(row) if row else None

    async def set_attempt_status(
        self, attempt_id: str, status: AttemptStatus, **values: Any
    ) -> None:
        """Move an attempt: `services/lifecycle.py` alone calls it (an attempt's other
        columns change only with its status)."""
        params = {**no_status(values), "status": status.value, ROW: attempt_id}
        await _UPDATE_ATTEMPT.rows(self.conn, params)

    async def attempts_for_job(self, job_id: str) -> list[Attempt]:
        stmt = (
            sa.select(job_attempts)
            .where(job_attempts.c.job_id == job_id)
            .order_by(job_attempts.c.number)
        )
        return [rows.attempt(m) for m in await self._mapped(stmt)]

    async def attempts_of_worker(self, worker_id: str, limit: int) -> list[WorkedAttempt]:
        """The worker's newest attempts first (ix_attempts_worker), with their jobs."""
        stmt = (
            sa.select(job_attempts, jobs.c.config_name, jobs.c.status.label("job_status"))
            .join(jobs, jobs.c.id == job_attempts.c.job_id)
            .where(job_attempts.c.worker_id == worker_id)
            .order_by(job_attempts.c.offered_at.desc(), job_attempts.c.id.desc())
            .limit(limit)
        )
        return [
            WorkedAttempt(
                attempt=rows.attempt(m),
                config_name=m["config_name"],
                job_status=JobStatus(m["job_status"]),
            )
            for m in await self._mapped(stmt)
        ]

    async def unacknowledged_offers(self, cutoff: datetime) -> list[Attempt]:
        return [rows.attempt(m) for m in await self._mapped(_UNACKNOWLEDGED, {"cutoff": cutoff})]

    async def pending_offers(
        self, worker_id: str, current_attempt_id: str | None = None
    ) -> list[tuple[Attempt, Job]]:
        """The offers the worker has not acknowledged: its own attempts', and (a node of a
        gang whose rank 0 is another worker) its `current_attempt_id`'s."""
        mine = job_attempts.c.worker_id == worker_id
        if current_attempt_id is not None:
            mine = sa.or_(mine, job_attempts.c.id == current_attempt_id)
        stmt = (
            sa.select(job_attempts, jobs)
            .join(jobs, jobs.c.id == job_attempts.c.job_id)
            .where(
                mine,
                job_attempts.c.status == AttemptStatus.OFFERED.value,
                jobs.c.current_attempt_id == job_attempts.c.id,
            )
        )
        return [
            (rows.attempt(rows.of_table(job_attempts, m)), rows.job(rows.of_table(jobs, m)))
            for m in await self._mapped(stmt)
        ]
