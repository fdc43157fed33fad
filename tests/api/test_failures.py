"""When workers fall silent, lose offers, fail, disconnect or speak out of turn."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import pytest
from sqlalchemy.exc import DBAPIError

from gpufleet.server.services import agents as agents_service
from gpufleet.server.services import health
from gpufleet.store.queries import Queries
from tests.api.conftest import ACK_TIMEOUT, HEARTBEAT_TIMEOUT, Fleet, both_databases


@both_databases
async def test_an_offer_not_acknowledged_in_time_is_withdrawn_and_offered_again(
    fleet: Fleet,
) -> None:
    agent = await fleet.online_worker("gpu-1")
    job = await fleet.submit()
    first = await agent.next_offer()

    fleet.clock.advance(ACK_TIMEOUT - 1)
    assert await fleet.ack_sweep() == 0
    fleet.clock.advance(2)
    assert await fleet.ack_sweep() == 1

    assert agent.stream is not None
    events = await agent.stream.collect(1.0)
    about_job = [e for e in events if e.get("job_id") == job["id"]]
    offers = [i for i, e in enumerate(about_job) if e["type"] == "job_submit"]
    assert len(offers) == 1
    again = about_job[offers[0]]
    # A cancel of the withdrawn attempt may precede the new offer, never follow it: the
    # SimpleTuner agent knows only job ids and would stop the new run.
    assert all(e["type"] != "job_cancel" for e in about_job[offers[0] + 1 :])
    assert all(
        e["attempt_id"] == first["attempt_id"] for e in about_job if e["type"] == "job_cancel"
    )
    assert again["job_id"] == job["id"]
    assert again["attempt_id"] != first["attempt_id"]
    detail = await fleet.job(job["id"])
    assert detail["status"] == "offered"
    assert detail["attempts"] == 2
    assert [a["status"] for a in detail["attempt_history"]] == ["withdrawn", "offered"]
    assert "not acknowledged within 30 s" in detail["attempt_history"][0]["error"]


async def test_an_acknowledged_offer_is_not_withdrawn(fleet: Fleet) -> None:
    agent = await fleet.online_worker("gpu-1")
    job = await fleet.submit()
    offer = await agent.next_offer()
    await agent.report(job["id"], "acknowledged", attempt_id=offer["attempt_id"])

    fleet.clock.advance(ACK_TIMEOUT * 10)

    assert await fleet.ack_sweep() == 0
    assert (await fleet.job(job["id"]))["attempts"] == 1


@both_databases
async def test_a_worker_silent_past_the_heartbeat_timeout_goes_offline_and_loses_its_job(
    fleet: Fleet,
) -> None:
    silent = await fleet.online_worker("silent")
    job = await fleet.submit()
    await silent.run(await silent.next_offer())
    spare = await fleet.online_worker("spare")

    fleet.clock.advance(HEARTBEAT_TIMEOUT + 1)
    assert (await spare.heartbeat()).status_code == 200
    assert await fleet.heartbeat_sweep() == [silent.id]

    assert (await silent.info())["status"] == "offline"
    assert silent.stream is not None and await silent.stream.wait_closed()
    detail = await fleet.job(job["id"])
    assert detail["attempt_history"][0]["status"] == "lost"
    assert "no heartbeat" in detail["attempt_history"][0]["error"]
    assert detail["status"] == "offered"
    assert detail["worker_id"] == spare.id
    assert (await spare.next_offer())["job_id"] == job["id"]
    lost = await fleet.audit(type="worker.lost", target=silent.id)
    assert lost[0]["detail"]["job_id"] == job["id"]


async def test_a_worker_that_heartbeats_stays_online(fleet: Fleet) -> None:
    agent = await fleet.online_worker("gpu-1")

    for _ in range(3):
        fleet.clock.advance(HEARTBEAT_TIMEOUT - 1)
        assert (await agent.heartbeat(status="idle")).json() == {
            "ok": True,
            "status": "idle",
            "draining": False,
        }
        assert await fleet.heartbeat_sweep() == []

    assert (await agent.info())["status"] == "idle"


@both_databases
async def test_plain_heartbeats_are_written_together_by_the_flush(fleet: Fleet) -> None:
    """A heartbeat that changes nothing but the time is kept in memory, then written with
    the others in one statement: not one write transaction a heartbeat."""
    agents = [await fleet.online_worker(f"gpu-{n}") for n in range(3)]
    opened = {a.id: (await a.info())["last_heartbeat"] for a in agents}
    beat_at = fleet.clock.advance(5)

    for agent in agents:
        assert (await agent.heartbeat(status="idle")).status_code == 200

    assert {a.id: (await a.info())["last_heartbeat"] for a in agents} == opened
    assert await agents_service.flush_heartbeats(fleet.ctx) == 3
    for agent in agents:
        assert _parse_time((await agent.info())["last_heartbeat"]) == beat_at
    assert await agents_service.flush_heartbeats(fleet.ctx) == 0


@both_databases
async def test_a_kept_heartbeat_never_revives_an_offline_worker_nor_goes_back_in_time(
    fleet: Fleet,
) -> None:
    lost = await fleet.online_worker("lost")
    fresh = await fleet.online_worker("fresh")
    stale = fleet.clock.now
    issued = {a.id: await _token_issued(fleet, a.id) for a in (lost, fresh)}
    fleet.ctx.heartbeats.heard(lost.id, stale, token_issued_at=issued[lost.id])  # not written yet
    fleet.clock.advance(HEARTBEAT_TIMEOUT + 1)
    assert (await fresh.heartbeat()).status_code == 200
    # As if heard on another replica, written late.
    fleet.ctx.heartbeats.heard(lost.id, stale, token_issued_at=issued[lost.id])

    assert await fleet.heartbeat_sweep() == [lost.id]
    newest = _parse_time((await fresh.info())["last_heartbeat"])
    await agents_service.flush_heartbeats(fleet.ctx)
    fleet.ctx.heartbeats.heard(fresh.id, stale, token_issued_at=issued[fresh.id])
    await agents_service.flush_heartbeats(fleet.ctx)

    assert (await lost.info())["status"] == "offline"
    assert (await lost.heartbeat()).status_code == 409
    assert _parse_time((await fresh.info())["last_heartbeat"]) == newest


async def _token_issued(fleet: Fleet, worker_id: str) -> datetime | None:
    async with fleet.ctx.store.read() as q:
        worker = await q.get_worker(worker_id)
    assert worker is not None
    return worker.token_issued_at


def _parse_time(value: str) -> datetime:
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


async def test_nobody_is_marked_offline_in_the_first_timeout_after_a_start(fleet: Fleet) -> None:
    agent = await fleet.online_worker("gpu-1")
    fleet.clock.advance(HEARTBEAT_TIMEOUT * 2)
    fleet.ctx.started_at = fleet.clock.now - timedelta(seconds=HEARTBEAT_TIMEOUT - 1)

    assert await fleet.heartbeat_sweep() == []
    assert (await agent.info())["status"] == "idle"

    fleet.clock.advance(2)
    assert await fleet.heartbeat_sweep() == [agent.id]


async def test_a_heartbeat_naming_a_job_the_worker_does_not_hold_gets_a_cancel(
    fleet: Fleet,
) -> None:
    agent = await fleet.online_worker("gpu-1")

    answer = await agent.heartbeat(status="busy", current_job_id="j_elsewhere")

    assert answer.status_code == 200
    assert agent.stream is not None
    cancel = await agent.stream.expect("job_cancel")
    assert cancel["job_id"] == "j_elsewhere"


async def test_a_worker_marked_offline_is_told_to_register_again(fleet: Fleet) -> None:
    agent = await fleet.online_worker("gpu-1")
    fleet.clock.advance(HEARTBEAT_TIMEOUT + 1)
    await fleet.heartbeat_sweep()

    late = await agent.heartbeat()

    assert late.status_code == 409
    assert "register again" in late.json()["detail"]
    assert (await agent.register()).status_code == 200
    await agent.open_stream()
    assert (await agent.info())["status"] == "idle"


async def test_a_job_whose_process_fails_is_failed_at_once_by_default(fleet: Fleet) -> None:
    agent = await fleet.online_worker("gpu-1")
    job = await fleet.submit(max_retries=3)
    assert job["retry_on"] == ["lost"]
    offer = await agent.next_offer()
    await agent.run(offer)
    answer = await agent.finish(offer, "failed", exit_code=3, error="exited with code 3")
    assert answer["job_status"] == "failed"
    final = await fleet.job(job["id"])
    assert final["attempts"] == 1 and final["error"] == "exited with code 3"
    assert (await agent.info())["status"] == "idle"


async def test_a_completed_jobs_failed_uploads_are_said_on_the_job(fleet: Fleet) -> None:
    """The worker reports what it could not upload with the job's end; a completed job kept
    it on its attempt only, and the job (its page, `jobs show`, the webhooks) said nothing."""
    agent = await fleet.online_worker("gpu-1")
    job = await fleet.submit()
    offer = await agent.next_offer()
    await agent.run(offer)
    said = "1 upload(s) failed: output/model.bin: the orchestrator refused it (413)"
    await agent.finish(offer, "completed", exit_code=0, error=said)
    final = await fleet.job(job["id"])
    assert (final["status"], final["error"]) == ("completed", said)
    [attempt] = final["attempt_history"]
    assert attempt["status"] == "completed" and attempt["error"] == said

    again = await fleet.submit()  # a clean end says nothing
    offer = await agent.next_offer()
    await agent.run(offer)
    await agent.finish(offer, "completed", exit_code=0)
    assert (await fleet.job(again["id"]))["error"] is None


async def test_a_job_stopped_by_its_worker_is_retried_like_a_lost_one(fleet: Fleet) -> None:
    """`cancelled` from the worker, not from a user: preempted, or the agent shut down."""
    agent = await fleet.online_worker("gpu-1")
    job = await fleet.submit(max_retries=1)
    offer = await agent.next_offer()
    await agent.run(offer)
    answer = await agent.finish(offer, "cancelled")
    assert answer["job_status"] == "queued"
    assert (await fleet.job(job["id"]))["attempt_history"][0]["status"] == "cancelled"


async def test_a_job_that_keeps_failing_fails_for_good_after_its_retries(fleet: Fleet) -> None:
    agent = await fleet.online_worker("gpu-1")
    job = await fleet.submit(max_retries=2, retry_on=["lost", "failed"])

    for attempt in range(1, 4):
        offer = await agent.next_offer()
        await agent.run(offer)
        answer = await agent.finish(offer, "failed", exit_code=1, error="boom")
        assert answer["job_status"] == ("failed" if attempt == 3 else "queued")

    final = await fleet.job(job["id"])
    assert final["status"] == "failed"
    assert final["attempts"] == 3 == final["max_retries"] + 1
    assert [a["status"] for a in final["attempt_history"]] == ["failed"] * 3
    assert "no retries left" in final["error"]
    assert agent.stream is not None and await agent.stream.collect() == []
    assert (await agent.info())["status"] == "idle"


@both_databases
async def test_a_stale_worker_is_fenced_off_and_told_to_cancel(fleet: Fleet) -> None:
    stale = await fleet.online_worker("stale")
    job = await fleet.submit()
    old = await stale.next_offer()
    await stale.run(old)
    fresh = await fleet.online_worker("fresh")
    fleet.clock.advance(HEARTBEAT_TIMEOUT + 1)
    await fresh.heartbeat()
    await fleet.heartbeat_sweep()
    new = await fresh.next_offer()
    await fresh.run(new)

    late = await stale.report(job["id"], "completed", attempt_id=old["attempt_id"])
    unfenced = await stale.report(job["id"], "training")

    assert late.status_code == 409
    assert unfenced.status_code == 409
    assert "no longer holds" in late.json()["detail"]
    detail = await fleet.job(job["id"])
    assert detail["status"] == "running"
    assert detail["current_attempt_id"] == new["attempt_id"]
    assert (await stale.register()).json()["abandon_job"] is False
    await stale.open_stream()
    assert stale.stream is not None
    cancel = await stale.stream.expect("job_cancel")
    assert cancel["job_id"] == job["id"]
    assert cancel["attempt_id"] == old["attempt_id"]
    refused = await fleet.audit(type="job.report_refused", target=job["id"])
    assert len(refused) == 2


async def test_logs_from_a_stale_attempt_are_refused(fleet: Fleet) -> None:
    agent = await fleet.online_worker("gpu-1")
    job = await fleet.submit()
    offer = await agent.next_offer()
    await agent.run(offer)
    await fleet.admin.post(f"/api/queue/{job['id']}/cancel")

    answer = await agent.logs(
        job["id"], [{"stream": "stdout", "text": "late"}], attempt_id=offer["attempt_id"]
    )

    assert answer.status_code == 409
    logs = await fleet.admin.get(f"/api/queue/{job['id']}/logs")
    assert logs.json()["lines"] == []


async def test_a_status_outside_the_table_is_refused_and_nothing_is_stored(fleet: Fleet) -> None:
    agent = await fleet.online_worker("gpu-1")
    job = await fleet.submit()
    offer = await agent.next_offer()
    before = await fleet.job(job["id"])

    answer = await agent.report(
        job["id"], "exploded", attempt_id=offer["attempt_id"], progress={"step": 1}
    )

    assert answer.status_code == 422
    assert "acknowledged" in answer.json()["detail"]
    assert await fleet.job(job["id"]) == before
    assert before["progress"] is None


async def test_a_disconnecting_worker_gives_its_job_back_to_the_queue(fleet: Fleet) -> None:
    leaving = await fleet.online_worker("leaving")
    job = await fleet.submit()
    await leaving.run(await leaving.next_offer())

    answer = await leaving.disconnect()
    assert answer.status_code == 200
    assert (await leaving.info())["status"] == "offline"
    detail = await fleet.job(job["id"])
    assert detail["status"] == "queued"
    assert detail["attempt_history"][0]["status"] == "lost"
    assert "disconnected" in detail["error"]

    staying = await fleet.online_worker("staying")
    assert (await staying.next_offer())["job_id"] == job["id"]


async def test_cancelling_a_queued_job_ends_it_at_once(fleet: Fleet) -> None:
    await fleet.create_worker("not-connected")
    job = await fleet.submit()

    answer = await fleet.admin.post(f"/api/queue/{job['id']}/cancel")

    assert answer.status_code == 200
    assert answer.json()["status"] == "cancelled"
    assert (await fleet.job(job["id"]))["ended_at"] is not None
    again = await fleet.admin.post(f"/api/queue/{job['id']}/cancel")
    assert again.status_code == 409


async def test_cancelling_a_running_job_tells_the_worker_and_frees_it_once_it_stops(
    fleet: Fleet,
) -> None:
    agent = await fleet.online_worker("gpu-1")
    job = await fleet.submit()
    offer = await agent.next_offer()
    await agent.run(offer)
    waiting = await fleet.submit()

    answer = await fleet.admin.post(f"/api/queue/{job['id']}/cancel")

    assert answer.json()["status"] == "cancelled"
    assert agent.stream is not None
    cancel = await agent.stream.expect("job_cancel")
    assert (cancel["job_id"], cancel["attempt_id"]) == (job["id"], offer["attempt_id"])
    assert (await agent.info())["status"] == "busy"
    assert (await fleet.job(waiting["id"]))["status"] == "queued"

    confirmed = await agent.report(job["id"], "cancelled", attempt_id=offer["attempt_id"])

    assert confirmed.json() == {"ok": True, "job_status": "cancelled"}
    assert (await agent.next_offer())["job_id"] == waiting["id"]
    assert (await fleet.job(job["id"]))["attempt_history"][0]["status"] == "cancelled"


async def test_an_ephemeral_worker_offline_past_the_cleanup_age_is_deleted(fleet: Fleet) -> None:
    ephemeral = await fleet.online_worker("spot-1", worker_type="ephemeral")
    persistent = await fleet.online_worker("onprem-1", worker_type="persistent")
    for agent in (ephemeral, persistent):
        assert (await agent.disconnect()).status_code == 200

    cleanup = fleet.settings.ephemeral_cleanup_after
    fleet.clock.advance(cleanup - 1)
    assert await health.remove_expired_ephemeral_workers(fleet.ctx) == []
    fleet.clock.advance(2)
    assert await health.remove_expired_ephemeral_workers(fleet.ctx) == [ephemeral.id]

    listed = await fleet.admin.get("/api/admin/workers")
    ids = {w["id"] for w in listed.json()["workers"]}
    assert ephemeral.id not in ids and persistent.id in ids
    deleted = await fleet.audit(type="worker.deleted", target=ephemeral.id)
    assert deleted and deleted[0]["actor"] == "system"


@both_databases
async def test_a_log_batch_delivered_twice_is_stored_once(fleet: Fleet) -> None:
    agent = await fleet.online_worker("gpu-1")
    job = await fleet.submit()
    offer = await agent.next_offer()
    await agent.report(job["id"], "running", attempt_id=offer["attempt_id"])
    first = [{"stream": "stdout", "text": f"line {i}"} for i in range(3)]
    second = [{"stream": "stdout", "text": f"line {i}"} for i in range(3, 5)]
    for batch, at in ((first, 0), (first, 0), (first[1:] + second, 1), (second, 3)):
        answer = await agent.logs(job["id"], batch, attempt_id=offer["attempt_id"], first=at)
        assert answer.status_code == 200
    stored = (await fleet.admin.get(f"/api/queue/{job['id']}/logs")).json()["lines"]
    assert [line["text"] for line in stored] == [f"line {i}" for i in range(5)]


async def _next_offer_after_withdrawal(agent: Any) -> dict[str, Any]:
    """The re-offer; a cancel of the withdrawn attempt may come first, and is skipped."""
    assert agent.stream is not None
    while True:
        event = await agent.stream.expect("job_submit", "job_cancel")
        if event["type"] == "job_submit":
            return dict(event)


async def test_an_offer_never_acknowledged_spends_no_retry(fleet: Fleet) -> None:
    agent = await fleet.online_worker("gpu-1")
    job = await fleet.submit(max_retries=0, retry_on=["lost", "failed"])
    first = await agent.next_offer()
    fleet.clock.advance(ACK_TIMEOUT + 1)
    assert await fleet.ack_sweep() == 1
    again = await _next_offer_after_withdrawal(agent)
    assert again["attempt_id"] != first["attempt_id"]
    assert (await fleet.job(job["id"]))["status"] == "offered"  # not failed: it never ran
    await agent.report(job["id"], "running", attempt_id=again["attempt_id"])
    await agent.report(job["id"], "failed", attempt_id=again["attempt_id"], exit_code=1)
    failed = await fleet.job(job["id"])
    assert failed["status"] == "failed" and "attempt 1 of 1" in failed["error"]


async def test_a_job_no_worker_ever_acknowledges_still_ends(fleet: Fleet) -> None:
    agent = await fleet.online_worker("deaf")
    job = await fleet.submit(max_retries=0)
    await agent.next_offer()
    for round_ in range(6):
        fleet.clock.advance(ACK_TIMEOUT + 1)
        assert await fleet.ack_sweep() == 1
        if round_ < 5:
            await _next_offer_after_withdrawal(agent)
    ended = await fleet.job(job["id"])
    assert ended["status"] == "failed" and ended["attempts"] == 6
    assert "without an acknowledgement" in ended["error"]


async def test_offers_made_before_a_restart_get_a_fresh_acknowledgement_window(
    fleet: Fleet,
) -> None:
    agent = await fleet.online_worker("gpu-1")
    job = await fleet.submit()
    await agent.next_offer()
    fleet.clock.advance(ACK_TIMEOUT + 1)
    fleet.ctx.started_at = fleet.clock()  # as if the orchestrator had just restarted
    assert await fleet.ack_sweep() == 0
    fleet.clock.advance(ACK_TIMEOUT + 1)
    assert await fleet.ack_sweep() == 1
    assert (await fleet.job(job["id"]))["attempts"] == 2


@both_databases
async def test_a_write_the_database_aborts_as_a_deadlock_answers_503_and_stores_nothing(
    fleet: Fleet, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Fault injected: the job insert fails as PostgreSQL fails a deadlock victim."""

    class Deadlock(Exception):
        sqlstate = "40P01"

    async def aborted(_self: Queries, _values: Any) -> None:
        raise DBAPIError("INSERT INTO jobs …", {}, Deadlock("deadlock detected"))

    await fleet.online_worker("gpu-1")
    before = (await fleet.admin.get("/api/queue")).json()["total"]
    monkeypatch.setattr(Queries, "insert_job", aborted)

    answer = await fleet.admin.post("/api/queue/submit", json={"config": {"command": ["x"]}})

    assert answer.status_code == 503
    assert answer.headers["retry-after"] == "2"
    assert "send it again" in answer.json()["detail"]
    monkeypatch.undo()
    assert (await fleet.admin.get("/api/queue")).json()["total"] == before


