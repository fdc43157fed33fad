"""Secrets for jobs (#31): write-only, owned, sealed at rest, referenced from a config's env,
resolved only for the job's live attempt on its worker; credential-looking plain values masked
to anyone but their owner."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from gpufleet.domain.job_secrets import MASK, MAX_SECRET_BYTES
from tests.api.conftest import READS, Agent, Fleet
from tests.api.test_people import key_of, make_team, make_user

ALICES = "hf_alice_0123456789abcdefSECRET"  # alice's own `hf`
NLPS = "wandb_nlp_9876543210zyxwvuSECRET"  # team nlp's `wandb`
BOBS = "hf_bob_ffffeeeeddddccccSECRET"
PERMS = ("queue.read", "queue.submit")
REFS = {"HF_TOKEN": {"secret": "hf"}, "WANDB_API_KEY": {"secret": "wandb"}, "MODE": "fast"}


class People:
    def __init__(self, **clients: httpx.AsyncClient) -> None:
        self.alice = clients["alice"]
        self.bob = clients["bob"]
        self.lena = clients["lena"]
        self.vera = clients["vera"]


@pytest.fixture
async def people(fleet: Fleet) -> People:
    await make_team(fleet, "nlp")
    await make_team(fleet, "vision")
    await make_user(fleet, "alice", team="nlp")
    await make_user(fleet, "bob", team="vision")
    await make_user(fleet, "lena", level="lead", team="nlp")
    await make_user(fleet, "vera", level="viewer", team="nlp")
    return People(**{n: await key_of(fleet, n, *PERMS) for n in ("alice", "bob", "lena", "vera")})


async def put(client: httpx.AsyncClient, path: str, value: str) -> httpx.Response:
    return await client.put(path, json={"value": value})


async def fetch_secrets(agent: Agent, offer: dict[str, Any]) -> httpx.Response:
    return await agent.fleet.http.get(
        f"/api/workers/job/{offer['job_id']}/secrets",
        params={"attempt_id": offer["attempt_id"]},
        headers=agent.headers,
    )


async def every_answer(fleet: Fleet, clients: list[httpx.AsyncClient]) -> str:
    """Every read's answer text, for every client given: lists, jobs, configs, audit, secrets."""
    jobs = (await fleet.admin.get("/api/queue?limit=500")).json()["jobs"]
    configs = (await fleet.admin.get("/api/configs")).json()["configs"]
    paths = [*READS, "/api/secrets", "/api/users", "/api/teams", "/api/users/me"]
    paths += [f"/api/queue/{j['id']}" for j in jobs]
    paths += [f"/api/queue/{j['id']}/logs" for j in jobs]
    paths += [f"/api/configs/{c['name']}" for c in configs]
    texts = []
    for client in clients:
        for path in paths:
            texts.append((await client.get(path)).text)
    return "\n".join(texts)


async def test_a_secret_reaches_only_its_jobs_attempt_and_no_answer_or_row(
    fleet: Fleet, people: People
) -> None:
    mine = await put(people.alice, "/api/secrets/hf", ALICES)
    assert mine.status_code == 200, mine.text
    assert mine.json()["owner"] == "alice" and mine.json()["scope"] == "user"
    assert ALICES not in mine.text
    team = await put(people.lena, "/api/teams/nlp/secrets/wandb", NLPS)
    assert team.status_code == 200, team.text
    assert (await put(people.bob, "/api/secrets/hf", BOBS)).status_code == 200

    stored = await people.alice.put(
        "/api/configs/with-refs", json={"command": ["true"], "env": REFS}
    )
    assert stored.status_code == 200, stored.text
    assert stored.json()["config"]["env"] == REFS  # the reference, shown as it is

    agent = await fleet.online_worker("w1")
    submitted = await people.alice.post("/api/queue/submit", json={"config_name": "with-refs"})
    assert submitted.status_code == 201, submitted.text
    offer = await agent.next_offer()
    assert offer["env"] == {"MODE": "fast"}
    assert offer["secret_env"] == {"HF_TOKEN": "hf", "WANDB_API_KEY": "wandb"}
    assert ALICES not in str(offer) and NLPS not in str(offer)

    # The attempt's worker, and only it, reads the values: alice's own, then her team's.
    await agent.run(offer)
    got = await fetch_secrets(agent, offer)
    assert got.status_code == 200, got.text
    assert got.json() == {"env": {"HF_TOKEN": ALICES, "WANDB_API_KEY": NLPS}}
    other = await fleet.online_worker("w2")
    assert (await fetch_secrets(other, offer)).status_code == 403
    wrong = {**offer, "attempt_id": "a_000000000000"}
    assert (await fetch_secrets(agent, wrong)).status_code == 409
    no_key = await fleet.http.get(f"/api/workers/job/{offer['job_id']}/secrets?attempt_id=x")
    assert no_key.status_code == 401
    # An API key (even the admin's) is not a worker's token.
    assert (await fleet.admin.get(f"/api/workers/job/{offer['job_id']}/secrets")).status_code == 401
    await agent.finish(offer)
    assert (await fetch_secrets(agent, offer)).status_code == 409  # the attempt has ended

    listed = (await people.alice.get("/api/secrets")).json()["secrets"]
    assert {(s["scope"], s["owner"], s["name"]) for s in listed} == {
        ("user", "alice", "hf"),
        ("team", "nlp", "wandb"),
    }
    assert all(s["written_by"].startswith("key:") for s in listed)
    everyone = [fleet.admin, people.alice, people.bob, people.lena, people.vera]
    answers = await every_answer(fleet, everyone)
    for value in (ALICES, NLPS, BOBS):
        assert value not in answers
    audit = await fleet.audit()
    assert {"secret.created"} <= {e["event_type"] for e in audit}
    stored_text = await fleet.all_stored_text()
    for value in (ALICES, NLPS, BOBS):
        assert value not in stored_text


