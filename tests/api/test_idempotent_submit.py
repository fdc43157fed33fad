"""Idempotent submit (#38, docs/jobs.md): a second submit of a user's `idempotency_key`
within 24 hours answers the first's job (200, `idempotent_hit`), whatever its body; two at
once make one job (on PostgreSQL the loser waits on the winner's key, then answers its job);
another user's same key makes its own; a hostile key is a 422 that stores nothing."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest
import sqlalchemy as sa

from gpufleet.domain.records import Job
from gpufleet.server.context import Context, Tx
from gpufleet.server.services import idempotency
from gpufleet.store.tables import jobs, submit_keys
from tests.api.conftest import Fleet, both_databases, post_raw, waits_on_a_lock
from tests.api.test_job_ownership import People, people_of

BODY: dict[str, Any] = {"config": {"command": ["python", "train.py"]}}
DAY = 24 * 3600


async def _submit(client: httpx.AsyncClient, key: str, **body: Any) -> httpx.Response:
    return await client.post("/api/queue/submit", json={**BODY, "idempotency_key": key, **body})


async def _count(fleet: Fleet, table: sa.Table) -> int:
    async with fleet.ctx.store.engine.connect() as conn:
        return int((await conn.execute(sa.select(sa.func.count()).select_from(table))).scalar())


@pytest.fixture
async def people(fleet: Fleet) -> People:
    return await people_of(fleet)


async def test_a_second_submit_of_a_key_answers_the_first_job_whatever_its_body(
    fleet: Fleet, people: People
) -> None:
    first = await _submit(people.alice, "ci-build-41", max_retries=1)
    assert first.status_code == 201, first.text
    assert first.json()["idempotent_hit"] is False
    again = await _submit(people.alice, "ci-build-41", max_retries=7, priority=5)
    assert again.status_code == 200, again.text
    hit = again.json()
    assert hit["idempotent_hit"] is True
    assert (hit["id"], hit["max_retries"], hit["user"]) == (first.json()["id"], 1, "alice")
    assert await _count(fleet, jobs) == 1
    audit = await fleet.audit(type="job.submitted")
    assert [e["detail"]["idempotency_key"] for e in audit] == ["ci-build-41"]
    plain = await people.alice.post("/api/queue/submit", json=BODY)  # no key: a new job each
    assert plain.status_code == 201 and plain.json()["idempotent_hit"] is False


async def test_another_users_same_key_makes_its_own_job_and_a_read_only_key_none(
    fleet: Fleet, people: People
) -> None:
    alices = (await _submit(people.alice, "nightly")).json()
    bobs = await _submit(people.bob, "nightly")
    assert bobs.status_code == 201 and bobs.json()["id"] != alices["id"]
    assert bobs.json()["user"] == "bob"
    veras = await _submit(people.vera, "nightly")  # a viewer's submit waits for approval
    assert veras.status_code == 201 and veras.json()["status"] == "pending_approval"
    reader = await fleet.mint_key("queue.read", name="reader")
    headers = {"Authorization": f"Bearer {reader['key']}"}
    async with fleet.client(headers=headers) as read_only:
        refused = await _submit(read_only, "nightly")
    assert refused.status_code == 403, refused.text
    assert await _count(fleet, jobs) == 3
    assert await _count(fleet, submit_keys) == 3


async def test_a_key_makes_a_new_job_once_24_hours_have_passed(fleet: Fleet) -> None:
    first = (await _submit(fleet.admin, "daily")).json()
    fleet.clock.advance(DAY - 1)
    assert (await _submit(fleet.admin, "daily")).json()["id"] == first["id"]
    fleet.clock.advance(1)
    fleet.clock.advance(1)
    later = await _submit(fleet.admin, "daily")
    assert later.status_code == 201, later.text
    assert later.json()["id"] != first["id"]
    fleet.clock.advance(DAY - 1)  # the key now names the new job, for 24 hours from it
    assert (await _submit(fleet.admin, "daily")).json()["id"] == later.json()["id"]
    assert await _count(fleet, submit_keys) == 1


@pytest.mark.parametrize(
    "key",
    ["", "x" * 257, "a\x00b", "\ud800", "x\udfffy", "line\nbreak", "\x1b[31mred", "\u202e", "\t"],
)
async def test_a_hostile_key_is_refused_and_stores_nothing(fleet: Fleet, key: str) -> None:
    answer = await post_raw(fleet.admin, "/api/queue/submit", {**BODY, "idempotency_key": key})
    assert answer.status_code in (400, 422), answer.text
    assert "idempotency_key" in answer.text or "surrogate" in answer.text.lower()
    assert await _count(fleet, jobs) == 0
    assert await _count(fleet, submit_keys) == 0


async def test_a_key_of_256_printable_characters_is_taken(fleet: Fleet) -> None:
    key = "ключ-" + "é" * 251
    first = await _submit(fleet.admin, key)
    assert first.status_code == 201, first.text
    assert (await _submit(fleet.admin, key)).json()["id"] == first.json()["id"]


@both_databases
async def test_two_submits_of_one_key_at_once_make_one_job(
    fleet: Fleet, database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Both read no key (the race injected); the first holds its transaction open, its key
    written, until the second waits on it (PostgreSQL; SQLite has one writer at a time):
    the second then answers the first's job, not a 500."""
    claim = idempotency.claim
    claimed = asyncio.Event()

    async def stale(_ctx: Context, _user: str, _key: str) -> Job | None:
        return None

    async def holding(tx: Tx, user_id: str, key: str, job_id: str) -> None:
        first = not claimed.is_set()
        claimed.set()
        await claim(tx, user_id, key, job_id)
        if first and "postgres" in database_url:
            await waits_on_a_lock(database_url, "the second submit waiting on the first's key")

    monkeypatch.setattr(idempotency, "earlier", stale)
    monkeypatch.setattr(idempotency, "claim", holding)
    one = asyncio.create_task(_submit(fleet.admin, "deploy-7"))
    await claimed.wait()
    two = asyncio.create_task(_submit(fleet.admin, "deploy-7", priority=3))
    answers = await asyncio.gather(one, two)
    assert sorted(a.status_code for a in answers) == [200, 201], [a.text for a in answers]
    assert answers[0].json()["id"] == answers[1].json()["id"]
    assert [a.json()["idempotent_hit"] for a in answers] == [False, True]
    assert await _count(fleet, jobs) == 1
    assert len(await fleet.audit(type="job.submitted")) == 1
