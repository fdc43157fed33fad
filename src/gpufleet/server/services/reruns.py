"""Re-running jobs, and cancelling or re-running many at once (the Queue's bulk actions)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from gpufleet.domain import job_secrets
from gpufleet.domain.jobspec import check_config, rerun_gpu_count
from gpufleet.domain.ownership import JobAction
from gpufleet.domain.records import Job, User
from gpufleet.domain.states import TERMINAL_JOB, Target
from gpufleet.errors import Conflict, DomainError, Forbidden, InvalidInput
from gpufleet.server.context import Context
from gpufleet.server.services import ownership, queue, submit
from gpufleet.server.services.lifecycle import no_job
from gpufleet.server.services.submit import Submission

_T = TypeVar("_T")
MAX_BULK = 100  # jobs one bulk action takes: the Queue shows 100 at a time


@dataclass(frozen=True, slots=True)
class Outcome:
    """What one job of a bulk action came to: the job (re-run: the new one), or why not."""

    job_id: str
    job: Job | None = None
    error: str | None = None


@dataclass(frozen=True, slots=True)
class Edits:
    """What an edit-and-re-run changes (the Train page's editor); None: as the old job had."""

    config: dict[str, Any] | None = None
    target: Target | None = None
    worker_labels: dict[str, str] | None = None
    gpu_count: int | None = None
    priority: int | None = None
    max_retries: int | None = None


NO_EDITS = Edits()


def edited(value: _T | None, was: _T) -> _T:
    return was if value is None else value


async def rerun(
    ctx: Context,
    job_id: str,
    actor: str,
    client: str | None,
    *,
    by: User,
    edits: Edits = NO_EDITS,
) -> Job:
    """A new job of `by`'s with the old one's config and requirements, changed by `edits`,
    linked to it (`rerun_of`), if `by` may re-run it (`domain.ownership`). The config is the
    one the old job ran, even if its stored config changed since; an edited one is inline.
    It is for the old job's team when `by` is in it, else for `by`'s own (an admin
    re-running another team's job)."""
    async with ctx.store.read() as q:
        old = await q.get_job(job_id)
        if old is None:
            raise no_job(job_id)
        await ownership.require(q, by, old, JobAction.RERUN)
        teams = await q.team_ids_of(by.id)
    if old.status not in TERMINAL_JOB:
        raise Conflict(
            f"job {job_id} is still {old.status.value}; cancel it first, or re-run it once "
            "it has ended"
        )
    if job_secrets.shown(old.config, old.user_id, by.id) != old.config:
        raise Forbidden(
            f"job {job_id}'s env holds credentials (a *_TOKEN, *_KEY …) that only its "
            "submitter may see; ask them to re-run it, or have them move those values into "
            'secrets ({"secret": "NAME"})'
        )
    # Checked as a submit's config is; the same as the old one: still the stored version.
    config = old.config if edits.config is None else check_config(edits.config)
    same = config == old.config

    sub = Submission(
        config_name=old.config_name if same else None,
        config=config,
        target=edited(edits.target, old.target),
        worker_labels=edited(edits.worker_labels, old.worker_labels),
        gpu_count=rerun_gpu_count(edits.gpu_count, old.gpu_count, config),
        priority=edited(edits.priority, old.priority),
        max_retries=edited(edits.max_retries, old.max_retries),
        retry_on=old.retry_on,
        team=old.team_id if old.team_id in teams else None,
        preemptible=old.preemptible,
    )
    # The same path as a submit: the re-runner's limits, level and approval rules apply.
    queued = await submit.enqueue(
        ctx,
        sub,
        config,
        actor,
        client,
        user_id=by.id,
        rerun_of=old.id,
        ran=submit.RanVersion.of(old) if same else None,
        sweep_id=old.sweep_id,  # a sweep's job re-run stays in its sweep
    )
    return queued.job


def check_ids(job_ids: Sequence[str]) -> list[str]:
    """The ids once each, in the order given; refuses none and too many."""
    unique = list(dict.fromkeys(job_ids))
    if not unique:
        raise InvalidInput("select at least one job: 'job_ids' is empty")
    if len(unique) > MAX_BULK:
        raise InvalidInput(f"{len(unique)} jobs selected; act on at most {MAX_BULK} at a time")
    return unique


async def _each(job_ids: Sequence[str], act: Callable[[str], Awaitable[Job]]) -> list[Outcome]:
    """Each job on its own: one that cannot be done is reported, and the rest go on."""
    outcomes = []
    for job_id in check_ids(job_ids):
        try:
            outcomes.append(Outcome(job_id, job=await act(job_id)))
        except DomainError as exc:
            outcomes.append(Outcome(job_id, error=exc.message))
    return outcomes


async def rerun_many(
    ctx: Context, job_ids: Sequence[str], actor: str, client: str | None, *, by: User
) -> list[Outcome]:
    return await _each(job_ids, lambda job_id: rerun(ctx, job_id, actor, client, by=by))


async def cancel_many(
    ctx: Context, job_ids: Sequence[str], actor: str, client: str | None, *, by: User
) -> list[Outcome]:
    """Each job `by` may cancel is; each other is reported with who may (a 403's words)."""
    return await _each(job_ids, lambda job_id: queue.cancel(ctx, job_id, actor, client, by=by))
