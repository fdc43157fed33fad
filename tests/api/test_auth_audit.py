"""Who may call what, what the audit log keeps, and that no secret is ever stored."""

from __future__ import annotations

import asyncio
from datetime import datetime

import pytest

from gpufleet.domain.secrets import hash_secret
from tests.api.conftest import Fleet, both_databases


async def test_the_admin_key_is_left_in_the_data_folder_for_the_operator_only(
    fleet: Fleet,
) -> None:
    path = fleet.settings.data_dir / "admin.token"

    assert path.stat().st_mode & 0o777 == 0o600
    assert fleet.admin_key.startswith("gfk_")
    (admin,) = (await fleet.admin.get("/api/admin/api-keys")).json()
    assert admin["permissions"] == ["*"]
    assert "key" not in admin


@pytest.mark.parametrize("path", ["/api/admin/workers", "/api/queue", "/api/audit"])
async def test_a_call_without_an_api_key_is_unauthenticated(fleet: Fleet, path: str) -> None:
    answer = await fleet.http.get(path)

    assert answer.status_code == 401
    assert answer.headers["www-authenticate"] == "Bearer"
    assert "Authorization: Bearer" in answer.json()["detail"]


async def test_an_unknown_api_key_is_refused_and_audited(fleet: Fleet) -> None:
    answer = await fleet.http.get("/api/queue", headers={"X-API-Key": "gfk_not-a-real-key"})

    assert answer.status_code == 401
    (failed,) = await fleet.audit(type="auth.failed")
    assert failed["actor"] == "anonymous"
    assert failed["detail"]["credential"] == "api_key"
    assert failed["client_addr"] == "127.0.0.1"


async def test_the_key_is_accepted_as_a_bearer_token_or_an_x_api_key_header(
    fleet: Fleet,
) -> None:
    bearer = await fleet.http.get(
        "/api/admin/workers", headers={"Authorization": f"Bearer {fleet.admin_key}"}
    )
    header = await fleet.http.get("/api/admin/workers", headers={"X-API-Key": fleet.admin_key})

    assert bearer.status_code == 200
    assert header.status_code == 200


async def test_a_scoped_key_may_do_only_what_it_was_given(fleet: Fleet) -> None:
    await fleet.create_worker("gpu-1")
    key = await fleet.mint_key("queue.read")
    reader = {"X-API-Key": key["key"]}

    read = await fleet.http.get("/api/queue", headers=reader)
    submit = await fleet.http.post("/api/queue/submit", json={"config": {}}, headers=reader)
    workers = await fleet.http.get("/api/admin/workers", headers=reader)
    mint = await fleet.http.post(
        "/api/admin/api-keys", json={"name": "x", "permissions": ["*"]}, headers=reader
    )

    assert read.status_code == 200
    assert submit.status_code == 403
    assert "'queue.submit'" in submit.json()["detail"]
    assert workers.status_code == 403
    assert mint.status_code == 403
    assert (await fleet.admin.get("/api/queue")).json()["total"] == 0


async def test_a_revoked_key_stops_working(fleet: Fleet) -> None:
    key = await fleet.mint_key("queue.read")

    revoked = await fleet.admin.delete(f"/api/admin/api-keys/{key['id']}")

    assert revoked.status_code == 200
    answer = await fleet.http.get("/api/queue", headers={"X-API-Key": key["key"]})
    assert answer.status_code == 401


