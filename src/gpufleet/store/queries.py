"""Every query gpufleet runs, by name, on one connection inside one transaction."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from gpufleet.domain.audit_chain import Head
from gpufleet.domain.history import STEP_SERIES, Thinning
from gpufleet.domain.records import (
    ApiKey,
    Attempt,
    AuditEvent,
    GpuStat,
    Job,
    LogLine,
    StoredConfig,
    WorkedAttempt,
    Worker,
    effective_labels,
)
from gpufleet.domain.states import (
    AttemptStatus,
    JobStatus,
    RetryOn,
    Target,
    WorkerStatus,
    WorkerType,
)
from gpufleet.domain.webhooks import Delivery, DeliveryStatus, Subscription, Webhook
from gpufleet.store.tables import (
    api_keys,
    audit_events,
    configs,
    job_attempts,
    job_logs,
    jobs,
    progress_points,
    progress_series,
    webhook_deliveries,
    webhooks,
    worker_events,
    worker_tokens,
    workers,
)

# job_logs.seq is a 32-bit integer on PostgreSQL: a cursor past it is compared here, since
# the driver refuses to send it.
LOG_SEQ_MAX = 2**31 - 1


@dataclass(frozen=True, slots=True)
class JobFilter:
    statuses: Sequence[str] = ()
    worker_id: str | None = None
    target: str | None = None
    config_name: str | None = None
    worker: str | None = None  # a worker's id, or its name
    labels: Mapping[str, str] | None = None  # the job asks for each of these, exactly
    id_prefix: str | None = None


@dataclass(frozen=True, slots=True)
class AuditFilter:
    event_type: str | None = None  # exact, or a prefix ending in '.' ("worker.")
    actor: str | None = None
    target: str | None = None
    since: datetime | None = None
    until: datetime | None = None


def _worker(row: sa.Row[Any]) -> Worker:
    m = row._mapping
    admin = dict(m["admin_labels"])
    reported = dict(m["reported_labels"])
    return Worker(
        id=m["id"],
        name=m["name"],
        status=WorkerStatus(m["status"]),
        worker_type=WorkerType(m["worker_type"]),
        type_set_by_admin=m["type_set_by_admin"],
        labels=effective_labels(reported, admin),
        admin_labels=admin,
        drained=m["drained"],
        is_local=m["is_local"],
        registered=m["registered"],
        gpu_count=m["gpu_count"],
        gpu_name=m["gpu_name"],
        gpu_vram_gb=m["gpu_vram_gb"],
        accelerator_type=m["accelerator_type"],
        capabilities=dict(m["capabilities"]),
        current_job_id=m["current_job_id"],
        current_attempt_id=m["current_attempt_id"],
        stream_owner=m["stream_owner"],
        jobs_run=m["jobs_run"],
        created_at=m["created_at"],
        last_heartbeat=m["last_heartbeat"],
        connected_at=m["connected_at"],
        offline_since=m["offline_since"],
        gpu_stats=tuple(GpuStat(**g) for g in m["gpu_stats"] or ()),
        gpu_stats_at=m["gpu_stats_at"],
        reported_labels=reported,
        token_issued_at=m["token_issued_at"],
    )


def _job(row: sa.Row[Any]) -> Job:
    m = row._mapping
    return Job(
        id=m["id"],
        status=JobStatus(m["status"]),
        config_name=m["config_name"],
        config=dict(m["config"]),
        target=Target(m["target"]),
        worker_labels=dict(m["worker_labels"]),
        gpu_count=m["gpu_count"],
        priority=m["priority"],
        max_retries=m["max_retries"],
        retry_on=frozenset(RetryOn(v) for v in m["retry_on"]),
        attempts=m["attempts"],
        current_attempt_id=m["current_attempt_id"],
        worker_id=m["worker_id"],
        error=m["error"],
        exit_code=m["exit_code"],
        progress=m["progress"],
        submitted_by=m["submitted_by"],
        created_at=m["created_at"],
        updated_at=m["updated_at"],
        started_at=m["started_at"],
        ended_at=m["ended_at"],
        rerun_of=m["rerun_of"],
    )


def _attempt(row: sa.Row[Any]) -> Attempt:
    m = row._mapping
    return Attempt(
        id=m["id"],
        job_id=m["job_id"],
        worker_id=m["worker_id"],
        number=m["number"],
        status=AttemptStatus(m["status"]),
        offered_at=m["offered_at"],
        acknowledged_at=m["acknowledged_at"],
        started_at=m["started_at"],
        ended_at=m["ended_at"],
        error=m["error"],
        exit_code=m["exit_code"],
    )


def _audit(row: sa.Row[Any]) -> AuditEvent:
    m = row._mapping
    return AuditEvent(
        id=m["id"],
        ts=m["ts"],
        event_type=m["event_type"],
        actor=m["actor"],
        target=m["target"],
        client_addr=m["client_addr"],
        detail=dict(m["detail"]),
    )


def _api_key(row: sa.Row[Any]) -> ApiKey:
    m = row._mapping
    return ApiKey(
        id=m["id"],
        name=m["name"],
        permissions=frozenset(m["permissions"]),
        created_at=m["created_at"],
        revoked=m["revoked_at"] is not None,
        last_used_at=m["last_used_at"],
    )


class Queries:
    """Named queries bound to one connection. The caller owns the transaction."""

    def __init__(self, conn: AsyncConnection) -> None:
        self.conn = conn
        self._pg = conn.dialect.name == "postgresql"

    async def _rowcount(self, stmt: sa.Executable, params: Any = None) -> int:
        result = await self.conn.execute(stmt, params)
        return int(result.rowcount)

    def _locked(self, stmt: sa.Select[Any]) -> sa.Select[Any]:
        return stmt.with_for_update() if self._pg else stmt

    # ---- workers -------------------------------------------------------------------------

    async def insert_worker(self, values: Mapping[str, Any]) -> None:
        await self.conn.execute(sa.insert(workers).values(**values))

    async def get_worker(self, worker_id: str, *, lock: bool = False) -> Worker | None:
        stmt = sa.select(workers).where(workers.c.id == worker_id)
        row = (await self.conn.execute(self._locked(stmt) if lock else stmt)).first()
        return _worker(row) if row else None

    async def list_workers(self, statuses: Iterable[str] = ()) -> list[Worker]:
        stmt = sa.select(workers).order_by(workers.c.created_at, workers.c.id)
        wanted = list(statuses)
        if wanted:
            stmt = stmt.where(workers.c.status.in_(wanted))
        return [_worker(r) for r in await self.conn.execute(stmt)]

    async def worker_name_taken(self, name: str) -> bool:
        stmt = sa.select(sa.func.count()).select_from(workers).where(workers.c.name == name)
        return int((await self.conn.execute(stmt)).scalar_one()) > 0

    async def update_worker(self, worker_id: str, **values: Any) -> None:
        await self.conn.execute(
            sa.update(workers).where(workers.c.id == worker_id).values(**values)
        )

    async def touch_workers(self, beats: dict[str, datetime]) -> None:
        """Record heartbeat times, one executemany: never for an offline worker (it must
        register again) and never back in time."""
        if not beats:
            return
        stmt = (
            sa.update(workers)
            .where(
                workers.c.id == sa.bindparam("worker_id"),
                workers.c.offline_since.is_(None),
                sa.or_(
                    workers.c.last_heartbeat.is_(None),
                    workers.c.last_heartbeat < sa.bindparam("beat"),
                ),
            )
            .values(last_heartbeat=sa.bindparam("beat"))
        )
        await self.conn.execute(stmt, [{"worker_id": w, "beat": at} for w, at in beats.items()])

    async def record_gpu_stats(self, samples: dict[str, tuple[datetime, list[Any]]]) -> None:
        """Keep each worker's newest GPU sample, one executemany; never for an offline
        worker, nor older than the one stored."""
        if not samples:
            return
        stmt = (
            sa.update(workers)
            .where(
                workers.c.id == sa.bindparam("worker_id"),
                workers.c.offline_since.is_(None),
                sa.or_(
                    workers.c.gpu_stats_at.is_(None),
                    workers.c.gpu_stats_at < sa.bindparam("at"),
                ),
            )
            .values(gpu_stats=sa.bindparam("stats"), gpu_stats_at=sa.bindparam("at"))
        )
        rows = [{"worker_id": w, "at": at, "stats": stats} for w, (at, stats) in samples.items()]
        await self.conn.execute(stmt, rows)

    async def clear_stream_owner(self, worker_id: str, owner: str) -> bool:
        stmt = (
            sa.update(workers)
            .where(workers.c.id == worker_id, workers.c.stream_owner == owner)
            .values(stream_owner=None)
        )
        return await self._rowcount(stmt) == 1

    async def delete_worker(self, worker_id: str) -> None:
        await self.conn.execute(
            sa.delete(worker_tokens).where(worker_tokens.c.worker_id == worker_id)
        )
        await self.conn.execute(
            sa.delete(worker_events).where(worker_events.c.worker_id == worker_id)
        )
        await self.conn.execute(sa.delete(workers).where(workers.c.id == worker_id))

    async def idle_matching_workers(
        self,
        *,
        min_gpus: int,
        local: bool | None,
        after: tuple[bool, int, str] | None,
        limit: int,
    ) -> list[Worker]:
        """Registered idle workers with GPUs enough for a job, in offer order (remote before
        local, fewest GPUs first, then id), paged by keyset: the caller checks labels on each
        page and stops at the first fit, so a match reads a page, not the fleet
        (ix_workers_match). `local`: None for both kinds.
        """
        stmt = sa.select(workers).where(
            workers.c.status == WorkerStatus.IDLE.value,
            workers.c.registered == sa.true(),
            workers.c.gpu_count >= min_gpus,
        )
        if local is not None:
            stmt = stmt.where(workers.c.is_local == local)
        order = (workers.c.is_local, workers.c.gpu_count, workers.c.id)
        if after is not None:
            stmt = stmt.where(sa.tuple_(*order) > sa.tuple_(*after))
        stmt = stmt.order_by(*order).limit(limit)
        return [_worker(r) for r in await self.conn.execute(stmt)]

    async def has_queued_jobs(self) -> bool:
        stmt = sa.select(jobs.c.id).where(jobs.c.status == JobStatus.QUEUED.value).limit(1)
        return (await self.conn.execute(stmt)).first() is not None

    async def idle_workers(self) -> list[Worker]:
        stmt = sa.select(workers).where(workers.c.status == WorkerStatus.IDLE.value)
        return [_worker(r) for r in await self.conn.execute(stmt)]

    async def silent_workers(self, cutoff: datetime) -> list[Worker]:
        stmt = sa.select(workers).where(
            workers.c.status != WorkerStatus.OFFLINE.value,
            sa.or_(workers.c.last_heartbeat.is_(None), workers.c.last_heartbeat < cutoff),
            workers.c.created_at < cutoff,
        )
        return [_worker(r) for r in await self.conn.execute(stmt)]

    async def expired_ephemeral_workers(self, cutoff: datetime) -> list[Worker]:
        stmt = sa.select(workers).where(
            workers.c.status == WorkerStatus.OFFLINE.value,
            workers.c.worker_type == WorkerType.EPHEMERAL.value,
            workers.c.offline_since < cutoff,
        )
        return [_worker(r) for r in await self.conn.execute(stmt)]

    async def workers_with_streams(self) -> list[Worker]:
        stmt = sa.select(workers).where(workers.c.stream_owner.is_not(None))
        return [_worker(r) for r in await self.conn.execute(stmt)]

    # ---- worker tokens -------------------------------------------------------------------

    async def insert_token(self, worker_id: str, token_hash: str, now: datetime) -> None:
        await self.conn.execute(
            sa.insert(worker_tokens).values(
                worker_id=worker_id, token_hash=token_hash, created_at=now
            )
        )
        await self.conn.execute(
            sa.update(workers).where(workers.c.id == worker_id).values(token_issued_at=now)
        )

    async def revoke_tokens(self, worker_id: str, now: datetime) -> None:
        await self.conn.execute(
            sa.update(worker_tokens)
            .where(worker_tokens.c.worker_id == worker_id, worker_tokens.c.revoked_at.is_(None))
            .values(revoked_at=now)
        )

    async def worker_for_token(self, token_hash: str) -> tuple[str, Worker] | None:
        """The live token's stored hash and its worker, or None."""
        stmt = (
            sa.select(worker_tokens.c.token_hash, workers)
            .join(workers, workers.c.id == worker_tokens.c.worker_id)
            .where(worker_tokens.c.token_hash == token_hash, worker_tokens.c.revoked_at.is_(None))
        )
        row = (await self.conn.execute(stmt)).first()
        if row is None:
            return None
        return row._mapping["token_hash"], _worker(row)

    # ---- API keys ------------------------------------------------------------------------

    async def insert_api_key(self, values: Mapping[str, Any]) -> None:
        await self.conn.execute(sa.insert(api_keys).values(**values))

    async def api_key_for_hash(self, key_hash: str) -> tuple[str, ApiKey] | None:
        stmt = sa.select(api_keys).where(
            api_keys.c.key_hash == key_hash, api_keys.c.revoked_at.is_(None)
        )
        row = (await self.conn.execute(stmt)).first()
        return (row._mapping["key_hash"], _api_key(row)) if row else None

    async def get_api_key(self, key_id: str) -> ApiKey | None:
        row = (await self.conn.execute(sa.select(api_keys).where(api_keys.c.id == key_id))).first()
        return _api_key(row) if row else None

    async def list_api_keys(self) -> list[ApiKey]:
        stmt = sa.select(api_keys).order_by(api_keys.c.created_at)
        return [_api_key(r) for r in await self.conn.execute(stmt)]

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

    # ---- configs -------------------------------------------------------------------------

    async def get_config(self, name: str) -> StoredConfig | None:
        row = (await self.conn.execute(sa.select(configs).where(configs.c.name == name))).first()
        return StoredConfig(**row._mapping) if row else None

    async def list_configs(self) -> list[StoredConfig]:
        rows = await self.conn.execute(sa.select(configs).order_by(configs.c.name))
        return [StoredConfig(**r._mapping) for r in rows]

    async def put_config(self, name: str, body: dict[str, Any], now: datetime) -> bool:
        """Insert or replace; True when it was new."""
        updated = await self._rowcount(
            sa.update(configs).where(configs.c.name == name).values(body=body, updated_at=now)
        )
        if updated:
            return False
        await self.conn.execute(
            sa.insert(configs).values(name=name, body=body, created_at=now, updated_at=now)
        )
        return True

    async def delete_config(self, name: str) -> bool:
        return await self._rowcount(sa.delete(configs).where(configs.c.name == name)) == 1

    # ---- jobs ----------------------------------------------------------------------------

    async def insert_job(self, values: Mapping[str, Any]) -> Job:
        """Insert a job; the job as inserted (columns not given are empty)."""
        await self.conn.execute(sa.insert(jobs).values(**values))
        return _job_from({**_EMPTY_JOB, **values})

    async def get_job(self, job_id: str, *, lock: bool = False) -> Job | None:
        stmt = sa.select(jobs).where(jobs.c.id == job_id)
        row = (await self.conn.execute(self._locked(stmt) if lock else stmt)).first()
        return _job(row) if row else None

    async def update_job(self, job_id: str, **values: Any) -> None:
        await self.conn.execute(sa.update(jobs).where(jobs.c.id == job_id).values(**values))

    async def claim_job(self, job_id: str, values: Mapping[str, Any]) -> bool:
        """Queued → offered, only if still queued (the compare-and-set of dispatch)."""
        stmt = (
            sa.update(jobs)
            .where(jobs.c.id == job_id, jobs.c.status == JobStatus.QUEUED.value)
            .values(**values)
        )
        return await self._rowcount(stmt) == 1

    async def claim_worker(self, worker_id: str, values: Mapping[str, Any]) -> bool:
        stmt = (
            sa.update(workers)
            .where(workers.c.id == worker_id, workers.c.status == WorkerStatus.IDLE.value)
            .values(**values)
        )
        return await self._rowcount(stmt) == 1

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
        rows = await self.conn.execute(stmt)
        total = int((await self.conn.execute(total_stmt)).scalar_one())
        return [_job(r) for r in rows], total

    async def get_jobs(self, job_ids: Sequence[str]) -> dict[str, Job]:
        stmt = sa.select(jobs).where(jobs.c.id.in_(list(job_ids)))
        return {r.id: _job(r) for r in await self.conn.execute(stmt)}

    async def reruns_of(self, job_id: str) -> list[str]:
        """The jobs that re-run this one, oldest first (ix_jobs_rerun_of)."""
        stmt = (
            sa.select(jobs.c.id)
            .where(jobs.c.rerun_of == job_id)
            .order_by(jobs.c.created_at, jobs.c.id)
        )
        return [r.id for r in await self.conn.execute(stmt)]

    async def worker_names(self, worker_ids: Iterable[str]) -> dict[str, str]:
        stmt = sa.select(workers.c.id, workers.c.name).where(workers.c.id.in_(set(worker_ids)))
        return {r.id: r.name for r in await self.conn.execute(stmt)}

    async def api_key_names(self, key_ids: Iterable[str]) -> dict[str, str]:
        stmt = sa.select(api_keys.c.id, api_keys.c.name).where(api_keys.c.id.in_(set(key_ids)))
        return {r.id: r.name for r in await self.conn.execute(stmt)}

    async def queued_jobs(
        self,
        *,
        max_gpus: int,
        targets: Sequence[str],
        after: tuple[int, datetime, str] | None,
        limit: int,
        match_keys: Sequence[str] | None = None,
    ) -> list[Job]:
        """Queued jobs a worker of `max_gpus` GPUs could take, in dispatch order, paged;
        with `match_keys`, only those whose label requirement is one of them (ix_jobs_match)."""
        stmt = sa.select(jobs).where(
            jobs.c.status == JobStatus.QUEUED.value,
            jobs.c.gpu_count <= max_gpus,
            jobs.c.target.in_(list(targets)),
        )
        priority: Any = jobs.c.priority
        if match_keys is not None:
            stmt = stmt.where(jobs.c.match_key.in_(list(match_keys)))
            # `+priority` keeps SQLite from walking ix_jobs_queue in order and testing every
            # row (the very scan this filter avoids): it then searches ix_jobs_match.
            priority = sa.literal_column("+jobs.priority")
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
        return [_job(r) for r in await self.conn.execute(stmt)]

    async def count_workers_by_status(self) -> dict[str, int]:
        stmt = sa.select(workers.c.status, sa.func.count()).group_by(workers.c.status)
        return {s: int(n) for s, n in await self.conn.execute(stmt)}

    async def count_jobs_by_status(self) -> dict[str, int]:
        stmt = sa.select(jobs.c.status, sa.func.count()).group_by(jobs.c.status)
        return {s: int(n) for s, n in await self.conn.execute(stmt)}

    # ---- attempts ------------------------------------------------------------------------

    async def insert_attempt(self, values: Mapping[str, Any]) -> None:
        await self.conn.execute(sa.insert(job_attempts).values(**values))

    async def get_attempt(self, attempt_id: str) -> Attempt | None:
        stmt = sa.select(job_attempts).where(job_attempts.c.id == attempt_id)
        row = (await self.conn.execute(stmt)).first()
        return _attempt(row) if row else None

    async def update_attempt(self, attempt_id: str, **values: Any) -> None:
        await self.conn.execute(
            sa.update(job_attempts).where(job_attempts.c.id == attempt_id).values(**values)
        )

    async def attempts_for_job(self, job_id: str) -> list[Attempt]:
        stmt = (
            sa.select(job_attempts)
            .where(job_attempts.c.job_id == job_id)
            .order_by(job_attempts.c.number)
        )
        return [_attempt(r) for r in await self.conn.execute(stmt)]

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
                attempt=_attempt(row),
                config_name=row._mapping["config_name"],
                job_status=JobStatus(row._mapping["job_status"]),
            )
            for row in await self.conn.execute(stmt)
        ]

    async def unacknowledged_offers(self, cutoff: datetime) -> list[Attempt]:
        stmt = sa.select(job_attempts).where(
            job_attempts.c.status == AttemptStatus.OFFERED.value,
            job_attempts.c.offered_at < cutoff,
        )
        return [_attempt(r) for r in await self.conn.execute(stmt)]

    async def pending_offers(self, worker_id: str) -> list[tuple[Attempt, Job]]:
        stmt = (
            sa.select(job_attempts, jobs)
            .join(jobs, jobs.c.id == job_attempts.c.job_id)
            .where(
                job_attempts.c.worker_id == worker_id,
                job_attempts.c.status == AttemptStatus.OFFERED.value,
                jobs.c.current_attempt_id == job_attempts.c.id,
            )
        )
        rows = await self.conn.execute(stmt)
        out = []
        for row in rows:
            m = row._mapping
            attempt_row = {c.name: m[job_attempts.c[c.name]] for c in job_attempts.c}
            job_row = {c.name: m[jobs.c[c.name]] for c in jobs.c}
            out.append((_attempt_from(attempt_row), _job_from(job_row)))
        return out

    # ---- worker events (an outbox the stream drains) -------------------------------------

    async def push_event(self, worker_id: str, payload: dict[str, Any], now: datetime) -> None:
        await self.conn.execute(
            sa.insert(worker_events).values(worker_id=worker_id, payload=payload, created_at=now)
        )

    async def has_events(self, worker_id: str) -> bool:
        stmt = sa.select(worker_events.c.id).where(worker_events.c.worker_id == worker_id).limit(1)
        return (await self.conn.execute(stmt)).first() is not None

    async def take_events(self, worker_id: str) -> list[dict[str, Any]]:
        stmt = (
            sa.select(worker_events.c.id, worker_events.c.payload)
            .where(worker_events.c.worker_id == worker_id)
            .order_by(worker_events.c.id)
        )
        rows = list(await self.conn.execute(stmt))
        if rows:
            ids = [r.id for r in rows]
            await self.conn.execute(sa.delete(worker_events).where(worker_events.c.id.in_(ids)))
        return [dict(r.payload) for r in rows]

    # ---- progress history (domain.history) ------------------------------------------------

    async def progress_counts(self, job_id: str) -> dict[str, int]:
        """Each of the job's series and how many points it was sent."""
        t = progress_series
        stmt = sa.select(t.c.series, t.c.received).where(t.c.job_id == job_id)
        return {r.series: r.received for r in await self.conn.execute(stmt)}

    async def add_progress(
        self, job_id: str, counts: dict[str, int], points: list[dict[str, Any]]
    ) -> None:
        """Store points and the series' new counts (`counts`: series → received before)."""
        t = progress_series
        old = [name for name, n in counts.items() if n > 0]
        new = [name for name, n in counts.items() if n == 0]
        if old:
            await self.conn.execute(
                sa.update(t)
                .where(t.c.job_id == job_id, t.c.series.in_(old))
                .values(received=t.c.received + 1)
            )
        if new:
            await self.conn.execute(
                sa.insert(t), [{"job_id": job_id, "series": s, "received": 1} for s in new]
            )
        await self.conn.execute(sa.insert(progress_points), points)

    async def thin_progress(self, job_id: str, series: list[str], plan: Thinning) -> None:
        p = progress_points
        await self.conn.execute(
            sa.delete(p).where(
                p.c.job_id == job_id,
                p.c.series.in_(series),
                p.c.ordinal >= plan.start,
                p.c.ordinal < plan.stop,
                p.c.ordinal % plan.stride != 0,
            )
        )

    async def progress_values(self, job_id: str) -> list[tuple[str, int, float, int]]:
        """The metric series' kept points: (series, step, value, attempt), oldest first.
        Without their times: parsing 16,000 of them is most of the read on SQLite."""
        p = progress_points
        stmt = (
            sa.select(p.c.series, p.c.step, p.c.value, p.c.attempt)
            .where(p.c.job_id == job_id, p.c.series != STEP_SERIES)
            .order_by(p.c.series, p.c.ordinal)
        )
        return [(r.series, r.step, r.value, r.attempt) for r in await self.conn.execute(stmt)]

    async def progress_steps(self, job_id: str) -> list[tuple[datetime, int, int]]:
        """The step series' kept points: (time, step, attempt), oldest first."""
        p = progress_points
        stmt = (
            sa.select(p.c.ts, p.c.step, p.c.attempt)
            .where(p.c.job_id == job_id, p.c.series == STEP_SERIES)
            .order_by(p.c.ordinal)
        )
        return [(r.ts, r.step, r.attempt) for r in await self.conn.execute(stmt)]

    # ---- logs ----------------------------------------------------------------------------

    async def insert_logs(self, rows: list[dict[str, Any]]) -> None:
        if rows:
            await self.conn.execute(sa.insert(job_logs), rows)

    async def read_logs(
        self,
        job_id: str,
        after: int,
        limit: int,
        *,
        before: int | None = None,
        attempt_id: str | None = None,
    ) -> list[LogLine]:
        """Lines after `after`, oldest first; with `before`, the newest `limit` lines between
        the two (still oldest first); with `attempt_id`, that attempt's only."""
        if after >= LOG_SEQ_MAX:
            return []
        where = [*_log_scope(job_id, attempt_id), job_logs.c.seq > after]
        if before is None:
            stmt = sa.select(job_logs).where(*where).order_by(job_logs.c.seq).limit(limit)
            rows = list(await self.conn.execute(stmt))
        else:
            if before <= LOG_SEQ_MAX:  # a cursor past every seq bounds nothing
                where.append(job_logs.c.seq < before)
            stmt = sa.select(job_logs).where(*where).order_by(job_logs.c.seq.desc()).limit(limit)
            rows = list(await self.conn.execute(stmt))[::-1]
        return [
            LogLine(seq=r.seq, attempt_id=r.attempt_id, stream=r.stream, text=r.text, ts=r.ts)
            for r in rows
        ]

    async def log_tail_cursor(self, job_id: str, count: int, attempt_id: str | None = None) -> int:
        """The cursor after which the last `count` lines begin (0: the log is no longer)."""
        stmt = (
            sa.select(job_logs.c.seq)
            .where(*_log_scope(job_id, attempt_id))
            .order_by(job_logs.c.seq.desc())
            .offset(count)
            .limit(1)
        )
        return int((await self.conn.execute(stmt)).scalar_one_or_none() or 0)

    async def first_log_seq(self, job_id: str, attempt_id: str | None = None) -> int | None:
        stmt = sa.select(sa.func.min(job_logs.c.seq)).where(*_log_scope(job_id, attempt_id))
        first = (await self.conn.execute(stmt)).scalar_one_or_none()
        return None if first is None else int(first)

    async def count_logs(self, attempt_id: str) -> int:
        stmt = (
            sa.select(sa.func.count())
            .select_from(job_logs)
            .where(job_logs.c.attempt_id == attempt_id)
        )
        return int((await self.conn.execute(stmt)).scalar_one())

    async def last_log_lines(self, attempt_id: str, count: int) -> list[str]:
        stmt = (
            sa.select(job_logs.c.text)
            .where(job_logs.c.attempt_id == attempt_id)
            .order_by(job_logs.c.seq.desc())
            .limit(count)
        )
        return [r.text for r in await self.conn.execute(stmt)][::-1]

    # ---- audit ---------------------------------------------------------------------------

    async def insert_audit(self, rows: list[dict[str, Any]]) -> list[AuditEvent]:
        """Audit events in order, one statement for all; returned as stored (ids given, the
        detail as the database keeps it), which is what their MACs must cover."""
        stmt = sa.insert(audit_events).returning(*audit_events.c, sort_by_parameter_order=True)
        return [_audit(r) for r in await self.conn.execute(stmt, rows)]

    async def lock_api_keys(self) -> None:
        """One first-start admin key, however many replicas start at once (PostgreSQL)."""
        if self._pg:
            await self.conn.execute(sa.text("SELECT pg_advisory_xact_lock(1735549282)"))

    async def lock_audit_chain(self) -> None:
        """One appender to the chain at a time, until commit, across orchestrators
        (PostgreSQL; SQLite has one writer). Taken last in a transaction, so held briefly."""
        if self._pg:
            await self.conn.execute(sa.text("SELECT pg_advisory_xact_lock(1735549281)"))

    async def audit_chain_head(self) -> Head | None:
        stmt = (
            sa.select(audit_events.c.chain_seq, audit_events.c.mac)
            .where(audit_events.c.chain_seq.is_not(None))
            .order_by(audit_events.c.chain_seq.desc())
            .limit(1)
        )
        row = (await self.conn.execute(stmt)).first()
        return Head(int(row.chain_seq), str(row.mac)) if row else None

    async def audit_mac_at(self, seq: int) -> str | None:
        stmt = sa.select(audit_events.c.mac).where(audit_events.c.chain_seq == seq)
        mac = (await self.conn.execute(stmt)).scalar_one_or_none()
        return str(mac) if mac is not None else None

    async def audit_event_exists(self, event_type: str) -> bool:
        stmt = sa.select(audit_events.c.id).where(audit_events.c.event_type == event_type)
        return (await self.conn.execute(stmt.limit(1))).first() is not None

    async def unsealed_audit(self, limit: int) -> list[AuditEvent]:
        stmt = (
            sa.select(audit_events)
            .where(audit_events.c.chain_seq.is_(None))
            .order_by(audit_events.c.id)
            .limit(limit)
        )
        return [_audit(r) for r in await self.conn.execute(stmt)]

    async def seal_audit(self, seals: list[tuple[int, int, str]]) -> None:
        """Seal entries: (event id, chain position, MAC) each, in one executemany."""
        if not seals:
            return
        stmt = (
            sa.update(audit_events)
            .where(audit_events.c.id == sa.bindparam("event_id"))
            .values(chain_seq=sa.bindparam("seq"), mac=sa.bindparam("mac_"))
        )
        await self.conn.execute(
            stmt, [{"event_id": i, "seq": seq, "mac_": mac} for i, seq, mac in seals]
        )

    async def audit_chain(self, after_seq: int, limit: int) -> list[tuple[int, str, AuditEvent]]:
        stmt = (
            sa.select(audit_events)
            .where(audit_events.c.chain_seq > after_seq)
            .order_by(audit_events.c.chain_seq)
            .limit(limit)
        )
        return [(int(r.chain_seq), str(r.mac), _audit(r)) for r in await self.conn.execute(stmt)]

    async def count_unsealed_audit(self) -> int:
        stmt = (
            sa.select(sa.func.count())
            .select_from(audit_events)
            .where(audit_events.c.chain_seq.is_(None))
        )
        return int((await self.conn.execute(stmt)).scalar_one())

    async def audit_type_exists(self, event_type: str) -> bool:
        """Whether the log holds this type (or, for a prefix ending in '.', one under it)."""
        col = audit_events.c.event_type
        cond = (
            col.startswith(event_type, autoescape=True)
            if event_type.endswith(".")
            else (col == event_type)
        )
        stmt = sa.select(sa.literal(1)).select_from(audit_events).where(cond).limit(1)
        return (await self.conn.execute(stmt)).first() is not None

    async def list_audit(
        self, f: AuditFilter, limit: int, offset: int
    ) -> tuple[list[AuditEvent], int]:
        conds: list[sa.ColumnElement[bool]] = []
        if f.event_type:
            if f.event_type.endswith("."):
                conds.append(audit_events.c.event_type.startswith(f.event_type, autoescape=True))
            else:
                conds.append(audit_events.c.event_type == f.event_type)
        if f.actor:
            conds.append(audit_events.c.actor == f.actor)
        if f.target:
            conds.append(audit_events.c.target == f.target)
        if f.since:
            conds.append(audit_events.c.ts >= f.since)
        if f.until:
            conds.append(audit_events.c.ts < f.until)
        stmt = (
            sa.select(audit_events)
            .where(*conds)
            .order_by(audit_events.c.id.desc())
            .limit(limit)
            .offset(offset)
        )
        total_stmt = sa.select(sa.func.count()).select_from(audit_events).where(*conds)
        events = [_audit(r) for r in await self.conn.execute(stmt)]
        return events, int((await self.conn.execute(total_stmt)).scalar_one())

    # ---- webhooks and their outbox (domain/webhooks.py) ----------------------------------

    async def insert_webhook(self, values: Mapping[str, Any]) -> None:
        await self.conn.execute(sa.insert(webhooks).values(**values))

    async def list_webhooks(self) -> list[Webhook]:
        stmt = sa.select(webhooks).order_by(webhooks.c.created_at, webhooks.c.id)
        return [_webhook(r) for r in await self.conn.execute(stmt)]

    async def get_webhook(self, webhook_id: str) -> Webhook | None:
        stmt = sa.select(webhooks).where(webhooks.c.id == webhook_id)
        row = (await self.conn.execute(stmt)).first()
        return _webhook(row) if row else None

    async def delete_webhook(self, webhook_id: str) -> bool:
        await self.conn.execute(
            sa.delete(webhook_deliveries).where(webhook_deliveries.c.webhook_id == webhook_id)
        )
        return await self._rowcount(sa.delete(webhooks).where(webhooks.c.id == webhook_id)) == 1

    async def insert_deliveries(self, rows: Sequence[Mapping[str, Any]]) -> None:
        if rows:
            await self.conn.execute(sa.insert(webhook_deliveries), list(rows))

    async def due_deliveries(self, now: datetime, limit: int) -> list[str]:
        d = webhook_deliveries.c
        stmt = (
            sa.select(d.id)
            .where(
                d.status == DeliveryStatus.PENDING.value,
                d.next_at <= now,
                sa.or_(d.claimed_until.is_(None), d.claimed_until < now),
            )
            .order_by(d.next_at, d.id)
            .limit(limit)
        )
        return list((await self.conn.execute(stmt)).scalars())

    async def claim_delivery(self, delivery_id: str, now: datetime, until: datetime) -> bool:
        """Take a due delivery for sending until `until`: one replica wins (the update is
        conditional, and PostgreSQL re-reads the row for a second updater once the first
        commits)."""
        d = webhook_deliveries.c
        stmt = (
            sa.update(webhook_deliveries)
            .where(
                d.id == delivery_id,
                d.status == DeliveryStatus.PENDING.value,
                d.next_at <= now,
                sa.or_(d.claimed_until.is_(None), d.claimed_until < now),
            )
            .values(claimed_until=until)
        )
        return await self._rowcount(stmt) == 1

    async def get_delivery(self, delivery_id: str) -> Delivery | None:
        stmt = sa.select(webhook_deliveries).where(webhook_deliveries.c.id == delivery_id)
        row = (await self.conn.execute(stmt)).first()
        return _delivery(row) if row else None

    async def update_delivery(self, delivery_id: str, **values: Any) -> None:
        await self.conn.execute(
            sa.update(webhook_deliveries)
            .where(webhook_deliveries.c.id == delivery_id)
            .values(**values)
        )

    async def list_deliveries(self, webhook_id: str, limit: int) -> list[Delivery]:
        d = webhook_deliveries.c
        stmt = (
            sa.select(webhook_deliveries)
            .where(d.webhook_id == webhook_id)
            .order_by(d.created_at.desc(), d.id.desc())
            .limit(limit)
        )
        return [_delivery(r) for r in await self.conn.execute(stmt)]

    async def prune_deliveries(self, before: datetime) -> int:
        """Forget finished deliveries created before `before` (the log is kept bounded)."""
        d = webhook_deliveries.c
        stmt = sa.delete(webhook_deliveries).where(
            d.status != DeliveryStatus.PENDING.value, d.created_at < before
        )
        return await self._rowcount(stmt)


