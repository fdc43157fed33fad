"""Workers: what admins do to them, and what workers say about themselves."""

from __future__ import annotations

import contextlib
import dataclasses
import re
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from gpufleet.domain.matching import Feature, fits
from gpufleet.domain.records import Attempt, GpuStat, WorkedAttempt, Worker
from gpufleet.domain.secrets import hash_secret, new_id, new_worker_token
from gpufleet.domain.states import (
    ACTIVE_ATTEMPT,
    AttemptStatus,
    WorkerStatus,
    WorkerType,
    can_delete_worker,
)
from gpufleet.errors import Conflict, Forbidden, InvalidInput, NotFound
from gpufleet.server.context import Context, Tx, transaction
from gpufleet.server.hub import worker_topic
from gpufleet.server.services import dispatch
from gpufleet.server.services.lifecycle import lose_current_attempt, save_worker

_LABEL_KEY = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-/]{0,62}$")


@dataclass(frozen=True, slots=True)
class Registration:
    name: str | None
    persistent: bool | None
    gpu_count: int
    gpu_name: str | None
    gpu_vram_gb: float | None
    accelerator_type: str | None
    labels: dict[str, str]
    current_job_id: str | None
    current_attempt_id: str | None
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class RegisterAnswer:
    worker: Worker
    resume_job: dict[str, str] | None
    abandon_job: bool


def check_labels(labels: dict[str, str]) -> dict[str, str]:
    for key, value in labels.items():
        if not _LABEL_KEY.fullmatch(key):
            raise InvalidInput(
                f"label key {key!r} is not valid; use letters, digits, '_', '-', '.', '/' "
                "(at most 63 characters, starting with a letter or digit)"
            )
        if len(value) > 256:
            raise InvalidInput(f"label {key!r} is longer than 256 characters; shorten it")
    return dict(labels)


def _no_worker(worker_id: str) -> NotFound:
    return NotFound(
        f"no worker {worker_id}; list workers with GET /api/admin/workers",
        ui=f"no worker {worker_id}; the Workers page lists the workers",
        cli=f"no worker {worker_id}; list workers with `gpufleet workers list`",
    )


async def _get(tx: Tx, worker_id: str) -> Worker:
    worker = await tx.q.get_worker(worker_id, lock=True)
    if worker is None:
        raise _no_worker(worker_id)
    return worker


# ---- admin operations -------------------------------------------------------------------


async def create_worker(
    ctx: Context,
    name: str,
    worker_type: WorkerType | None,
    labels: dict[str, str],
    actor: str,
    client: str | None,
    *,
    worker_id: str | None = None,
    is_local: bool = False,
) -> tuple[Worker, str]:
    labels = check_labels(labels)
    token = new_worker_token()
    wid = worker_id or new_id("w")
    async with transaction(ctx) as tx:
        if await tx.q.worker_name_taken(name):
            raise Conflict(f"a worker named {name!r} exists already; choose another name")
        await tx.q.insert_worker(
            {
                "id": wid,
                "name": name,
                "status": WorkerStatus.CONNECTING.value,
                "worker_type": (worker_type or WorkerType.EPHEMERAL).value,
                "type_set_by_admin": worker_type is not None,
                "admin_labels": labels,
                "reported_labels": {},
                "drained": False,
                "is_local": is_local,
                "registered": False,
                "gpu_count": 0,
                "capabilities": {},
                "jobs_run": 0,
                "created_at": tx.now,
            }
        )
        await tx.q.insert_token(wid, hash_secret(token), tx.now)
        tx.audit(
            "worker.created",
            actor,
            wid,
            client,
            name=name,
            labels=labels,
            worker_type=(worker_type or WorkerType.EPHEMERAL).value,
        )
        tx.audit("worker.token_created", actor, wid, client)
        worker = await _get(tx, wid)
        tx.notify.add("workers")
    return worker, token


async def list_workers(ctx: Context, statuses: list[str] | None = None) -> list[Worker]:
    async with ctx.store.read() as q:
        return await q.list_workers(statuses or ())


