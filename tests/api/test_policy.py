"""The queue policy through the API: limits and the queued-jobs 429, approvals, SimpleTuner's
compatible endpoints, fair share, the cleanup, and what a hostile body gets."""

from __future__ import annotations

from typing import Any

import pytest
import sqlalchemy as sa

from gpufleet.domain.secrets import new_id
from gpufleet.server.services import policy_loop
from gpufleet.store.tables import api_keys, team_members, teams, users
from tests.api.artifacts.uploads import stored_keys, upload, upload_checkpoint
from tests.api.conftest import Fleet, both_databases, post_raw

# ---- people, written straight to the tables (their API is services/people.py's) -----------


async def add_team(fleet: Fleet, name: str, **values: Any) -> str:
    team_id = new_id("t")
    async with fleet.ctx.store.engine.begin() as conn:
        await conn.execute(
            sa.insert(teams).values(id=team_id, name=name, created_at=fleet.clock.now, **values)
        )
    return team_id


async def add_user(
    fleet: Fleet, name: str, level: str, *, team: str | None = None, **values: Any
) -> str:
    user_id = new_id("u")
    async with fleet.ctx.store.engine.begin() as conn:
        await conn.execute(
            sa.insert(users).values(
                id=user_id,
                name=name,
                level=level,
                default_team_id=team,
                created_at=fleet.clock.now,
                **values,
            )
        )
        if team is not None:
            await conn.execute(sa.insert(team_members).values(team_id=team, user_id=user_id))
    return user_id


async def client_of(fleet: Fleet, user_id: str, *permissions: str) -> Any:
    """An HTTP client with a key of that user's (permissions default to submit and read)."""
    key = await fleet.mint_key(*(permissions or ("queue.read", "queue.submit")), name=user_id)
    async with fleet.ctx.store.engine.begin() as conn:
        await conn.execute(
            sa.update(api_keys).where(api_keys.c.id == key["id"]).values(user_id=user_id)
        )
    return await fleet._stack.enter_async_context(
        fleet.client(headers={"Authorization": f"Bearer {key['key']}"})
    )


async def set_policy(fleet: Fleet, **fields: Any) -> dict[str, Any]:
    answer = await fleet.admin.patch("/api/queue/policy", json=fields)
    assert answer.status_code == 200, answer.text
    body: dict[str, Any] = answer.json()
    return body


# ---- limits ------------------------------------------------------------------------------


@both_databases
async def test_a_gpu_limit_keeps_the_second_job_queued_until_the_first_ends(fleet: Fleet) -> None:
    await set_policy(fleet, max_gpus=1)
    one = await fleet.online_worker("gpu-1")
    two = await fleet.online_worker("gpu-2")

    first = await fleet.submit(gpu_count=1)
    second = await fleet.submit(gpu_count=1)

    assert (await fleet.job(first["id"]))["status"] == "offered"
    assert (await fleet.job(second["id"]))["status"] == "queued"
    taker = one if (await one.info())["current_job_id"] == first["id"] else two
    offer = await taker.next_offer()

    await taker.run(offer)
    await taker.finish(offer)

    assert (await fleet.job(second["id"]))["status"] == "offered"


async def test_a_team_job_limit_counts_only_that_teams_jobs(fleet: Fleet) -> None:
    nlp = await add_team(fleet, "nlp", max_jobs=1)
    vision = await add_team(fleet, "vision")
    alice = await client_of(fleet, await add_user(fleet, "alice", "researcher", team=nlp))
    bob = await client_of(fleet, await add_user(fleet, "bob", "researcher", team=vision))
    for n in range(3):
        await fleet.online_worker(f"gpu-{n}")
    body = {"config": {"command": ["python", "train.py"]}}

    a1 = (await alice.post("/api/queue/submit", json=body)).json()
    a2 = (await alice.post("/api/queue/submit", json=body)).json()
    b1 = (await bob.post("/api/queue/submit", json=body)).json()

    assert (a1["status"], a2["status"], b1["status"]) == ("offered", "queued", "offered")
    assert (a1["team"], a1["user"], b1["team"]) == ("nlp", "alice", "vision")


