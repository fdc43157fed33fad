"""The queue policy's row, what the scheduler ranks by (teams, users, their usage and what
runs), usage samples, and the jobs approvals and the cleanup act on."""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import sqlalchemy as sa

from gpufleet.domain.levels import Level
from gpufleet.domain.policy import LIMIT_FIELDS, Limits, Policy
from gpufleet.domain.records import Job, Member
from gpufleet.domain.states import PLACED_JOB, TERMINAL_JOB, WAITING_JOB, JobStatus, WorkerStatus
from gpufleet.store.direct import DirectSelect
from gpufleet.store.queries import rows
from gpufleet.store.queries.base import QueryBase
from gpufleet.store.tables import (
    job_attempts,
    jobs,
    queue_policy,
    team_members,
    teams,
    usage_samples,
    users,
    workers,
)

POLICY_ID = 1


@dataclass(frozen=True, slots=True)
class RunningRow:
    """What runs (offered or running), summed by team and user: one row of the GROUP BY."""

    team_id: str | None
    user_id: str | None
    jobs: int
    gpus: int


@dataclass(frozen=True, slots=True)
class PlacedJob:
    """A job on a worker, with what preemption reads of its attempt."""

    job: Job
    attempt_id: str
    started_at: datetime | None
    preempt_at: datetime | None


_LEVELS = frozenset(level.value for level in Level)


def policy_of(m: Mapping[str, Any]) -> Policy:
    """The domain's policy from its row."""
    return Policy(
        limits=Limits(**{name: m[name] for name in LIMIT_FIELDS}),
        fair_share=bool(m["fair_share"]),
        half_life_s=float(m["half_life_s"]),
        preemption=bool(m["preemption"]),
        min_runtime_s=float(m["min_runtime_s"]),
        preempt_grace_s=float(m["preempt_grace_s"]),
        approve_gpus_over=m["approve_gpus_over"],
        approve_levels=frozenset(Level(v) for v in m["approve_levels"] or [] if v in _LEVELS),
    )


_OWN_LIMITS = sa.or_(
    sa.exists().where(sa.or_(teams.c.max_gpus.isnot(None), teams.c.max_jobs.isnot(None))),
    sa.exists().where(sa.or_(users.c.max_gpus.isnot(None), users.c.max_jobs.isnot(None))),
)
_DISPATCH_POLICY = DirectSelect(  # every submit's
    sa.select(queue_policy, _OWN_LIMITS.label("own_limits")).where(queue_policy.c.id == POLICY_ID)
)


