"""Who may act on a job (#31, findings 1 and 5), on both databases, with real users and
their own keys made through the API: admin; lena, a lead of nlp; alice, a researcher in nlp;
bob, a researcher in vision; vera, a viewer in nlp. Each write on a job (cancel, one or in
bulk, re-run, approve, reject, pin and delete artifacts) is tried by those who must not take
it: 403, and the job, its artifacts and the audit log stay as they were; and by those who may.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import httpx
import pytest
import sqlalchemy as sa

from gpufleet.store.tables import jobs
from tests.api.artifacts.uploads import upload
from tests.api.conftest import Fleet

READ_SUBMIT = ["queue.read", "queue.submit"]
BODY: dict[str, Any] = {"config": {"command": ["python", "train.py"]}}


@dataclass
class People:
    admin: httpx.AsyncClient
    lena: httpx.AsyncClient
    alice: httpx.AsyncClient
    bob: httpx.AsyncClient
    vera: httpx.AsyncClient

    def __getitem__(self, name: str) -> httpx.AsyncClient:
        client: httpx.AsyncClient = getattr(self, name)
        return client


async def _created(answer: httpx.Response) -> dict[str, Any]:
    assert answer.status_code == 201, answer.text
    body: dict[str, Any] = answer.json()
    return body


async def people_of(fleet: Fleet) -> People:
    admin = fleet.admin
    for team in ("nlp", "vision"):
        await _created(await admin.post("/api/teams", json={"name": team}))
    clients = {}
    for name, level, team in (
        ("lena", "lead", "nlp"),
        ("alice", "researcher", "nlp"),
        ("bob", "researcher", "vision"),
        ("vera", "viewer", "nlp"),
    ):
        await _created(
            await admin.post("/api/users", json={"name": name, "level": level, "team": team})
        )
        perms = [*READ_SUBMIT, "queue.approve"] if level == "lead" else READ_SUBMIT
        key = await _created(
            await admin.post(
                "/api/admin/api-keys", json={"name": name, "permissions": perms, "user": name}
            )
        )
        fleet.secrets.add(key["key"])
        clients[name] = await fleet._stack.enter_async_context(
            fleet.client(headers={"Authorization": f"Bearer {key['key']}"})
        )
    return People(admin=admin, **clients)


@pytest.fixture
async def people(fleet: Fleet) -> People:
    return await people_of(fleet)


async def job_of(people: People, owner: str, **body: Any) -> dict[str, Any]:
    return await _created(await people[owner].post("/api/queue/submit", json={**BODY, **body}))


async def snapshot(fleet: Fleet, job_id: str) -> tuple[str, list[str], bool]:
    """What a refused write must leave as it was: the job's status, its audit entries, pin."""
    job = await fleet.job(job_id)
    audit = [e["event_type"] for e in await fleet.audit(target=job_id)]
    async with fleet.ctx.store.read() as q:
        row = await q.get_job(job_id)
    assert row is not None
    return job["status"], audit, row.artifacts_pinned


def refused(answer: httpx.Response, verb: str) -> None:
    assert answer.status_code == 403, answer.text
    said = answer.json()["detail"]
    assert verb in said and "admin" in said, said


# ---- cancel --------------------------------------------------------------------------------

# (who tries, whose job) → may they cancel it
CANCELS = [
    ("vera", "bob", False),
    ("vera", "alice", False),  # her own team's, but a viewer acts only on her own
    ("vera", "vera", True),
    ("alice", "bob", False),
    ("alice", "admin", False),
    ("alice", "lena", False),  # a researcher is no lead of her team
    ("alice", "alice", True),
    ("bob", "alice", False),
    ("lena", "alice", True),  # a lead of nlp
    ("lena", "vera", True),
    ("lena", "bob", False),  # not a lead of vision
    ("admin", "bob", True),
]


@pytest.mark.parametrize(("caller", "owner", "may"), CANCELS)
async def test_a_job_is_cancelled_only_by_its_owner_a_lead_of_its_team_or_an_admin(
    fleet: Fleet, people: People, caller: str, owner: str, may: bool
) -> None:
    job = await job_of(people, owner)
    before = await snapshot(fleet, job["id"])

    answer = await people[caller].post(f"/api/queue/{job['id']}/cancel")

    if may:
        assert answer.status_code == 200, answer.text
        assert (await fleet.job(job["id"]))["status"] == "cancelled"
    else:
        refused(answer, "cancel")
        assert await snapshot(fleet, job["id"]) == before


