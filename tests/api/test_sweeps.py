"""Sweeps (#38 part 3, docs/jobs.md): a submit with `sweep` makes one job a point, its
placeholders replaced; hostile sweeps are refused whole and store nothing; `max_parallel`
is held at dispatch and said as the wait; a sweep is watched, cancelled and re-run as one,
by those who may (its owner, a lead of its team, an admin), never by others."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
import sqlalchemy as sa

from gpufleet.domain.sweeps import PARAMS_ENV
from gpufleet.server.services import capacity, dispatch
from gpufleet.store.tables import jobs, queue_policy, sweeps
from tests.api.conftest import Agent, Fleet, both_databases, post_raw
from tests.api.test_job_ownership import People, people_of

COMMAND = ["python", "train.py", "--lr", "{lr}", "--batch", "{batch}"]
GRID = {"lr": [0.0001, 0.001], "batch": [16, 32]}


async def sweep_of(fleet: Fleet, client: Any = None, **body: Any) -> dict[str, Any]:
    body.setdefault("config", {"command": COMMAND})
    body.setdefault("sweep", GRID)
    answer = await (client or fleet.admin).post("/api/queue/submit", json=body)
    assert answer.status_code == 201, answer.text
    made: dict[str, Any] = answer.json()
    return made


async def shown(fleet: Fleet, sweep_id: str, client: Any = None) -> dict[str, Any]:
    answer = await (client or fleet.admin).get(f"/api/sweeps/{sweep_id}")
    assert answer.status_code == 200, answer.text
    data: dict[str, Any] = answer.json()
    return data


async def stored(fleet: Fleet) -> tuple[int, int]:
    async with fleet.ctx.store.engine.connect() as conn:
        n_jobs = (await conn.execute(sa.select(sa.func.count()).select_from(jobs))).scalar_one()
        n_sweeps = (await conn.execute(sa.select(sa.func.count()).select_from(sweeps))).scalar_one()
    return int(n_jobs), int(n_sweeps)


@both_databases
async def test_a_grid_sweep_queues_one_job_a_point_with_its_values_in_place(fleet: Fleet) -> None:
    made = await sweep_of(fleet, config={"command": COMMAND, "env": {"LR": "{lr}"}})

    assert (made["size"], made["status"], made["counts"]) == (4, "queued", {"queued": 4})
    assert made["params"] == GRID and made["user"] == "admin"
    data = await shown(fleet, made["id"])
    points = [j["params"] for j in data["jobs"]]
    assert points == [
        {"lr": 0.0001, "batch": 16},
        {"lr": 0.0001, "batch": 32},
        {"lr": 0.001, "batch": 16},
        {"lr": 0.001, "batch": 32},
    ]
    for row in data["jobs"]:
        job = await fleet.job(row["job_id"])
        p = row["params"]
        assert job["config"]["command"][2:] == ["--lr", str(p["lr"]), "--batch", str(p["batch"])]
        assert job["config"]["env"]["LR"] == str(p["lr"])
        assert json.loads(job["config"]["env"][PARAMS_ENV]) == p
    listed = (await fleet.admin.get("/api/sweeps")).json()
    assert [s["id"] for s in listed["sweeps"]] == [made["id"]] and listed["total"] == 1
    assert "sweep.submitted" in [e["event_type"] for e in await fleet.audit(target=made["id"])]


async def test_samples_draw_that_many_distinct_points(fleet: Fleet) -> None:
    grid = {"lr": [1, 2, 3, 4, 5], "batch": [16, 32, 64]}
    made = await sweep_of(fleet, sweep=grid, sweep_samples=6)

    data = await shown(fleet, made["id"])
    drawn = [json.dumps(j["params"], sort_keys=True) for j in data["jobs"]]
    assert made["size"] == 6 and len(set(drawn)) == 6 and data["samples"] == 6


HOSTILE: list[tuple[str, dict[str, Any], str]] = [
    ("100,000 points", {"sweep": {"a": list(range(100)), "b": list(range(1000))}}, "100,000"),
    ("a placeholder naming nothing", {"config": {"command": ["t", "{lrr}", "{lr}"]}}, "{lrr}"),
    ("a parameter never used", {"sweep": {**GRID, "seed": [1]}}, "'seed' is used by no"),
    ("an empty list", {"sweep": {"lr": [], "batch": [1]}}, "non-empty list"),
    ("a non-scalar value", {"sweep": {"lr": [{"x": 1}], "batch": [1]}}, "a dict"),
    ("a bad name", {"sweep": {"l-r": [1], "batch": [1]}}, "not a name"),
    ("a NUL", {"sweep": {"lr": ["a\x00"], "batch": [1]}}, "NUL"),
    ("no sweep, but samples", {"sweep": None, "sweep_samples": 2}, "go with a 'sweep'"),
    ("max_parallel 0", {"max_parallel": 0}, "max_parallel"),
    ("samples past the cap", {"sweep_samples": 1001}, "sweep_samples"),
    ("a config field the sweep breaks", {"config": {"command": COMMAND, "nodes": "{lr}"}}, "nodes"),
    ("a bad worker label", {"worker_labels": {"bad key!": "x"}}, "bad key!"),
]


@pytest.mark.parametrize(("case", "body", "said"), HOSTILE, ids=[h[0] for h in HOSTILE])
async def test_a_hostile_sweep_is_refused_saying_why_and_stores_nothing(
    fleet: Fleet, case: str, body: dict[str, Any], said: str
) -> None:
    sent = {"config": {"command": COMMAND}, "sweep": GRID, **body}
    if sent["sweep"] is None:
        del sent["sweep"]

    answer = await fleet.admin.post("/api/queue/submit", json=sent)

    assert answer.status_code == 422, answer.text
    assert said in answer.text, answer.text
    assert await stored(fleet) == (0, 0)
    assert not [e for e in await fleet.audit() if e["event_type"].startswith(("sweep.", "job."))]


async def test_a_lone_surrogate_in_a_value_is_refused_and_stores_nothing(fleet: Fleet) -> None:
    body = {"config": {"command": COMMAND}, "sweep": {"lr": ["\ud800"], "batch": [1]}}

    answer = await post_raw(fleet.admin, "/api/queue/submit", body)

    assert 400 <= answer.status_code < 500, answer.text
    assert await stored(fleet) == (0, 0)


async def test_a_sweep_past_the_users_queued_limit_is_refused_whole(fleet: Fleet) -> None:
    answer = await fleet.admin.patch("/api/queue/policy", json={"user_max_queued": 3})
    assert answer.status_code == 200, answer.text

    refused = await fleet.admin.post(
        "/api/queue/submit", json={"config": {"command": COMMAND}, "sweep": GRID}
    )

    assert refused.status_code == 429, refused.text
    assert "4 jobs" in refused.json()["detail"]
    assert await stored(fleet) == (0, 0)


async def run(agent: Agent, metrics: dict[str, float], end: str = "completed") -> str:
    offer = await agent.next_offer()
    await agent.run(offer)
    progress = {"step": 10, "total": 10, "metrics": metrics}
    for step in (5, 10):
        answer = await agent.report(
            offer["job_id"],
            "running",
            attempt_id=offer["attempt_id"],
            progress={**progress, "step": step},
        )
        assert answer.status_code == 200, answer.text
    await agent.finish(offer, end)
    return str(offer["job_id"])


@both_databases
async def test_max_parallel_holds_the_rest_of_the_sweep_at_dispatch_and_says_so(
    fleet: Fleet,
) -> None:
    agents = [await fleet.online_worker(f"gpu-{n}") for n in range(3)]
    made = await sweep_of(fleet, max_parallel=2)

    data = await shown(fleet, made["id"])
    assert data["counts"] == {"offered": 2, "queued": 2}
    held = next(j for j in data["jobs"] if j["status"] == "queued")
    waiting = (await fleet.job(held["job_id"]))["waiting"]
    assert waiting["code"] == "sweep_at_max_parallel", waiting
    assert f"sweep {made['id']} runs at most 2" in waiting["summary"]
    assert "gpufleet sweeps cancel" in waiting["summaries"]["cli"]
    async with fleet.ctx.store.read() as q:  # pools launch for none of the held ones
        demand = [w.job_id for w in await capacity.waiting_jobs(q, fleet.ctx.clock())]
    assert demand == []

    offered = [a for a in agents if a.stream and (await a.info())["status"] == "busy"]
    await run(offered[0], {"loss": 0.5})

    data = await shown(fleet, made["id"])
    assert sorted(data["counts"].items()) == [("completed", 1), ("offered", 2), ("queued", 1)]


postgres_only = pytest.mark.parametrize(
    "database_url", [pytest.param("postgres", marks=pytest.mark.postgres)], indirect=True
)


@postgres_only
async def test_a_dispatch_skips_a_sweep_another_is_counting_and_never_waits_for_it(
    fleet: Fleet,
) -> None:
    """Two dispatches (of two replicas) never both count the sweep's last free place: the
    one that finds its row locked passes its jobs over at once (SKIP LOCKED), and the next
    dispatch offers them."""
    for n in range(3):
        await fleet.online_worker(f"gpu-{n}")
    held = await fleet.admin.patch("/api/queue/policy", json={"max_jobs": 0})
    assert held.status_code == 200, held.text
    made = await sweep_of(fleet, max_parallel=2)
    assert made["counts"] == {"queued": 4}
    async with fleet.ctx.store.engine.begin() as conn:  # the limit lifted, no dispatch told
        await conn.execute(sa.update(queue_policy).values(max_jobs=None))

    async with fleet.ctx.store.engine.connect() as other, other.begin():
        mine = sa.select(sweeps).where(sweeps.c.id == made["id"]).with_for_update()
        await other.execute(mine)  # another dispatch counts the sweep's jobs now
        offered = await asyncio.wait_for(dispatch.dispatch_all(fleet.ctx), timeout=10)
        assert offered == 0
    assert (await shown(fleet, made["id"]))["counts"] == {"queued": 4}

    assert await dispatch.dispatch_all(fleet.ctx) == 2  # the health loop's next full pass
    assert (await shown(fleet, made["id"]))["counts"] == {"offered": 2, "queued": 2}


@both_databases
async def test_final_metrics_and_curves_of_every_job_come_back(fleet: Fleet) -> None:
    agent = await fleet.online_worker("gpu-1")
    made = await sweep_of(fleet, sweep={"lr": [1, 2]}, config={"command": ["t", "{lr}"]})
    first = await run(agent, {"loss": 0.5, "acc": 0.9})
    second = await run(agent, {"loss": 0.25, "acc": 0.95}, end="failed")

    data = await shown(fleet, made["id"])

    assert data["status"] == "failed" and data["metrics"] == ["acc", "loss"]
    assert [(j["job_id"], j["metrics"]) for j in data["jobs"]] == [
        (first, {"loss": 0.5, "acc": 0.9}),
        (second, {"loss": 0.25, "acc": 0.95}),
    ]
    curves = (await fleet.admin.get(f"/api/sweeps/{made['id']}/progress")).json()
    assert curves["metric"] == "loss" and curves["metrics"] == ["acc", "loss"]
    assert [(c["job_id"], [p[:2] for p in c["points"]]) for c in curves["curves"]] == [
        (first, [[5, 0.5], [10, 0.5]]),
        (second, [[5, 0.25], [10, 0.25]]),
    ]
    acc = (await fleet.admin.get(f"/api/sweeps/{made['id']}/progress?metric=acc")).json()
    assert acc["metric"] == "acc" and acc["curves"][1]["points"][0][1] == 0.95


@both_databases
async def test_a_sweep_is_cancelled_and_rerun_as_one(fleet: Fleet) -> None:
    agent = await fleet.online_worker("gpu-1")
    made = await sweep_of(fleet)
    offer = await agent.next_offer()
    await agent.run(offer)

    answer = await fleet.admin.post(f"/api/sweeps/{made['id']}/cancel")

    assert answer.status_code == 200, answer.text
    acted = answer.json()
    assert (acted["done"], acted["failed"]) == (4, 0)
    assert acted["results"][-1]["job_id"] == offer["job_id"]  # the waiting ones first
    assert (await agent.stream.expect("job_cancel"))["job_id"] == offer["job_id"]  # type: ignore[union-attr]
    data = await shown(fleet, made["id"])
    assert data["status"] == "cancelled" and data["counts"] == {"cancelled": 4}
    assert data["actions"] == ["rerun"]
    again = await fleet.admin.post(f"/api/sweeps/{made['id']}/cancel")
    assert again.status_code == 409, again.text

    rerun = await fleet.admin.post(f"/api/sweeps/{made['id']}/rerun")

    assert rerun.status_code == 200, rerun.text
    new_ids = {r["new_job_id"] for r in rerun.json()["results"]}
    assert len(new_ids) == 4 and None not in new_ids
    data = await shown(fleet, made["id"])
    assert {j["job_id"] for j in data["jobs"]} == new_ids  # each point's latest job
    listed = (await fleet.admin.get("/api/sweeps")).json()["sweeps"][0]
    assert (listed["counts"], listed["status"]) == (data["counts"], data["status"])
    assert {j["rerun_of"] for j in data["jobs"]} == {r["job_id"] for r in rerun.json()["results"]}
    assert data["status"] in ("queued", "running")
    events = [e["event_type"] for e in await fleet.audit(target=made["id"])]
    assert {"sweep.cancelled", "sweep.rerun"} <= set(events)


async def test_an_unknown_sweep_is_a_404_everywhere(fleet: Fleet) -> None:
    for method, path in (
        ("GET", "/api/sweeps/s_nope"),
        ("GET", "/api/sweeps/s_nope/progress"),
        ("POST", "/api/sweeps/s_nope/cancel"),
        ("POST", "/api/sweeps/s_nope/rerun"),
    ):
        answer = await fleet.admin.request(method, path)
        assert answer.status_code == 404, (path, answer.text)
        assert "no sweep s_nope" in answer.json()["detail"]


# (who tries, whose sweep) → may they cancel and re-run it
MATRIX = [
    ("alice", "alice", True),
    ("lena", "alice", True),  # a lead of nlp
    ("admin", "bob", True),
    ("bob", "alice", False),
    ("alice", "bob", False),
    ("alice", "lena", False),  # a researcher is no lead
    ("lena", "bob", False),  # not a lead of vision
    ("vera", "alice", False),  # a viewer of her team: her own only
]


@pytest.mark.parametrize(("caller", "owner", "may"), MATRIX)
async def test_a_sweep_is_cancelled_and_rerun_only_by_its_owner_a_lead_of_its_team_or_an_admin(
    fleet: Fleet, caller: str, owner: str, may: bool
) -> None:
    people: People = await people_of(fleet)
    made = await sweep_of(fleet, people[owner])
    before = await shown(fleet, made["id"])
    seen = await shown(fleet, made["id"], people[caller])
    assert ("cancel" in seen["actions"]) == may

    answer = await people[caller].post(f"/api/sweeps/{made['id']}/cancel")

    if not may:
        assert answer.status_code == 403, answer.text
        assert "only its owner, a lead of its team or an admin" in answer.json()["detail"]
        assert await shown(fleet, made["id"]) == before
        rerun = await people[caller].post(f"/api/sweeps/{made['id']}/rerun")
        assert rerun.status_code in (403, 409), rerun.text
        return
    assert answer.status_code == 200, answer.text
    assert (await shown(fleet, made["id"]))["counts"] == {"cancelled": 4}
    rerun = await people[caller].post(f"/api/sweeps/{made['id']}/rerun")
    assert rerun.status_code == 200, rerun.text


async def test_keys_that_are_no_users_cannot_act_on_a_sweep(fleet: Fleet) -> None:
    agent = await fleet.online_worker("gpu-1")
    made = await sweep_of(fleet)
    offer = await agent.next_offer()
    reader = await fleet.mint_key("queue.read", name="reader")
    before = await shown(fleet, made["id"])

    tries = {
        "a worker's token": {"X-Worker-Token": agent.token},
        "a job's own attempt token": {"Authorization": f"Bearer {offer['upload_token']}"},
        "a read-only key": {"Authorization": f"Bearer {reader['key']}"},
    }
    for who, headers in tries.items():
        async with fleet.client(headers=headers) as client:
            for path in ("cancel", "rerun"):
                answer = await client.post(f"/api/sweeps/{made['id']}/{path}")
                assert answer.status_code in (401, 403), (who, path, answer.text)
    assert await shown(fleet, made["id"]) == before


async def test_a_viewer_sees_the_sweep_without_actions(fleet: Fleet) -> None:
    people = await people_of(fleet)
    made = await sweep_of(fleet, people.alice)

    assert (await shown(fleet, made["id"], people.vera))["actions"] == []
    assert (await shown(fleet, made["id"], people.alice))["actions"] == ["cancel"]


@both_databases
async def test_a_sweep_submitted_again_with_its_idempotency_key_answers_the_first(
    fleet: Fleet,
) -> None:
    body = {"config": {"command": COMMAND}, "sweep": GRID, "idempotency_key": "ci-run-7"}
    first = await fleet.admin.post("/api/queue/submit", json=body)
    assert first.status_code == 201, first.text

    again = await fleet.admin.post("/api/queue/submit", json=body)

    assert again.status_code == 200, again.text
    assert (again.json()["id"], again.json()["idempotent_hit"]) == (first.json()["id"], True)
    assert await stored(fleet) == (4, 1)
    plain = await fleet.admin.post(
        "/api/queue/submit", json={"config": {"command": ["true"]}, "idempotency_key": "job-1"}
    )
    assert plain.status_code == 201, plain.text
    reused = await fleet.admin.post("/api/queue/submit", json={**body, "idempotency_key": "job-1"})
    assert reused.status_code == 409 and "not a sweep" in reused.json()["detail"], reused.text
    assert await stored(fleet) == (5, 1)


async def test_a_sweep_after_a_job_waits_on_it_and_one_on_no_job_stores_nothing(
    fleet: Fleet,
) -> None:
    upstream = await fleet.submit(worker_labels={"pool": "none"})  # waits: no worker

    made = await sweep_of(fleet, depends_on=[upstream["id"]])

    for row in (await shown(fleet, made["id"]))["jobs"]:
        assert (await fleet.job(row["job_id"]))["waits_on"] == upstream["id"]
    before = await stored(fleet)
    refused = await fleet.admin.post(
        "/api/queue/submit",
        json={"config": {"command": COMMAND}, "sweep": GRID, "depends_on": ["j_nope"]},
    )
    assert 400 <= refused.status_code < 500 and "j_nope" in refused.text, refused.text
    assert await stored(fleet) == before
