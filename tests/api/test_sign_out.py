"""Signing out ends the session on the server: its cookie is refused from then on, by every
replica (they read the same database), while the key's other sessions go on."""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from sqlalchemy import event

from gpufleet.server.services.sessions import SESSION_SECONDS
from tests.api.conftest import Fleet, both_databases
from tests.api.test_ui_session import as_browser, sign_in


async def sign_out(fleet: Fleet, session: str, csrf: str) -> None:
    answer = await fleet.http.delete("/ui/session", headers=as_browser(session, csrf))
    assert answer.status_code == 200, answer.text


async def signed_out_rows(fleet: Fleet) -> list[str]:
    reflected = sa.MetaData()
    async with fleet.ctx.store.engine.connect() as conn:
        await conn.run_sync(reflected.reflect)
        table = reflected.tables["revoked_sessions"]
        return [r.nonce for r in await conn.execute(sa.select(table))]


async def test_a_signed_out_cookie_is_refused_by_the_api_and_the_pages(fleet: Fleet) -> None:
    session, csrf = await sign_in(fleet)
    assert (await fleet.http.get("/api/queue", headers=as_browser(session))).status_code == 200

    await sign_out(fleet, session, csrf)

    read = await fleet.http.get("/api/queue", headers=as_browser(session))
    write = await fleet.http.post(
        "/api/admin/workers", json={"name": "after"}, headers=as_browser(session, csrf)
    )
    page = await fleet.http.get("/queue", headers=as_browser(session))
    events = await fleet.open_sse("/api/events", "", as_browser(session))
    assert read.status_code == 401 and "sign in again" in read.json()["detail"]
    assert write.status_code == 401
    assert page.status_code == 303 and page.headers["location"].startswith("/signin?next=")
    assert events.status == 401
    workers = (await fleet.admin.get("/api/admin/workers")).json()["workers"]
    assert [w for w in workers if w["name"] == "after"] == []


async def test_signing_out_ends_only_that_session(fleet: Fleet) -> None:
    ended, csrf = await sign_in(fleet)
    other, _other_csrf = await sign_in(fleet)

    await sign_out(fleet, ended, csrf)

    assert (await fleet.http.get("/api/queue", headers=as_browser(other))).status_code == 200
    assert (await fleet.admin.get("/api/queue")).status_code == 200  # the key itself too


async def test_a_sign_out_without_the_csrf_token_ends_nothing(fleet: Fleet) -> None:
    session, _csrf = await sign_in(fleet)

    refused = await fleet.http.delete("/ui/session", headers=as_browser(session))

    assert refused.status_code == 403
    assert (await fleet.http.get("/api/queue", headers=as_browser(session))).status_code == 200
    assert await signed_out_rows(fleet) == []


async def test_signing_out_twice_or_with_a_bad_cookie_stores_nothing_more(fleet: Fleet) -> None:
    session, csrf = await sign_in(fleet)
    await sign_out(fleet, session, csrf)
    await sign_out(fleet, session, csrf)  # the browser's second click: already ended
    forged = session.rsplit(".", 1)[0] + ".AAAA"
    await sign_out(fleet, forged, csrf)

    assert len(await signed_out_rows(fleet)) == 1


@both_databases
async def test_a_signed_out_session_is_forgotten_once_it_would_have_expired(
    fleet: Fleet,
) -> None:
    first, first_csrf = await sign_in(fleet)
    await sign_out(fleet, first, first_csrf)
    (kept,) = await signed_out_rows(fleet)
    assert kept in first

    fleet.clock.advance(SESSION_SECONDS + 1)  # the first cookie is expired: nothing to keep
    second, second_csrf = await sign_in(fleet)
    await sign_out(fleet, second, second_csrf)

    (remaining,) = await signed_out_rows(fleet)
    assert remaining in second
    assert (await fleet.http.get("/api/queue", headers=as_browser(first))).status_code == 401


@both_databases
async def test_signing_out_ends_the_event_streams_that_session_opened(fleet: Fleet) -> None:
    ended, csrf = await sign_in(fleet)
    other, _other_csrf = await sign_in(fleet)
    ending = await fleet.open_sse("/api/events", "", as_browser(ended))
    going_on = await fleet.open_sse("/api/events", "", as_browser(other))
    assert (await ending.next())["type"] == "hello"  # type: ignore[index]
    assert (await going_on.next())["type"] == "hello"  # type: ignore[index]

    await sign_out(fleet, ended, csrf)

    assert await ending.wait_closed(within=2.0)
    await fleet.create_worker("nudge")
    assert (await going_on.expect("workers"))["type"] == "workers"


async def test_the_sign_out_check_is_a_primary_key_probe_inside_the_sessions_one_read(
    fleet: Fleet,
) -> None:
    """Every page and call of the web UI pays it: no extra statement, no scan of the
    signed-out sessions (however many)."""
    session, _csrf = await sign_in(fleet)
    seen: list[tuple[str, Any]] = []

    def capture(_conn: Any, _cur: Any, statement: str, params: Any, *_: Any) -> None:
        seen.append((statement, params))

    engine = fleet.ctx.store.engine.sync_engine
    event.listen(engine, "before_cursor_execute", capture)
    try:
        answer = await fleet.http.get("/api/admin/orchestrator", headers=as_browser(session))
    finally:
        event.remove(engine, "before_cursor_execute", capture)
    assert answer.status_code == 200
    (statement, params), *_ = [s for s in seen if "revoked_sessions" in s[0]]
    assert "FROM api_keys JOIN users" in statement  # the read that loads the session's key
    async with fleet.ctx.store.read() as q:
        rows = await q.conn.exec_driver_sql("EXPLAIN QUERY PLAN " + statement, params)
        plan = " / ".join(str(row[-1]) for row in rows)
    assert "SEARCH revoked_sessions USING" in plan and "SCAN revoked_sessions" not in plan, plan
    assert len([s for s in seen if "revoked_sessions" in s[0]]) == 1