def _webhook(row: sa.Row[Any]) -> Webhook:
    m = row._mapping
    return Webhook(
        id=m["id"],
        url=m["url"],
        events=frozenset(Subscription(e) for e in m["events"]),
        secret_sealed=m["secret_sealed"],
        created_at=m["created_at"],
        created_by=m["created_by"],
    )


def _delivery(row: sa.Row[Any]) -> Delivery:
    m = row._mapping
    return Delivery(
        id=m["id"],
        webhook_id=m["webhook_id"],
        event=m["event"],
        body=m["body"],
        status=DeliveryStatus(m["status"]),
        attempts=m["attempts"],
        created_at=m["created_at"],
        next_at=m["next_at"],
        last_attempt_at=m["last_attempt_at"],
        status_code=m["status_code"],
        error=m["error"],
    )


class _RowLike:
    """Lets the row mappers read a plain dict as if it were a result row."""

    def __init__(self, mapping: dict[str, Any]) -> None:
        self._mapping = mapping


def _attempt_from(mapping: dict[str, Any]) -> Attempt:
    return _attempt(_RowLike(mapping))  # type: ignore[arg-type]


_EMPTY_JOB: dict[str, Any] = {column.name: None for column in jobs.c}


def _job_from(mapping: dict[str, Any]) -> Job:
    return _job(_RowLike(mapping))  # type: ignore[arg-type]


def _log_scope(job_id: str, attempt_id: str | None) -> list[sa.ColumnElement[bool]]:
    scope = [job_logs.c.job_id == job_id]
    if attempt_id is not None:
        scope.append(job_logs.c.attempt_id == attempt_id)
    return scope
