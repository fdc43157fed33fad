"""What a worker reports about its job: status, progress and logs, fenced by attempt."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from gpufleet import protocol
from gpufleet.domain import bounds, rendezvous
from gpufleet.domain.audit_events import worker_actor
from gpufleet.domain.records import Attempt, Job, Worker
from gpufleet.domain.states import (
    ACTIVE_ATTEMPT,
    PLACED_JOB,
    TAKEN_ATTEMPT,
    AttemptStatus,
    JobStatus,
    parse_reported_status,
)
from gpufleet.errors import Forbidden, InvalidInput, NotFound, NotHolder, PayloadTooLarge
from gpufleet.server.context import Context, Tx, transaction
from gpufleet.server.hub import JOBS_TOPIC, job_topic
from gpufleet.server.services import attempt_tokens, dispatch, history
from gpufleet.server.services.lifecycle import end_attempt, move_attempt, move_job, release_worker

MAX_ERROR_CHARS = 8_000


@dataclass(frozen=True, slots=True)
class StatusReport:
    status: str
    attempt_id: str | None
    error: str | None
    exit_code: int | None
    progress: dict[str, Any] | None
    points: Sequence[dict[str, Any]] = ()  # the progress lines before `progress`, for charts


def _not_offered(job_id: str, worker: Worker) -> Forbidden:
    return Forbidden(
        f"job {job_id} was never offered to worker {worker.id}; a worker token speaks only "
        "for its own jobs"
    )


async def _holder(
    tx: Tx, worker: Worker, job_id: str, attempt_id: str | None, attempt_token: str | None
) -> tuple[Job, Attempt | None, bool]:
    """The job, the attempt the worker speaks of, and whether it is the live, current one;
    Forbidden if the attempt token sent is not that attempt's (`attempt_tokens`)."""
    read = await tx.q.job_and_attempt(
        job_id, attempt_id or None, worker.id, worker.current_attempt_id
    )
    if read is None:
        raise NotFound(f"no job {job_id}; it may have been deleted")
    job, attempt = read
    if attempt is not None and (
        attempt.job_id != job.id or not await _speaks_for(tx, job, attempt, worker)
    ):
        attempt = None
    if attempt is None and not any(
        a.worker_id == worker.id for a in await tx.q.attempts_for_job(job.id)
    ):
        raise _not_offered(job.id, worker)
    if attempt is not None:
        attempt_tokens.check(tx.key, worker, attempt.id, attempt_token)
    live = (
        attempt is not None
        and attempt.id == job.current_attempt_id
        and attempt.status in ACTIVE_ATTEMPT
        # A report that names no attempt (the SimpleTuner agent's) speaks only for the job
        # the worker holds now, never for one it held before.
        and (attempt_id is not None or attempt.id == worker.current_attempt_id)
    )
    return job, attempt, live


async def _speaks_for(tx: Tx, job: Job, attempt: Attempt, worker: Worker) -> bool:
    """Is the worker the attempt's, or (a gang's) one of its nodes'? Every node's output
    goes to the attempt's log."""
    if attempt.worker_id == worker.id:
        return True
    return job.nodes > 1 and any(
        n.worker_id == worker.id for n in await tx.q.attempt_nodes(attempt.id)
    )


def _last_lines_of_a_node(job: Job, attempt: Attempt, attempt_id: str | None) -> bool:
    """A multi-node attempt completes with rank 0; another node's process, ending with it,
    may ship its last lines after that (its worker named the attempt): they are still the
    attempt's log. A failed or stopped attempt's nodes were told to stop: theirs are not."""
    return (
        job.nodes > 1
        and attempt_id == attempt.id == job.current_attempt_id
        and attempt.status is AttemptStatus.COMPLETED
    )


async def refuse(ctx: Context, worker: Worker, job: Job, attempt: Attempt | None) -> NotHolder:
    """Refuse a report about a job the worker no longer holds, and tell it to stop that job,
    unless it holds another one now: the SimpleTuner agent stops whatever it runs on any
    `job_cancel`, and the one it runs now is the new job."""
    async with transaction(ctx) as tx:
        now = await tx.q.get_worker(worker.id)
        if now is not None and now.current_job_id in (None, job.id):
            await tx.send_to_worker(
                worker.id,
                protocol.job_cancel(
                    job.id, "this worker no longer holds the job", attempt.id if attempt else None
                ),
            )
        tx.audit(
            "job.report_refused",
            worker_actor(worker.id),
            job.id,
            attempt_id=attempt.id if attempt else None,
            job_status=job.status.value,
        )
    return NotHolder(f"worker {worker.id} no longer holds job {job.id}: {_why_not(job, attempt)}")


