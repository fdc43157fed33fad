"""What the worker view tells an operator about a worker's connection (#15.3): a worker that
never started, one whose token was rotated, and one whose process exited are not all
"connecting", and only an open stream has an uptime."""

from __future__ import annotations

from typing import Any

import httpx

from gpufleet.server.services import agents, health
from tests.api.conftest import Agent, Fleet, both_databases
from tests.waiting import wait_until_async


async def view(fleet: Fleet, agent: Agent) -> dict[str, Any]:
    answer = await fleet.admin.get(f"/api/admin/workers/{agent.id}")
    assert answer.status_code == 200, answer.text
    one: dict[str, Any] = answer.json()
    listed = (await fleet.admin.get("/api/admin/workers")).json()["workers"]
    (item,) = [w for w in listed if w["id"] == agent.id]
    assert {k: one[k] for k in item} == item  # the list says the same
    return one


async def test_a_worker_that_never_started_says_never_connected_and_is_never_lost(
    fleet: Fleet,
) -> None:
    """#33.11: the sweep marked it offline ("lost: no heartbeat") though it never had one."""
    agent = await fleet.create_worker("never-started", worker_type="persistent")

    created = await view(fleet, agent)
    fleet.clock.advance(fleet.ctx.settings.heartbeat_timeout + 1)
    await health.mark_silent_workers_offline(fleet.ctx)
    later = await view(fleet, agent)

    assert created["status"] == "connecting"
    assert (created["presence"], created["presence_text"]) == ("never_connected", "never connected")
    assert created["up_since"] is None
    assert later["status"] == "connecting"  # awaited, not lost: nothing ran there
    assert later["presence_text"] == "never connected"
    counts = (await fleet.admin.get("/api/admin/workers")).json()["counts"]
    assert (counts["never_connected"], counts["offline"], counts["connecting"]) == (1, 0, 0)


async def test_a_connected_worker_counts_its_uptime_from_its_stream(fleet: Fleet) -> None:
    agent = await fleet.online_worker("streaming")

    seen = await view(fleet, agent)

    assert (seen["status"], seen["presence"], seen["presence_text"]) == ("idle", "idle", "idle")
    assert seen["up_since"] == seen["connected_at"] is not None


async def test_a_rotated_token_says_the_worker_is_awaited_and_stops_its_uptime(
    fleet: Fleet,
) -> None:
    agent = await fleet.online_worker("rotated")
    assert agent.stream is not None
    fleet.clock.advance(5)

    await fleet.rotate_token(agent)
    assert await agent.stream.wait_closed()
    seen = await view(fleet, agent)
    fleet.clock.advance(fleet.ctx.settings.heartbeat_timeout + 1)
    await health.mark_silent_workers_offline(fleet.ctx)
    offline = await view(fleet, agent)

    assert seen["status"] == "connecting"
    assert seen["presence"] == "token_rotated"
    assert seen["presence_text"] == "token rotated, waiting for the worker"
    assert seen["up_since"] is None and seen["token_issued_at"] > seen["connected_at"]
    assert offline["status"] == "offline"
    assert offline["presence_text"] == "token rotated, waiting for the worker"


@both_databases
async def test_a_heartbeat_the_old_token_sent_as_the_rotation_committed_is_not_written(
    fleet: Fleet,
) -> None:
    """A heartbeat authenticated with the old token just before a rotation committed, and
    kept after it: written, it would say the worker was heard since, and the worker page
    would say "disconnected" for a worker that cannot come back with its old token."""
    agent = await fleet.online_worker("in-flight")
    assert agent.stream is not None
    async with fleet.ctx.store.read() as q:
        as_authenticated = await q.get_worker(agent.id)  # what the old token's request saw
    assert as_authenticated is not None
    fleet.clock.advance(5)
    await fleet.rotate_token(agent)
    assert await agent.stream.wait_closed()
    fleet.clock.advance(0.2)  # the request goes on, and is kept as heard after the rotation

    await agents.heartbeat(fleet.ctx, as_authenticated, agent.id, None, says_no_job=True)
    assert await agents.flush_heartbeats(fleet.ctx) == 1
    seen = await view(fleet, agent)

    assert seen["presence"] == "token_rotated", seen
    assert seen["last_heartbeat"] < seen["token_issued_at"]


async def test_a_worker_back_with_its_new_token_is_idle_again(fleet: Fleet) -> None:
    agent = await fleet.online_worker("restarted")
    fleet.clock.advance(5)
    agent.token = await fleet.rotate_token(agent)
    fleet.clock.advance(5)

    await agent.connect(gpu_count=1)
    seen = await view(fleet, agent)

    assert (seen["status"], seen["presence"]) == ("idle", "idle")
    assert seen["up_since"] is not None


async def test_a_worker_whose_stream_ended_says_disconnected_without_an_uptime(
    fleet: Fleet,
) -> None:
    agent = await fleet.online_worker("exited")
    assert agent.stream is not None
    fleet.clock.advance(5)

    await agent.stream.close()

    async def noticed() -> httpx.Response | None:  # the server notices it in its own time
        seen = await fleet.admin.get(f"/api/admin/workers/{agent.id}")
        return seen if seen.json()["presence"] == "disconnected" else None

    seen = await wait_until_async(
        noticed, timeout=2.5, message="the worker's presence to read disconnected", interval=0.05
    )

    assert seen.json()["status"] == "connecting"
    assert seen.json()["presence_text"] == "disconnected, waiting for it to reconnect"
    assert seen.json()["up_since"] is None
