"""What an attacker with ordinary credentials, or a typo, sends: refused at the door, never
stored, and nothing stored can break a read (#14).

Each case below answered 2xx and then broke every later read, a worker's event stream or the
write itself (a 500) before the input policy of `domain.jsonpolicy` existed.
"""

from __future__ import annotations

import httpx
import sqlalchemy as sa

from gpufleet.store import tables
from tests.api.conftest import Fleet, both_databases, post_raw, sqlite_only
from tests.nasty import nested

pytestmark = both_databases


def refused_at(answer: httpx.Response, *where: str | int) -> None:
    assert answer.status_code == 422, answer.text
    body = answer.json()
    locs = [tuple(e["loc"]) for e in body["errors"]]
    assert any(loc[: len(where)] == where for loc in locs), (where, locs)
    assert "fix these fields" in body["detail"]


# ---- 1. configs no worker could start ---------------------------------------------------

UNSTARTABLE = [
    ({"command": ["python", "-c", "print(1)"], "env": {"BAD=KEY": "x"}}, "'BAD=KEY'"),
    ({"command": ["python"], "env": {"SEED": "1\x002"}}, "env.SEED"),
    ({"command": ["python", "-c\x00", "print(1)"], "env": {}}, "command"),
    ({"command": ["python", 3]}, "command"),
    ({"command": []}, "command"),
    ({"command": ["", "train.py"]}, "command[0]"),
    ({"command": ["python"], "env": {"1ST": "x"}}, "'1ST'"),
]


async def test_a_config_no_worker_could_start_is_refused_at_submit_and_when_stored(
    fleet: Fleet,
) -> None:
    for config, named in UNSTARTABLE:
        submitted = await post_raw(fleet.admin, "/api/queue/submit", {"config": config})
        stored = await post_raw(fleet.admin, "/api/configs/bad", config, method="PUT")
        for answer in (submitted, stored):
            assert answer.status_code == 422, (config, answer.text)
            assert named in answer.text, (config, answer.text)
    assert (await fleet.admin.get("/api/queue")).json()["total"] == 0
    assert (await fleet.admin.get("/api/configs")).json()["configs"] == []


# ---- 2. values the server could not send back -------------------------------------------

SURROGATE, NUL = "\ud800", "a\x00b"
UNSTORABLE = {
    "lone surrogate": SURROGATE,
    "NUL": NUL,
    "nested 300 deep": nested(300),
    "nested 40 deep": nested(40),
    "integer 2^64": 2**64,
    "integer below -2^63": -(2**63) - 1,
    "NaN": float("nan"),
    "Infinity": float("inf"),
}


async def test_an_unstorable_value_in_a_job_config_is_refused_naming_its_place(
    fleet: Fleet,
) -> None:
    for value in UNSTORABLE.values():
        config = {"command": ["python"], "lr": {"x": value}}
        answer = await post_raw(fleet.admin, "/api/queue/submit", {"config": config})
        refused_at(answer, "body", "config", "lr", "x")
        stored = await post_raw(fleet.admin, "/api/configs/c1", {"v": [value]}, method="PUT")
        refused_at(stored, "body", "v", 0)
    assert (await fleet.admin.get("/api/queue")).json()["total"] == 0
    await fleet.every_read_answers()


async def test_an_unstorable_value_from_a_worker_is_refused_and_the_reads_still_answer(
    fleet: Fleet,
) -> None:
    agent = await fleet.online_worker("w1")
    job = await fleet.submit()
    offer = await agent.next_offer()
    await agent.run(offer)
    h = agent.headers
    for value in UNSTORABLE.values():
        progress = await post_raw(
            fleet.http,
            f"/api/workers/job/{job['id']}/status",
            {"status": "running", "attempt_id": offer["attempt_id"], "progress": {"loss": value}},
            **h,
        )
        refused_at(progress, "body", "progress", "loss")
        gpus = await post_raw(
            fleet.http, "/api/workers/register", {"name": "w1", "gpus": [{"name": value}]}, **h
        )
        refused_at(gpus, "body", "gpus", 0, "name")
        if isinstance(value, str):
            labels = await post_raw(
                fleet.http, "/api/workers/register", {"name": "w1", "labels": {"zone": value}}, **h
            )
            refused_at(labels, "body", "labels", "zone")
            line = await post_raw(
                fleet.http,
                f"/api/workers/job/{job['id']}/logs",
                {"attempt_id": offer["attempt_id"], "lines": [{"text": value}]},
                **h,
            )
            refused_at(line, "body", "lines", 0, "text")
            error = await post_raw(
                fleet.http,
                f"/api/workers/job/{job['id']}/status",
                {"status": "failed", "attempt_id": offer["attempt_id"], "error": value},
                **h,
            )
            refused_at(error, "body", "error")
    assert (await fleet.job(job["id"]))["status"] == "running"
    await fleet.every_read_answers()


