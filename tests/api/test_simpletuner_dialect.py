"""What the orchestrator does for a worker that names no attempts and no features: the
released SimpleTuner agent (tests/e2e/test_simpletuner_agent.py runs the agent itself)."""

from __future__ import annotations

from tests.api.conftest import ACK_TIMEOUT, Agent, Fleet

SIMPLETUNER_JOB = {"num_processes": 1, "model_type": "lora"}


async def simpletuner_agent(fleet: Fleet, name: str) -> Agent:
    """Registered as the released agent does: `gpu_info`, no features, no attempt ids."""
    agent = await fleet.create_worker(name, worker_type="persistent")
    return await agent.connect(gpu_info={"name": "GPU", "vram_gb": 24, "count": 1}, features=None)


async def test_a_job_with_a_command_is_never_offered_to_a_simpletuner_agent(
    fleet: Fleet,
) -> None:
    st = await simpletuner_agent(fleet, "st-only")
    job = await fleet.submit(config={"command": ["sh", "-c", "exit 7"]}, max_retries=0)
    assert st.stream is not None and await st.stream.collect(0.7) == []
    waiting = (await fleet.job(job["id"]))["waiting"]
    mine = next(w for w in waiting["workers"] if w["worker_id"] == st.id)
    assert any("SimpleTuner configs only" in reason for reason in mine["reasons"]), mine
    runner = await fleet.online_worker("runs-commands")  # gpufleet's dialect: it says so
    assert (await runner.next_offer())["job_id"] == job["id"]


async def test_an_idle_heartbeat_loses_a_started_job_once_a_report_cannot_explain_it(
    fleet: Fleet,
) -> None:
    agent = await simpletuner_agent(fleet, "forgetful")
    job = await fleet.submit(config=SIMPLETUNER_JOB, max_retries=1)
    offer = await agent.next_offer()
    await agent.run(offer, dialect="simpletuner")
    # Just after the start, "idle" may be a heartbeat sent before the job came: kept.
    await agent.heartbeat(status="idle", current_job_id=None)
    assert (await fleet.job(job["id"]))["status"] == "running"
    fleet.clock.advance(ACK_TIMEOUT + 1)
    await agent.heartbeat(status="idle", current_job_id=None)
    lost = await fleet.job(job["id"])
    assert lost["attempt_history"][0]["status"] == "lost"
    assert "says it runs no job" in lost["attempt_history"][0]["error"]
    again = await agent.next_offer()  # requeued, and the idle worker takes it again
    assert again["job_id"] == job["id"] and again["attempt_id"] != offer["attempt_id"]


async def test_a_heartbeat_that_says_nothing_of_its_job_keeps_it(fleet: Fleet) -> None:
    agent = await fleet.online_worker("terse")
    job = await fleet.submit()
    await agent.run(await agent.next_offer())
    fleet.clock.advance(ACK_TIMEOUT + 1)
    await agent.heartbeat()
    assert (await fleet.job(job["id"]))["status"] == "running"


async def test_a_late_report_of_a_cancelled_job_sends_no_cancel_once_the_next_job_is_held(
    fleet: Fleet,
) -> None:
    """The agent stops whatever it runs on any `job_cancel`: one about X must never reach it
    once it holds Y."""
    agent = await simpletuner_agent(fleet, "st")
    x = await fleet.submit(config=SIMPLETUNER_JOB)
    offer_x = await agent.next_offer()
    await agent.run(offer_x, dialect="simpletuner")
    y = await fleet.submit(config=SIMPLETUNER_JOB)
    cancel = await fleet.admin.post(f"/api/queue/{x['id']}/cancel")
    assert cancel.status_code == 200
    assert (await agent.stream.expect("job_cancel"))["job_id"] == x["id"]  # type: ignore[union-attr]
    assert (await agent.report(x["id"], "cancelled")).status_code == 200  # confirmed: Y next
    offer_y = await agent.next_offer()
    assert offer_y["job_id"] == y["id"]
    # X's monitor, late, reports the killed process as failed: refused, and no cancel.
    late = await agent.report(x["id"], "failed", error="Training exited with code -15")
    assert late.status_code == 409
    await agent.run(offer_y, dialect="simpletuner")
    assert [e["type"] for e in await agent.stream.collect(0.3)] == []  # type: ignore[union-attr]
    assert (await fleet.job(y["id"]))["status"] == "running"