@both_databases
async def test_revoking_a_key_ends_every_stream_it_opened_within_a_second(fleet: Fleet) -> None:
    job = await fleet.submit()  # queued: its log stream stays open
    revoked = await fleet.mint_key("queue.read", name="leaving")
    kept = await fleet.mint_key("queue.read", name="staying")
    signed_in = await fleet.http.post("/ui/session", json={"api_key": revoked["key"]})
    as_revoked = {"Authorization": f"Bearer {revoked['key']}"}
    doomed = [
        await fleet.open_sse("/api/events", "", as_revoked),
        await fleet.open_sse(f"/api/queue/{job['id']}/logs", "follow=true", as_revoked),
        await fleet.open_sse(
            "/api/events",
            "",
            {"Cookie": f"gpufleet_session={signed_in.cookies['gpufleet_session']}"},
        ),
    ]
    other = await fleet.open_sse("/api/events", "", {"X-API-Key": kept["key"]})
    assert [s.status for s in [*doomed, other]] == [200] * 4
    assert (await other.next())["type"] == "hello"

    answer = await fleet.admin.delete(f"/api/admin/api-keys/{revoked['id']}")
    assert answer.status_code == 200
    loop = asyncio.get_running_loop()
    started = loop.time()
    for stream in doomed:
        assert await stream.wait_closed(within=1.0), stream.frames
    assert loop.time() - started < 1.0

    assert not other.ended
    await fleet.submit()
    assert (await other.expect("jobs"))["type"] == "jobs"  # another key's stream goes on


async def test_a_worker_token_is_no_api_key(fleet: Fleet) -> None:
    agent = await fleet.create_worker("gpu-1")

    as_bearer = await fleet.http.get(
        "/api/admin/workers", headers={"Authorization": f"Bearer {agent.token}"}
    )
    as_worker = await fleet.http.get("/api/admin/workers", headers=agent.headers)

    assert as_bearer.status_code == 401
    assert as_worker.status_code == 401


async def test_a_worker_call_without_a_valid_token_is_unauthenticated(fleet: Fleet) -> None:
    missing = await fleet.http.post("/api/workers/heartbeat", json={})
    wrong = await fleet.http.post(
        "/api/workers/heartbeat", json={}, headers={"X-Worker-Token": "wt_wrong"}
    )

    assert missing.status_code == 401
    assert "X-Worker-Token" in missing.json()["detail"]
    assert wrong.status_code == 401
    assert "invalid token" in wrong.json()["detail"]


async def test_a_worker_token_speaks_only_for_its_own_worker(fleet: Fleet) -> None:
    mine = await fleet.online_worker("mine")
    other = await fleet.online_worker("other")

    heartbeat = await mine.heartbeat(worker_id=other.id)
    queue = await mine.queue_check(worker_id=other.id)
    stream = await fleet.open_stream(mine.token, other.id)
    disconnect = await fleet.http.post(
        "/api/workers/disconnect", json={"worker_id": other.id}, headers=mine.headers
    )

    assert heartbeat.status_code == 403
    assert other.id in heartbeat.json()["detail"]
    assert queue.status_code == 403
    assert stream.status == 403
    assert disconnect.status_code == 403
    assert (await other.info())["status"] == "idle"
    assert (await mine.info())["status"] == "idle"


async def test_a_worker_cannot_report_on_another_workers_job(fleet: Fleet) -> None:
    owner = await fleet.online_worker("owner", labels={"slot": "owner"})
    intruder = await fleet.online_worker("intruder")
    job = await fleet.submit(worker_labels={"slot": "owner"})
    offer = await owner.next_offer()
    await owner.run(offer)

    with_attempt = await intruder.report(job["id"], "completed", attempt_id=offer["attempt_id"])
    without = await intruder.report(job["id"], "failed")
    logs = await intruder.logs(job["id"], [{"stream": "stdout", "text": "forged"}])

    assert with_attempt.status_code == 403
    assert "never offered" in with_attempt.json()["detail"]
    assert without.status_code == 403
    assert logs.status_code == 403
    detail = await fleet.job(job["id"])
    assert detail["status"] == "running"
    assert detail["attempt_history"][0]["status"] == "running"
    assert (await fleet.admin.get(f"/api/queue/{job['id']}/logs")).json()["lines"] == []
    assert intruder.stream is not None and await intruder.stream.collect() == []


