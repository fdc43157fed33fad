"""Failed authentication is limited and audited; verifying the audit chain needs its permission
(the chain itself: test_audit_chain.py); bodies are limited."""

from __future__ import annotations

from gpufleet.server.ratelimit import FailureLimiter
from tests.api.conftest import Fleet


async def test_a_client_that_keeps_failing_to_authenticate_is_refused_for_a_while(
    fleet: Fleet,
) -> None:
    now = [0.0]
    fleet.ctx.auth_failures = FailureLimiter(3, 60.0, clock=lambda: now[0])
    async with fleet.client() as anon:
        for _ in range(3):
            wrong = await anon.get("/api/queue", headers={"Authorization": "Bearer gfk_wrong"})
            assert wrong.status_code == 401
        locked = await anon.get("/api/queue", headers={"Authorization": "Bearer gfk_wrong"})
        assert locked.status_code == 429
        assert int(locked.headers["Retry-After"]) == 60
        assert "too many failed authentications" in locked.json()["detail"]
        now[0] = 61.0
        again = await anon.get("/api/queue", headers={"Authorization": "Bearer gfk_wrong"})
        assert again.status_code == 401
    limited = await fleet.audit(type="auth.rate_limited")
    assert len(limited) == 1 and limited[0]["client_addr"] == "127.0.0.1"
    failures = await fleet.audit(type="auth.failed")
    assert len(failures) == 4  # three, then one once the window passed; the refused one not
    assert all(fleet.admin_key not in str(e) and "gfk_wrong" not in str(e) for e in failures)


async def test_a_valid_key_token_or_session_is_never_throttled_by_the_failures_of_its_address(
    fleet: Fleet,
) -> None:
    agent = await fleet.online_worker("gpu-1")
    session = await fleet.http.post("/ui/session", json={"api_key": fleet.admin_key})
    cookie = {"Cookie": f"gpufleet_session={session.cookies['gpufleet_session']}"}
    fleet.ctx.auth_failures = FailureLimiter(3, 60.0)
    async with fleet.client() as anon:  # the workers' address, as every client here
        for _ in range(21):
            await anon.get("/api/queue", headers={"Authorization": "Bearer garbage"})
        wrong_key = await anon.get("/api/queue", headers={"Authorization": "Bearer garbage"})
        wrong_token = await anon.post(
            "/api/workers/heartbeat", json={"worker_id": agent.id}, headers={"X-Worker-Token": "x"}
        )
        nothing = await anon.get("/api/queue")
        admin = await anon.get("/api/queue", headers={"Authorization": f"Bearer {fleet.admin_key}"})
        by_header = await anon.get("/api/queue", headers={"X-API-Key": fleet.admin_key})
        signed_in = await anon.post("/ui/session", json={"api_key": fleet.admin_key})
        page = await anon.get("/api/queue", headers=cookie)
        heartbeat = await anon.post(
            "/api/workers/heartbeat",
            json={"worker_id": agent.id},
            headers={"X-Worker-Token": f" {agent.token} "},
        )
    assert [wrong_key.status_code, wrong_token.status_code, nothing.status_code] == [429] * 3
    assert admin.status_code == 200 and by_header.status_code == 200
    assert signed_in.status_code == 200 and page.status_code == 200
    assert heartbeat.status_code == 200, heartbeat.text
    assert len(await fleet.audit(type="auth.failed")) == 3  # refusals while locked: not counted


async def test_requests_without_credentials_count_toward_the_limit_and_a_valid_key_still_works(
    fleet: Fleet,
) -> None:
    agent = await fleet.online_worker("gpu-1")
    fleet.ctx.auth_failures = FailureLimiter(20, 60.0)  # the default: 20 a minute
    async with fleet.client() as anon:
        bare = [(await anon.get("/api/queue")).status_code for _ in range(12)]
        bare += [
            (await anon.post("/api/workers/heartbeat", json={"worker_id": agent.id})).status_code
            for _ in range(6)
        ]
        bare += [(await anon.post("/api/queue/submit", json={})).status_code for _ in range(7)]
        locked = await anon.get("/api/queue", headers={"Authorization": "Bearer "})
        admin = await anon.get("/api/queue", headers={"Authorization": f"Bearer {fleet.admin_key}"})
        heartbeat = await anon.post(
            "/api/workers/heartbeat", json={"worker_id": agent.id}, headers=agent.headers
        )
    assert bare == [401] * 20 + [429] * 5
    assert locked.status_code == 429 and 0 < int(locked.headers["Retry-After"]) <= 60
    assert "too many failed authentications" in locked.json()["detail"]
    assert admin.status_code == 200 and heartbeat.status_code == 200, heartbeat.text
    # Anonymous probes are counted, not audited one by one: one entry when the limit is hit.
    assert await fleet.audit(type="auth.failed") == []
    limited = await fleet.audit(type="auth.rate_limited")
    assert len(limited) == 1 and limited[0]["detail"]["credential"] == "none"
    metrics = (await fleet.admin.get("/metrics")).text
    assert 'gpufleet_auth_failures_total{credential="none"} 20.0' in metrics


async def test_worker_token_guessing_is_limited_too(fleet: Fleet) -> None:
    fleet.ctx.auth_failures = FailureLimiter(2, 60.0)
    async with fleet.client() as anon:
        codes = [
            (
                await anon.post(
                    "/api/workers/register",
                    json={"name": "x"},
                    headers={"X-Worker-Token": f"wt_guess{i}"},
                )
            ).status_code
            for i in range(3)
        ]
    assert codes == [401, 401, 429]
    fleet.ctx.auth_failures = FailureLimiter(20, 60.0)  # the admin reads from the same address
    assert len(await fleet.audit(type="worker.register_failed")) == 2


async def test_verifying_the_audit_log_needs_the_audit_permission(fleet: Fleet) -> None:
    key = await fleet.mint_key("queue.read")
    async with fleet.client(headers={"Authorization": f"Bearer {key['key']}"}) as reader:
        assert (await reader.get("/api/audit/verify")).status_code == 403


async def test_a_body_over_the_limit_is_refused_with_413_and_nothing_is_stored(
    fleet: Fleet,
) -> None:
    huge = {"command": ["true"], "blob": "x" * (5 * 1024 * 1024)}
    declared = await fleet.admin.put("/api/configs/huge", json=huge)
    assert declared.status_code == 413, declared.text

    async def chunks():  # no Content-Length: the limit bites while reading
        yield b'{"command": ["true"], "blob": "'
        for _ in range(6):
            yield b"x" * (1024 * 1024)
        yield b'"}'

    streamed = await fleet.admin.put(
        "/api/configs/huge", content=chunks(), headers={"Content-Type": "application/json"}
    )
    assert streamed.status_code == 413
    assert "too large" in streamed.json()["detail"]
    assert (await fleet.admin.get("/api/configs/huge")).status_code == 404
