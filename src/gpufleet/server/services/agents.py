"""The agent protocol: what workers say about themselves (register, heartbeat, their
stream opening and closing, disconnect) and what they ask (whether work waits)."""

from __future__ import annotations

import contextlib
import dataclasses
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from gpufleet import protocol
from gpufleet.domain import rendezvous
from gpufleet.domain.audit_events import worker_actor
from gpufleet.domain.gpu_health import GpuReading, Preflight
from gpufleet.domain.matching import Feature, fits, parse_features, targets_served
from gpufleet.domain.naming import check_labels
from gpufleet.domain.records import Attempt, GpuStat, Worker
from gpufleet.domain.states import ACTIVE_ATTEMPT, TAKEN_ATTEMPT, WorkerType
from gpufleet.errors import Conflict, Forbidden
from gpufleet.server.context import Context, transaction
from gpufleet.server.hub import WORKERS_TOPIC, worker_topic
from gpufleet.server.services import dispatch, fair_queue, worker_health
from gpufleet.server.services.fleet import locked_worker
from gpufleet.server.services.lifecycle import save_worker
from gpufleet.server.services.losses import lose_current_attempt


@dataclass(frozen=True, slots=True)
class Registration:
    name: str | None
    persistent: bool | None
    gpu_count: int
    gpu_name: str | None
    gpu_vram_gb: float | None
    accelerator_type: str | None
    labels: dict[str, str]
    current_job_id: str | None
    current_attempt_id: str | None
    extra: dict[str, Any] = field(default_factory=dict)
    # `gpufleet worker` only (the SimpleTuner agent reports neither): its GPUs' health now,
    # and its preflight's last run
    gpu_health: tuple[GpuReading, ...] | None = None
    preflight: Preflight | None = None


@dataclass(frozen=True, slots=True)
class RegisterAnswer:
    worker: Worker
    resume_job: dict[str, str] | None
    abandon_job: bool


def check_self(worker: Worker, claimed_id: str | None) -> None:
    if claimed_id and claimed_id != worker.id:
        raise Forbidden(
            f"this token belongs to worker {worker.id}, not {claimed_id}; use that worker's token"
        )


async def register(
    ctx: Context, worker: Worker, reg: Registration, client: str | None
) -> RegisterAnswer:
    resume: dict[str, str] | None = None
    abandon = False
    requeued: str | None = None
    async with transaction(ctx) as tx:
        worker = await locked_worker(tx, worker.id)
        _keeps_attempt_tokens(worker, reg)
        changes: dict[str, Any] = {
            "registered": True,
            "gpu_count": reg.gpu_count,
            "gpu_name": reg.gpu_name,
            "gpu_vram_gb": reg.gpu_vram_gb,
            "accelerator_type": reg.accelerator_type,
            "capabilities": {
                **reg.extra,
                "reported_name": reg.name,
                "address": client,
                "gpu_count_reported": reg.gpu_count,
            },
            "reported_labels": check_labels(reg.labels),
            "last_heartbeat": tx.now,
            "offline_since": None,
            "gpu_stats": None,  # until its next heartbeat says (if it reports any)
            "gpu_stats_at": None,
        }
        if not worker.type_set_by_admin and reg.persistent is not None:
            changes["worker_type"] = (
                WorkerType.PERSISTENT if reg.persistent else WorkerType.EPHEMERAL
            ).value
        held = None
        if worker.current_attempt_id:
            held = await tx.q.get_attempt(worker.current_attempt_id)
        holds = (
            held is not None
            and held.status in ACTIVE_ATTEMPT
            and reg.current_job_id == held.job_id
            and reg.current_attempt_id in (None, held.id)
        )
        if reg.current_job_id and not holds:
            abandon = True
        if holds and held is not None:
            resume = {"job_id": held.job_id, "attempt_id": held.id}
        elif worker.current_attempt_id:
            # It came back without the job it held: the offer or the run is gone.
            requeued = await lose_current_attempt(tx, worker, "worker re-registered without it")
            worker = await locked_worker(tx, worker.id)
            if worker.current_attempt_id:  # a cancelled attempt it no longer runs
                changes.update(current_job_id=None, current_attempt_id=None)
        worker = dataclasses.replace(worker, capabilities=changes["capabilities"])
        health, off = await worker_health.apply(
            tx, worker, reg.gpu_health, reg.preflight, registered=reg.gpu_count
        )
        if off:  # a fault under the job it resumed: it is requeued, the worker drops it
            requeued, worker = off, await locked_worker(tx, worker.id)
            resume, abandon = None, True
            changes.update(current_job_id=None, current_attempt_id=None)
        await save_worker(tx, worker, worker_actor(worker.id), **{**changes, **health})
        tx.audit(
            "worker.registered",
            worker_actor(worker.id),
            worker.id,
            client,
            gpu_count=reg.gpu_count,
            gpu_name=reg.gpu_name,
            resumed=resume is not None,
            abandoned=abandon,
        )
        tx.wake(WORKERS_TOPIC)
        worker = await locked_worker(tx, worker.id)
    if requeued:
        await dispatch.dispatch_job(ctx, requeued)
    return RegisterAnswer(worker=worker, resume_job=resume, abandon_job=abandon)