async def test_only_owners_leads_and_admins_write_or_delete_a_secret(
    fleet: Fleet, people: People
) -> None:
    assert (await put(people.alice, "/api/secrets/hf", ALICES)).status_code == 200
    assert (await put(people.lena, "/api/teams/nlp/secrets/wandb", NLPS)).status_code == 200

    # Another team's, or a team's as a member who is not its lead: refused, nothing changed.
    for client, path in [
        (people.bob, "/api/teams/nlp/secrets/wandb"),
        (people.alice, "/api/teams/nlp/secrets/wandb"),
        (people.vera, "/api/teams/nlp/secrets/wandb"),
        (people.lena, "/api/teams/vision/secrets/wandb"),
    ]:
        refused = await put(client, path, "overwritten-value")
        assert refused.status_code == 403, (path, refused.text)
        assert (await client.delete(path)).status_code == 403
    assert (await put(fleet.admin, "/api/teams/vision/secrets/wandb", "v")).status_code == 200

    # bob's /api/secrets/hf is his own: alice's is untouched, and he cannot delete hers.
    assert (await put(people.bob, "/api/secrets/hf", BOBS)).status_code == 200
    assert (await people.bob.delete("/api/secrets/hf")).status_code == 200
    assert (await people.bob.delete("/api/secrets/hf")).status_code == 404
    bobs_view = (await people.bob.get("/api/secrets")).json()["secrets"]
    assert [(s["owner"], s["name"]) for s in bobs_view] == [("vision", "wandb")]

    agent = await fleet.online_worker("w1")
    job = await people.alice.post(
        "/api/queue/submit", json={"config": {"command": ["true"], "env": REFS}}
    )
    assert job.status_code == 201, job.text
    offer = await agent.next_offer()
    await agent.run(offer)
    got = (await fetch_secrets(agent, offer)).json()["env"]
    assert got == {"HF_TOKEN": ALICES, "WANDB_API_KEY": NLPS}

    # A viewer may not write a team's; a key without queue.submit writes none.
    reader = await key_of(fleet, "alice", "queue.read")
    assert (await put(reader, "/api/secrets/hf", "x-value")).status_code == 403
    audit = await fleet.audit(type="secret.deleted")
    assert [e["detail"]["name"] for e in audit] == ["hf"]


