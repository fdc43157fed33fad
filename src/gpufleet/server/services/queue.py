"""The queue: submissions, cancellation, and what a client can read back (stored configs:
services/configs.py)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from gpufleet import protocol
from gpufleet.domain.advice import say_wait_everywhere
from gpufleet.domain.audit_events import KEY_ACTOR, key_actor
from gpufleet.domain.bounds import MAX_LOG_PAGE_BYTES
from gpufleet.domain.jobspec import (
    check_config,
    job_gpu_count,
)
from gpufleet.domain.matching import (
    Requirement,
    Wait,
    WaitCode,
    fits,
    needs_of,
    never_runs,
    reasons_not_running,
    why_waiting,
)
from gpufleet.domain.ownership import JobAction
from gpufleet.domain.policy import Policy, approval_needed, check_priority, queued_limit_hit
from gpufleet.domain.records import (
    LOCAL_WORKER_ID,
    Attempt,
    Checkpoint,
    Job,
    JobFilter,
    LogLine,
    Team,
    User,
    Worker,
)
from gpufleet.domain.secrets import new_id
from gpufleet.domain.states import (
    ACTIVE_ATTEMPT,
    RETRY_DEFAULT,
    TERMINAL_JOB,
    AttemptStatus,
    JobStatus,
    RetryOn,
    Target,
    parse_job_status,
)
from gpufleet.errors import Conflict, InvalidInput, TooManyRequests
from gpufleet.server.context import Context, Tx, transaction
from gpufleet.server.hub import JOBS_TOPIC
from gpufleet.server.local import parse_local_gpus
from gpufleet.server.services import configs, dispatch, job_secrets, ownership
from gpufleet.server.services.fleet import check_labels
from gpufleet.server.services.lifecycle import end_attempt, move_job, no_job, queue_new
from gpufleet.server.services.people import resolve_submitter
from gpufleet.server.services.policy import policy_wait
from gpufleet.server.services.standing import user_state
from gpufleet.store.queries import NewJob, Queries

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


@dataclass(frozen=True, slots=True)
class JobView:
    job: Job
    attempts: list[Attempt]
    waiting: dict[str, Any] | None
    reruns: list[str] = field(default_factory=list)  # jobs that re-run this one
    names: dict[str, str] = field(default_factory=dict)  # see `names_of`
    resumed: dict[str, Checkpoint] = field(default_factory=dict)  # by id, attempts resumed from


# ---- submit -----------------------------------------------------------------------------


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


async def submit(
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
) -> Enqueued:
    """Queue a job of this config (checked already) for the submitting user, and offer it
    if a worker fits now (unless an approval rule holds it); `rerun_of`: the job it repeats;
    `ran`: the stored config's version it is."""
    gpu_count = job_gpu_count(sub.gpu_count, config)
    labels = check_labels(sub.worker_labels)
    req = Requirement(target=sub.target, gpu_count=gpu_count, labels=labels, needs=needs_of(config))
    await _check_target(ctx, req)
    job_id = new_id("j")
    async with transaction(ctx) as tx:
        admitted = await _admit(tx, sub, gpu_count, user_id)
        await job_secrets.check_resolvable(ctx, tx.q, config, admitted.user, admitted.team)
        queued = admitted.status is JobStatus.QUEUED
        # The policy first: with a limit set, its row is the first a dispatch locks.
        snap = await dispatch.policy_gate(tx, admitted.policy) if queued else None
        # Usually an idle worker fits: the job is offered in the transaction that queues it
        # (one commit a submit). When none does, the job waits, even for a worker yet to come.
        worker = await dispatch.first_fit(tx.q, req) if queued else None
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
            ),
        )
        extra: dict[str, Any] = {"rerun_of": rerun_of} if rerun_of else {}
        if ran:
            extra |= {"config_version": ran.version, "config_digest": ran.digest}
        if admitted.held:
            extra["held"] = admitted.held
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
        if dispatch.refused(ctx, job, snap):
            worker = None  # a limit keeps it waiting
        offered = await dispatch.claim_new(tx, job, worker) if worker is not None else None
    if offered is not None and worker is not None:
        return Enqueued(offered, admitted.names | {worker.id: worker.name})
    if queued:
        # No idle fit, or another dispatch took that worker first: the usual pass, which
        # looks again (and retries lost races) now that the job is committed.
        await dispatch.dispatch_job(ctx, job_id)
        job = await get_job(ctx, job_id)
        return Enqueued(job, admitted.names if job.worker_id is None else None)
    return Enqueued(job, admitted.names)


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
        waiting = None
        if job.status is JobStatus.QUEUED:
            waiting = explain_wait(job, await q.list_workers())
        policy_held = await policy_wait(q, job, ctx.clock())
        if policy_held is not None and (waiting is None or waiting["code"] in _FLEET_COULD):
            # Workers could run it: the policy is what it waits for.
            shown = waiting["workers"] if waiting else []
            waiting = {**waiting_fields(policy_held), "workers": shown}
        reruns = await q.reruns_of(job_id)
        names = await names_of(q, [job], attempts)
        wanted = {a.resumed_from for a in attempts if a.resumed_from}
        held = await q.checkpoints_for_job(job_id) if wanted else []
        resumed = {c.id: c for c in held if c.id in wanted}
    return JobView(job, attempts, waiting, reruns, names, resumed)


