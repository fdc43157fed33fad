"""After the orchestrator restarts, workers reconnect and their jobs are reconciled."""

from __future__ import annotations

import pytest

from tests.api.conftest import Fleet, both_databases

# On PostgreSQL too (`both_databases`): a restart that reopens the database link and the
# leader's lock and dispatches what was queued. How reports are reconciled after it is the
# service's: SQLite alone.


@pytest.mark.parametrize("dialect", ["gpufleet", "simpletuner"])
async def test_a_worker_still_running_its_job_is_told_to_resume_it(
    fleet: Fleet, dialect: str
) -> None:
    agent = await fleet.online_worker("gpu-1")
    job = await fleet.submit()
    offer = await agent.next_offer()
    await agent.run(offer, dialect=dialect)
    admin_key = fleet.admin_key

    await fleet.restart()

    assert fleet.admin_key == admin_key
    assert (await agent.info())["status"] == "busy"
    holding = {"current_job_id": job["id"]}
    if dialect == "gpufleet":
        holding["current_attempt_id"] = offer["attempt_id"]
    answer = await agent.register(gpu_count=1, **holding)
    assert answer.status_code == 200
    assert answer.json()["resume_job"] == {"job_id": job["id"], "attempt_id": offer["attempt_id"]}
    assert answer.json()["abandon_job"] is False
    await agent.open_stream()
    assert (await agent.info())["status"] == "busy"
    assert (await fleet.job(job["id"]))["status"] == "running"

    done = await agent.report(job["id"], "completed")

    assert done.json()["job_status"] == "completed"
    assert (await agent.info())["status"] == "idle"


async def test_a_worker_reporting_a_job_it_no_longer_holds_is_told_to_abandon_it(
    fleet: Fleet,
) -> None:
    agent = await fleet.online_worker("gpu-1")
    job = await fleet.submit()
    offer = await agent.next_offer()
    await agent.run(offer)
    await fleet.admin.post(f"/api/queue/{job['id']}/cancel")

    await fleet.restart()
    answer = await agent.register(
        gpu_count=1, current_job_id=job["id"], current_attempt_id=offer["attempt_id"]
    )

    assert answer.status_code == 200
    assert answer.json()["abandon_job"] is True
    assert answer.json()["resume_job"] is None
    worker = await agent.info()
    assert worker["current_job_id"] is None
    assert worker["status"] == "connecting"
    assert (await fleet.job(job["id"]))["status"] == "cancelled"


async def test_a_worker_reporting_an_unknown_job_is_told_to_abandon_it(fleet: Fleet) -> None:
    agent = await fleet.create_worker("gpu-1")

    answer = await agent.register(gpu_count=1, current_job_id="j_from_another_orchestrator")

    assert answer.json()["abandon_job"] is True
    assert answer.json()["resume_job"] is None


async def test_a_worker_that_comes_back_without_its_job_gives_it_back(fleet: Fleet) -> None:
    agent = await fleet.online_worker("gpu-1")
    job = await fleet.submit()
    await agent.run(await agent.next_offer())

    await fleet.restart()
    answer = await agent.register(gpu_count=1, current_job_id=None)

    assert answer.json()["abandon_job"] is False
    assert answer.json()["resume_job"] is None
    detail = await fleet.job(job["id"])
    assert detail["attempt_history"][0]["status"] == "lost"
    assert "re-registered without it" in detail["attempt_history"][0]["error"]
    await agent.open_stream()
    again = await agent.next_offer()
    assert again["job_id"] == job["id"]
    assert (await fleet.job(job["id"]))["attempts"] == 2


@both_databases
async def test_queued_jobs_survive_a_restart_and_run_once_a_worker_connects(
    fleet: Fleet,
) -> None:
    agent = await fleet.create_worker("gpu-1")
    job = await fleet.submit(priority=7, worker_labels={})

    await fleet.restart()
    await agent.connect(gpu_count=1)

    offer = await agent.next_offer()
    assert offer["job_id"] == job["id"]
    assert (await fleet.job(job["id"]))["priority"] == 7
