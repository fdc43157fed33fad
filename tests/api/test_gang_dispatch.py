"""Multi-node (gang) jobs at dispatch (#35): all the nodes at once or none, holds for the
gang at the head of the queue, and what a waiting gang says (docs/jobs.md)."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import pytest

from gpufleet.domain.gang import held_reason
from gpufleet.domain.secrets import new_id
from gpufleet.domain.states import RetryOn, Target
from gpufleet.server.services import dispatch, gangs, lifecycle, policy_loop
from gpufleet.store.queries import NewJob
from tests.api.conftest import GPUFLEET_FEATURES, Agent, Fleet, both_databases
from tests.api.test_policy import add_team, add_user, client_of, set_policy

GANG = [*GPUFLEET_FEATURES, "gang"]
# On PostgreSQL too (`both_databases`): the claim (its workers locked, the gang round's
# advisory lock), the holds it writes, a race against a one-node claim, and the nodes'
# completions (applied in batches there). The rules of holds, limits and refusals: SQLite.


async def gang_worker(fleet: Fleet, name: str, **labels: str) -> Agent:
    """An online worker that says it runs multi-node jobs (the fake agents may: the real
    worker will once the rendezvous exists)."""
    agent = await fleet.create_worker(name, labels=labels)
    return await agent.connect(gpu_count=1, gpu_name="Test GPU", features=GANG)


async def submit_gang(fleet: Fleet, nodes: int, **config: Any) -> dict[str, Any]:
    return await fleet.submit(config={"command": ["python", "train.py"], "nodes": nodes, **config})


async def worker(fleet: Fleet, agent: Agent) -> dict[str, Any]:
    answer = await fleet.admin.get(f"/api/admin/workers/{agent.id}")
    assert answer.status_code == 200, answer.text
    data: dict[str, Any] = answer.json()
    return data


@both_databases
@pytest.mark.parametrize("nodes", [2, 3])
async def test_a_gang_is_claimed_on_all_its_workers_at_once(fleet: Fleet, nodes: int) -> None:
    agents = [await gang_worker(fleet, f"node-{n}") for n in range(nodes)]
    job = await submit_gang(fleet, nodes)

    offers = [await a.next_offer() for a in agents]

    details = await fleet.job(job["id"])
    assert details["status"] == "offered"
    assert {o["attempt_id"] for o in offers} == {details["current_attempt_id"]}
    assert sorted(o["node_rank"] for o in offers) == list(range(nodes))
    assert {o["num_nodes"] for o in offers} == {nodes}
    rank0 = next(a for a, o in zip(agents, offers, strict=True) if o["node_rank"] == 0)
    assert details["worker_id"] == rank0.id
    for agent in agents:
        assert (await worker(fleet, agent))["current_job_id"] == job["id"]


async def held_notes(fleet: Fleet) -> dict[str, str | None]:
    answer = await fleet.admin.get("/api/admin/workers")
    return {w["name"]: w["held_note"] for w in answer.json()["workers"]}


@both_databases
async def test_a_gang_is_never_offered_in_part_and_holds_what_matches(fleet: Fleet) -> None:
    agents = [await gang_worker(fleet, f"node-{n}") for n in range(2)]
    job = await submit_gang(fleet, 3)

    details = await fleet.job(job["id"])
    assert details["status"] == "queued"
    for agent in agents:
        assert agent.stream is not None and await agent.stream.collect() == []
    note = held_reason(job["id"], 2, 3)
    assert await held_notes(fleet) == {"node-0": note, "node-1": note}
    assert details["waiting"]["summary"].startswith(
        "waiting for 3 workers that run multi-node jobs (feature gang); 2 match now, "
        "2 held for it; only 2 registered workers could be one of its nodes"
    )

    third = await gang_worker(fleet, "node-2")

    offers = [await a.next_offer() for a in [*agents, third]]
    assert sorted(o["node_rank"] for o in offers) == [0, 1, 2]
    assert set((await held_notes(fleet)).values()) == {None}  # a claim ends the hold


async def test_same_label_claims_workers_with_one_value_of_the_label(fleet: Fleet) -> None:
    a = await gang_worker(fleet, "a", zone="east")
    b1 = await gang_worker(fleet, "b1", zone="west")
    b2 = await gang_worker(fleet, "b2", zone="west")

    job = await submit_gang(fleet, 2, same_label="zone")

    offers = [await b1.next_offer(), await b2.next_offer()]
    assert {o["job_id"] for o in offers} == {job["id"]}
    assert a.stream is not None and await a.stream.collect() == []
    assert (await worker(fleet, a))["status"] == "idle"


async def test_a_smaller_job_behind_a_waiting_gang_does_not_take_a_held_worker(
    fleet: Fleet,
) -> None:
    held = await gang_worker(fleet, "held")
    gang = await submit_gang(fleet, 2)
    small = await fleet.submit()

    waits = await fleet.job(small["id"])
    assert waits["status"] == "queued"
    assert (await worker(fleet, held))["held_for"] == gang["id"]
    assert waits["waiting"]["summary"].startswith(
        "every worker that could run it is busy, draining, offline, connecting or held for a "
        "multi-node job"
    )
    [row] = waits["waiting"]["workers"]
    assert (row["reason_codes"], row["reasons"]) == (
        ["held"],
        [f"is {held_reason(gang['id'], 1, 2)}"],
    )
    await dispatch.dispatch_all(fleet.ctx)  # the full pass passes it over too
    assert (await fleet.job(small["id"]))["status"] == "queued"
    assert held.stream is not None and await held.stream.collect() == []


async def test_a_hold_outlives_a_restart(fleet: Fleet) -> None:
    agent = await gang_worker(fleet, "held")
    gang = await submit_gang(fleet, 2)

    await fleet.restart()

    shown = await worker(fleet, agent)
    assert shown["held_for"] == gang["id"]
    assert shown["held_note"] == held_reason(gang["id"], 1, 2)


async def test_a_hold_is_released_after_gang_hold_and_the_worker_goes_to_others(
    fleet: Fleet,
) -> None:
    agent = await gang_worker(fleet, "held")
    gang = await submit_gang(fleet, 2)
    small = await fleet.submit()
    assert (await fleet.job(small["id"]))["status"] == "queued"

    fleet.clock.advance(fleet.settings.gang_hold - 1)
    await dispatch.dispatch_all(fleet.ctx)
    assert (await worker(fleet, agent))["held_for"] == gang["id"]  # not yet

    fleet.clock.advance(2)
    await dispatch.dispatch_all(fleet.ctx)

    offer = await agent.next_offer()
    assert offer["job_id"] == small["id"]
    released = await fleet.audit(type="job.gang_released")
    assert [e["target"] for e in released] == [gang["id"]]
    assert released[0]["detail"]["workers"] == [agent.id]
    assert "released after 300 s held for job" in released[0]["detail"]["reason"]


async def test_two_gangs_do_not_deadlock(fleet: Fleet) -> None:
    """The first gang holds both workers and cannot complete; once its hold ends they go to
    the gang behind it, which can: neither waits on the other forever."""
    agents = [await gang_worker(fleet, f"node-{n}") for n in range(2)]
    first = await submit_gang(fleet, 3)
    fleet.clock.advance(1)  # the queue's order: the older first
    second = await submit_gang(fleet, 2)
    assert set((await held_notes(fleet)).values()) == {held_reason(first["id"], 2, 3)}
    assert (await fleet.job(second["id"]))["status"] == "queued"

    fleet.clock.advance(fleet.settings.gang_hold)
    await dispatch.dispatch_all(fleet.ctx)

    offers = [await a.next_offer() for a in agents]
    assert {o["job_id"] for o in offers} == {second["id"]}
    assert (await fleet.job(first["id"]))["status"] == "queued"


async def test_a_worker_that_does_not_say_gang_is_never_offered_one(fleet: Fleet) -> None:
    simpletuner = await fleet.create_worker("released-agent")
    await simpletuner.connect(gpu_count=1, gpu_name="Test GPU", features=[])
    plain = await fleet.create_worker("gpufleet-worker")
    await plain.connect(gpu_count=1, gpu_name="Test GPU")  # today's worker: no `gang`

    job = await fleet.submit(config={"nodes": 2})  # a SimpleTuner config: no command
    await dispatch.dispatch_all(fleet.ctx)

    details = await fleet.job(job["id"])
    assert details["status"] == "queued"
    assert details["waiting"]["summary"].startswith(
        "waiting for 2 workers that run multi-node jobs (feature gang); 0 match now; "
        "only 0 registered workers could be one of its nodes"
    )
    reasons = {w["name"]: w["reason_codes"] for w in details["waiting"]["workers"]}
    assert reasons == {"released-agent": ["no_gang"], "gpufleet-worker": ["no_gang"]}
    assert set((await held_notes(fleet)).values()) == {None}


async def test_a_held_worker_that_is_drained_or_goes_offline_leaves_the_hold(
    fleet: Fleet,
) -> None:
    drained = await gang_worker(fleet, "drained")
    lost = await gang_worker(fleet, "lost")
    gang = await submit_gang(fleet, 3)
    assert set((await held_notes(fleet)).values()) == {held_reason(gang["id"], 2, 3)}

    answer = await fleet.admin.post(f"/api/admin/workers/{drained.id}/drain")
    assert answer.status_code == 200, answer.text
    await lost.disconnect()

    assert (await worker(fleet, drained))["held_for"] is None
    assert (await worker(fleet, lost))["held_for"] is None


async def test_limits_count_every_node_of_a_gang(fleet: Fleet) -> None:
    answer = await fleet.admin.patch("/api/queue/policy", json={"max_gpus": 3})
    assert answer.status_code == 200, answer.text
    agents = [await gang_worker(fleet, f"node-{n}") for n in range(2)]

    job = await fleet.submit(config={"command": ["train"], "nodes": 2, "gpu_count": 2})
    for agent in agents:
        await agent.connect(gpu_count=2, gpu_name="Test GPU", features=GANG)
    await dispatch.dispatch_all(fleet.ctx)

    details = await fleet.job(job["id"])
    assert details["status"] == "queued"  # 2 nodes x 2 GPUs is 4, over the limit of 3
    assert details["waiting"]["code"] == "fleet_at_limit"
    assert set((await held_notes(fleet)).values()) == {None}  # a held-back gang holds nothing

    await fleet.admin.patch("/api/queue/policy", json={"max_gpus": 4})
    await dispatch.dispatch_all(fleet.ctx)

    assert (await fleet.job(job["id"]))["status"] == "offered"


async def test_a_key_without_submit_cannot_submit_a_gang(fleet: Fleet) -> None:
    key = await fleet.mint_key("queue.read")
    reader = await fleet._stack.enter_async_context(
        fleet.client(headers={"Authorization": f"Bearer {key['key']}"})
    )

    answer = await reader.post(
        "/api/queue/submit", json={"config": {"command": ["train"], "nodes": 2}}
    )

    assert answer.status_code == 403
    assert (await fleet.admin.get("/api/queue")).json()["jobs"] == []


async def test_a_gang_of_too_many_nodes_is_refused_naming_the_field(fleet: Fleet) -> None:
    answer = await fleet.admin.post(
        "/api/queue/submit", json={"config": {"command": ["train"], "nodes": 65}}
    )

    assert answer.status_code == 422
    assert "'nodes' must be a whole number from 1 to 64" in answer.text


@both_databases
async def test_a_gang_round_racing_a_one_node_claim_never_shares_a_worker(
    fleet: Fleet, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A gang round plans on the idle workers it read; a one-node submit takes one of them
    before the round claims (PostgreSQL: each its own connection; SQLite has one writer,
    so there the submit waits for the round). The round's claim must lose and plan again:
    no worker ends up in two live attempts."""
    agents = [await gang_worker(fleet, f"node-{n}") for n in range(3)]
    gang_id = await _queue_without_dispatch(fleet, nodes=2)
    planned = asyncio.Event()
    claimed = asyncio.Event()
    claim_gang = lifecycle.claim_gang

    async def after_the_submit(*args: Any) -> Any:  # the injected interleaving
        planned.set()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(claimed.wait(), timeout=1)
        return await claim_gang(*args)

    monkeypatch.setattr(lifecycle, "claim_gang", after_the_submit)
    round_ = asyncio.create_task(gangs.gang_round(fleet.ctx))
    await planned.wait()
    small = await fleet.submit()
    claimed.set()
    assert (await round_).offered == 1

    live: dict[str, list[str]] = {}
    async with fleet.ctx.store.read() as q:
        for job_id in (gang_id, small["id"]):
            job = await q.get_job(job_id)
            assert job is not None
            if job.current_attempt_id is None:
                continue
            nodes = await q.attempt_nodes(job.current_attempt_id)
            for worker_id in [n.worker_id for n in nodes] or [job.worker_id or ""]:
                live.setdefault(worker_id, []).append(job_id)
    assert all(len(jobs) == 1 for jobs in live.values()), live
    assert [jobs[0] for jobs in live.values()].count(gang_id) == 2
    assert len(live) == 3 or (await fleet.job(small["id"]))["status"] == "queued"
    for agent in agents:
        shown = await worker(fleet, agent)
        assert shown["current_job_id"] in (*live.get(agent.id, []), None)