@pytest.mark.parametrize(
    ("path", "body", "says"),
    [
        ("/api/secrets/HF", {"value": "v"}, "secret name"),
        ("/api/secrets/" + "a" * 65, {"value": "v"}, "secret name"),
        ("/api/secrets/hf", {"value": "a\x00b"}, "NUL"),
        ("/api/secrets/hf", {"value": ""}, "value"),
        ("/api/secrets/hf", {"value": "x" * (MAX_SECRET_BYTES + 1)}, "value"),
        ("/api/secrets/hf", {"value": "é" * (MAX_SECRET_BYTES // 2 + 1)}, "KiB"),
        ("/api/secrets/hf", {"value": "v", "extra": 1}, "extra"),
        ("/api/teams/nope/secrets/hf", {"value": "v"}, "no team"),
    ],
)
async def test_a_bad_secret_is_refused_and_nothing_stored(
    fleet: Fleet, path: str, body: dict[str, Any], says: str
) -> None:
    answer = await fleet.admin.put(path, json=body)
    assert answer.status_code in (404, 422), answer.text
    assert says in answer.text
    assert "a\x00b" not in answer.text and "x" * 100 not in answer.text
    assert (await fleet.admin.get("/api/secrets")).json()["secrets"] == []


async def test_a_reference_to_a_missing_secret_is_refused_at_submit_and_at_dispatch(
    fleet: Fleet, people: People
) -> None:
    before = (await fleet.admin.get("/api/queue")).json()["total"]
    missing = await people.alice.post(
        "/api/queue/submit", json={"config": {"command": ["true"], "env": REFS}}
    )
    assert missing.status_code == 422, missing.text
    assert "secret 'hf'" in missing.text and "secret 'wandb'" in missing.text
    assert "alice" in missing.text and "nlp" in missing.text
    # bob's and team vision's secrets are not alice's.
    assert (await put(people.bob, "/api/secrets/hf", BOBS)).status_code == 200
    assert (await put(fleet.admin, "/api/teams/vision/secrets/wandb", "v")).status_code == 200
    again = await people.alice.post(
        "/api/queue/submit", json={"config": {"command": ["true"], "env": REFS}}
    )
    assert again.status_code == 422, again.text
    malformed = await people.alice.post(
        "/api/queue/submit",
        json={"config": {"command": ["true"], "env": {"HF_TOKEN": {"secret": "HF!"}}}},
    )
    assert malformed.status_code == 422 and "env.HF_TOKEN" in malformed.text
    config = await people.alice.put("/api/configs/bad", json={"env": {"HF_TOKEN": {"value": "x"}}})
    assert config.status_code == 422 and "env.HF_TOKEN" in config.text
    assert (await fleet.admin.get("/api/queue")).json()["total"] == before

    # Deleted after the submit, before the worker asks: the attempt is refused, clearly.
    assert (await put(people.alice, "/api/secrets/hf", ALICES)).status_code == 200
    assert (await put(people.lena, "/api/teams/nlp/secrets/wandb", NLPS)).status_code == 200
    queued = await people.alice.post(
        "/api/queue/submit", json={"config": {"command": ["true"], "env": REFS}}
    )
    assert queued.status_code == 201, queued.text
    assert (await people.lena.delete("/api/teams/nlp/secrets/wandb")).status_code == 200
    agent = await fleet.online_worker("w1")
    offer = await agent.next_offer()
    await agent.run(offer)
    gone = await fetch_secrets(agent, offer)
    assert gone.status_code == 422, gone.text
    assert "secret 'wandb'" in gone.text and ALICES not in gone.text


async def test_a_credential_looking_plain_value_is_masked_to_all_but_its_owner(
    fleet: Fleet, people: People
) -> None:
    token = "hf_abc_plain_value_123456"
    env = {"HF_TOKEN": token, "DB_PASSWORD": "pw-123456789", "MODE": "fast"}
    submitted = await people.alice.post(
        "/api/queue/submit", json={"config": {"command": ["true"], "env": env}}
    )
    assert submitted.status_code == 201, submitted.text
    job_id = submitted.json()["id"]
    alices = (await people.alice.get(f"/api/queue/{job_id}")).json()["config"]["env"]
    assert alices == env
    for other in (people.bob, people.lena, people.vera, fleet.admin):
        shown = (await other.get(f"/api/queue/{job_id}")).json()["config"]["env"]
        assert shown == {"HF_TOKEN": MASK, "DB_PASSWORD": MASK, "MODE": "fast"}
        listed = (await other.get("/api/queue")).text
        assert token not in listed

    # A stored config (every one is the built-in admin's until configs record their owner).
    put_config = await fleet.admin.put("/api/configs/plain", json={"env": env})
    assert put_config.status_code == 200
    assert put_config.json()["config"]["env"] == env
    for other in (people.bob, people.alice):
        one = (await other.get("/api/configs/plain")).json()["config"]["env"]
        assert one["HF_TOKEN"] == MASK and one["MODE"] == "fast"
        assert token not in (await other.get("/api/configs")).text


async def test_only_the_submitter_re_runs_a_job_whose_env_holds_plain_credentials(
    fleet: Fleet, people: People
) -> None:
    token = "hf_rerun_plain_value_987654"
    plain = {"command": ["true"], "env": {"HF_TOKEN": token}}
    referring = {"command": ["true"], "env": {"HF_TOKEN": {"secret": "hf"}}}
    assert (await put(people.alice, "/api/secrets/hf", ALICES)).status_code == 200
    assert (await put(people.lena, "/api/secrets/hf", "lenas-own-value")).status_code == 200
    ids = []
    for config in (plain, referring):
        job = await people.alice.post("/api/queue/submit", json={"config": config})
        assert job.status_code == 201, job.text
        ids.append(job.json()["id"])
        assert (await people.alice.post(f"/api/queue/{ids[-1]}/cancel")).status_code == 200

    refused = await people.lena.post(f"/api/queue/{ids[0]}/rerun")
    assert refused.status_code == 403, refused.text
    assert token not in refused.text
    jobs = (await fleet.admin.get("/api/queue?limit=500")).json()["jobs"]
    assert len(jobs) == 2  # nothing queued for lena
    mine = await people.alice.post(f"/api/queue/{ids[0]}/rerun")
    assert mine.status_code == 201, mine.text
    # A reference re-run by another resolves to *their* secret, never the submitter's.
    theirs = await people.lena.post(f"/api/queue/{ids[1]}/rerun")
    assert theirs.status_code == 201, theirs.text
    agent = await fleet.online_worker("w1")
    seen = {}
    for _ in range(2):
        offer = await agent.next_offer()
        await agent.run(offer)
        seen[offer["job_id"]] = (await fetch_secrets(agent, offer)).json()["env"]
        await agent.finish(offer)
    assert seen[theirs.json()["id"]] == {"HF_TOKEN": "lenas-own-value"}

    # The masked value, sent back (from a job or config page), is refused by name.
    masked = await people.lena.post(
        "/api/queue/submit", json={"config": {"env": {"HF_TOKEN": MASK}}}
    )
    assert masked.status_code == 422 and "env.HF_TOKEN" in masked.text
