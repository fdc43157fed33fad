"""Web UI sessions: a signed, HttpOnly cookie that authenticates the same API, CSRF-checked
on writes; pages follow the key's permissions; `/api/events` nudges live pages."""

from __future__ import annotations

import pytest

from gpufleet.server.services.sessions import SESSION_SECONDS
from tests.api.conftest import EventStream, Fleet


async def sign_in(fleet: Fleet, key: str | None = None) -> tuple[str, str]:
    """(session cookie, CSRF token) for a key (the admin key by default)."""
    answer = await fleet.http.post("/ui/session", json={"api_key": key or fleet.admin_key})
    assert answer.status_code == 200, answer.text
    return answer.cookies["gpufleet_session"], answer.cookies["gpufleet_csrf"]


def as_browser(session: str, csrf: str | None = None) -> dict[str, str]:
    headers = {"Cookie": f"gpufleet_session={session}"}
    if csrf is not None:
        headers["X-CSRF-Token"] = csrf
    return headers


async def test_signing_in_sets_an_httponly_samesite_strict_session_and_a_readable_csrf_cookie(
    fleet: Fleet,
) -> None:
    answer = await fleet.http.post("/ui/session", json={"api_key": fleet.admin_key})

    assert answer.status_code == 200
    session, csrf = sorted(answer.headers.get_list("set-cookie"))[::-1]
    assert session.startswith("gpufleet_session=")
    assert "HttpOnly" in session and "SameSite=strict" in session
    assert csrf.startswith("gpufleet_csrf=")
    assert "HttpOnly" not in csrf and "SameSite=strict" in csrf
    assert fleet.admin_key not in session  # the cookie names the key, it does not carry it


async def test_the_session_cookie_authenticates_the_json_api(fleet: Fleet) -> None:
    session, _csrf = await sign_in(fleet)

    answer = await fleet.http.get("/api/admin/workers", headers=as_browser(session))

    assert answer.status_code == 200
    assert "counts" in answer.json()


async def test_a_write_with_the_session_cookie_needs_the_matching_csrf_header(
    fleet: Fleet,
) -> None:
    session, csrf = await sign_in(fleet)
    body = {"name": "from-the-browser"}

    missing = await fleet.http.post("/api/admin/workers", json=body, headers=as_browser(session))
    wrong = await fleet.http.post(
        "/api/admin/workers", json=body, headers=as_browser(session, csrf[::-1])
    )
    right = await fleet.http.post(
        "/api/admin/workers", json=body, headers=as_browser(session, csrf)
    )

    assert missing.status_code == 403 and "CSRF" in missing.json()["detail"]
    assert wrong.status_code == 403
    assert right.status_code == 201
    (created,) = await fleet.audit(type="worker.created")
    assert created["actor"].startswith("key:")


async def test_a_csrf_token_of_another_session_is_refused(fleet: Fleet) -> None:
    session, _csrf = await sign_in(fleet)
    _other, other_csrf = await sign_in(fleet)

    answer = await fleet.http.post(
        "/api/queue/submit",
        json={"config": {"command": ["true"]}},
        headers=as_browser(session, other_csrf),
    )

    assert answer.status_code == 403


async def test_a_forged_or_expired_session_cookie_is_unauthenticated(fleet: Fleet) -> None:
    session, _csrf = await sign_in(fleet)
    key_id, expiry, nonce, signature = session.rsplit(".", 3)
    forged = f"{key_id}.{int(expiry) + 3600}.{nonce}.{signature}"

    refused = await fleet.http.get("/api/queue", headers=as_browser(forged))
    fleet.clock.advance(SESSION_SECONDS + 1)
    expired = await fleet.http.get("/api/queue", headers=as_browser(session))

    assert refused.status_code == 401
    assert expired.status_code == 401
    assert "sign in again" in expired.json()["detail"]


