"""Webhook notifications: what an admin may subscribe to, what is sent, how it is signed,
and when a failed delivery is tried again. Pure rules; the sending is server/services."""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from urllib.parse import urlsplit

from gpufleet.domain.states import JobStatus
from gpufleet.errors import InvalidInput

SIGNATURE_HEADER = "X-Gpufleet-Signature"
EVENT_HEADER = "X-Gpufleet-Event"
DELIVERY_HEADER = "X-Gpufleet-Delivery"
MAX_URL_LENGTH = 2048
MAX_SECRET_LENGTH = 256
MIN_SECRET_LENGTH = 16  # a short secret is guessed from one signed body, offline
MAX_ATTEMPTS = 8  # the first try and seven retries, over about ten minutes
FIRST_RETRY_S = 5.0
LONGEST_WAIT_S = 300.0
SEND_TIMEOUT_S = 10.0  # the default deadline of one send, connect to last byte


class Subscription(StrEnum):
    """What an admin ticks when configuring a webhook."""

    JOB_ENDED = "job.ended"  # completed, failed or cancelled
    JOB_FAILED = "job.failed"
    WORKER_LOST = "worker.lost"
    JOB_APPROVED = "job.approved"
    JOB_REJECTED = "job.rejected"
    GPU_FAULT = "gpu.fault"


SUBSCRIPTION_HELP: dict[Subscription, str] = {
    Subscription.JOB_ENDED: "a job completed, failed or was cancelled",
    Subscription.JOB_FAILED: "a job failed for good (no retries left)",
    Subscription.WORKER_LOST: "a worker stopped sending heartbeats and was marked offline",
    Subscription.JOB_APPROVED: "a job held for approval was approved (its submitter hears it)",
    Subscription.JOB_REJECTED: "a job held for approval was rejected (its submitter hears why)",
    Subscription.GPU_FAULT: "a worker took a faulty GPU out (XID, ECC, fell off the bus)",
}


class Event(StrEnum):
    """What a delivery's body says happened (`event` in the payload)."""

    JOB_COMPLETED = "job.completed"
    JOB_FAILED = "job.failed"
    JOB_CANCELLED = "job.cancelled"
    WORKER_LOST = "worker.lost"
    JOB_APPROVED = "job.approved"
    JOB_REJECTED = "job.rejected"
    GPU_FAULT = "gpu.fault"
    TEST = "test"  # the UI's *Send test*: sent to one webhook, whatever it subscribes to


class PayloadFormat(StrEnum):
    """The shape of a delivery's body (domain/webhook_formats.py renders the others from
    gpufleet's own)."""

    GPUFLEET = "gpufleet"  # {"id", "event", "occurred_at", ...}: all the facts, for programs
    SLACK = "slack"  # a Slack incoming webhook's {"text", "blocks"}
    DISCORD = "discord"  # a Discord webhook's {"content"}


FORMAT_HELP: dict[PayloadFormat, str] = {
    PayloadFormat.GPUFLEET: "gpufleet's own JSON, every fact (for your programs)",
    PayloadFormat.SLACK: 'a Slack incoming webhook ({"text": ...})',
    PayloadFormat.DISCORD: 'a Discord webhook ({"content": ...})',
}


class DeliveryStatus(StrEnum):
    PENDING = "pending"  # waiting for its first try or its next retry
    DELIVERED = "delivered"  # the receiver answered 2xx
    FAILED = "failed"  # no 2xx after MAX_ATTEMPTS tries: given up


@dataclass(frozen=True, slots=True)
class Webhook:
    id: str
    url: str = field(repr=False)  # may hold credentials: shown only as redact_url gives it
    events: frozenset[Subscription]
    secret_sealed: str | None = field(repr=False)  # never leaves the server
    created_at: datetime
    created_by: str | None
    format: PayloadFormat = PayloadFormat.GPUFLEET

    @property
    def signed(self) -> bool:
        return self.secret_sealed is not None

    def hears(self, event: Event) -> bool:
        return bool(self.events & HEARD_BY[event])


@dataclass(frozen=True, slots=True)
class Delivery:
    id: str
    webhook_id: str
    event: str
    body: str
    status: DeliveryStatus
    attempts: int
    created_at: datetime
    next_at: datetime | None
    last_attempt_at: datetime | None
    status_code: int | None
    error: str | None


