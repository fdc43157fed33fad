"""What an admin does to workers: create, list, rotate tokens, drain, delete."""

from __future__ import annotations

from tests.api.conftest import Fleet

LISTED_FIELDS = {
    "id",
    "name",
    "status",
    "worker_type",
    "gpu_count",
    "gpu_name",
    "labels",
    "last_heartbeat",
    "gpu_vram_gb",
    "accelerator_type",
    "current_job_id",
}


async def test_creating_a_worker_shows_its_token_once(fleet: Fleet) -> None:
    answer = await fleet.admin.post(
        "/api/admin/workers",
        json={
            "name": "gpu-worker-1",
            "worker_type": "persistent",
            "labels": {"location": "datacenter-a", "gpu_type": "a100"},
        },
    )

    assert answer.status_code == 201
    created = answer.json()
    assert set(created) == {"worker_id", "token", "name"}
    assert created["worker_id"].startswith("w_")
    assert created["token"].startswith("wt_")
    assert created["name"] == "gpu-worker-1"
    listing = await fleet.admin.get("/api/admin/workers")
    one = await fleet.admin.get(f"/api/admin/workers/{created['worker_id']}")
    assert created["token"] not in listing.text
    assert created["token"] not in one.text


async def test_the_worker_list_has_the_documented_shape(fleet: Fleet) -> None:
    agent = await fleet.create_worker(
        "gpu-worker-1", labels={"location": "datacenter-a"}, worker_type="persistent"
    )

    answer = await fleet.admin.get("/api/admin/workers")

    assert answer.status_code == 200
    (listed,) = answer.json()["workers"]
    assert set(listed) >= LISTED_FIELDS
    assert listed["id"] == agent.id
    assert listed["name"] == "gpu-worker-1"
    assert listed["status"] == "connecting"
    assert listed["worker_type"] == "persistent"
    assert listed["labels"] == {"location": "datacenter-a"}
    assert listed["gpu_count"] == 0
    assert listed["last_heartbeat"] is None
    assert listed["current_job_id"] is None
    assert answer.json()["counts"]["never_connected"] == 1  # per presence, as the row says


async def test_a_worker_name_is_taken_only_once(fleet: Fleet) -> None:
    await fleet.create_worker("twin")

    answer = await fleet.admin.post("/api/admin/workers", json={"name": "twin"})

    assert answer.status_code == 409
    assert "twin" in answer.json()["detail"]


async def test_rotating_a_token_refuses_the_old_one_at_once(fleet: Fleet) -> None:
    agent = await fleet.online_worker("gpu-1")
    old = agent.token

    new = await fleet.rotate_token(agent)

    assert new.startswith("wt_") and new != old
    assert agent.stream is not None and await agent.stream.wait_closed()
    assert (await agent.heartbeat()).status_code == 401
    stale = await fleet.open_stream(old, agent.id)
    assert stale.status == 401
    agent.token = new
    assert (await agent.heartbeat()).status_code == 200
    assert (await agent.register()).status_code == 200
    rotated = await fleet.audit(type="worker.token_rotated", target=agent.id)
    assert len(rotated) == 1


async def test_a_connected_worker_cannot_be_deleted(fleet: Fleet) -> None:
    agent = await fleet.online_worker("gpu-1")

    answer = await fleet.admin.delete(f"/api/admin/workers/{agent.id}")

    assert answer.status_code == 409
    detail = answer.json()["detail"]
    assert detail.startswith(f"worker {agent.id} is idle; only a worker that is offline or ")
    assert "never connected" in detail
    assert (await agent.info())["status"] == "idle"


async def test_an_offline_worker_can_be_deleted_and_its_token_dies_with_it(fleet: Fleet) -> None:
    agent = await fleet.online_worker("gpu-1")
    await agent.disconnect()
    assert (await agent.info())["status"] == "offline"

    answer = await fleet.admin.delete(f"/api/admin/workers/{agent.id}")

    assert answer.status_code == 200
    assert (await fleet.admin.get(f"/api/admin/workers/{agent.id}")).status_code == 404
    assert (await agent.register()).status_code == 401