async def test_a_failed_registration_is_audited_with_the_callers_address(fleet: Fleet) -> None:
    async with fleet.client(client=("203.0.113.9", 4711)) as outsider:
        answer = await outsider.post(
            "/api/workers/register",
            json={"name": "intruder"},
            headers={"X-Worker-Token": "wt_guessed"},
        )

    assert answer.status_code == 401
    (failed,) = await fleet.audit(type="worker.register_failed")
    assert failed["client_addr"] == "203.0.113.9"
    assert failed["actor"] == "anonymous"
    assert failed["detail"]["reason"] == "invalid token"


async def test_the_audit_log_filters_by_type_actor_target_and_time(fleet: Fleet) -> None:
    first = await fleet.create_worker("first")
    key = await fleet.mint_key("admin.workers", "admin.audit", name="operator")
    operator = {"X-API-Key": key["key"]}
    fleet.clock.advance(60)
    since = fleet.clock.now
    created = await fleet.http.post("/api/admin/workers", json={"name": "second"}, headers=operator)
    second = created.json()["worker_id"]
    fleet.secrets.add(created.json()["token"])
    await fleet.http.post(f"/api/admin/workers/{first.id}/drain", headers=operator)

    by_type = await fleet.audit(type="worker.created")
    by_prefix = await fleet.audit(type="worker.")
    by_actor = await fleet.audit(actor=f"key:{key['id']}")
    by_target = await fleet.audit(target=first.id)
    by_time = await fleet.audit(since=since.isoformat())
    as_operator = await fleet.http.get(
        "/api/audit", params={"type": "worker.drained"}, headers=operator
    )

    assert {e["target"] for e in by_type} == {first.id, second}
    assert {e["event_type"] for e in by_prefix} >= {
        "worker.created",
        "worker.token_created",
        "worker.drained",
        "worker.status_changed",
    }
    assert all(e["event_type"].startswith("worker.") for e in by_prefix)
    assert {e["event_type"] for e in by_actor} >= {"worker.created", "worker.drained"}
    assert all(e["actor"] == f"key:{key['id']}" for e in by_actor)
    assert {e["event_type"] for e in by_target} >= {"worker.created", "worker.drained"}
    assert all(e["target"] == first.id for e in by_target)
    assert by_time and all(datetime.fromisoformat(e["ts"]) >= since for e in by_time)
    assert not any(e["target"] == first.id and e["event_type"] == "worker.created" for e in by_time)
    assert any(e["target"] == second for e in by_time)
    assert as_operator.status_code == 200
    assert as_operator.json()["total"] == 1
    assert [e["event_type"] for e in by_type] == ["worker.created"] * 2


async def test_the_audit_log_needs_the_audit_permission(fleet: Fleet) -> None:
    key = await fleet.mint_key("admin.workers")

    answer = await fleet.http.get("/api/audit", headers={"X-API-Key": key["key"]})

    assert answer.status_code == 403
    assert "admin.audit" in answer.json()["detail"]


@both_databases
async def test_no_token_or_key_is_ever_stored_in_the_database(fleet: Fleet) -> None:
    agent = await fleet.online_worker("gpu-1")
    other = await fleet.create_worker("gpu-2")
    await fleet.rotate_token(other)
    key = await fleet.mint_key("queue.read", "queue.submit")
    job = await fleet.submit()
    offer = await agent.next_offer()
    await agent.run(offer)
    await agent.logs(job["id"], [{"stream": "stdout", "text": "step 1"}])
    await agent.finish(offer)
    guesses = ["wt_guessed-token-value", "gfk_guessed-key-value"]
    await fleet.http.post("/api/workers/register", json={}, headers={"X-Worker-Token": guesses[0]})
    await fleet.http.get("/api/queue", headers={"Authorization": f"Bearer {guesses[1]}"})
    fleet.clock.advance(10)
    await fleet.http.get("/api/queue", headers={"X-API-Key": key["key"]})

    stored = await fleet.all_stored_text()

    assert hash_secret(fleet.admin_key) in stored  # the scan sees the tables
    assert "step 1" in stored
    leaked = [s for s in fleet.secrets | set(guesses) if s in stored]
    assert leaked == []
    assert len(fleet.secrets) >= 5