async def test_a_job_without_an_owner_is_the_admins(fleet: Fleet, people: People) -> None:
    job = await job_of(people, "alice")
    async with fleet.ctx.store.engine.begin() as conn:  # as rows from before users were
        await conn.execute(sa.update(jobs).where(jobs.c.id == job["id"]).values(user_id=None))
    before = await snapshot(fleet, job["id"])

    refused(await people.alice.post(f"/api/queue/{job['id']}/cancel"), "cancel")
    assert await snapshot(fleet, job["id"]) == before
    lead = await people.lena.post(f"/api/queue/{job['id']}/cancel")  # still for nlp
    assert lead.status_code == 200, lead.text


async def test_a_bulk_cancel_cancels_the_callers_jobs_and_says_why_not_for_the_others(
    fleet: Fleet, people: People
) -> None:
    mine = await job_of(people, "alice")
    bobs = await job_of(people, "bob")
    admins = await job_of(people, "admin")
    before = {j["id"]: await snapshot(fleet, j["id"]) for j in (bobs, admins)}

    answer = await people.alice.post(
        "/api/queue/cancel", json={"job_ids": [mine["id"], bobs["id"], admins["id"]]}
    )

    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert (body["done"], body["failed"]) == (1, 2)
    results = {r["job_id"]: r for r in body["results"]}
    assert results[mine["id"]]["ok"] and results[mine["id"]]["job"]["status"] == "cancelled"
    for other in (bobs, admins):
        assert not results[other["id"]]["ok"]
        assert "only its owner, a lead of its team or an admin" in results[other["id"]]["error"]
        assert await snapshot(fleet, other["id"]) == before[other["id"]]


# ---- re-run --------------------------------------------------------------------------------


async def ended_job_of(people: People, owner: str) -> dict[str, Any]:
    job = await job_of(people, owner)
    answer = await people.admin.post(f"/api/queue/{job['id']}/cancel")
    assert answer.status_code == 200, answer.text
    ended: dict[str, Any] = answer.json()
    return ended


# An edit-and-re-run's body (the Train page's editor): a new command, labels and GPUs.
EDIT: dict[str, Any] = {
    "config": {"command": ["python", "train.py", "--lr", "0.1"]},
    "worker_labels": {"gpu_type": "a100*"},
    "gpu_count": 0,
    "max_retries": 1,
}


async def job_count(fleet: Fleet) -> int:
    total: int = (await fleet.admin.get("/api/queue")).json()["total"]
    return total


@pytest.mark.parametrize(
    ("caller", "owner", "may"),
    [
        ("vera", "alice", False),
        ("alice", "bob", False),
        ("bob", "alice", False),
        ("lena", "bob", False),
        ("alice", "alice", True),
        ("lena", "alice", True),
        ("admin", "bob", True),
    ],
)
@pytest.mark.parametrize("edit", [None, EDIT], ids=["as-it-was", "edited"])
async def test_a_job_is_re_run_only_by_its_owner_a_lead_of_its_team_or_an_admin(
    fleet: Fleet, people: People, caller: str, owner: str, may: bool, edit: Any
) -> None:
    old = await ended_job_of(people, owner)
    before, count = await snapshot(fleet, old["id"]), await job_count(fleet)

    answer = await people[caller].post(f"/api/queue/{old['id']}/rerun", json=edit)

    if may:
        assert answer.status_code == 201, answer.text
        assert answer.json()["rerun_of"] == old["id"]
    else:
        refused(answer, "re-run")
        assert await job_count(fleet) == count  # no new job
        assert await snapshot(fleet, old["id"]) == before