async def test_a_drained_worker_takes_no_job_until_undrained(fleet: Fleet) -> None:
    agent = await fleet.online_worker("gpu-1")

    drained = await fleet.admin.post(f"/api/admin/workers/{agent.id}/drain")
    job = await fleet.submit()

    assert drained.status_code == 200
    assert drained.json()["status"] == "draining"
    assert agent.stream is not None
    assert await agent.stream.expect("drain")
    assert (await fleet.job(job["id"]))["status"] == "queued"
    assert await agent.stream.collect() == []

    undrained = await fleet.admin.post(f"/api/admin/workers/{agent.id}/undrain")

    assert undrained.status_code == 200
    assert await agent.stream.expect("undrain")
    offer = await agent.next_offer()
    assert offer["job_id"] == job["id"]
    assert (await agent.info())["status"] == "busy"


async def test_draining_a_busy_worker_lets_its_job_finish(fleet: Fleet) -> None:
    agent = await fleet.online_worker("gpu-1")
    first = await fleet.submit()
    offer = await agent.next_offer()
    await agent.run(offer)

    await fleet.admin.post(f"/api/admin/workers/{agent.id}/drain")
    second = await fleet.submit()
    await agent.finish(offer)

    assert (await fleet.job(first["id"]))["status"] == "completed"
    assert (await fleet.job(second["id"]))["status"] == "queued"
    assert (await agent.info())["status"] == "draining"


async def test_draining_an_idle_ephemeral_worker_shuts_it_down(fleet: Fleet) -> None:
    agent = await fleet.online_worker("spot-1", worker_type="ephemeral")

    await fleet.admin.post(f"/api/admin/workers/{agent.id}/drain")

    assert agent.stream is not None
    assert (await agent.stream.expect("drain", "shutdown"))["type"] == "drain"
    assert (await agent.stream.expect("drain", "shutdown"))["type"] == "shutdown"


async def test_a_drained_worker_that_never_connected_can_be_deleted(fleet: Fleet) -> None:
    spare = await fleet.create_worker("spare-1")
    drained = await fleet.admin.post(f"/api/admin/workers/{spare.id}/drain")
    assert drained.json()["status"] == "draining"

    answer = await fleet.admin.delete(f"/api/admin/workers/{spare.id}")

    assert answer.status_code == 200
    assert (await fleet.admin.get(f"/api/admin/workers/{spare.id}")).status_code == 404


async def test_the_workers_list_says_which_workers_can_be_deleted(fleet: Fleet) -> None:
    online = await fleet.online_worker("gpu-1")
    spare = await fleet.create_worker("spare-1")
    gone = await fleet.online_worker("gpu-2")
    await gone.disconnect()

    listed = (await fleet.admin.get("/api/admin/workers")).json()["workers"]

    deletable = {w["id"]: w["deletable"] for w in listed}
    assert deletable == {online.id: False, spare.id: True, gone.id: True}


async def test_a_registered_worker_whose_stream_is_not_open_cannot_be_deleted(
    fleet: Fleet,
) -> None:
    agent = await fleet.create_worker("gpu-1")
    assert (await agent.register(gpu_count=1)).status_code == 200
    assert (await agent.info())["status"] == "connecting"

    answer = await fleet.admin.delete(f"/api/admin/workers/{agent.id}")

    assert answer.status_code == 409
    assert "connecting" in answer.json()["detail"]


async def test_a_worker_that_never_connected_can_be_deleted(fleet: Fleet) -> None:
    typo = await fleet.create_worker("gpu-wokrer-1")
    assert (await fleet.admin.delete(f"/api/admin/workers/{typo.id}")).status_code == 200
    assert (await fleet.admin.get(f"/api/admin/workers/{typo.id}")).status_code == 404
    assert (await typo.register()).status_code == 401
