"""The sweeps: silent workers go offline, unacknowledged offers are withdrawn, nodes that
outlive their gang's completion too long are stopped, spent ephemeral workers are removed."""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import timedelta

from gpufleet import logs, protocol
from gpufleet.domain import rendezvous
from gpufleet.domain.audit_events import SYSTEM_ACTOR
from gpufleet.domain.states import AttemptStatus, JobStatus, NodeState
from gpufleet.errors import StoreError
from gpufleet.server.context import Context, transaction
from gpufleet.server.hub import WORKERS_TOPIC, worker_topic
from gpufleet.server.services import agents, dispatch, node_reports, webhooks
from gpufleet.server.services.lifecycle import (
    end_attempt,
    save_worker,
)
from gpufleet.server.services.losses import lose_current_attempt

log = logging.getLogger("gpufleet.server.health")


async def mark_silent_workers_offline(ctx: Context) -> list[str]:
    """Workers silent past the heartbeat timeout go offline; their jobs are requeued."""
    now = ctx.clock()
    timeout = ctx.settings.silence()
    # Right after a restart nobody could have reached us: give every worker one timeout.
    if now - ctx.started_at < timeout:
        return []
    # This replica's kept heartbeats first; the other replicas write theirs every fraction
    # of the timeout (a worker heard elsewhere just now may look up to that much older).
    await agents.flush_heartbeats(ctx)
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
            job_id = await lose_current_attempt(tx, worker, why, silent=True)
            job = await tx.q.get_job(job_id) if job_id else None
            if job_id:
                requeued.append(job_id)
            worker = await tx.q.get_worker(worker_id, lock=True)
            if worker is None:
                raise StoreError(f"worker {worker_id} vanished while the sweep held it; retrying")
            await save_worker(
                tx,
                worker,
                offline_since=tx.now,
                stream_owner=None,
                current_job_id=None,
                current_attempt_id=None,
            )
            tx.audit(
                "worker.lost", SYSTEM_ACTOR, worker.id, reason="heartbeat timeout", job_id=job_id
            )
            await webhooks.worker_lost(tx, worker, why, job_id)
            tx.end_streams(worker_topic(worker.id))
            tx.wake(WORKERS_TOPIC)
        with logs.bound(worker_id=worker.id):
            log.info("%s", why)
            if job is not None:
                with logs.bound(job_id=job.id):
                    log.info("job %s %s: its worker was lost", job.id, _outcome(job.status))
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
            status = await end_attempt(
                tx,
                job,
                attempt,
                AttemptStatus.WITHDRAWN,
                error=f"not acknowledged within {ctx.settings.ack_timeout:g} s",
            )
            await tx.send_to_worker(
                attempt.worker_id,
                protocol.job_cancel(
                    job.id, "offer withdrawn: not acknowledged in time", attempt.id
                ),
            )
            withdrawn.append((job.id, attempt.worker_id))
        with logs.bound(worker_id=attempt.worker_id, job_id=job.id, attempt_id=attempt.id):
            log.info(
                "offer of job %s withdrawn: not acknowledged within %g s; job %s",
                job.id,
                ctx.settings.ack_timeout,
                _outcome(status),
            )
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
            tx.audit(
                "worker.deleted",
                SYSTEM_ACTOR,
                worker_id,
                name=worker.name,
                reason="ephemeral worker offline past the cleanup age",
            )
            tx.wake(WORKERS_TOPIC)
        with logs.bound(worker_id=worker_id):
            log.info("ephemeral worker %s deleted: offline past the cleanup age", worker.name)
    return expired


async def stop_outliving_nodes(ctx: Context) -> list[tuple[str, int]]:
    """Nodes that outlive their gang's completed attempt: one whose worker let it go (its
    heartbeat no longer names the job, or it was lost) just ends; one still going past
    `rendezvous.OUTLIVE_GRACE` is told to stop and its worker is freed. The (attempt, rank)
    of those stopped."""
    now = ctx.clock()
    due = []
    async with ctx.store.read() as q:
        for node, completed_at in await q.outliving_nodes():
            worker = await q.get_worker(node.worker_id)
            let_go = worker is None or worker.current_attempt_id != node.attempt_id
            if let_go or rendezvous.overdue(completed_at, now):
                due.append(node)
    stopped: list[tuple[str, int]] = []
    freed: list[str] = []
    for node in due:
        async with transaction(ctx) as tx:
            worker = await tx.q.get_worker(node.worker_id, lock=True)  # worker, then attempt
            attempt = await tx.q.get_attempt(node.attempt_id)
            going = [
                n
                for n in await tx.q.attempt_nodes(node.attempt_id)
                if n.rank == node.rank and n.state is not NodeState.ENDED
            ]
            if attempt is None or not going:
                continue  # it reported its end meanwhile
            holds = worker is not None and worker.current_attempt_id == attempt.id
            error = None
            if holds:
                grace = rendezvous.OUTLIVE_GRACE.total_seconds()
                error = (
                    f"node {node.rank} (worker {node.worker_id}) still running {grace:g} s "
                    "after rank 0 completed: stopped"
                )
                await tx.send_to_worker(
                    node.worker_id, protocol.job_cancel(node.job_id, error, attempt.id)
                )
                tx.audit(
                    "job.node_stopped",
                    SYSTEM_ACTOR,
                    node.job_id,
                    attempt_id=attempt.id,
                    node_rank=node.rank,
                    worker_id=node.worker_id,
                    error=error,
                )
                stopped.append((attempt.id, node.rank))
            if await node_reports.end_node(tx, attempt, node, worker, error):
                freed.append(node.worker_id)
        if error is not None:
            with logs.bound(worker_id=node.worker_id, job_id=node.job_id, attempt_id=attempt.id):
                log.warning("job %s: %s", node.job_id, error)
    for worker_id in freed:
        await dispatch.dispatch_worker(ctx, worker_id)
    return stopped


def _outcome(status: JobStatus) -> str:
    return "requeued" if status is JobStatus.QUEUED else status.value


async def health_sweep(ctx: Context) -> None:
    await clear_orphaned_streams(ctx)
    await mark_silent_workers_offline(ctx)
    await stop_outliving_nodes(ctx)
    await remove_expired_ephemeral_workers(ctx)
    await dispatch.dispatch_all(ctx)


async def _clear_streams(ctx: Context, gone: Callable[[str], bool]) -> list[str]:
    async with ctx.store.read() as q:
        streaming = [w.id for w in await q.workers_with_streams() if gone(w.stream_owner or "")]
    for worker_id in streaming:
        async with transaction(ctx) as tx:
            worker = await tx.q.get_worker(worker_id, lock=True)
            if worker is not None and worker.stream_owner and gone(worker.stream_owner):
                await save_worker(tx, worker, stream_owner=None)
    return streaming


async def clear_orphaned_streams(ctx: Context) -> list[str]:
    """Streams held by a replica that is gone (its PostgreSQL session ended) are closed:
    their workers show as connecting until they open a stream on a live replica."""
    alive = await ctx.replicas.alive()
    if alive is None:
        return []
    return await _clear_streams(ctx, lambda owner: owner.split(":", 1)[0] not in alive)


async def reset_streams_after_start(ctx: Context) -> None:
    """Streams do not survive a restart: workers that had one must open it again. With one
    replica (SQLite) every stream is gone; with several, those of replicas still alive stay."""
    if ctx.replicas.shared:
        await clear_orphaned_streams(ctx)
    else:
        await _clear_streams(ctx, lambda _owner: True)
