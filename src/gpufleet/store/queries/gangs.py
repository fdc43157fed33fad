"""Gangs (multi-node jobs): the queued ones, the workers held for them, their attempts' nodes."""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from datetime import datetime
from typing import Any

import sqlalchemy as sa

from gpufleet.domain.records import AttemptNode, Job, Worker
from gpufleet.domain.states import AttemptStatus, JobStatus, NodeState, WorkerStatus
from gpufleet.store import locks
from gpufleet.store.direct import Direct
from gpufleet.store.queries import rows
from gpufleet.store.queries.base import ROW, QueryBase, by
from gpufleet.store.tables import attempt_nodes, job_attempts, jobs, workers

NodeWrite = tuple[str, int, Mapping[str, Any]]  # a node's row to write: attempt id, rank, values
_QUEUED = sa.and_(jobs.c.status == JobStatus.QUEUED.value, jobs.c.waits_on.is_(None))
# The most nodes a queued job asks (ix_jobs_nodes): one read says whether anything waits
# and whether a gang does.
_QUEUED_NODES = Direct(sa.select(sa.func.max(jobs.c.nodes)).where(_QUEUED))
# The nodes still going of completed attempts, with when each completed: the health sweep's
# read, twice a second at rest (#32).
_OUTLIVING = (
    sa.select(attempt_nodes, job_attempts.c.ended_at.label("completed_at"))
    .join(job_attempts, job_attempts.c.id == attempt_nodes.c.attempt_id)
    .where(
        job_attempts.c.status == AttemptStatus.COMPLETED.value,
        attempt_nodes.c.state != NodeState.ENDED.value,
    )
    .order_by(attempt_nodes.c.attempt_id, attempt_nodes.c.rank)
)
_NOT_HELD = {"held_for": None, "held_since": None, "held_note": None}
# A gang's node: idle, and held by no other gang (the compare-and-set of its claim).
_CLAIM_NODE = sa.update(workers).where(
    workers.c.id == by(ROW),
    workers.c.status == WorkerStatus.IDLE.value,
    sa.or_(workers.c.held_for.is_(None), workers.c.held_for == by("gang")),
)