async def test_an_edited_re_run_runs_the_edits_linked_to_the_job_it_re_runs(
    fleet: Fleet, people: People
) -> None:
    value = "hf_alices_token_value"
    fleet.secrets.add(value)
    answer = await people.alice.put("/api/secrets/hf", json={"value": value})
    assert answer.status_code == 200, answer.text
    old = await ended_job_of(people, "alice")
    edit = {**EDIT, "config": {**EDIT["config"], "env": {"HF_TOKEN": {"secret": "hf"}}}}

    answer = await people.alice.post(f"/api/queue/{old['id']}/rerun", json=edit)

    assert answer.status_code == 201, answer.text
    new = await fleet.job(answer.json()["id"])
    assert new["rerun_of"] == old["id"] and new["user"] == "alice"
    assert new["config"] == edit["config"]  # the secret stays a reference, never its value
    assert value not in await fleet.all_stored_text()
    assert new["worker_labels"] == EDIT["worker_labels"]
    assert (new["gpu_count"], new["max_retries"]) == (0, 1)
    assert (await fleet.job(old["id"]))["rerun_as"] == [new["id"]]
    # Only what is sent changes: the rest is the old job's.
    assert (await people.alice.post(f"/api/queue/{new['id']}/cancel")).status_code == 200
    again = await people.alice.post(f"/api/queue/{new['id']}/rerun", json={"max_retries": 5})
    assert again.status_code == 201, again.text
    kept = await fleet.job(again.json()["id"])
    assert kept["config"] == edit["config"] and kept["max_retries"] == 5
    assert kept["worker_labels"] == EDIT["worker_labels"]


@pytest.mark.parametrize(
    ("edit", "status", "says"),
    [
        ({"config": {"command": "rm -rf /"}}, 422, "non-empty list of strings"),
        ({"config": {"command": ["x"], "env": {"A": {"secret": "nope"}}}}, 422, "nope"),
        ({"config": {"command": ["x"], "gpu_count": 2}, "gpu_count": 4}, 422, "disagrees"),
        ({"config": ["not", "an", "object"]}, 422, "config"),
        ({"gpu_count": -1}, 422, "gpu_count"),
        ({"worker_labels": {"gpu": 3}}, 422, "worker_labels"),
        ({"target": "moon"}, 422, "target"),
        ({"status": "completed"}, 422, "status"),  # no field but the editor's
        ({"priority": 10**9}, 422, "priority"),
    ],
)
async def test_a_hostile_edit_is_refused_saying_what_to_fix_and_no_job_is_made(
    fleet: Fleet, people: People, edit: dict[str, Any], status: int, says: str
) -> None:
    old = await ended_job_of(people, "alice")
    count = await job_count(fleet)

    answer = await people.alice.post(f"/api/queue/{old['id']}/rerun", json=edit)

    assert answer.status_code == status, answer.text
    assert says in answer.text
    assert await job_count(fleet) == count


async def test_a_lead_cannot_edit_and_re_run_a_job_whose_credentials_only_its_owner_sees(
    fleet: Fleet, people: People
) -> None:
    config = {"command": ["x"], "env": {"WANDB_API_KEY": "alices-plain-key-value"}}
    fleet.secrets.add("alices-plain-key-value")
    job = await job_of(people, "alice", config=config)
    assert (await people.admin.post(f"/api/queue/{job['id']}/cancel")).status_code == 200
    shown = await people.lena.get(f"/api/queue/{job['id']}")
    assert "alices-plain-key-value" not in shown.text  # what the editor would be filled with
    count = await job_count(fleet)

    answer = await people.lena.post(
        f"/api/queue/{job['id']}/rerun", json={"config": shown.json()["config"]}
    )

    assert answer.status_code == 403 and "only its" in answer.json()["detail"], answer.text
    assert await job_count(fleet) == count


async def test_a_bulk_re_run_re_runs_the_callers_jobs_only(fleet: Fleet, people: People) -> None:
    mine = await ended_job_of(people, "bob")
    alices = await ended_job_of(people, "alice")
    count = await job_count(fleet)

    answer = await people.bob.post("/api/queue/rerun", json={"job_ids": [mine["id"], alices["id"]]})

    assert answer.status_code == 200, answer.text
    results = {r["job_id"]: r for r in answer.json()["results"]}
    assert results[mine["id"]]["ok"] and results[mine["id"]]["job"]["rerun_of"] == mine["id"]
    assert not results[alices["id"]]["ok"]
    assert "only its owner" in results[alices["id"]]["error"]
    assert await job_count(fleet) == count + 1


# ---- approve and reject --------------------------------------------------------------------


@pytest.fixture
async def held(fleet: Fleet, people: People) -> dict[str, dict[str, Any]]:
    """A 2-GPU job each of lena, alice and bob, held for approval (approve_gpus_over=1)."""
    answer = await fleet.admin.patch("/api/queue/policy", json={"approve_gpus_over": 1})
    assert answer.status_code == 200, answer.text
    jobs = {name: await job_of(people, name, gpu_count=2) for name in ("lena", "alice", "bob")}
    assert {j["status"] for j in jobs.values()} == {"pending_approval"}
    return jobs