async def test_a_submit_past_the_queued_jobs_limit_gets_429_with_the_limit_and_count(
    fleet: Fleet,
) -> None:
    await set_policy(fleet, user_max_queued=2)
    alice = await client_of(fleet, await add_user(fleet, "alice", "researcher"))
    body = {"config": {"command": ["python", "train.py"]}}
    for _ in range(2):
        assert (await alice.post("/api/queue/submit", json=body)).status_code == 201

    refused = await alice.post("/api/queue/submit", json=body)

    assert refused.status_code == 429
    assert "2 queued jobs" in refused.json()["detail"]
    assert "the limit is 2" in refused.json()["detail"]
    listed = (await fleet.admin.get("/api/queue")).json()
    assert listed["total"] == 2


async def test_a_researchers_job_gets_the_level_priority_and_may_not_ask_more(
    fleet: Fleet,
) -> None:
    alice = await client_of(fleet, await add_user(fleet, "alice", "researcher"))
    body: dict[str, Any] = {"config": {"command": ["python", "train.py"]}}

    plain = await alice.post("/api/queue/submit", json=body)
    greedy = await alice.post("/api/queue/submit", json={**body, "priority": 25})

    assert plain.json()["priority"] == 10
    assert greedy.status_code == 403


# ---- approvals ---------------------------------------------------------------------------


async def test_a_viewers_job_waits_for_approval_and_an_approval_dispatches_it(
    fleet: Fleet,
) -> None:
    agent = await fleet.online_worker("gpu-1")
    viewer = await client_of(fleet, await add_user(fleet, "vic", "viewer"))
    researcher = await client_of(fleet, await add_user(fleet, "rita", "researcher"))

    held = await viewer.post("/api/queue/submit", json={"config": {"command": ["x"]}})
    job_id = held.json()["id"]
    assert held.json()["status"] == "pending_approval"
    assert agent.stream is not None and await agent.stream.collect(0.2) == []

    refused = await researcher.post(f"/api/queue/{job_id}/approve")
    approved = await fleet.admin.post(f"/api/queue/{job_id}/approve")

    assert refused.status_code == 403
    assert approved.status_code == 200, approved.text
    assert approved.json()["approved_by"].startswith("key:")
    assert (await agent.next_offer())["job_id"] == job_id
    types = [e["event_type"] for e in await fleet.audit(target=job_id)]
    assert "job.approved" in types


async def test_a_rejected_job_is_cancelled_saying_who_and_why(fleet: Fleet) -> None:
    viewer = await client_of(fleet, await add_user(fleet, "vic", "viewer"))
    job_id = (await viewer.post("/api/queue/submit", json={"config": {"command": ["x"]}})).json()[
        "id"
    ]

    answer = await fleet.admin.post(f"/api/queue/{job_id}/reject", params={"reason": "too big"})
    again = await fleet.admin.post(f"/api/queue/{job_id}/approve")

    assert answer.status_code == 200, answer.text
    assert answer.json()["status"] == "cancelled"
    assert answer.json()["error"].startswith("rejected by ")
    assert answer.json()["error"].endswith(": too big")
    assert again.status_code == 409
    assert "job.rejected" in [e["event_type"] for e in await fleet.audit(target=job_id)]


async def test_a_rule_on_gpus_holds_a_researchers_big_jobs_only(fleet: Fleet) -> None:
    await set_policy(fleet, approve_gpus_over=4, approve_levels=[])
    rita = await client_of(fleet, await add_user(fleet, "rita", "researcher"))
    body: dict[str, Any] = {"config": {"command": ["x"]}}

    small = (await rita.post("/api/queue/submit", json={**body, "gpu_count": 4})).json()
    big = (await rita.post("/api/queue/submit", json={**body, "gpu_count": 8})).json()

    assert (small["status"], big["status"]) == ("queued", "pending_approval")


async def test_a_lead_may_approve_and_a_researcher_may_not(fleet: Fleet) -> None:
    team = await add_team(fleet, "nlp")  # a lead approves the jobs of their own team's members
    viewer = await client_of(fleet, await add_user(fleet, "vic", "viewer", team=team))
    lead = await client_of(
        fleet, await add_user(fleet, "lea", "lead", team=team), "queue.read", "queue.approve"
    )
    researcher = await client_of(
        fleet, await add_user(fleet, "rita", "researcher", team=team), "queue.read", "queue.approve"
    )
    job_id = (await viewer.post("/api/queue/submit", json={"config": {"command": ["x"]}})).json()[
        "id"
    ]

    refused = await researcher.post(f"/api/queue/{job_id}/approve")
    approved = await lead.post(f"/api/queue/{job_id}/approve")

    assert refused.status_code == 403
    assert approved.status_code == 200, approved.text
    assert approved.json()["status"] == "queued"


