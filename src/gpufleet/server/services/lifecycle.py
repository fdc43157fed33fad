"""Moving workers, jobs and attempts through their transition tables inside one transaction.

Lock order: a transaction that changes a worker and a job locks (or conditionally updates)
the worker row first, then the job row, then the attempt. PostgreSQL answers two
transactions that take them in opposite orders with `deadlock detected`.
"""

from __future__ import annotations

from typing import Any

from gpufleet.domain import outcomes
from gpufleet.domain.audit_events import SYSTEM_ACTOR
from gpufleet.domain.records import Attempt, Job, Worker
from gpufleet.domain.states import (
    ACTIVE_ATTEMPT,
    REPORTED_ATTEMPT,
    TERMINAL_JOB,
    AttemptStatus,
    JobStatus,
    WorkerStatus,
    can_move_attempt,
    can_move_worker,
    check_job_move,
    derive_worker_status,
)
from gpufleet.errors import Conflict, NotFound
from gpufleet.server.context import Tx
from gpufleet.server.hub import JOBS_TOPIC, WORKERS_TOPIC, job_topic
from gpufleet.server.services import webhooks


async def save_worker(
    tx: Tx, worker: Worker, actor: str = SYSTEM_ACTOR, **changes: Any
) -> WorkerStatus:
    """Apply changes to a worker and re-derive its status from the facts."""

    def fact(name: str, current: Any) -> Any:
        return changes.get(name, current)

    status = derive_worker_status(
        offline=fact("offline_since", worker.offline_since) is not None,
        drained=fact("drained", worker.drained),
        has_job=fact("current_attempt_id", worker.current_attempt_id) is not None,
        stream_open=fact("stream_owner", worker.stream_owner) is not None,
    )
    if not can_move_worker(worker.status, status):
        raise Conflict(f"worker {worker.id} cannot go from {worker.status} to {status}")
    await tx.q.update_worker(worker.id, status=status.value, **changes)
    tx.wake(WORKERS_TOPIC)  # live views (the web UI's event stream) re-read the fleet
    if status is not worker.status:
        tx.audit(
            "worker.status_changed", actor, worker.id, old=worker.status.value, new=status.value
        )
    return status


async def move_job(
    tx: Tx, job: Job, new: JobStatus, actor: str = SYSTEM_ACTOR, **values: Any
) -> None:
    check_job_move(job.id, job.status, new)
    await tx.q.update_job(job.id, status=new.value, updated_at=tx.now, **values)
    tx.audit("job.status_changed", actor, job.id, old=job.status.value, new=new.value)
    tx.wake(job_topic(job.id), JOBS_TOPIC)
    if new in TERMINAL_JOB:  # the webhooks' outbox row commits with the change, or neither
        await webhooks.job_ended(tx, job, new, values)


async def move_attempt(tx: Tx, attempt: Attempt, new: AttemptStatus, **values: Any) -> None:
    if not can_move_attempt(attempt.status, new):
        raise Conflict(f"attempt {attempt.id} is {attempt.status} and cannot become {new}")
    if new not in ACTIVE_ATTEMPT:
        values.setdefault("ended_at", tx.now)
    await tx.q.update_attempt(attempt.id, status=new.value, **values)


async def release_worker(
    tx: Tx, worker_id: str, attempt: Attempt, locked: Worker | None = None
) -> bool:
    """Free the worker that held this attempt; True if it was still holding it. `locked`:
    the worker as this transaction read it under its row lock, if it did (not read again)."""
    if locked is not None and locked.id == worker_id:
        worker: Worker | None = locked
    else:
        worker = await tx.q.get_worker(worker_id, lock=True)
    if worker is None or worker.current_attempt_id != attempt.id:
        return False
    ran = attempt.acknowledged_at is not None or attempt.status in REPORTED_ATTEMPT
    await save_worker(
        tx,
        worker,
        current_job_id=None,
        current_attempt_id=None,
        jobs_run=worker.jobs_run + (1 if ran else 0),
    )
    return True


