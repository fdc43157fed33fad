"""Dispatch: pair queued jobs with idle workers, one attempt per offer.

Dispatch runs on every event that can make a match. After each pass no queued job matches
an idle worker, so a new job only needs the idle workers, and a newly idle worker only
needs the queue. The health loop runs a full pass as a safety net.
"""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable, Sequence
from typing import TypeVar

from gpufleet.domain.limits import limit_hit
from gpufleet.domain.matching import (
    Requirement,
    available,
    can_run_now,
    choose_worker,
    fits,
    targets_served,
)
from gpufleet.domain.policy import Policy, Snapshot
from gpufleet.domain.records import LOCAL_WORKER_ID, Attempt, Job, Worker
from gpufleet.domain.secrets import new_id
from gpufleet.domain.states import (
    JobStatus,
    Target,
    workers_to_avoid,
)
from gpufleet.server.context import Context, Tx, transaction
from gpufleet.server.hub import worker_topic
from gpufleet.server.services import fair_queue, lifecycle, offers
from gpufleet.server.services.lifecycle import ClaimLost, WorkerTaken
from gpufleet.server.services.standing import (
    candidate,
    has_limits,
    is_plain,
    limits_in,
    snapshot,
)
from gpufleet.store import Queries

_PAGE = 200
_FIRST_PAGE = 4
_HEAD = 20  # queued jobs a freed worker reads as they come before it asks the index
_RACE_RETRIES = 5
T = TypeVar("T")


async def policy_gate(tx: Tx, read: tuple[Policy, bool] | None = None) -> Snapshot | None:
    """The policy this dispatch applies: None when it changes nothing (no fair share, no
    limit), and dispatch goes its usual way at its usual cost (one read of the policy row;
    none when the caller read it in this transaction already: `read`, what
    `dispatch_policy` answered).

    With a limit set, the policy row is locked until commit (PostgreSQL), first of all the
    rows a dispatch locks: dispatches that check limits go one at a time across replicas,
    each counting what runs after the previous one committed, so that no two can both pass
    a limit only one may. Only claims raise what runs, and every claim comes here first.
    """
    policy, own = read if read is not None else await tx.q.dispatch_policy()
    if is_plain(policy, own):
        return None
    if has_limits(policy, own) and tx.q.locks_rows:
        policy, own = await tx.q.dispatch_policy(lock=True)
    return await snapshot(tx.q, tx.now, policy, shares=False)


def refused(ctx: Context, job: Job, snap: Snapshot | None, seen: _Seen | None = None) -> bool:
    """Whether a limit keeps the job from starting now (noted in `seen`, and on the context
    until a full pass finds none held)."""
    held = snap is not None and limit_hit(candidate(job, snap), snap) is not None
    if held:
        ctx.limit_holds.held()
        if seen is not None:
            seen.held = True
    return held


async def claim(tx: Tx, job: Job, worker: Worker, history: Sequence[Attempt] | None = None) -> Job:
    """Offer the job to the worker: a new attempt, the job offered, the worker busy
    (`lifecycle.claim`, by compare-and-set); the job as it leaves it.

    `history`: the job's attempts, when the caller has read them already (else read here
    for a job offered before, to find what it resumes from).
    """
    attempt_id = new_id("a")
    offered = await lifecycle.claim(tx, job, worker, attempt_id)
    resume = await offers.resume_for(tx.q, job, history)
    resumed_from = resume.id if resume else None
    await lifecycle.open_attempt(tx, job, worker.id, attempt_id, offered.attempts, resumed_from)
    # The worker's stream sends the offer as it is handed over, without reading it back.
    event = offers.offer(tx.key, job, attempt_id, resume, tx.settings.worker_url())
    tx.hand_over(worker_topic(worker.id), event)
    return offered


async def claim_new(tx: Tx, job: Job, worker: Worker) -> Job | None:
    """`claim` for a job this transaction inserted: the job as offered; None when the worker
    was lost (another dispatch took it first), and then nothing was written and the
    transaction goes on."""
    try:
        return await claim(tx, job, worker)
    except WorkerTaken:
        return None


async def _retrying(attempt: Callable[[], Awaitable[T]], lost: T) -> T:
    """Run a dispatch step again when a concurrent dispatch won a race; `lost` once the
    races are all lost."""
    for _ in range(_RACE_RETRIES):
        try:
            return await attempt()
        except ClaimLost:
            continue
    return lost


async def dispatch_job(ctx: Context, job_id: str) -> bool:
    """Offer one queued job to the best idle worker, if any fits."""
    return await _retrying(lambda: _dispatch_job(ctx, job_id), False)


async def first_fit(
    q: Queries, req: Requirement, avoid: frozenset[str] = frozenset()
) -> Worker | None:
    """The first idle worker, in offer order, that can run the job now; one not in `avoid`
    if any fits (the workers the job failed to start on: the poison-job rule counts
    different workers, and a worker that cannot start it may be the one at fault).

    The order is `choose_worker`'s (remote first, fewest GPUs, then id), so the first idle
    fit is the one it would choose; pages are read only until one fits.
    """
    local = None if req.target is Target.AUTO else req.target is Target.LOCAL
    after: tuple[bool, int, str] | None = None
    limit = _FIRST_PAGE  # usually the first worker fits: read few rows, then more each page
    avoided: Worker | None = None
    while True:
        page = await q.idle_matching_workers(
            min_gpus=req.gpu_count, local=local, after=after, limit=limit
        )
        for worker in page:
            if not can_run_now(req, worker.capacity()):
                continue
            if worker.id not in avoid:
                return worker
            avoided = avoided or worker
        if len(page) < limit:
            return avoided
        last = page[-1]
        after = (last.is_local, last.gpu_count, last.id)
        limit = min(limit * 4, _PAGE)