# ---- the compatible endpoints ------------------------------------------------------------


async def test_the_compatible_endpoints_answer_simpletuners_shapes(fleet: Fleet) -> None:
    await fleet.online_worker("gpu-1")
    running = await fleet.submit()
    waiting = await fleet.submit()

    stats = (await fleet.admin.get("/api/queue/stats")).json()
    me = (await fleet.admin.get("/api/queue/me")).json()
    position = (await fleet.admin.get(f"/api/queue/position/{waiting['id']}")).json()
    concurrency = (await fleet.admin.get("/api/queue/concurrency")).json()

    assert stats["queue_depth"] == 1 and stats["running"] == 1
    assert {"max_concurrent", "user_max_concurrent", "avg_wait_seconds", "by_status"} <= set(stats)
    assert stats["by_status"]["pending"] == 1
    assert stats["by_user"] == {"admin": 2}
    assert (me["pending_count"], me["running_count"], me["blocked_count"]) == (1, 1, 0)
    assert me["best_position"] == 1
    assert [j["id"] for j in me["running_jobs"]] == [running["id"]]
    assert position["position"] == 1 and position["job_id"] == waiting["id"]
    assert concurrency["max_concurrent"] is None and concurrency["enable_fair_share"] is False


async def test_concurrency_takes_simpletuners_names_and_sets_ours(fleet: Fleet) -> None:
    answer = await fleet.admin.post(
        "/api/queue/concurrency",
        json={"max_concurrent": 5, "user_max_concurrent": 2, "enable_fair_share": True},
    )

    assert answer.status_code == 200, answer.text
    policy = (await fleet.admin.get("/api/queue/policy")).json()
    assert (policy["max_jobs"], policy["user_max_jobs"], policy["fair_share"]) == (5, 2, True)
    assert policy["updated_by"].startswith("key:")
    assert "queue.policy_changed" in [e["event_type"] for e in await fleet.audit()]


async def test_a_limit_sent_as_null_is_cleared(fleet: Fleet) -> None:
    await set_policy(fleet, max_gpus=4, fair_share=True)

    after = await set_policy(fleet, max_gpus=None)

    assert after["max_gpus"] is None
    assert after["fair_share"] is True


async def test_a_reader_cannot_change_the_policy(fleet: Fleet) -> None:
    key = await fleet.mint_key("queue.read", "queue.submit")
    reader = await fleet._stack.enter_async_context(
        fleet.client(headers={"Authorization": f"Bearer {key['key']}"})
    )

    answer = await reader.patch("/api/queue/policy", json={"max_gpus": 1})

    assert answer.status_code == 403
    assert (await reader.get("/api/queue/policy")).json()["max_gpus"] is None


# ---- fair share --------------------------------------------------------------------------


async def test_with_fair_share_the_team_below_its_share_goes_first(fleet: Fleet) -> None:
    busy = await add_team(fleet, "busy", usage=1_000_000.0)
    idle = await add_team(fleet, "idle")
    bea = await client_of(fleet, await add_user(fleet, "bea", "researcher", team=busy))
    ida = await client_of(fleet, await add_user(fleet, "ida", "researcher", team=idle))
    await set_policy(fleet, fair_share=True)
    body = {"config": {"command": ["x"]}}
    older = (await bea.post("/api/queue/submit", json=body)).json()
    fleet.clock.advance(60)
    newer = (await ida.post("/api/queue/submit", json=body)).json()

    without = (await fleet.admin.get(f"/api/queue/position/{newer['id']}")).json()
    agent = await fleet.online_worker("gpu-1")

    assert without["position"] == 1 and without["ahead_by_share"] == 0
    assert (await agent.next_offer())["job_id"] == newer["id"]
    assert (await fleet.admin.get(f"/api/queue/position/{older['id']}")).json()["position"] == 1


# ---- cleanup -----------------------------------------------------------------------------


