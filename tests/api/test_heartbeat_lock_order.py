"""The heartbeat flush locks worker rows in the one order every other writer does (id order):
in the order heartbeats came it deadlocked with a gang's node report, which locks every
node's worker in id order, and PostgreSQL aborted one of them (#35: the report answered 503).
"""

from __future__ import annotations

import asyncio

import pytest

from gpufleet.server.context import transaction
from gpufleet.server.services import agents
from tests.api.conftest import Fleet, waits_on_a_lock

pytestmark = pytest.mark.parametrize(
    "database_url", [pytest.param("postgres", marks=pytest.mark.postgres)], indirect=True
)


async def test_a_heartbeat_flush_waits_behind_a_node_report_instead_of_deadlocking(
    fleet: Fleet, database_url: str
) -> None:
    one = await fleet.online_worker("one")
    two = await fleet.online_worker("two")
    low, high = sorted([one.id, two.id])
    async with fleet.ctx.store.read() as q:
        stored = {w: await q.get_worker(w) for w in (low, high)}
    for worker_id in (high, low):  # heard in the other order than the rows' ids
        worker = stored[worker_id]
        assert worker is not None
        fleet.ctx.heartbeats.heard(
            worker_id, fleet.clock.advance(1), token_issued_at=worker.token_issued_at
        )
    async with transaction(fleet.ctx) as tx:  # a gang's report: its nodes' workers, in id order
        await tx.q.lock_workers([low])
        flush = asyncio.create_task(agents.flush_heartbeats(fleet.ctx))
        await waits_on_a_lock(database_url, "the heartbeat flush waiting on the report's lock")
        await tx.q.lock_workers([low, high])
    assert await asyncio.wait_for(flush, 10) == 2
    async with fleet.ctx.store.read() as q:
        beats = [(await q.get_worker(w)) for w in (low, high)]
    assert all(w is not None and w.last_heartbeat is not None for w in beats)