async def names_of(
    q: Queries, jobs: Sequence[Job], attempts: Sequence[Attempt] = ()
) -> dict[str, str]:
    """What a person calls the workers, keys, users and teams these jobs name: worker id →
    worker name, actor (`key:k_…`) → the key's name, user and team id → name. Ids of
    deleted ones are left out."""
    worker_ids = {j.worker_id for j in jobs if j.worker_id} | {a.worker_id for a in attempts}
    actors = {a for j in jobs for a in (j.submitted_by, j.approved_by) if a}
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


# The fleet's waits under which the policy's reason is the one to give.
_FLEET_COULD = frozenset({WaitCode.ABOUT_TO_BE_OFFERED.value, WaitCode.ALL_UNAVAILABLE.value})
UNMATCHED_SHOWN = 20  # queued jobs, from the head of the queue, the workers list looks at
ANY_GPU_COUNT = 2**31 - 1  # the most a job's gpu_count column holds (32 bits)


async def unmatched_jobs(ctx: Context, workers: list[Worker]) -> list[tuple[Job, Wait]]:
    """Queued jobs, from the head of the queue, that no registered worker can run, each
    with its `waiting` summary: what the fleet lacks, shown beside the workers list in the
    same words as on each job. `workers`: the whole fleet."""
    async with ctx.store.read() as q:
        head = await q.queued_jobs(
            max_gpus=ANY_GPU_COUNT, targets=list(Target), after=None, limit=UNMATCHED_SHOWN
        )
    caps = [w.capacity() for w in workers]
    registered = [c for c in caps if c.gpu_count is not None]
    return [
        (job, why_waiting(job.requirement(), caps))
        for job in head
        if not any(fits(job.requirement(), c) for c in registered)
    ]


def explain_wait(job: Job, workers: list[Worker]) -> dict[str, Any]:
    """Why a queued job waits: a summary, then each worker's reasons (what the CLI's `jobs
    show` and the UI's job page print)."""
    req = job.requirement()
    rows = []
    for w in workers:
        reasons = reasons_not_running(req, w.capacity())
        rows.append(
            {
                "worker_id": w.id,
                "name": w.name,
                "status": w.status.value,
                "reasons": [str(r) for r in reasons]
                or ["matches: the job is about to be offered to it"],
                "reason_codes": [r.code.value for r in reasons],
            }
        )
    return {**waiting_fields(why_waiting(req, [w.capacity() for w in workers])), "workers": rows}


def waiting_fields(wait: Wait) -> dict[str, Any]:
    """A wait as the API answers it: `summary` in the API's words, `summaries` for the UI and
    the CLI in theirs, and the code and parameters they come from."""
    summaries = say_wait_everywhere(wait)
    return {
        "summary": summaries["api"],
        "summaries": summaries,
        "code": wait.code.value,
        "params": dict(wait.params),
    }


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
    ctx: Context, job_id: str, after: int, limit: int
) -> tuple[list[LogLine], bool]:
    """Lines after `after` (at most `limit`, and 4 MiB of text), and whether more follow."""
    async with ctx.store.read() as q:
        if await q.get_job(job_id) is None:
            raise no_job(job_id)
        return await q.read_logs(job_id, after, limit, max_bytes=MAX_LOG_PAGE_BYTES)


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
                error=f"cancelled by {actor}",
                by_user=True,
            )
            await tx.send_to_worker(
                attempt.worker_id, protocol.job_cancel(job.id, "cancelled by the user", attempt.id)
            )
        else:
            await move_job(tx, job, JobStatus.CANCELLED, actor, ended_at=tx.now)
        tx.audit("job.cancelled", actor, job.id, client)
    return await get_job(ctx, job_id)