@both_databases
async def test_cleanup_deletes_old_ended_jobs_and_never_an_active_one(fleet: Fleet) -> None:
    agent = await fleet.online_worker("gpu-1")
    done = await fleet.submit()
    offer = await agent.next_offer()
    await agent.run(offer)
    await agent.finish(offer)
    running = await fleet.submit()
    await agent.run(await agent.next_offer())
    queued = await fleet.submit()
    fleet.clock.advance(40 * 86400)

    answer = await fleet.admin.post("/api/queue/cleanup", params={"days": 30})

    assert answer.json() == {"success": True, "deleted": 1, "days": 30}
    left = {j["id"] for j in (await fleet.admin.get("/api/queue")).json()["jobs"]}
    assert left == {running["id"], queued["id"]}
    assert done["id"] not in left


@pytest.mark.parametrize("days", ["0", "366", "-1", "abc", "1e3"])
async def test_cleanup_refuses_days_outside_one_to_365(fleet: Fleet, days: str) -> None:
    answer = await fleet.admin.post(f"/api/queue/cleanup?days={days}")

    assert answer.status_code == 422


# ---- hostile input -----------------------------------------------------------------------


@pytest.mark.parametrize(
    "body",
    [
        {"max_gpus": -1},
        {"max_gpus": 2**40},
        {"max_gpus": "8"},
        {"max_gpus": True},
        {"half_life_s": float("nan")},
        {"half_life_s": 0},
        {"preempt_grace_s": float("inf")},
        {"approve_levels": ["emperor"]},
        {"approve_levels": "viewer"},
        {"fair_share": "yes"},
        {"no_such_field": 1},
        [1, 2],
        "policy",
    ],
)
async def test_a_hostile_policy_body_is_refused_and_changes_nothing(
    fleet: Fleet, body: Any
) -> None:
    before = (await fleet.admin.get("/api/queue/policy")).json()

    answer = await post_raw(fleet.admin, "/api/queue/policy", body, method="PATCH")
    compat = await post_raw(fleet.admin, "/api/queue/concurrency", body)

    assert answer.status_code == 422, answer.text
    assert compat.status_code == 422, compat.text
    assert (await fleet.admin.get("/api/queue/policy")).json() == before


@pytest.mark.parametrize("reason", ["\x00", "a" * 501, "line\nbreak"])
async def test_a_hostile_reject_reason_is_refused(fleet: Fleet, reason: str) -> None:
    job = await fleet.submit(gpu_count=8)

    answer = await fleet.admin.post(f"/api/queue/{job['id']}/reject", params={"reason": reason})

    assert answer.status_code == 422


async def test_unknown_jobs_answer_404_on_every_job_route(fleet: Fleet) -> None:
    for method, path in [
        ("GET", "/api/queue/position/j_nope"),
        ("POST", "/api/queue/j_nope/approve"),
        ("POST", "/api/queue/j_nope/reject"),
    ]:
        answer = await fleet.admin.request(method, path)
        assert answer.status_code == 404, (path, answer.text)


# ---- the policy loop: usage and preemption -----------------------------------------------


@both_databases
async def test_the_loop_accrues_usage_and_fair_share_then_serves_the_other_team(
    fleet: Fleet,
) -> None:
    red = await add_team(fleet, "red")
    blue = await add_team(fleet, "blue")
    rob = await client_of(fleet, await add_user(fleet, "rob", "researcher", team=red))
    bo = await client_of(fleet, await add_user(fleet, "bo", "researcher", team=blue))
    await set_policy(fleet, fair_share=True)
    agent = await fleet.online_worker("gpu-1")
    body = {"config": {"command": ["x"]}, "gpu_count": 1}
    await policy_loop.accrue_usage(fleet.ctx)  # usage counted from now
    first = (await rob.post("/api/queue/submit", json=body)).json()
    offer = await agent.next_offer()
    await agent.run(offer)
    fleet.clock.advance(3600)

    await policy_loop.accrue_usage(fleet.ctx)
    reds = (await rob.post("/api/queue/submit", json=body)).json()
    fleet.clock.advance(60)
    blues = (await bo.post("/api/queue/submit", json=body)).json()
    await agent.finish(offer)

    assert offer["job_id"] == first["id"]
    assert (await agent.next_offer())["job_id"] == blues["id"]
    assert (await fleet.job(reds["id"]))["status"] == "queued"
    samples = (await fleet.admin.get(f"/api/teams/{red}/usage")).json()["samples"]
    assert samples[-1]["usage"] == pytest.approx(3600.0, rel=0.01)
    assert samples[-1]["running_gpus"] == 1


