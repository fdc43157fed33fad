"""The queue policy through the API: limits and the queued-jobs 429, approvals, SimpleTuner's
compatible endpoints, fair share, the cleanup, and what a hostile body gets."""

from __future__ import annotations

from typing import Any

import pytest
import sqlalchemy as sa

from gpufleet.domain.secrets import new_id
from gpufleet.store.tables import api_keys, team_members, teams, users
from tests.api.conftest import Fleet, post_raw

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


async def test_a_rule_on_gpus_holds_big_jobs_only(fleet: Fleet) -> None:
    await set_policy(fleet, approve_gpus_over=4, approve_levels=[])

    small = await fleet.submit(gpu_count=4)
    big = await fleet.submit(gpu_count=8)

    assert (small["status"], big["status"]) == ("queued", "pending_approval")


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
