"""Sweeps: stored with their jobs, listed, and their jobs on workers counted."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict

import sqlalchemy as sa

from gpufleet.domain.history import STEP_SERIES
from gpufleet.domain.records import Job
from gpufleet.domain.states import PLACED_JOB
from gpufleet.domain.sweeps import Sweep
from gpufleet.store.queries import rows
from gpufleet.store.queries.base import QueryBase
from gpufleet.store.tables import jobs, progress_points, progress_series, sweeps

_PLACED = sorted(s.value for s in PLACED_JOB)


class SweepQueries(QueryBase):
    async def insert_sweep(self, sweep: Sweep) -> None:
        await self.conn.execute(sa.insert(sweeps), asdict(sweep))

    async def delete_sweep(self, sweep_id: str) -> None:
        await self.conn.execute(sa.delete(sweeps).where(sweeps.c.id == sweep_id))

    async def get_sweep(self, sweep_id: str, *, skip_locked: bool = False) -> Sweep | None:
        """`skip_locked` (PostgreSQL): lock its row, or None while another transaction holds
        it (a dispatch counting its jobs on workers: `services/sweeps.py` `has_room`)."""
        stmt = sa.select(sweeps).where(sweeps.c.id == sweep_id)
        if skip_locked and self._pg:
            stmt = stmt.with_for_update(skip_locked=True)
        row = await self._first(stmt)
        return rows.sweep(row) if row else None

    async def list_sweeps(
        self, limit: int, offset: int, user_id: str | None = None
    ) -> tuple[list[Sweep], int]:
        """Newest first; `user_id`: only that user's."""
        stmt = sa.select(sweeps)
        count = sa.select(sa.func.count()).select_from(sweeps)
        if user_id is not None:
            stmt = stmt.where(sweeps.c.user_id == user_id)
            count = count.where(sweeps.c.user_id == user_id)
        stmt = stmt.order_by(sweeps.c.created_at.desc(), sweeps.c.id.desc())
        found = [rows.sweep(m) for m in await self._mapped(stmt.limit(limit).offset(offset))]
        return found, int((await self.conn.execute(count)).scalar_one())

    async def sweep_jobs(self, sweep_ids: Sequence[str]) -> list[Job]:
        """The jobs of these sweeps (re-runs among them), oldest first (ix_jobs_sweep)."""
        if not sweep_ids:
            return []
        stmt = (
            sa.select(jobs)
            .where(jobs.c.sweep_id.in_(list(sweep_ids)))
            .order_by(jobs.c.created_at, jobs.c.id)
        )
        return [rows.job(m) for m in await self._mapped(stmt)]

    async def sweep_counts(self, sweep_ids: Sequence[str]) -> dict[str, dict[str, int]]:
        """Each sweep's latest jobs (those no job of it re-runs) by status, in one read."""
        if not sweep_ids:
            return {}
        ids = list(sweep_ids)
        rerun = sa.select(jobs.c.rerun_of).where(
            jobs.c.sweep_id.in_(ids), jobs.c.rerun_of.is_not(None)
        )
        stmt = (
            sa.select(jobs.c.sweep_id, jobs.c.status, sa.func.count())
            .where(jobs.c.sweep_id.in_(ids), jobs.c.id.not_in(rerun))
            .group_by(jobs.c.sweep_id, jobs.c.status)
        )
        out: dict[str, dict[str, int]] = {}
        for sweep_id, status, n in await self.conn.execute(stmt):
            out.setdefault(sweep_id, {})[status] = int(n)
        return out

    async def sweep_placed(self, sweep_id: str) -> int:
        """Its jobs offered to or running on workers now (ix_jobs_sweep)."""
        stmt = (
            sa.select(sa.func.count())
            .select_from(jobs)
            .where(jobs.c.sweep_id == sweep_id, jobs.c.status.in_(_PLACED))
        )
        return int((await self.conn.execute(stmt)).scalar_one())

    async def sweep_metrics(self, job_ids: Sequence[str]) -> list[str]:
        """The metric series these jobs' progress history holds, by name."""
        if not job_ids:
            return []
        s = progress_series
        stmt = (
            sa.select(s.c.series)
            .where(s.c.job_id.in_(list(job_ids)), s.c.series != STEP_SERIES)
            .distinct()
            .order_by(s.c.series)
        )
        return [r.series for r in await self.conn.execute(stmt)]

    async def sweep_series(
        self, job_ids: Sequence[str], name: str
    ) -> dict[str, list[tuple[int, float, int]]]:
        """One metric's kept points of each of these jobs: job id → [(step, value, attempt)],
        oldest first."""
        if not job_ids:
            return {}
        p = progress_points
        stmt = (
            sa.select(p.c.job_id, p.c.step, p.c.value, p.c.attempt)
            .where(p.c.job_id.in_(list(job_ids)), p.c.series == name)
            .order_by(p.c.job_id, p.c.ordinal)
        )
        out: dict[str, list[tuple[int, float, int]]] = {}
        for r in await self.conn.execute(stmt):
            out.setdefault(r.job_id, []).append((r.step, r.value, r.attempt))
        return out
