"""Stored configs have owners (#31, finding 2): only the owner, the leads of the team a config
is shared with, and admins overwrite or delete one; every write keeps a version, and a job
records the version it ran. On SQLite and PostgreSQL."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import httpx
import pytest
import sqlalchemy as sa
from alembic import command
from sqlalchemy.engine import Connection

from gpufleet.domain.jobspec import config_digest
from gpufleet.domain.levels import ADMIN_USER_ID
from gpufleet.store import open_store
from gpufleet.store.engine import alembic_config
from gpufleet.store.tables import JSON, UTCDateTime
from tests.api.conftest import Fleet, both_databases
from tests.api.test_artifact_records import _queue_index
from tests.api.test_people import key_of, make_team, make_user

PROD = {"command": ["python", "train.py", "--lr", "3e-4"], "num_processes": 1}
EVIL = {"command": ["sh", "-c", "echo PWNED; id"]}
OLD = {"command": ["python", "old.py"]}
T_OLD = datetime(2026, 11, 1, 12, 0, tzinfo=UTC)


class People:
    """nlp and vision; alice a researcher and lena a lead of nlp, vera a viewer in nlp,
    victor a lead of vision: each with a key that may read and submit."""

    def __init__(self, clients: dict[str, httpx.AsyncClient]) -> None:
        self.alice = clients["alice"]
        self.lena = clients["lena"]
        self.vera = clients["vera"]
        self.victor = clients["victor"]


async def _people(fleet: Fleet) -> People:
    await make_team(fleet, "nlp")
    await make_team(fleet, "vision")
    clients = {}
    for name, level, team in (
        ("alice", "researcher", "nlp"),
        ("lena", "lead", "nlp"),
        ("vera", "viewer", "nlp"),
        ("victor", "lead", "vision"),
    ):
        await make_user(fleet, name, level, team=team)
        clients[name] = await key_of(fleet, name, "queue.read", "queue.submit")
    return People(clients)


async def _config(fleet: Fleet, name: str) -> dict[str, Any]:
    answer = await fleet.admin.get(f"/api/configs/{name}")
    assert answer.status_code == 200, answer.text
    body: dict[str, Any] = answer.json()
    return body


async def _versions(fleet: Fleet, name: str) -> list[dict[str, Any]]:
    answer = await fleet.admin.get(f"/api/configs/{name}/versions")
    assert answer.status_code == 200, answer.text
    versions: list[dict[str, Any]] = answer.json()["versions"]
    return versions


async def test_only_the_owner_the_shared_teams_leads_and_admins_change_a_config(
    fleet: Fleet,
) -> None:
    people = await _people(fleet)
    stored = await fleet.admin.put("/api/configs/prod-train", json=PROD)
    assert stored.status_code == 200, stored.text
    first = stored.json()
    assert first["owner"] == "admin" and first["owner_id"] == ADMIN_USER_ID
    assert first["version"] == 1 and first["team"] is None and first["written_by"] == "admin"
    assert first["digest"] == config_digest(PROD)

    # Not shared: nobody but its owner (and admins) may touch it, a lead of a team included.
    for client in (people.vera, people.alice, people.lena, people.victor):
        put = await client.put("/api/configs/prod-train", json=EVIL)
        assert put.status_code == 403, put.text
        assert "belongs to admin" in put.json()["detail"]
        assert "another name" in put.json()["detail"]
        assert "gpufleet configs put FILE --name" in put.json()["detail_for"]["cli"]
        gone = await client.delete("/api/configs/prod-train")
        assert gone.status_code == 403, gone.text
    after = await _config(fleet, "prod-train")
    assert after["config"] == PROD and after["version"] == 1
    assert [v["version"] for v in await _versions(fleet, "prod-train")] == [1]

    # Shared with nlp: lena (nlp's lead) may; alice and vera (members) and victor may not.
    shared = await fleet.admin.put("/api/configs/prod-train?team=nlp", json=PROD)
    assert shared.status_code == 200 and shared.json()["team"] == "nlp", shared.text
    for client in (people.vera, people.alice, people.victor):
        put = await client.put("/api/configs/prod-train", json=EVIL)
        assert put.status_code == 403, put.text
        assert "leads of team nlp" in put.json()["detail"]
        assert (await client.delete("/api/configs/prod-train")).status_code == 403
    assert (await _config(fleet, "prod-train"))["config"] == PROD
    assert len(await _versions(fleet, "prod-train")) == 2

    tuned = {**PROD, "command": [*PROD["command"], "--warmup", "100"]}
    by_lead = await people.lena.put("/api/configs/prod-train", json=tuned)
    assert by_lead.status_code == 200, by_lead.text
    assert by_lead.json()["version"] == 3 and by_lead.json()["written_by"] == "lena"
    assert by_lead.json()["owner"] == "admin" and by_lead.json()["team"] == "nlp"  # kept
    # A lead changes it, but does not move it to another team or stop sharing it.
    moved = await people.lena.put("/api/configs/prod-train?team=", json=tuned)
    assert moved.status_code == 403, moved.text

    versions = await _versions(fleet, "prod-train")
    assert [v["version"] for v in versions] == [3, 2, 1]  # newest first
    assert [v["written_by"] for v in versions] == ["lena", "admin", "admin"]
    assert versions[0]["digest"] == config_digest(tuned)
    old = await fleet.admin.get("/api/configs/prod-train/versions/1")
    assert old.status_code == 200 and old.json()["config"] == PROD

    deleted = await people.lena.delete("/api/configs/prod-train")
    assert deleted.status_code == 200, deleted.text
    assert (await fleet.admin.get("/api/configs/prod-train")).status_code == 404
    assert (await fleet.admin.get("/api/configs/prod-train/versions")).status_code == 404
    assert (await fleet.admin.get("/api/configs/prod-train/versions/1")).status_code == 404
    audit = await fleet.audit(type="config.deleted", target="prod-train")
    assert audit and audit[0]["detail"]["versions"] == 3


async def test_a_new_name_is_the_callers_and_shared_only_with_a_team_of_theirs(
    fleet: Fleet,
) -> None:
    people = await _people(fleet)
    mine = await people.vera.put("/api/configs/vera-probe", json=EVIL)
    assert mine.status_code == 200, mine.text
    assert mine.json()["owner"] == "vera" and mine.json()["version"] == 1
    again = await people.vera.put("/api/configs/vera-probe", json=PROD)
    assert again.status_code == 200 and again.json()["version"] == 2

    # alice may not overwrite vera's, and may share hers only with a team she is in.
    refused = await people.alice.put("/api/configs/vera-probe", json=EVIL)
    assert refused.status_code == 403 and "belongs to vera" in refused.json()["detail"]
    foreign = await people.alice.put("/api/configs/alice-cfg?team=vision", json=PROD)
    assert foreign.status_code == 403, foreign.text
    assert (await fleet.admin.get("/api/configs/alice-cfg")).status_code == 404  # not stored
    unknown = await people.alice.put("/api/configs/alice-cfg?team=nope", json=PROD)
    assert unknown.status_code == 422 and "no team 'nope'" in unknown.json()["detail"]
    ours = await people.alice.put("/api/configs/alice-cfg?team=nlp", json=PROD)
    assert ours.status_code == 200 and ours.json()["team"] == "nlp", ours.text

    # An admin may share anyone's with any team.
    moved = await fleet.admin.put("/api/configs/alice-cfg?team=vision", json=PROD)
    assert moved.status_code == 200 and moved.json()["team"] == "vision"
    assert moved.json()["owner"] == "alice" and moved.json()["written_by"] == "admin"
    hostile = await people.alice.put("/api/configs/alice-cfg?team=" + "x" * 65, json=PROD)
    assert hostile.status_code == 422 and (await _config(fleet, "alice-cfg"))["version"] == 2
    listed = (await people.vera.get("/api/configs")).json()["configs"]  # reads stay open
    assert {(c["name"], c["owner"], c["version"]) for c in listed} == {
        ("vera-probe", "vera", 2),
        ("alice-cfg", "alice", 2),
    }
    assert (await people.alice.delete("/api/configs/alice-cfg")).status_code == 200


async def test_a_job_from_a_stored_config_records_the_version_it_ran(fleet: Fleet) -> None:
    people = await _people(fleet)
    await fleet.admin.put("/api/configs/prod-train?team=nlp", json=PROD)
    tuned = {**PROD, "command": ["python", "train.py", "--lr", "1e-4"]}
    assert (await people.lena.put("/api/configs/prod-train", json=tuned)).status_code == 200

    job = await fleet.submit(config_name="prod-train", config=None)
    assert job["config_version"] == 2 and job["config_digest"] == config_digest(tuned)
    assert job["config_written_by"] == "lena" and job["config_written_by_id"].startswith("u_")
    detail = await fleet.job(job["id"])
    assert detail["config"] == tuned and detail["config_version"] == 2
    assert detail["config_written_by"] == "lena"

    # A re-run runs the same version again, even after the stored config changed.
    await fleet.admin.put("/api/configs/prod-train", json=PROD)
    await fleet.admin.post(f"/api/queue/{job['id']}/cancel")
    rerun = await fleet.admin.post(f"/api/queue/{job['id']}/rerun")
    assert rerun.status_code == 201, rerun.text
    assert rerun.json()["config_version"] == 2 and rerun.json()["config_written_by"] == "lena"

    inline = await fleet.submit(config=PROD)
    assert inline["config_version"] is None and inline["config_digest"] is None


def _migrate(sync_conn: Connection, revision: str, *, down: bool) -> None:
    cfg = alembic_config()
    cfg.attributes["connection"] = sync_conn
    (command.downgrade if down else command.upgrade)(cfg, revision)


@both_databases
async def test_migration_0016_gives_the_configs_from_before_to_admin(database_url: str) -> None:
    store = await open_store(database_url)
    try:
        async with store.engine.begin() as conn:
            await conn.run_sync(_migrate, "0014", down=True)
            old = sa.table(  # configs as 0014 left it
                "configs",
                sa.column("name", sa.String),
                sa.column("body", JSON),
                sa.column("created_at", UTCDateTime),
                sa.column("updated_at", UTCDateTime),
            )
            await conn.execute(
                sa.insert(old).values(
                    name="old-train", body=OLD, created_at=T_OLD, updated_at=T_OLD
                )
            )
            await conn.run_sync(_migrate, "head", down=False)
        assert "priority DESC" in await _queue_index(store)  # the downgrade kept it (0006)
        async with store.read() as q:
            config = await q.get_config("old-train")
            versions = await q.config_versions("old-train", 10, 0)
        assert config is not None and config.owner_id == ADMIN_USER_ID
        assert config.team_id is None and config.version == 1 and config.written_by is None
        assert config.digest == config_digest(OLD)
        assert [(v.version, v.body, v.digest) for v in versions] == [(1, OLD, config.digest)]
    finally:
        await store.close()


@pytest.mark.parametrize("path", ["/api/configs/nope/versions", "/api/configs/nope/versions/1"])
async def test_the_versions_of_a_config_that_is_not_there_are_not_found(
    fleet: Fleet, path: str
) -> None:
    answer = await fleet.admin.get(path)
    assert answer.status_code == 404 and "no config named 'nope'" in answer.json()["detail"]


async def test_a_config_shared_with_a_deleted_team_is_shared_with_none(fleet: Fleet) -> None:
    await make_team(fleet, "gone")
    await fleet.admin.put("/api/configs/cfg?team=gone", json=PROD)
    assert (await fleet.admin.delete("/api/teams/gone")).status_code == 200
    config = await _config(fleet, "cfg")
    assert config["team"] is None and config["team_id"] is None and config["version"] == 1