async def test_a_retry_offered_while_the_worker_still_reports_goes_again_within_seconds(
    fleet: Fleet,
) -> None:
    """Both agents ignore an offer that comes while they are still reporting their last job:
    it is sent again after a second, not after a third of the ack timeout (10 s here)."""
    assert ACK_TIMEOUT / 3 > 3.0
    agent = await fleet.online_worker("gpu-1")
    job = await fleet.submit(max_retries=1, retry_on=["lost", "failed"])
    offer = await agent.next_offer()
    await agent.run(offer)
    await agent.finish(offer, "failed", exit_code=3)
    retry = await agent.next_offer()  # the moment the failure was taken: ignored, as agents do
    assert retry["job_id"] == job["id"] and retry["attempt_id"] != offer["attempt_id"]
    assert agent.stream is not None
    again = await agent.stream.expect("job_submit", within=3.0)
    assert again["attempt_id"] == retry["attempt_id"]


async def _holder(fleet: Fleet, agents: list[Any], job_id: str) -> Any:
    """The agent the job is offered to now, with the offer it got."""
    worker_id = (await fleet.job(job_id))["worker_id"]
    agent = next(a for a in agents if a.id == worker_id)
    return agent, await agent.next_offer()


async def test_a_job_that_cannot_start_on_three_workers_fails_whatever_its_retries(
    fleet: Fleet,
) -> None:
    """The poison-job rule: failed before running, or lost between acknowledgement and
    running (the worker died starting it), on 3 different workers ends the job."""
    agents = [await fleet.online_worker(f"gpu-{n}") for n in range(3)]
    job = await fleet.submit(max_retries=20, retry_on=["lost", "failed"])
    tried: list[str] = []

    agent, offer = await _holder(fleet, agents, job["id"])
    tried.append(agent.id)
    await agent.report(job["id"], "acknowledged", attempt_id=offer["attempt_id"])
    answer = await agent.finish(offer, "failed", error="could not start: env BAD=KEY")
    assert answer["job_status"] == "queued"

    agent, offer = await _holder(fleet, agents, job["id"])
    tried.append(agent.id)
    await agent.report(job["id"], "acknowledged", attempt_id=offer["attempt_id"])
    assert (await agent.disconnect()).status_code == 200  # died while starting it
    assert (await fleet.job(job["id"]))["status"] == "offered"

    agent, offer = await _holder(fleet, agents, job["id"])
    tried.append(agent.id)
    await agent.report(job["id"], "acknowledged", attempt_id=offer["attempt_id"])
    answer = await agent.finish(offer, "failed", error="could not start: no such file")

    assert answer["job_status"] == "failed"
    assert len(set(tried)) == 3  # each retry went to a worker it had not failed on
    final = await fleet.job(job["id"])
    assert final["attempts"] == 3
    assert [a["status"] for a in final["attempt_history"]] == ["failed", "lost", "failed"]
    assert final["error"].startswith("could not start on 3 different workers")
    assert final["error"].endswith("Last error: could not start: no such file")


async def test_attempts_that_ran_or_were_never_acknowledged_are_no_start_failures(
    fleet: Fleet,
) -> None:
    agents = [await fleet.online_worker(f"gpu-{n}") for n in range(4)]
    job = await fleet.submit(max_retries=20, retry_on=["lost", "failed"])

    for _ in range(3):  # ran, then failed: the job's own failure, retried as asked
        agent, offer = await _holder(fleet, agents, job["id"])
        await agent.run(offer)
        answer = await agent.finish(offer, "failed", exit_code=1, error="boom")
        assert answer["job_status"] == "queued"
    for _ in range(3):  # vanished before acknowledging: not a failure to start
        agent, offer = await _holder(fleet, agents, job["id"])
        assert (await agent.disconnect()).status_code == 200
        await agent.connect(gpu_count=1, gpu_name="Test GPU", gpu_vram_gb=24)

    final = await fleet.job(job["id"])
    assert final["status"] == "offered"
    statuses = [a["status"] for a in final["attempt_history"]]
    assert statuses == ["failed"] * 3 + ["withdrawn"] * 3 + ["offered"]