async def test_a_preempted_job_is_requeued_without_a_retry_and_resumes_its_checkpoint(
    fleet: Fleet,
) -> None:
    spare = await add_team(fleet, "spare", preemptible=True)
    sam = await client_of(fleet, await add_user(fleet, "sam", "researcher", team=spare))
    await set_policy(fleet, preemption=True, min_runtime_s=60, preempt_grace_s=30)
    agent = await fleet.online_worker("gpu-1")
    body = {"config": {"command": ["x"]}, "gpu_count": 1, "max_retries": 0}
    low = (await sam.post("/api/queue/submit", json=body)).json()
    offer = await agent.next_offer()
    await agent.run(offer)
    saved = await upload_checkpoint(agent, offer, 100, {"model.pt": b"weights"})
    assert saved.status_code == 201, saved.text
    urgent = await fleet.submit(gpu_count=1, priority=30)

    too_soon = await policy_loop.preempt(fleet.ctx)
    fleet.clock.advance(120)
    preempted = await policy_loop.preempt(fleet.ctx)
    again = await policy_loop.preempt(fleet.ctx)
    assert agent.stream is not None
    cancel = await agent.stream.expect("job_cancel")

    assert (too_soon, preempted, again) == (0, 1, 0)
    assert cancel["job_id"] == low["id"] and cancel["attempt_id"] == offer["attempt_id"]
    assert cancel["preempt"] is True and cancel["grace_s"] == 30
    # An agent that knows no preemption reports a plain cancel: it counts as preempted.
    await agent.finish(offer, "cancelled", error="stopped")
    assert (await fleet.job(low["id"]))["status"] == "queued"
    taken = await agent.next_offer()
    assert taken["job_id"] == urgent["id"]
    await agent.run(taken)
    await agent.finish(taken)
    resumed = await agent.next_offer()
    assert resumed["job_id"] == low["id"]
    assert resumed["resume"] is not None
    assert resumed["resume"]["name"] == "checkpoint-100"
    detail = await fleet.job(low["id"])
    assert detail["attempt_history"][0]["status"] == "preempted"
    assert "job.preempted" in [e["event_type"] for e in await fleet.audit(target=low["id"])]


async def test_a_job_not_preemptible_is_never_preempted(fleet: Fleet) -> None:
    await set_policy(fleet, preemption=True, min_runtime_s=0)
    agent = await fleet.online_worker("gpu-1")
    low = await fleet.submit(gpu_count=1, priority=0, preemptible=False)
    await agent.run(await agent.next_offer())
    await fleet.submit(gpu_count=1, priority=30)
    fleet.clock.advance(3600)

    assert await policy_loop.preempt(fleet.ctx) == 0
    assert (await fleet.job(low["id"]))["status"] == "running"


# ---- why it waits ------------------------------------------------------------------------


async def test_a_job_held_by_a_team_limit_says_so_in_every_surface(fleet: Fleet) -> None:
    nlp = await add_team(fleet, "nlp", max_gpus=1)
    alice = await client_of(fleet, await add_user(fleet, "alice", "researcher", team=nlp))
    await fleet.online_worker("gpu-1")
    await fleet.online_worker("gpu-2")
    body = {"config": {"command": ["x"]}, "gpu_count": 1}
    await alice.post("/api/queue/submit", json=body)
    held = (await alice.post("/api/queue/submit", json=body)).json()

    waiting = (await fleet.job(held["id"]))["waiting"]

    assert waiting["code"] == "team_at_limit"
    assert waiting["summary"].startswith("team nlp is at its limit of 1 GPU")
    assert "gpufleet queue limits" in waiting["summaries"]["cli"]
    assert waiting["params"]["limit"] == 1


async def test_a_held_job_says_it_waits_for_approval(fleet: Fleet) -> None:
    viewer = await client_of(fleet, await add_user(fleet, "vic", "viewer"))
    job = (await viewer.post("/api/queue/submit", json={"config": {"command": ["x"]}})).json()

    waiting = (await fleet.job(job["id"]))["waiting"]

    assert waiting["code"] == "awaiting_approval"
    assert "gpufleet queue approve JOB" in waiting["summaries"]["cli"]
    assert f"/api/queue/{job['id']}/approve" in waiting["summary"]
    rule = "held for approval: viewers' jobs need a lead's or an admin's approval (queue policy)"
    assert all(said.startswith(rule) for said in waiting["summaries"].values())

    await set_policy(fleet, approve_levels=[])  # the rule is gone; the job stays held
    waiting = (await fleet.job(job["id"]))["waiting"]
    assert waiting["summaries"]["ui"].startswith(
        "held for approval: a rule held it when it was submitted (queue policy); "
    )


