"""The worker a token names, kept between requests on SQLite (store/worker_cache.py): never
what a request is answered from once the worker or its token changed. On SQLite alone:
PostgreSQL keeps no such cache, and reads the worker every request."""

from __future__ import annotations

import pytest

from gpufleet.server.services import health
from tests.api.conftest import Agent, Fleet, sqlite_only


async def warm(agent: Agent) -> None:
    """A heartbeat: the token's worker is read (and, on SQLite, kept)."""
    assert (await agent.heartbeat()).status_code == 200


@sqlite_only  # the cache is SQLite's alone
async def test_a_heartbeat_of_a_known_token_reads_nothing(fleet: Fleet) -> None:
    agent = await fleet.online_worker("gpu-1")
    await warm(agent)
    cache = fleet.ctx.store.workers
    assert cache is not None and len(cache) >= 1
    generation = cache.generation

    await warm(agent)

    assert cache.generation == generation  # a heartbeat that changes nothing evicts nothing


async def test_a_rotated_token_is_refused_at_once(fleet: Fleet) -> None:
    agent = await fleet.online_worker("gpu-1")
    await warm(agent)
    old = agent.token

    new = await fleet.rotate_token(agent)

    refused = await fleet.http.post(
        "/api/workers/heartbeat", json={}, headers={"X-Worker-Token": old}
    )
    assert refused.status_code == 401, refused.text
    taken = await fleet.http.post(
        "/api/workers/heartbeat", json={}, headers={"X-Worker-Token": new}
    )
    assert taken.status_code == 200, taken.text


async def test_a_deleted_worker_token_is_refused_at_once(fleet: Fleet) -> None:
    agent = await fleet.create_worker("never-connected")  # deletable: it never connected
    await warm(agent)

    gone = await fleet.admin.delete(f"/api/admin/workers/{agent.id}")
    assert gone.status_code in (200, 204), gone.text

    assert (await agent.heartbeat()).status_code == 401


async def test_a_drained_worker_hears_it_on_its_next_heartbeat(fleet: Fleet) -> None:
    agent = await fleet.online_worker("gpu-1")
    await warm(agent)

    drained = await fleet.admin.post(f"/api/admin/workers/{agent.id}/drain")
    assert drained.status_code == 200, drained.text

    answer = await agent.heartbeat()
    assert answer.status_code == 200 and answer.json()["draining"] is True


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
async def test_a_worker_marked_offline_is_seen_offline_by_its_next_heartbeat(
    fleet: Fleet,
) -> None:
    """The health sweep marks a silent worker offline; its next heartbeat must see that (and
    be told to register again), not the idle worker it was when its token was last read."""
    agent = await fleet.online_worker("gpu-1")
    await warm(agent)
    fleet.clock.advance(fleet.ctx.settings.heartbeat_timeout + 1)
    await health.mark_silent_workers_offline(fleet.ctx)
    assert (await fleet.admin.get(f"/api/admin/workers/{agent.id}")).json()["status"] == "offline"

    answer = await agent.heartbeat()

    assert answer.status_code == 409, answer.text
    assert "register again" in answer.json()["detail"]


async def test_an_offer_is_what_the_next_heartbeat_holds(fleet: Fleet) -> None:
    """A job offered since the last heartbeat: the worker now holds it (the heartbeat that
    says it runs nothing after the grace disowns it; here, within the grace, it keeps it)."""
    agent = await fleet.online_worker("gpu-1")
    await warm(agent)
    job = await fleet.submit()
    offer = await agent.next_offer()

    answer = await agent.heartbeat(current_job_id=job["id"])

    assert answer.status_code == 200 and answer.json()["status"] == "busy", answer.text
    assert offer["job_id"] == job["id"]


async def test_a_worker_drained_while_it_runs_a_job_is_offered_nothing_when_it_ends(
    fleet: Fleet,
) -> None:
    """The drain since the worker's last report is what the job's end sees (its token's
    worker, kept on SQLite, was read again), not the worker as its last report left it."""
    agent = await fleet.online_worker("gpu-1")
    first = await fleet.submit()
    offer = await agent.next_offer()
    await agent.run(offer)  # two reports: the worker is read, and kept
    drained = await fleet.admin.post(f"/api/admin/workers/{agent.id}/drain")
    assert drained.status_code == 200, drained.text
    waiting = await fleet.submit()

    await agent.finish(offer)

    assert (await fleet.job(first["id"]))["status"] == "completed"
    assert (await fleet.job(waiting["id"]))["status"] == "queued"
    assert (await agent.info())["status"] == "draining"


@sqlite_only  # the cache is SQLite's alone
async def test_a_connected_workers_first_heartbeat_reads_nothing_after_the_refresh(
    fleet: Fleet,
) -> None:
    """Registering and opening the stream write the worker, and drop its token from the
    cache; the cache's loop reads it again (for every such worker, in one statement), so the
    worker's first heartbeat after connecting reads nothing (#39 goal 3)."""
    from tests.api.test_job_cost import counting

    agent = await fleet.online_worker("gpu-1")  # registered, its stream open
    await fleet.ctx.store.refresh_workers()

    with counting(fleet, this_task=True) as seen:
        assert (await agent.heartbeat()).status_code == 200

    assert seen == []


@sqlite_only
async def test_the_refresh_reads_many_tokens_in_one_statement(fleet: Fleet) -> None:
    from tests.api.test_job_cost import counting

    agents = [await fleet.online_worker(f"gpu-{i}") for i in range(3)]
    for agent in agents:
        await warm(agent)
    for agent in agents:
        drained = await fleet.admin.post(f"/api/admin/workers/{agent.id}/drain")
        assert drained.status_code == 200, drained.text

    with counting(fleet, this_task=True) as seen:
        await fleet.ctx.store.refresh_workers()

    assert len(seen) == 1
    for agent in agents:  # each answered from the record read again: draining
        answer = await agent.heartbeat()
        assert answer.status_code == 200 and answer.json()["draining"] is True


@sqlite_only
async def test_a_token_rotated_or_deleted_is_not_kept_by_the_refresh(fleet: Fleet) -> None:
    rotated = await fleet.online_worker("gpu-1")
    deleted = await fleet.create_worker("never-connected")  # deletable: it never connected
    await warm(rotated)
    await warm(deleted)
    old = rotated.token
    await fleet.rotate_token(rotated)
    gone = await fleet.admin.delete(f"/api/admin/workers/{deleted.id}")
    assert gone.status_code in (200, 204), gone.text

    await fleet.ctx.store.refresh_workers()

    refused = await fleet.http.post(
        "/api/workers/heartbeat", json={}, headers={"X-Worker-Token": old}
    )
    assert refused.status_code == 401, refused.text
    assert (await deleted.heartbeat()).status_code == 401
