"""Moving workers, jobs and attempts through their transition tables inside one transaction.

The one writer of a status: every move of a job, an attempt or a worker (its birth, a claim,
an approval, an end) is written here, with its consequences: the audit row, the webhooks'
outbox, the wake-ups, the metrics. The store's generic `update_job` refuses a status, and
tests/unit/test_status_writers.py finds any other module that writes one.

Lock order: a transaction that changes a worker and a job locks (or conditionally updates)
the worker row first, then the job row, then the attempt. PostgreSQL answers two
transactions that take them in opposite orders with `deadlock detected`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from gpufleet import protocol
from gpufleet.domain import outcomes, rendezvous
from gpufleet.domain.audit_events import SYSTEM_ACTOR
from gpufleet.domain.records import Attempt, Job, Worker
from gpufleet.domain.states import (
    ACTIVE_ATTEMPT,
    REPORTED_ATTEMPT,
    TERMINAL_JOB,
    WAITING_JOB,
    AttemptStatus,
    JobStatus,
    NodeState,
    WorkerStatus,
    can_move_attempt,
    can_move_worker,
    check_job_move,
    derive_worker_status,
    may_newly_fit,
)
from gpufleet.errors import Conflict, NotFound
from gpufleet.server.context import Tx
from gpufleet.server.hub import JOBS_TOPIC, WORKERS_TOPIC, job_topic
from gpufleet.server.services import breaker, dependencies, webhooks
from gpufleet.store.queries.jobs import NewJob

KEEPS_HOLD = frozenset({WorkerStatus.IDLE, WorkerStatus.CONNECTING})  # held for a gang


class ClaimLost(Exception):
    """Another dispatch took the job or the worker first; the transaction rolls back."""


class WorkerTaken(ClaimLost):
    """Another dispatch took the worker first; the claim wrote nothing."""


async def save_worker(
    tx: Tx, worker: Worker, actor: str = SYSTEM_ACTOR, **changes: Any
) -> WorkerStatus:
    """Apply changes to a worker and re-derive its status from the facts."""

    def fact(name: str, current: Any) -> Any:
        return changes.get(name, current)

    status = derive_worker_status(
        offline=fact("offline_since", worker.offline_since) is not None,
        # A worker whose preflight fails is out like a drained one (offered nothing), but
        # not drained: its agent is not told to leave, and it is back once the check passes.
        drained=fact("drained", worker.drained)
        or fact("preflight_error", worker.preflight_error) is not None,
        has_job=fact("current_attempt_id", worker.current_attempt_id) is not None,
        stream_open=fact("stream_owner", worker.stream_owner) is not None,
    )
    if not can_move_worker(worker.status, status):
        raise Conflict(f"worker {worker.id} cannot go from {worker.status} to {status}")
    if worker.held_for is not None and status not in KEEPS_HOLD:
        # Offline, drained or busy: it leaves its gang's hold (a stream that reconnects, as
        # on an orchestrator's restart, keeps it: the hold's clock goes on).
        changes = {**changes, "held_for": None, "held_since": None, "held_note": None}
    await tx.q.set_worker_status(worker.id, status, **changes)
    if may_newly_fit(worker.status, status, changes):
        tx.frees_a_worker()  # a job queued meanwhile sees it, or its pass the job (dispatch.py)
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
    depended_on = await tx.q.set_job_status(job.id, new, updated_at=tx.now, **values)
    if job.nodes > 1 and job.status is JobStatus.QUEUED:  # a gang leaves the queue: no hold
        await tx.q.release_holds_of(job.id)
    tx.audit("job.status_changed", actor, job.id, old=job.status.value, new=new.value)
    tx.wake(job_topic(job.id), JOBS_TOPIC)
    if new in TERMINAL_JOB:  # the webhooks' outbox row commits with the change, or neither
        await webhooks.job_ended(tx, job, new, values)
        # Its dependents: released, or cancelled naming it (and theirs, by this same move).
        for doomed, reason in await dependencies.settle(tx, job.id) if depended_on else []:
            await move_job(tx, doomed, JobStatus.CANCELLED, ended_at=tx.now, error=reason)


async def claim(tx: Tx, job: Job, worker: Worker, attempt_id: str) -> Job:
    """Queued → offered and idle → busy, both by compare-and-set (job still queued, worker
    still idle), so concurrent dispatches, in one process on PostgreSQL or across replicas,
    never double-book; the job as offered (`as_offered`). `open_attempt` completes it.

    Raises WorkerTaken or ClaimLost when another dispatch took the worker or the job first."""
    offered = as_offered(job, worker.id, attempt_id, tx.now)
    if not await tx.q.claim_worker(
        worker.id, WorkerStatus.BUSY, current_job_id=job.id, current_attempt_id=attempt_id
    ):
        raise WorkerTaken
    if not await tx.q.claim_job(
        job.id,
        offered.status,
        attempts=offered.attempts,
        current_attempt_id=offered.current_attempt_id,
        worker_id=offered.worker_id,
        updated_at=offered.updated_at,
    ):
        raise ClaimLost
    return offered


async def claim_gang(tx: Tx, job: Job, nodes: Sequence[Worker], attempt_id: str) -> Job:
    """`claim` for a gang: every node's worker idle → busy (idle and held by no other gang,
    in id order: one lock order for every gang round), then the job; the job as offered,
    its `worker_id` rank 0's. Raises ClaimLost when any was taken first: the transaction
    rolls back, so no partial gang is ever offered."""
    offered = as_offered(job, nodes[0].id, attempt_id, tx.now)
    for worker in sorted(nodes, key=lambda w: w.id):
        if not await tx.q.claim_node(
            worker.id,
            job.id,
            WorkerStatus.BUSY,
            current_job_id=job.id,
            current_attempt_id=attempt_id,
        ):
            raise ClaimLost
    if not await tx.q.claim_job(
        job.id,
        offered.status,
        attempts=offered.attempts,
        current_attempt_id=attempt_id,
        worker_id=offered.worker_id,
        updated_at=offered.updated_at,
    ):
        raise ClaimLost
    await tx.q.release_holds_of(job.id)  # those it held in another group of `same_label`
    return offered


async def open_attempt(
    tx: Tx, job: Job, worker_id: str, attempt_id: str, number: int, resumed_from: str | None
) -> None:
    """The attempt a `claim` made (its `number`), offered to its worker, and the claim's
    consequences."""
    await tx.q.insert_attempt(
        AttemptStatus.OFFERED,
        {
            "id": attempt_id,
            "job_id": job.id,
            "worker_id": worker_id,
            "number": number,
            "offered_at": tx.now,
            "resumed_from": resumed_from,
        },
    )
    tx.audit(
        "worker.status_changed",
        SYSTEM_ACTOR,
        worker_id,
        old=WorkerStatus.IDLE.value,
        new=WorkerStatus.BUSY.value,
    )
    tx.observe("dispatch_latency", max(0.0, (tx.now - job.updated_at).total_seconds()))
    tx.audit(
        "job.dispatched",
        SYSTEM_ACTOR,
        job.id,
        worker_id=worker_id,
        attempt_id=attempt_id,
        attempt=number,
    )
    tx.audit("job.status_changed", SYSTEM_ACTOR, job.id, old="queued", new="offered")
    tx.wake(job_topic(job.id), JOBS_TOPIC, WORKERS_TOPIC)


def as_offered(job: Job, worker_id: str, attempt_id: str, now: datetime) -> Job:
    """The job as `claim` leaves it: what it writes, and what a caller answers with without
    reading the row back."""
    return dataclasses.replace(
        job,
        status=JobStatus.OFFERED,
        attempts=job.attempts + 1,
        current_attempt_id=attempt_id,
        worker_id=worker_id,
        updated_at=now,
    )


async def queue_new(tx: Tx, new: NewJob) -> Job:
    """A submitted job, born queued or held for approval (a waiting status)."""
    if new.status not in WAITING_JOB:
        raise Conflict(f"job {new.id} cannot be submitted {new.status}")
    return await tx.q.queue_job(new)


async def new_worker(tx: Tx, values: dict[str, Any]) -> WorkerStatus:
    """A worker created by an admin: neither registered nor connected, it is connecting (or
    draining, if created drained)."""
    status = derive_worker_status(
        offline=False, drained=bool(values.get("drained")), has_job=False, stream_open=False
    )
    await tx.q.insert_worker(status, values)
    return status


async def move_attempt(tx: Tx, attempt: Attempt, new: AttemptStatus, **values: Any) -> None:
    if not can_move_attempt(attempt.status, new):
        raise Conflict(f"attempt {attempt.id} is {attempt.status} and cannot become {new}")
    if new not in ACTIVE_ATTEMPT:
        values.setdefault("ended_at", tx.now)
    await tx.q.set_attempt_status(attempt.id, new, **values)


async def release_worker(
    tx: Tx,
    worker_id: str,
    attempt: Attempt,
    locked: Worker | None = None,
    ended: AttemptStatus | None = None,
    gpu_fault: bool = False,
) -> bool:
    """Free the worker that held this attempt; True if it was still holding it. `locked`:
    the worker as this transaction read it under its row lock, if it did (not read again).
    `ended`: how the attempt ended, counted by the circuit breaker (`services/breaker.py`)."""
    if locked is not None and locked.id == worker_id:
        worker: Worker | None = locked
    else:
        worker = await tx.q.get_worker(worker_id, lock=True)
    if worker is None or worker.current_attempt_id != attempt.id:
        return False
    ran = attempt.acknowledged_at is not None or attempt.status in REPORTED_ATTEMPT
    counted = (
        {}
        if ended is None
        else await breaker.count(tx, worker, attempt, ended, gpu_fault=gpu_fault)
    )
    await save_worker(
        tx,
        worker,
        current_job_id=None,
        current_attempt_id=None,
        jobs_run=worker.jobs_run + (1 if ran else 0),
        **counted,
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
    ended_at: datetime | None = None,
    gpu_fault: bool = False,
    culprit: str | None = None,
) -> JobStatus:
    """End the job's current attempt and apply what `outcomes.decide` makes of the job.

    Returns the job's new status. A cancel by the user keeps the worker busy until it
    confirms the process is gone; any other ending frees it at once. `locked`: see
    `release_worker`. `ended_at`: when the attempt ended, if before now (a lost one).
    `gpu_fault`: its worker took a GPU out under it (the circuit breaker counts it).
    `culprit`: the worker whose loss or fault ended it (a gang's breaker counts that node's).
    """
    # An attempt the queue policy preempted counts as preempted however it ends.
    outcome = outcomes.counted_as(outcome, attempt.preempted_by, by_user=by_user)
    when = {} if ended_at is None else {"ended_at": ended_at}
    await move_attempt(tx, attempt, outcome, error=error, exit_code=exit_code, **when)
    if not by_user:
        # The breaker counts the end against the attempt's worker, or a gang's against the
        # node's worker that ended it (`culprit`: lost, a GPU fault), never its peers.
        for worker_id in await _node_workers(tx, job, attempt, outcome, error, locked):
            counts = job.nodes == 1 or worker_id == culprit
            counted = outcome if counts else None
            await release_worker(tx, worker_id, attempt, locked, counted, gpu_fault and counts)
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


async def _node_workers(
    tx: Tx,
    job: Job,
    attempt: Attempt,
    outcome: AttemptStatus,
    error: str | None,
    locked: Worker | None,
) -> tuple[str, ...]:
    """The workers the attempt's end frees: its one worker, or (a gang) those of the nodes
    that end with it (`rendezvous.on_end`: a node outliving a completed attempt keeps its
    worker until it ends). Unless it completed, every other node still going is told to
    stop at once, so that none hangs in a collective waiting for one that is gone."""
    if job.nodes == 1:
        return (attempt.worker_id,)
    nodes = await tx.q.attempt_nodes(attempt.id)
    release = rendezvous.on_end(nodes, attempt.worker_id, outcome)
    await tx.q.end_attempt_nodes(attempt.id, tx.now, error, [n.rank for n in release.outliving])
    stop = protocol.job_cancel(job.id, f"its multi-node attempt {outcome.value}", attempt.id)
    if outcome is not AttemptStatus.COMPLETED:
        reporter = getattr(locked, "id", "")
        going = [n for n in nodes if n.state is not NodeState.ENDED and n.worker_id != reporter]
        await tx.send_to_workers([(node.worker_id, stop) for node in going])
    return release.free


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


def no_job(job_id: str) -> NotFound:
    """There is no such job: what each surface says, and where it lists the jobs."""
    return NotFound(
        f"no job {job_id}; list jobs with GET /api/queue",
        ui=f"no job {job_id}; the Queue page lists the jobs",
        cli=f"no job {job_id}; list jobs with `gpufleet jobs list`",
    )
