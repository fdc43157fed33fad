"""Every answer says `nosniff`; every JSON or API answer says `no-store`, static assets stay
cacheable: an answer holding a fleet's data is never kept by a browser or a proxy."""

from __future__ import annotations

import httpx
import pytest

from tests.api.conftest import Fleet


def private(answer: httpx.Response | dict[str, str]) -> None:
    headers = answer.headers if isinstance(answer, httpx.Response) else answer
    assert headers["x-content-type-options"] == "nosniff", headers
    assert headers["cache-control"] == "no-store", headers


@pytest.mark.parametrize(
    ("method", "path", "status"),
    [
        ("GET", "/api/queue", 200),
        ("GET", "/api/admin/workers", 200),
        ("GET", "/healthz", 200),
        ("GET", "/api/queue/j_nope", 404),
        ("POST", "/api/queue/submit", 422),  # no body
        ("GET", "/api/queue/j%00x", 422),  # refused before any route
        ("GET", "/api/no-such-route", 404),
    ],
)
async def test_json_answers_and_errors_are_neither_sniffed_nor_stored(
    fleet: Fleet, method: str, path: str, status: int
) -> None:
    answer = await fleet.admin.request(method, path)
    assert answer.status_code == status, answer.text
    assert answer.headers["content-type"].startswith("application/json")
    private(answer)


async def test_refused_requests_are_neither_sniffed_nor_stored(fleet: Fleet) -> None:
    for answer in [
        await fleet.http.get("/api/queue"),  # no credentials: 401
        await fleet.admin.post("/api/queue/submit", content=b"x" * (5 * 1024 * 1024)),  # 413
    ]:
        assert answer.status_code in (401, 413), answer.text
        private(answer)


async def test_event_streams_are_neither_sniffed_nor_stored(fleet: Fleet) -> None:
    stream = await fleet.open_sse("/api/events", "", {"Authorization": f"Bearer {fleet.admin_key}"})
    assert stream.status == 200
    assert stream.headers["content-type"].startswith("text/event-stream")
    private(stream.headers)


async def test_pages_are_neither_sniffed_nor_stored(fleet: Fleet) -> None:
    private(await fleet.http.get("/signin"))


async def test_static_assets_are_not_sniffed_and_stay_cacheable(fleet: Fleet) -> None:
    answer = await fleet.http.get("/static/api.js")
    assert answer.status_code == 200
    assert answer.headers["x-content-type-options"] == "nosniff"
    assert "no-store" not in answer.headers.get("cache-control", "")
    assert "etag" in answer.headers  # revalidated, not fetched whole each time
