"""Sweeps (docs/jobs.md, Sweeps): made, watched, cancelled and re-run as one.

The points and every check on them are `domain/sweeps.py`'s. Each point's job is queued as a
submit's is (`services/submit.py` `enqueue`, the sweep named), after every point's config was
checked: input that is refused stores nothing. `max_parallel` is held at dispatch
(`services/dispatch_policy.py` `SweepRoom`).
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from gpufleet.domain import sweeps as rules
from gpufleet.domain.jobspec import check_config, gang_shape, job_gpu_count
from gpufleet.domain.limits import queued_limit_hit
from gpufleet.domain.naming import check_labels
from gpufleet.domain.ownership import SAID, Allowed, JobAction, Refused, decide
from gpufleet.domain.permissions import QUEUE_SUBMIT, allows
from gpufleet.domain.records import Job, Team, User
from gpufleet.domain.secrets import new_id
from gpufleet.domain.states import TERMINAL_JOB, JobStatus
from gpufleet.domain.sweeps import Sweep
from gpufleet.errors import (
    Conflict,
    DomainError,
    Forbidden,
    InvalidInput,
    NotFound,
    TooManyRequests,
)
from gpufleet.server.context import Context, transaction
from gpufleet.server.services import configs, idempotency, ownership, queue, reruns, submit
from gpufleet.server.services.people import resolve_submitter
from gpufleet.server.services.standing import user_state
from gpufleet.store import Queries

_RANDOM = random.SystemRandom()
RERUN_OF = frozenset({JobStatus.FAILED, JobStatus.CANCELLED})  # what a sweep's re-run repeats
MAX_LISTED = 200


@dataclass(frozen=True, slots=True)
class SweepSpec:
    """A submit's sweep fields."""

    sweep: Any
    samples: int | None = None
    max_parallel: int | None = None


def no_sweep(sweep_id: str) -> NotFound:
    return NotFound(
        f"no sweep {sweep_id}; list sweeps with GET /api/sweeps",
        ui=f"no sweep {sweep_id}; see the Sweeps page",
        cli=f"no sweep {sweep_id}; list them with `gpufleet sweeps list`",
    )


async def _config(ctx: Context, sub: submit.Submission) -> dict[str, Any]:
    if sub.config_name is not None and sub.config is None:
        return (await configs.get_config(ctx, sub.config_name)).config.body
    if sub.config is None or sub.config_name is not None:
        raise InvalidInput("send exactly one of 'config_name' (a stored config) or 'config'")
    return check_config(sub.config)


async def _submitter(
    ctx: Context, user_id: str, team: str | None, jobs: int
) -> tuple[User, Team | None]:
    """Who submits, for which team; refused (429) when the sweep's jobs would pass the
    user's queued-jobs limit, before any is stored (each one's submit checks it again)."""
    async with ctx.store.read() as q:
        user, found = await resolve_submitter(q, user_id, team)
        policy, _own = await q.dispatch_policy()
        if policy.limits.user_max_queued is None and user.max_queued is None:
            return user, found
        hit = queued_limit_hit(user_state(user), await q.waiting_count(user.id) + jobs - 1, policy)
    if hit is None:
        return user, found
    raise TooManyRequests(
        f"the sweep's {jobs} jobs would pass it: {hit}; run fewer points (sweep_samples), "
        "or wait for some of your jobs to start",
        retry_after=submit.QUEUED_RETRY_S,
    )


@dataclass(frozen=True, slots=True)
class Made:
    sweep: Sweep
    idempotent_hit: bool = False  # the sweep an earlier submit of its idempotency key made


async def _hit(ctx: Context, job_id: str, key: str) -> Made:
    """The sweep whose first job the user's idempotency key names."""
    async with ctx.store.read() as q:
        job = await q.get_job(job_id)
        sweep = await q.get_sweep(job.sweep_id) if job and job.sweep_id else None
    if sweep is None:
        raise Conflict(
            f"idempotency_key {key!r} named job {job_id}, not a sweep, in the last 24 hours: "
            "send the sweep with another key"
        )
    return Made(sweep, idempotent_hit=True)