# Which subscriptions hear each event.
HEARD_BY: dict[Event, frozenset[Subscription]] = {
    Event.JOB_COMPLETED: frozenset({Subscription.JOB_ENDED}),
    Event.JOB_FAILED: frozenset({Subscription.JOB_ENDED, Subscription.JOB_FAILED}),
    Event.JOB_CANCELLED: frozenset({Subscription.JOB_ENDED}),
    Event.WORKER_LOST: frozenset({Subscription.WORKER_LOST}),
    Event.JOB_APPROVED: frozenset({Subscription.JOB_APPROVED}),
    Event.JOB_REJECTED: frozenset({Subscription.JOB_REJECTED}),
    Event.GPU_FAULT: frozenset({Subscription.GPU_FAULT}),
    Event.TEST: frozenset(),
}

JOB_END_EVENTS: dict[JobStatus, Event] = {
    JobStatus.COMPLETED: Event.JOB_COMPLETED,
    JobStatus.FAILED: Event.JOB_FAILED,
    JobStatus.CANCELLED: Event.JOB_CANCELLED,
}


def check_url(url: str) -> str:
    """An absolute http(s) URL with a host, or InvalidInput saying what to fix."""
    url = url.strip()
    if not url:
        raise InvalidInput("the webhook needs a URL, such as https://hooks.example.com/gpufleet")
    if len(url) > MAX_URL_LENGTH:
        raise InvalidInput(f"the URL is longer than {MAX_URL_LENGTH} characters; shorten it")
    if any(ord(c) < 0x21 or c == "\x7f" for c in url):
        raise InvalidInput("the URL contains spaces or control characters; remove them")
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 (raises on a port that is not a number)
    except ValueError as exc:
        raise InvalidInput(f"the URL cannot be read ({exc}); check its host and port") from exc
    if parts.scheme.lower() not in ("http", "https"):
        raise InvalidInput(
            f"the URL must start with http:// or https:// (not {parts.scheme or 'nothing'}:)"
        )
    if not parts.hostname:
        raise InvalidInput("the URL has no host; write it as https://host[:port]/path")
    if parts.path.endswith("/…"):
        raise InvalidInput(
            "the URL is one as gpufleet shows it, its path hidden; give the whole URL"
        )
    return url


def check_subscriptions(events: Iterable[str]) -> list[Subscription]:
    chosen = sorted(set(events))
    known = {s.value for s in Subscription}
    unknown = [e for e in chosen if e not in known]
    if unknown:
        raise InvalidInput(
            f"unknown event(s) {', '.join(unknown)}; choose from {', '.join(sorted(known))}"
        )
    if not chosen:
        raise InvalidInput("choose at least one event: " + ", ".join(sorted(known)))
    return [Subscription(e) for e in chosen]


def check_format(value: str | None) -> PayloadFormat:
    """The payload format named (None: gpufleet's own), or InvalidInput naming the choices."""
    if value is None:
        return PayloadFormat.GPUFLEET
    try:
        return PayloadFormat(value.strip().lower())
    except ValueError:
        choices = ", ".join(f.value for f in PayloadFormat)
        shown = value[:32] + ("…" if len(value) > 32 else "")
        raise InvalidInput(f"unknown format {shown!r}; choose one of {choices}") from None


def check_secret(secret: str | None) -> str | None:
    if secret is None or secret == "":
        return None
    if len(secret) > MAX_SECRET_LENGTH:
        raise InvalidInput(f"the secret is longer than {MAX_SECRET_LENGTH} characters")
    if secret != secret.strip():
        raise InvalidInput("the secret starts or ends with whitespace; remove it")
    if len(secret) < MIN_SECRET_LENGTH:
        raise InvalidInput(
            f"the secret is {len(secret)} characters; a webhook secret needs at least "
            f"{MIN_SECRET_LENGTH} (make one with: openssl rand -hex 32)"
        )
    return secret


def sign(secret: str, body: bytes) -> str:
    """The signature header's value: HMAC-SHA256 of the raw body under the secret."""
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def retry_in(attempts: int) -> float | None:
    """Seconds until the next try after `attempts` failed tries; None: give up."""
    if attempts >= MAX_ATTEMPTS:
        return None
    return min(FIRST_RETRY_S * 2.0 ** (attempts - 1), LONGEST_WAIT_S)


def after_try(attempts: int, status_code: int | None) -> tuple[DeliveryStatus, float | None]:
    """Where a delivery stands after its `attempts`-th try answered `status_code` (None: no
    answer at all), and in how many seconds it is tried again. Any 2xx delivers; anything
    else is retried with backoff until MAX_ATTEMPTS tries have failed."""
    if status_code is not None and 200 <= status_code < 300:
        return DeliveryStatus.DELIVERED, None
    wait = retry_in(attempts)
    return (DeliveryStatus.FAILED, None) if wait is None else (DeliveryStatus.PENDING, wait)