class PolicyQueries(QueryBase):
    async def get_policy(self, *, lock: bool = False) -> Policy:
        """The policy; the defaults (nothing limited) if its row is missing."""
        row = await self.policy_row(lock=lock)
        return policy_of(row) if row else Policy()

    async def policy_row(self, *, lock: bool = False) -> dict[str, Any]:
        """The policy's one row (id 1), each field by name; locked until commit with `lock`
        on PostgreSQL (dispatches that check limits take it first: one at a time)."""
        stmt = sa.select(queue_policy).where(queue_policy.c.id == POLICY_ID)
        row = await self._first(self._locked(stmt) if lock else stmt)
        return dict(row) if row else {}

    async def dispatch_policy(self, *, lock: bool = False) -> tuple[Policy, bool]:
        """The policy, and whether any team or user has a limit of its own: one statement."""
        row = await self._either(_DISPATCH_POLICY, lock).first(self.conn, {})
        if row is None:
            return Policy(), bool((await self.conn.execute(sa.select(_OWN_LIMITS))).scalar())
        return policy_of(row), bool(row["own_limits"])

    async def update_policy(self, values: Mapping[str, Any]) -> None:
        stmt = sa.update(queue_policy).where(queue_policy.c.id == POLICY_ID).values(**values)
        if await self._rowcount(stmt) == 0:
            await self.conn.execute(
                sa.insert(queue_policy).values(
                    id=POLICY_ID, **{"approve_levels": ["viewer"], **values}
                )
            )

    async def all_members(self) -> list[Member]:
        return [rows.member(m) for m in await self._mapped(sa.select(team_members))]

    async def running_tallies(self) -> list[RunningRow]:
        """Jobs offered or running and their GPUs (every node's), by team and user (one GROUP
        BY)."""
        stmt = (
            sa.select(
                jobs.c.team_id,
                jobs.c.user_id,
                sa.func.count().label("n"),
                sa.func.coalesce(sa.func.sum(jobs.c.gpu_count * jobs.c.nodes), 0).label("gpus"),
            )
            .where(jobs.c.status.in_([s.value for s in PLACED_JOB]))
            .group_by(jobs.c.team_id, jobs.c.user_id)
        )
        return [
            RunningRow(r.team_id, r.user_id, int(r.n), int(r.gpus))
            for r in await self.conn.execute(stmt)
        ]

    async def registered_gpus(self) -> int:
        """The GPUs of every worker that is not offline (what shares are shares of)."""
        stmt = sa.select(sa.func.coalesce(sa.func.sum(workers.c.gpu_count), 0)).where(
            workers.c.status != WorkerStatus.OFFLINE.value
        )
        return int((await self.conn.execute(stmt)).scalar_one())

    async def waiting_count(self, user_id: str) -> int:
        """The user's jobs queued or waiting for approval."""
        stmt = (
            sa.select(sa.func.count())
            .select_from(jobs)
            .where(
                jobs.c.status.in_([s.value for s in WAITING_JOB]),
                jobs.c.user_id == user_id,
            )
        )
        return int((await self.conn.execute(stmt)).scalar_one())

    async def all_queued(self, limit: int) -> list[Job]:
        """Queued jobs no dependency holds, in priority then age order (positions, the
        preemption loop, the pools' demand)."""
        stmt = (
            sa.select(jobs)
            .where(jobs.c.status == JobStatus.QUEUED.value, jobs.c.waits_on.is_(None))
            .order_by(jobs.c.priority.desc(), jobs.c.created_at, jobs.c.id)
            .limit(limit)
        )
        return [rows.job(m) for m in await self._mapped(stmt)]

    async def placed_jobs(self) -> list[PlacedJob]:
        """Jobs offered or running, each with its current attempt's start and preemption."""
        stmt = (
            sa.select(
                jobs,
                job_attempts.c.started_at.label("attempt_started_at"),
                job_attempts.c.preempt_at.label("attempt_preempt_at"),
            )
            .join(job_attempts, job_attempts.c.id == jobs.c.current_attempt_id)
            .where(jobs.c.status.in_([s.value for s in PLACED_JOB]))
        )
        return [
            PlacedJob(
                rows.job(m),
                m["current_attempt_id"],
                m["attempt_started_at"],
                m["attempt_preempt_at"],
            )
            for m in await self._mapped(stmt)
        ]

    async def mark_preempt(self, attempt_id: str, preempted_by: str, at: datetime) -> bool:
        """Record that the attempt is being stopped for `preempted_by`, once."""
        stmt = (
            sa.update(job_attempts)
            .where(job_attempts.c.id == attempt_id, job_attempts.c.preempted_by.is_(None))
            .values(preempted_by=preempted_by, preempt_at=at)
        )
        return await self._rowcount(stmt) == 1

    async def jobs_by_status_user(self) -> list[tuple[str, str | None, int]]:
        stmt = sa.select(jobs.c.status, jobs.c.user_id, sa.func.count()).group_by(
            jobs.c.status, jobs.c.user_id
        )
        return [(s, u, int(n)) for s, u, n in await self.conn.execute(stmt)]

    async def waits_started(self, since: datetime) -> list[tuple[datetime, datetime]]:
        """(created, first offered) of attempts number 1 offered since `since`: the waits."""
        stmt = (
            sa.select(jobs.c.created_at, job_attempts.c.offered_at)
            .join(job_attempts, job_attempts.c.job_id == jobs.c.id)
            .where(job_attempts.c.number == 1, job_attempts.c.offered_at >= since)
        )
        return [(c, o) for c, o in await self.conn.execute(stmt)]

    async def user_jobs(self, user_id: str, statuses: Collection[JobStatus]) -> list[Job]:
        stmt = sa.select(jobs).where(
            jobs.c.user_id == user_id, jobs.c.status.in_([s.value for s in statuses])
        )
        return [rows.job(m) for m in await self._mapped(stmt)]

    async def set_usage(
        self,
        team_usage: Mapping[str, float],
        user_usage: Mapping[str, float],
        member_usage: Mapping[tuple[str, str], float],
        at: datetime,
    ) -> None:
        for team_id, value in team_usage.items():
            await self.conn.execute(
                sa.update(teams).where(teams.c.id == team_id).values(usage=value, usage_at=at)
            )
        for user_id, value in user_usage.items():
            await self.conn.execute(
                sa.update(users).where(users.c.id == user_id).values(usage=value, usage_at=at)
            )
        for (team_id, user_id), value in member_usage.items():
            await self.conn.execute(
                sa.update(team_members)
                .where(team_members.c.team_id == team_id, team_members.c.user_id == user_id)
                .values(usage=value, usage_at=at)
            )

    async def add_usage_samples(self, samples: Sequence[Mapping[str, Any]]) -> None:
        if samples:
            await self.conn.execute(sa.insert(usage_samples), list(samples))

    async def prune_usage_samples(self, before: datetime) -> int:
        return await self._rowcount(sa.delete(usage_samples).where(usage_samples.c.at < before))

    async def old_terminal_jobs(self, before: datetime, limit: int) -> list[str]:
        """Ended jobs that ended (or, never started, were last changed) before `before`,
        but for those whose artifacts are pinned."""
        ended = sa.func.coalesce(jobs.c.ended_at, jobs.c.updated_at)
        stmt = (
            sa.select(jobs.c.id)
            .where(
                jobs.c.status.in_([s.value for s in TERMINAL_JOB]),
                ended < before,
                jobs.c.artifacts_pinned.is_(False),
            )
            .limit(limit)
        )
        return [r.id for r in await self.conn.execute(stmt)]

    async def delete_jobs(self, job_ids: Sequence[str]) -> int:
        """Delete jobs; their attempts, logs, progress and artifact rows go with them (the
        foreign keys cascade)."""
        if not job_ids:
            return 0
        return await self._rowcount(sa.delete(jobs).where(jobs.c.id.in_(list(job_ids))))

    async def team_names(self, team_ids: Collection[str]) -> dict[str, str]:
        stmt = sa.select(teams.c.id, teams.c.name).where(teams.c.id.in_(list(team_ids)))
        return {r.id: r.name for r in await self.conn.execute(stmt)}
