"""A JSON body is read as JSON whatever its Content-Type says (curl -d sends a form type)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.api.conftest import Fleet

# What clients send with a JSON body: nothing (curl --data-binary @-, many scripts), curl's
# default for -d, a text type, or JSON itself.
CONTENT_TYPES = [
    None,
    "application/x-www-form-urlencoded",
    "text/plain; charset=utf-8",
    "application/octet-stream",
]
NOT_JSON = 'the request body is not JSON: send a JSON object, such as -d \'{"name": "gpu-1"}\''


def _headers(content_type: str | None, auth: dict[str, str]) -> dict[str, str]:
    return {**auth, **({"Content-Type": content_type} if content_type else {})}


def _json_operations(fleet: Fleet) -> list[tuple[str, str]]:
    spec = fleet.app.openapi()
    return [
        (method, path)
        for path, ops in spec["paths"].items()
        for method, op in ops.items()
        if "application/json" in op.get("requestBody", {}).get("content", {})
    ]


async def test_every_json_endpoint_answers_a_json_body_alike_whatever_its_content_type(
    fleet: Fleet,
) -> None:
    worker = await fleet.online_worker("gpu-1")
    params = {
        "worker_id": worker.id,
        "job_id": "j_nope",
        "name": "cfg",
        "key_id": "k_nope",
        "webhook_id": "wh_nope",
        "user": "nobody",
        "team": "nobody",
    }
    operations = _json_operations(fleet)
    assert len(operations) >= 9, operations
    differences = []
    for method, path in operations:
        auth = (
            worker.headers
            if path.startswith("/api/workers/")
            else {"Authorization": f"Bearer {fleet.admin_key}"}
        )
        url = path.format(**params)
        answers: dict[str | None, Any] = {}
        for content_type in ["application/json", *CONTENT_TYPES]:
            answer = await fleet.http.request(
                method.upper(), url, content=b"{}", headers=_headers(content_type, auth)
            )
            answers[content_type] = (answer.status_code, answer.json().get("detail"))
        if len(set(map(str, answers.values()))) != 1:
            differences.append((method, path, answers))
    assert differences == []


@pytest.mark.parametrize("content_type", CONTENT_TYPES)
async def test_a_worker_is_created_from_json_sent_with_any_content_type(
    fleet: Fleet, content_type: str | None
) -> None:
    answer = await fleet.admin.post(
        "/api/admin/workers",
        content=b'{"name": "gpu-worker-1", "labels": {"team": "nlp"}}',
        headers=_headers(content_type, {}),
    )

    assert answer.status_code == 201, answer.text
    created = (await fleet.admin.get(f"/api/admin/workers/{answer.json()['worker_id']}")).json()
    assert (created["name"], created["labels"]) == ("gpu-worker-1", {"team": "nlp"})


@pytest.mark.parametrize(
    ("content_type", "body"),
    [
        ("application/x-www-form-urlencoded", b"name=gpu-worker-1"),
        ("text/plain", b"gpu-worker-1"),
        (None, b"\xff\xfe not text"),
        ("multipart/form-data; boundary=x", b'--x\r\nContent-Disposition: form-data; name="name"'),
    ],
)
async def test_a_body_that_is_not_json_is_refused_saying_to_send_json(
    fleet: Fleet, content_type: str | None, body: bytes
) -> None:
    answer = await fleet.admin.post(
        "/api/admin/workers", content=body, headers=_headers(content_type, {})
    )

    assert answer.status_code == 422
    assert answer.json()["detail"] == NOT_JSON
    assert (await fleet.admin.get("/api/admin/workers")).json()["workers"] == []


async def test_malformed_json_is_refused_saying_where_it_breaks(fleet: Fleet) -> None:
    answer = await fleet.admin.post(
        "/api/admin/workers",
        content=b'{"name": "gpu-1",}',
        headers={"Content-Type": "application/json"},
    )

    assert answer.status_code == 422
    detail = answer.json()["detail"]
    assert detail.startswith("the request body is not JSON (")
    assert "at character 17" in detail
    assert detail.endswith(': send a JSON object, such as -d \'{"name": "gpu-1"}\'')


async def test_a_body_over_the_limit_sent_without_a_json_type_is_still_413(fleet: Fleet) -> None:
    async def chunks():  # no Content-Length: the limit bites while reading
        yield b'{"command": ["true"], "blob": "'
        for _ in range(6):
            yield b"x" * (1024 * 1024)
        yield b'"}'

    answer = await fleet.admin.put(
        "/api/configs/huge",
        content=chunks(),
        headers={"Content-Type": "application/x-www-form-urlencoded"},
    )

    assert answer.status_code == 413
    assert "too large" in answer.json()["detail"]
    assert (await fleet.admin.get("/api/configs/huge")).status_code == 404


async def test_an_empty_body_still_means_no_body_where_one_is_optional(fleet: Fleet) -> None:
    worker = await fleet.online_worker("gpu-1")

    answer = await fleet.http.post(
        "/api/workers/disconnect",
        content=b"",
        headers={**worker.headers, "Content-Type": "application/x-www-form-urlencoded"},
    )

    assert answer.status_code == 200, answer.text
    assert (await worker.info())["status"] == "offline"


async def test_the_web_sign_in_still_takes_the_form_a_browser_posts(fleet: Fleet) -> None:
    answer = await fleet.http.post(
        "/ui/session", data={"api_key": fleet.admin_key, "next": "/audit"}
    )

    assert answer.status_code == 303
    assert answer.headers["location"] == "/audit"


async def test_the_web_sign_in_reads_json_sent_with_curls_default_type(fleet: Fleet) -> None:
    answer = await fleet.http.post(
        "/ui/session",
        content=f'{{"api_key": "{fleet.admin_key}"}}'.encode(),
        headers={"Content-Type": "application/x-www-form-urlencoded"},
    )

    assert answer.status_code == 200, answer.text
    assert answer.json() == {"ok": True, "next": "/"}
