"""The `policy` loop (leader only, every --usage-interval): running jobs' GPU time added to
their teams', users' and members' decayed usage, one usage sample per team, old samples
pruned; then preemption, when the policy turns it on (docs/scheduling.md)."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import replace
from datetime import datetime, timedelta
from typing import TypeVar

from gpufleet import protocol
from gpufleet.domain.audit_events import SYSTEM_ACTOR
from gpufleet.domain.fair_share import accrue, rank_key
from gpufleet.domain.limits import limit_hit
from gpufleet.domain.matching import Requirement, available, can_run_now, fits
from gpufleet.domain.policy import NOTHING, Running, Tally
from gpufleet.domain.preemption import choose_victim
from gpufleet.domain.records import Worker
from gpufleet.server.context import Context, Tx, transaction
from gpufleet.server.hub import JOBS_TOPIC, TEAMS_TOPIC, job_topic
from gpufleet.server.services.standing import candidate, snapshot
from gpufleet.store.queries.policy import PlacedJob

log = logging.getLogger("gpufleet.server.policy")
SAMPLES_KEPT = timedelta(days=30)
PREEMPT_HEAD = 20  # best-ranked queued jobs that may preempt, each sweep
RANKED_READ = 2000  # queued jobs read to find them
K = TypeVar("K")


async def sweep(ctx: Context) -> None:
    await accrue_usage(ctx)
    await preempt(ctx)


def _gpus(tallies: Mapping[K, Tally], key: K) -> int:
    return tallies.get(key, NOTHING).gpus


def _since(at: datetime | None, now: datetime) -> float:
    return max(0.0, (now - at).total_seconds()) if at is not None else 0.0


async def accrue_usage(ctx: Context) -> None:
    """Decay every usage to now and add the GPU-seconds run since it was last brought up to
    date (what runs now is taken to have run all that while); sample each team."""
    async with transaction(ctx) as tx:
        now = tx.now
        policy = await tx.q.get_policy()
        snap = await snapshot(tx.q, now, policy)
        half = policy.half_life_s
        teams = {
            t.id: accrue(
                t.usage, _since(t.usage_at, now), snap.by_team.get(t.id, NOTHING).gpus, half
            )
            for t in await tx.q.list_teams()
        }
        users = {
            u.id: accrue(
                u.usage, _since(u.usage_at, now), snap.by_user.get(u.id, NOTHING).gpus, half
            )
            for u in await tx.q.list_users()
        }
        members = {
            (m.team_id, m.user_id): accrue(
                m.usage,
                _since(m.usage_at, now),
                snap.by_member.get((m.team_id, m.user_id), NOTHING).gpus,
                half,
            )
            for m in await tx.q.all_members()
        }
        await tx.q.set_usage(teams, users, members, now)
        await tx.q.add_usage_samples(
            [
                {
                    "team_id": team_id,
                    "at": now,
                    "running_gpus": snap.by_team.get(team_id, NOTHING).gpus,
                    "usage": usage,
                }
                for team_id, usage in teams.items()
            ]
        )
        await tx.q.prune_usage_samples(now - SAMPLES_KEPT)
        tx.wake(TEAMS_TOPIC)  # the Teams page's usage and charts


def _running(placed: Sequence[PlacedJob]) -> list[Running]:
    return [
        Running(
            job_id=p.job.id,
            attempt_id=p.attempt_id,
            worker_id=p.job.worker_id or "",
            team_id=p.job.team_id,
            user_id=p.job.user_id,
            gpus=p.job.total_gpus,
            priority=p.job.priority,
            started_at=p.started_at,
            preemptible=p.job.preemptible,
            preempted_at=p.preempt_at,
        )
        for p in placed
        if p.job.worker_id
    ]


async def preempt(ctx: Context) -> int:
    """For the best-ranked queued jobs that no idle worker fits, stop the running job the
    policy chooses on a worker that would fit them (`choose_victim`). Returns how many."""
    async with ctx.store.read() as q:
        policy = await q.get_policy()
    if not policy.preemption:
        return 0
    async with transaction(ctx) as tx:
        queued = await tx.q.all_queued(RANKED_READ)
        if not queued:
            return 0
        snap = await snapshot(tx.q, tx.now, policy)
        snap = replace(snap, waiting=frozenset(j.team_id for j in queued))
        head = sorted(queued, key=lambda j: rank_key(candidate(j, snap), snap))[:PREEMPT_HEAD]
        workers = {w.id: w for w in await tx.q.list_workers()}
        idle = [w.capacity() for w in workers.values() if available(w.capacity())]
        running = _running(await tx.q.placed_jobs())
        done = 0
        for job in head:
            if job.nodes > 1:
                continue  # a gang holds its workers as they free up; none is stopped for it
            req = job.requirement()
            if any(can_run_now(req, cap) for cap in idle):
                continue  # dispatch offers it without taking anything back
            wanted = candidate(job, snap)
            if limit_hit(wanted, snap) is not None:
                continue  # a limit, not a lack of GPUs, keeps it waiting
            fitting = [r for r in running if _fits(req, workers.get(r.worker_id))]
            victim = choose_victim(wanted, fitting, snap)
            if victim is None or not await _stop_for(tx, victim, job.id, policy.preempt_grace_s):
                continue
            running = [r for r in running if r.attempt_id != victim.attempt_id]
            done += 1
    return done


def _fits(req: Requirement, worker: Worker | None) -> bool:
    return worker is not None and fits(req, worker.capacity())


async def _stop_for(tx: Tx, victim: Running, preemptor: str, grace_s: float) -> bool:
    """Ask the victim's worker to checkpoint and stop it (the SIGTERM path); the attempt
    records what it is stopped for, so that however it ends it counts as preempted."""
    if not await tx.q.mark_preempt(victim.attempt_id, preemptor, tx.now):
        return False
    reason = f"preempted for job {preemptor} by the queue policy"
    await tx.send_to_worker(
        victim.worker_id,
        protocol.job_cancel(
            victim.job_id, reason, victim.attempt_id, preempt=True, grace_s=grace_s
        ),
    )
    tx.audit(
        "job.preempted",
        SYSTEM_ACTOR,
        victim.job_id,
        attempt_id=victim.attempt_id,
        worker_id=victim.worker_id,
        preempted_by=preemptor,
        grace_s=grace_s,
    )
    tx.wake(job_topic(victim.job_id), JOBS_TOPIC)
    log.info("preempting job %s on %s for job %s", victim.job_id, victim.worker_id, preemptor)
    return True
