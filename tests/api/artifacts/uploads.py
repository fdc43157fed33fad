"""A worker's side of the artifact store, as docs/artifacts.md has it: what the tests of
this folder do over the worker API, and the orchestrator they do it to (on the data folder,
or on moto's S3 server started by `conftest.s3_endpoint`)."""

from __future__ import annotations

import hashlib
import re
import secrets
from pathlib import Path
from typing import Any

import httpx
import pytest

from gpufleet.artifacts.keys import job_prefix
from tests.api.conftest import Agent, Fleet

MiB = 1024 * 1024


def new_bucket(endpoint: str, monkeypatch: pytest.MonkeyPatch) -> str:
    """A new bucket, and the AWS_* variables the orchestrator reads it with."""
    bucket = f"fleet-{secrets.token_hex(4)}"
    httpx.put(f"{endpoint}/{bucket}").raise_for_status()
    for name, value in {
        "AWS_ENDPOINT_URL": endpoint,
        "AWS_ACCESS_KEY_ID": "test",
        "AWS_SECRET_ACCESS_KEY": "test",
        "AWS_REGION": "us-east-1",
    }.items():
        monkeypatch.setenv(name, value)
    return f"s3://{bucket}/gpufleet"


async def start_fleet(tmp_path: Path, database_url: str, **settings: Any) -> Fleet:
    fleet = Fleet(tmp_path, database_url)
    fleet.settings = fleet.settings.model_copy(update=settings)
    return await fleet.start()


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


async def announce(
    agent: Agent, job_id: str, attempt_id: str, path: str, data: bytes, **more: Any
) -> httpx.Response:
    body = {"attempt_id": attempt_id, "path": path, "size": len(data), "sha256": sha(data)}
    return await agent.fleet.http.post(
        f"/api/workers/job/{job_id}/upload", json={**body, **more}, headers=agent.headers
    )


async def send(agent: Agent, job_id: str, plan: dict[str, Any], data: bytes) -> httpx.Response:
    """The bytes to where the announce said, and (object storage) the finish."""
    if plan["via"] == "orchestrator":
        assert plan["url"] == f"/api/workers/job/{job_id}/upload/{plan['upload_id']}"
        headers = {**agent.headers, **plan["headers"]}
        return await agent.fleet.http.put(plan["url"], content=data, headers=headers)
    async with httpx.AsyncClient() as bucket:  # straight to the bucket, over a real socket
        put = await bucket.put(plan["url"], content=data, headers=plan["headers"])
    assert put.status_code == 200, put.text
    return await agent.fleet.http.post(
        f"/api/workers/job/{job_id}/upload/{plan['upload_id']}/complete", headers=agent.headers
    )


async def upload(
    agent: Agent, job_id: str, attempt_id: str, path: str, data: bytes, **more: Any
) -> dict[str, Any]:
    said = await announce(agent, job_id, attempt_id, path, data, **more)
    assert said.status_code == 200, said.text
    sent = await send(agent, job_id, said.json(), data)
    assert sent.status_code == 201, sent.text
    record: dict[str, Any] = sent.json()
    return record


async def upload_checkpoint(
    agent: Agent, offer: dict[str, Any], step: int, files: dict[str, bytes]
) -> httpx.Response:
    name = f"checkpoint-{step}"
    folder = f"output/{name}"
    listed = []
    for rel, data in files.items():
        path = f"{folder}/{rel}"
        await upload(
            agent,
            offer["job_id"],
            offer["attempt_id"],
            path,
            data,
            kind="checkpoint",
            checkpoint=name,
        )
        listed.append({"path": path, "size": len(data), "sha256": sha(data)})
    return await commit(agent, offer, name, folder, step, listed)


async def commit(
    agent: Agent, offer: dict[str, Any], name: str, folder: str, step: int | None, files: list[Any]
) -> httpx.Response:
    body = {"attempt_id": offer["attempt_id"], "name": name, "path": folder, "step": step}
    return await agent.fleet.http.post(
        f"/api/workers/job/{offer['job_id']}/checkpoints",
        json={**body, "files": files},
        headers=agent.headers,
    )


async def listed(fleet: Fleet, job_id: str) -> list[tuple[int | None, str, str]]:
    async with fleet.ctx.store.read() as q:
        return [(a.attempt_number, a.path, a.sha256) for a in await q.artifacts_for_job(job_id)]


async def stored_keys(fleet: Fleet, job_id: str) -> list[str]:
    return [info.key for info in await fleet.ctx.artifacts.list(job_prefix(job_id))]


async def read_back(fleet: Fleet, key: str) -> bytes:
    return b"".join([chunk async for chunk in await fleet.ctx.artifacts.open(key)])


async def running_job(fleet: Fleet, agent: Agent, **submit: Any) -> dict[str, Any]:
    await fleet.submit(**submit)
    offer = await agent.next_offer()
    await agent.run(offer)
    return offer


def metric(text: str, sample: str) -> float:
    found = re.search(rf"^{re.escape(sample)} ([0-9.e+-]+)$", text, re.MULTILINE)
    assert found, f"{sample} not in the metrics"
    return float(found.group(1))