async def find_worker(ctx: Context, worker_id: str) -> Worker | None:
    async with ctx.store.read() as q:
        return await q.get_worker(worker_id)


async def get_worker(ctx: Context, worker_id: str) -> Worker:
    async with ctx.store.read() as q:
        worker = await q.get_worker(worker_id)
    if worker is None:
        raise _no_worker(worker_id)
    return worker


HISTORY_LENGTH = 25  # attempts on a worker's page


async def worker_detail(
    ctx: Context, worker_id: str, history: int = HISTORY_LENGTH
) -> tuple[Worker, list[WorkedAttempt]]:
    """A worker and its newest attempts (its job history)."""
    async with ctx.store.read() as q:
        worker = await q.get_worker(worker_id)
        if worker is None:
            raise NotFound(f"no worker {worker_id}; list workers with GET /api/admin/workers")
        return worker, await q.attempts_of_worker(worker_id, history)


async def set_admin_labels(
    ctx: Context, worker_id: str, labels: dict[str, str], actor: str, client: str | None
) -> Worker:
    """Replace the worker's admin labels (matched over its own: `effective_labels`); queued
    jobs it now matches are offered to it at once."""
    labels = check_labels(labels)
    async with transaction(ctx) as tx:
        worker = await _get(tx, worker_id)
        if labels != worker.admin_labels:
            await save_worker(tx, worker, actor, admin_labels=labels)
            tx.audit(
                "worker.labels_set", actor, worker.id, client, old=worker.admin_labels, new=labels
            )
    await dispatch.dispatch_worker(ctx, worker_id)
    return await get_worker(ctx, worker_id)


async def drain(ctx: Context, worker_id: str, actor: str, client: str | None) -> Worker:
    async with transaction(ctx) as tx:
        worker = await _get(tx, worker_id)
        if not worker.drained:
            await save_worker(tx, worker, actor, drained=True)
            await tx.q.push_event(
                worker.id, {"type": "drain", "reason": "drained by an admin"}, tx.now
            )
            if worker.worker_type is WorkerType.EPHEMERAL and worker.current_attempt_id is None:
                await tx.q.push_event(worker.id, {"type": "shutdown", "reason": "drained"}, tx.now)
            tx.notify.update({worker_topic(worker.id), "workers"})
        tx.audit("worker.drained", actor, worker.id, client)
        return await _get(tx, worker_id)


async def undrain(ctx: Context, worker_id: str, actor: str, client: str | None) -> Worker:
    async with transaction(ctx) as tx:
        worker = await _get(tx, worker_id)
        if worker.drained:
            await save_worker(tx, worker, actor, drained=False)
            await tx.q.push_event(worker.id, {"type": "undrain"}, tx.now)
            tx.notify.update({worker_topic(worker.id), "workers"})
        tx.audit("worker.undrained", actor, worker.id, client)
    await dispatch.dispatch_worker(ctx, worker_id)
    return await get_worker(ctx, worker_id)


async def rotate_token(ctx: Context, worker_id: str, actor: str, client: str | None) -> str:
    token = new_worker_token()
    async with transaction(ctx) as tx:
        worker = await _get(tx, worker_id)
        await tx.q.revoke_tokens(worker.id, tx.now)
        await tx.q.insert_token(worker.id, hash_secret(token), tx.now)
        tx.audit("worker.token_rotated", actor, worker.id, client)
        tx.close.add(worker_topic(worker.id))  # a stream opened with the old token ends now
        tx.notify.add("workers")  # live views say the token was rotated
    return token


async def delete_worker(ctx: Context, worker_id: str, actor: str, client: str | None) -> None:
    async with transaction(ctx) as tx:
        worker = await _get(tx, worker_id)
        if not can_delete_worker(worker.status, ever_connected=worker.ever_connected):
            raise Conflict(
                f"worker {worker_id} is {worker.status.value}; only a worker that is offline or "
                "has never connected can be deleted: drain it, stop its agent, and delete it "
                "once it is offline"
            )
        await tx.q.delete_worker(worker.id)
        tx.audit("worker.deleted", actor, worker.id, client, name=worker.name)
        tx.close.add(worker_topic(worker.id))
        tx.notify.add("workers")