async def test_a_worker_still_receives_the_offer_of_a_config_at_the_policy_limits(
    fleet: Fleet,
) -> None:
    """The deepest and largest values accepted travel through a worker's event stream."""
    agent = await fleet.online_worker("w1")
    config = {"command": ["python"], "deep": nested(29), "big": 2**63 - 1, "small": -(2**63)}
    answer = await post_raw(fleet.admin, "/api/queue/submit", {"config": config})
    assert answer.status_code == 201, answer.text
    offer = await agent.next_offer()
    assert offer["config"] == config
    await fleet.every_read_answers()


async def test_a_gpu_count_past_the_column_is_refused(fleet: Fleet) -> None:
    for value in [3_000_000_000, 2**63, 10**20]:
        config = {"command": ["x"], "gpu_count": value}
        answer = await post_raw(fleet.admin, "/api/queue/submit", {"config": config})
        assert answer.status_code == 422, answer.text
        assert "gpu_count" in answer.json()["detail"]
        body = {"config": {}, "gpu_count": value}
        answer = await post_raw(fleet.admin, "/api/queue/submit", body)
        assert answer.status_code == 422, answer.text
    assert (await fleet.admin.get("/api/queue")).json()["total"] == 0


async def test_an_exit_code_past_the_column_is_refused(fleet: Fleet) -> None:
    agent = await fleet.online_worker("w1")
    job = await fleet.submit()
    offer = await agent.next_offer()
    await agent.run(offer)
    for code in [10**20, 2**31, -(2**31) - 1]:
        attempt = offer["attempt_id"]
        answer = await agent.report(job["id"], "failed", attempt_id=attempt, exit_code=code)
        assert answer.status_code == 422, answer.text
        assert "exit_code" in answer.json()["detail"]
    done = await agent.finish(offer, "failed", exit_code=-9)
    assert done["job_status"] == "failed"
    assert (await fleet.job(job["id"]))["exit_code"] == -9


AT_THE_ENDS_OF_TIME = [
    {"since": "0001-01-01T00:00:00+01:00"},
    {"since": "0001-01-01T00:00:00", "until": "9999-12-31T23:59:59-01:00"},
    {"until": "9999-12-31T23:59:59.999999-14:00"},
]


async def test_an_audit_window_at_the_ends_of_time_answers(fleet: Fleet) -> None:
    await fleet.mint_key("queue.read")  # one event at least
    for params in AT_THE_ENDS_OF_TIME:
        answer = await fleet.admin.get("/api/audit", params=params)
        assert answer.status_code == 200, (params, answer.text)
        assert answer.json()["total"] >= 1, params


NUL_URLS = [
    "/api/queue/%00",
    "/api/queue?worker_id=%00",
    "/api/queue?config_name=a%00b",
    "/api/audit?actor=%00",
    "/api/configs/a%00",
    "/api/admin/workers/%00",
]


async def test_a_nul_in_the_url_is_refused_not_sent_to_the_database(fleet: Fleet) -> None:
    for path in NUL_URLS:
        answer = await fleet.admin.get(path)
        assert answer.status_code == 422, (path, answer.text)
        assert "NUL" in answer.json()["detail"]


@sqlite_only  # what it stores cannot be stored on PostgreSQL
async def test_a_value_stored_before_the_policy_cannot_break_a_read(fleet: Fleet) -> None:
    """Rows written by an older gpufleet may hold what the door now refuses."""
    agent = await fleet.online_worker("w1")
    job = await fleet.submit()
    await agent.next_offer()
    assert (await fleet.admin.put("/api/configs/old", json={"k": 1})).status_code == 200
    bad = {"loss": "\ud800", "lr": float("nan"), "x": float("inf")}
    async with fleet.ctx.store.engine.begin() as conn:
        await conn.execute(
            sa.update(tables.jobs).values(progress=bad, config={"k": "\udfff", "d": nested(300)})
        )
        await conn.execute(sa.update(tables.configs).values(body={"k": "\ud800"}))
    answer = await fleet.admin.get(f"/api/queue/{job['id']}")
    assert answer.status_code == 200, answer.text
    assert answer.json()["progress"]["loss"] == "\ufffd"
    assert answer.json()["progress"]["lr"] is None
    await fleet.every_read_answers()


async def test_the_policy_is_reported_field_by_field(fleet: Fleet) -> None:
    body = {"config": {"command": ["python"], "a": SURROGATE, "b": [float("nan")]}, "priority": 1}
    answer = await post_raw(fleet.admin, "/api/queue/submit", body)
    assert answer.status_code == 422
    locs = {tuple(e["loc"]) for e in answer.json()["errors"]}
    assert locs == {("body", "config", "a"), ("body", "config", "b", 0)}
    assert "config.a" in answer.json()["detail"] and "config.b.0" in answer.json()["detail"]