async def test_revoking_the_key_signs_its_browser_sessions_out(fleet: Fleet) -> None:
    key = await fleet.mint_key("queue.read", name="viewer")
    session, _csrf = await sign_in(fleet, key["key"])
    assert (await fleet.http.get("/api/queue", headers=as_browser(session))).status_code == 200

    await fleet.admin.delete(f"/api/admin/api-keys/{key['id']}")

    assert (await fleet.http.get("/api/queue", headers=as_browser(session))).status_code == 401
    page = await fleet.http.get("/queue", headers=as_browser(session))
    assert page.status_code == 303 and page.headers["location"] == "/signin?next=/queue"


async def test_a_session_outlives_an_orchestrator_restart(fleet: Fleet) -> None:
    session, _csrf = await sign_in(fleet)
    secret = fleet.settings.data_dir / "ui-secret"

    await fleet.restart()

    assert secret.stat().st_mode & 0o777 == 0o600
    assert (await fleet.http.get("/api/queue", headers=as_browser(session))).status_code == 200


async def test_a_wrong_key_is_refused_at_sign_in_and_audited(fleet: Fleet) -> None:
    answer = await fleet.http.post("/ui/session", json={"api_key": "gfk_wrong"})

    assert answer.status_code == 401
    assert "set-cookie" not in answer.headers
    (failed,) = await fleet.audit(type="auth.failed")
    assert failed["detail"]["credential"] == "api_key"


async def test_the_sign_in_form_works_without_javascript(fleet: Fleet) -> None:
    good = await fleet.http.post("/ui/session", data={"api_key": fleet.admin_key, "next": "/audit"})
    bad = await fleet.http.post("/ui/session", data={"api_key": "gfk_wrong", "next": "/audit"})
    offsite = await fleet.http.post(
        "/ui/session", data={"api_key": fleet.admin_key, "next": "//elsewhere.example"}
    )

    assert good.status_code == 303 and good.headers["location"] == "/audit"
    assert "gpufleet_session" in good.cookies
    assert bad.status_code == 401 and "invalid API key" in bad.text
    assert offsite.headers["location"] == "/"


# What a browser's URL parser (WHATWG) makes of each: another site, unless refused.
OFFSITE_NEXT = [
    "/\t/127.0.0.2:18399/phish",  # tabs and newlines are dropped: //127.0.0.2...
    "/\n/evil.example",
    "/\r\n/evil.example",
    " /\t/evil.example",  # leading spaces and C0 controls are dropped too
    "\x00\x1f//evil.example\x01 ",
    "/\\evil.example",  # a backslash is a slash
    "\\/evil.example",
    "\\\\evil.example",
    "//evil.example",
    "https://evil.example",
    "javascript:alert(1)",
    "evil.example",
    "",
]


@pytest.mark.parametrize("target", OFFSITE_NEXT, ids=repr)
async def test_after_sign_in_only_a_path_on_this_site_is_followed(
    fleet: Fleet, target: str
) -> None:
    as_json = await fleet.http.post(
        "/ui/session", json={"api_key": fleet.admin_key, "next": target}
    )
    as_form = await fleet.http.post(
        "/ui/session", data={"api_key": fleet.admin_key, "next": target}
    )
    page = await fleet.http.get("/signin", params={"next": target})

    assert as_json.json()["next"] == "/"
    assert as_form.status_code == 303 and as_form.headers["location"] == "/"
    assert 'name="next" value="/"' in page.text


async def test_a_path_on_this_site_is_followed_as_the_browser_reads_it(fleet: Fleet) -> None:
    cases = {"/queue/j_1?tab=logs#end": "/queue/j_1?tab=logs#end", " /au\tdit\n": "/audit"}
    for target, followed in cases.items():
        answer = await fleet.http.post(
            "/ui/session", json={"api_key": fleet.admin_key, "next": target}
        )
        assert answer.json()["next"] == followed


async def test_a_sign_in_posted_from_another_site_is_refused(fleet: Fleet) -> None:
    answer = await fleet.http.post(
        "/ui/session",
        json={"api_key": fleet.admin_key},
        headers={"Origin": "https://attacker.example"},
    )

    assert answer.status_code == 403
    assert "set-cookie" not in answer.headers