def _keeps_attempt_tokens(worker: Worker, reg: Registration) -> None:
    """A worker that binds its writes to attempts (`attempt_tokens`) cannot be registered
    again, with its token, by an agent that does not: whoever holds a stolen token must not
    turn the binding off."""
    if Feature.ATTEMPT_TOKEN in worker.features and Feature.ATTEMPT_TOKEN not in parse_features(
        reg.extra.get("features")
    ):
        raise Forbidden(
            f"worker {worker.id} registered as an agent that sends its attempt's token; an "
            "agent that does not cannot take over its token: to run another agent, rotate "
            "the worker's token (gpufleet workers rotate-token, or Rotate token on the "
            "Workers page) and give it the new one"
        )


async def stream_opened(ctx: Context, worker: Worker, owner: str) -> None:
    """The worker's stream is now `owner`'s (`streams.WorkerStream`); what fits it is offered."""
    async with transaction(ctx) as tx:
        worker = await locked_worker(tx, worker.id)
        if worker.offline:
            raise Conflict(f"worker {worker.id} is offline; register again before streaming")
        await save_worker(
            tx,
            worker,
            worker_actor(worker.id),
            stream_owner=owner,
            connected_at=tx.now,
            last_heartbeat=tx.now,
        )
        tx.wake(WORKERS_TOPIC, worker_topic(worker.id))  # an older stream, on any replica, ends
    await dispatch.dispatch_worker(ctx, worker.id)


async def stream_closed(ctx: Context, worker_id: str, owner: str) -> None:
    """`owner`'s stream has ended: the worker has none, unless a newer one took over."""
    async with transaction(ctx) as tx:
        worker = await tx.q.get_worker(worker_id, lock=True)
        if worker is None or worker.stream_owner != owner:
            return  # deleted, or a newer stream took over
        await save_worker(tx, worker, worker_actor(worker.id), stream_owner=None)
        tx.wake(WORKERS_TOPIC)


async def heartbeat(
    ctx: Context,
    worker: Worker,
    claimed_id: str | None,
    current_job_id: str | None,
    says_no_job: bool = False,
    gpu_stats: list[GpuStat] | None = None,
    gpu_readings: list[GpuReading] | None = None,
    preflight: Preflight | None = None,
) -> Worker:
    """A sign of life, and the job the worker says it runs (`says_no_job`: it said outright
    that it runs none, as both agents do when idle; a heartbeat that says nothing of its job
    claims nothing).

    Most heartbeats change nothing but the time: those are kept in memory and written
    together by `flush_heartbeats` (one statement for all of them, every fraction of the
    heartbeat timeout), not one write transaction each, and so is the GPU sample one may
    carry (`gpu_stats`; None: the agent sends none). A heartbeat that changes something
    (the worker was marked offline, names a job it no longer holds, frees it, or disowns the
    job it holds, or reports a new GPU fault or its preflight's change: `worker_health`) is
    a transaction of its own at once.
    """
    check_self(worker, claimed_id)
    grace = timedelta(seconds=ctx.settings.ack_timeout)
    if not worker.offline:
        held = None
        if worker.current_attempt_id:
            async with ctx.store.read() as q:
                held = await q.get_attempt(worker.current_attempt_id)
        if (
            not _names_unheld_job(held, current_job_id)
            and not _lets_go(held, current_job_id)
            and not _disowns(held, says_no_job, ctx.clock(), grace)
            and not worker_health.changes(worker, gpu_readings, preflight)
        ):
            now = ctx.clock()
            ctx.heartbeats.heard(
                worker.id,
                now,
                None if gpu_stats is None else [dataclasses.asdict(g) for g in gpu_stats],
                token_issued_at=worker.token_issued_at,
            )
            ctx.metrics.apply([("heartbeat", 1.0, ())])
            return dataclasses.replace(worker, last_heartbeat=now)
    async with transaction(ctx) as tx:
        worker = await locked_worker(tx, worker.id)
        if worker.offline:
            tx.end_streams(worker_topic(worker.id))
            raise Conflict(f"worker {worker.id} was marked offline; register again")
        changes: dict[str, Any] = {"last_heartbeat": tx.now}
        if gpu_stats is not None:
            changes.update(
                gpu_stats=[dataclasses.asdict(g) for g in gpu_stats], gpu_stats_at=tx.now
            )
        tx.observe("heartbeat")
        held = (
            await tx.q.get_attempt(worker.current_attempt_id) if worker.current_attempt_id else None
        )
        if current_job_id is not None and _names_unheld_job(held, current_job_id):
            await tx.send_to_worker(
                worker.id,
                protocol.job_cancel(current_job_id, "this worker no longer holds the job"),
            )
        freed = _lets_go(held, current_job_id)
        if freed:
            changes.update(current_job_id=None, current_attempt_id=None)
        requeued = None
        if _disowns(held, says_no_job, tx.now, grace):
            requeued = await lose_current_attempt(tx, worker, "the worker says it runs no job")
            worker = await locked_worker(tx, worker.id)
            freed = True
        health, off = await worker_health.apply(tx, worker, gpu_readings, preflight)
        if off:
            requeued, worker, freed = off, await locked_worker(tx, worker.id), True
        freed = freed or health.get("preflight_error", "") is None
        await save_worker(tx, worker, worker_actor(worker.id), **{**changes, **health})
        worker = await locked_worker(tx, worker.id)
    if requeued:
        await dispatch.dispatch_job(ctx, requeued)
    if freed:
        await dispatch.dispatch_worker(ctx, worker.id)
    return worker


