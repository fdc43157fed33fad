"""Gang dispatch: one round of `domain/gang.py`'s `plan` for every waiting multi-node job,
applied in one transaction: claims (every node at once, or none), holds and releases.

A round runs only when the queue holds a gang (dispatch.py asks `queued_nodes`, the read it
made anyway), so one-node dispatch costs what it did. Rounds take one advisory lock
(PostgreSQL): two replicas never plan at once, and each node's claim is a compare-and-set
(idle, held by no other gang) in worker id order, so no worker ends up in two gangs and a
lost race rolls the whole round back. Holds are stored on the workers' rows (`held_for`,
`held_since`, `held_note`): they outlive a restart and every replica sees them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime

from gpufleet.domain import gang
from gpufleet.domain.audit_events import SYSTEM_ACTOR
from gpufleet.domain.jobspec import gang_shape
from gpufleet.domain.records import Job, Worker
from gpufleet.domain.secrets import new_id
from gpufleet.domain.states import WorkerStatus
from gpufleet.server.context import Context, Tx, transaction
from gpufleet.server.hub import WORKERS_TOPIC, job_topic, worker_topic
from gpufleet.server.services import job_inputs, lifecycle, offers
from gpufleet.server.services.dispatch_policy import SweepRoom, policy_gate, refused, retrying
from gpufleet.server.services.lifecycle import KEEPS_HOLD

_GANGS = 50  # waiting gangs one round plans for, in queue order (the first one holds)


@dataclass
class Round:
    """What a round did: gangs offered, and the workers it released (to offer them to other
    jobs before the next round may hold them again)."""

    offered: int = 0
    released: list[str] = field(default_factory=list)


async def gang_round(ctx: Context) -> Round:
    """Plan and apply one round for every waiting gang (all or nothing: see module doc)."""
    return await retrying(lambda: _round(ctx), Round())


async def _round(ctx: Context) -> Round:
    done = Round()
    async with transaction(ctx) as tx:
        snap = await policy_gate(tx)
        await tx.q.lock_gang_round()
        queued = await tx.q.queued_gangs(_GANGS)
        held = await tx.q.held_workers()
        if not queued and not held:
            return done
        room = SweepRoom(ctx, tx)
        waiting = [
            job for job in queued if not refused(ctx, job, snap) and not await room.full(job)
        ]
        idle = {w.id: w for w in await tx.q.idle_workers()}
        holdings = _holdings(held, idle, tx.now)
        jobs = {job.id: job for job in waiting}
        # Busy, offline or drained; or held for a job that no longer waits (or a limit holds).
        stale = sorted(w.id for w in held if w.status not in KEEPS_HOLD or w.held_for not in jobs)
        if stale:
            await _release(tx, stale, "the job it was held for no longer waits", held)
            done.released += [w for w in stale if w in idle]
        gangs = [
            gang.Gang(j.id, gang_shape(j.gpu_count, j.config), j.requirement(), holdings.get(j.id))
            for j in waiting
        ]
        pool = [w.capacity() for w in idle.values()]
        plan = gang.plan(gangs, pool, tx.settings.gang_hold, tx.now)
        for job_id, decision in plan.items():
            job, holding = jobs[job_id], holdings.get(job_id)
            match decision:
                case gang.Claim(ids):
                    await _claim(tx, job, [idle[i] for i in ids])
                    done.offered += 1
                case gang.Hold(ids, since, reason):
                    await _hold(tx, job, holding, ids, since, reason)
                case gang.Release(ids, reason):
                    await _release(tx, list(ids), reason, held, job_id)
                    done.released += [i for i in ids if i in idle]
    return done


def _holdings(
    held: Sequence[Worker], idle: dict[str, Worker], now: datetime
) -> dict[str, gang.Holding]:
    """Each gang's hold as stored: its idle held workers, since the oldest's start."""
    by_job: dict[str, list[Worker]] = {}
    for worker in held:
        if worker.held_for is not None and worker.id in idle:
            by_job.setdefault(worker.held_for, []).append(worker)
    return {
        job_id: gang.Holding(frozenset(w.id for w in ws), min(w.held_since or now for w in ws))
        for job_id, ws in by_job.items()
    }


async def _hold(
    tx: Tx,
    job: Job,
    holding: gang.Holding | None,
    ids: Sequence[str],
    since: datetime,
    reason: str,
) -> None:
    """Hold `ids` for the gang (only what changed is written), and release what it held
    beyond them."""
    before = holding.worker_ids if holding is not None else frozenset()
    note = gang.held_reason(job.id, len(ids), job.nodes)
    if set(ids) == set(before) and (holding is None or holding.since == since):
        return
    dropped = sorted(before - set(ids))
    if dropped:
        await tx.q.release_holds(dropped)
        tx.frees_a_worker()
    if ids:
        await tx.q.hold_workers(ids, job.id, since, note)
    tx.audit("job.gang_held", SYSTEM_ACTOR, job.id, workers=sorted(ids), reason=reason)
    tx.wake(WORKERS_TOPIC, job_topic(job.id))


async def _release(
    tx: Tx, ids: Sequence[str], reason: str, held: Sequence[Worker], job_id: str | None = None
) -> None:
    """Free held workers for other jobs, the reason in each gang's audit trail."""
    await tx.q.release_holds(ids)
    tx.frees_a_worker()
    by_job: dict[str, list[str]] = {}
    for worker in held:
        if worker.id in ids and worker.held_for is not None:
            by_job.setdefault(worker.held_for, []).append(worker.id)
    if job_id is not None and not by_job:
        by_job[job_id] = list(ids)
    for job, workers in by_job.items():
        tx.audit("job.gang_released", SYSTEM_ACTOR, job, workers=sorted(workers), reason=reason)
        tx.wake(job_topic(job))
    tx.wake(WORKERS_TOPIC)


async def _claim(tx: Tx, job: Job, nodes: list[Worker]) -> None:
    """Offer the gang to its nodes, rank 0 first: one attempt, one `attempt_nodes` row a
    node, one offer a node naming its rank and the node count."""
    attempt_id = new_id("a")
    offered = await lifecycle.claim_gang(tx, job, nodes, attempt_id)
    resume = await offers.resume_for(tx.q, job)
    resumed_from = resume.id if resume else None
    await lifecycle.open_attempt(tx, job, nodes[0].id, attempt_id, offered.attempts, resumed_from)
    await tx.q.insert_attempt_nodes(
        job.id, attempt_id, offered.attempts, [w.id for w in nodes], tx.now
    )
    inputs = await job_inputs.files(tx.q, job, attempt_id)  # every node takes them
    for rank, worker in enumerate(nodes):
        if rank > 0:  # open_attempt wrote rank 0's
            tx.audit(
                "worker.status_changed",
                SYSTEM_ACTOR,
                worker.id,
                old=WorkerStatus.IDLE.value,
                new=WorkerStatus.BUSY.value,
            )
        event = offers.offer(
            tx.key, job, attempt_id, resume, tx.settings.worker_url(), rank, inputs
        )
        tx.hand_over(worker_topic(worker.id), event)
    tx.audit(
        "job.gang_dispatched",
        SYSTEM_ACTOR,
        job.id,
        attempt_id=attempt_id,
        workers=[w.id for w in nodes],
    )