async def create(
    ctx: Context,
    sub: submit.Submission,
    spec: SweepSpec,
    actor: str,
    client: str | None,
    *,
    user_id: str,
) -> Made:
    """Make the sweep and queue its jobs, one a point; refused whole (nothing stored) when
    any point's config is refused. Its idempotency key names its first job: a second submit
    of the key within 24 hours answers the sweep that job is of (services/idempotency.py)."""
    key = sub.idempotency_key
    if key is not None and (earlier := await idempotency.earlier(ctx, user_id, key)):
        return await _hit(ctx, earlier.id, key)
    config = await _config(ctx, sub)
    max_parallel = rules.check_max_parallel(spec.max_parallel)
    planned = rules.plan(config, spec.sweep, spec.samples, _RANDOM)
    checked = [check_config(c) for c in planned.configs]
    for c in checked:  # a point's GPU count or nodes refused here, not after others queued
        gang_shape(job_gpu_count(sub.gpu_count, c), c)
    check_labels(sub.worker_labels)
    user, team = await _submitter(ctx, user_id, sub.team, len(checked))
    sweep = Sweep(
        id=new_id("s"),
        params=planned.grid.as_json(),
        samples=spec.samples,
        max_parallel=max_parallel,
        size=len(checked),
        user_id=user.id,
        team_id=team.id if team else None,
        submitted_by=actor,
        created_at=ctx.clock(),
    )
    async with transaction(ctx) as tx:
        await tx.q.insert_sweep(sweep)
    made: list[Job] = []
    try:
        for body in checked:
            first = key if not made else None  # the key names the first job
            one = replace(sub, config_name=None, config=body, idempotency_key=first)
            queued = await submit.enqueue(
                ctx, one, body, actor, client, user_id=user_id, sweep_id=sweep.id
            )
            made.append(queued.job)
    except idempotency.KeyTaken as taken:  # another submit of the key won: its sweep
        await _undo(ctx, sweep, made, actor, client)
        return await _hit(ctx, taken.job_id, key or "")
    except DomainError:
        await _undo(ctx, sweep, made, actor, client)
        raise
    async with transaction(ctx) as tx:  # once it is whole: a refused sweep is not audited
        tx.audit("sweep.submitted", actor, sweep.id, client, size=sweep.size, params=sweep.params)
    return Made(sweep)


async def _undo(
    ctx: Context, sweep: Sweep, made: Sequence[Job], actor: str, client: str | None
) -> None:
    """A point refused after others were queued (a limit reached meanwhile): the sweep goes,
    its queued jobs are cancelled (none when the first was refused: nothing stays stored)."""
    if not made:
        async with transaction(ctx) as tx:
            await tx.q.delete_sweep(sweep.id)
        return
    async with ctx.store.read() as q:
        owner = await q.get_user(made[0].user_id or "")
    if owner is not None:
        for job in made:
            await _quietly(queue.cancel(ctx, job.id, actor, client, by=owner))


async def _quietly(step: Any) -> Job | None:
    try:
        job: Job = await step
        return job
    except (Conflict, Forbidden, NotFound):  # ended meanwhile, or not the caller's
        return None


# ---- reading ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SweepView:
    sweep: Sweep
    # each point's latest job (a re-run's, once it has one), in grid order; a list's: none
    jobs: list[Job]
    status: str  # rules.status_of its jobs
    counts: dict[str, int]  # its latest jobs by status
    actions: list[str]  # what the caller may do to it now (cancel, rerun)


def latest(jobs: Sequence[Job]) -> list[Job]:
    """Each point's latest job: those no other job of the sweep re-runs."""
    rerun = {j.rerun_of for j in jobs if j.rerun_of}
    return [j for j in jobs if j.id not in rerun]


async def _actions(
    q: Queries, user: User, permissions: frozenset[str], sweep: Sweep, counts: dict[str, int]
) -> list[str]:
    """What `user` may do to the sweep now: cancel while a job of it has not ended, re-run
    once one failed or was cancelled."""
    if not allows(permissions, QUEUE_SUBMIT):
        return []
    actor = await ownership.actor_of(q, user)
    have = {JobStatus(status) for status in counts}
    out = []
    if have - TERMINAL_JOB:
        out.append(JobAction.CANCEL)
    if have & RERUN_OF:
        out.append(JobAction.RERUN)
    return [a.value for a in out if isinstance(decide(actor, sweep, a), Allowed)]


def _view(sweep: Sweep, jobs: Sequence[Job]) -> SweepView:
    grid = rules.Grid.of(sweep.params)
    current = sorted(latest(jobs), key=lambda j: grid.index_of(rules.params_of(j.config)))
    counts: dict[str, int] = {}
    for j in current:
        counts[j.status.value] = counts.get(j.status.value, 0) + 1
    return _counted(sweep, counts, current)


def _counted(sweep: Sweep, counts: dict[str, int], jobs: list[Job] | None = None) -> SweepView:
    status = rules.status_of([JobStatus(s) for s, n in counts.items() if n])
    return SweepView(sweep, jobs or [], status, counts, [])


async def exists(ctx: Context, sweep_id: str) -> bool:
    async with ctx.store.read() as q:
        return await q.get_sweep(sweep_id) is not None


async def view(ctx: Context, sweep_id: str, user: User, permissions: frozenset[str]) -> SweepView:
    async with ctx.store.read() as q:
        sweep = await q.get_sweep(sweep_id)
        if sweep is None:
            raise no_sweep(sweep_id)
        found = _view(sweep, await q.sweep_jobs([sweep_id]))
        return replace(found, actions=await _actions(q, user, permissions, sweep, found.counts))


