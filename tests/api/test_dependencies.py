"""Jobs that run after others (#38, docs/jobs.md, Dependencies): a job waits, saying on which
job, until its dependencies end as it needs; one that fails or is cancelled cancels its
dependents, naming it, and theirs in turn; a submit naming what it may not is refused with
nothing stored; and whoever ends a dependency (another replica too) releases its dependents."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest

from tests.api.artifacts.uploads import sha, upload
from tests.api.conftest import Agent, Fleet, both_databases, linked
from tests.api.test_job_ownership import People, people_of
from tests.api.test_pool_reconcile import FakeProvider, a_pass, make_pool

CONFIG: dict[str, Any] = {"command": ["python", "train.py"]}


async def submitted(client: httpx.AsyncClient, **body: Any) -> dict[str, Any]:
    answer = await client.post("/api/queue/submit", json={"config": CONFIG, **body})
    assert answer.status_code == 201, answer.text
    job: dict[str, Any] = answer.json()
    return job


async def running(fleet: Fleet, agent: Agent, **body: Any) -> tuple[dict[str, Any], Any]:
    """A job submitted and running on `agent` (idle before), with its offer."""
    job = await submitted(fleet.admin, **body)
    offer = await agent.next_offer()
    assert offer["job_id"] == job["id"]
    await agent.run(offer)
    return job, offer


async def stored_jobs(fleet: Fleet) -> int:
    answer = await fleet.admin.get("/api/queue", params={"limit": 1})
    total: int = answer.json()["total"]
    return total


async def test_a_job_waits_naming_its_dependency_and_runs_once_it_completed(
    fleet: Fleet,
) -> None:
    busy = await fleet.online_worker("gpu-a")
    upstream, offer = await running(fleet, busy)
    idle = await fleet.online_worker("gpu-b")
    job = await submitted(fleet.admin, depends_on=[upstream["id"]])
    assert job["status"] == "queued" and job["worker_id"] is None
    assert job["waits_on"] == upstream["id"]
    assert idle.stream is not None and not await idle.stream.collect()  # not offered

    shown = await fleet.job(job["id"])
    assert shown["waiting"]["code"] == "dependency"
    assert upstream["id"] in shown["waiting"]["summary"]
    assert upstream["id"] in shown["waiting"]["summaries"]["cli"]
    assert shown["depends_on"] == [{"job": upstream["id"], "on": "completed", "status": "running"}]
    assert (await fleet.job(upstream["id"]))["dependents"] == [
        {"job": job["id"], "status": "queued"}
    ]

    await busy.finish(offer)
    offered = await busy.next_offer()  # the worker its end freed looks first
    assert offered["job_id"] == job["id"]
    assert (await fleet.job(job["id"]))["waits_on"] is None


async def test_a_failed_dependency_cancels_its_dependents_in_turn_naming_each_cause(
    fleet: Fleet,
) -> None:
    agent = await fleet.online_worker("gpu-a", gpu_count=1)
    upstream, offer = await running(fleet, agent, max_retries=0)
    child = await submitted(fleet.admin, depends_on=[upstream["id"]])
    grandchild = await submitted(fleet.admin, depends_on=[{"job": child["id"]}])
    anyway = await submitted(fleet.admin, depends_on=[{"job": upstream["id"], "on": "ended"}])

    await agent.finish(offer, "failed", exit_code=1, error="boom")

    assert (await fleet.job(upstream["id"]))["status"] == "failed"
    shown = await fleet.job(child["id"])
    assert shown["status"] == "cancelled"
    assert upstream["id"] in shown["error"] and "failed" in shown["error"]
    shown = await fleet.job(grandchild["id"])
    assert shown["status"] == "cancelled" and child["id"] in shown["error"]
    # `on: ended` is met by any end: it is offered (to the worker the failure freed).
    assert (await agent.next_offer())["job_id"] == anyway["id"]
    ended = [
        e
        for e in await fleet.audit(target=grandchild["id"])
        if e["event_type"] == "job.status_changed"
    ]
    assert ended and ended[-1]["detail"]["new"] == "cancelled"


async def test_a_cancelled_queued_dependency_releases_those_that_wait_for_it_to_end(
    fleet: Fleet,
) -> None:
    blocker = await fleet.online_worker("gpu-a")
    _first, _offer = await running(fleet, blocker)
    waiting = await submitted(fleet.admin)  # queued: the one worker is busy
    after = await submitted(fleet.admin, depends_on=[{"job": waiting["id"], "on": "ended"}])
    needs = await submitted(fleet.admin, depends_on=[waiting["id"]])
    answer = await fleet.admin.post(f"/api/queue/{waiting['id']}/cancel")
    assert answer.status_code == 200, answer.text
    assert (await fleet.job(after["id"]))["waits_on"] is None
    assert (await fleet.job(after["id"]))["waiting"]["code"] != "dependency"
    assert (await fleet.job(needs["id"]))["status"] == "cancelled"


async def test_a_dependency_already_ended_is_judged_at_the_submit(fleet: Fleet) -> None:
    agent = await fleet.online_worker("gpu-a")
    done, offer = await running(fleet, agent)
    await agent.finish(offer)
    failed, offer = await running(fleet, agent, max_retries=0)
    await agent.finish(offer, "failed", exit_code=2)

    job = await submitted(fleet.admin, depends_on=[done["id"]])
    assert job["waits_on"] is None and job["status"] == "offered"  # met: offered at once
    before = await stored_jobs(fleet)
    answer = await fleet.admin.post(
        "/api/queue/submit", json={"config": CONFIG, "depends_on": [failed["id"]]}
    )
    assert answer.status_code == 409, answer.text
    assert failed["id"] in answer.json()["detail"] and "on: ended" in answer.json()["detail"]
    assert await stored_jobs(fleet) == before
    ok = await submitted(fleet.admin, depends_on=[{"job": failed["id"], "on": "ended"}])
    assert ok["waits_on"] is None


GARBAGE: list[Any] = [
    ["j_nope"],  # does not exist: 404
    "j_a",
    [5],
    [None],
    [["j_a"]],
    [{"job": "j_a", "on": "failed"}],
    [{"job": "j_a", "on": "completed", "x": 1}],
    [{"on": "ended"}],
    ["../../etc/passwd"],
    ["j_" + "a" * 100],
    [f"j_{n}" for n in range(101)],
]


@pytest.mark.parametrize("depends_on", GARBAGE)
async def test_garbage_dependencies_are_refused_and_nothing_is_stored(
    fleet: Fleet, depends_on: Any
) -> None:
    before = await stored_jobs(fleet)
    answer = await fleet.admin.post(
        "/api/queue/submit", json={"config": CONFIG, "depends_on": depends_on}
    )
    assert answer.status_code in (404, 422), answer.text
    assert await stored_jobs(fleet) == before


async def test_a_dependency_named_twice_or_bad_inputs_are_refused_saying_why(
    fleet: Fleet,
) -> None:
    upstream = await submitted(fleet.admin)
    before = await stored_jobs(fleet)
    for body, said in (
        ({"depends_on": [upstream["id"], {"job": upstream["id"]}]}, "twice"),
        ({"depends_on": [upstream["id"]], "inputs": {"j_other": ["output/**"]}}, "depends_on"),
        ({"depends_on": [upstream["id"]], "inputs": {upstream["id"]: ["/etc/x"]}}, "absolute"),
        ({"depends_on": [upstream["id"]], "inputs": {upstream["id"]: ["a/../../x"]}}, ".."),
        ({"depends_on": [upstream["id"]], "inputs": {upstream["id"]: []}}, "patterns"),
        ({"inputs": {upstream["id"]: ["output/**"]}}, "depends_on"),
    ):
        answer = await fleet.admin.post("/api/queue/submit", json={"config": CONFIG, **body})
        assert answer.status_code == 422, answer.text
        assert said in answer.json()["detail"], answer.text
    answer = await fleet.admin.post(
        "/api/queue/submit", json={"config": CONFIG, "depends_on": ["j_missing1"]}
    )
    assert answer.status_code == 404 and "j_missing1" in answer.json()["detail"]
    assert await stored_jobs(fleet) == before


@pytest.fixture
async def people(fleet: Fleet) -> People:
    return await people_of(fleet)


async def test_keys_may_name_only_jobs_they_see_and_others_jobs_end_theirs(
    fleet: Fleet, people: People
) -> None:
    agent = await fleet.online_worker("gpu-a")
    bobs = await submitted(people.bob)
    offer = await agent.next_offer()
    await agent.run(offer)
    # Every key with queue.read sees every job: a viewer's and another team's may name it.
    veras = await submitted(people.vera, depends_on=[bobs["id"]])
    alices = await submitted(people.alice, depends_on=[veras["id"]])
    # A key that may not see jobs names none: 403, nothing stored.
    blind = await fleet.mint_key("queue.submit", name="blind")
    before = await stored_jobs(fleet)
    async with fleet.client(headers={"Authorization": f"Bearer {blind['key']}"}) as client:
        answer = await client.post(
            "/api/queue/submit", json={"config": CONFIG, "depends_on": [bobs["id"]]}
        )
        assert answer.status_code == 403 and "queue.read" in answer.json()["detail"]
        assert (await client.post("/api/queue/submit", json={"config": CONFIG})).status_code == 201
    assert await stored_jobs(fleet) == before + 1
    # A job's own (worker) token submits nothing.
    answer = await fleet.http.post(
        "/api/queue/submit",
        json={"config": CONFIG, "depends_on": [bobs["id"]]},
        headers=agent.headers,
    )
    assert answer.status_code == 401
    # Alice may not cancel Bob's job, nor Vera's; Bob's own cancel ends theirs too.
    assert (await people.alice.post(f"/api/queue/{bobs['id']}/cancel")).status_code == 403
    assert (await people.bob.post(f"/api/queue/{bobs['id']}/cancel")).status_code == 200
    assert (await fleet.job(veras["id"]))["status"] == "cancelled"
    assert veras["id"] in (await fleet.job(alices["id"]))["error"]


async def test_a_job_with_inputs_is_offered_only_to_a_worker_that_fetches_them(
    fleet: Fleet,
) -> None:
    agent = await fleet.online_worker("gpu-a")  # says command and attempts, not inputs
    upstream, offer = await running(fleet, agent)
    await agent.finish(offer)
    job = await submitted(
        fleet.admin, depends_on=[upstream["id"]], inputs={upstream["id"]: ["output/**"]}
    )
    assert job["status"] == "queued" and job["inputs"] == {upstream["id"]: ["output/**"]}
    shown = await fleet.job(job["id"])
    assert "fetch" in " ".join(shown["waiting"]["workers"][0]["reasons"])
    assert agent.stream is not None and not [
        e for e in await agent.stream.collect() if e.get("type") == "job_submit"
    ]


# ---- across replicas (the database decides) ----------------------------------------------


@both_databases
async def test_dependencies_ending_at_once_release_or_doom_their_dependents(
    fleet: Fleet, replica: Fleet
) -> None:
    one = await fleet.online_worker("gpu-a")
    first, first_offer = await running(fleet, one)
    two = await replica.online_worker("gpu-b")  # reports to the replica
    second, second_offer = await running(replica, two, max_retries=0)
    both = await submitted(replica.admin, depends_on=[first["id"], second["id"]])
    anyway = await submitted(
        replica.admin, depends_on=[first["id"], {"job": second["id"], "on": "ended"}]
    )
    # The two dependencies end at once, one on each replica: whichever ends last releases
    # or dooms the dependents, having read the other's end.
    await asyncio.gather(one.finish(first_offer), two.finish(second_offer, "failed"))
    shown = await fleet.job(both["id"])
    assert shown["status"] == "cancelled" and second["id"] in shown["error"], shown
    shown = await fleet.job(anyway["id"])
    assert shown["waits_on"] is None, shown
    assert shown["status"] in ("queued", "offered")


@both_databases
async def test_a_submit_racing_its_dependencys_end_never_waits_forever(
    fleet: Fleet, replica: Fleet
) -> None:
    agent = await fleet.online_worker("gpu-a")
    # Linked: the job met at its submit is offered by whichever replica saw the worker free.
    async with linked(fleet, replica):
        for _ in range(3):
            upstream, offer = await running(fleet, agent)
            racing = replica.admin.post(
                "/api/queue/submit",
                json={"config": {"command": ["true"]}, "depends_on": [upstream["id"]]},
            )
            answer, _ = await asyncio.gather(racing, agent.finish(offer))
            assert answer.status_code == 201, answer.text
            job = await replica.job(answer.json()["id"])
            assert job["waits_on"] is None, job  # released by the end, or met at its submit
            if job["status"] == "offered":
                taken = await agent.next_offer()
                await agent.run(taken)
                await agent.finish(taken)


async def test_a_jobs_offer_carries_the_inputs_it_takes_and_its_attempt_downloads_them(
    fleet: Fleet,
) -> None:
    agent = await (await fleet.create_worker("gpu-a", worker_type="persistent")).connect(
        gpu_count=1, features=["command", "attempts", "inputs"]
    )
    upstream, offer = await running(fleet, agent)
    await upload(agent, upstream["id"], offer["attempt_id"], "output/x", b"weights")
    secret = await upload(agent, upstream["id"], offer["attempt_id"], "private.txt", b"no")
    await agent.finish(offer)
    job = await submitted(
        fleet.admin, depends_on=[upstream["id"]], inputs={upstream["id"]: ["output/**"]}
    )
    taken = await agent.next_offer()
    assert taken["job_id"] == job["id"]
    [entry] = taken["inputs"]
    assert entry["path"] == f"inputs/{upstream['id']}/output/x"
    assert entry["size"] == len(b"weights") and entry["sha256"] == sha(b"weights")
    await agent.run(taken)
    got = await fleet.http.get(entry["url"], headers=agent.headers)
    assert got.status_code == 200 and got.content == b"weights"
    # What its inputs do not select stays the upstream's.
    other = entry["url"].replace(entry["url"].split("/")[-1].split("?")[0], secret["id"])
    assert (await fleet.http.get(other, headers=agent.headers)).status_code == 404
    # An offer of a job without inputs says nothing of them (the SimpleTuner agent's offers
    # are as they were).
    await agent.finish(taken)
    plain = await submitted(fleet.admin)
    assert "inputs" not in await agent.next_offer() and plain["inputs"] is None


async def test_a_job_held_by_a_dependency_launches_no_pool_worker_until_released(
    fleet: Fleet,
) -> None:
    await make_pool(fleet, max_workers=2)
    upstream = await submitted(fleet.admin, worker_labels={"pool": "other"})  # never runs
    held = await submitted(
        fleet.admin,
        worker_labels={"pool": "burst"},
        depends_on=[{"job": upstream["id"], "on": "ended"}],
    )
    provider = FakeProvider()
    await a_pass(fleet, provider)
    assert provider.launched == []  # the pool's demand leaves it out
    assert (await fleet.job(held["id"]))["waiting"]["code"] == "dependency"
    assert (await fleet.admin.post(f"/api/queue/{upstream['id']}/cancel")).status_code == 200
    await a_pass(fleet, provider)
    assert len(provider.launched) == 1
    assert (await fleet.job(held["id"]))["waiting"]["code"] == "pool"


async def test_an_input_pattern_that_could_name_no_artifact_is_refused_naming_it(
    fleet: Fleet,
) -> None:
    upstream = await submitted(fleet.admin)
    before = await stored_jobs(fleet)
    answer = await fleet.admin.post(
        "/api/queue/submit",
        json={
            "config": CONFIG,
            "depends_on": [upstream["id"]],
            "inputs": {upstream["id"]: ["~root/**"]},
        },
    )
    assert answer.status_code == 422 and "'~root/**'" in answer.json()["detail"], answer.text
    assert await stored_jobs(fleet) == before


async def test_no_submit_can_make_a_cycle_not_even_a_resend_naming_its_own_first_job(
    fleet: Fleet,
) -> None:
    """A dependency must exist before its dependent, so edges point to older jobs only. The
    one door left, a resend of an idempotency key naming the job that key made, answers
    that job unchanged: it does not come to wait on itself."""
    await fleet.online_worker("gpu-a")
    first = await submitted(fleet.admin, idempotency_key="cycle", gpu_count=2)  # never fits
    again = await fleet.admin.post(
        "/api/queue/submit",
        json={"config": CONFIG, "idempotency_key": "cycle", "depends_on": [first["id"]]},
    )
    assert again.status_code == 200, again.text
    assert again.json()["id"] == first["id"] and again.json()["idempotent_hit"] is True
    shown = await fleet.job(first["id"])
    assert shown["depends_on"] == [] and shown["dependents"] == []
    assert shown["waits_on"] is None

    # B after A, then A "after" B: A exists already, so only a new job can name B.
    b = await submitted(fleet.admin, depends_on=[first["id"]])
    a_again = await submitted(fleet.admin, depends_on=[b["id"]])
    assert a_again["id"] not in (first["id"], b["id"])
    assert (await fleet.job(first["id"]))["depends_on"] == []
