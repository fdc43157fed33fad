"""When a worker no longer has its job (it went silent, disconnected, came back without it,
says it runs none, or took itself out): the attempt is withdrawn, lost or preempted, through
`lifecycle.end_attempt` like every other end."""

from __future__ import annotations

from gpufleet import protocol
from gpufleet.domain import outcomes
from gpufleet.domain.records import Worker
from gpufleet.domain.states import ACTIVE_ATTEMPT, AttemptStatus
from gpufleet.server.context import Tx
from gpufleet.server.services.lifecycle import end_attempt, move_attempt


async def lose_current_attempt(
    tx: Tx,
    worker: Worker,
    why: str,
    *,
    silent: bool = False,
    taken_out: bool = False,
    gpu_fault: bool = False,
) -> str | None:
    """The worker no longer has its job: withdraw or lose the attempt. Returns the job id.
    `silent`: it was found silent, so the attempt ended at its last sign of life
    (`outcomes.lost_at`), not now. `taken_out`: the worker took itself out under it (a GPU
    fault, a failing preflight): ended as `preempted`, the outcome of a machine going away
    (requeued without spending a retry, resumed from its checkpoint, offered elsewhere
    first), and the worker told to stop it; `gpu_fault` too: the circuit breaker counts it."""
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
        AttemptStatus.WITHDRAWN
        if attempt.status is AttemptStatus.OFFERED
        else AttemptStatus.PREEMPTED
        if taken_out
        else AttemptStatus.LOST
    )
    if taken_out:
        await tx.send_to_worker(worker.id, protocol.job_cancel(job.id, why, attempt.id))
    ended_at = None
    if silent:
        # A gang's live nodes commit their parts after the lost node's last beat: count them.
        committed = await tx.q.last_commit(attempt.id)
        ended_at = outcomes.lost_at(worker.last_heartbeat, attempt.offered_at, tx.now, committed)
    await end_attempt(
        tx,
        job,
        attempt,
        outcome,
        error=why,
        ended_at=ended_at,
        gpu_fault=gpu_fault,
        culprit=worker.id,
    )
    return job.id
