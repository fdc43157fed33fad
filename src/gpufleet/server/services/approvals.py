"""Approving and rejecting a job held for approval (docs/scheduling.md): who may is
`domain.ownership`'s to say, the move is `services/lifecycle.py`'s."""

from __future__ import annotations

from gpufleet.domain.ownership import JobAction
from gpufleet.domain.records import Job, User
from gpufleet.domain.states import JobStatus
from gpufleet.errors import Conflict
from gpufleet.server.context import Context, Tx, transaction
from gpufleet.server.services import dispatch, ownership
from gpufleet.server.services.lifecycle import move_job, no_job


async def _held(tx: Tx, job_id: str, by: User, action: JobAction) -> Job:
    """The job, locked, if `by` may take `action` on it and it is waiting for approval."""
    job = await tx.q.get_job(job_id, lock=True)
    if job is None:
        raise no_job(job_id)
    await ownership.require(tx.q, by, job, action)
    if job.status is not JobStatus.PENDING_APPROVAL:
        raise Conflict(
            f"job {job.id} is {job.status.value}, not waiting for approval; only a job in "
            "pending_approval can be approved or rejected"
        )
    return job


async def approve(ctx: Context, job_id: str, actor: str, client: str | None, *, by: User) -> Job:
    """A held job joins the queue, and is offered if a worker fits now; `by` is an admin or
    a lead of its team other than its owner (`domain.ownership`)."""
    async with transaction(ctx) as tx:
        job = await _held(tx, job_id, by, JobAction.APPROVE)
        tx.audit("job.approved", actor, job.id, client)
        await move_job(tx, job, JobStatus.QUEUED, actor, approved_by=actor)
    await dispatch.dispatch_job(ctx, job_id)
    return await _job(ctx, job_id)


async def reject(
    ctx: Context, job_id: str, reason: str, actor: str, client: str | None, *, by: User
) -> Job:
    """A held job is cancelled, saying who rejected it (`by`: as for `approve`) and why."""
    reason = reason.strip()
    async with transaction(ctx) as tx:
        job = await _held(tx, job_id, by, JobAction.REJECT)
        error = f"rejected by {by.name}: {reason}" if reason else f"rejected by {by.name}"
        tx.audit("job.rejected", actor, job.id, client, reason=reason)
        # A cancel like any other: its webhooks (job.cancelled) go with it.
        await move_job(tx, job, JobStatus.CANCELLED, actor, error=error, ended_at=tx.now)
    return await _job(ctx, job_id)


async def _job(ctx: Context, job_id: str) -> Job:
    async with ctx.store.read() as q:
        job = await q.get_job(job_id)
    if job is None:
        raise no_job(job_id)
    return job
