"""`GET /api/events`: change nudges for live views (the web UI), as Server-Sent Events.

A nudge says only what changed (`workers`, `jobs`, `teams`, `fleet`, `pools`, `audit` or
`webhooks`); the page re-reads the JSON API, which stays the one source of truth. Bursts are
coalesced so a busy fleet costs one fetch a tick.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Annotated

from fastapi import Depends
from starlette.responses import StreamingResponse

from gpufleet.domain.permissions import ADMIN_AUDIT, ALL, QUEUE_READ, allows
from gpufleet.server import sse
from gpufleet.server.deps import Ctx, require
from gpufleet.server.hub import (
    AUDIT_TOPIC,
    FLEET_TOPIC,
    JOBS_TOPIC,
    POOLS_TOPIC,
    TEAMS_TOPIC,
    WEBHOOKS_TOPIC,
    WORKERS_TOPIC,
)
from gpufleet.server.routes import api_router
from gpufleet.server.schemas.base import SSE_RESPONSE
from gpufleet.server.services import auth
from gpufleet.server.services.auth import Principal

router = api_router(tags=["events"])
Reader = Annotated[Principal, Depends(require(QUEUE_READ))]
COALESCE_SECONDS = 0.5


@router.get("/api/events", responses=SSE_RESPONSE)
async def events(ctx: Ctx, who: Reader) -> StreamingResponse:
    """`jobs`, `teams`, `workers`, `fleet` and `pools` nudges: every signed-in key sees the
    fleet (read-only, `/api/fleet/...`) and the pools (`/api/capacity`), so each is told when
    they change; `audit` (an event was
    recorded) for keys with `admin.audit`, `webhooks` (a delivery queued or tried) for `*`."""
    topics = [JOBS_TOPIC, TEAMS_TOPIC, WORKERS_TOPIC, FLEET_TOPIC, POOLS_TOPIC]
    for needed, topic in ((ADMIN_AUDIT, AUDIT_TOPIC), (ALL, WEBHOOKS_TOPIC)):
        if allows(who.permissions, needed):
            topics.append(topic)
    return sse.stream(_nudges(ctx, who, topics))


async def _nudges(ctx: Ctx, who: Principal, topics: list[str]) -> AsyncIterator[bytes]:
    """Ends when the orchestrator stops or the key is revoked (the subscription closes)."""
    async with auth.subscription(ctx, who, *topics) as sub:
        yield b"retry: 2000\n" + sse.frame({"type": "hello", "topics": topics}, event="hello")
        while not sub.closed:
            if not await sub.wait(ctx.keepalive.interval):
                yield sse.ping()
                continue
            if sub.closed:
                break
            await asyncio.sleep(COALESCE_SECONDS)
            for topic in sorted(sub.take_fired().intersection(topics)):
                yield sse.frame({"type": topic}, event=topic)