# ---- what workers say -------------------------------------------------------------------


def check_self(worker: Worker, claimed_id: str | None) -> None:
    if claimed_id and claimed_id != worker.id:
        raise Forbidden(
            f"this token belongs to worker {worker.id}, not {claimed_id}; use that worker's token"
        )


async def register(
    ctx: Context, worker: Worker, reg: Registration, client: str | None
) -> RegisterAnswer:
    resume: dict[str, str] | None = None
    abandon = False
    requeued: str | None = None
    async with transaction(ctx) as tx:
        worker = await _get(tx, worker.id)
        changes: dict[str, Any] = {
            "registered": True,
            "gpu_count": reg.gpu_count,
            "gpu_name": reg.gpu_name,
            "gpu_vram_gb": reg.gpu_vram_gb,
            "accelerator_type": reg.accelerator_type,
            "capabilities": {**reg.extra, "reported_name": reg.name, "address": client},
            "reported_labels": check_labels(reg.labels),
            "last_heartbeat": tx.now,
            "offline_since": None,
            "gpu_stats": None,  # until its next heartbeat says (if it reports any)
            "gpu_stats_at": None,
        }
        if not worker.type_set_by_admin and reg.persistent is not None:
            changes["worker_type"] = (
                WorkerType.PERSISTENT if reg.persistent else WorkerType.EPHEMERAL
            ).value
        held = None
        if worker.current_attempt_id:
            held = await tx.q.get_attempt(worker.current_attempt_id)
        holds = (
            held is not None
            and held.status in ACTIVE_ATTEMPT
            and reg.current_job_id == held.job_id
            and reg.current_attempt_id in (None, held.id)
        )
        if reg.current_job_id and not holds:
            abandon = True
        if holds and held is not None:
            resume = {"job_id": held.job_id, "attempt_id": held.id}
        elif worker.current_attempt_id:
            # It came back without the job it held: the offer or the run is gone.
            requeued = await lose_current_attempt(tx, worker, "worker re-registered without it")
            worker = await _get(tx, worker.id)
            if worker.current_attempt_id:  # a cancelled attempt it no longer runs
                changes.update(current_job_id=None, current_attempt_id=None)
        await save_worker(tx, worker, f"worker:{worker.id}", **changes)
        tx.audit(
            "worker.registered",
            f"worker:{worker.id}",
            worker.id,
            client,
            gpu_count=reg.gpu_count,
            gpu_name=reg.gpu_name,
            resumed=resume is not None,
            abandoned=abandon,
        )
        tx.notify.add("workers")
        worker = await _get(tx, worker.id)
    if requeued:
        await dispatch.dispatch_job(ctx, requeued)
    return RegisterAnswer(worker=worker, resume_job=resume, abandon_job=abandon)


async def stream_opened(ctx: Context, worker: Worker, owner: str) -> None:
    async with transaction(ctx) as tx:
        worker = await _get(tx, worker.id)
        if worker.offline:
            raise Conflict(f"worker {worker.id} is offline; register again before streaming")
        await save_worker(
            tx,
            worker,
            f"worker:{worker.id}",
            stream_owner=owner,
            connected_at=tx.now,
            last_heartbeat=tx.now,
        )
        tx.notify.add("workers")
        tx.notify.add(worker_topic(worker.id))  # an older stream, on any replica, ends
    await dispatch.dispatch_worker(ctx, worker.id)


async def stream_closed(ctx: Context, worker_id: str, owner: str) -> None:
    async with transaction(ctx) as tx:
        worker = await tx.q.get_worker(worker_id, lock=True)
        if worker is None or worker.stream_owner != owner:
            return  # deleted, or a newer stream took over
        await save_worker(tx, worker, f"worker:{worker.id}", stream_owner=None)
        tx.notify.add("workers")