async def test_a_job_behind_fair_share_says_how_many_go_first(fleet: Fleet) -> None:
    busy = await add_team(fleet, "busy", usage=1_000_000.0)
    idle = await add_team(fleet, "idle")
    bea = await client_of(fleet, await add_user(fleet, "bea", "researcher", team=busy))
    ida = await client_of(fleet, await add_user(fleet, "ida", "researcher", team=idle))
    await set_policy(fleet, fair_share=True)
    drained = await fleet.online_worker("gpu-1")  # one could run them, and takes none
    assert (await fleet.admin.post(f"/api/admin/workers/{drained.id}/drain")).status_code == 200
    body = {"config": {"command": ["x"]}}
    mine = (await bea.post("/api/queue/submit", json=body)).json()
    for _ in range(2):
        fleet.clock.advance(1)
        await ida.post("/api/queue/submit", json=body)

    waiting = (await fleet.job(mine["id"]))["waiting"]

    assert waiting["code"] == "behind_fair_share"
    assert waiting["summary"] == "position 3; 2 jobs of teams further below their share go first"


async def test_the_queue_lists_by_simpletuners_status_names_and_leaves_out_ended_jobs(
    fleet: Fleet,
) -> None:
    viewer = await client_of(fleet, await add_user(fleet, "vic", "viewer"))
    held = (await viewer.post("/api/queue/submit", json={"config": {"command": ["x"]}})).json()
    waiting = await fleet.admin.post("/api/queue/submit", json={"config": {"command": ["x"]}})
    queued = waiting.json()
    ended = await fleet.admin.post("/api/queue/submit", json={"config": {"command": ["x"]}})
    cancelled = await fleet.admin.post("/api/queue/cancel", json={"job_ids": [ended.json()["id"]]})
    assert cancelled.status_code == 200, cancelled.text

    async def ids(**params: Any) -> set[str]:
        answer = await fleet.admin.get("/api/queue", params={"limit": 500, **params})
        assert answer.status_code == 200, answer.text
        return {j["id"] for j in answer.json()["jobs"]}

    blocked = await ids(status="blocked")
    pending = await ids(status="pending")
    live = await ids(include_completed="false")
    unknown = await fleet.admin.get("/api/queue", params={"status": "sleeping"})
    contradiction = await fleet.admin.get(
        "/api/queue", params={"status": "cancelled", "include_completed": "false"}
    )

    assert held["id"] in blocked and queued["id"] not in blocked
    assert queued["id"] in pending and held["id"] not in pending
    assert {held["id"], queued["id"]} <= live and ended.json()["id"] not in live
    assert unknown.status_code == 422 and "pending, blocked" in unknown.json()["detail"]
    assert contradiction.status_code == 422


async def test_cleanup_deletes_an_old_jobs_files_too_and_keeps_a_pinned_job(fleet: Fleet) -> None:
    agent = await fleet.online_worker("gpu-1")
    jobs = []
    for _ in range(2):
        job = await fleet.submit()
        offer = await agent.next_offer()
        await agent.run(offer)
        await upload(agent, job["id"], offer["attempt_id"], "output/model.pt", b"weights")
        await upload_checkpoint(agent, offer, 10, {"state.pt": b"state"})
        await agent.finish(offer)
        jobs.append(job["id"])
    old, pinned = jobs
    pin = await fleet.admin.put(f"/api/queue/{pinned}/artifacts/pin", json={"pinned": True})
    assert pin.status_code == 200, pin.text
    assert await stored_keys(fleet, old)
    fleet.clock.advance(40 * 86400)

    answer = await fleet.admin.post("/api/queue/cleanup", params={"days": 30})

    assert answer.json()["deleted"] == 1
    assert await stored_keys(fleet, old) == []  # no file of a deleted job is left behind
    assert len(await stored_keys(fleet, pinned)) == 2
    assert (await fleet.admin.get(f"/api/queue/{pinned}")).status_code == 200
