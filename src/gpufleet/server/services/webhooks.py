"""Webhooks an admin configures, and the outbox rows that report events to them.

An event is written to the outbox (`webhook_deliveries`) by the transaction that makes the
change it reports (`lifecycle.move_job`, the health sweep), so it is sent if and only if
the change commits; `services/delivery.py` sends it."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

import orjson

from gpufleet.domain import webhooks as rules
from gpufleet.domain.records import Job, Worker
from gpufleet.domain.secrets import new_id, seal_secret
from gpufleet.domain.states import JobStatus
from gpufleet.domain.webhook_targets import redact_url
from gpufleet.domain.webhooks import Delivery, DeliveryStatus, Event, Webhook
from gpufleet.errors import InvalidInput, NotFound
from gpufleet.server.context import Context, Tx, transaction
from gpufleet.server.hub import WEBHOOKS_TOPIC
from gpufleet.server.services import webhook_targets

SECRET_PURPOSE = "webhook secret"
LOG_LENGTH = 50  # deliveries listed per webhook


def _iso(when: datetime | None) -> str | None:
    return when.isoformat().replace("+00:00", "Z") if when else None


def _body(delivery_id: str, event: Event, now: datetime, subject: dict[str, Any]) -> str:
    payload = {"id": delivery_id, "event": event.value, "occurred_at": _iso(now), **subject}
    return orjson.dumps(payload).decode()


def _row(hook: Webhook, event: Event, now: datetime, subject: dict[str, Any]) -> dict[str, Any]:
    delivery_id = new_id("d")
    return {
        "id": delivery_id,
        "webhook_id": hook.id,
        "event": event.value,
        "body": _body(delivery_id, event, now, subject),
        "status": DeliveryStatus.PENDING.value,
        "attempts": 0,
        "created_at": now,
        "next_at": now,
    }


async def enqueue(tx: Tx, event: Event, subject: dict[str, Any]) -> int:
    """Write a delivery for every webhook that hears `event`, in this transaction."""
    hooks = await _hearing(tx, event)
    await _deliver(tx, hooks, event, subject)
    return len(hooks)


async def _deliver(tx: Tx, hooks: list[Webhook], event: Event, subject: dict[str, Any]) -> None:
    await tx.q.insert_deliveries([_row(hook, event, tx.now, subject) for hook in hooks])
    tx.wake(WEBHOOKS_TOPIC)


async def _hearing(tx: Tx, event: Event) -> list[Webhook]:
    return [hook for hook in await tx.q.list_webhooks() if hook.hears(event)]


async def job_ended(tx: Tx, job: Job, status: JobStatus, changes: dict[str, Any]) -> None:
    """`move_job` moved the job to an end state (with `changes`): tell who listens."""
    event = rules.JOB_END_EVENTS.get(status)
    if event is None:
        return
    hooks = await _hearing(tx, event)
    if not hooks:
        return  # nobody listens: nothing to read for them (a job's end is the hot path)

    def now_(name: str) -> Any:
        return changes.get(name, getattr(job, name))

    worker_id = now_("worker_id")
    worker = await tx.q.get_worker(worker_id) if worker_id else None
    subject = {
        "job": {
            "id": job.id,
            "status": status.value,
            "config_name": job.config_name,
            "target": job.target.value,
            "worker_id": worker_id,
            "worker_name": worker.name if worker else None,
            "attempts": job.attempts,
            "exit_code": now_("exit_code"),
            "error": now_("error"),
            "submitted_at": _iso(job.created_at),
            "started_at": _iso(now_("started_at")),
            "ended_at": _iso(now_("ended_at")),
        }
    }
    await _deliver(tx, hooks, event, subject)


async def job_judged(
    tx: Tx, job: Job, event: Event, by: str, reason: str | None, submitter: str | None
) -> None:
    """A held job was approved or rejected (`event`) by `by` (a person's name): its
    submitter (`submitter`, their name) hears it through the webhooks that listen."""
    subject = {
        "job": {
            "id": job.id,
            "config_name": job.config_name,
            "gpu_count": job.gpu_count,
            "user_id": job.user_id,
            "user_name": submitter,
            "team_id": job.team_id,
            "submitted_at": _iso(job.created_at),
        },
        "by": by,
        "reason": reason,
    }
    await enqueue(tx, event, subject)


async def worker_lost(tx: Tx, worker: Worker, reason: str, job_id: str | None) -> None:
    subject = {
        "worker": {
            "id": worker.id,
            "name": worker.name,
            "last_heartbeat": _iso(worker.last_heartbeat),
            "job_id": job_id,  # the job it was running, requeued or failed
        },
        "reason": reason,
    }
    await enqueue(tx, Event.WORKER_LOST, subject)


async def gpu_fault(tx: Tx, worker: Worker, index: int, reason: str, job_id: str | None) -> None:
    subject = {
        "worker": {"id": worker.id, "name": worker.name},
        "gpu_index": index,
        "reason": reason,
        "job_id": job_id,  # the job it was running, requeued
    }
    await enqueue(tx, Event.GPU_FAULT, subject)


# ---- what an admin does -------------------------------------------------------------------


async def create(
    ctx: Context,
    url: str,
    events: list[str],
    secret: str | None,
    actor: str,
    client: str | None,
    fmt: str | None = None,
) -> Webhook:
    shape = rules.check_format(fmt)
    url = await _checked_url(ctx, url)
    chosen = rules.check_subscriptions(events)
    webhook_id = new_id("wh")
    sealed = _sealed(ctx, webhook_id, secret)
    async with transaction(ctx) as tx:
        await tx.q.insert_webhook(
            {
                "id": webhook_id,
                "url": url,
                "secret_sealed": sealed,
                "events": [e.value for e in chosen],
                "created_at": tx.now,
                "created_by": actor,
                "format": shape.value,
            }
        )
        tx.audit(  # never the secret (only whether there is one), nor the URL's path or query
            "webhook.created",
            actor,
            webhook_id,
            client,
            url=redact_url(url),
            events=[e.value for e in chosen],
            signed=sealed is not None,
            format=shape.value,
        )
        return Webhook(
            id=webhook_id,
            url=url,
            events=frozenset(chosen),
            secret_sealed=sealed,
            created_at=tx.now,
            created_by=actor,
            format=shape,
        )


async def _checked_url(ctx: Context, url: str) -> str:
    """A URL that can work and whose host the server may reach (docs/webhooks.md)."""
    checked = rules.check_url(url)
    await webhook_targets.check_url(checked, ctx.settings.webhook_allow())
    return checked


def _sealed(ctx: Context, webhook_id: str, secret: str | None) -> str | None:
    """The secret as stored (sealed under the audit key), checked; None: deliveries go
    unsigned."""
    checked = rules.check_secret(secret)
    return seal_secret(ctx.audit_key, SECRET_PURPOSE, webhook_id, checked) if checked else None


async def update(
    ctx: Context, webhook_id: str, changes: Mapping[str, Any], actor: str, client: str | None
) -> Webhook:
    """Change a webhook's `url`, `events`, `format` or `secret` (None or "": its deliveries go
    unsigned); a key absent from `changes` stays as it is. Deliveries not sent yet go to the
    webhook as it is when they are sent."""
    values: dict[str, Any] = {}
    said: dict[str, Any] = {}  # what the audit row says: never the secret nor the whole URL
    if "url" in changes:
        values["url"] = await _checked_url(ctx, changes["url"] or "")
        said["url"] = redact_url(values["url"])
    if "events" in changes:
        chosen = rules.check_subscriptions(changes["events"] or ())
        values["events"] = said["events"] = [e.value for e in chosen]
    if "format" in changes:
        if changes["format"] is None:
            raise InvalidInput("a webhook has a format: send gpufleet, slack or discord, not null")
        values["format"] = said["format"] = rules.check_format(changes["format"]).value
    if "secret" in changes:
        values["secret_sealed"] = _sealed(ctx, webhook_id, changes["secret"])
        said["signed"] = values["secret_sealed"] is not None
    async with transaction(ctx) as tx:
        if await tx.q.get_webhook(webhook_id) is None:
            raise _missing(webhook_id)
        if values:
            await tx.q.update_webhook(webhook_id, **values)
            tx.audit("webhook.updated", actor, webhook_id, client, **said)
        hook = await tx.q.get_webhook(webhook_id)
    if hook is None:  # read in this very transaction
        raise RuntimeError(f"webhook {webhook_id} vanished")
    return hook


async def list_all(ctx: Context) -> list[Webhook]:
    async with ctx.store.read() as q:
        return await q.list_webhooks()


def _missing(webhook_id: str) -> NotFound:
    return NotFound(f"no webhook {webhook_id}; it may have been deleted: list the webhooks again")


async def delete(ctx: Context, webhook_id: str, actor: str, client: str | None) -> None:
    async with transaction(ctx) as tx:
        if not await tx.q.delete_webhook(webhook_id):
            raise _missing(webhook_id)
        tx.audit("webhook.deleted", actor, webhook_id, client)


async def send_test(ctx: Context, webhook_id: str, actor: str, client: str | None) -> Delivery:
    """Queue a `test` event for this webhook alone; the delivery loop sends it at once."""
    async with transaction(ctx) as tx:
        hook = await tx.q.get_webhook(webhook_id)
        if hook is None:
            raise _missing(webhook_id)
        subject = {"webhook_id": hook.id, "message": "a test event sent from gpufleet"}
        row = _row(hook, Event.TEST, tx.now, subject)
        await tx.q.insert_deliveries([row])
        tx.wake(WEBHOOKS_TOPIC)
        tx.audit("webhook.tested", actor, webhook_id, client, delivery_id=row["id"])
        delivery = await tx.q.get_delivery(row["id"])
    if delivery is None:  # written by this very transaction
        raise RuntimeError(f"delivery {row['id']} vanished")
    return delivery


async def deliveries(ctx: Context, webhook_id: str) -> list[Delivery]:
    async with ctx.store.read() as q:
        if await q.get_webhook(webhook_id) is None:
            raise _missing(webhook_id)
        return await q.list_deliveries(webhook_id, LOG_LENGTH)
