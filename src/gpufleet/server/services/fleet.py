"""Workers as admins see them: create, list, label, drain, rotate a token, delete.

What workers say about themselves is the agent protocol: `services/agents.py`."""

from __future__ import annotations

from gpufleet import protocol
from gpufleet.domain.naming import check_labels, check_name
from gpufleet.domain.records import WorkedAttempt, Worker
from gpufleet.domain.secrets import hash_secret, new_id, new_worker_token
from gpufleet.domain.states import WorkerType, can_delete_worker
from gpufleet.errors import Conflict, NotFound
from gpufleet.server.context import Context, Tx, transaction
from gpufleet.server.hub import WORKERS_TOPIC, worker_topic
from gpufleet.server.services import dispatch
from gpufleet.server.services.lifecycle import new_worker, save_worker


def _no_worker(worker_id: str) -> NotFound:
    return NotFound(
        f"no worker {worker_id}; list workers with GET /api/admin/workers",
        ui=f"no worker {worker_id}; the Workers page lists the workers",
        cli=f"no worker {worker_id}; list workers with `gpufleet workers list`",
    )


async def locked_worker(tx: Tx, worker_id: str) -> Worker:
    """The worker, its row locked until the transaction ends."""
    worker = await tx.q.get_worker(worker_id, lock=True)
    if worker is None:
        raise _no_worker(worker_id)
    return worker


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
    wid = worker_id or new_id("w")
    async with transaction(ctx) as tx:
        token = await add_worker(
            tx, wid, name, worker_type, labels, actor, client, is_local=is_local
        )
        worker = await locked_worker(tx, wid)
    return worker, token


async def add_worker(
    tx: Tx,
    worker_id: str,
    name: str,
    worker_type: WorkerType | None,
    labels: dict[str, str],
    actor: str,
    client: str | None,
    *,
    is_local: bool = False,
) -> str:
    """A new worker and its token, in the caller's transaction: the raw token (its hash is
    stored; it is shown once, or to no one when a pool launches it)."""
    check_name("worker", name)
    labels = check_labels(labels)
    token = new_worker_token()
    if await tx.q.worker_name_taken(name):
        raise Conflict(f"a worker named {name!r} exists already; choose another name")
    kind = (worker_type or WorkerType.EPHEMERAL).value
    await new_worker(
        tx,
        {
            "id": worker_id,
            "name": name,
            "worker_type": kind,
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
        },
    )
    await tx.q.insert_token(worker_id, hash_secret(token), tx.now)
    tx.audit("worker.created", actor, worker_id, client, name=name, labels=labels, worker_type=kind)
    tx.audit("worker.token_created", actor, worker_id, client)
    tx.wake(WORKERS_TOPIC)
    return token


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
        worker = await locked_worker(tx, worker_id)
        if labels != worker.admin_labels:
            await save_worker(tx, worker, actor, admin_labels=labels)
            tx.audit(
                "worker.labels_set", actor, worker.id, client, old=worker.admin_labels, new=labels
            )
    await dispatch.dispatch_worker(ctx, worker_id)
    return await get_worker(ctx, worker_id)


async def drain(ctx: Context, worker_id: str, actor: str, client: str | None) -> Worker:
    async with transaction(ctx) as tx:
        worker = await locked_worker(tx, worker_id)
        if not worker.drained:
            await save_worker(tx, worker, actor, drained=True)
            await tx.send_to_worker(worker.id, protocol.drain("drained by an admin"))
            if worker.worker_type is WorkerType.EPHEMERAL and worker.current_attempt_id is None:
                await tx.send_to_worker(worker.id, protocol.shutdown("drained"))
            tx.wake(WORKERS_TOPIC)
        tx.audit("worker.drained", actor, worker.id, client)
        return await locked_worker(tx, worker_id)


async def undrain(ctx: Context, worker_id: str, actor: str, client: str | None) -> Worker:
    async with transaction(ctx) as tx:
        worker = await locked_worker(tx, worker_id)
        if worker.drained:
            # The circuit breaker's count starts again: the admin says the machine is fixed.
            await save_worker(tx, worker, actor, drained=False, drain_reason=None, infra_failures=0)
            await tx.send_to_worker(worker.id, protocol.undrain())
            tx.wake(WORKERS_TOPIC)
        tx.audit("worker.undrained", actor, worker.id, client)
    await dispatch.dispatch_worker(ctx, worker_id)
    return await get_worker(ctx, worker_id)


async def rotate_token(ctx: Context, worker_id: str, actor: str, client: str | None) -> str:
    token = new_worker_token()
    async with transaction(ctx) as tx:
        worker = await locked_worker(tx, worker_id)
        await tx.q.revoke_tokens(worker.id, tx.now)
        await tx.q.insert_token(worker.id, hash_secret(token), tx.now)
        # The new token may go to another agent: what the old one said it does is forgotten.
        features = {k: v for k, v in worker.capabilities.items() if k != "features"}
        await save_worker(tx, worker, actor, capabilities=features)
        tx.audit("worker.token_rotated", actor, worker.id, client)
        tx.end_streams(worker_topic(worker.id))  # a stream opened with the old token ends now
        tx.wake(WORKERS_TOPIC)  # live views say the token was rotated
    return token


async def delete_worker(ctx: Context, worker_id: str, actor: str, client: str | None) -> None:
    async with transaction(ctx) as tx:
        worker = await locked_worker(tx, worker_id)
        if not can_delete_worker(worker.status, ever_connected=worker.ever_connected):
            raise Conflict(
                f"worker {worker_id} is {worker.status.value}; only a worker that is offline or "
                "has never connected can be deleted: drain it, stop its agent, and delete it "
                "once it is offline"
            )
        await tx.q.delete_worker(worker.id)
        tx.audit("worker.deleted", actor, worker.id, client, name=worker.name)
        tx.end_streams(worker_topic(worker.id))
        tx.wake(WORKERS_TOPIC)