def _why_not(job: Job, attempt: Attempt | None) -> str:
    """Why a report is refused, in what happened: the attempt ended, or the job moved on."""
    if attempt is not None and attempt.status not in ACTIVE_ATTEMPT:
        moved = ""
        if job.current_attempt_id not in (None, attempt.id):
            moved = f"; the job is {job.status.value} on attempt {job.current_attempt_id}"
        return (
            f"attempt {attempt.id} of job {job.id} has ended ({attempt.status.value}){moved}; "
            "stop the job"
        )
    elsewhere = ", on another attempt" if job.current_attempt_id else ""
    return f"it is {job.status.value}{elsewhere}; stop the job"


async def report_status(
    ctx: Context,
    worker: Worker,
    job_id: str,
    report: StatusReport,
    attempt_token: str | None = None,
) -> JobStatus:
    new = parse_reported_status(report.status)
    if problem := bounds.progress_problem(report.progress) or bounds.points_problem(report.points):
        raise PayloadTooLarge(problem)
    refused: tuple[Job, Attempt | None] | None = None
    freed = requeued = False
    async with transaction(ctx) as tx:
        locked = await tx.q.get_worker(worker.id, lock=True)
        worker = locked or worker
        job, attempt, live = await _holder(tx, worker, job_id, report.attempt_id, attempt_token)
        status = job.status
        if not live or attempt is None:  # a live report always names its attempt
            if attempt is not None and (attempt.status is new or new is AttemptStatus.CANCELLED):
                # A repeat of a final report, or the confirmation of a cancel: release.
                freed = await release_worker(tx, worker.id, attempt, locked)
            else:
                refused = (job, attempt)
        else:
            if job.nodes > 1:
                raise InvalidInput(
                    f"job {job.id} runs on {job.nodes} nodes: each node's report names its "
                    "node_rank (docs/protocol.md)"
                )
            result = await apply(tx, job, attempt, new, report, locked)
            freed = result not in PLACED_JOB
            requeued = result is JobStatus.QUEUED
            status = result
        released = tx.released
    if refused is not None:
        raise await refuse(ctx, worker, *refused)
    await after(ctx, worker, job_id, attempt, new, freed=freed, requeued=requeued)
    for dependent in released:  # its dependents it released (services/dependencies.py)
        await dispatch.dispatch_job(ctx, dependent)
    return status


async def after(
    ctx: Context,
    worker: Worker,
    job_id: str,
    attempt: Attempt | None,
    new: AttemptStatus,
    *,
    freed: bool,
    requeued: bool,
) -> None:
    """What a report's outcome sets going once committed: the freed worker and the requeued
    job offered again."""
    # Stopped by the queue policy for another job: the worker stays, and is offered the
    # job it was freed for before the stopped one looks for a worker.
    for_policy = attempt is not None and attempt.preempted_by is not None
    if for_policy and freed:
        await dispatch.dispatch_worker(ctx, worker.id)
    if requeued:
        await dispatch.dispatch_job(ctx, job_id)
    # A worker preempted otherwise (its machine) is going away.
    if freed and new is not AttemptStatus.PREEMPTED and not for_policy:
        await dispatch.dispatch_worker(ctx, worker.id)


