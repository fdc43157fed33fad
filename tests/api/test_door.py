"""The door before the body: credentials are checked from the headers before a JSON body is
read, and a body is bounded in values as well as in bytes (docs/security.md, "The door")."""

from __future__ import annotations

from typing import Any

from fastapi.routing import APIRoute

from gpufleet.domain.jsonpolicy import MAX_VALUES
from gpufleet.server.deps import Credential, credential_of
from gpufleet.server.ratelimit import FailureLimiter
from tests.api.conftest import Fleet

# A body every route's input policy refuses (a NUL in a string): parsed, it is a 422.
UNSTORABLE = b'{"name": "gpu\\u0000", "worker_id": "w\\u0000", "command": ["\\u0000"]}'
JSON = {"Content-Type": "application/json"}
PARAMS = {
    "worker_id": "w_nope",
    "job_id": "j_nope",
    "name": "cfg",
    "key_id": "k_nope",
    "webhook_id": "wh_nope",
    "user": "nobody",
    "team": "nobody",
    "upload_id": "u_nope",
}


def _json_operations(fleet: Fleet) -> list[tuple[str, str]]:
    spec = fleet.app.openapi()
    return [
        (method.upper(), path)
        for path, ops in spec["paths"].items()
        for method, op in ops.items()
        if "application/json" in op.get("requestBody", {}).get("content", {})
    ]


def _credentials(dependant: Any) -> list[Credential[Any]]:
    found: list[Credential[Any]] = []
    for sub in dependant.dependencies:
        credential = credential_of(sub.call)
        if credential is not None:
            found.append(credential)
        found += _credentials(sub)
    return found


async def test_every_route_that_reads_a_json_body_names_its_credential(fleet: Fleet) -> None:
    bodied = [r for r in fleet.app.routes if isinstance(r, APIRoute) and r.body_field]
    assert len(bodied) >= 20
    assert [r.path for r in bodied if not _credentials(r.dependant)] == []


async def test_a_body_without_credentials_is_refused_401_before_it_is_read(fleet: Fleet) -> None:
    fleet.ctx.auth_failures = FailureLimiter(0, 60.0)  # limiting has its own test
    operations = _json_operations(fleet)
    assert len(operations) >= 20, operations
    answers = {}
    for method, path in operations:
        url = path.format(**PARAMS)
        for body in (UNSTORABLE, b"{not json", b"[" + b"0," * 200_000 + b"0]"):
            answer = await fleet.http.request(method, url, content=body, headers=JSON)
            answers[(method, path, body[:9])] = answer.status_code
    assert {k: v for k, v in answers.items() if v != 401} == {}
    assert await fleet.audit(type="auth.failed") == []  # a missing credential is counted only


async def test_a_key_without_the_permission_or_a_session_without_csrf_is_refused_before_the_body(
    fleet: Fleet,
) -> None:
    reader = await fleet.mint_key("queue.read")
    signed_in = await fleet.http.post("/ui/session", json={"api_key": fleet.admin_key})
    session = {"Cookie": f"gpufleet_session={signed_in.cookies['gpufleet_session']}"}
    worker = await fleet.online_worker("gpu-1")

    submit = await fleet.http.post(
        "/api/queue/submit",
        content=UNSTORABLE,
        headers={**JSON, "Authorization": f"Bearer {reader['key']}"},
    )
    no_csrf = await fleet.http.put("/api/configs/cfg", content=UNSTORABLE, headers=session | JSON)
    with_token = await fleet.http.post(
        "/api/workers/heartbeat", content=UNSTORABLE, headers={**JSON, **worker.headers}
    )

    assert submit.status_code == 403 and "queue.submit" in submit.json()["detail"]
    assert no_csrf.status_code == 403 and "CSRF" in no_csrf.json()["detail"]
    assert with_token.status_code == 422  # past the door, the policy reads the body
    assert "NUL" in with_token.text


def _values(count: int) -> bytes:
    """A submit body holding `count` JSON values in all (the object and its command included)."""
    zeros = ",".join(["0"] * (count - 5))
    return f'{{"config": {{"command": ["true"], "blob": [{zeros}]}}}}'.encode()


async def test_a_body_of_more_values_than_the_limit_is_refused_saying_the_limit(
    fleet: Fleet,
) -> None:
    over = await fleet.admin.post("/api/queue/submit", content=_values(MAX_VALUES + 1))
    small_over = await fleet.admin.post(
        "/api/queue/submit", content=b"[" + b"[]," * MAX_VALUES + b"[]]", headers=JSON
    )

    assert over.status_code == 413, over.text
    assert f"{MAX_VALUES:,} JSON values" in over.json()["detail"]
    assert small_over.status_code == 413  # 4 bytes a value: the limit is not on size alone
    assert (await fleet.admin.get("/api/queue")).json()["jobs"] == []


async def test_a_body_at_the_value_limit_or_with_commas_inside_its_strings_is_read(
    fleet: Fleet,
) -> None:
    at_limit = await fleet.admin.put(
        "/api/configs/many",
        content=f'{{"command": ["true"], "blob": [{",".join(["0"] * (MAX_VALUES - 4))}]}}',
    )
    commas = await fleet.admin.put(
        "/api/configs/commas", json={"command": ["true"], "note": "," * (3 * MAX_VALUES)}
    )

    assert at_limit.status_code == 200, at_limit.text[:300]
    assert commas.status_code == 200, commas.text[:300]
    stored = (await fleet.admin.get("/api/configs/commas")).json()
    assert stored["config"]["note"] == "," * (3 * MAX_VALUES)


async def test_a_body_refused_unread_ends_its_connection_and_a_read_one_keeps_it(
    fleet: Fleet,
) -> None:
    fleet.ctx.auth_failures = FailureLimiter(0, 60.0)
    refused = await fleet.http.post("/api/queue/submit", content=UNSTORABLE, headers=JSON)
    read = await fleet.admin.post("/api/queue/submit", content=UNSTORABLE, headers=JSON)
    no_body = await fleet.http.get("/api/queue")
    stored = await fleet.http.put("/api/cloud/storage/gpufleet/j_nope/m/blob", content=b"x" * 99)

    assert refused.status_code == 401 and refused.headers["connection"] == "close"
    assert stored.status_code == 401 and stored.headers["connection"] == "close"  # upload token
    assert read.status_code == 422 and "connection" not in read.headers
    assert no_body.status_code == 401 and "connection" not in no_body.headers