def _disowns(held: Attempt | None, says_no_job: bool, now: datetime, grace: timedelta) -> bool:
    """The worker says it runs no job while it holds a started one, for longer than a report
    still on its way could explain (the ack timeout): the attempt is lost. (The SimpleTuner
    agent can drop a job without a word: a stale `job_cancel` stopped it, or its monitor of
    an earlier job reported that job's end as the new one's.)"""
    if not says_no_job or held is None:
        return False
    if held.status not in TAKEN_ATTEMPT:
        return False  # an offer not acknowledged yet has the ack timeout of its own
    since = held.started_at or held.acknowledged_at or held.offered_at
    return now - since > grace


def _names_unheld_job(held: Attempt | None, current_job_id: str | None) -> bool:
    """The heartbeat names a job the worker no longer holds (it gets a cancel). A node that
    outlives its gang's completed attempt still holds it (`rendezvous.outlives`)."""
    return bool(current_job_id) and (
        held is None
        or held.job_id != current_job_id
        or (held.status not in ACTIVE_ATTEMPT and not rendezvous.outlives(held.status))
    )


def _lets_go(held: Attempt | None, current_job_id: str | None) -> bool:
    """The worker's attempt has ended and the heartbeat no longer names its job (freed)."""
    return held is not None and held.status not in ACTIVE_ATTEMPT and current_job_id != held.job_id


async def flush_heartbeats(ctx: Context) -> int:
    """Write the heartbeats kept since the last flush. Returns how many workers."""
    beats, samples = ctx.heartbeats.take()
    if not beats and not samples:
        return 0
    try:
        async with transaction(ctx) as tx:
            await tx.q.touch_workers(beats)
            await tx.q.record_gpu_stats(samples)
            tx.wake(WORKERS_TOPIC)  # live views show the new times
    except BaseException:
        ctx.heartbeats.put_back(beats, samples)
        raise
    return len(beats)


async def disconnect(
    ctx: Context, worker: Worker, claimed_id: str | None, client: str | None
) -> None:
    check_self(worker, claimed_id)
    async with transaction(ctx) as tx:
        worker = await locked_worker(tx, worker.id)
        requeued = await lose_current_attempt(tx, worker, "worker disconnected")
        worker = await locked_worker(tx, worker.id)
        await save_worker(
            tx,
            worker,
            worker_actor(worker.id),
            offline_since=tx.now,
            stream_owner=None,
            current_job_id=None,
            current_attempt_id=None,
        )
        tx.audit("worker.disconnected", worker_actor(worker.id), worker.id, client)
        tx.end_streams(worker_topic(worker.id))
        tx.wake(WORKERS_TOPIC)
    if requeued:
        await dispatch.dispatch_job(ctx, requeued)


async def has_jobs(ctx: Context, worker: Worker, claimed_id: str | None) -> bool:
    """Whether work waits for this worker: the SimpleTuner agent's question, when ephemeral,
    after each job. A `no` to an ephemeral worker that has run its job (or is drained) comes
    with a `shutdown` on its stream: the agent stops only once its stream sends another line,
    which could otherwise be the next ping, 15 s away."""
    check_self(worker, claimed_id)
    if worker.spent or worker.drained:
        if worker.worker_type is WorkerType.EPHEMERAL:
            async with transaction(ctx) as tx:
                reason = "drained" if worker.drained else "an ephemeral worker runs one job"
                await tx.send_to_worker(worker.id, protocol.shutdown(reason))
        return False
    async with ctx.store.read() as q:
        if await q.pending_offers(worker.id, worker.current_attempt_id):
            return True
        cap = worker.capacity()
        targets = targets_served(cap)
        async with contextlib.aclosing(fair_queue.queued_for(q, worker, targets)) as queued:
            async for job in queued:
                if fits(job.requirement(), cap):
                    return True
    return False