async def apply(
    tx: Tx,
    job: Job,
    attempt: Attempt,
    new: AttemptStatus,
    report: StatusReport,
    locked: Worker | None,
    node: int | None = None,
) -> JobStatus:
    """Apply the live attempt's report (the one writer of what a report changes). `node`:
    the multi-node attempt's node that reports; a failure without an error ends with its
    last lines."""
    error = report.error[-MAX_ERROR_CHARS:] if report.error else None
    if new in TAKEN_ATTEMPT:
        if new is AttemptStatus.ACKNOWLEDGED and attempt.status is not AttemptStatus.OFFERED:
            return job.status  # a repeated acknowledgement
        if attempt.status is not new:
            stamp = "acknowledged_at" if new is AttemptStatus.ACKNOWLEDGED else "started_at"
            values: dict[str, Any] = {stamp: tx.now}
            if new is AttemptStatus.RUNNING and attempt.acknowledged_at is None:
                values["acknowledged_at"] = tx.now
            await move_attempt(tx, attempt, new, **values)
        if new is AttemptStatus.RUNNING:
            progress: dict[str, Any] = (
                {"progress": report.progress} if report.progress is not None else {}
            )
            await history.record(tx, job, attempt, report.progress, report.points)
            if job.status is JobStatus.OFFERED:
                await move_job(tx, job, JobStatus.RUNNING, started_at=tx.now, **progress)
                tx.observe("time_to_gpu", max(0.0, (tx.now - job.created_at).total_seconds()))
            elif progress:
                await tx.q.update_job(job.id, updated_at=tx.now, **progress)
                tx.wake(job_topic(job.id), JOBS_TOPIC)
            return JobStatus.RUNNING
        return job.status
    if report.progress is not None:
        await history.record(tx, job, attempt, report.progress, report.points)
        await tx.q.update_job(job.id, progress=report.progress)
    if new is AttemptStatus.FAILED and error is None:
        lines = await tx.q.last_log_lines(attempt.id, 20, node)
        code = f"exited with code {report.exit_code}" if report.exit_code is not None else "failed"
        error = "\n".join([code, *lines]) if lines else code
    if new is AttemptStatus.CANCELLED:
        error = error or "cancelled on the worker"
    if new is AttemptStatus.PREEMPTED:  # requeued without spending a retry (outcomes)
        error = error or "preempted: the worker's machine is going away"
    return await end_attempt(
        tx, job, attempt, new, error=error, exit_code=report.exit_code, locked=locked
    )


async def append_logs(
    ctx: Context,
    worker: Worker,
    job_id: str,
    attempt_id: str | None,
    lines: list[tuple[str, str]],
    first: int | None = None,
    attempt_token: str | None = None,
    node_rank: int | None = None,
) -> int:
    """Store a batch of the live attempt's output as the lines of the node that sent it:
    a multi-node job's node names its rank (fenced like its status reports), a one-node
    job's lines are node 0's."""
    if problem := bounds.log_batch_problem([text for _stream, text in lines]):
        raise PayloadTooLarge(problem)
    refused: tuple[Job, Attempt | None] | None = None
    async with transaction(ctx) as tx:
        job, attempt, live = await _holder(tx, worker, job_id, attempt_id, attempt_token)
        if attempt is None or not (live or _last_lines_of_a_node(job, attempt, attempt_id)):
            refused = (job, attempt)
        else:
            node = await _log_node(tx, job, attempt, worker, node_rank)
            if first is not None:  # skip what an earlier delivery of this batch stored
                held = await tx.q.count_logs(attempt.id, node)
                lines = lines[max(0, held - first) :]
            await tx.q.insert_logs(
                [
                    {
                        "job_id": job.id,
                        "attempt_id": attempt.id,
                        "node": node,
                        "stream": stream,
                        "text": text,
                        "ts": tx.now,
                    }
                    for stream, text in lines
                ]
            )
            tx.wake(job_topic(job.id))
    if refused is not None:
        raise await refuse(ctx, worker, *refused)
    return len(lines)


async def _log_node(
    tx: Tx, job: Job, attempt: Attempt, worker: Worker, node_rank: int | None
) -> int:
    """The node whose lines these are: the rank a multi-node job's node names, if it is
    that worker's (`rendezvous.fence`); 0 for a one-node job."""
    if job.nodes <= 1:
        if node_rank:
            raise InvalidInput(
                f"job {job.id} runs on one node: send its logs without node_rank (or with 0)"
            )
        return 0
    if node_rank is None:
        raise InvalidInput(
            f"job {job.id} runs on {job.nodes} nodes: each node's logs name its node_rank "
            "(docs/protocol.md)"
        )
    fenced = rendezvous.fence(await tx.q.attempt_nodes(attempt.id), worker.id, node_rank)
    if isinstance(fenced, str):
        raise Forbidden(f"job {job.id}, attempt {attempt.id}: {fenced}")
    return fenced.rank