class GangQueries(QueryBase):
    async def queued_nodes(self) -> int | None:
        """The most nodes a queued job asks for; None when no job is queued."""
        most = (await _QUEUED_NODES.rows(self.conn, {}))[0][0]
        return None if most is None else int(most)

    async def queued_gangs(self, limit: int) -> list[Job]:
        """Queued jobs of more than one node, in dispatch order (priority, age, id)."""
        stmt = (
            sa.select(jobs)
            .where(_QUEUED, jobs.c.nodes > 1)
            .order_by(jobs.c.priority.desc(), jobs.c.created_at, jobs.c.id)
            .limit(limit)
        )
        return [rows.job(m) for m in await self._mapped(stmt)]

    async def held_workers(self) -> list[Worker]:
        """Every worker held for a gang (ix_workers_held)."""
        stmt = sa.select(workers).where(workers.c.held_for.is_not(None)).order_by(workers.c.id)
        return [rows.worker(m) for m in await self._mapped(stmt)]

    async def lock_gang_round(self) -> None:
        """One gang round at a time across replicas, until commit (PostgreSQL)."""
        if self._pg:
            await locks.hold_until_commit(self.conn, locks.GANG_ROUND)

    async def hold_workers(
        self, worker_ids: Collection[str], job_id: str, since: datetime, note: str
    ) -> list[str]:
        """Hold idle workers for the gang `job_id`; the ids held (one no longer idle is not)."""
        self.workers_written.update(worker_ids)
        stmt = (
            sa.update(workers)
            .where(workers.c.id.in_(sorted(worker_ids)))
            .where(workers.c.status == WorkerStatus.IDLE.value)
            .values(held_for=job_id, held_since=since, held_note=note)
            .returning(workers.c.id)
        )
        return sorted(r.id for r in await self.conn.execute(stmt))

    async def release_holds(self, worker_ids: Collection[str]) -> None:
        self.workers_written.update(worker_ids)
        stmt = sa.update(workers).where(workers.c.id.in_(sorted(worker_ids))).values(**_NOT_HELD)
        await self.conn.execute(stmt)

    async def release_holds_of(self, job_id: str) -> None:
        """Free every worker held for the job (ix_workers_held)."""
        stmt = (
            sa.update(workers)
            .where(workers.c.held_for == job_id)
            .values(**_NOT_HELD)
            .returning(workers.c.id)
        )
        self.workers_written.update(r.id for r in await self.conn.execute(stmt))

    async def claim_node(
        self, worker_id: str, gang: str, status: WorkerStatus, **values: Any
    ) -> bool:
        """Idle → `status` (busy) for a node of the gang `gang`, only if still idle and held
        by no other gang; its hold ends. `services/lifecycle.py` alone calls it."""
        self.workers_written.add(worker_id)
        params = {**values, **_NOT_HELD, "status": status.value, ROW: worker_id, "gang": gang}
        return await self._rowcount(_CLAIM_NODE, params) == 1

    async def insert_attempt_nodes(
        self, job_id: str, attempt_id: str, number: int, worker_ids: Sequence[str], now: datetime
    ) -> None:
        """One row a node of the attempt, rank 0 first, each offered."""
        await self.conn.execute(
            sa.insert(attempt_nodes),
            [
                {
                    "attempt_id": attempt_id,
                    "rank": rank,
                    "job_id": job_id,
                    "number": number,
                    "worker_id": worker_id,
                    "state": NodeState.OFFERED.value,
                    "offered_at": now,
                }
                for rank, worker_id in enumerate(worker_ids)
            ],
        )

    async def attempt_nodes(self, attempt_id: str) -> list[AttemptNode]:
        """The attempt's nodes in rank order; [] for a one-node attempt."""
        stmt = (
            sa.select(attempt_nodes)
            .where(attempt_nodes.c.attempt_id == attempt_id)
            .order_by(attempt_nodes.c.rank)
        )
        return [rows.attempt_node(m) for m in await self._mapped(stmt)]

    async def end_attempt_nodes(
        self, attempt_id: str, now: datetime, error: str | None, keep: Collection[int] = ()
    ) -> None:
        """End the attempt's nodes not ended yet, but for the ranks in `keep` (they outlive
        it: `rendezvous.on_end`)."""
        stmt = (
            sa.update(attempt_nodes)
            .where(
                attempt_nodes.c.attempt_id == attempt_id,
                attempt_nodes.c.state != NodeState.ENDED.value,
                attempt_nodes.c.rank.not_in(list(keep)),
            )
            .values(state=NodeState.ENDED.value, ended_at=now, error=error)
        )
        await self.conn.execute(stmt)

    async def outliving_nodes(self) -> list[tuple[AttemptNode, datetime | None]]:
        """The nodes still going of attempts that completed (they outlive rank 0), each
        with when its attempt completed."""
        return [
            (
                rows.attempt_node({k: v for k, v in m.items() if k != "completed_at"}),
                m["completed_at"],
            )
            for m in await self._mapped(_OUTLIVING)
        ]

    async def update_attempt_node(self, attempt_id: str, rank: int, **values: Any) -> None:
        """Write one node's row (the rendezvous: its state, address, port, end)."""
        await self.update_attempt_nodes([(attempt_id, rank, values)])

    async def update_attempt_nodes(self, writes: Sequence[NodeWrite]) -> None:
        """Write nodes' rows, (attempt id, rank, values) each: those that set the same
        columns in one statement (a batch of a gang's start reports: one, not one a node)."""
        groups: dict[tuple[str, ...], list[dict[str, Any]]] = {}
        for attempt_id, rank, values in writes:
            row = {f"v_{k}": v for k, v in values.items()}
            if "v_state" in row:
                row["v_state"] = NodeState(row["v_state"]).value
            groups.setdefault(tuple(sorted(values)), []).append(
                {"v_attempt": attempt_id, "v_rank": rank, **row}
            )
        for columns, params in groups.items():
            stmt = (
                sa.update(attempt_nodes)
                .where(
                    attempt_nodes.c.attempt_id == sa.bindparam("v_attempt"),
                    attempt_nodes.c.rank == sa.bindparam("v_rank"),
                )
                .values({c: sa.bindparam(f"v_{c}") for c in columns})
            )
            await self.conn.execute(stmt, params)
