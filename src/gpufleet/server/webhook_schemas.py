"""The webhooks' request and response bodies (validated further in domain/webhooks.py)."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, Field

from gpufleet.domain import webhooks as rules
from gpufleet.domain.webhooks import Delivery, Webhook
from gpufleet.server.schemas import Strict


class CreateWebhook(Strict):
    url: str = Field(min_length=1, max_length=rules.MAX_URL_LENGTH)
    events: list[str] = Field(min_length=1, max_length=8)
    secret: str | None = Field(None, max_length=rules.MAX_SECRET_LENGTH)


class WebhookOut(BaseModel):
    id: str
    url: str
    events: list[str]
    signed: bool  # whether a secret signs its deliveries (the secret is never returned)
    created_at: datetime
    created_by: str | None

    @classmethod
    def of(cls, hook: Webhook) -> WebhookOut:
        return cls(
            id=hook.id,
            url=hook.url,
            events=sorted(e.value for e in hook.events),
            signed=hook.signed,
            created_at=hook.created_at,
            created_by=hook.created_by,
        )


class WebhookList(BaseModel):
    webhooks: list[WebhookOut]
    events: dict[str, str]  # what each subscription means, for a form to offer


class DeliveryOut(BaseModel):
    id: str
    webhook_id: str
    event: str
    status: str
    attempts: int
    created_at: datetime
    last_attempt_at: datetime | None
    next_at: datetime | None
    status_code: int | None
    error: str | None

    @classmethod
    def of(cls, d: Delivery) -> DeliveryOut:
        return cls(
            id=d.id,
            webhook_id=d.webhook_id,
            event=d.event,
            status=d.status.value,
            attempts=d.attempts,
            created_at=d.created_at,
            last_attempt_at=d.last_attempt_at,
            next_at=d.next_at,
            status_code=d.status_code,
            error=d.error,
        )


class DeliveryList(BaseModel):
    deliveries: list[DeliveryOut]
