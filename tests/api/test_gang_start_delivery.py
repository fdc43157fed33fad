"""How a gang node's `job_start` reaches its worker (#35): handed over to the node's stream
by the transaction that saw the last acknowledgement, never read back from the database;
and derived again from the node's state by a stream that did not send it (a new stream
after a broken one), once, until the node says it runs (docs/protocol.md)."""

from __future__ import annotations

from typing import Any

from sqlalchemy import event

from tests.api.conftest import Agent, Fleet, both_databases
from tests.api.test_gang_rendezvous import ack, expect, gang, node_report, quiet

pytestmark = both_databases


async def starts_on(agent: Agent) -> list[dict[str, Any]]:
    return [e for e in await quiet(agent) if e["type"] == "job_start"]


async def test_a_node_whose_stream_broke_after_its_start_gets_it_once_on_its_new_stream(
    fleet: Fleet,
) -> None:
    _job, agents, offers = await gang(fleet, 2)
    for agent, offer in zip(agents, offers, strict=True):
        assert (await ack(agent, offer)).status_code == 200
    first = await expect(agents[1], "job_start")
    assert await expect(agents[0], "job_start") == first | {"node_rank": 0}

    # The stream broke with the start in flight: the new one sends it again, once.
    await agents[1].open_stream()
    assert await expect(agents[1], "job_start") == first
    assert await starts_on(agents[1]) == []
    # A command wakes the stream to read what waits: the start it sent is not sent again.
    drained = await fleet.admin.post(f"/api/admin/workers/{agents[1].id}/drain")
    assert drained.status_code == 200, drained.text
    assert agents[1].stream is not None
    assert (await agents[1].stream.expect("drain"))["type"] == "drain"
    assert await starts_on(agents[1]) == []

    # Once the node runs, a new stream has no start to send.
    assert (await node_report(agents[1], offers[1], "running")).status_code == 200
    await agents[1].open_stream()
    assert await starts_on(agents[1]) == []
    assert await starts_on(agents[0]) == []  # the other node's stream, untouched throughout


async def test_a_node_that_connects_after_the_last_acknowledgement_gets_its_start(
    fleet: Fleet,
) -> None:
    _job, agents, offers = await gang(fleet, 2)
    assert (await ack(agents[1], offers[1])).status_code == 200
    assert agents[1].stream is not None
    await agents[1].stream.close()
    assert (await ack(agents[0], offers[0])).status_code == 200
    first = await expect(agents[0], "job_start")

    await agents[1].open_stream()
    assert await expect(agents[1], "job_start") == first | {"node_rank": 1}
    assert await starts_on(agents[1]) == []


async def test_the_start_is_handed_to_the_streams_without_a_write_or_a_read_back(
    fleet: Fleet,
) -> None:
    """The last acknowledgement hands every node's start to its stream: nothing is queued in
    the database for the streams to read and delete, a transaction each (#35: a 32-node
    gang's streams took 185 ms doing so on PostgreSQL)."""
    _job, agents, offers = await gang(fleet, 3)
    for agent, offer in zip(agents[:-1], offers[:-1], strict=True):
        assert (await ack(agent, offer)).status_code == 200
    touched: list[str] = []

    def capture(_conn: Any, _cur: Any, statement: str, *_: Any) -> None:
        if "worker_events" in statement:
            touched.append(statement)

    engine = fleet.ctx.store.engine.sync_engine
    event.listen(engine, "before_cursor_execute", capture)
    try:
        assert (await ack(agents[-1], offers[-1])).status_code == 200
        starts = [await expect(a, "job_start") for a in agents]
    finally:
        event.remove(engine, "before_cursor_execute", capture)

    assert [s["node_rank"] for s in starts] == [0, 1, 2]
    assert touched == []
