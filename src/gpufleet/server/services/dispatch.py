"""Dispatch: pair queued jobs with idle workers, one attempt per offer.

Dispatch runs on every event that can make a match. After each pass no queued job matches
an idle worker, so a new job only needs the idle workers, and a newly idle worker only
needs the queue. The health loop runs a full pass as a safety net.

A job queued while a worker is freed is dispatched by one pass, not two racing: the worker's
(`dispatch_worker`, after the commit that freed it). The submit looks for an idle worker in
its own transaction, and once more just before it commits under the dispatch turn (the
audit chain's lock, which the transaction freeing a worker holds too: `LastLook`,
`Tx.frees_a_worker`): whichever commits second sees the other, so a job that found no worker
then needs no pass of its own.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence

from gpufleet.domain.matching import (
    Requirement,
    available,
    can_run_now,
    choose_worker,
    fits,
    targets_served,
)
from gpufleet.domain.records import LOCAL_WORKER_ID, Attempt, Job, Worker
from gpufleet.domain.secrets import new_id
from gpufleet.domain.states import (
    JobStatus,
    Target,
    workers_to_avoid,
)
from gpufleet.server.context import Context, Tx, transaction
from gpufleet.server.hub import worker_topic
from gpufleet.server.services import fair_queue, gangs, job_inputs, lifecycle, offers
from gpufleet.server.services.dispatch_policy import (
    Seen,
    SweepRoom,
    policy_gate,
    refused,
    retrying,
)
from gpufleet.server.services.lifecycle import WorkerTaken
from gpufleet.server.services.standing import limits_in
from gpufleet.store import Queries

_PAGE = 200
_FIRST_PAGE = 4
_HEAD = 20  # queued jobs a freed worker reads as they come before it asks the index


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
    inputs = await job_inputs.files(tx.q, job, attempt_id)
    event = offers.offer(tx.key, job, attempt_id, resume, tx.settings.worker_url(), None, inputs)
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


class LastLook:
    """A one-node job this transaction queues with no idle worker fitting it: whether it
    needs a dispatch pass once committed (`fits`).

    A worker freed at the same time, on another replica, may miss the job (its pass read the
    queue before the job committed) while the job's look missed the worker (it read before
    the worker's release committed). Both hold the dispatch turn (an advisory lock) until
    they commit: the job looks once more under it, and only a worker found then asks for a
    pass (which claims it, or retries the race it lost); a worker freed later finds the job
    itself. On SQLite the transaction is the only writer: its first look was its last.
    """

    def __init__(self, tx: Tx, job: Job) -> None:
        self.fits = True  # until the look under the turn says otherwise
        self._req = job.requirement()
        tx.at_turn(self._look)

    async def _look(self, tx: Tx) -> None:
        one_writer = not tx.q.locks_rows  # SQLite
        self.fits = not one_writer and await first_fit(tx.q, self._req) is not None


async def dispatch_job(ctx: Context, job_id: str) -> bool:
    """Offer one queued job to the best idle worker, if any fits; a gang (a job of more
    than one node) to all its nodes at once, by a gang round."""
    offered: bool | None = await retrying(lambda: _dispatch_job(ctx, job_id), False)
    if offered is None:
        return bool((await _gang_round(ctx)).offered)
    return offered


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


async def _dispatch_job(ctx: Context, job_id: str) -> bool | None:
    """True: offered; False: not; None: a gang, for the gang round."""
    async with transaction(ctx) as tx:
        snap = await policy_gate(tx)
        # No row lock here: `claim` takes the worker, then the job (the one lock order, see
        # lifecycle), each by compare-and-set, so a job taken meanwhile loses the claim.
        job = await tx.q.get_job(job_id)
        if job is None or job.status is not JobStatus.QUEUED or job.waits_on is not None:
            return False
        if refused(ctx, job, snap):
            return False
        if await SweepRoom(ctx, tx).full(job):
            return False
        if job.nodes > 1:
            return None
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
        nodes = await q.queued_nodes()
    if nodes is None:
        return False
    if nodes > 1:  # a gang waits: it may claim or hold this worker first
        await _gang_round(ctx)
    seen = Seen()
    offered = await _offer_to(ctx, worker_id, seen)
    if seen.limited and (ctx.limit_holds.since_full_pass or seen.held):
        # A job that ended may have freed room under a limit for a job held by it, which
        # this worker cannot run and another idle one can: every idle worker looks. Only
        # when some job was held by a limit since the last such pass (ctx.limit_holds, this
        # process; the health loop's full pass is every replica's safety net).
        offered = bool(await dispatch_all(ctx)) or offered
    return bool(offered)


async def _offer_to(ctx: Context, worker_id: str, seen: Seen | None = None) -> bool | None:
    """True: offered a job; False: the queue holds none it can run; None: not free (or
    every claim lost a race: the worker's queue is not known to be empty)."""
    return await retrying(lambda: _dispatch_worker(ctx, worker_id, seen or Seen()), None)


async def _dispatch_worker(ctx: Context, worker_id: str, seen: Seen) -> bool | None:
    async with transaction(ctx) as tx:
        snap = await policy_gate(tx)
        seen.limited = snap is not None and limits_in(snap)
        worker = await tx.q.get_worker(worker_id, lock=True)
        if worker is None or worker.held_for is not None:  # held: its gang's (gangs.py)
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
        room = SweepRoom(ctx, tx, seen)
        async with contextlib.aclosing(in_order) as queued:
            async for job in queued:
                req = job.requirement()
                if job.nodes > 1 or not fits(req, cap):
                    continue  # a gang is offered by the gang round alone
                if job.target is Target.AUTO and remote_idle and choose_worker(req, remote_idle):
                    continue  # a remote worker will take it
                if refused(ctx, job, snap, seen) or await room.full(job):
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
        nodes = await q.queued_nodes()
        if nodes is None:
            return 0  # the sweep's safety net costs one indexed read when nothing waits
    offers = (await _gang_round(ctx)).offered if nodes > 1 else 0
    async with ctx.store.read() as q:
        idle = [w for w in await q.idle_workers() if w.held_for is None]
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


async def _gang_round(ctx: Context) -> gangs.Round:
    """A gang round, then the workers it released offered to other jobs before any later
    round may hold them again (domain/gang.py: a released gang takes turns)."""
    done = await gangs.gang_round(ctx)
    for worker_id in done.released:
        await _offer_to(ctx, worker_id)
    return done
