"""Webhook notifications (`*`: a webhook sends the fleet's news to any URL it names)."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends

from gpufleet.domain.permissions import ALL
from gpufleet.domain.webhooks import FORMAT_HELP, SUBSCRIPTION_HELP
from gpufleet.server.deps import Client, Ctx, require
from gpufleet.server.routes import api_router
from gpufleet.server.schemas.base import Ok
from gpufleet.server.schemas.webhooks import (
    CreateWebhook,
    DeliveryList,
    DeliveryOut,
    UpdateWebhook,
    WebhookList,
    WebhookOut,
)
from gpufleet.server.services import webhooks
from gpufleet.server.services.auth import Principal

router = api_router(prefix="/api/admin/webhooks", tags=["admin"])
Root = Annotated[Principal, Depends(require(ALL))]


@router.get("", response_model=WebhookList)
async def list_webhooks(ctx: Ctx, who: Root) -> WebhookList:
    hooks = await webhooks.list_all(ctx)
    return WebhookList(
        webhooks=[WebhookOut.of(h) for h in hooks],
        events={s.value: text for s, text in SUBSCRIPTION_HELP.items()},
        formats={f.value: text for f, text in FORMAT_HELP.items()},
    )


@router.post("", response_model=WebhookOut, status_code=201)
async def create_webhook(ctx: Ctx, who: Root, client: Client, body: CreateWebhook) -> WebhookOut:
    hook = await webhooks.create(
        ctx, body.url, body.events, body.secret, who.actor, client, fmt=body.format
    )
    return WebhookOut.of(hook)


@router.patch("/{webhook_id}", response_model=WebhookOut)
async def update_webhook(
    ctx: Ctx, who: Root, client: Client, webhook_id: str, body: UpdateWebhook
) -> WebhookOut:
    changes = body.model_dump(exclude_unset=True)
    return WebhookOut.of(await webhooks.update(ctx, webhook_id, changes, who.actor, client))


@router.delete("/{webhook_id}", response_model=Ok)
async def delete_webhook(ctx: Ctx, who: Root, client: Client, webhook_id: str) -> Ok:
    await webhooks.delete(ctx, webhook_id, who.actor, client)
    return Ok()


@router.post("/{webhook_id}/test", response_model=DeliveryOut, status_code=202)
async def test_webhook(ctx: Ctx, who: Root, client: Client, webhook_id: str) -> DeliveryOut:
    return DeliveryOut.of(await webhooks.send_test(ctx, webhook_id, who.actor, client))


@router.get("/{webhook_id}/deliveries", response_model=DeliveryList)
async def list_deliveries(ctx: Ctx, who: Root, webhook_id: str) -> DeliveryList:
    found = await webhooks.deliveries(ctx, webhook_id)
    return DeliveryList(deliveries=[DeliveryOut.of(d) for d in found])
