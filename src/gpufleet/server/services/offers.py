"""What a worker is sent when offered an attempt: one home for the offer, whether the claim
that made it hands it over or the worker's stream reads it back to send again."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from gpufleet import protocol
from gpufleet.domain import node_checkpoints, outcomes, publishing
from gpufleet.domain.records import Attempt, Checkpoint, Job, Worker
from gpufleet.domain.secrets import upload_token
from gpufleet.protocol import Event
from gpufleet.store import Queries


async def resume_for(
    q: Queries, job: Job, history: Sequence[Attempt] | None = None
) -> Checkpoint | None:
    """The checkpoint the job's next attempt starts from (`outcomes.resume_sources`), if any;
    a gang's, the newest every node completed (`node_checkpoints.resume_choice`).
    `history`: the job's attempts, when the caller has read them already. A job never
    offered before reads nothing more."""
    if job.attempts == 0:
        return None
    if history is None:
        history = await q.attempts_for_job(job.id)
    sources = outcomes.resume_sources(history)
    if job.nodes <= 1:
        return await q.latest_checkpoint(job.id, sources)
    candidates = await q.resume_candidates(job.id, sources)
    parts = await q.checkpoint_node_ranks([c.id for c in candidates])
    return node_checkpoints.resume_choice(candidates, job.nodes, parts)


def resume_entry(checkpoint: Checkpoint | None) -> dict[str, Any] | None:
    if checkpoint is None:
        return None
    return {
        "checkpoint_id": checkpoint.id,
        "name": checkpoint.name,
        "path": checkpoint.path,
        "step": checkpoint.step,
        "attempt_id": checkpoint.attempt_id,
        "attempt_number": checkpoint.attempt_number,
    }


def offer(
    key: bytes,
    job: Job,
    attempt_id: str,
    resume: Checkpoint | None,
    public_url: str,
    node_rank: int | None = None,
) -> Event:
    """The `job_submit` event of the attempt: its upload token is derived again on each send;
    a SimpleTuner config that publishes nowhere is pointed at this orchestrator's storage
    route (`domain.publishing`, reached at `public_url`). `node_rank`: the node of a gang's
    attempt it offers (of `job.nodes`); None for a one-node job."""
    token = upload_token(key, attempt_id)
    config = publishing.offered_config(
        job.config, public_url=public_url, job_id=job.id, upload_token=token
    )
    return protocol.job_submit(
        job.id,
        attempt_id,
        config,
        job.gpu_count,
        upload_token=token,
        resume=resume_entry(resume),
        node=None if node_rank is None else (node_rank, job.nodes),
    )


async def pending(q: Queries, key: bytes, worker: Worker, public_url: str) -> dict[str, Event]:
    """The offers waiting for the worker's acknowledgement, by attempt id, as stored; a
    gang's, with the worker's node rank."""
    waiting = await q.pending_offers(worker.id, worker.current_attempt_id)
    events = {}
    for attempt, job in waiting:
        resume = await q.get_checkpoint(attempt.resumed_from) if attempt.resumed_from else None
        rank = None
        if job.nodes > 1:
            nodes = await q.attempt_nodes(attempt.id)
            rank = next((n.rank for n in nodes if n.worker_id == worker.id), None)
            if rank is None:
                continue
        events[attempt.id] = offer(key, job, attempt.id, resume, public_url, node_rank=rank)
    return events