@pytest.mark.parametrize("verb", ["approve", "reject"])
@pytest.mark.parametrize(
    ("caller", "owner", "may"),
    [
        ("lena", "lena", False),  # a lead never judges their own job
        ("lena", "bob", False),  # nor another team's
        ("lena", "alice", True),  # a member of her team's
        ("admin", "lena", True),
    ],
)
async def test_a_held_job_is_judged_by_a_lead_of_its_team_other_than_its_owner_or_an_admin(
    fleet: Fleet,
    people: People,
    held: dict[str, dict[str, Any]],
    verb: str,
    caller: str,
    owner: str,
    may: bool,
) -> None:
    job_id = held[owner]["id"]
    before = await snapshot(fleet, job_id)

    answer = await people[caller].post(f"/api/queue/{job_id}/{verb}")

    if may:
        assert answer.status_code == 200, answer.text
        after = "queued" if verb == "approve" else "cancelled"
        assert (await fleet.job(job_id))["status"] == after
    else:
        refused(answer, verb)
        assert await snapshot(fleet, job_id) == before


# ---- artifacts -----------------------------------------------------------------------------


async def job_with_artifact(fleet: Fleet, people: People, owner: str) -> str:
    agent = await fleet.online_worker("gpu-1")
    job = await job_of(people, owner)
    offer = await agent.next_offer()
    assert offer["job_id"] == job["id"]
    await agent.run(offer)
    await upload(agent, job["id"], offer["attempt_id"], "output/model.bin", b"weights")
    await agent.finish(offer)
    return str(job["id"])


async def artifact_paths(people: People, job_id: str) -> list[str]:
    answer = await people.admin.get(f"/api/queue/{job_id}/artifacts")
    assert answer.status_code == 200, answer.text
    return [a["path"] for a in answer.json()["artifacts"]]


@pytest.mark.parametrize(
    ("caller", "owner", "may"),
    [
        ("vera", "bob", False),
        ("alice", "bob", False),
        ("lena", "bob", False),
        ("bob", "bob", True),
        ("lena", "alice", True),
        ("admin", "bob", True),
    ],
)
async def test_a_jobs_artifacts_are_pinned_and_deleted_by_its_owner_a_lead_or_an_admin(
    fleet: Fleet, people: People, caller: str, owner: str, may: bool
) -> None:
    job_id = await job_with_artifact(fleet, people, owner)
    before = await snapshot(fleet, job_id)
    client = people[caller]

    pin = await client.put(f"/api/queue/{job_id}/artifacts/pin", json={"pinned": True})
    one = await client.delete(f"/api/queue/{job_id}/artifacts/output/model.bin")
    every = await client.delete(f"/api/queue/{job_id}/artifacts")

    if may:
        assert pin.status_code == 200 and pin.json()["pinned"] is True, pin.text
        assert one.status_code == 200 and one.json()["deleted"] == 1, one.text
        assert every.status_code == 200, every.text
        assert await artifact_paths(people, job_id) == []
    else:
        refused(pin, "pin")
        refused(one, "delete")
        refused(every, "delete")
        assert await artifact_paths(people, job_id) == ["output/model.bin"]
        assert await snapshot(fleet, job_id) == before


# ---- what the answer says the caller may do --------------------------------------------------


async def test_a_jobs_answer_lists_the_actions_its_caller_may_take(
    fleet: Fleet, people: People
) -> None:
    await fleet.admin.patch("/api/queue/policy", json={"approve_gpus_over": 1})
    alices = await job_of(people, "alice", gpu_count=2)  # held
    path = f"/api/queue/{alices['id']}"

    said = {
        name: (await people[name].get(path)).json()["actions"]
        for name in ("admin", "lena", "alice", "bob", "vera")
    }
    listed = {
        name: next(
            j["actions"]
            for j in (await people[name].get("/api/queue")).json()["jobs"]
            if j["id"] == alices["id"]
        )
        for name in ("lena", "bob")
    }

    everything = ["cancel", "approve", "reject", "pin", "delete_artifacts"]
    assert said["admin"] == everything
    assert said["lena"] == everything
    assert said["alice"] == ["cancel", "pin", "delete_artifacts"]
    assert said["bob"] == said["vera"] == []
    assert listed == {"lena": said["lena"], "bob": []}
