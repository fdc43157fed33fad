"""The webhooks' request and response bodies (validated further in domain/webhooks.py)."""

from __future__ import annotations

from datetime import datetime
from typing import Self

from pydantic import BaseModel, Field

from gpufleet.domain import webhooks as rules
from gpufleet.domain.webhook_targets import redact_url
from gpufleet.domain.webhooks import Webhook
from gpufleet.server.schemas.base import Record, Strict

# Checked by domain.webhooks.check_format, whose refusal names the choices.
FORMAT_FIELD = Field(None, max_length=64, description="gpufleet (the default), slack or discord")


class CreateWebhook(Strict):
    url: str = Field(min_length=1, max_length=rules.MAX_URL_LENGTH)
    events: list[str] = Field(min_length=1, max_length=8)
    secret: str | None = Field(None, max_length=rules.MAX_SECRET_LENGTH)
    format: str | None = FORMAT_FIELD


class UpdateWebhook(Strict):
    """Only the fields sent change; a secret sent as null (or "") leaves deliveries unsigned,
    a url or events sent as null are refused (a webhook has both)."""

    url: str | None = Field(None, min_length=1, max_length=rules.MAX_URL_LENGTH)
    events: list[str] | None = Field(None, min_length=1, max_length=8)
    secret: str | None = Field(None, max_length=rules.MAX_SECRET_LENGTH)
    format: str | None = FORMAT_FIELD


class WebhookOut(Record):
    id: str
    url: str  # redacted for every reader: scheme://host[:port]/… (the rest may be a secret)
    events: list[str]
    signed: bool  # whether a secret signs its deliveries (the secret is never returned)
    created_at: datetime
    created_by: str | None
    format: str  # the body's shape: gpufleet, slack or discord

    @classmethod
    def of(cls, hook: Webhook) -> Self:
        return cls.over(hook, url=redact_url(hook.url), events=sorted(e.value for e in hook.events))


class WebhookList(BaseModel):
    webhooks: list[WebhookOut]
    events: dict[str, str]  # what each subscription means, for a form to offer
    formats: dict[str, str]  # what each payload format is, for a form to offer


class DeliveryOut(Record):
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


class DeliveryList(BaseModel):
    deliveries: list[DeliveryOut]
