"""A worker's health as its agent reports it (docs/workers.md, Health): faulty GPUs taken
out, a failing preflight keeping it from jobs. `domain/gpu_health.py` decides what is a
fault and what the worker then offers; this applies it inside the heartbeat's or the
registration's transaction: the worker's row, the attempt it held (ended as `preempted`,
requeued without spending a retry), the audit row, the `gpu.fault` webhook and the metric."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from gpufleet.domain import gpu_health
from gpufleet.domain.audit_events import worker_actor
from gpufleet.domain.gpu_health import GpuReading, Preflight
from gpufleet.domain.records import Worker
from gpufleet.server.context import Tx
from gpufleet.server.services import webhooks
from gpufleet.server.services.losses import lose_current_attempt


def known_faults(worker: Worker) -> dict[int, str]:
    return {fault.index: fault.reason for fault in worker.gpu_faults}


def changes(
    worker: Worker, readings: Sequence[GpuReading] | None, preflight: Preflight | None
) -> bool:
    """Whether a heartbeat's health changes the worker (a transaction of its own), or is only
    a sign of life. A preflight that still fails with other words is stored too (what the
    workers' pages show is its latest run: one write a run, each `--preflight-interval`)."""
    if readings and gpu_health.new_faults(known_faults(worker), readings):
        return True
    if preflight is None:
        return False
    return gpu_health.preflight_error(preflight) != worker.preflight_error


def _offered(worker: Worker, faulty: dict[int, str], reported: int | None = None) -> int:
    caps = worker.capabilities
    if reported is None:
        stored = caps.get("gpu_count_reported")
        reported = stored if isinstance(stored, int) else worker.gpu_count + len(faulty)
    listed = [g.get("index") for g in caps.get("gpus") or () if isinstance(g, dict)]
    indices = [i for i in listed if isinstance(i, int)]
    return gpu_health.offered_gpus(reported, faulty, indices)


async def apply(
    tx: Tx,
    worker: Worker,
    readings: Sequence[GpuReading] | None,
    preflight: Preflight | None,
    *,
    registered: int | None = None,
) -> tuple[dict[str, Any], str | None]:
    """The worker's changes for this health, and the job requeued off it (None if none).
    `registered`: the GPU count a registration reports (its faults start afresh: a
    restarted agent reads its GPUs again), else a heartbeat's faults add to those known."""
    known = {} if registered is not None else known_faults(worker)
    added = gpu_health.new_faults(known, readings or ())
    out: dict[str, Any] = {}
    faulty = {**known, **added}
    if added or registered is not None:
        out["gpu_faults"] = [{"index": i, "reason": why} for i, why in sorted(faulty.items())]
        out["gpu_count"] = _offered(worker, faulty, registered)
    was_failing = worker.preflight_error is not None
    error = worker.preflight_error
    if preflight is not None:
        error = gpu_health.preflight_error(preflight)
    elif registered is not None:
        error = None  # an agent that runs no preflight (any more)
    failing = error is not None
    if error != worker.preflight_error:  # now failing, passing again, or failing otherwise
        out["preflight_error"] = error
    requeued = None
    if added:
        words = "; ".join(f"GPU {i} {why}" for i, why in added.items())
        requeued = await lose_current_attempt(
            tx, worker, f"its worker took a faulty GPU out: {words}", taken_out=True, gpu_fault=True
        )
    elif failing and not was_failing:
        requeued = await lose_current_attempt(
            tx, worker, "its worker's preflight failed", taken_out=True
        )
    for index, why in added.items():
        tx.audit(
            "gpu.fault",
            worker_actor(worker.id),
            worker.id,
            gpu_index=index,
            reason=why,
            job_id=requeued,
        )
        tx.observe("gpu_fault", 1.0, gpu_health.kind_of(why))
        await webhooks.gpu_fault(tx, worker, index, why, requeued)
    if failing != was_failing:
        event = "worker.unhealthy" if failing else "worker.healthy"
        detail = {"output": out.get("preflight_error")} if failing else {}
        tx.audit(event, worker_actor(worker.id), worker.id, **detail)
    return out, requeued
