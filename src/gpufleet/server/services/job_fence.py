"""Which worker may speak about a job's files: the one holding its live attempt (a write),
or, for a read, any node of a multi-node job's attempt. Fenced as status reports are."""

from __future__ import annotations

from gpufleet.domain.records import Job, Worker
from gpufleet.domain.states import ACTIVE_ATTEMPT
from gpufleet.errors import Forbidden, NotFound, NotHolder
from gpufleet.store import Queries


async def offered_job(
    q: Queries, worker: Worker, job_id: str, *, lock: bool = False, node: bool = False
) -> Job:
    """The job, if it was ever offered to this worker: else 404, or 403 (as reports are).
    `node`: a read any node of a gang's attempt makes (secrets, checkpoint, workdir)."""
    job = await q.get_job(job_id, lock=lock)
    if job is None:
        raise NotFound(f"no job {job_id}; it may have been deleted")
    if node and await _a_node(q, job, job.current_attempt_id, worker):
        return job
    if not any(a.worker_id == worker.id for a in await q.attempts_for_job(job.id)):
        raise Forbidden(
            f"job {job_id} was never offered to worker {worker.id}; a worker token speaks only "
            "for its own jobs"
        )
    return job


async def _a_node(q: Queries, job: Job, attempt_id: str | None, worker: Worker) -> bool:
    """Is the worker one of the nodes of this multi-node job's attempt?"""
    nodes = await q.attempt_nodes(attempt_id) if job.nodes > 1 and attempt_id else []
    return any(n.worker_id == worker.id for n in nodes)


async def live_job(
    q: Queries, worker: Worker, job_id: str, attempt_id: str, *, lock: bool, node: bool = False
) -> Job:
    """The job, if `attempt_id` is its live attempt on this worker (`node`: any node of it,
    see `offered_job`); else NotHolder (409)."""
    job = await offered_job(q, worker, job_id, lock=lock, node=node)
    attempt = await q.get_attempt(attempt_id)
    if (
        attempt is None
        or attempt.job_id != job.id
        or (
            attempt.worker_id != worker.id
            and not (node and await _a_node(q, job, attempt.id, worker))
        )
        or attempt.id != job.current_attempt_id
        or attempt.status not in ACTIVE_ATTEMPT
    ):
        raise NotHolder(
            f"attempt {attempt_id[:64]!r} is not job {job.id}'s live attempt on worker "
            f"{worker.id} (the job is {job.status.value}); nothing was stored, stop uploading "
            "for it"
        )
    return job


async def live_node(
    q: Queries, worker: Worker, job_id: str, attempt_id: str, rank: int | None, *, lock: bool
) -> Job:
    """The job, if `attempt_id` is its live attempt and, in a multi-node job, this worker is
    its node `rank` (a node writes only its own part of a checkpoint); `rank` None, or a
    one-node job: as `live_job`."""
    job = await live_job(q, worker, job_id, attempt_id, lock=lock, node=rank is not None)
    if rank is None or job.nodes <= 1:
        return job
    if not any(
        n.rank == rank and n.worker_id == worker.id for n in await q.attempt_nodes(attempt_id)
    ):
        raise NotHolder(
            f"worker {worker.id} is not node {rank} of job {job.id}'s attempt "
            f"{attempt_id[:64]!r}; a node stores only its own part, under node-<its rank>/"
        )
    return job
