"""Jobs: submitted, claimed, filtered and paged in dispatch order."""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, fields
from datetime import datetime
from typing import Any

import sqlalchemy as sa

from gpufleet.domain.filters import JobFilter
from gpufleet.domain.matching import match_key
from gpufleet.domain.records import Attempt, Job
from gpufleet.domain.states import JobStatus, RetryOn, Target
from gpufleet.store.direct import Direct, DirectSelect, by_table
from gpufleet.store.queries import rows
from gpufleet.store.queries.base import ROW, Prebuilt, QueryBase, by, no_status
from gpufleet.store.tables import job_attempts, jobs, workers

# Writes built once: the columns set are the parameters' keys (`Prebuilt`'s reasoning).
_INSERT_JOB = Direct(sa.insert(jobs), by_columns=True)
_UPDATE_JOB = sa.update(jobs).where(jobs.c.id == by(ROW))
_UPDATE_JOB_DIRECT = Direct(_UPDATE_JOB, by_columns=True)
# A move reads back whether the job has dependents as it writes it (domain/dependencies.py).
_MOVE_JOB = Direct(_UPDATE_JOB.returning(jobs.c.has_dependents), by_columns=True)
_CLAIM_JOB = Direct(
    sa.update(jobs).where(jobs.c.id == by(ROW), jobs.c.status == JobStatus.QUEUED.value),
    by_columns=True,
)
_FREE = jobs.c.waits_on.is_(None)  # no dependency holds it (domain/dependencies.py)
_JOB = Prebuilt(sa.select(jobs).where(jobs.c.id == by("id")))
# A worker's report: the job, and the attempt it speaks of (the one it names, else the
# job's current one if the job is the worker's, else the worker's current one), read
# together; the job's row locked (PostgreSQL), as `get_job(lock=True)` locks it.
_SPOKEN_OF = sa.func.coalesce(
    sa.bindparam("attempt", type_=sa.String()),
    sa.case((jobs.c.worker_id == by("worker"), jobs.c.current_attempt_id)),
    sa.bindparam("worker_attempt", type_=sa.String()),
)
_JOB_AND_ATTEMPT = DirectSelect(
    sa.select(jobs, job_attempts)
    .select_from(jobs.outerjoin(job_attempts, job_attempts.c.id == _SPOKEN_OF))
    .where(jobs.c.id == by("id")),
    of=jobs,  # the job alone: the attempt is the outer join's nullable side
)


@dataclass(frozen=True, slots=True)
class TeamOf:
    """One team's jobs, for a read of the queue; `id` None: the jobs of no team."""

    id: str | None


@dataclass(frozen=True, slots=True)
class NewJob:
    """A job as submit queues it."""

    id: str
    config: dict[str, Any]
    target: Target
    worker_labels: dict[str, str]
    gpu_count: int
    priority: int
    max_retries: int
    retry_on: Collection[RetryOn]
    submitted_by: str
    created_at: datetime
    config_name: str | None = None
    rerun_of: str | None = None
    user_id: str | None = None
    team_id: str | None = None
    preemptible: bool | None = None
    status: JobStatus = JobStatus.QUEUED  # PENDING_APPROVAL when an approval rule holds it
    config_version: int | None = None  # the stored config's version it runs
    config_digest: str | None = None
    config_written_by: str | None = None
    workdir: str | None = None  # domain.jobspec.workdir_of(config)
    nodes: int = 1  # domain.jobspec.gang_shape(gpu_count, config).nodes
    waits_on: str | None = None  # the dependency it waits on (domain/dependencies.py)
    inputs: dict[str, list[str]] | None = None  # what it takes from its dependencies
    sweep_id: str | None = None  # the sweep it is a point of

    def row(self) -> dict[str, Any]:
        """The row of `jobs` it is: each field its column's (tests/unit/test_rows.py),
        queued, with the key dispatch finds it by."""
        values = {name: getattr(self, name) for name in _NEW_JOB_FIELDS}
        return values | {
            "status": self.status.value,
            "target": self.target.value,
            "retry_on": sorted(self.retry_on),
            "match_key": match_key(self.worker_labels),
            "attempts": 0,
            "updated_at": self.created_at,
            "artifacts_pinned": False,
        }


_NEW_JOB_FIELDS = tuple(f.name for f in fields(NewJob))