# An agent that names no attempt (the released SimpleTuner agent) must not see an offer the
# moment its previous job ends: it still runs that job's monitor, which reports the killed
# process's exit as whatever job is current by then (the new one), and forgets it.
LEGACY_OFFER_HOLD = 0.5
FIRST_RESEND = 1.0  # an offer that arrived while the worker was still reporting its last job


@dataclass(slots=True)
class OfferPacing:
    """The offers a stream holds for its worker until acknowledged, and when each goes out.

    The first send waits `hold` (0 for an agent that names attempts); then, while the offer
    waits for its acknowledgement, it goes again after `first_resend` (both agents ignore an
    offer that comes while they are still reporting their last job) and every `resend` after.
    """

    hold: float
    first_resend: float
    resend: float
    offers: dict[str, dict[str, Any]] = field(default_factory=dict)  # attempt id → offer
    due: dict[str, float] = field(default_factory=dict)  # attempt id → when it goes (again)
    sent: set[str] = field(default_factory=set)

    @classmethod
    def for_worker(cls, ctx: Context, worker: Worker) -> OfferPacing:
        resend = ctx.settings.ack_timeout / 3
        hold = 0.0 if Feature.ATTEMPTS in worker.features else LEGACY_OFFER_HOLD
        return cls(hold=hold, first_resend=min(FIRST_RESEND, resend), resend=resend)

    def add(self, offer: dict[str, Any], now: float) -> None:
        """An offer handed over by the claim that made it."""
        self.offers[offer["attempt_id"]] = offer
        self.due.setdefault(offer["attempt_id"], now + self.hold)

    def replace(self, offers: dict[str, dict[str, Any]], now: float) -> None:
        """The offers still waiting, as the database has them; the others are forgotten."""
        self.offers = offers
        for attempt_id in offers:
            self.due.setdefault(attempt_id, now + self.hold)
        for attempt_id in self.due.keys() - offers.keys():
            del self.due[attempt_id]
            self.sent.discard(attempt_id)

    def must_read(self, now: float) -> bool:
        """A resend is due: the database says first whether the offer still waits."""
        return any(now >= at and attempt_id in self.sent for attempt_id, at in self.due.items())

    def take_due(self, now: float) -> list[dict[str, Any]]:
        """The offers to send now; each is then due again after its resend delay."""
        out = [attempt_id for attempt_id, at in self.due.items() if now >= at]
        for attempt_id in out:
            again = self.resend if attempt_id in self.sent else self.first_resend
            self.due[attempt_id] = now + again
            self.sent.add(attempt_id)
        return [self.offers[attempt_id] for attempt_id in out]

    def next_due(self) -> float | None:
        return min(self.due.values(), default=None)


def _cancel_applies(cmd: dict[str, Any], held: Attempt | None) -> bool:
    """Whether a queued `job_cancel` may still go out: only about the job the worker holds
    now (its attempt, if the cancel names one), or when it holds none. The SimpleTuner agent
    stops whatever it runs on any `job_cancel`, so one about an earlier job would stop the
    next."""
    if cmd.get("type") != "job_cancel" or held is None:
        return True
    if cmd.get("job_id") != held.job_id:
        return False
    return cmd.get("attempt_id") in (None, held.id)


