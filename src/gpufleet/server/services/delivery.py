"""The `webhooks` loop: send due outbox rows, record each try, retry with backoff.

Every replica runs it. A replica sends only the rows it claimed (a conditional update that
one replica wins), for a lease of three send deadlines; a replica that dies mid-send leaves
its claim to expire and another tries again. Delivery is therefore at least once: receivers
drop repeats by the `X-Gpufleet-Delivery` header (the same on every try).

Each webhook has its own lane: one task that sends that webhook's due deliveries one after
another, beside the other webhooks' lanes (at most `LANES` at once per replica), and each
send has one deadline from resolving the host to the answer's last byte. So a receiver that
answers slowly, or trickles its answer a byte at a time, holds back only its own webhook."""

from __future__ import annotations

import asyncio
import logging
from contextvars import ContextVar
from datetime import timedelta

import httpx

from gpufleet import __version__
from gpufleet.domain import webhook_formats
from gpufleet.domain import webhooks as rules
from gpufleet.domain.secrets import open_secret
from gpufleet.domain.webhook_targets import IPAddress, literal_address, redact_text, redact_url
from gpufleet.domain.webhooks import Delivery, DeliveryStatus, Webhook
from gpufleet.errors import InvalidInput
from gpufleet.server.context import Context, transaction
from gpufleet.server.hub import WEBHOOKS_TOPIC
from gpufleet.server.services import webhook_targets
from gpufleet.server.services.webhooks import SECRET_PURPOSE
from gpufleet.supervisor import Supervisor

log = logging.getLogger("gpufleet.server.webhooks")
INTERVAL_S = 1.0  # how often each replica looks for due deliveries
LANES = 16  # webhooks one replica sends to at once
CLAIM_AHEAD = 5  # a lane's candidates per claim: another replica may take the first
KEEP_FINISHED = timedelta(days=7)

# Set in a lane: httpx's own INFO line names each request's whole URL, which for a webhook
# may hold credentials; our line says the same, redacted.
_SENDING: ContextVar[bool] = ContextVar("gpufleet_webhook_sending", default=False)