async def end_attempt(
    tx: Tx,
    job: Job,
    attempt: Attempt,
    outcome: AttemptStatus,
    *,
    error: str | None = None,
    exit_code: int | None = None,
    by_user: bool = False,
    locked: Worker | None = None,
) -> JobStatus:
    """End the job's current attempt and apply what `outcomes.decide` makes of the job.

    Returns the job's new status. A cancel by the user keeps the worker busy until it
    confirms the process is gone; any other ending frees it at once. `locked`: see
    `release_worker`.
    """
    # An attempt the queue policy preempted counts as preempted however it ends.
    outcome = outcomes.counted_as(outcome, attempt.preempted_by, by_user=by_user)
    await move_attempt(tx, attempt, outcome, error=error, exit_code=exit_code)
    if not by_user:
        await release_worker(tx, attempt.worker_id, attempt, locked)
    tx.audit(
        "attempt.ended",
        SYSTEM_ACTOR,
        job.id,
        attempt_id=attempt.id,
        worker_id=attempt.worker_id,
        outcome=outcome.value,
        error=error,
        exit_code=exit_code,
    )
    history = (
        await tx.q.attempts_for_job(job.id)
        if outcomes.needs_history(job, outcome, by_user=by_user)
        else []
    )
    ended = outcomes.AttemptEnd(outcome, attempt.number, error, attempt.preempted_by)
    decision = outcomes.decide(
        job,
        ended,
        history,
        by_user=by_user,
        poison_after_workers=tx.settings.poison_after_workers,
    )
    return await _apply(tx, job, attempt, outcome, decision, exit_code, error)


async def _apply(
    tx: Tx,
    job: Job,
    attempt: Attempt,
    outcome: AttemptStatus,
    decision: outcomes.Decision,
    exit_code: int | None,
    error: str | None,
) -> JobStatus:
    match decision:
        case outcomes.Complete():
            await move_job(
                tx,
                job,
                JobStatus.COMPLETED,
                ended_at=tx.now,
                exit_code=exit_code or 0,
                error=error,  # what went wrong beside the job's own success: failed uploads
                current_attempt_id=attempt.id,
            )
            return JobStatus.COMPLETED
        case outcomes.Cancel():
            await move_job(tx, job, JobStatus.CANCELLED, ended_at=tx.now)
            return JobStatus.CANCELLED
        case outcomes.Requeue(note):
            tx.observe("requeue", 1.0, outcome.value)
            await move_job(
                tx,
                job,
                JobStatus.QUEUED,
                current_attempt_id=None,
                worker_id=None,
                error=note,
                exit_code=exit_code,
            )
            return JobStatus.QUEUED
        case outcomes.Fail(reason):
            await move_job(
                tx, job, JobStatus.FAILED, ended_at=tx.now, exit_code=exit_code, error=reason
            )
            return JobStatus.FAILED


async def lose_current_attempt(tx: Tx, worker: Worker, why: str) -> str | None:
    """The worker no longer has its job: withdraw or lose the attempt. Returns the job id."""
    if worker.current_attempt_id is None:
        return None
    attempt = await tx.q.get_attempt(worker.current_attempt_id)
    if attempt is None or attempt.status not in ACTIVE_ATTEMPT:
        return None
    job = await tx.q.get_job(attempt.job_id, lock=True)
    if job is None or job.current_attempt_id != attempt.id:
        await move_attempt(tx, attempt, AttemptStatus.LOST, error=why)
        return None
    outcome = (
        AttemptStatus.WITHDRAWN if attempt.status is AttemptStatus.OFFERED else AttemptStatus.LOST
    )
    await end_attempt(tx, job, attempt, outcome, error=why)
    return job.id


def no_job(job_id: str) -> NotFound:
    """There is no such job: what each surface says, and where it lists the jobs."""
    return NotFound(
        f"no job {job_id}; list jobs with GET /api/queue",
        ui=f"no job {job_id}; the Queue page lists the jobs",
        cli=f"no job {job_id}; list jobs with `gpufleet jobs list`",
    )