async def pending_events(
    ctx: Context, worker_id: str, owner: str
) -> tuple[list[dict[str, Any]], dict[str, dict[str, Any]]] | None:
    """Queued commands (cancel, drain, shutdown) to send now, and the offers waiting for
    this worker's acknowledgement (attempt id → event; `OfferPacing` says when each goes);
    None once the stream is no longer the worker's (a newer one took over, maybe on another
    replica, or the worker went offline): the stream ends.
    """
    commands: list[dict[str, Any]] = []
    async with ctx.store.read() as q:
        worker = await q.get_worker(worker_id)
        if worker is None or worker.stream_owner != owner:
            return None
        waiting = await q.has_events(worker_id)
        held = None
        if waiting and worker.current_attempt_id:  # only to drop a cancel (_cancel_applies)
            held = await q.get_attempt(worker.current_attempt_id)
        offers = await q.pending_offers(worker_id)
    if waiting:  # a write only when there is something to take
        async with ctx.store.write() as wq:
            commands = await wq.take_events(worker_id)
        commands = [cmd for cmd in commands if _cancel_applies(cmd, held)]
    events = {
        attempt.id: dispatch.job_submit_event(job.id, attempt.id, job.config, job.gpu_count)
        for attempt, job in offers
    }
    return commands, events


async def heartbeat(
    ctx: Context,
    worker: Worker,
    claimed_id: str | None,
    current_job_id: str | None,
    says_no_job: bool = False,
    gpu_stats: list[GpuStat] | None = None,
) -> Worker:
    """A sign of life, and the job the worker says it runs (`says_no_job`: it said outright
    that it runs none, as both agents do when idle; a heartbeat that says nothing of its job
    claims nothing).

    Most heartbeats change nothing but the time: those are kept in memory and written
    together by `flush_heartbeats` (one statement for all of them, every fraction of the
    heartbeat timeout), not one write transaction each, and so is the GPU sample one may
    carry (`gpu_stats`; None: the agent sends none). A heartbeat that changes something
    (the worker was marked offline, names a job it no longer holds, frees it, or disowns the
    job it holds) is a transaction of its own at once.
    """
    check_self(worker, claimed_id)
    grace = timedelta(seconds=ctx.settings.ack_timeout)
    if not worker.offline:
        held = None
        if worker.current_attempt_id:
            async with ctx.store.read() as q:
                held = await q.get_attempt(worker.current_attempt_id)
        if (
            not _names_unheld_job(held, current_job_id)
            and not _lets_go(held, current_job_id)
            and not _disowns(held, says_no_job, ctx.clock(), grace)
        ):
            now = ctx.clock()
            ctx.heartbeats[worker.id] = now
            if gpu_stats is not None:
                ctx.gpu_stats[worker.id] = (now, [dataclasses.asdict(g) for g in gpu_stats])
            ctx.metrics.apply([("heartbeat", 1.0, ())])
            return dataclasses.replace(worker, last_heartbeat=now)
    async with transaction(ctx) as tx:
        worker = await _get(tx, worker.id)
        if worker.offline:
            tx.close.add(worker_topic(worker.id))
            raise Conflict(f"worker {worker.id} was marked offline; register again")
        changes: dict[str, Any] = {"last_heartbeat": tx.now}
        if gpu_stats is not None:
            changes.update(
                gpu_stats=[dataclasses.asdict(g) for g in gpu_stats], gpu_stats_at=tx.now
            )
        tx.observe("heartbeat")
        held = (
            await tx.q.get_attempt(worker.current_attempt_id) if worker.current_attempt_id else None
        )
        if _names_unheld_job(held, current_job_id):
            await tx.q.push_event(
                worker.id,
                {
                    "type": "job_cancel",
                    "job_id": current_job_id,
                    "reason": "this worker no longer holds the job",
                },
                tx.now,
            )
            tx.notify.add(worker_topic(worker.id))
        freed = _lets_go(held, current_job_id)
        if freed:
            changes.update(current_job_id=None, current_attempt_id=None)
        requeued = None
        if _disowns(held, says_no_job, tx.now, grace):
            requeued = await lose_current_attempt(tx, worker, "the worker says it runs no job")
            worker = await _get(tx, worker.id)
            freed = True
        await save_worker(tx, worker, f"worker:{worker.id}", **changes)
        worker = await _get(tx, worker.id)
    if requeued:
        await dispatch.dispatch_job(ctx, requeued)
    if freed:
        await dispatch.dispatch_worker(ctx, worker.id)
    return worker


