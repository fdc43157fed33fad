"""The worker API served by plain endpoints (server/plain.py, #39) answers as FastAPI's own
handler of the same declarations did: every refusal with the same status and body, the door
before the body, and the OpenAPI document unchanged."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from fastapi.routing import request_response

from gpufleet.domain.jsonpolicy import MAX_VALUES
from gpufleet.server.jsonbody import JsonBodyRoute
from gpufleet.server.plain import PlainRoute
from gpufleet.server.ratelimit import FailureLimiter
from gpufleet.server.routes import workers
from gpufleet.server.schemas.agent import HeartbeatIn, HeartbeatOut, LogsIn, StatusIn, StatusOut
from tests.api.conftest import Agent, Fleet

JSON = {"Content-Type": "application/json"}
UNSTORABLE = b'{"status": "running\\u0000", "lines": [{"text": "\\u0000"}], "worker_id": "w"}'
TOO_MANY = b"[" + b"0," * MAX_VALUES + b"0]"
BODIES = [
    b"",
    b"{not json",
    b'{"status": "running", }',
    b"\xff\xfe\x00",
    b"[]",
    b'"running"',
    b"null",
    b'{"status": 5, "lines": "x", "gpu_stats": [{"index": -1}], "exit_code": 1e40}',
    b'{"status": "", "attempt_id": "' + b"a" * 65 + b'", "lines": [{"stream": "tty"}]}',
    b'{"status": "running", "lines": [], "node_rank": 64, "first": -1}',
    b'{"status": NaN, "lines": [{"text": 1e999}]}',
    UNSTORABLE,
    TOO_MANY,
]
# Refused by register and disconnect too: a body either takes would change the worker.
REFUSED = [
    *(b for b in BODIES[1:6]),
    b'{"worker_id": 5, "name": 7, "gpu_count": -1}',
    b'{"worker_id": NaN}',
    UNSTORABLE,
    TOO_MANY,
]
TYPES = [JSON, {"Content-Type": "text/plain"}, {}]


def _fastapi_handlers(monkeypatch: pytest.MonkeyPatch) -> None:
    """Serve the worker routes as they were served before #39: FastAPI's own handler."""
    for route in workers.router.routes:
        assert isinstance(route, PlainRoute)
        handler = JsonBodyRoute.get_route_handler(route)
        monkeypatch.setattr(route, "app", request_response(handler))


async def _answers(fleet: Fleet, requests: list[tuple[str, str, dict[str, str], bytes]]) -> Any:
    out = []
    for method, url, headers, body in requests:
        answer = await fleet.http.request(method, url, content=body, headers=headers)
        kept = {k: v for k, v in answer.headers.items() if k in ("content-type", "connection")}
        out.append((method, url, body[:40], answer.status_code, answer.json(), kept))
    return out


def _requests(a: Agent, b: Agent, job_id: str, attempt: str) -> list[Any]:
    """Refusals of every kind on each worker route, and calls that change nothing."""
    base = "/api/workers"
    bodied = [
        f"{base}/heartbeat",
        f"{base}/job/{job_id}/status",
        f"{base}/job/{job_id}/logs",
        f"{base}/job/j_nope/status",
        f"{base}/register",
        f"{base}/disconnect",
    ]
    out: list[Any] = []
    for url in bodied:
        bodies = REFUSED if url.endswith(("register", "disconnect")) else BODIES
        out += [("POST", url, {**JSON, "X-Worker-Token": "wrong"}, b"{not json")]
        out += [("POST", url, JSON, UNSTORABLE)]
        out += [("POST", url, {**kind, **a.headers}, body) for body in bodies for kind in TYPES]
    status = f"{base}/job/{job_id}/status"
    for token in ("", "t" * 129):  # the attempt token's header out of its bounds
        headers = {**JSON, **a.headers, "X-Attempt-Token": token}
        out += [("POST", status, headers, b'{"status": 7}')]
        out += [("POST", f"{base}/job/{job_id}/logs", headers, b'{"lines": []}')]
    running = b'{"status": "running", "attempt_id": "%s"}' % attempt.encode()
    out += [("POST", status, {**JSON, **b.headers}, running)]  # another worker's job
    out += [("POST", status, {**JSON, **a.headers}, b'{"status": "running", "attempt_id": "x"}')]
    out += [("POST", status, {**JSON, **a.headers}, b'{"status": "exploded"}')]
    out += [("POST", f"{base}/job/j_nope/status", {**JSON, **a.headers}, b'{"status": "running"}')]
    out += [("POST", f"{base}/job/{job_id}/logs", {**JSON, **b.headers}, b'{"lines": []}')]
    out += [
        ("POST", f"{base}/heartbeat", {**JSON, **b.headers}, f'{{"worker_id": "{b.id}"}}'.encode())
    ]
    out += [("POST", f"{base}/heartbeat", {**JSON, **a.headers}, b'{"worker_id": "w_other"}')]
    for url in (f"{base}/queue", f"{base}/job/{job_id}/secrets", f"{base}/stream"):
        out += [("GET", f"{url}?worker_id=w_other", a.headers, b"")]
        out += [("GET", url, {"X-Worker-Token": "wrong"}, b"")]
        out += [("GET", url, {}, b"")]
    out += [("GET", f"{base}/queue?worker_id={b.id}", b.headers, b"")]
    out += [("GET", f"{base}/job/{job_id}/secrets?attempt_id=" + "x" * 65, a.headers, b"")]
    out += [("GET", f"{base}/job/{job_id}/secrets?attempt_id={attempt}", b.headers, b"")]
    return out


