"""Who may name a workdir snapshot (domain/workdir_access.py, docs/security.md): a digest is
no secret (every job's config shows it), so only those who uploaded its bytes, the teams a
job of theirs shared it with, and admins may name it in a job or learn that it is stored."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
import sqlalchemy as sa
from sqlalchemy import Connection

from gpufleet.domain.workdir_access import Holding
from gpufleet.server.services import retention
from gpufleet.store.tables import team_members, workdir_holders
from tests.api.conftest import Fleet, both_databases
from tests.api.test_config_owners import _migrate
from tests.api.test_policy import add_team, add_user, client_of
from tests.api.test_workdirs import archive_of, digest, put, stored


@dataclass
class World:
    body: bytes  # alice's snapshot
    name: str  # its digest
    job: dict[str, Any]  # alice's job naming it, as another user reads it
    alice: httpx.AsyncClient  # uploaded it; a researcher of team nlp
    otto: httpx.AsyncClient  # a researcher of team vision, who has not the files
    otto_id: str
    alice_id: str


async def world(fleet: Fleet, tmp_path: Path) -> World:
    nlp, vision = await add_team(fleet, "nlp"), await add_team(fleet, "vision")
    alice_id = await add_user(fleet, "alice", "researcher", team=nlp)
    alice = await client_of(fleet, alice_id)
    otto_id = await add_user(fleet, "otto", "researcher", team=vision)
    otto = await client_of(fleet, otto_id)
    body = archive_of(tmp_path, {"train.py": "print('alice only')\n"})
    assert (await put(alice, body)).status_code == 201
    submitted = await alice.post(
        "/api/queue/submit", json={"config": {"command": ["true"], "workdir": digest(body)}}
    )
    assert submitted.status_code == 201, submitted.text
    seen = await otto.get(f"/api/queue/{submitted.json()['id']}")  # the queue is open to read
    return World(body, digest(body), seen.json(), alice, otto, otto_id, alice_id)


async def submit_naming(client: httpx.AsyncClient, name: str, **body: Any) -> httpx.Response:
    config = {"command": ["python", "train.py"], "workdir": name}
    return await client.post("/api/queue/submit", json={"config": config, **body})


async def holdings(fleet: Fleet, name: str) -> set[Holding]:
    async with fleet.ctx.store.read() as q:
        return set(await q.workdir_holdings(name.removeprefix("sha256:")))


async def test_a_digest_copied_from_another_users_job_is_refused_and_its_code_stays_hers(
    fleet: Fleet, tmp_path: Path
) -> None:
    w = await world(fleet, tmp_path)
    copied = w.job["config"]["workdir"]
    assert copied == w.name
    refused = await submit_naming(w.otto, copied)
    assert refused.status_code == 403, refused.text
    assert copied in refused.json()["detail"] and "upload the folder" in refused.json()["detail"]
    assert "gpufleet run" in refused.json()["detail_for"]["cli"]
    # Nothing of his was stored: no job, no holding, no audit row.
    assert (await fleet.admin.get("/api/queue")).json()["total"] == 1
    assert len(await fleet.audit(type="job.submitted")) == 1
    assert all(h.user_id != w.otto_id for h in await holdings(fleet, copied))
    # He is not even told that it is stored, as if it were not.
    assert (await w.otto.head(f"/api/workdirs/{copied}")).status_code == 404
    asked = await w.otto.get(f"/api/workdirs/{copied}")
    assert asked.status_code == 404 and "upload it" in asked.json()["detail"]
    # The job's code reads as it did: not his (he is not of its team), and he has no job of
    # his own naming it to read it through.
    assert (await w.otto.get(f"/api/queue/{w.job['id']}/workdir")).status_code == 403
    listed = (await fleet.admin.get("/api/queue")).json()["jobs"]
    assert [j["user_id"] for j in listed if j["user_id"] == w.otto_id] == []
    # An admin may name any stored snapshot, and is told it is stored.
    assert (await fleet.admin.get(f"/api/workdirs/{copied}")).status_code == 200
    assert (await submit_naming(fleet.admin, copied)).status_code == 201


async def test_an_upload_without_the_right_bytes_makes_no_holder(
    fleet: Fleet, tmp_path: Path
) -> None:
    w = await world(fleet, tmp_path)
    url = f"/api/workdirs/{w.name}"
    other = archive_of(tmp_path / "other", {"train.py": "print('not hers')\n"})

    async def half() -> AsyncIterator[bytes]:
        yield w.body[: len(w.body) // 2]

    attempts = {
        "no body": await w.otto.put(url, content=b""),
        "other bytes": await w.otto.put(url, content=other),
        "cut off": await w.otto.put(
            url, content=half(), headers={"Content-Length": str(len(w.body))}
        ),
        "too long": await w.otto.put(url, content=w.body + b"\0"),
    }
    for what, answer in attempts.items():
        assert answer.status_code == 422, what
        assert "nothing was stored" in answer.json()["detail"], what
    assert all(h.user_id != w.otto_id for h in await holdings(fleet, w.name))
    assert (await w.otto.get(url)).status_code == 404
    assert (await submit_naming(w.otto, w.name)).status_code == 403
    assert await fleet.audit(type="workdir.held") == []
    assert len(stored(fleet)) == 1  # alice's, untouched


async def test_the_real_bytes_make_a_holder_who_may_submit_and_then_skip_them(
    fleet: Fleet, tmp_path: Path
) -> None:
    w = await world(fleet, tmp_path)
    url = f"/api/workdirs/{w.name}"
    proved = await put(w.otto, w.body)
    assert proved.status_code == 200, proved.text
    assert (proved.json()["created"], proved.json()["read"]) == (False, True)
    [held] = await fleet.audit(type="workdir.held")
    assert (held["target"], held["detail"]["size"]) == (w.name, len(w.body))
    assert Holding(w.otto_id) in await holdings(fleet, w.name)
    assert (await w.otto.head(url)).status_code == 200
    assert (await submit_naming(w.otto, w.name)).status_code == 201
    # Now a holder, he may skip the bytes; the upload reads nothing and stores nothing new.
    skipped = await w.otto.put(url, content=b"")
    assert (skipped.status_code, skipped.json()["read"]) == (200, False)
    again = await put(w.alice, w.body)  # hers too: a holder sending them anyway
    assert (again.status_code, again.json()["read"]) == (200, False)
    assert len(stored(fleet)) == 1 and len(await fleet.audit(type="workdir.held")) == 1
    assert len(await fleet.audit(type="workdir.uploaded")) == 1


async def test_a_job_for_a_team_shares_its_snapshot_with_the_teams_members(
    fleet: Fleet, tmp_path: Path
) -> None:
    w = await world(fleet, tmp_path)
    cv = await add_team(fleet, "cv")
    async with fleet.ctx.store.engine.begin() as conn:
        await conn.execute(sa.insert(team_members).values(team_id=cv, user_id=w.alice_id))
    carl = await client_of(fleet, await add_user(fleet, "carl", "viewer", team=cv))
    nina = await add_user(fleet, "nina", "researcher", team=await _team(fleet, "nlp"))
    mate = await client_of(fleet, nina)
    assert (await submit_naming(carl, w.name)).status_code == 403  # not shared with cv yet
    assert (await carl.get(f"/api/workdirs/{w.name}")).status_code == 404
    # alice's first job was for her default team, nlp: its members may name it already.
    assert (await submit_naming(mate, w.name)).status_code == 201
    assert (await submit_naming(w.alice, w.name, team="cv")).status_code == 201
    assert (await carl.get(f"/api/workdirs/{w.name}")).status_code == 200
    assert (await submit_naming(carl, w.name)).status_code == 201
    assert (await submit_naming(w.otto, w.name)).status_code == 403  # vision: still not
    # A member it is shared with names it, but has not proved the bytes: not a holder.
    skipped = await carl.put(f"/api/workdirs/{w.name}", content=b"")
    assert skipped.status_code == 422


async def _team(fleet: Fleet, name: str) -> str:
    answer = await fleet.admin.get(f"/api/teams/{name}")
    assert answer.status_code == 200, answer.text
    return str(answer.json()["id"])


async def test_a_key_without_queue_submit_cannot_upload_nor_become_a_holder(
    fleet: Fleet, tmp_path: Path
) -> None:
    w = await world(fleet, tmp_path)
    reader = await client_of(fleet, w.otto_id, "queue.read")
    refused = await put(reader, w.body)
    assert refused.status_code == 403 and "queue.submit" in refused.json()["detail"]
    assert all(h.user_id != w.otto_id for h in await holdings(fleet, w.name))
    assert (await reader.get(f"/api/workdirs/{w.name}")).status_code == 404
    viewer = await client_of(fleet, await add_user(fleet, "vic", "viewer"), "queue.read")
    assert (await put(viewer, w.body)).status_code == 403
    assert (await viewer.head(f"/api/workdirs/{w.name}")).status_code == 404


async def test_the_sweep_forgets_the_holders_of_a_snapshot_it_deletes(
    fleet: Fleet, tmp_path: Path
) -> None:
    loose = archive_of(tmp_path, {"old.py": "x"})
    assert (await put(fleet.admin, loose)).status_code == 201
    assert await holdings(fleet, digest(loose)) == {Holding("u_admin")}
    fleet.clock.advance(timedelta(days=fleet.settings.artifact_retention_days + 1).total_seconds())
    await retention.sweep(fleet.ctx)
    assert stored(fleet) == [] and await holdings(fleet, digest(loose)) == set()


@both_databases  # the backfill is SQL of its own on each database
async def test_migration_0021_makes_the_submitters_of_earlier_jobs_holders(
    fleet: Fleet, tmp_path: Path
) -> None:
    w = await world(fleet, tmp_path)
    nlp = await _team(fleet, "nlp")
    async with fleet.ctx.store.engine.begin() as conn:
        await conn.run_sync(_down_and_up)
        rows = (await conn.execute(sa.select(workdir_holders.c.user_id))).all()
    assert await holdings(fleet, w.name) == {Holding(w.alice_id), Holding(w.alice_id, nlp)}
    assert len(rows) == 2


def _down_and_up(conn: Connection) -> None:
    _migrate(conn, "0020", down=True)
    _migrate(conn, "head", down=False)
