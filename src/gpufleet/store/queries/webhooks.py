"""Webhooks and their outbox of deliveries (domain/webhooks.py)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

import sqlalchemy as sa

from gpufleet.domain.webhooks import Delivery, DeliveryStatus, Webhook
from gpufleet.store.queries import rows
from gpufleet.store.queries.base import Prebuilt, QueryBase, by
from gpufleet.store.tables import webhook_deliveries, webhooks

_WEBHOOKS = Prebuilt(sa.select(webhooks).order_by(webhooks.c.created_at, webhooks.c.id))
# Each replica asks every second (`delivery.INTERVAL_S`), at rest too: built once (#32).
_DUE_WEBHOOKS = (
    sa.select(webhook_deliveries.c.webhook_id)
    .where(
        webhook_deliveries.c.status == DeliveryStatus.PENDING.value,
        webhook_deliveries.c.next_at <= by("now"),
        sa.or_(
            webhook_deliveries.c.claimed_until.is_(None),
            webhook_deliveries.c.claimed_until < by("now"),
        ),
    )
    .group_by(webhook_deliveries.c.webhook_id)
    .order_by(sa.func.min(webhook_deliveries.c.next_at), webhook_deliveries.c.webhook_id)
    .limit(sa.bindparam("limit", type_=sa.Integer))
)


class WebhookQueries(QueryBase):
    async def insert_webhook(self, values: Mapping[str, Any]) -> None:
        await self.conn.execute(sa.insert(webhooks).values(**values))

    async def list_webhooks(self) -> list[Webhook]:
        return [rows.webhook(m) for m in await self._mapped(_WEBHOOKS.plain)]

    async def get_webhook(self, webhook_id: str) -> Webhook | None:
        stmt = sa.select(webhooks).where(webhooks.c.id == webhook_id)
        row = await self._first(stmt)
        return rows.webhook(row) if row else None

    async def update_webhook(self, webhook_id: str, **values: Any) -> None:
        await self.conn.execute(
            sa.update(webhooks).where(webhooks.c.id == webhook_id).values(**values)
        )

    async def delete_webhook(self, webhook_id: str) -> bool:
        await self.conn.execute(
            sa.delete(webhook_deliveries).where(webhook_deliveries.c.webhook_id == webhook_id)
        )
        return await self._rowcount(sa.delete(webhooks).where(webhooks.c.id == webhook_id)) == 1

    async def insert_deliveries(self, rows: Sequence[Mapping[str, Any]]) -> None:
        if rows:
            await self.conn.execute(sa.insert(webhook_deliveries), list(rows))

    @staticmethod
    def _due(now: datetime) -> sa.ColumnElement[bool]:
        d = webhook_deliveries.c
        return sa.and_(
            d.status == DeliveryStatus.PENDING.value,
            d.next_at <= now,
            sa.or_(d.claimed_until.is_(None), d.claimed_until < now),
        )

    async def due_webhooks(self, now: datetime, limit: int) -> list[str]:
        """The webhooks with a delivery due and unclaimed, the longest waiting first."""
        found = await self.conn.execute(_DUE_WEBHOOKS, {"now": now, "limit": limit})
        return list(found.scalars())

    async def due_deliveries(self, now: datetime, limit: int, webhook_id: str) -> list[str]:
        """That webhook's due, unclaimed deliveries, in the order they are sent."""
        d = webhook_deliveries.c
        stmt = (
            sa.select(d.id)
            .where(self._due(now), d.webhook_id == webhook_id)
            .order_by(d.next_at, d.created_at, d.id)
            .limit(limit)
        )
        return list((await self.conn.execute(stmt)).scalars())

    async def claim_delivery(self, delivery_id: str, now: datetime, until: datetime) -> bool:
        """Take a due delivery for sending until `until`: one replica wins (the update is
        conditional, and PostgreSQL re-reads the row for a second updater once the first
        commits)."""
        stmt = (
            sa.update(webhook_deliveries)
            .where(webhook_deliveries.c.id == delivery_id, self._due(now))
            .values(claimed_until=until)
        )
        return await self._rowcount(stmt) == 1

    async def get_delivery(self, delivery_id: str) -> Delivery | None:
        stmt = sa.select(webhook_deliveries).where(webhook_deliveries.c.id == delivery_id)
        row = await self._first(stmt)
        return rows.delivery(row) if row else None

    async def update_delivery(self, delivery_id: str, **values: Any) -> None:
        await self.conn.execute(
            sa.update(webhook_deliveries)
            .where(webhook_deliveries.c.id == delivery_id)
            .values(**values)
        )

    async def list_deliveries(self, webhook_id: str, limit: int) -> list[Delivery]:
        d = webhook_deliveries.c
        stmt = (
            sa.select(webhook_deliveries)
            .where(d.webhook_id == webhook_id)
            .order_by(d.created_at.desc(), d.id.desc())
            .limit(limit)
        )
        return [rows.delivery(m) for m in await self._mapped(stmt)]

    async def prune_deliveries(self, before: datetime) -> int:
        """Forget finished deliveries created before `before` (the log is kept bounded)."""
        d = webhook_deliveries.c
        stmt = sa.delete(webhook_deliveries).where(
            d.status != DeliveryStatus.PENDING.value, d.created_at < before
        )
        return await self._rowcount(stmt)
