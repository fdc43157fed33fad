"""A pool seen from the queue (#36): "why is my job waiting?" names the pool that launches
for it, or why it cannot ("at its max", "the last 3 launches failed: <stderr>"); what the
pools cost, attributed to the jobs that ran on their workers and to their users and teams;
the Capacity API that every reader sees, and no other key."""

from __future__ import annotations

from typing import Any

from tests.api.conftest import Agent, Fleet, both_databases
from tests.api.test_policy import add_user, client_of
from tests.api.test_pool_reconcile import FakeProvider, a_pass, make_pool


async def submit_in_order(fleet: Fleet, n: int) -> list[dict[str, Any]]:
    """`n` jobs for pool burst's workers, a second apart: the queue's order is theirs."""
    jobs = []
    for _ in range(n):
        jobs.append(await fleet.submit(worker_labels={"pool": "burst"}))
        fleet.clock.advance(1)
    return jobs


async def why(fleet: Fleet, job_id: str, client: Any = None) -> dict[str, Any]:
    answer = await (client or fleet.admin).get(f"/api/queue/{job_id}")
    assert answer.status_code == 200, answer.text
    return dict(answer.json()["waiting"])


async def test_a_waiting_job_names_the_pool_launching_for_it_and_its_max(fleet: Fleet) -> None:
    await make_pool(fleet, max_workers=2)
    jobs = await submit_in_order(fleet, 3)
    first = await why(fleet, jobs[0]["id"])  # the decision, before the loop applies it
    assert first["summary"] == "launching a worker in pool burst (1 of max 2)"
    provider = FakeProvider()
    await a_pass(fleet, provider)
    assert len(provider.launched) == 2
    fleet.clock.advance(40)
    said = await why(fleet, jobs[1]["id"])
    assert said["code"] == "pool" and said["params"]["pool"] == "burst"
    assert said["summary"] == (
        "launching a worker in pool burst (2 of max 2; the last launch 40 s ago)"
    )
    assert said["summaries"]["cli"] == said["summaries"]["ui"] == said["summary"]
    assert [w["name"] for w in said["workers"]]  # each worker's reasons are still listed
    third = await why(fleet, jobs[2]["id"])
    assert third["summary"] == "pool burst is at its max of 2"
    # A viewer reads the same words about a job (queue.read).
    viewer = await client_of(fleet, await add_user(fleet, "vic", "viewer"))
    assert (await why(fleet, jobs[2]["id"], viewer))["summary"] == third["summary"]


async def test_failed_launches_are_named_with_the_providers_stderr(fleet: Fleet) -> None:
    await make_pool(fleet)
    job = await fleet.submit(worker_labels={"pool": "burst"})
    failing = FakeProvider(fail="starting instance\nQuotaExceeded: no GPUs left in us-east-1\n")
    for wait_s in (0, 31, 61):  # each try once the backoff is over: 30 s, then 60 s
        fleet.clock.advance(wait_s)
        await a_pass(fleet, failing)
    tries = (await fleet.admin.get("/api/admin/pools/burst")).json()["launches"]
    assert [t["state"] for t in tries] == ["failed"] * 3
    fleet.clock.advance(10)
    said = await why(fleet, job["id"])
    assert said["params"]["pool_code"] == "backing_off"
    assert said["summary"] == (
        "the last 3 launches in pool burst failed: QuotaExceeded: no GPUs left in us-east-1; "
        "the next try in 110 s"
    )
    capacity = (await fleet.admin.get("/api/capacity")).json()
    [pool] = capacity["pools"]
    assert pool["reason"]["text"] == said["summary"]
    assert [f["stderr"].splitlines()[-1] for f in pool["failures"]] == [
        "QuotaExceeded: no GPUs left in us-east-1"
    ] * 3


async def test_a_pool_over_its_cost_cap_says_what_it_would_cost(fleet: Fleet) -> None:
    await make_pool(fleet, max_workers=4, price_per_hour=2.5, max_cost_per_hour=5.0)
    jobs = await submit_in_order(fleet, 3)
    provider = FakeProvider()
    await a_pass(fleet, provider)
    assert len(provider.launched) == 2  # $5/h holds two at $2.50
    said = await why(fleet, jobs[2]["id"])
    assert said["summary"] == (
        "pool burst would cost $7.50/h with 1 worker more, above its max_cost_per_hour $5 "
        "(2 workers up or launching at $2.50/h)"
    )


@both_databases
async def test_a_pool_costs_its_workers_hours_and_its_jobs_their_running_time(
    fleet: Fleet,
) -> None:
    team = (await fleet.admin.post("/api/teams", json={"name": "nlp"})).json()
    ann = await client_of(fleet, await add_user(fleet, "ann", "researcher", team=team["id"]))
    await make_pool(fleet, price_per_hour=2.0)
    answer = await ann.post(
        "/api/queue/submit",
        json={"config": {"command": ["python", "train.py"]}, "worker_labels": {"pool": "burst"}},
    )
    assert answer.status_code == 201, answer.text
    job = answer.json()
    provider = FakeProvider()
    await a_pass(fleet, provider)
    [spec] = provider.launched
    worker_id = (await fleet.admin.get("/api/admin/pools/burst")).json()["launches"][0]
    fleet.secrets.add(spec.token)
    agent = Agent(fleet, worker_id["worker_id"], spec.token, spec.name)
    await agent.connect(gpu_count=1, gpu_name="Test GPU", gpu_vram_gb=24)
    await a_pass(fleet, provider)  # registered now: its hours count from here
    offer = await agent.next_offer()
    await agent.run(offer)
    fleet.clock.advance(1800)
    await agent.finish(offer)
    fleet.clock.advance(1800)  # an hour up, half of it running the job

    cost = (await fleet.admin.get("/api/capacity")).json()["cost"]
    assert (cost["per_hour"], cost["to_date"]) == (2.0, 2.0)
    pool = cost["by_pool"]["burst"]
    assert (pool["worker_hours"], pool["job_hours"], pool["idle"]) == (1.0, 0.5, 1.0)
    assert (cost["by_team"], cost["by_user"]) == ({"nlp": 1.0}, {"ann": 1.0})
    assert (await fleet.job(job["id"]))["cost"] == 1.0
    stats = (await ann.get("/api/queue/stats")).json()["cost"]
    assert stats == cost
    teams = (await fleet.admin.get("/api/teams")).json()["teams"]
    assert [t["cost"] for t in teams if t["name"] == "nlp"] == [1.0]


async def test_the_capacity_api_is_read_by_readers_only_and_hides_a_commands_arguments(
    fleet: Fleet,
) -> None:
    provider = {"type": "command", "launch": ["/opt/up.sh", "--key", "s3cret"]}
    await make_pool(fleet, provider={**provider, "terminate": ["/opt/down.sh", "s3cret"]})
    viewer = await client_of(fleet, await add_user(fleet, "vic", "viewer"))
    seen = (await viewer.get("/api/capacity")).json()
    assert seen["pools"][0]["provider"] == {
        "type": "command",
        "launch": "/opt/up.sh",
        "terminate": "/opt/down.sh",
    }
    assert "s3cret" not in str(seen)
    metrics_only = await client_of(fleet, await add_user(fleet, "mo", "lead"), "metrics.read")
    assert (await metrics_only.get("/api/capacity")).status_code == 403
    agent = await fleet.create_worker("w1")
    async with fleet.client(headers=agent.headers) as worker:
        assert (await worker.get("/api/capacity")).status_code == 401
    assert (await fleet.http.get("/api/capacity")).status_code == 401