async def _queue_without_dispatch(fleet: Fleet, nodes: int) -> str:
    """A gang written straight into the queue: no dispatch has seen it yet."""
    job_id = new_id("j")
    async with fleet.ctx.store.write() as q:
        await q.queue_job(
            NewJob(
                id=job_id,
                config={"command": ["true"], "nodes": nodes},
                target=Target.WORKER,
                worker_labels={},
                gpu_count=1,
                priority=0,
                max_retries=0,
                retry_on=[RetryOn.LOST],
                submitted_by="test",
                created_at=fleet.ctx.clock(),
                nodes=nodes,
            )
        )
    return job_id


async def test_a_gang_that_leaves_the_queue_releases_what_it_held(fleet: Fleet) -> None:
    held = await gang_worker(fleet, "held")
    gang = await submit_gang(fleet, 2)
    assert (await worker(fleet, held))["held_for"] == gang["id"]

    answer = await fleet.admin.post(f"/api/queue/{gang['id']}/cancel")
    assert answer.status_code == 200, answer.text

    assert (await worker(fleet, held))["held_for"] is None
    small = await fleet.submit()  # the worker is free for other jobs at once
    assert (await held.next_offer())["job_id"] == small["id"]


@both_databases
async def test_every_nodes_worker_is_freed_when_the_gangs_attempt_ends(fleet: Fleet) -> None:
    """Reports are fenced by node rank (a report naming none is refused); the attempt's end
    frees every node, each once it ended (tests/api/test_gang_rendezvous.py: the start
    itself)."""
    agents = [await gang_worker(fleet, f"node-{n}") for n in range(3)]
    job = await submit_gang(fleet, 3)
    offers = {a.id: await a.next_offer() for a in agents}
    rank = {o["node_rank"]: a for a in agents for o in [offers[a.id]]}
    other = await rank[1].report(
        job["id"], "acknowledged", attempt_id=offers[rank[1].id]["attempt_id"]
    )
    assert other.status_code == 422

    for status in ("acknowledged", "running"):
        for r in range(3):
            offer = offers[rank[r].id]
            extra = {"port": 29_500} if r == 0 and status == "acknowledged" else {}
            answer = await rank[r].report(
                job["id"], status, attempt_id=offer["attempt_id"], node_rank=r, **extra
            )
            assert answer.status_code == 200, answer.text
    await rank[0].finish(offers[rank[0].id], node_rank=0)

    assert (await fleet.job(job["id"]))["status"] == "completed"
    # Nodes still running outlive rank 0 until their own end (tests/api/test_gang_outliving.py).
    for r in (1, 2):
        shown = await worker(fleet, rank[r])
        assert (shown["status"], shown["current_job_id"]) == ("busy", job["id"])
        await rank[r].finish(offers[rank[r].id], node_rank=r)
    for agent in agents:
        shown = await worker(fleet, agent)
        assert (shown["status"], shown["current_job_id"]) == ("idle", None)
    async with fleet.ctx.store.read() as q:
        nodes = await q.attempt_nodes(offers[rank[0].id]["attempt_id"])
    assert [(n.rank, n.worker_id, n.state.value) for n in nodes] == [
        (r, rank[r].id, "ended") for r in range(3)
    ]


async def test_no_job_is_preempted_for_a_gang(fleet: Fleet) -> None:
    """A gang holds the workers that free up; stopping one job would not complete it."""
    spare = await add_team(fleet, "spare", preemptible=True)
    sam = await client_of(fleet, await add_user(fleet, "sam", "researcher", team=spare))
    await set_policy(fleet, preemption=True, min_runtime_s=0)
    agent = await gang_worker(fleet, "node-0")
    low = (await sam.post("/api/queue/submit", json={"config": {"command": ["x"]}})).json()
    await agent.run(await agent.next_offer())
    gang = await submit_gang(fleet, 2)
    fleet.clock.advance(3600)

    assert await policy_loop.preempt(fleet.ctx) == 0
    assert (await fleet.job(low["id"]))["status"] == "running"
    assert (await fleet.job(gang["id"]))["status"] == "queued"
