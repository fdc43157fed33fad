"""The `webhooks` loop: send due outbox rows, record each try, retry with backoff.

Every replica runs it. A replica sends only the rows it claimed (a conditional update that
one replica wins), for a lease longer than a send may take; a replica that dies mid-send
leaves its claim to expire and another tries again. Delivery is therefore at least once:
receivers drop repeats by the `X-Gpufleet-Delivery` header (the same on every try)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from datetime import timedelta

import httpx

from gpufleet import __version__
from gpufleet.domain import webhooks as rules
from gpufleet.domain.secrets import open_secret
from gpufleet.domain.webhooks import Delivery, DeliveryStatus, Webhook
from gpufleet.server.context import Context, transaction
from gpufleet.server.services.webhooks import SECRET_PURPOSE

log = logging.getLogger("gpufleet.server.webhooks")
INTERVAL_S = 1.0  # how often each replica looks for due deliveries
BATCH = 20
LEASE = timedelta(seconds=3 * rules.SEND_TIMEOUT_S)
KEEP_FINISHED = timedelta(days=7)


async def _claim(ctx: Context) -> list[tuple[Delivery, Webhook]]:
    async with ctx.store.read() as q:
        due = await q.due_deliveries(ctx.clock(), BATCH)
    if not due:
        return []
    claimed: list[tuple[Delivery, Webhook]] = []
    async with transaction(ctx) as tx:
        for delivery_id in due:  # in due order, as every replica takes them: no deadlock
            if not await tx.q.claim_delivery(delivery_id, tx.now, tx.now + LEASE):
                continue
            delivery = await tx.q.get_delivery(delivery_id)
            hook = await tx.q.get_webhook(delivery.webhook_id) if delivery else None
            if delivery is not None and hook is not None:
                claimed.append((delivery, hook))
    return claimed


def _headers(ctx: Context, delivery: Delivery, hook: Webhook) -> dict[str, str] | str:
    """The request's headers, or why it cannot be signed."""
    headers = {
        "Content-Type": "application/json",
        "User-Agent": f"gpufleet/{__version__}",
        rules.EVENT_HEADER: delivery.event,
        rules.DELIVERY_HEADER: delivery.id,
    }
    if hook.secret_sealed is not None:
        secret = open_secret(ctx.audit_key, SECRET_PURPOSE, hook.id, hook.secret_sealed)
        if secret is None:
            return (
                "the webhook's secret cannot be read with this server's audit key (was the "
                "key replaced?); delete the webhook and add it again with its secret"
            )
        headers[rules.SIGNATURE_HEADER] = rules.sign(secret, delivery.body.encode())
    return headers


async def _send(
    ctx: Context, http: httpx.AsyncClient, delivery: Delivery, hook: Webhook
) -> tuple[int | None, str | None]:
    headers = _headers(ctx, delivery, hook)
    if isinstance(headers, str):
        return None, headers
    try:
        answer = await http.post(hook.url, content=delivery.body.encode(), headers=headers)
    except httpx.TimeoutException:
        return None, f"no answer within {rules.SEND_TIMEOUT_S:g} s"
    except Exception as exc:  # whatever the URL or the peer does, it is this try's outcome
        return None, f"{type(exc).__name__}: {exc}"[:500]
    if 200 <= answer.status_code < 300:
        return answer.status_code, None
    return answer.status_code, f"the receiver answered {answer.status_code}"


async def _record(
    ctx: Context, delivery: Delivery, status_code: int | None, error: str | None
) -> None:
    attempts = delivery.attempts + 1
    status, wait = rules.after_try(attempts, status_code)
    async with transaction(ctx) as tx:
        await tx.q.update_delivery(
            delivery.id,
            status=status.value,
            attempts=attempts,
            last_attempt_at=tx.now,
            status_code=status_code,
            error=error,
            claimed_until=None,
            next_at=tx.now + timedelta(seconds=wait) if wait is not None else None,
        )
    if status is DeliveryStatus.FAILED:
        log.warning(
            "webhook %s: gave up on delivery %s (%s) after %d tries: %s",
            delivery.webhook_id,
            delivery.id,
            delivery.event,
            attempts,
            error,
        )


async def deliver_due(ctx: Context, http: httpx.AsyncClient | None = None) -> int:
    """Send what is due now; returns how many tries were made."""
    claimed = await _claim(ctx)
    if not claimed:
        return 0

    async def one(client: httpx.AsyncClient, delivery: Delivery, hook: Webhook) -> None:
        # recorded as soon as it is answered: a slow receiver holds back only its own log
        status_code, error = await _send(ctx, client, delivery, hook)
        await _record(ctx, delivery, status_code, error)

    async with _client(http) as client:
        await asyncio.gather(*(one(client, d, h) for d, h in claimed))
    return len(claimed)


@contextlib.asynccontextmanager
async def _client(http: httpx.AsyncClient | None) -> AsyncIterator[httpx.AsyncClient]:
    if http is not None:  # the caller's, left open
        yield http
        return
    # No redirects: the admin named this URL, and a redirect could point anywhere.
    async with httpx.AsyncClient(
        timeout=rules.SEND_TIMEOUT_S, follow_redirects=False, trust_env=False
    ) as client:
        yield client


async def prune(ctx: Context) -> int:
    async with transaction(ctx) as tx:
        return await tx.q.prune_deliveries(tx.now - KEEP_FINISHED)