class _QuietSends(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not _SENDING.get()


_QUIET = _QuietSends()


def _quiet_httpx() -> None:
    logger = logging.getLogger("httpx")
    if _QUIET not in logger.filters:
        logger.addFilter(_QUIET)


def lease(ctx: Context) -> timedelta:
    return timedelta(seconds=3 * ctx.settings.webhook_timeout)


async def _claim_next(ctx: Context, webhook_id: str) -> tuple[Delivery, Webhook] | None:
    """Claim this webhook's next due delivery, or None when none is due (or others took
    them)."""
    async with ctx.store.read() as q:
        due = await q.due_deliveries(ctx.clock(), CLAIM_AHEAD, webhook_id)
    if not due:
        return None
    async with transaction(ctx) as tx:
        for delivery_id in due:  # in due order, as every replica takes them: no deadlock
            if not await tx.q.claim_delivery(delivery_id, tx.now, tx.now + lease(ctx)):
                continue
            delivery = await tx.q.get_delivery(delivery_id)
            hook = await tx.q.get_webhook(webhook_id)
            if delivery is not None and hook is not None:
                return delivery, hook
    return None


def _headers(ctx: Context, delivery: Delivery, hook: Webhook, body: bytes) -> dict[str, str] | str:
    """The request's headers (the signature: of `body`, the bytes sent), or why it cannot be
    signed."""
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
        headers[rules.SIGNATURE_HEADER] = rules.sign(secret, body)
    return headers


def _request(
    http: httpx.AsyncClient,
    url: str,
    address: IPAddress | None,
    body: bytes,
    headers: dict[str, str],
) -> httpx.Request:
    """The POST, connecting to `address` (the one checked) while naming the host in `Host`
    and in TLS (SNI and the certificate check), so a name cannot resolve elsewhere between
    the check and the connection."""
    target = httpx.URL(url)
    extensions: dict[str, str] = {}
    if address is not None and literal_address(target.host) is None:
        headers = {**headers, "Host": target.netloc.decode("ascii")}
        extensions["sni_hostname"] = target.raw_host.decode("ascii")
        target = target.copy_with(host=str(address))
    return http.build_request("POST", target, content=body, headers=headers, extensions=extensions)


async def _send(
    ctx: Context, http: httpx.AsyncClient, delivery: Delivery, hook: Webhook
) -> tuple[int | None, str | None]:
    # In the webhook's format as it is now (a Slack or Discord message made from our JSON).
    body = webhook_formats.render(hook.format, delivery.body)
    headers = _headers(ctx, delivery, hook, body)
    if isinstance(headers, str):
        return None, headers
    deadline = ctx.settings.webhook_timeout
    allow = ctx.settings.webhook_allow()
    try:
        async with asyncio.timeout(deadline):  # whatever the receiver trickles
            address = await webhook_targets.address_to_send_to(hook.url, allow)
            request = _request(http, hook.url, address, body, headers)
            answer = await http.send(request)
    except (TimeoutError, httpx.TimeoutException):
        return None, f"no answer within {deadline:g} s"
    except InvalidInput as exc:  # the host resolves to an internal address now
        return None, f"not sent: {exc.message}"[:500]
    except Exception as exc:  # whatever the URL or the peer does, it is this try's outcome
        return None, redact_text(f"{type(exc).__name__}: {exc}", hook.url)[:500]
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
        tx.wake(WEBHOOKS_TOPIC)
    if status is DeliveryStatus.FAILED:
        log.warning(
            "webhook %s: gave up on delivery %s (%s) after %d tries: %s",
            delivery.webhook_id,
            delivery.id,
            delivery.event,
            attempts,
            error,
        )


async def _lane(ctx: Context, webhook_id: str) -> int:
    """Send this webhook's due deliveries one after another; returns how many were tried."""
    _SENDING.set(True)  # this task's context only
    tries = 0
    # No redirects: the admin named this URL, and a redirect could point anywhere.
    async with httpx.AsyncClient(
        timeout=ctx.settings.webhook_timeout, follow_redirects=False, trust_env=False
    ) as http:
        while (claimed := await _claim_next(ctx, webhook_id)) is not None:
            delivery, hook = claimed
            status_code, error = await _send(ctx, http, delivery, hook)
            await _record(ctx, delivery, status_code, error)
            log.info(
                "webhook %s: %s %s to %s: %s",
                hook.id,
                delivery.event,
                delivery.id,
                redact_url(hook.url),
                error or f"answered {status_code}",
            )
            tries += 1
    return tries


async def deliver_due(ctx: Context) -> int:
    """Send what is due now, every webhook in its lane, and wait for them; returns how many
    tries were made."""
    _quiet_httpx()
    async with ctx.store.read() as q:
        due = await q.due_webhooks(ctx.clock(), LANES)
    tried = await asyncio.gather(*(_lane(ctx, webhook_id) for webhook_id in due))
    return sum(tried)


class Lanes:
    """The loop's side: each tick starts a lane for every webhook with deliveries due that
    has none running, under the supervisor, and waits for none of them."""

    def __init__(self, ctx: Context, supervisor: Supervisor) -> None:
        self._ctx = ctx
        self._supervisor = supervisor
        self._running: dict[str, asyncio.Task[None]] = {}

    @property
    def running(self) -> list[str]:
        return sorted(self._running)

    async def tick(self) -> None:
        room = LANES - len(self._running)
        if room <= 0:
            return
        _quiet_httpx()
        async with self._ctx.store.read() as q:
            # those with a lane running may fill the first places: look past them
            due = await q.due_webhooks(self._ctx.clock(), LANES + len(self._running))
        for webhook_id in [w for w in due if w not in self._running][:room]:
            task = self._supervisor.spawn(f"webhook {webhook_id}", self._run(webhook_id))
            self._running[webhook_id] = task

    async def idle(self) -> None:
        """Wait for the lanes running now to end."""
        await asyncio.gather(*self._running.values(), return_exceptions=True)

    async def _run(self, webhook_id: str) -> None:
        try:
            await _lane(self._ctx, webhook_id)
        except Exception:  # logged; its claim expires and a later tick sends it again
            log.exception("webhook %s: sending failed", webhook_id)
        finally:
            self._running.pop(webhook_id, None)


async def prune(ctx: Context) -> int:
    async with transaction(ctx) as tx:
        return await tx.q.prune_deliveries(tx.now - KEEP_FINISHED)
