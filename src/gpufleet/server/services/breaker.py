"""The circuit breaker (docs/workers.md): a worker whose attempts keep ending by
infrastructure failure (lost, could not start, a GPU fault) is drained, with the reason, until
an admin undrains it. `domain/gpu_health.py` decides; this applies it, in the transaction that
frees the worker from the attempt (`lifecycle.release_worker`)."""

from __future__ import annotations

from typing import Any

from gpufleet import protocol
from gpufleet.domain import gpu_health
from gpufleet.domain.audit_events import SYSTEM_ACTOR
from gpufleet.domain.records import Attempt, Worker
from gpufleet.domain.states import AttemptStatus, start_failure_workers
from gpufleet.server.context import Tx


async def count(
    tx: Tx, worker: Worker, attempt: Attempt, outcome: AttemptStatus, *, gpu_fault: bool
) -> dict[str, Any]:
    """The worker's changes for this attempt's end: its run of infrastructure failures, and
    the drain when that run reaches `--drain-after-infra-failures` (none when nothing moves,
    so that a sound end on a sound worker writes nothing more)."""
    started = attempt.started_at is not None
    elsewhere = False
    if outcome is AttemptStatus.FAILED and not started:  # the job's fault, or this worker's?
        history = await tx.q.attempts_for_job(attempt.job_id)
        elsewhere = bool(start_failure_workers(history) - {worker.id})
    end = gpu_health.ending(
        outcome,
        started=started,
        acknowledged=attempt.acknowledged_at is not None,
        gpu_fault=gpu_fault,
        failed_to_start_elsewhere=elsewhere,
    )
    limit = tx.settings.drain_after_infra_failures
    decided = gpu_health.breaker(worker.infra_failures, end, limit, drained=worker.drained)
    if decided.in_a_row == worker.infra_failures:
        return {}
    if not decided.trips:
        return {"infra_failures": decided.in_a_row}
    reason = gpu_health.breaker_reason(decided.in_a_row)
    await tx.send_to_worker(worker.id, protocol.drain(reason))
    tx.audit("worker.drained", SYSTEM_ACTOR, worker.id, reason=reason, breaker=True)
    tx.observe("breaker_trip")
    return {"infra_failures": decided.in_a_row, "drained": True, "drain_reason": reason}
