"""Workers, their tokens, and the events outbox their streams drain."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any

import sqlalchemy as sa

from gpufleet.domain.records import Worker
from gpufleet.domain.states import WorkerStatus, WorkerType
from gpufleet.store.direct import Direct, DirectSelect
from gpufleet.store.queries import rows
from gpufleet.store.queries.base import ROW, QueryBase, by, no_status
from gpufleet.store.tables import worker_events, worker_tokens, workers


def _newer_on_online(stamp: sa.Column[Any], param: str) -> sa.Update:
    """An executemany update of the worker `worker_id`, only while it is online (an offline
    worker must register again) and only if `param` is newer than its `stamp` (never back in
    time: reports may arrive out of order)."""
    return sa.update(workers).where(
        workers.c.id == sa.bindparam("worker_id"),
        workers.c.offline_since.is_(None),
        sa.or_(stamp.is_(None), stamp < sa.bindparam(param)),
    )


_UPDATE_WORKER = Direct(sa.update(workers).where(workers.c.id == by(ROW)), by_columns=True)
# Idle and held for no gang (a held worker waits for its gang: domain/gang.py).
_CLAIM_WORKER = Direct(
    sa.update(workers).where(
        workers.c.id == by(ROW),
        workers.c.status == WorkerStatus.IDLE.value,
        workers.c.held_for.is_(None),
    ),
    by_columns=True,
)
_WORKER = DirectSelect(sa.select(workers).where(workers.c.id == by("id")))
# The health sweep's reads, twice a second at rest in every orchestrator: built once (#32).
_SILENT = sa.select(workers).where(
    workers.c.status != WorkerStatus.OFFLINE.value,
    sa.or_(workers.c.registered.is_(True), workers.c.stream_owner.is_not(None)),
    sa.or_(workers.c.last_heartbeat.is_(None), workers.c.last_heartbeat < by("cutoff")),
    workers.c.created_at < by("cutoff"),
)
_EXPIRED = sa.select(workers).where(
    workers.c.status == WorkerStatus.OFFLINE.value,
    workers.c.worker_type == WorkerType.EPHEMERAL.value,
    workers.c.offline_since < by("cutoff"),
)
_TOKEN = Direct(
    sa.select(worker_tokens.c.token_hash, workers)
    .join(workers, workers.c.id == worker_tokens.c.worker_id)
    .where(worker_tokens.c.token_hash == by("hash"), worker_tokens.c.revoked_at.is_(None))
)

_TOKENS = (
    sa.select(worker_tokens.c.token_hash, workers)
    .join(workers, workers.c.id == worker_tokens.c.worker_id)
    .where(
        worker_tokens.c.token_hash.in_(sa.bindparam("hashes", expanding=True)),
        worker_tokens.c.revoked_at.is_(None),
    )
)


def _idle_matching(local: bool, after: bool) -> sa.Select[Any]:
    """`idle_matching_workers`' page, built once for each shape (a submit's first fit)."""
    stmt = sa.select(workers).where(
        workers.c.status == WorkerStatus.IDLE.value,
        workers.c.registered == sa.true(),
        workers.c.gpu_count >= by("min_gpus"),
        workers.c.held_for.is_(None),  # held for a gang: not offered to other jobs
    )
    if local:
        stmt = stmt.where(workers.c.is_local == by("local"))
    order = (workers.c.is_local, workers.c.gpu_count, workers.c.id)
    if after:
        names = ("after_local", "after_gpus", "after_id")
        typed = (sa.bindparam(n, type_=c.type) for n, c in zip(names, order, strict=True))
        stmt = stmt.where(sa.tuple_(*order) > sa.tuple_(*typed))
    return stmt.order_by(*order).limit(sa.bindparam("limit", type_=sa.Integer()))


_IDLE_MATCHING = {
    (local, after): Direct(_idle_matching(local, after))
    for local in (False, True)
    for after in (False, True)
}


class WorkerQueries(QueryBase):
    async def insert_worker(self, status: WorkerStatus, values: Mapping[str, Any]) -> None:
        """A new worker in `status` (connecting): `services/lifecycle.py` alone calls it."""
        self.workers_written.add(str(values["id"]))
        await self.conn.execute(sa.insert(workers).values(**no_status(values), status=status.value))

    async def get_worker(self, worker_id: str, *, lock: bool = False) -> Worker | None:
        row: Mapping[Any, Any] | None = self.workers_locked.pop(worker_id, None) if lock else None
        if row is None or worker_id in self.workers_written:
            row = await self._either(_WORKER, lock).first(self.conn, {"id": worker_id})
        return rows.worker(row) if row else None

    async def lock_workers(self, worker_ids: Iterable[str]) -> None:
        """Lock the workers' rows in id order, in one statement (PostgreSQL locks the rows of
        `SELECT … ORDER BY id FOR UPDATE` as it returns them); nothing on SQLite, where one
        transaction writes at a time. A gang's nodes cost one round trip, not one a node;
        the next locked read of each (`get_worker`) takes the row read here."""
        if self._pg:
            wanted = workers.c.id.in_(set(worker_ids))
            stmt = sa.select(workers).where(wanted).order_by(workers.c.id)
            for row in await self._mapped(stmt.with_for_update()):
                self.workers_locked[row["id"]] = row

    def _forget_locked(self, worker_ids: Iterable[str]) -> None:
        """Rows written without `workers_written` (the cache keeps its copies of them): a
        locked read in this transaction reads them again."""
        for worker_id in worker_ids:
            self.workers_locked.pop(worker_id, None)

    async def list_workers(self, statuses: Iterable[str] = ()) -> list[Worker]:
        stmt = sa.select(workers).order_by(workers.c.created_at, workers.c.id)
        wanted = list(statuses)
        if wanted:
            stmt = stmt.where(workers.c.status.in_(wanted))
        return [rows.worker(m) for m in await self._mapped(stmt)]

    async def worker_name_taken(self, name: str) -> bool:
        stmt = sa.select(sa.func.count()).select_from(workers).where(workers.c.name == name)
        return int((await self.conn.execute(stmt)).scalar_one()) > 0

    async def worker_names(self, worker_ids: Iterable[str]) -> dict[str, str]:
        stmt = sa.select(workers.c.id, workers.c.name).where(workers.c.id.in_(set(worker_ids)))
        return {r.id: r.name for r in await self.conn.execute(stmt)}

    async def set_worker_status(self, worker_id: str, status: WorkerStatus, **values: Any) -> None:
        """Write a worker's facts and the status derived from them: `services/lifecycle.py`
        alone calls it (`save_worker`)."""
        self.workers_written.add(worker_id)
        params = {**no_status(values), "status": status.value, ROW: worker_id}
        await _UPDATE_WORKER.rows(self.conn, params)

    async def claim_worker(self, worker_id: str, status: WorkerStatus, **values: Any) -> bool:
        """Idle → `status` (busy), only if still idle and held for no gang (the
        compare-and-set of dispatch); `services/lifecycle.py` alone calls it."""
        self.workers_written.add(worker_id)
        params = {**no_status(values), "status": status.value, ROW: worker_id}
        return await _CLAIM_WORKER.count(self.conn, params) == 1

    async def touch_workers(self, beats: Mapping[str, tuple[datetime, datetime | None]]) -> None:
        """Record heartbeat times (each with the issue time of the token it came with), one
        executemany: never for an offline worker (it must register again), never back in time,
        and never one sent with a token rotated since. The worker cache keeps its copies
        (their last heartbeat is the one field it may hold stale). The rows are written in id
        order, the lock order of every transaction that locks several workers
        (`lock_workers`): in the order the heartbeats came, a flush deadlocked with a gang's
        node report (#35), answered 503."""
        if not beats:
            return
        self._forget_locked(beats)
        stmt = (
            _newer_on_online(workers.c.last_heartbeat, "beat")
            .where(workers.c.token_issued_at.is_not_distinct_from(sa.bindparam("issued")))
            .values(last_heartbeat=sa.bindparam("beat"))
        )
        await self.conn.execute(
            stmt,
            [
                {"worker_id": w, "beat": at, "issued": issued}
                for w, (at, issued) in sorted(beats.items())
            ],
        )

    async def record_gpu_stats(self, samples: dict[str, tuple[datetime, list[Any]]]) -> None:
        """Keep each worker's newest GPU sample, one executemany; never for an offline
        worker, nor older than the one stored. The worker cache keeps its copies. In id
        order, as `touch_workers`."""
        if not samples:
            return
        self._forget_locked(samples)
        stmt = _newer_on_online(workers.c.gpu_stats_at, "at").values(
            gpu_stats=sa.bindparam("stats"), gpu_stats_at=sa.bindparam("at")
        )
        rows = [
            {"worker_id": w, "at": at, "stats": stats} for w, (at, stats) in sorted(samples.items())
        ]
        await self.conn.execute(stmt, rows)

    async def delete_worker(self, worker_id: str) -> None:
        self.workers_written.add(worker_id)
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
        params: dict[str, Any] = {"min_gpus": min_gpus, "limit": limit, "local": local}
        if after is not None:
            params |= dict(zip(("after_local", "after_gpus", "after_id"), after, strict=True))
        stmt = _IDLE_MATCHING[(local is not None, after is not None)]
        return [rows.worker(m) for m in await stmt.all(self.conn, params)]

    async def idle_workers(self) -> list[Worker]:
        stmt = sa.select(workers).where(workers.c.status == WorkerStatus.IDLE.value)
        return [rows.worker(m) for m in await self._mapped(stmt)]

    async def silent_workers(self, cutoff: datetime) -> list[Worker]:
        """Workers not heard since `cutoff`; never one that never connected (`ever_connected`):
        no agent has its token, so it is awaited, not lost."""
        return [rows.worker(m) for m in await self._mapped(_SILENT, {"cutoff": cutoff})]

    async def expired_ephemeral_workers(self, cutoff: datetime) -> list[Worker]:
        return [rows.worker(m) for m in await self._mapped(_EXPIRED, {"cutoff": cutoff})]

    async def workers_with_streams(self) -> list[Worker]:
        stmt = sa.select(workers).where(workers.c.stream_owner.is_not(None))
        return [rows.worker(m) for m in await self._mapped(stmt)]

    async def count_workers_by_status(self) -> dict[str, int]:
        stmt = sa.select(workers.c.status, sa.func.count()).group_by(workers.c.status)
        return {s: int(n) for s, n in await self.conn.execute(stmt)}

    async def insert_token(self, worker_id: str, token_hash: str, now: datetime) -> None:
        self.workers_written.add(worker_id)
        await self.conn.execute(
            sa.insert(worker_tokens).values(
                worker_id=worker_id, token_hash=token_hash, created_at=now
            )
        )
        await self.conn.execute(
            sa.update(workers).where(workers.c.id == worker_id).values(token_issued_at=now)
        )

    async def revoke_tokens(self, worker_id: str, now: datetime) -> None:
        self.workers_written.add(worker_id)
        await self.conn.execute(
            sa.update(worker_tokens)
            .where(worker_tokens.c.worker_id == worker_id, worker_tokens.c.revoked_at.is_(None))
            .values(revoked_at=now)
        )

    async def worker_for_token(self, token_hash: str) -> tuple[str, Worker] | None:
        """The live token's stored hash and its worker, or None."""
        row = await _TOKEN.first(self.conn, {"hash": token_hash})
        if row is None:
            return None
        return row["token_hash"], rows.worker(row)

    async def workers_for_tokens(self, token_hashes: Sequence[str]) -> list[tuple[str, Worker]]:
        """`worker_for_token` of each hash, in one statement: those of live tokens."""
        found = await self._mapped(_TOKENS, {"hashes": list(token_hashes)})
        return [(row["token_hash"], rows.worker(row)) for row in found]

    async def push_events(
        self, events: Sequence[tuple[str, dict[str, Any]]], now: datetime
    ) -> None:
        """Queue commands for workers, (worker id, payload) each, in one statement: the stop
        to a gang's every node is one write, not one a node."""
        if events:
            await self.conn.execute(
                sa.insert(worker_events),
                [{"worker_id": w, "payload": p, "created_at": now} for w, p in events],
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