async def _dispatch_job(ctx: Context, job_id: str) -> bool:
    async with transaction(ctx) as tx:
        snap = await policy_gate(tx)
        # No row lock here: `claim` takes the worker, then the job (the one lock order, see
        # lifecycle), each by compare-and-set, so a job taken meanwhile loses the claim.
        job = await tx.q.get_job(job_id)
        if job is None or job.status is not JobStatus.QUEUED or refused(ctx, job, snap):
            return False
        history = await tx.q.attempts_for_job(job.id) if job.attempts else []
        worker = await first_fit(tx.q, job.requirement(), workers_to_avoid(history))
        return worker is not None and bool(await claim(tx, job, worker, history))


async def dispatch_worker(ctx: Context, worker_id: str) -> bool:
    """Give a newly idle worker the first queued job it can run, by priority then age.

    A remote worker takes `auto` jobs too; the local runner takes `local` and `auto` jobs,
    but an `auto` job goes local only when no idle remote worker fits it.
    """
    # Usually nothing waits: one indexed read outside a transaction says so. It reads after
    # the caller's commit made the worker idle, as the pass below would: a job queued after
    # this read finds the worker idle itself.
    async with ctx.store.read() as q:
        if not await q.has_queued_jobs():
            return False
    seen = _Seen()
    offered = await _offer_to(ctx, worker_id, seen)
    if seen.limited and (ctx.limit_holds.since_full_pass or seen.held):
        # A job that ended may have freed room under a limit for a job held by it, which
        # this worker cannot run and another idle one can: every idle worker looks. Only
        # when some job was held by a limit since the last such pass (ctx.limit_holds, this
        # process; the health loop's full pass is every replica's safety net).
        offered = bool(await dispatch_all(ctx)) or offered
    return bool(offered)


class _Seen:
    """What a dispatch step saw of the policy, for its caller."""

    limited = False  # a limit on what runs is set
    held = False  # a job was passed over because a limit held it


async def _offer_to(ctx: Context, worker_id: str, seen: _Seen | None = None) -> bool | None:
    """True: offered a job; False: the queue holds none it can run; None: not free (or
    every claim lost a race: the worker's queue is not known to be empty)."""
    return await _retrying(lambda: _dispatch_worker(ctx, worker_id, seen or _Seen()), None)


async def _dispatch_worker(ctx: Context, worker_id: str, seen: _Seen) -> bool | None:
    async with transaction(ctx) as tx:
        snap = await policy_gate(tx)
        seen.limited = snap is not None and limits_in(snap)
        worker = await tx.q.get_worker(worker_id, lock=True)
        if worker is None:
            return None
        cap = worker.capacity()
        if not available(cap):
            return None
        targets = targets_served(cap)
        remote_idle = (
            [w.capacity() for w in await tx.q.idle_workers() if not w.is_local]
            if worker.is_local
            else []
        )
        in_order = (
            fair_queue.ranked_for(tx.q, worker, targets, snap)
            if snap is not None and snap.policy.fair_share
            else fair_queue.queued_for(tx.q, worker, targets)
        )
        async with contextlib.aclosing(in_order) as queued:
            async for job in queued:
                req = job.requirement()
                if not fits(req, cap):
                    continue
                if job.target is Target.AUTO and remote_idle and choose_worker(req, remote_idle):
                    continue  # a remote worker will take it
                if refused(ctx, job, snap, seen):
                    continue
                return bool(await claim(tx, job, worker))
        return False


async def dispatch_all(ctx: Context) -> int:
    """Full pass: every idle worker looks at the queue. Returns the number of offers.

    Idle workers of one shape (local or not, GPU count, labels) can run the same jobs: once
    one of them finds nothing it can run, the others of its shape are not asked. A fleet of
    a thousand alike idle workers beside a deep queue of jobs none of them can run costs
    one look at the queue, not a thousand.
    """
    async with ctx.store.read() as q:
        if not await q.has_queued_jobs():
            return 0  # the sweep's safety net costs one indexed read when nothing waits
        idle = await q.idle_workers()
    offers = 0
    exhausted: set[tuple[object, ...]] = set()
    ctx.limit_holds.full_pass()  # until this pass (or any other dispatch) passes over a held job
    for worker in sorted(idle, key=lambda w: w.id == LOCAL_WORKER_ID):
        shape = (
            worker.is_local,
            worker.gpu_count,
            tuple(sorted(worker.labels.items())),
            tuple(sorted(worker.features)),
        )
        if shape in exhausted:
            continue
        offered = await _offer_to(ctx, worker.id)
        if offered:
            offers += 1
        elif offered is False:
            exhausted.add(shape)
    return offers