class JobQueries(QueryBase):
    async def insert_job(self, values: Mapping[str, Any]) -> Job:
        """Insert a job; the job as inserted (columns not given are empty)."""
        await _INSERT_JOB.rows(self.conn, values)
        return rows.new_job(values)

    async def queue_job(self, new: NewJob) -> Job:
        """Queue a submitted job; the job as queued."""
        return await self.insert_job(new.row())

    async def queue_jobs(self, new: Sequence[NewJob]) -> None:
        """Queue many jobs in one statement: the rows `queue_job` writes, at once."""
        if new:
            await self.conn.execute(sa.insert(jobs), [n.row() for n in new])

    async def get_job(self, job_id: str, *, lock: bool = False) -> Job | None:
        row = await self._first(self._either(_JOB, lock), {"id": job_id})
        return rows.job(row) if row else None

    async def job_and_attempt(
        self, job_id: str, attempt_id: str | None, worker_id: str, worker_attempt: str | None
    ) -> tuple[Job, Attempt | None] | None:
        """The job, locked, and the attempt a report of worker `worker_id` speaks of: the one
        it names (`attempt_id`), else the job's current one if the job is the worker's, else
        `worker_attempt` (its current one); one statement, not two. None: no such job."""
        params = {"id": job_id, "attempt": attempt_id, "worker": worker_id}
        stmt = self._either(_JOB_AND_ATTEMPT, lock=True)
        found = await stmt.rows(self.conn, params | {"worker_attempt": worker_attempt})
        if not found:
            return None
        job, attempt = by_table(found[0], jobs, job_attempts)
        return rows.job(job), rows.attempt(attempt) if attempt["id"] is not None else None

    async def update_job(self, job_id: str, **values: Any) -> None:
        """Set a job's columns other than its status (only `set_job_status` writes that)."""
        if not values:
            return  # nothing to set (a prebuilt UPDATE sets its parameters' columns)
        await _UPDATE_JOB_DIRECT.rows(self.conn, {**no_status(values), ROW: job_id})

    async def set_job_status(self, job_id: str, status: JobStatus, **values: Any) -> bool:
        """Move a job: `services/lifecycle.py` alone calls it (tests/unit/test_status_writers).
        True when some job depends on it (read as the row is written, after a submit that
        named it meanwhile committed)."""
        params = {**no_status(values), "status": status.value, ROW: job_id}
        moved = await _MOVE_JOB.rows(self.conn, params)
        return bool(moved and moved[0][0])

    async def claim_job(self, job_id: str, status: JobStatus, **values: Any) -> bool:
        """Queued → `status` (offered), only if still queued (the compare-and-set of
        dispatch); `services/lifecycle.py` alone calls it."""
        params = {**no_status(values), "status": status.value, ROW: job_id}
        return await _CLAIM_JOB.count(self.conn, params) == 1

    def _job_filter(self, stmt: sa.Select[Any], f: JobFilter) -> sa.Select[Any]:
        if f.statuses:
            status: Any = jobs.c.status
            if not self._pg and (f.worker_id or f.worker or f.config_name):
                # `+status` keeps SQLite off ix_jobs_queue, which walks every job of the
                # status (every completed one), for ix_jobs_worker or ix_jobs_config.
                status = sa.literal_column("+jobs.status", sa.String)
            stmt = stmt.where(status.in_(list(f.statuses)))
        if f.worker_id:
            stmt = stmt.where(jobs.c.worker_id == f.worker_id)
        if f.target:
            stmt = stmt.where(jobs.c.target == f.target)
        if f.config_name:
            stmt = stmt.where(jobs.c.config_name == f.config_name)
        if f.worker:
            named = sa.select(workers.c.id).where(workers.c.name == f.worker)
            stmt = stmt.where(sa.or_(jobs.c.worker_id == f.worker, jobs.c.worker_id.in_(named)))
        for key, value in (f.labels or {}).items():
            stmt = stmt.where(jobs.c.worker_labels[key].as_string() == value)
        if f.id_prefix:
            stmt = stmt.where(jobs.c.id.startswith(f.id_prefix, autoescape=True))
        return stmt

    async def list_jobs(self, f: JobFilter, limit: int, offset: int) -> tuple[list[Job], int]:
        stmt = self._job_filter(sa.select(jobs), f)
        stmt = stmt.order_by(jobs.c.created_at.desc(), jobs.c.id.desc()).limit(limit).offset(offset)
        total_stmt = self._job_filter(sa.select(sa.func.count()).select_from(jobs), f)
        found = [rows.job(m) for m in await self._mapped(stmt)]
        total = int((await self.conn.execute(total_stmt)).scalar_one())
        return found, total

    async def reruns_of(self, job_id: str) -> list[str]:
        """The jobs that re-run this one, oldest first (ix_jobs_rerun_of)."""
        stmt = (
            sa.select(jobs.c.id)
            .where(jobs.c.rerun_of == job_id)
            .order_by(jobs.c.created_at, jobs.c.id)
        )
        return [r.id for r in await self.conn.execute(stmt)]

    async def queued_jobs(
        self,
        *,
        max_gpus: int,
        targets: Sequence[str],
        after: tuple[int, datetime, str] | None,
        limit: int,
        match_keys: Sequence[str] | None = None,
        team: TeamOf | None = None,
    ) -> list[Job]:
        """Queued jobs a worker of `max_gpus` GPUs could take, in dispatch order, paged;
        with `match_keys`, only those whose label requirement is one of them (ix_jobs_match);
        with `team`, only that team's (`TeamOf(None)`: the jobs of no team)."""
        stmt = sa.select(jobs).where(
            jobs.c.status == JobStatus.QUEUED.value,
            _FREE,
            jobs.c.gpu_count <= max_gpus,
            jobs.c.target.in_(list(targets)),
        )
        priority: Any = jobs.c.priority
        if match_keys is not None:
            stmt = stmt.where(jobs.c.match_key.in_(list(match_keys)))
            # `+priority` keeps SQLite from walking ix_jobs_queue (or a team's
            # ix_jobs_team_queue) in order and testing every row, the very scan this filter
            # avoids: it then searches ix_jobs_match, or a team's ix_jobs_team_match.
            priority = sa.literal_column("+jobs.priority")
        if team is not None:  # ix_jobs_team_queue, or ix_jobs_team_match with match_keys
            team_id = jobs.c.team_id
            stmt = stmt.where(team_id.is_(None) if team.id is None else team_id == team.id)
        if after is not None:
            prio, created, job_id = after
            stmt = stmt.where(
                sa.or_(
                    jobs.c.priority < prio,
                    sa.and_(jobs.c.priority == prio, jobs.c.created_at > created),
                    sa.and_(
                        jobs.c.priority == prio, jobs.c.created_at == created, jobs.c.id > job_id
                    ),
                )
            )
        stmt = stmt.order_by(priority.desc(), jobs.c.created_at, jobs.c.id).limit(limit)
        return [rows.job(m) for m in await self._mapped(stmt)]

    async def count_jobs_by_status(self) -> dict[str, int]:
        stmt = sa.select(jobs.c.status, sa.func.count()).group_by(jobs.c.status)
        return {s: int(n) for s, n in await self.conn.execute(stmt)}
