"""Submitting a job (docs/scheduling.md): its config checked, its secrets and limits, its
approval rule, then queued (`services/lifecycle.queue_new`) and offered if a worker fits."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from gpufleet.domain.advice import say_wait_everywhere
from gpufleet.domain.approvals import approval_needed
from gpufleet.domain.jobspec import (
    check_config,
    gang_shape,
    job_gpu_count,
)
from gpufleet.domain.limits import queued_limit_hit
from gpufleet.domain.matching import (
    Requirement,
    needs_of,
    never_runs,
)
from gpufleet.domain.naming import check_labels
from gpufleet.domain.policy import Policy, check_priority
from gpufleet.domain.records import (
    LOCAL_WORKER_ID,
    Job,
    Team,
    User,
)
from gpufleet.domain.secrets import new_id
from gpufleet.domain.states import (
    RETRY_DEFAULT,
    JobStatus,
    RetryOn,
    Target,
)
from gpufleet.errors import InvalidInput, TooManyRequests
from gpufleet.server.context import Context, Tx, transaction
from gpufleet.server.hub import JOBS_TOPIC
from gpufleet.server.local import parse_local_gpus
from gpufleet.server.services import (
    configs,
    dependencies,
    dispatch,
    dispatch_policy,
    idempotency,
    job_secrets,
    workdirs,
)
from gpufleet.server.services.dispatch_policy import SweepRoom
from gpufleet.server.services.lifecycle import queue_new
from gpufleet.server.services.people import resolve_submitter
from gpufleet.server.services.queue import get_job
from gpufleet.server.services.standing import user_state
from gpufleet.store.queries import NewJob

QUEUED_RETRY_S = 60.0  # a submit past the queued-jobs limit: when to try again


@dataclass(frozen=True, slots=True)
class Submission:
    config_name: str | None
    config: dict[str, Any] | None
    target: Target
    worker_labels: dict[str, str]
    gpu_count: int | None
    priority: int | None  # None: the submitting user's level's default
    max_retries: int
    retry_on: frozenset[RetryOn] = RETRY_DEFAULT
    team: str | None = None  # id or name; None: the user's default team
    preemptible: bool | None = None  # None: as its team says
    after: dependencies.Asked | None = None  # what it runs after (docs/jobs.md, Dependencies)
    idempotency_key: str | None = None  # services/idempotency.py


async def _check_target(ctx: Context, req: Requirement) -> None:
    """Refuse what no worker could ever come to run: a job for the local runner when this
    server runs none, or when it has fewer GPUs than the job asks (only a restart with other
    --local-gpus would change either). Any other job waits for its worker, which may register
    at any time; `explain_wait` says what it waits for."""
    if req.target is not Target.LOCAL:
        return
    local_on, _gpus = parse_local_gpus(ctx.settings.local_gpus)
    if not local_on:
        raise InvalidInput(
            "target 'local' needs the orchestrator's local runner, which is off; start the "
            "server with --local-gpus auto, or submit with target 'worker'"
        )
    async with ctx.store.read() as q:
        local = await q.get_worker(LOCAL_WORKER_ID)
    if wait := never_runs(req, local.capacity() if local else None):
        said = say_wait_everywhere(wait)
        raise InvalidInput(
            f"refused, as it would wait forever: {said['api']}",
            ui=f"refused, as it would wait forever: {said['ui']}",
            cli=f"refused, as it would wait forever: {said['cli']}",
        )


@dataclass(frozen=True, slots=True)
class Enqueued:
    """A job as its submit left it, and what a person calls the user, team and worker it
    names (`names_of`'s, known without reading them back; None: read them, a dispatch
    outside the submit's transaction chose the worker). The submitting key's name is the
    caller's to add."""

    job: Job
    names: dict[str, str] | None
    idempotent_hit: bool = False  # its key named this job, made by an earlier submit


async def submit(
    ctx: Context, sub: Submission, actor: str, client: str | None, *, user_id: str
) -> Enqueued:
    """Submit; with an idempotency key, the job the key names when it names one (a hit)."""
    key = sub.idempotency_key
    if key is not None and (earlier := await idempotency.earlier(ctx, user_id, key)):
        return Enqueued(earlier, None, idempotent_hit=True)
    try:
        return await _submit(ctx, sub, actor, client, user_id=user_id)
    except idempotency.KeyTaken as taken:  # another submit of the key won the race
        return Enqueued(await get_job(ctx, taken.job_id), None, idempotent_hit=True)


async def _submit(
    ctx: Context, sub: Submission, actor: str, client: str | None, *, user_id: str
) -> Enqueued:
    if (sub.config is None) == (sub.config_name is None):
        raise InvalidInput("send exactly one of 'config_name' (a stored config) or 'config'")
    if sub.config_name is None:
        config = check_config(sub.config)
        return await enqueue(ctx, sub, config, actor, client, user_id=user_id)
    view = await configs.get_config(ctx, sub.config_name)
    stored = view.config
    ran = RanVersion(stored.version, stored.digest, stored.written_by)
    queued = await enqueue(ctx, sub, stored.body, actor, client, user_id=user_id, ran=ran)
    if queued.names is None:
        return queued
    return replace(queued, names=view.names | queued.names)  # the writer's name among them


@dataclass(frozen=True, slots=True)
class RanVersion:
    """The version of a stored config a job runs: its number, digest and writer (a user)."""

    version: int | None
    digest: str | None
    written_by: str | None

    @classmethod
    def of(cls, job: Job) -> RanVersion | None:
        """The version `job` ran (a re-run runs it again); None: an inline config."""
        if job.config_version is None:
            return None
        return cls(job.config_version, job.config_digest, job.config_written_by)


@dataclass(frozen=True, slots=True)
class _Admission:
    """What the policy makes of a submit: for whom, at which priority, held or not."""

    user: User
    team: Team | None
    priority: int
    status: JobStatus
    held: str | None  # the approval rule that holds it, in words
    policy: tuple[Policy, bool]  # what `dispatch_policy` read, for the dispatch that follows

    @property
    def names(self) -> dict[str, str]:
        """What a person calls the user and team (the answer's names, unread)."""
        return {self.user.id: self.user.name} | (
            {self.team.id: self.team.name} if self.team else {}
        )


async def _admit(tx: Tx, sub: Submission, gpu_count: int, user_id: str) -> _Admission:
    """Who submits, for which team, at which priority; refused past the user's queued-jobs
    limit (429); held for approval when a rule says so."""
    user, team = await resolve_submitter(tx.q, user_id, sub.team)
    level = user.level
    priority = check_priority(level, sub.priority)
    read = await tx.q.dispatch_policy()
    policy = read[0]
    if policy.limits.user_max_queued is not None or user.max_queued is not None:
        hit = queued_limit_hit(user_state(user), await tx.q.waiting_count(user.id), policy)
        if hit is not None:
            raise TooManyRequests(
                f"{hit}; wait for some to start or cancel some (gpufleet queue me lists yours)",
                retry_after=QUEUED_RETRY_S,
            )
    held = approval_needed(policy, level, gpu_count)
    status = JobStatus.PENDING_APPROVAL if held else JobStatus.QUEUED
    return _Admission(user, team, priority, status, held, read)


async def enqueue(
    ctx: Context,
    sub: Submission,
    config: dict[str, Any],
    actor: str,
    client: str | None,
    *,
    user_id: str,
    rerun_of: str | None = None,
    ran: RanVersion | None = None,
    sweep_id: str | None = None,
) -> Enqueued:
    """Queue a job of this config (checked already) for the submitting user, and offer it
    if a worker fits now (unless an approval rule holds it); `rerun_of`: the job it repeats;
    `ran`: the stored config's version it is; `sweep_id`: the sweep it is a point of."""
    gpu_count = job_gpu_count(sub.gpu_count, config)
    shape = gang_shape(gpu_count, config)
    labels = check_labels(sub.worker_labels)
    after = sub.after or dependencies.Asked()
    needs = needs_of(config, inputs=bool(after.inputs))
    req = Requirement(target=sub.target, gpu_count=gpu_count, labels=labels, needs=needs)
    await _check_target(ctx, req)
    workdir = await workdirs.check_named(ctx, config, user_id)
    job_id = new_id("j")
    async with transaction(ctx) as tx:
        if sub.idempotency_key is not None:  # first: a race's loser waits here, holding nothing
            await idempotency.claim(tx, user_id, sub.idempotency_key, job_id)
        admitted = await _admit(tx, sub, shape.total_gpus, user_id)
        if workdir is not None and admitted.team is not None:
            await workdirs.share(tx, workdir, admitted.user.id, admitted.team.id)
        await job_secrets.check_resolvable(ctx, tx.q, config, admitted.user, admitted.team)
        queued = admitted.status is JobStatus.QUEUED
        # The policy first: with a limit set, its row is the first a dispatch locks.
        snap = await dispatch_policy.policy_gate(tx, admitted.policy) if queued else None
        # Then the dependencies' rows (a dispatch locks a worker, then a job).
        waits_on = await dependencies.admit(tx, after.on, may_read=after.may_read)
        # Usually an idle worker fits: the job is offered in the transaction that queues it
        # (one commit a submit). When none does, the job waits, even for a worker yet to come.
        # A gang (more than one node) is offered by the gang round alone (dispatch_job).
        one_node = queued and shape.nodes == 1 and waits_on is None
        worker = await dispatch.first_fit(tx.q, req) if one_node else None
        job = await queue_new(
            tx,
            NewJob(
                id=job_id,
                config=config,
                target=sub.target,
                worker_labels=labels,
                gpu_count=gpu_count,
                priority=admitted.priority,
                max_retries=sub.max_retries,
                retry_on=sub.retry_on,
                submitted_by=actor,
                created_at=tx.now,
                config_name=sub.config_name,
                rerun_of=rerun_of,
                user_id=admitted.user.id,
                team_id=admitted.team.id if admitted.team else None,
                preemptible=sub.preemptible,
                status=admitted.status,
                config_version=ran.version if ran else None,
                config_digest=ran.digest if ran else None,
                config_written_by=ran.written_by if ran else None,
                workdir=workdir,
                nodes=shape.nodes,
                waits_on=waits_on,
                inputs={k: list(v) for k, v in after.inputs.items()} or None,
                sweep_id=sweep_id,
            ),
        )
        await tx.q.add_dependencies(job_id, after.on)
        extra: dict[str, Any] = {"rerun_of": rerun_of} if rerun_of else {}
        if ran:
            extra |= {"config_version": ran.version, "config_digest": ran.digest}
        if admitted.held:
            extra["held"] = admitted.held
        if shape.nodes > 1:
            extra |= {"nodes": shape.nodes, "total_gpus": shape.total_gpus}
        if after.on:
            extra["depends_on"] = [{"job": d.job_id, "on": d.on.value} for d in after.on]
        if sub.idempotency_key is not None:
            extra["idempotency_key"] = sub.idempotency_key
        if sweep_id:
            extra["sweep_id"] = sweep_id
        tx.audit(
            "job.submitted",
            actor,
            job_id,
            client,
            config_name=sub.config_name,
            target=sub.target.value,
            gpu_count=gpu_count,
            labels=labels,
            priority=admitted.priority,
            user_id=admitted.user.id,
            team_id=admitted.team.id if admitted.team else None,
            **extra,
        )
        tx.wake(JOBS_TOPIC)
        look = dispatch.LastLook(tx, job) if one_node and worker is None else None
        if dispatch_policy.refused(ctx, job, snap) or await SweepRoom(ctx, tx).full(job):
            worker = None  # a limit, or its sweep's max_parallel, keeps it waiting
        offered = await dispatch.claim_new(tx, job, worker) if worker is not None else None
    if offered is not None and worker is not None:
        return Enqueued(offered, admitted.names | {worker.id: worker.name})
    if queued and waits_on is None and (look is None or look.fits):
        # Another dispatch took the worker first, or one fits now: the usual pass, which
        # looks again (and retries lost races) now that the job is committed.
        await dispatch.dispatch_job(ctx, job_id)
        job = await get_job(ctx, job_id)
        return Enqueued(job, admitted.names if job.worker_id is None else None)
    return Enqueued(job, admitted.names)