def _disowns(held: Attempt | None, says_no_job: bool, now: datetime, grace: timedelta) -> bool:
    """The worker says it runs no job while it holds a started one, for longer than a report
    still on its way could explain (the ack timeout): the attempt is lost. (The SimpleTuner
    agent can drop a job without a word: a stale `job_cancel` stopped it, or its monitor of
    an earlier job reported that job's end as the new one's.)"""
    if not says_no_job or held is None:
        return False
    if held.status not in (AttemptStatus.ACKNOWLEDGED, AttemptStatus.RUNNING):
        return False  # an offer not acknowledged yet has the ack timeout of its own
    since = held.started_at or held.acknowledged_at or held.offered_at
    return now - since > grace


def _names_unheld_job(held: Attempt | None, current_job_id: str | None) -> bool:
    """The heartbeat names a job the worker no longer holds (it gets a cancel)."""
    return bool(current_job_id) and (
        held is None or held.job_id != current_job_id or held.status not in ACTIVE_ATTEMPT
    )


def _lets_go(held: Attempt | None, current_job_id: str | None) -> bool:
    """The worker's attempt has ended and the heartbeat no longer names its job (freed)."""
    return held is not None and held.status not in ACTIVE_ATTEMPT and current_job_id != held.job_id


async def flush_heartbeats(ctx: Context) -> int:
    """Write the heartbeats kept since the last flush. Returns how many workers."""
    beats, ctx.heartbeats = ctx.heartbeats, {}
    samples, ctx.gpu_stats = ctx.gpu_stats, {}
    if not beats and not samples:
        return 0
    try:
        async with transaction(ctx) as tx:
            await tx.q.touch_workers(beats)
            await tx.q.record_gpu_stats(samples)
            tx.notify.add("workers")  # live views show the new times
    except BaseException:
        for worker_id, at in beats.items():  # kept for the next flush, unless newer came
            ctx.heartbeats.setdefault(worker_id, at)
        for worker_id, sample in samples.items():
            ctx.gpu_stats.setdefault(worker_id, sample)
        raise
    return len(beats)


async def disconnect(
    ctx: Context, worker: Worker, claimed_id: str | None, client: str | None
) -> None:
    check_self(worker, claimed_id)
    async with transaction(ctx) as tx:
        worker = await _get(tx, worker.id)
        requeued = await lose_current_attempt(tx, worker, "worker disconnected")
        worker = await _get(tx, worker.id)
        await save_worker(
            tx,
            worker,
            f"worker:{worker.id}",
            offline_since=tx.now,
            stream_owner=None,
            current_job_id=None,
            current_attempt_id=None,
        )
        tx.audit("worker.disconnected", f"worker:{worker.id}", worker.id, client)
        tx.close.add(worker_topic(worker.id))
        tx.notify.add("workers")
    if requeued:
        await dispatch.dispatch_job(ctx, requeued)


async def has_jobs(ctx: Context, worker: Worker, claimed_id: str | None) -> bool:
    """Whether work waits for this worker: the SimpleTuner agent's question, when ephemeral,
    after each job. A `no` to an ephemeral worker that has run its job (or is drained) comes
    with a `shutdown` on its stream: the agent stops only once its stream sends another line,
    which could otherwise be the next ping, 15 s away."""
    check_self(worker, claimed_id)
    if worker.spent or worker.drained:
        if worker.worker_type is WorkerType.EPHEMERAL:
            async with transaction(ctx) as tx:
                reason = "drained" if worker.drained else "an ephemeral worker runs one job"
                await tx.q.push_event(worker.id, {"type": "shutdown", "reason": reason}, tx.now)
                tx.notify.add(worker_topic(worker.id))
        return False
    async with ctx.store.read() as q:
        if await q.pending_offers(worker.id):
            return True
        targets = ["local", "auto"] if worker.is_local else ["worker", "auto"]
        cap = worker.capacity()
        async with contextlib.aclosing(dispatch.queued_for(q, worker, targets)) as queued:
            async for job in queued:
                if fits(job.requirement(), cap):
                    return True
    return False