async def test_each_worker_route_refuses_as_fastapi_did_with_the_same_status_and_body(
    fleet: Fleet, monkeypatch: pytest.MonkeyPatch
) -> None:
    fleet.ctx.auth_failures = FailureLimiter(0, 60.0)  # limiting has its own test
    a = await fleet.online_worker("gpu-a")
    job = await fleet.submit()
    offer = await a.next_offer()
    b = await fleet.online_worker("gpu-b")
    requests = _requests(a, b, job["id"], offer["attempt_id"])
    offered = await fleet.job(job["id"])

    plain = await _answers(fleet, requests)
    _fastapi_handlers(monkeypatch)
    before = await _answers(fleet, requests)

    assert {a[3] for a in plain} >= {200, 400, 401, 403, 404, 409, 413, 422}
    assert [(p, f) for p, f in zip(plain, before, strict=True) if p != f] == []
    assert (await fleet.job(job["id"]))["status"] == offered["status"]  # nothing was written


def _post(path: str, headers: list[tuple[bytes, bytes]]) -> dict[str, Any]:
    """An ASGI scope of a POST announcing a 9-byte JSON body."""
    return {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "root_path": "",
        "headers": [(b"content-type", b"application/json"), (b"content-length", b"9"), *headers],
        "client": ("127.0.0.1", 40000),
        "server": ("test", 80),
    }


async def test_a_worker_route_refuses_a_request_without_credentials_before_its_body_comes(
    fleet: Fleet,
) -> None:
    """The body never arrives: an answer at all shows it was not read."""
    worker = await fleet.online_worker("gpu-1")
    job = await fleet.submit()
    await worker.next_offer()

    async def never() -> dict[str, Any]:
        await asyncio.Event().wait()
        raise AssertionError("the body was read")

    for path in ("heartbeat", f"job/{job['id']}/status", f"job/{job['id']}/logs"):
        for headers in ([], [(b"x-worker-token", b"wrong")]):
            sent: list[dict[str, Any]] = []

            async def send(message: dict[str, Any], sent: list[Any] = sent) -> None:
                sent.append(message)

            scope = _post(f"/api/workers/{path}", headers)
            await asyncio.wait_for(fleet.app(scope, never, send), 5)
            assert sent[0]["status"] == 401, (path, sent[0])
            assert (b"connection", b"close") in sent[0]["headers"]


async def test_a_malformed_report_is_refused_422_naming_each_field(fleet: Fleet) -> None:
    worker = await fleet.online_worker("gpu-1")
    answer = await fleet.http.post(
        "/api/workers/job/j_1/status",
        content=b'{"status": "", "exit_code": "x"}',
        headers={**JSON, **worker.headers, "X-Attempt-Token": ""},
    )

    assert answer.status_code == 422
    body = answer.json()
    assert [e["loc"] for e in body["errors"]] == [
        ["header", "X-Attempt-Token"],
        ["body", "status"],
        ["body", "exit_code"],
    ]
    assert body["detail"].startswith("invalid request: header.X-Attempt-Token: String should have")


async def test_the_openapi_document_describes_the_plain_routes_with_their_models(
    fleet: Fleet,
) -> None:
    spec = fleet.app.openapi()
    paths = spec["paths"]

    def ref(op: dict[str, Any], where: str) -> str:
        if where == "body":
            schema = op["requestBody"]["content"]["application/json"]["schema"]
        else:
            schema = op["responses"]["200"]["content"]["application/json"]["schema"]
        return str(schema["$ref"]).rsplit("/", 1)[-1]

    expected = {
        ("/api/workers/heartbeat", HeartbeatIn, HeartbeatOut),
        ("/api/workers/job/{job_id}/status", StatusIn, StatusOut),
        ("/api/workers/job/{job_id}/logs", LogsIn, None),
    }
    for path, body, out in expected:
        op = paths[path]["post"]
        assert ref(op, "body") == body.__name__
        assert ref(op, "out") == (out.__name__ if out else "Ok")
        headers = {p["name"] for p in op["parameters"] if p["in"] == "header"}
        assert "x-worker-token" in headers
        assert {"401", "403", "404", "409", "413", "422"} <= set(op["responses"])
    status_headers = {
        p["name"] for p in paths["/api/workers/job/{job_id}/status"]["post"]["parameters"]
    }
    assert "X-Attempt-Token" in status_headers
