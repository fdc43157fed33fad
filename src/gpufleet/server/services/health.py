"""The sweeps: silent workers go offline, unacknowledged offers are withdrawn, spent
ephemeral workers are removed."""

from __future__ import annotations

from datetime import timedelta

from gpufleet.domain.states import AttemptStatus
from gpufleet.server.context import Context, transaction
from gpufleet.server.hub import worker_topic
from gpufleet.server.services import dispatch
from gpufleet.server.services.lifecycle import (
    end_attempt,
    lose_current_attempt,
    save_worker,
)


async def mark_silent_workers_offline(ctx: Context) -> list[str]:
    """Workers silent past the heartbeat timeout go offline; their jobs are requeued."""
    now = ctx.clock()
    timeout = timedelta(seconds=ctx.settings.heartbeat_timeout)
    # Right after a restart nobody could have reached us: give every worker one timeout.
    if now - ctx.started_at < timeout:
        return []
    async with ctx.store.read() as q:
        silent = [w.id for w in await q.silent_workers(now - timeout)]
    requeued: list[str] = []
    for worker_id in silent:
        async with transaction(ctx) as tx:
            worker = await tx.q.get_worker(worker_id, lock=True)
            if worker is None or worker.offline:
                continue
            if worker.last_heartbeat and worker.last_heartbeat >= tx.now - timeout:
                continue  # it spoke up meanwhile
            why = f"worker {worker.name} lost: no heartbeat for {timeout.total_seconds():g} s"
            job_id = await lose_current_attempt(tx, worker, why)
            if job_id:
                requeued.append(job_id)
            worker = await tx.q.get_worker(worker_id, lock=True)
            assert worker is not None
            await save_worker(
                tx,
                worker,
                offline_since=tx.now,
                stream_owner=None,
                current_job_id=None,
                current_attempt_id=None,
            )
            await tx.audit(
                "worker.lost", "system", worker.id, reason="heartbeat timeout", job_id=job_id
            )
            tx.close.add(worker_topic(worker.id))
            tx.notify.add("workers")
    for job_id in requeued:
        await dispatch.dispatch_job(ctx, job_id)
    return silent


async def withdraw_unacknowledged_offers(ctx: Context) -> int:
    now = ctx.clock()
    window = timedelta(seconds=ctx.settings.ack_timeout)
    # Offers sent before a restart get a fresh window: their workers are reconnecting.
    if now - ctx.started_at < window:
        return 0
    async with ctx.store.read() as q:
        stale = await q.unacknowledged_offers(now - window)
    withdrawn = []
    for offer in stale:
        async with transaction(ctx) as tx:
            await tx.q.get_worker(offer.worker_id, lock=True)  # worker, then job
            attempt = await tx.q.get_attempt(offer.id)
            job = await tx.q.get_job(offer.job_id, lock=True)
            if attempt is None or job is None or attempt.status is not AttemptStatus.OFFERED:
                continue
            if job.current_attempt_id != attempt.id:
                continue
            await end_attempt(
                tx,
                job,
                attempt,
                AttemptStatus.WITHDRAWN,
                error=f"not acknowledged within {ctx.settings.ack_timeout:g} s",
            )
            await tx.q.push_event(
                attempt.worker_id,
                {
                    "type": "job_cancel",
                    "job_id": job.id,
                    "attempt_id": attempt.id,
                    "reason": "offer withdrawn: not acknowledged in time",
                },
                tx.now,
            )
            tx.notify.add(worker_topic(attempt.worker_id))
            withdrawn.append((job.id, attempt.worker_id))
    for job_id, worker_id in withdrawn:
        await dispatch.dispatch_job(ctx, job_id)
        await dispatch.dispatch_worker(ctx, worker_id)
    return len(withdrawn)


async def remove_expired_ephemeral_workers(ctx: Context) -> list[str]:
    cutoff = ctx.clock() - timedelta(seconds=ctx.settings.ephemeral_cleanup_after)
    async with ctx.store.read() as q:
        expired = [w.id for w in await q.expired_ephemeral_workers(cutoff)]
    for worker_id in expired:
        async with transaction(ctx) as tx:
            worker = await tx.q.get_worker(worker_id, lock=True)
            if worker is None or not worker.offline:
                continue
            await tx.q.delete_worker(worker_id)
            await tx.audit(
                "worker.deleted",
                "system",
                worker_id,
                name=worker.name,
                reason="ephemeral worker offline past the cleanup age",
            )
            tx.notify.add("workers")
    return expired


async def health_sweep(ctx: Context) -> None:
    await mark_silent_workers_offline(ctx)
    await remove_expired_ephemeral_workers(ctx)
    await dispatch.dispatch_all(ctx)


async def reset_streams_after_start(ctx: Context) -> None:
    """Streams do not survive a restart: workers that had one must open it again."""
    async with ctx.store.read() as q:
        streaming = await q.workers_with_streams()
    for stale in streaming:
        async with transaction(ctx) as tx:
            worker = await tx.q.get_worker(stale.id, lock=True)
            if worker is not None and worker.stream_owner is not None:
                await save_worker(tx, worker, stream_owner=None)