async def listed(
    ctx: Context, user: User, permissions: frozenset[str], limit: int, offset: int, mine: bool
) -> tuple[list[SweepView], int]:
    async with ctx.store.read() as q:
        found, total = await q.list_sweeps(limit, offset, user.id if mine else None)
        counts = await q.sweep_counts([s.id for s in found])  # not every job of every sweep
        out = []
        for s in found:
            one = _counted(s, counts.get(s.id, {}))
            out.append(replace(one, actions=await _actions(q, user, permissions, s, one.counts)))
    return out, total


async def names(ctx: Context, sweeps: Sequence[Sweep]) -> dict[str, str]:
    """User and team ids to names."""
    users = {s.user_id for s in sweeps if s.user_id}
    teams = {s.team_id for s in sweeps if s.team_id}
    async with ctx.store.read() as q:
        return {**dict(await q.user_names(users)), **dict(await q.team_names(teams))}


@dataclass(frozen=True, slots=True)
class Curves:
    metric: str | None  # the metric drawn (None: the sweep's jobs reported none)
    metrics: list[str]  # every metric its jobs' progress history holds
    series: dict[str, list[tuple[int, float, int]]]  # job id -> [(step, value, attempt)]
    jobs: list[Job]


async def curves(ctx: Context, sweep_id: str, metric: str | None) -> Curves:
    """One metric's curve of each of its latest jobs (`metric` None: "loss" if reported, else
    the first by name)."""
    async with ctx.store.read() as q:
        sweep = await q.get_sweep(sweep_id)
        if sweep is None:
            raise no_sweep(sweep_id)
        jobs = _view(sweep, await q.sweep_jobs([sweep_id])).jobs
        ids = [j.id for j in jobs]
        metrics = await q.sweep_metrics(ids)
        chosen = metric or ("loss" if "loss" in metrics else (metrics[0] if metrics else None))
        series = await q.sweep_series(ids, chosen) if chosen else {}
    return Curves(chosen, metrics, series, jobs)


# ---- acting on it as one --------------------------------------------------------------------


async def _require(ctx: Context, sweep_id: str, by: User, action: JobAction) -> SweepView:
    async with ctx.store.read() as q:
        sweep = await q.get_sweep(sweep_id)
        if sweep is None:
            raise no_sweep(sweep_id)
        decision = decide(await ownership.actor_of(q, by), sweep, action)
        if isinstance(decision, Refused):
            owner = sweep.user_id or ""
            named = dict(await q.user_names([owner]))
            said = (
                f"you may not {SAID[action][1].replace('it', f'sweep {sweep_id}', 1)} "
                f"({named.get(owner, owner)}'s sweep): {decision.reason}"
            )
            raise Forbidden(said)
        return _view(sweep, await q.sweep_jobs([sweep_id]))


async def cancel(
    ctx: Context, sweep_id: str, actor: str, client: str | None, *, by: User
) -> list[reruns.Outcome]:
    """Cancel every job of the sweep not ended yet, the waiting ones first (so that none
    starts in a place a running one leaves)."""
    found = await _require(ctx, sweep_id, by, JobAction.CANCEL)
    left = [j for j in found.jobs if j.status not in TERMINAL_JOB]
    if not left:
        raise Conflict(f"sweep {sweep_id} has no job left to cancel: all of them ended")
    left.sort(key=lambda j: j.status not in (JobStatus.QUEUED, JobStatus.PENDING_APPROVAL))
    async with transaction(ctx) as tx:
        tx.audit("sweep.cancelled", actor, sweep_id, client, jobs=len(left))
    outcomes = []
    for j in left:
        done = await _quietly(queue.cancel(ctx, j.id, actor, client, by=by))
        why = None if done else "it ended meanwhile, or another user's re-run is not yours"
        outcomes.append(reruns.Outcome(j.id, job=done, error=why))
    return outcomes


async def rerun(
    ctx: Context, sweep_id: str, actor: str, client: str | None, *, by: User
) -> list[reruns.Outcome]:
    """Re-run its failed and cancelled jobs (each point's latest), in the sweep."""
    found = await _require(ctx, sweep_id, by, JobAction.RERUN)
    again = [j for j in found.jobs if j.status in RERUN_OF]
    if not again:
        raise Conflict(
            f"sweep {sweep_id} has no failed or cancelled job to re-run; its jobs are "
            f"{', '.join(sorted(found.counts))}"
        )
    async with transaction(ctx) as tx:
        tx.audit("sweep.rerun", actor, sweep_id, client, jobs=len(again))
    outcomes = []
    for j in again:
        try:
            made = await reruns.rerun(ctx, j.id, actor, client, by=by)
            outcomes.append(reruns.Outcome(j.id, job=made))
        except DomainError as exc:
            outcomes.append(reruns.Outcome(j.id, error=exc.message))
    return outcomes
