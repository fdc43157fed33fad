"""The heartbeat flush locks worker rows in the one order every other writer does (id order):
in the order heartbeats came it deadlocked with a gang's node report, which locks every
node's worker in id order, and PostgreSQL aborted one of them (#35: the report answered 503).
And a gang node's completion besides rank 0 locks its own worker alone: locking every node's
held up the next gang's acknowledgement on a worker that rank 0's completion had freed.
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


async def test_a_nodes_completion_besides_rank_0_waits_on_no_other_nodes_worker(
    fleet: Fleet,
) -> None:
    from tests.api.test_gang_rendezvous import gang, node_report, start_all

    job, agents, offers = await gang(fleet, 2)
    await start_all(agents, offers)
    async with transaction(fleet.ctx) as tx:  # rank 0's worker, taken by another writer
        await tx.q.lock_workers([agents[0].id])
        done = await asyncio.wait_for(node_report(agents[1], offers[1], "completed"), 10)
        assert done.status_code == 200, done.text
    assert (await node_report(agents[0], offers[0], "completed")).status_code == 200
    assert (await fleet.job(job["id"]))["status"] == "completed"
