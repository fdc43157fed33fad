"""Approving and rejecting a job held for approval (docs/scheduling.md): who may is
`domain.ownership`'s to say, the move is `services/lifecycle.py`'s."""

from __future__ import annotations

from gpufleet.domain.ownership import JobAction
from gpufleet.domain.records import Job, User
from gpufleet.domain.states import JobStatus
from gpufleet.domain.webhooks import Event
from gpufleet.errors import Conflict
from gpufleet.server.context import Context, Tx, transaction
from gpufleet.server.services import dispatch, ownership, webhooks
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
        await _tell_submitter(tx, job, Event.JOB_APPROVED, by, None)
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
        await move_job(
            tx, job, JobStatus.CANCELLED, actor, error=error, ended_at=tx.now, rejected_by=actor
        )
        await _tell_submitter(tx, job, Event.JOB_REJECTED, by, reason or None)
    return await _job(ctx, job_id)


async def _tell_submitter(tx: Tx, job: Job, event: Event, by: User, reason: str | None) -> None:
    """The outcome, to the webhooks that carry it to the job's submitter, in this
    transaction: sent if and only if the judgement commits."""
    submitter = await tx.q.get_user(job.user_id) if job.user_id else None
    name = submitter.name if submitter else None
    await webhooks.job_judged(tx, job, event, by.name, reason, name)


async def _job(ctx: Context, job_id: str) -> Job:
    async with ctx.store.read() as q:
        job = await q.get_job(job_id)
    if job is None:
        raise no_job(job_id)
    return job
