"""What a worker is sent when offered an attempt, and a gang's node when every node
acknowledged: one home for the offer and for the start, whether the transaction that made
one hands it over to the worker's stream or the stream derives it from the database again
(a new stream, a notification that came without it)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from gpufleet import protocol
from gpufleet.domain import node_checkpoints, outcomes, publishing, rendezvous
from gpufleet.domain.records import Attempt, AttemptNode, Checkpoint, Job, Worker
from gpufleet.domain.secrets import upload_token
from gpufleet.domain.states import AttemptStatus, NodeState
from gpufleet.protocol import Event
from gpufleet.server.services import job_inputs
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
    inputs: list[dict[str, Any]] | None = None,
) -> Event:
    """The `job_submit` event of the attempt: its upload token is derived again on each send;
    a SimpleTuner config that publishes nowhere is pointed at this orchestrator's storage
    route (`domain.publishing`, reached at `public_url`). `node_rank`: the node of a gang's
    attempt it offers (of `job.nodes`); None for a one-node job. `inputs`: what it takes
    from its dependencies (`job_inputs.files`)."""
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
        inputs=inputs,
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
        inputs = await job_inputs.files(q, job, attempt.id)
        events[attempt.id] = offer(key, job, attempt.id, resume, public_url, rank, inputs)
    return events


def starts(begin: rendezvous.Start, starting: Sequence[AttemptNode]) -> list[tuple[str, Event]]:
    """The `job_start` of each node in `starting` (worker id, event), with the rendezvous
    every node acknowledged."""
    addrs = list(begin.node_addrs)
    return [
        (
            node.worker_id,
            protocol.job_start(
                node.job_id,
                node.attempt_id,
                node.rank,
                begin.master_addr,
                begin.master_port,
                addrs,
            ),
        )
        for node in starting
    ]


async def pending_start(q: Queries, worker: Worker, held: Attempt | None) -> Event | None:
    """The `job_start` of the gang attempt the worker holds (`held`, its current attempt),
    while its node has not said it runs: every node acknowledged, so the transaction that
    saw the last acknowledgement handed it over; a stream that has not sent it sends it."""
    if held is None or held.status is not AttemptStatus.ACKNOWLEDGED:
        return None
    nodes = await q.attempt_nodes(held.id)  # [] for a one-node attempt
    own = [n for n in nodes if n.worker_id == worker.id and n.state is NodeState.ACKNOWLEDGED]
    begin = rendezvous.start(nodes)
    if begin is None or not own:
        return None
    return starts(begin, own)[0][1]
