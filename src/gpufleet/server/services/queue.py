"""The queue as a client reads it (a job, its names, listings, logs), and cancelling a job.
Submitting is services/submit.py, why a job waits services/waiting.py, stored configs
services/configs.py."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from gpufleet import protocol
from gpufleet.domain.audit_events import KEY_ACTOR, key_actor
from gpufleet.domain.bounds import MAX_LOG_PAGE_BYTES
from gpufleet.domain.filters import JobFilter
from gpufleet.domain.naming import check_labels
from gpufleet.domain.ownership import JobAction
from gpufleet.domain.presence import Unheard, attempt_unheard
from gpufleet.domain.records import (
    Attempt,
    Checkpoint,
    Job,
    LogLine,
    User,
)
from gpufleet.domain.states import (
    ACTIVE_ATTEMPT,
    TERMINAL_JOB,
    AttemptStatus,
    JobStatus,
    parse_job_status,
)
from gpufleet.errors import Conflict, InvalidInput
from gpufleet.server.context import Context, transaction
from gpufleet.server.services import capacity, dependencies, dispatch, ownership
from gpufleet.server.services.lifecycle import end_attempt, move_job, no_job
from gpufleet.server.services.waiting import job_waiting
from gpufleet.store.queries import Queries


@dataclass(frozen=True, slots=True)
class JobView:
    job: Job
    attempts: list[Attempt]
    waiting: dict[str, Any] | None
    reruns: list[str] = field(default_factory=list)  # jobs that re-run this one
    names: dict[str, str] = field(default_factory=dict)  # see `names_of`
    resumed: dict[str, Checkpoint] = field(default_factory=dict)  # by id, attempts resumed from
    unheard: Unheard | None = None  # its live attempt's worker has lost its stream
    cost: float | None = None  # on pool workers, to date (None: it ran on none)
    links: dependencies.Links | None = None  # what it waits on, what waits on it


# ---- read -------------------------------------------------------------------------------


async def job_exists(ctx: Context, job_id: str) -> bool:
    async with ctx.store.read() as q:
        return await q.get_job(job_id) is not None


async def get_job(ctx: Context, job_id: str) -> Job:
    async with ctx.store.read() as q:
        job = await q.get_job(job_id)
    if job is None:
        raise no_job(job_id)
    return job


async def view_job(ctx: Context, job_id: str) -> JobView:
    async with ctx.store.read() as q:
        job = await q.get_job(job_id)
        if job is None:
            raise no_job(job_id)
        attempts = await q.attempts_for_job(job_id)
        now = ctx.clock()
        waiting = await capacity.pool_wait(q, job, await job_waiting(q, job, now), now)
        cost = await capacity.job_cost(q, job, now)
        reruns = await q.reruns_of(job_id)
        names = await names_of(q, [job], attempts)
        wanted = {a.resumed_from for a in attempts if a.resumed_from}
        held = await q.checkpoints_for_job(job_id) if wanted else []
        resumed = {c.id: c for c in held if c.id in wanted}
        live = job.worker_id and job.status not in TERMINAL_JOB
        runner = await q.get_worker(job.worker_id) if live and job.worker_id else None
        links = await dependencies.links(q, job)
    unheard = attempt_unheard(runner, job.current_attempt_id, ctx.settings.silence())
    return JobView(job, attempts, waiting, reruns, names, resumed, unheard, cost, links)


async def names_of(
    q: Queries, jobs: Sequence[Job], attempts: Sequence[Attempt] = ()
) -> dict[str, str]:
    """What a person calls the workers, keys, users and teams these jobs name: worker id →
    worker name, actor (`key:k_…`) → the key's name, user and team id → name. Ids of
    deleted ones are left out."""
    worker_ids = {j.worker_id for j in jobs if j.worker_id} | {a.worker_id for a in attempts}
    actors = {a for j in jobs for a in (j.submitted_by, j.approved_by, j.rejected_by) if a}
    key_ids = {a.removeprefix(KEY_ACTOR) for a in actors if a.startswith(KEY_ACTOR)}
    names: dict[str, str] = dict(await q.worker_names(worker_ids)) if worker_ids else {}
    if key_ids:
        keys = await q.api_key_names(key_ids)
        names.update({key_actor(key_id): name for key_id, name in keys.items()})
    user_ids = {u for j in jobs for u in (j.user_id, j.config_written_by) if u}
    team_ids = {j.team_id for j in jobs if j.team_id}
    if user_ids:  # user (u_…) and team (t_…) ids never look like a worker's or a key's
        names.update(await q.user_names(user_ids))
    if team_ids:
        names.update(await q.team_names(team_ids))
    return names


async def job_names(ctx: Context, jobs: Sequence[Job]) -> dict[str, str]:
    async with ctx.store.read() as q:
        return await names_of(q, jobs)


def label_filter(pairs: Sequence[str]) -> dict[str, str]:
    """`key=value` filters of the Queue: the jobs that ask for exactly that label."""
    out = {}
    for pair in pairs:
        key, eq, value = pair.partition("=")
        if not eq or not key.strip():
            raise InvalidInput(f"label filter {pair!r} is not key=value; write e.g. gpu_type=a100")
        out[key.strip()] = value.strip()
    return check_labels(out)


def status_filter(names: Sequence[str], include_completed: bool | None) -> list[str]:
    """The statuses a listing asks for, by our names or SimpleTuner's (`pending`, `blocked`);
    `include_completed=False` (SimpleTuner's) leaves out the ended ones."""
    wanted = [parse_job_status(n) for n in names] or list(JobStatus)
    if include_completed is False:
        wanted = [s for s in wanted if s not in TERMINAL_JOB]
        if not wanted:  # asked only for ended jobs, and not to include them: none
            raise InvalidInput(
                "these statuses are all of ended jobs, and include_completed=false leaves "
                "them out; drop one of the two"
            )
    return [s.value for s in wanted] if names or include_completed is False else []


async def list_jobs(ctx: Context, f: JobFilter, limit: int, offset: int) -> tuple[list[Job], int]:
    async with ctx.store.read() as q:
        return await q.list_jobs(f, limit, offset)


async def read_logs(
    ctx: Context, job_id: str, after: int, limit: int, node: int | None = None
) -> tuple[list[LogLine], bool]:
    """Lines after `after` (at most `limit`, and 4 MiB of text; one node's, with `node`),
    and whether more follow."""
    async with ctx.store.read() as q:
        if await q.get_job(job_id) is None:
            raise no_job(job_id)
        return await q.read_logs(job_id, after, limit, max_bytes=MAX_LOG_PAGE_BYTES, node=node)


# ---- cancel -----------------------------------------------------------------------------


async def cancel(ctx: Context, job_id: str, actor: str, client: str | None, *, by: User) -> Job:
    """Cancel the job, if `by` may (`domain.ownership`); a running one is stopped."""
    async with transaction(ctx) as tx:
        job = await tx.q.get_job(job_id, lock=True)
        if job is None:
            raise no_job(job_id)
        await ownership.require(tx.q, by, job, JobAction.CANCEL)
        if job.status in TERMINAL_JOB:
            raise Conflict(f"job {job_id} is already {job.status.value}; nothing to cancel")
        attempt = await tx.q.get_attempt(job.current_attempt_id) if job.current_attempt_id else None
        if attempt is not None and attempt.status in ACTIVE_ATTEMPT:
            # The worker stays busy until it confirms the process is gone.
            await end_attempt(
                tx,
                job,
                attempt,
                AttemptStatus.CANCELLED,
                error=f"cancelled by {by.name}",
                by_user=True,
            )
            await tx.send_to_worker(
                attempt.worker_id, protocol.job_cancel(job.id, "cancelled by the user", attempt.id)
            )
        else:
            await move_job(tx, job, JobStatus.CANCELLED, actor, ended_at=tx.now)
        tx.audit("job.cancelled", actor, job.id, client)
        released = tx.released
    for dependent in released:  # dependents `on: ended` it released
        await dispatch.dispatch_job(ctx, dependent)
    return await get_job(ctx, job_id)
