"""Workers: what admins do to them, and what workers say about themselves."""

from __future__ import annotations

import contextlib
import dataclasses
import re
from dataclasses import dataclass, field
from typing import Any

from gpufleet.domain.matching import fits
from gpufleet.domain.records import Attempt, Worker
from gpufleet.domain.secrets import hash_secret, new_id, new_worker_token
from gpufleet.domain.states import ACTIVE_ATTEMPT, WorkerStatus, WorkerType, can_delete_worker
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


async def _get(tx: Tx, worker_id: str) -> Worker:
    worker = await tx.q.get_worker(worker_id, lock=True)
    if worker is None:
        raise NotFound(f"no worker {worker_id}; list workers with GET /api/admin/workers")
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
        raise NotFound(f"no worker {worker_id}; list workers with GET /api/admin/workers")
    return worker


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
            "capabilities": {**reg.extra, "reported_name": reg.name},
            "reported_labels": check_labels(reg.labels),
            "last_heartbeat": tx.now,
            "offline_since": None,
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


def resend_due(ctx: Context, sent: dict[str, float], now: float) -> bool:
    """Whether an offer this stream sent (attempt id → when) is due to go out again, if it
    still waits for its acknowledgement: a third of the ack timeout after it was sent."""
    return any(now - at >= _resend_after(ctx) for at in sent.values())


def _resend_after(ctx: Context) -> float:
    return ctx.settings.ack_timeout / 3


async def pending_events(
    ctx: Context, worker_id: str, owner: str, sent: dict[str, float], now: float
) -> list[dict[str, Any]] | None:
    """Queued commands (cancel, drain, shutdown), then offers to send on this stream; None
    once the stream is no longer the worker's (a newer one took over, maybe on another
    replica, or the worker went offline): the stream ends.

    An offer goes out when the stream opens, then again every third of the ack timeout while
    it is unacknowledged: a worker busy finishing its last job ignores an offer (both agents
    do), and must see it again once it is free, before the offer is withdrawn.

    A `job_cancel` about an older attempt of the job the worker now runs is dropped: the
    SimpleTuner agent knows only job ids, and would stop the new run.
    """
    commands: list[dict[str, Any]] = []
    async with ctx.store.read() as q:
        worker = await q.get_worker(worker_id)
        if worker is None or worker.stream_owner != owner:
            return None
        waiting = await q.has_events(worker_id)
        held = None
        if waiting and worker.current_attempt_id:  # only to drop a stale cancel (below)
            held = await q.get_attempt(worker.current_attempt_id)
        offers = await q.pending_offers(worker_id)
    if waiting:  # a write only when there is something to take
        async with ctx.store.write() as wq:
            commands = await wq.take_events(worker_id)
    live = held if held is not None and held.status in ACTIVE_ATTEMPT else None

    def stale(cmd: dict[str, Any]) -> bool:
        return (
            live is not None
            and cmd.get("type") == "job_cancel"
            and cmd.get("job_id") == live.job_id
            and cmd.get("attempt_id") != live.id
        )

    events = [cmd for cmd in commands if not stale(cmd)]
    resend_after = _resend_after(ctx)
    fresh = [
        dispatch.job_submit_event(job.id, attempt.id, job.config, job.gpu_count)
        for attempt, job in offers
        if now - sent.get(attempt.id, -resend_after) >= resend_after
    ]
    sent.update((e["attempt_id"], now) for e in fresh)
    for attempt_id in sent.keys() - {attempt.id for attempt, _job in offers}:
        del sent[attempt_id]  # acknowledged or withdrawn: nothing left to send again
    return events + fresh


async def heartbeat(
    ctx: Context, worker: Worker, claimed_id: str | None, current_job_id: str | None
) -> Worker:
    """A sign of life, and the job the worker says it runs.

    Most heartbeats change nothing but the time: those are kept in memory and written
    together by `flush_heartbeats` (one statement for all of them, every fraction of the
    heartbeat timeout), not one write transaction each. A heartbeat that changes something
    (the worker was marked offline, names a job it no longer holds, or frees it) is a
    transaction of its own at once.
    """
    check_self(worker, claimed_id)
    if not worker.offline:
        held = None
        if worker.current_attempt_id:
            async with ctx.store.read() as q:
                held = await q.get_attempt(worker.current_attempt_id)
        if not _names_unheld_job(held, current_job_id) and not _lets_go(held, current_job_id):
            now = ctx.clock()
            ctx.heartbeats[worker.id] = now
            ctx.metrics.apply([("heartbeat", 1.0, ())])
            return dataclasses.replace(worker, last_heartbeat=now)
    async with transaction(ctx) as tx:
        worker = await _get(tx, worker.id)
        if worker.offline:
            tx.close.add(worker_topic(worker.id))
            raise Conflict(f"worker {worker.id} was marked offline; register again")
        changes: dict[str, Any] = {"last_heartbeat": tx.now}
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
        await save_worker(tx, worker, f"worker:{worker.id}", **changes)
        worker = await _get(tx, worker.id)
    if freed:
        await dispatch.dispatch_worker(ctx, worker.id)
    return worker


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
    if not beats:
        return 0
    try:
        async with transaction(ctx) as tx:
            await tx.q.touch_workers(beats)
            tx.notify.add("workers")  # live views show the new times
    except BaseException:
        for worker_id, at in beats.items():  # kept for the next flush, unless newer came
            ctx.heartbeats.setdefault(worker_id, at)
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
    check_self(worker, claimed_id)
    if worker.spent or worker.drained:
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