async def test_signing_out_clears_the_cookies(fleet: Fleet) -> None:
    session, csrf = await sign_in(fleet)

    refused = await fleet.http.delete("/ui/session", headers=as_browser(session))
    answer = await fleet.http.delete("/ui/session", headers=as_browser(session, csrf))

    assert refused.status_code == 403
    assert answer.status_code == 200
    cleared = answer.headers.get_list("set-cookie")
    assert any(c.startswith('gpufleet_session=""') or "Max-Age=0" in c for c in cleared)


@pytest.mark.parametrize("path", ["/", "/workers", "/train", "/queue", "/queue/j_x", "/audit"])
async def test_a_page_without_a_session_sends_the_browser_to_sign_in(
    fleet: Fleet, path: str
) -> None:
    answer = await fleet.http.get(path)

    assert answer.status_code == 303
    assert answer.headers["location"].startswith("/signin?next=")


async def test_pages_offer_only_what_the_key_may_do(fleet: Fleet) -> None:
    key = await fleet.mint_key("queue.read", "queue.submit", name="trainer")
    session, _csrf = await sign_in(fleet, key["key"])

    queue = await fleet.http.get("/queue", headers=as_browser(session))
    workers = await fleet.http.get("/workers", headers=as_browser(session))
    home = await fleet.http.get("/", headers=as_browser(session))

    assert queue.status_code == 200
    assert 'href="/train"' in queue.text and 'href="/workers"' not in queue.text
    assert 'href="/audit"' not in queue.text
    assert workers.status_code == 403 and "admin.workers" in workers.text
    assert home.headers["location"] == "/train"


async def test_pages_forbid_inline_scripts_and_framing(fleet: Fleet) -> None:
    session, _csrf = await sign_in(fleet)

    page = await fleet.http.get("/workers", headers=as_browser(session))
    style = await fleet.http.get("/static/style.css")

    assert "script-src 'self'" in page.headers["content-security-policy"]
    assert "frame-ancestors 'none'" in page.headers["content-security-policy"]
    assert "<script>" not in page.text
    assert style.status_code == 200 and "text/css" in style.headers["content-type"]


async def stream_events(fleet: Fleet, headers: dict[str, str]) -> EventStream:
    return await fleet.open_sse("/api/events", "", headers)


async def nudged(events: EventStream, *topics: str) -> bool:
    """Whether each of the topics' nudges comes (others may come between: a tick's are
    sent in their names' order)."""
    waiting = set(topics)
    while waiting:
        event = await events.next()
        if event is None:
            return False
        waiting.discard(event["type"])
    return True


async def test_the_events_stream_nudges_live_pages_when_workers_and_jobs_change(
    fleet: Fleet,
) -> None:
    session, _csrf = await sign_in(fleet)
    events = await stream_events(fleet, as_browser(session))
    hello = await events.next()
    topics = ["jobs", "teams", "workers", "fleet", "pools", "audit", "webhooks"]
    assert hello == {"type": "hello", "topics": topics}

    await fleet.create_worker("nudged")
    assert await nudged(events, "workers", "audit")  # audit: worker.created was recorded

    await fleet.submit(target="worker", gpu_count=0)
    assert await nudged(events, "jobs", "audit")  # audit: job.submitted was recorded


async def test_a_key_without_admin_workers_is_nudged_when_the_fleet_it_sees_changes(
    fleet: Fleet,
) -> None:
    key = await fleet.mint_key("queue.read", name="viewer")
    events = await stream_events(fleet, {"X-API-Key": key["key"]})

    hello = await events.next()
    assert hello == {"type": "hello", "topics": ["jobs", "teams", "workers", "fleet", "pools"]}
    await fleet.create_worker("seen")  # the Fleet page lists it for every key
    assert (await events.expect("workers"))["type"] == "workers"
    pool = {"name": "burst", "provider": {"type": "local"}, "max_workers": 1, "enabled": False}
    assert (await fleet.admin.post("/api/admin/pools", json=pool)).status_code == 201
    assert (await events.expect("pools"))["type"] == "pools"  # the Capacity page re-reads


async def test_the_events_stream_needs_credentials(fleet: Fleet) -> None:
    answer = await fleet.http.get("/api/events")

    assert answer.status_code == 401
